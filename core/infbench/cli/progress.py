"""What ``infbench run`` shows while it measures, and after its first run.

* :class:`SweepProgress`: the run's observer on the terminal (it consumes the typed events
  of :mod:`infbench.executors.events`): one progress bar over the whole sweep with its
  elapsed time and an ETA, and one line per finished cell (its headline figures, or its
  error), plus notes, lost nodes and, with ``-v``, the workers' log lines.
* :func:`first_run_note`: after the first run stored in a results database, where the
  results went and the three commands that look at them (``results``, ``report``,
  ``compare``), each as it works on this install.

The ETA weighs cells by their expected cost, not their count: a cell of batch 8 and 512
prompt tokens takes about ten times one of batch 1 and 128 tokens. :func:`cell_weight`
gives the relative cost; the seconds per unit of weight are measured as the sweep goes
(the time since the first cell started, model loads included, over the weight finished),
so the ETA is the weight still to run times that rate, counted down between events.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from infbench.cli.common import print_side_event
from infbench.data import metrics as M
from infbench.executors import events as ev
from infbench.secrets import printable

if TYPE_CHECKING:
    from infbench.store import Store


#: Relative costs of :func:`cell_weight`, in units of a decode step's fixed cost: a prompt
#: token (prefill) and each sequence of a batched decode step. Fitted to the quick sweep's six
#: cells on llama.cpp (2 CPU cores: E2E = 8.2 ms x output_len + 1.9 ms x batch x input_len
#: + 4.0 ms x batch x output_len, within 15 % of each cell); only their ratios matter, and a
#: wrong ratio only slows the ETA's convergence, since the rate itself is measured.
PREFILL_TOKEN_COST = 0.24
BATCH_SEQUENCE_COST = 0.49


def cell_weight(cell: Any) -> float:
    """The expected cost of measuring ``cell`` (a :class:`~infbench.schema.Cell`), in units of
    a decode step's fixed cost: ``output_len x (1 + 0.49 x batch) + 0.24 x batch x input_len``
    for the timed pass, plus its warm-up passes (full prompt, 2 output tokens each). A
    serving-mode cell counts its requests (``num_requests``, else 64) in rounds of its
    concurrency (``batch``, ``concurrency``, else 16)."""
    load = getattr(cell, "load", None)
    if load is None or load.mode == "batch":
        n, par = cell.batch, cell.batch
    else:
        n = load.num_requests or 64
        par = max(1, min(n, load.concurrency or 16))
    rounds = max(1.0, n / par)

    def one(out_len: int) -> float:
        return rounds * (out_len * (1 + BATCH_SEQUENCE_COST * par) + PREFILL_TOKEN_COST * par * cell.input_len)

    return one(cell.output_len) + (cell.warmup or 0) * one(2)


def fmt_duration(s: float) -> str:
    """``1:05`` (m:ss) or ``1:02:05`` (h:mm:ss) for ``s`` seconds."""
    s = max(0, int(round(s)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class EtaColumn(ProgressColumn):
    """``ETA 1:05``, counting down from the task's ``eta_at`` field (a ``time.monotonic()``
    instant) between events; ``ETA ...`` until the first cell finished."""

    def render(self, task: Any) -> Text:
        """The column's text for ``task``."""
        at = task.fields.get("eta_at")
        if task.finished:
            return Text("done", style="progress.remaining")
        if at is None:
            return Text("ETA ...", style="progress.remaining")
        return Text(f"ETA {fmt_duration(at - time.monotonic())}", style="progress.remaining")


class SweepProgress:
    """The run's observer on the terminal: one bar over the whole sweep, one line per cell.

    Use as a context manager around the executor's run, and pass it as the observer::

        with SweepProgress(plan.cells, err) as observer:
            summary = executor.run(plan, store, options, observer)

    Args:
        cells: every planned cell (of all plans), in any order.
        console: where the bar and the lines go (stderr: stdout keeps ``--json``).
        disable: no bar and no lines (``--json``).
        clock: ``time.monotonic`` (tests pass their own).

    The bar advances by each cell's :func:`cell_weight` when it finishes or is skipped;
    beside it, the cells done of all. Each finished cell prints ``ok``/``failed``, its label, E2E p50,
    TTFT p50, output tok/s and the time the harness spent on it (or the error).
    """

    def __init__(self, cells: list[Any], console: Console, disable: bool = False, clock: Any = time.monotonic):
        self.clock, self.disabled = clock, disable
        self.weights = {id(c): cell_weight(c) for c in cells}
        self.total = sum(self.weights.values()) or 1.0
        self.n = len(cells)
        self.done_weight = 0.0      # finished by measuring (the ETA's rate)
        self.skipped_weight = 0.0   # skipped: already stored, no time spent
        self.count = 0
        self.started: float | None = None
        self.progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                                 TextColumn(f"{{task.fields[cells]}}/{self.n} cells"), TimeElapsedColumn(),
                                 EtaColumn(), console=console, disable=disable)
        self.task = self.progress.add_task("starting", total=self.total, eta_at=None, cells=0)
        self._by_key = {self._key(c): w for c, w in zip(cells, self.weights.values())}

    @staticmethod
    def _key(cell: Any) -> str:
        try:
            return cell.spec_hash()
        except Exception:  # noqa: BLE001 - a cell without a spec hash is weighed by its label
            return str(cell)

    def weight(self, cell: Any) -> float:
        """The planned weight of ``cell`` (matched by spec hash; computed when not planned)."""
        return self._by_key.get(self._key(cell)) or cell_weight(cell)

    def eta_s(self) -> float | None:
        """Seconds left: the weight not yet finished x the measured seconds per weight, or
        None before the first measured cell finished."""
        if self.started is None or self.done_weight <= 0:
            return None
        rate = (self.clock() - self.started) / self.done_weight
        return max(0.0, (self.total - self.done_weight - self.skipped_weight) * rate)

    def __enter__(self) -> SweepProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def _advance(self, cell: Any, measured: bool) -> None:
        w = self.weight(cell)
        if measured:
            self.done_weight += w
        else:
            self.skipped_weight += w
        self.count += 1
        eta = self.eta_s()
        self.progress.update(self.task, advance=w, cells=self.count,
                             eta_at=None if eta is None else self.clock() + eta)
        if self.count >= self.n:
            self.progress.update(self.task, description="the sweep", completed=self.total)

    def __call__(self, event: Any) -> None:
        """Consume one run event (never raises: an observer must not stop a sweep)."""
        try:
            self._on(event)
        except Exception as exc:  # noqa: BLE001
            logging.getLogger("infbench.progress").debug("progress display failed: %s", exc)

    def _on(self, event: Any) -> None:
        if self.disabled:
            return
        p = self.progress
        where = f" on {event.node}" if getattr(event, "node", None) else ""
        if isinstance(event, (ev.GroupLoading, ev.CellStarted)) and self.started is None:
            self.started = self.clock()
        if isinstance(event, ev.GroupLoading):
            p.update(self.task, description=f"loading {escape(event.group.label())}{where}")
        elif isinstance(event, ev.CellStarted):
            p.update(self.task, description=f"[{self.count + 1}/{self.n}] {escape(event.cell.label())}{where}")
        elif isinstance(event, ev.CellSkipped):
            self._advance(event.cell, measured=False)
            why = event.reason or "already stored ok (--force measures it again)"
            p.console.print(f"[dim]skipped[/] {escape(printable(event.cell.label()))}: {escape(printable(why))}")
        elif isinstance(event, ev.CellFinished):
            r = event.result
            self._advance(r.cell, measured=True)
            p.console.print(cell_line(r, self.count, self.n) + where)
        else:
            print_side_event(p.console, event)


def cell_line(r: Any, i: int, n: int) -> str:
    """One finished cell as a rich-markup line: ``[3/6] ok smollm2-135m llama.cpp f16 b4 i128 o64:
    E2E p50 2.54 s, TTFT p50 803 ms, 100.7 out tok/s (5.1 s)``, or its error."""
    label = escape(printable(r.cell.label()))
    if r.status != "ok":
        return f"[{i}/{n}] [red]failed[/] {label}: {escape(printable(r.error or '?'))}"
    m = r.metrics or {}
    parts = []
    e2e = (m.get(M.E2E.key) or {}).get("p50")
    ttft = (m.get(M.TTFT.key) or {}).get("p50")
    if e2e is not None:
        parts.append(f"E2E p50 {e2e:.2f} s")
    if ttft is not None:
        parts.append(f"TTFT p50 {ttft * 1e3:,.0f} ms")
    if m.get(M.OUTPUT_TOK_S.key) is not None:
        parts.append(f"{m['output_tok_s']:,.1f} out tok/s")
    took = f" ({r.wall_s:.1f} s)" if r.wall_s is not None else ""
    return f"[{i}/{n}] [green]ok[/] {label}: {', '.join(parts)}{took}"


def first_run_note(store: Store, summary: Any, console: Console, as_json: bool = False) -> bool:
    """After the first run stored in ``store``: where the results went and the three commands
    that look at them, as they work on this install (``infbench report`` names the ``report``
    extra when plotly/matplotlib are missing). Printed on ``console`` (stderr) unless
    ``as_json``; nothing when the store holds other runs or the run stored no cell.

    Returns:
        True when the note was printed.
    """
    if as_json:
        return False
    try:
        runs = store.runs()
    except Exception:  # noqa: BLE001 - a note must not fail a finished run
        return False
    if len(runs) != 1 or not (summary.ok or summary.failed):
        return False
    run = summary.run_id
    store_opt = "" if _is_default_store(store.path) else f" --store {store.path}"
    report_ready = all(importlib.util.find_spec(m) is not None for m in ("plotly", "matplotlib"))
    ran = {getattr(getattr(r, "cell", None), "engine", None) for r in [*summary.ok, *summary.failed]}
    prebuilt = "llama.cpp-server" in ran and importlib.util.find_spec("llama_cpp") is None
    later = "e.g. after installing the compiled llama.cpp" if prebuilt else "e.g. another engine, image or machine"
    commands = [
        (f"infbench results{store_opt}", "the table; --format json: every metric with its percentiles"),
        (f"infbench report{store_opt} --out infbench-report", "an interactive HTML page and PNG/SVG figures"
         + ("" if report_ready else " (first: pip install 'infbench[report]', for plotly and matplotlib)")),
        (f"infbench compare{store_opt} {run} RUN", f"cell-by-cell ratios against a later run ({later})"),
    ]
    width = max(len(c) for c, _ in commands)
    console.print(f"[bold]first run stored:[/] {len(summary.ok)} cell(s) of run {run} in {escape(str(store.path))} "
                  "(an SQLite file: every cell with its per-request timings, and the run's provenance). Look at them "
                  "with:", highlight=False)
    for c, what in commands:
        console.print(f"  {escape(c.ljust(width))}   # {escape(what)}", highlight=False, soft_wrap=True)
    return True


def _is_default_store(path: Any) -> bool:
    from pathlib import Path

    from infbench.store import default_store_path

    try:
        return Path(path).resolve() == default_store_path().resolve()
    except OSError:
        return False
