"""The full sweep (``kind="sweep"``, :class:`FullSweep`): every planned cell measured once
(``infbench run``).

Cells whose newest stored attempt is ok are skipped unless ``--force``, and so are cells
another live process on the same store is measuring (each cell is claimed before it is
measured); a group whose cells are all taken elsewhere does not load its model. A group
whose engine fails to start stores every cell failed with that error, and the sweep goes on.
"""

from __future__ import annotations

from collections.abc import Iterator

from infbench.data.groups import Group
from infbench.data.scenarios import ScenarioSpec, SweepScenario
from infbench.data.schema import Cell
from infbench.execution.bookkeeping import busy_elsewhere, pending_cells
from infbench.execution.scenarios.scenario import Part, Running, Scenario
from infbench.execution.session import EngineSession, RunContext


class FullSweep(Scenario):
    """Measure every pending cell of the plan, group by group (see the module doc)."""

    kind = "sweep"
    splits = True
    remeasures = True

    def groups(self, ctx: RunContext) -> Iterator[Group]:
        """Each group with its pending cells; groups with none, or whose pending cells all
        belong to another live process (announced as skipped), are left out."""
        for group in self.plan.groups:
            todo = pending_cells(group.cells, ctx.device, ctx.done, ctx.summary, ctx.observer)
            if not todo:
                continue
            busy = busy_elsewhere(ctx.store, todo, ctx.device, ctx.run_id, ctx.options.force)
            if all(c.cell_id(ctx.device) in busy for c in todo):
                for c in todo:  # another process has them all: announce, do not load the model
                    ctx.claim(c)
                continue
            yield group.with_cells(todo)

    def run_group(self, group: Group, session: EngineSession) -> None:
        """Measure each cell in order (each claimed first)."""
        for c in group.cells:
            session.measure(c)

    def start_failed(self, group: Group, error: str, ctx: RunContext) -> None:
        """Every cell of the group is stored failed with the engine's error."""
        for c in group.cells:
            ctx.fail(c, error)

    def parts(self, ctx: RunContext) -> list[Part]:
        """Each group's pending cells, claimed for this run (claimed elsewhere: skipped)."""
        out = []
        for g in self.plan.groups:
            todo = pending_cells(g.cells, ctx.device, ctx.done, ctx.summary, ctx.observer)
            todo = [c for c in todo if ctx.claim(c)]
            if todo:
                out.append(Part(g.with_cells(todo), SweepScenario(), expected=todo))
        return out

    def spec_for(self, parts: list[Part]) -> ScenarioSpec:
        """A sweep of the parts' cells."""
        return SweepScenario()

    def split(self, part: Part, cells: list[Cell]) -> Part:
        """``cells`` go to a new part (the same group, already claimed by this run); ``part``
        keeps its other cells (see :meth:`Scenario.split`)."""
        moving = {c.spec_hash() for c in cells}
        part.group = part.group.with_cells([c for c in part.group.cells if c.spec_hash() not in moving])
        part.expected = [c for c in part.expected if c.spec_hash() not in moving]
        return Part(part.group.with_cells(list(cells)), part.spec, expected=list(cells))

    def resume(self, part: Part) -> Part | None:
        """The part's cells that did not come back."""
        done = part.finished_hashes()
        left = [c for c in part.group.cells if c.spec_hash() not in done]
        if not left:
            return None
        return Part(part.group.with_cells(left), part.spec, expected=left, results=part.results,
                    attempts=part.attempts)

    def after_crash(self, part: Part, running: Running, error: str, refused: bool,
                    ctx: RunContext) -> Part | None:
        """The cell the worker was on (else the first one left) is stored failed, or every
        cell left when the worker refused the job; the rest run again."""
        done = part.finished_hashes()
        left = [c for c in part.group.cells if c.spec_hash() not in done]
        if not left:
            return None
        if refused:
            victims = list(left)
        else:
            hit = [c for c in left if isinstance(running, Cell) and c.spec_hash() == running.spec_hash()]
            victims = hit or left[:1]
        for c in victims:
            part.results.append(ctx.fail(c, error))
        return self.resume(part)
