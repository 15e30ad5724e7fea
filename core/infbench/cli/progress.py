"""What ``infbench run`` shows while it measures, and after its first run.

* :class:`SweepProgress`: the run's observer on the terminal (it consumes the typed events
  of :mod:`infbench.data.events`): one progress bar over the whole sweep with its
  elapsed time and an ETA, and one line per finished cell (its headline figures, or its
  error), plus notes, lost nodes and, with ``-v``, the workers' log lines.
* :func:`first_run_note`: after the first run stored in a results database, where the
  results went and the three commands that look at them (``results``, ``report``,
  ``compare``), each as it works on this install.

The ETA weighs cells by their expected cost, not their count: on a CPU a cell of batch 8
and 512 prompt tokens takes about ten times one of batch 1 and 128 tokens, while on an
accelerator a decode step costs nearly the same at batch 1 and 64. :func:`cell_weight`
gives the relative cost of a cell's timed part and of its warm-up on the run's kind of
device. Three phases are timed apart, from the run's events:

* **model load** (:class:`~infbench.data.events.GroupLoading` to the group's first cell):
  shown as ``loading ...``; never part of a rate; each group still to load adds the mean
  load seen so far;
* **warm-up** (:class:`~infbench.data.events.CellStarted` to
  :class:`~infbench.data.events.CellTimed`): shown as ``warm-up``; its own rate;
* **timed part** (:class:`~infbench.data.events.CellTimed` to
  :class:`~infbench.data.events.CellFinished`): the rate of seconds per unit of weight.

No ETA is shown before one measured cell has finished; then the ETA is the timed weight
still to run times the timed rate, plus the warm-up weight times the warm-up rate, plus the
loads, counted down between events. (Where no ``CellTimed`` arrives, the warm-up counts
with its cell.) On the first H100 run the old rate, which divided the time since the start,
a 268 s model load included, by the first cell's weight, printed ``ETA 27:59:08`` for a
sweep that had minutes left (``tests/unit/cli/test_progress.py`` replays it).
"""

from __future__ import annotations

import importlib.util
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from infbench.cli.common import print_side_event
from infbench.data import events as ev
from infbench.data import metrics as M
from infbench.data.paths import default_store_path
from infbench.data.secrets import printable
from infbench.data.warmup import BLOCK_OUTPUT_TOKENS

if TYPE_CHECKING:
    from infbench.store import Store


#: Relative costs of :func:`cell_weight`, in units of a decode step's fixed cost: a prompt
#: token (prefill) and each sequence of a batched decode step. Fitted to the quick sweep's six
#: cells on llama.cpp (2 CPU cores: E2E = 8.2 ms x output_len + 1.9 ms x batch x input_len
#: + 4.0 ms x batch x output_len, within 15 % of each cell); only their ratios matter, and a
#: wrong ratio only slows the ETA's convergence, since the rate itself is measured.
PREFILL_TOKEN_COST = 0.24
BATCH_SEQUENCE_COST = 0.49
#: The same costs on an accelerator, read off the first H100 run (transformers, Llama-3-8B,
#: docs/hardware-runs.md): a decode step took the same time at batch 1, 16 and 64 (TPOT
#: 61-83 ms, bound by the host's per-step work), and the prefill of 64 x 1024 tokens took
#: 1.9 s, about 28 steps, so ~0.0004 step per prompt token. Rounded up; only ratios matter.
ACCEL_PREFILL_TOKEN_COST = 0.0005
ACCEL_BATCH_SEQUENCE_COST = 0.005


def _costs(device_kind: str) -> tuple[float, float]:
    if device_kind == "cpu":
        return PREFILL_TOKEN_COST, BATCH_SEQUENCE_COST
    return ACCEL_PREFILL_TOKEN_COST, ACCEL_BATCH_SEQUENCE_COST


def _pass_weight(cell: Any, out_len: int, device_kind: str) -> float:
    prefill, per_seq = _costs(device_kind)
    load = getattr(cell, "load", None)
    if load is None or load.mode == "batch":
        n, par = cell.batch, cell.batch
    else:
        n = load.num_requests or 64
        par = max(1, min(n, load.concurrency or 16))
    rounds = max(1.0, n / par)
    return rounds * (out_len * (1 + per_seq * par) + prefill * par * cell.input_len)


def timed_weight(cell: Any, device_kind: str = "cpu") -> float:
    """The expected cost of ``cell``'s timed part, in units of a decode step's fixed cost:
    ``output_len x (1 + s x batch) + p x batch x input_len`` with (p, s) = (0.24, 0.49) on a
    CPU and (0.0005, 0.005) on an accelerator (see the constants). A serving-mode cell counts
    its requests (``num_requests``, else 64) in rounds of its concurrency (``batch``,
    ``concurrency``, else 16)."""
    return _pass_weight(cell, cell.output_len, device_kind)


def warmup_weight(cell: Any, device_kind: str = "cpu") -> float:
    """The expected cost of ``cell``'s warm-up blocks (full prompt, the output shortened to
    :data:`~infbench.data.warmup.BLOCK_OUTPUT_TOKENS`), in the units of :func:`timed_weight`:
    ``--warmup N`` blocks, or one for a cell that warms up until stable (most cells carry the
    group's warm state; the first of a group runs three or more, which the warm-up's own
    measured rate then accounts for)."""
    n = 1 if getattr(cell, "warmup", None) is None else cell.warmup
    return n * _pass_weight(cell, min(BLOCK_OUTPUT_TOKENS, cell.output_len), device_kind)


def cell_weight(cell: Any, device_kind: str = "cpu") -> float:
    """The expected cost of measuring ``cell`` (a :class:`~infbench.data.schema.Cell`): its timed part
    plus its warm-up (:func:`timed_weight` + :func:`warmup_weight`)."""
    return timed_weight(cell, device_kind) + warmup_weight(cell, device_kind)


def _group_key(cell: Any) -> tuple[Any, ...]:
    return (cell.model, cell.engine, cell.dtype, getattr(cell, "tensor_parallel_size", 1))


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
        device_kind: the run's kind of device (``cpu``, ``gpu``...), for the cells' weights.

    The bar advances by each cell's :func:`cell_weight` when it finishes or is skipped;
    beside it, the cells done of all. Each finished cell prints ``ok``/``failed``, its label, E2E p50,
    TTFT p50, output tok/s and the time the harness spent on it (or the error).
    """

    def __init__(self, cells: list[Any], console: Console, disable: bool = False, clock: Any = time.monotonic,
                 device_kind: str = "cpu"):
        self.clock, self.disabled, self.kind = clock, disable, device_kind
        self.weights = {id(c): cell_weight(c, device_kind) for c in cells}
        self.total = sum(self.weights.values()) or 1.0
        self.n = len(cells)
        self.done_weight = 0.0      # finished (measured or failed): the bar
        self.skipped_weight = 0.0   # skipped: already stored, no time spent
        self.count = 0
        self.started: float | None = None
        # the ETA's three phases (module doc)
        self.timed_left = sum(timed_weight(c, device_kind) for c in cells)
        self.warm_left = sum(warmup_weight(c, device_kind) for c in cells)
        self.timed_s = self.timed_w = 0.0      # seconds and weight of finished timed parts
        self.warm_s = self.warm_w = 0.0        # ... of finished warm-ups
        self.loads: list[float] = []           # seconds of each model load seen
        self._group_cells: dict[tuple[Any, ...], int] = {}
        for c in cells:
            self._group_cells[_group_key(c)] = self._group_cells.get(_group_key(c), 0) + 1
        self.groups_left = set(self._group_cells)   # groups whose model is still to load
        self._loading_since: float | None = None
        self._cell_since: float | None = None
        self._timed_since: float | None = None
        self._cells_column = TextColumn(f"{{task.fields[cells]}}/{self.n} cells")
        self.progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                                 self._cells_column, TimeElapsedColumn(), EtaColumn(), console=console,
                                 disable=disable)
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
        return self._by_key.get(self._key(cell)) or cell_weight(cell, self.kind)

    def eta_s(self) -> float | None:
        """Seconds left (module doc): timed weight left x the timed rate + warm-up weight left x
        the warm-up rate + the loads left x the mean load; None before the first measured
        cell finished."""
        if self.timed_w <= 0:
            return None
        rate = self.timed_s / self.timed_w
        warm_rate = self.warm_s / self.warm_w if self.warm_w > 0 else rate
        load = sum(self.loads) / len(self.loads) if self.loads else 0.0
        return max(0.0, self.timed_left * rate + self.warm_left * warm_rate + len(self.groups_left) * load)

    def __enter__(self) -> SweepProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def _advance(self, cell: Any, measured: bool) -> None:
        w = self.weight(cell)
        tw, ww = timed_weight(cell, self.kind), warmup_weight(cell, self.kind)
        self.timed_left = max(0.0, self.timed_left - tw)
        self.warm_left = max(0.0, self.warm_left - ww)
        now = self.clock()
        if measured and self._cell_since is not None:
            if self._timed_since is not None:   # the warm-up and the timed part apart
                self.warm_s += self._timed_since - self._cell_since
                self.warm_w += ww
                self.timed_s += now - self._timed_since
                self.timed_w += tw
            else:                                # no CellTimed: the cell as a whole
                self.timed_s += now - self._cell_since
                self.timed_w += tw + ww
        self._cell_since = self._timed_since = None
        g = _group_key(cell)
        if g in self._group_cells:
            self._group_cells[g] -= 1
            if self._group_cells[g] <= 0:       # nothing left to measure with that model
                self.groups_left.discard(g)
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
        now = self.clock()
        if isinstance(event, (ev.GroupLoading, ev.CellStarted)) and self.started is None:
            self.started = now
        if isinstance(event, ev.GroupLoading):
            self._loading_since = now
            key = getattr(event.group, "key", None)
            if callable(key):
                self.groups_left.discard(key())
            p.update(self.task, description=f"loading {escape(event.group.label())}{where} (model load)")
        elif isinstance(event, ev.CellStarted):
            if getattr(event, "again", False):  # measured once more (its group's sentinel): one more cell to go
                self.n += 1
                w = self.weight(event.cell)
                self.total += w
                self.timed_left += timed_weight(event.cell, self.kind)
                self.warm_left += warmup_weight(event.cell, self.kind)
                g = _group_key(event.cell)
                self._group_cells[g] = self._group_cells.get(g, 0) + 1
                p.update(self.task, total=self.total)
                self._cells_column.text_format = f"{{task.fields[cells]}}/{self.n} cells"
            if self._loading_since is not None:
                self.loads.append(now - self._loading_since)
                self._loading_since = None
            self.groups_left.discard(_group_key(event.cell))
            self._cell_since, self._timed_since = now, None
            p.update(self.task, description=f"[{self.count + 1}/{self.n}] {escape(event.cell.label())}{where}: warm-up")
        elif isinstance(event, ev.CellTimed):
            self._timed_since = now
            p.update(self.task, description=f"[{self.count + 1}/{self.n}] {escape(event.cell.label())}{where}: timed")
        elif isinstance(event, ev.CellSkipped):
            self._advance(event.cell, measured=False)
            why = event.reason or "already stored ok (--force measures it again)"
            p.console.print(f"[dim]skipped[/] {escape(printable(event.cell.label()))}: {escape(printable(why))}")
        elif isinstance(event, ev.CellFinished):
            r = event.result
            self._advance(r.cell, measured=r.status != "predicted")  # a predicted cell took no time
            p.console.print(cell_line(r, self.count, self.n) + where)
        elif isinstance(event, ev.CellFlagged):
            p.console.print(f"[yellow]{escape(event.flag)}[/] {escape(printable(event.result.cell.label()))}{where}: "
                            f"{escape(printable(event.text))}")
        else:
            print_side_event(p.console, event)


def cell_line(r: Any, i: int, n: int) -> str:
    """One finished cell as a rich-markup line: ``[3/6] ok smollm2-135m llama.cpp f16 b4 i128 o64:
    E2E p50 2.54 s, TTFT p50 803 ms, 100.7 out tok/s (5.1 s)``, or its error."""
    label = escape(printable(r.cell.label()))
    if r.status == "predicted":
        e2e = M.E2E.value(r.metrics, "p50")
        fig = f": E2E p50 {e2e:.2f} s" if e2e is not None else ""
        return f"[{i}/{n}] [cyan]predicted[/] {label}{fig} (not measured)"
    if r.status != "ok":
        return f"[{i}/{n}] [red]failed[/] {label}: {escape(printable(r.error or '?'))}"
    m = r.metrics or {}
    parts = []
    e2e, ttft, out_tok_s = M.E2E.value(m, "p50"), M.TTFT.value(m, "p50"), M.OUTPUT_TOK_S.value(m)
    if e2e is not None:
        parts.append(f"E2E p50 {e2e:.2f} s")
    if ttft is not None:
        parts.append(f"TTFT p50 {ttft * 1e3:,.0f} ms")
    if out_tok_s is not None:
        parts.append(f"{out_tok_s:,.1f} out tok/s")
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
    try:
        return Path(path).resolve() == default_store_path().resolve()
    except OSError:
        return False
