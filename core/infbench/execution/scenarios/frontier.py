"""The frontier sweep as a scenario (``infbench run --preset frontier``, docs/report.md).

The plan holds, per engine configuration (one group: one server start) and per shape, a
series of cells that differ only in concurrency (1, 2, 4, ...). Each series is measured from
the lowest concurrency up, and stops (:func:`stop_reason`) when

* a doubling adds less than ``min_gain`` (5 %) of total throughput (``total_tok_s``) to the
  best so far: the server is saturated, and higher concurrency only adds queueing delay; or
* the cell broke the SLO (its TTFT or TPOT p50 above ``--slo-ttft-ms`` / ``--slo-tpot-ms``);
  or the cell failed.

The cells above the stop are not measured and not stored: the summary lists them as not
reached (``RunSummary.not_reached``), each announced skipped with the reason. On a resumed
run the cells stored ok count as measured (their throughput comes from the store), so the stop
falls where it fell.

InferenceX sweeps a fixed concurrency range per configuration (``benchmark_lib.sh``); the
stop rule is infbench's, so a frontier costs the points that can move it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infbench.data import metrics as M
from infbench.data.events import CellSkipped
from infbench.data.groups import Group
from infbench.data.scenarios import FrontierScenario
from infbench.data.schema import Cell
from infbench.execution.scenarios.full_sweep import FullSweep
from infbench.execution.scenarios.scenario import Part
from infbench.execution.session import EngineSession, RunContext


def series_key(cell: Cell) -> str:
    """What a frontier series shares: the cell without its load's concurrency and request
    counts (one configuration, one shape)."""
    d = cell.model_dump(exclude={"load", "warmup"}, exclude_none=True)
    return repr(sorted(d.items()))


def stop_reason(metrics: dict[str, Any] | None, best_tok_s: float | None, spec: FrontierScenario) -> str | None:
    """Why a series stops after a cell, or None to go on to the next concurrency.

    Args:
        metrics: the cell's stored metrics (None: the cell failed).
        best_tok_s: the highest ``total_tok_s`` of the series before this cell (None: first).
        spec: the scenario (``min_gain``, the SLO).

    Returns:
        ``"failed"``, ``"SLO broken: TTFT p50 1.2 s > 1 s"``, ``"saturated: +3.1 % total
        throughput for doubling the concurrency (< 5 %)"`` or None.
    """
    if not spec.stop:
        return None
    if not metrics:
        return "the cell failed"
    for key, limit, name in ((M.TTFT.key, spec.ttft_s, "TTFT"), (M.TPOT.key, spec.tpot_s, "TPOT")):
        v = (metrics.get(key) or {}).get("p50")
        if limit is not None and v is not None and v > limit:
            return f"SLO broken: {name} p50 {v:.3g} s > {limit:g} s"
    tok_s = metrics.get(M.TOTAL_TOK_S.key)
    if best_tok_s is not None and tok_s is not None and best_tok_s > 0:
        gain = tok_s / best_tok_s - 1
        if gain < spec.min_gain:
            return (f"saturated: {100 * gain:+.1f} % total throughput for doubling the concurrency "
                    f"(< {100 * spec.min_gain:g} %)")
    return None


class Frontier(FullSweep):
    """Measure each series of the plan up the concurrency ladder until it stops paying (see
    the module doc). Groups, parts, crashes and resumes are the sweep's."""

    kind = "frontier"
    remeasures = False  # each series stopped on its first figures: a drifted cell is only flagged
    splits = False  # a series runs in order on one server
    spec: FrontierScenario

    def groups(self, ctx: RunContext) -> Iterator[Group]:
        """The sweep's groups, holding every cell of the plan's group (those stored ok are
        read back for the stop rule, not measured again)."""
        wanted = {g.key(): g for g in self.plan.groups}
        for g in super().groups(ctx):
            yield wanted.get(g.key(), g)

    def run_group(self, group: Group, session: EngineSession) -> None:
        """Each series from the lowest concurrency up; stop per :func:`stop_reason`."""
        ctx = session.ctx
        series: dict[str, list[Cell]] = {}
        for c in group.cells:
            series.setdefault(series_key(c), []).append(c)
        for cells in series.values():
            cells.sort(key=lambda c: (c.load.concurrency if c.load and c.load.concurrency else 0))
            best: float | None = None
            for i, c in enumerate(cells):
                cid = c.cell_id(ctx.device)
                if cid in ctx.done:  # stored ok before this run: its figures from the store
                    rows = ctx.store.results(cell_ids=[cid])
                    metrics = rows[-1].metrics if rows else None
                else:
                    r = session.measure(c)
                    metrics = r.metrics if r is not None and r.status == "ok" else None
                    if r is None:  # another process has it: its result is not ours to judge
                        continue
                why = stop_reason(metrics, best, self.spec)
                tok_s = (metrics or {}).get(M.TOTAL_TOK_S.key)
                if tok_s is not None:
                    best = max(best or 0.0, tok_s)
                if why is not None:
                    rest = [x for x in cells[i + 1:] if x.cell_id(ctx.device) not in ctx.done]
                    ctx.summary.not_reached.extend(rest)
                    for x in rest:
                        ctx.observer(CellSkipped(x, f"not reached: the frontier stopped after {c.label()}: {why}"))
                    break

    def spec_for(self, parts: list[Part]) -> FrontierScenario:
        """The frontier's own spec (its stop rule travels with the parts to a worker)."""
        return self.spec

    def parts(self, ctx: RunContext) -> list[Part]:
        """One part per group, every cell (the series' order and stops need them together)."""
        out = []
        for g in self.plan.groups:
            todo = [c for c in g.cells if c.cell_id(ctx.device) not in ctx.done]
            todo = [c for c in todo if ctx.claim(c)]
            if todo:
                out.append(Part(g.with_cells(todo), self.spec, expected=todo))
        return out
