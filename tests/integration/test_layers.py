"""The layers of the core package, as CI checks them (scripts/test.sh runs `lint-imports` and
`mypy` before the tests): the contracts hold on this tree, and they catch what they are for
in a scratch copy: an upward import deferred into a function, an import cycle between two
packages, an untyped function in the strict data layer. Also the cycle rule import-linter
does not state: no import cycle of modules spans two packages or is longer than three
modules, deferred and TYPE_CHECKING imports counted.

Marked integration: each check runs the real tools over the whole core (tens of seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str, cwd: Path, pythonpath: Path | str) -> subprocess.CompletedProcess:
    """Run ``lint-imports`` or ``mypy`` in ``cwd`` (its pyproject.toml) on the package found at ``pythonpath``."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    cmd = [shutil.which("lint-imports") or "lint-imports"] if name == "lint-imports" else [sys.executable, "-m", "mypy"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture
def scratch(tmp_path):
    """A copy of the core package and the project's tool configuration."""
    shutil.copytree(ROOT / "core", tmp_path / "core", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _code(root: Path) -> str:
    """PYTHONPATH for the core and the six plugins under ``root`` (not the installed copies)."""
    return os.pathsep.join([str(root / "core"), *(str(d) for d in sorted((root / "plugins").iterdir()) if d.is_dir())])


def test_the_layer_contracts_hold():
    p = _tool("lint-imports", ROOT, _code(ROOT))
    assert p.returncode == 0, p.stdout[-3000:]
    assert "0 broken" in p.stdout and "KEPT" in p.stdout


def test_an_upward_import_deferred_into_a_function_breaks_them(scratch):
    f = scratch / "core/infbench/data/version.py"
    f.write_text(f.read_text() + "\n\ndef _sneaky():\n    from infbench.cli import main\n\n    return main\n")
    p = _tool("lint-imports", scratch, scratch / "core")
    assert p.returncode != 0
    assert "infbench.data is not allowed to import infbench.cli" in p.stdout, p.stdout[-3000:]


def test_a_cycle_between_two_packages_of_one_layer_breaks_them(scratch):
    f = scratch / "core/infbench/analysis/repeats.py"          # plan imports analysis.repeats (same layer)...
    f.write_text(f.read_text() + "\n\ndef _back():\n    from infbench.plan import PRESETS\n\n"
                 "    return PRESETS\n")                        # ...and analysis imports plan back
    p = _tool("lint-imports", scratch, scratch / "core")
    assert p.returncode != 0 and "BROKEN" in p.stdout, p.stdout[-3000:]


def test_a_plugin_importing_past_the_public_api_breaks_them(scratch):
    """A vendor plugin imports infbench.plugin only: a scratch copy of the AMD plugin that
    reaches into infbench.engines.vllm_engine fails the contract, named with the line."""
    shutil.copytree(ROOT / "plugins", scratch / "plugins", ignore=shutil.ignore_patterns("__pycache__", "tests"))
    path = _code(scratch)
    assert _tool("lint-imports", scratch, path).returncode == 0
    f = scratch / "plugins/amd/infbench_amd/hooks.py"
    f.write_text(f.read_text() + "\n\ndef _sneaky():\n    from infbench.engines.vllm_engine import VLLM_DTYPES\n\n"
                 "    return VLLM_DTYPES\n")
    p = _tool("lint-imports", scratch, path)
    assert p.returncode != 0 and "plugins import only infbench.plugin BROKEN" in " ".join(p.stdout.split()), \
        p.stdout[-3000:]
    assert "infbench_amd.hooks -> infbench.engines.vllm_engine" in p.stdout


def test_mypy_is_clean_and_strict_on_the_data_layer(scratch):
    p = _tool("mypy", ROOT, ROOT / "core")
    assert p.returncode == 0, p.stdout[-3000:]
    # The copy starts from the cache of the run above (copytree keeps mtimes, mypy's cache paths
    # are relative): mypy re-checks the changed module and what depends on it, 4 s instead of 45.
    shutil.copytree(ROOT / ".mypy_cache", scratch / ".mypy_cache")
    f = scratch / "core/infbench/data/paths.py"
    f.write_text(f.read_text() + "\n\ndef untyped(x):\n    return x\n")
    q = _tool("mypy", scratch, scratch / "core")
    assert q.returncode != 0 and "untyped" in q.stdout and "no-untyped-def" in q.stdout, q.stdout[-3000:]


def test_no_module_cycle_spans_two_packages_or_exceeds_three_modules():
    import grimp

    graph = grimp.build_graph("infbench", include_external_packages=False, exclude_type_checking_imports=False)
    mods = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for m in mods:
        if m not in index:
            strong(m)

    def package(m: str) -> str:
        return ".".join(m.split(".")[:2])          # infbench.<top-level module or package>

    wide = [c for c in sccs if len({package(m) for m in c if m != "infbench"}) > 1 or "infbench" in c]
    long = [c for c in sccs if len(c) > 3]
    assert not wide and not long, (wide, long)
