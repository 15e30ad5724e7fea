"""Count the deferred imports of infbench's own modules: imports inside a function body.

An ``import infbench...``, ``from infbench... import ...`` or relative ``from . import ...``
statement counts once wherever it sits inside a function (or a method, a nested function, a
lambda's enclosing function); module-level and class-level imports, and ``if TYPE_CHECKING:``
blocks at module level, do not count. Third-party imports (torch, vllm, ...) never count: they
stay deferred on purpose (pyproject's ruff PLC0415 allow-list says which).

Usage::

    python scripts/count_deferred_imports.py [ROOT ...]          # total, then per file (most first)
    python scripts/count_deferred_imports.py --list [ROOT ...]   # every import: path:line, the statement
    python scripts/count_deferred_imports.py --max 50            # exit 1 when the total exceeds 50

ROOT defaults to ``core/infbench`` (relative to the repository root). Exit status 0, or 1 when
``--max N`` is given and the total exceeds N.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

FIRST_PARTY = ("infbench",)


def _is_own(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether an import statement imports infbench's own modules (absolute or relative)."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return True
        names = [node.module or ""]
    else:
        names = [alias.name for alias in node.names]
    return any(name.split(".")[0] in FIRST_PARTY for name in names)


def deferred_imports(path: Path) -> list[tuple[int, str]]:
    """Return (line, source text) of each own-module import inside a function body of ``path``.

    Each statement counts once, however deeply its function nests.
    """
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                if in_function and _is_own(child):
                    found.append((child.lineno, ast.get_source_segment(source, child) or ""))
                continue
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, inner)

    visit(tree, False)
    return found


def main(argv: list[str] | None = None) -> int:
    """Print the total and the per-file counts (or every import with --list)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=[str(Path(__file__).resolve().parent.parent / "core" / "infbench")])
    parser.add_argument("--list", action="store_true", help="print every deferred import with its line")
    parser.add_argument("--max", type=int, default=None, help="exit 1 when the total exceeds this")
    args = parser.parse_args(argv)
    per_file: dict[Path, list[tuple[int, str]]] = {}
    for root in map(Path, args.roots):
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            hits = deferred_imports(path)
            if hits:
                per_file[path] = hits
    total = sum(len(hits) for hits in per_file.values())
    print(f"deferred imports of infbench's own modules: {total}")
    for path, hits in sorted(per_file.items(), key=lambda item: (-len(item[1]), str(item[0]))):
        if args.list:
            for line, text in hits:
                print(f"{path}:{line}: {' '.join(text.split())}")
        else:
            print(f"{len(hits):5d}  {path}")
    if args.max is not None and total > args.max:
        print(f"more than {args.max}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
