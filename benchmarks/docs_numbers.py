"""Every figure in docs/*.md and README.md, rendered from the committed JSON that a named
command wrote (``benchmarks/NAME.py --out benchmarks/results/NAME.json``).

A figure-bearing part of a document (a table, a captured terminal block, a paragraph that
quotes measured numbers) sits between two markers::

    <!-- numbers: NAME[:VARIANT] -->
    ...rendered text...
    <!-- /numbers -->

``NAME`` is a benchmark script ``benchmarks/NAME.py`` that writes
``benchmarks/results/NAME.json`` and defines ``render(data: dict, variant: str | None = None)
-> str`` returning markdown; ``VARIANT`` picks one of several parts it renders (a second
table, a paragraph). ``render`` must only format (no measuring, no heavy imports at call
time): the check runs in the unit tests.

    python benchmarks/docs_numbers.py            # rewrite every marked region from its JSON
    python benchmarks/docs_numbers.py --check    # exit 1 naming each region that differs,
                                                 # and each table of figures outside markers

The check also looks for figures that escaped the markers: a markdown table with a cell
that is only a number (``| 0.38 |``, ``| **92 ms** |``, ``| 1,319 |``), or a fenced block
showing a terminal session (``$ command`` lines) whose output holds digits, outside every
region. Figures in running prose are not detected: keep them inside regions too. A table of numbers
that are not measurements (a worked example, a configuration) is marked with
``<!-- numbers: none (why) -->`` on the line before it.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"

OPEN = re.compile(r"^<!-- numbers: ([A-Za-z0-9_]+)(?::([A-Za-z0-9_.-]+))? -->\s*$")
CLOSE = re.compile(r"^<!-- /numbers -->\s*$")
NONE = re.compile(r"^<!-- numbers: none \(.+\) -->\s*$")
#: A table cell holding only a figure: a number (thousands separators, decimals, sign, ~, x
#: suffix), optionally bold, optionally with a unit.
FIGURE_CELL = re.compile(r"^\**[~+-]?\d[\d,]*(\.\d+)?\s*(%|ms|s|us|x|GB/s|GiB|MiB|KiB|W|J|req/s|tok/s)?\**$")


class DocsNumbersError(Exception):
    """A marker names a script or JSON that does not exist, or a region is malformed."""


@dataclass
class Region:
    """One marked region of a document.

    Attributes:
        path: the document.
        line: 1-based line of the opening marker.
        name: the benchmark (``benchmarks/NAME.py``, ``benchmarks/results/NAME.json``).
        variant: the part of its output (None: the default).
        start, end: 0-based indices of the first body line and of the closing marker.
    """

    path: Path
    line: int
    name: str
    variant: str | None
    start: int
    end: int

    @property
    def label(self) -> str:
        """``docs/x.md:12 NAME[:VARIANT]``."""
        rel = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{rel}:{self.line} {self.name}{':' + self.variant if self.variant else ''}"


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md under ``root``."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.exists()]


def regions(path: Path, lines: list[str]) -> list[Region]:
    """The marked regions of one document.

    Raises:
        DocsNumbersError: a region opened inside another, or never closed, or a close without an open.
    """
    out: list[Region] = []
    cur: tuple[int, str, str | None] | None = None
    for i, line in enumerate(lines):
        m = OPEN.match(line)
        if m:
            if cur is not None:
                raise DocsNumbersError(f"{path}:{i + 1}: numbers region opened inside the one at line {cur[0] + 1}")
            cur = (i, m.group(1), m.group(2))
        elif CLOSE.match(line):
            if cur is None:
                raise DocsNumbersError(f"{path}:{i + 1}: '<!-- /numbers -->' without an opening marker")
            out.append(Region(path, cur[0] + 1, cur[1], cur[2], cur[0] + 1, i))
            cur = None
    if cur is not None:
        raise DocsNumbersError(f"{path}:{cur[0] + 1}: numbers region {cur[1]} is never closed ('<!-- /numbers -->')")
    return out


_modules: dict[str, ModuleType] = {}


def renderer(name: str, bench: Path = BENCH) -> Callable[[dict, str | None], str]:
    """``render`` of ``benchmarks/NAME.py`` (imported from its file once).

    Raises:
        DocsNumbersError: no such script, or it defines no ``render``.
    """
    key = str(bench / name)
    if key not in _modules:
        path = bench / f"{name}.py"
        if not path.exists():
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            raise DocsNumbersError(f"no benchmark script {shown}")
        spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        sys.modules[spec.name] = mod  # dataclasses and pickling look their module up
        spec.loader.exec_module(mod)
        _modules[key] = mod
    fn = getattr(_modules[key], "render", None)
    if fn is None:
        raise DocsNumbersError(f"benchmarks/{name}.py defines no render(data, variant=None)")
    return fn


def render_region(r: Region, bench: Path = BENCH, results: Path = RESULTS) -> list[str]:
    """The lines a region should hold, from ``results/NAME.json``.

    Raises:
        DocsNumbersError: the JSON is missing or unreadable, or render fails.
    """
    js = results / f"{r.name}.json"
    if not js.exists():
        raise DocsNumbersError(f"{r.label}: {js.relative_to(ROOT) if js.is_relative_to(ROOT) else js} is missing "
                               f"(write it: python benchmarks/{r.name}.py --out {js.name})")
    try:
        data = json.loads(js.read_text())
        text = renderer(r.name, bench)(data, r.variant)
    except DocsNumbersError:
        raise
    except Exception as exc:  # noqa: BLE001 - named with the region
        raise DocsNumbersError(f"{r.label}: render failed: {type(exc).__name__}: {exc}") from exc
    return text.strip("\n").split("\n")


def unmarked_figures(path: Path, lines: list[str], regs: list[Region]) -> list[str]:
    """Tables with a figure-only cell and fenced ``$ python benchmarks/...`` blocks outside
    every region (and not preceded by a ``numbers: none`` marker), as ``path:line what``."""
    inside = set()
    for r in regs:
        inside.update(range(r.start - 1, r.end + 1))
    out = []
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    i, fence = 0, False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            if not fence and i not in inside:
                j = i + 1
                while j < len(lines) and not lines[j].lstrip().startswith("```"):
                    j += 1
                body = lines[i + 1:j]
                if _captured_output(body) and not _exempt(lines, i):
                    out.append(f"{rel}:{i + 1} captured output with figures outside numbers markers")
                i = j + 1
                continue
        if line.startswith("|") and i not in inside:
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            cells = [c.strip() for row in lines[i:j] for c in row.strip().strip("|").split("|")]
            if any(FIGURE_CELL.match(c) for c in cells) and not _exempt(lines, i):
                out.append(f"{rel}:{i + 1} table of figures outside numbers markers")
            i = j
            continue
        i += 1
    return out


def _captured_output(body: list[str]) -> bool:
    """A fenced block showing a terminal session (a ``$ `` prompt line) whose output (the lines
    that are not prompts, continuations or comments) holds a digit."""
    if not any(b.startswith("$ ") for b in body):
        return False
    out, cont = [], False
    for b in body:
        if b.startswith("$ ") or cont:
            cont = b.rstrip().endswith("\\")
            continue
        if b.strip() and not b.lstrip().startswith("#"):
            out.append(b)
    return any(re.search(r"\d", b) for b in out)


def _exempt(lines: list[str], i: int) -> bool:
    k = i - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    return k >= 0 and bool(NONE.match(lines[k]))


def process(paths: list[Path], write: bool, bench: Path = BENCH, results: Path = RESULTS) -> list[str]:
    """Render (``write``) or check every region of ``paths``; the problems found, one line each
    (with ``write``, only the unmarked figures and errors remain)."""
    problems: list[str] = []
    for path in paths:
        lines = path.read_text().split("\n")
        try:
            regs = regions(path, lines)
        except DocsNumbersError as exc:
            problems.append(str(exc))
            continue
        new = list(lines)
        for r in reversed(regs):
            try:
                want = render_region(r, bench, results)
            except DocsNumbersError as exc:
                problems.append(str(exc))
                continue
            have = lines[r.start:r.end]
            if have != want:
                if write:
                    new[r.start:r.end] = want
                else:
                    diff = "\n".join(difflib.unified_diff(have, want, "document", f"render({r.name}.json)",
                                                          lineterm="", n=0))
                    problems.append(f"{r.label} differs from benchmarks/results/{r.name}.json\n{diff}")
        problems += unmarked_figures(path, lines, regs)
        if write and new != lines:
            path.write_text("\n".join(new))
            print(f"rewrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a region differs from its JSON")
    ap.add_argument("files", nargs="*", type=Path, help="documents (default: README.md and docs/*.md)")
    a = ap.parse_args(argv)
    paths = [p.resolve() for p in a.files] or documents()
    problems = process(paths, write=not a.check)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        if a.check:
            print(f"{len(problems)} problem(s); `python benchmarks/docs_numbers.py` rewrites the regions from their "
                  "JSON, a figure outside markers needs a region (or re-running its benchmark)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
