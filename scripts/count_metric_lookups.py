"""Count the core's string lookups of stored metrics (issue 40, item 5: "the core has 0 dict
lookups of stored metrics").

A stored cell is a typed :class:`infbench.data.stored.StoredCell`; a metric is read through the
metric table (``M.TTFT.value(cell.metrics, "p50")``, ``col.flat(cell.metrics)``) and a
non-metric field through ``cell.field("suspect")``. What counts, in ``core/infbench``:

* ``x["metrics"]`` and ``x.get("metrics")``: a cell's metrics reached as a dict key;
* ``x.metrics["k"]`` and ``x.metrics.get("k")`` with a constant key: a cell's metrics read by
  string;
* ``m["k"]`` and ``m.get("k")`` where ``m`` (or ``metrics``) is a name and ``k`` is a stored
  metric's key (:data:`infbench.data.metrics.METRICS`) or field (``FIELDS``).

A line that reads a dict of another kind with the same words (a foreign file's ``metrics``
object, a producer building the metrics it is about to store) says so at its end with
``# metrics-dict: <why>`` and is listed apart, not counted.

Usage::

    python scripts/count_metric_lookups.py            # total, then per file (most first)
    python scripts/count_metric_lookups.py --list     # every lookup: path:line, the line
    python scripts/count_metric_lookups.py --max 0    # exit 1 when the total exceeds 0

Exit status 0, or 1 when ``--max N`` is given and the total exceeds N.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))

from infbench.data.metrics import FIELDS, METRICS  # noqa: E402  (the core on sys.path first)

#: Names a metrics dict goes by in the core.
METRIC_NAMES = ("m", "metrics")
#: The marker of a line that reads another kind of dict.
MARKER = "# metrics-dict:"
KEYS = set(METRICS) | set(FIELDS)


def _key(node: ast.AST) -> tuple[ast.AST, str] | None:
    """(the object, the constant key) of a load ``obj["k"]`` or a call ``obj.get("k", ...)``."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            return node.value, node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            return node.func.value, node.args[0].value
    return None


def _counts(obj: ast.AST, key: str) -> bool:
    """Whether a lookup of ``key`` on ``obj`` is a string lookup of stored metrics."""
    if key == "metrics":
        return True
    if isinstance(obj, ast.Attribute) and obj.attr == "metrics":
        return True
    return isinstance(obj, ast.Name) and obj.id in METRIC_NAMES and key in KEYS


def lookups(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """Return the counted lookups and the marked ones of ``path``: (line, line text) each."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    counted: list[tuple[int, str]] = []
    marked: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        hit = _key(node)
        if hit is None or not _counts(*hit):
            continue
        text = lines[node.lineno - 1].strip()
        end = lines[(getattr(node, "end_lineno", None) or node.lineno) - 1]
        (marked if MARKER in text or MARKER in end else counted).append((node.lineno, text))
    return sorted(set(counted)), sorted(set(marked))


def main(argv: list[str] | None = None) -> int:
    """Print the total and the per-file counts (or every lookup with --list)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=[str(ROOT / "core" / "infbench")])
    parser.add_argument("--list", action="store_true", help="print every lookup with its line")
    parser.add_argument("--max", type=int, default=None, help="exit 1 when the total exceeds this")
    args = parser.parse_args(argv)
    per_file: dict[Path, list[tuple[int, str]]] = {}
    n_marked = 0
    for root in map(Path, args.roots):
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            counted, marked = lookups(path)
            n_marked += len(marked)
            if counted:
                per_file[path] = counted
    total = sum(len(v) for v in per_file.values())
    print(f"string lookups of stored metrics: {total} ({n_marked} lines marked '{MARKER}' read other dicts)")
    for path, hits in sorted(per_file.items(), key=lambda item: (-len(item[1]), str(item[0]))):
        if args.list:
            for line, text in hits:
                print(f"{path}:{line}: {text}")
        else:
            print(f"{len(hits):4d}  {path}")
    if args.max is not None and total > args.max:
        print(f"more than {args.max}: read stored metrics through infbench.data.metrics and StoredCell "
              f"(docs/architecture.md)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
