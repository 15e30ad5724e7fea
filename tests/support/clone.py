"""A copy of the repository as a fresh clone has it, for the clean-machine check
(tests/integration/test_first_result.py) and its benchmark (benchmarks/first_result.py).

What a clone holds is what git tracks, plus files not yet committed that git does not ignore
(work in progress the check should see): ``git ls-files --cached --others --exclude-standard``.
Everything git ignores stays behind: build outputs, caches, local wheelhouses and the engine
venvs of scripts/engine_venvs.sh (``.venvs/``, about 5 GB, whose copy was most of the check's
set-up: 73 s of its 167 s on one core of this machine). Without git, or outside a work tree, the
copy leaves out :data:`JUNK` instead.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: What a fresh clone does not have, when git cannot say (build outputs, caches, local
#: wheelhouses, venvs), as :func:`shutil.ignore_patterns` patterns.
JUNK = (".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache",
        ".hypothesis", ".grimp_cache", ".import_linter_cache", ".venv", ".venvs", "artifacts", "*.whl")


def clone_files(root: Path) -> list[str] | None:
    """The paths, relative to ``root``, that a clone of ``root`` plus its uncommitted, not
    ignored files holds; ``None`` when git is missing or ``root`` is not a git work tree."""
    try:
        p = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return [f for f in p.stdout.decode().split("\0") if f]


def clone_like_copy(root: Path, dest: Path) -> int:
    """Copy ``root`` to ``dest`` (which must not exist) as a fresh clone has it (module doc):
    the files :func:`clone_files` names, symbolic links kept as links, files listed by git but
    deleted from the work tree skipped; without git, the tree minus :data:`JUNK`. Returns the
    number of files copied (0 for the fallback's whole-tree copy).

    Raises FileExistsError if ``dest`` exists."""
    files = clone_files(root)
    if files is None:
        shutil.copytree(root, dest, symlinks=True, ignore=shutil.ignore_patterns(*JUNK))
        return 0
    dest.mkdir(parents=True)
    n = 0
    for rel in files:
        src = root / rel
        if not (src.exists() or src.is_symlink()):
            continue                                # deleted in the work tree, not yet committed
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
        n += 1
    return n
