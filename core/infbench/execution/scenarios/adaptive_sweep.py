"""The adaptive sweep as a scenario (``infbench run --adaptive 25%`` or ``--adaptive 10m``):
a designed subset of the planned cells is measured, the rest predicted with 90 % intervals
(the planner and the model: :mod:`infbench.analysis.adaptive`).

For each engine of the plan, :class:`~infbench.analysis.adaptive.AdaptivePlanner` picks the
next cell (the grid's corners first, then the widest predicted interval), the engine session
measures it (claimed, proven on the device, stored like any cell), the planner recalibrates,
until the budget is spent. Then every unmeasured cell is stored as a ``predicted`` cell: the
id the measured cell would have, the predicted metrics and their intervals. A predicted cell
is never ``ok`` and never counted as measured, so a later plain run measures it. Cells
already stored ok count as measured and are not measured again.

The planner moves between groups (a model load each) only when the next cell it wants
belongs to another group: within a group it measures every cell it picks before reloading.
Where the engine runs in a worker (a container, a Ray node), the worker runs this same loop
on the cells it was sent: on Ray, each group is planned on its node with its own share of
the budget. A worker that dies mid-cell fails that cell; the next worker starts from the
results so far (:attr:`~infbench.data.scenarios.AdaptiveScenario.known`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from infbench.analysis.adaptive import AdaptivePlanner, Budget, front_corners, peak_allowance, series_of
from infbench.analysis.floor import device_roofline_limits
from infbench.analysis.predict import engine_family
from infbench.analysis.profile import stack_of
from infbench.data.errors import ConfigError
from infbench.data.groups import Group, Plan
from infbench.data.paths import default_home
from infbench.data.scenarios import AdaptiveScenario
from infbench.data.schema import Cell, CellResult
from infbench.data.stored import StoredCell
from infbench.execution.scenarios.scenario import Part, Running, Scenario
from infbench.execution.session import EngineSession, RunContext


def corner_budget(cells: list[Cell], budget: str) -> dict[str, Any]:
    """What a frontier search's budget covers of its design (issue 43): the series' corners
    (:func:`~infbench.analysis.adaptive.front_corners`: each configuration's lowest and highest
    concurrency), which the search always measures.

    Returns:
        ``{"cells": planned, "series", "corners", "budget_cells" (None for a time budget),
        "measured_at_most" (the budget's cells raised to the corners, and by one predicted peak
        per series up to half the grid: :func:`~infbench.analysis.adaptive.peak_allowance`), "raised" (bool),
        "note" (a sentence when raised, else None)}``.
    """
    b = Budget.parse(budget)
    n_series = len({series_of(c) for c in cells})
    n_corners = len(front_corners(cells))
    want = b.cells(len(cells))
    raised = want is not None and want < n_corners
    note = None
    if raised:
        note = (f"--adaptive {budget.strip()} of {len(cells)} cells is {want} cell(s), below the {n_corners} "
                f"corners of {n_series} series (each configuration's lowest and highest concurrency): raised to "
                f"{n_corners}, since a series without its corners is predicted far from anything measured "
                "(--adaptive-strict refuses instead)")
    most = peak_allowance(len(cells), n_series, max(want, n_corners)) if want is not None else None
    return {"cells": len(cells), "series": n_series, "corners": n_corners, "budget_cells": want,
            "measured_at_most": most, "raised": raised, "note": note}


def outline(plan: Plan) -> dict[str, Any] | None:
    """What ``--dry-run`` says of an adaptive plan: ``{"objective", "budget", "cells",
    "corners" (the frontier's, always measured), "measured_at_most", "predicted_at_least"}``
    summed over its engines (None for a time budget's counts, which depend on the cells'
    times); None when the plan is not adaptive."""
    sc = plan.scenario
    if not isinstance(sc, AdaptiveScenario):
        return None
    by: dict[str, list[Cell]] = {}
    for c in plan.cells:
        by.setdefault(engine_family(c.engine), []).append(c)
    covs = [corner_budget(cells, sc.budget) for cells in by.values()]
    corners = sum(c["corners"] for c in covs) if sc.objective == "front" else None
    at_most = [c["measured_at_most"] if sc.objective == "front" else c["budget_cells"] for c in covs]
    most = None if any(m is None for m in at_most) else sum(at_most)
    return {"objective": sc.objective, "budget": sc.budget, "cells": len(plan.cells), "corners": corners,
            "measured_at_most": most, "predicted_at_least": None if most is None else len(plan.cells) - most}


def adaptive_plan(plan: Plan, budget: str, pm: Any = None, strict: bool = False) -> Plan:
    """``plan`` with the adaptive scenario and ``budget`` (``25%``, ``10m``). A frontier search
    whose share budget is below its series' corners (:func:`corner_budget`) has it raised to
    them, with a warning shown before the run, or, with ``strict``, is refused.

    With ``pm``, the device's limits are looked up now, so a device the planner cannot
    predict on (a remote endpoint) is refused before a run begins (issue 41: the refusal
    came after the run was stored, which stayed in the store as failed).

    Raises:
        ConfigError: a budget that is neither a share in (0, 100] % nor a positive time, a
            plan with cells the planner cannot predict (a dataset, a trace, a rate load), or
            a device without limits.
    """
    Budget.parse(budget)
    if pm is not None:
        limits, reason = device_roofline_limits(pm, plan.device)
        if limits is None:
            raise ConfigError(f"--adaptive predicts from the device's limits; {plan.device.label()} has none "
                              f"({reason})", hint="describe the device (`infbench devices`) or run the full sweep")
    for c in plan.cells:
        if c.dataset is not None or c.trace is not None or (c.load is not None and c.load.mode == "rate"):
            raise ConfigError(f"--adaptive predicts cells from their lengths and batch or concurrency; {c.label()} "
                              "replays a dataset, a trace or a rate", hint="sweep lengths and batch (or "
                              "concurrency) with --adaptive; measure the others in full")
    objective = "front" if plan.scenario.kind == "frontier" else "grid"
    if strict and objective != "front":
        raise ConfigError("--adaptive-strict applies to the frontier search's corners; this adaptive sweep is not "
                          "a frontier", hint="add --preset frontier, or drop --adaptive-strict")
    out = plan.with_groups(plan.groups, AdaptiveScenario(budget=budget.strip(), objective=objective, strict=strict))
    if objective == "front":
        by: dict[str, list[Cell]] = {}
        for c in plan.cells:
            by.setdefault(engine_family(c.engine), []).append(c)
        for cells in by.values():
            cov = corner_budget(cells, budget)
            if cov["raised"] and strict:
                raise ConfigError(f"--adaptive {budget.strip()} of {cov['cells']} cells is {cov['budget_cells']} "
                                  f"cell(s), below the {cov['corners']} corners of {cov['series']} series, and "
                                  "--adaptive-strict refuses to raise it",
                                  hint=f"give at least {math.ceil(100 * cov['corners'] / cov['cells'])}% or drop "
                                       "--adaptive-strict (the budget is then raised to the corners)")
            if cov["note"]:
                out.warnings.append(cov["note"])
    return out


class Adaptive(Scenario):
    """The adaptive sweep (see the module doc)."""

    kind = "adaptive"
    spec: AdaptiveScenario

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.planners: dict[str, AdaptivePlanner] = {}
        self._next: Cell | None = None

    def _planners(self, ctx: RunContext) -> dict[str, AdaptivePlanner]:
        """One planner per engine family of the plan, fed the cells measured already (stored
        ok in this store, or by an earlier worker of this sweep)."""
        if self.planners:
            return self.planners
        if ctx.limits is None:
            raise ConfigError(f"--adaptive predicts from the device's limits; {ctx.device.label()} has none "
                              f"({ctx.limits_reason})", hint="describe the device (`infbench devices`) or run "
                              "the full sweep")
        by: dict[str, list[Cell]] = {}
        for c in self.plan.cells:
            by.setdefault(engine_family(c.engine), []).append(c)
        known = {r["cell_id"]: StoredCell.from_row(r)
                 for r in self.spec.known if isinstance(r, dict) and r.get("cell_id")}
        ids = {c.cell_id(ctx.device) for c in self.plan.cells}
        stored = [r for r in ctx.store.results() if r.cell_id in ids and r.ok]
        for r in stored:
            known.setdefault(r.cell_id, r)
        for fam, cells in by.items():
            pl = AdaptivePlanner(cells, ctx.device, ctx.limits, self.spec.budget, stack=stack_of(ctx.device.vendor),
                                 home=default_home(), select=self.spec.objective)
            for row in known.values():
                pl.record(row)
            self.planners[fam] = pl
        return self.planners

    def _pick(self, ctx: RunContext) -> Cell | None:
        """The next cell any planner wants (engines in plan order), or None when every budget is spent."""
        for pl in self._planners(ctx).values():
            c = pl.next_cell()
            if c is not None:
                return c
        return None

    def _group_of(self, cell: Cell) -> Group:
        key = cell.group_key()
        return next(g for g in self.plan.groups if g.cells and g.cells[0].group_key() == key)

    def groups(self, ctx: RunContext) -> Iterator[Group]:
        """The group of each next cell the planners pick (a group again only after another's)."""
        while True:
            cell = self._next if self._next is not None else self._pick(ctx)
            self._next = None
            if cell is None:
                return
            self._next = cell
            yield self._group_of(cell)

    def run_group(self, group: Group, session: EngineSession) -> None:
        """Measure the picked cells while they belong to this group, recalibrating after each."""
        ctx = session.ctx
        key = group.cells[0].group_key()
        while self._next is not None and self._next.group_key() == key:
            cell, self._next = self._next, None
            r = session.measure(cell)
            self._record(ctx, cell, r)
            self._next = self._pick(ctx)

    def _record(self, ctx: RunContext, cell: Cell, r: CellResult | None) -> None:
        pl = self.planners[engine_family(cell.engine)]
        if r is None:                      # claimed elsewhere: it counts as measured, not predicted here
            pl.record(StoredCell(cell_id=cell.cell_id(ctx.device), spec_hash=cell.spec_hash(), run_id="",
                                 status="failed", spec=cell.spec(), device=ctx.device.model_dump(), wall_s=0.0))
        else:
            pl.record(r)

    def start_failed(self, group: Group, error: str, ctx: RunContext) -> None:
        """The group's engine did not start: the picked cell is stored failed (it counts
        against the budget), and the planners go on."""
        if self._next is not None and self._next.group_key() == group.cells[0].group_key():
            cell, self._next = self._next, None
            r = ctx.fail(cell, error)
            self._record(ctx, cell, r)

    def finish(self, ctx: RunContext) -> None:
        """Store every unmeasured planned cell as ``predicted``."""
        for pl in self.planners.values():
            for r in pl.predicted_results():
                ctx.record(r)

    def outcome(self) -> dict[str, Any]:
        """How much was measured and predicted, per engine."""
        return {"adaptive": {"budget": self.spec.budget, "objective": self.spec.objective, "engines": {
            fam: {"planned": len(pl.cells), "measured": len(pl.measured),
                  "predicted": len(pl.remaining()), "prior": pl.prior_source, "stopped": pl.stop_reason}
            for fam, pl in self.planners.items()}}}

    # -- the host side of executors that run the engine elsewhere --------------------------
    def parts(self, ctx: RunContext) -> list[Part]:
        """One part per group, each carrying the whole adaptive spec (a worker that holds
        several groups plans across them)."""
        return [Part(g, self.spec) for g in self.plan.groups]

    def spec_for(self, parts: list[Part]) -> AdaptiveScenario:
        """The adaptive spec with everything that came back so far as known results."""
        rows = [_row(r) for p in parts for r in p.results if isinstance(r, CellResult)]
        return self.spec.model_copy(update={"known": [*self.spec.known, *rows]})

    def resume(self, part: Part) -> Part | None:
        """The part again with what came back as known results (the worker died before
        storing its predictions, so its cells are planned again)."""
        rows = [_row(r) for r in part.results if isinstance(r, CellResult)]
        spec: AdaptiveScenario = part.spec  # type: ignore[assignment]
        return Part(part.group, spec.model_copy(update={"known": [*spec.known, *rows]}), results=part.results,
                    attempts=part.attempts)

    def after_crash(self, part: Part, running: Running, error: str, refused: bool,
                    ctx: RunContext) -> Part | None:
        """The cell the worker was on is stored failed (every cell left when it refused the
        job, nothing predicted); the rest is planned again from the results so far."""
        if refused:
            for c in part.group.cells:
                if c.spec_hash() not in part.finished_hashes():
                    part.results.append(ctx.fail(c, error))
            return None
        if isinstance(running, Cell):
            part.results.append(ctx.fail(running, error))
        elif part.attempts >= 3:           # it keeps dying before a cell: fail what is left, predict nothing
            for c in part.group.cells:
                if c.spec_hash() not in part.finished_hashes():
                    part.results.append(ctx.fail(c, f"gave up after {part.attempts} workers: {error}"))
            return None
        return self.resume(part)


def _row(r: CellResult) -> dict[str, Any]:
    """A result as the planner reads it."""
    return {"cell_id": r.cell_id, "status": r.status, "spec": r.cell.spec(), "metrics": r.metrics,
            "wall_s": r.wall_s}
