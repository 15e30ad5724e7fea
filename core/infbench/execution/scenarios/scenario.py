"""The scenario interface: what to measure next, decided from the results so far.

A scenario is one of three independent axes of a run, as in optimum-benchmark's
backend x launcher x scenario:

* the **scenario** decides *what* to measure (a sweep of cells, an SLO search, perplexity);
* the **executor** (:mod:`infbench.execution.executors`) decides *where* (this process, a worker
  container, a Ray node);
* the **engine** (:mod:`infbench.engines`) measures *with what*.

A scenario never starts an engine: :meth:`Scenario.run` (the same for every scenario)
opens one :class:`~infbench.execution.session.EngineSession` per group and hands it to
:meth:`Scenario.run_group`, which measures cells or scores texts through it and decides
the next unit from each result. Where the engine runs in another process (a worker
container, a Ray node), that process runs the same :meth:`Scenario.run` on the spec it was
sent (:class:`~infbench.data.scenarios.ScenarioSpec`, inside the worker contract), and the
host drives the scenario's other half: :meth:`Scenario.parts` (the work to send, claims
taken) and :meth:`Scenario.after_crash` (what a worker that died leaves to do, from the
results so far).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from infbench.data.groups import Group, Plan
from infbench.data.scenarios import ScenarioSpec
from infbench.data.schema import Cell, CellResult
from infbench.data.scores import PerplexityResult
from infbench.execution.session import EngineSession, GroupStartFailed, RunContext


@dataclass
class Part:
    """Work sent to another process (a worker container, a Ray node): one group's cells
    and the scenario restricted to them, with the results that came back so far.

    Attributes:
        group: the group, holding the cells the worker gets (a sweep's pending cells, a
            search's template cell, a perplexity item's placeholder cell).
        spec: the scenario spec the worker runs.
        expected: the cells the host claimed for it (a sweep's; dynamic scenarios: none).
        results: what came back so far (cells and perplexity results).
        attempts: workers started for it.
    """

    group: Group
    spec: ScenarioSpec
    expected: list[Cell] = field(default_factory=list)
    results: list[CellResult | PerplexityResult] = field(default_factory=list)
    attempts: int = 0

    def finished_hashes(self) -> set[str]:
        """Spec hashes of the cells that came back."""
        return {r.spec_hash for r in self.results if isinstance(r, CellResult)}

    def finished_keys(self) -> set[str]:
        """Quality keys of the perplexity results that came back."""
        return {r.key() for r in self.results if isinstance(r, PerplexityResult)}


#: What a worker was doing when it died: a cell (by its spec), a perplexity item (its
#: quality key), or nothing known (loading a model, between units).
Running = Cell | str | None


class Scenario(ABC):
    """What to measure next (see the module doc).

    Args:
        plan: the planned groups; ``plan.scenario`` is this scenario's spec.

    Attributes:
        kind: the spec's ``kind`` (``sweep``, ``find_max``, ``perplexity``).
    """

    kind: ClassVar[str]
    #: Whether a part's cells may be shared out between workers (:meth:`split`): a sweep's
    #: may; a search or a perplexity measurement decides its next unit from the last, and
    #: stays whole.
    splits: ClassVar[bool] = False
    #: Whether the group's sentinel may measure a drifted cell again
    #: (:meth:`~infbench.execution.session.EngineSession.finish`): a sweep's cells stand alone; a
    #: search or an adaptive sweep decided its next cells from the first measurement, so its
    #: drifted cells are only flagged.
    remeasures: ClassVar[bool] = False

    def __init__(self, plan: Plan):
        self.plan = plan
        self.spec = plan.scenario
        #: What each group's sentinel found (:meth:`~infbench.execution.session.EngineSession.finish`).
        self.sentinels: list[dict[str, Any]] = []

    # -- where the engine runs ------------------------------------------------------------
    def run(self, ctx: RunContext) -> None:
        """Measure this scenario on ``ctx.device``: for each group :meth:`groups` yields, one
        engine session (:meth:`~infbench.execution.session.EngineSession.start`, device proven) handed
        to :meth:`run_group`, stopped on every path; a group whose engine does not start goes
        to :meth:`start_failed` and the run goes on; :meth:`finish` ends it. Before each engine
        stops, its session checks the group at steady state (the sentinel,
        :meth:`~infbench.execution.session.EngineSession.finish`). The same on every executor."""
        for group in self.groups(ctx):
            try:
                session = EngineSession.start(ctx, group, self.load_group(group))
            except GroupStartFailed as exc:
                self.start_failed(group, exc.error, ctx)
                continue
            with session:
                self.run_group(group, session)
                found = session.finish(remeasure=self.remeasures)
                if found is not None:
                    self.sentinels.append({"group": group.label(), **found})
        self.finish(ctx)

    def groups(self, ctx: RunContext) -> Iterator[Group]:
        """The groups that need an engine, in order (default: every planned group); a
        scenario may leave out a group with nothing left to do (announcing why)."""
        yield from self.plan.groups

    def load_group(self, group: Group) -> Group:
        """What the engine loads for ``group`` (default: ``group``; a search sizes the
        server for its highest load)."""
        return group

    @abstractmethod
    def run_group(self, group: Group, session: EngineSession) -> None:
        """Measure ``group``'s units on its started session, deciding each next unit from the
        results so far."""

    @abstractmethod
    def start_failed(self, group: Group, error: str, ctx: RunContext) -> None:
        """``group``'s engine did not start (``error``): store what that means for its units."""

    def finish(self, ctx: RunContext) -> None:  # noqa: B027 - optional hook: most scenarios derive nothing
        """After the last group, with no engine loaded: store what the scenario derives from
        its measurements (an adaptive sweep's predicted cells). Default: nothing."""

    def outcome(self) -> dict[str, Any]:
        """What the scenario concluded, JSON-ready (stored in the run's provenance under
        ``scenario``); default ``{}``."""
        return {}

    def concluded(self) -> dict[str, Any]:
        """:meth:`outcome` with what the groups' sentinels found (``sentinels``: each group's
        comparison, the cells it flagged and measured again, the seconds it took), as stored."""
        out = dict(self.outcome())
        if self.sentinels:
            out["sentinels"] = list(self.sentinels)
        return out

    # -- the host side of executors that run the engine elsewhere --------------------------
    def parts(self, ctx: RunContext) -> list[Part]:
        """The work to send, one :class:`Part` per group with something to do; cells known
        in advance are claimed here (skips announced)."""
        return [Part(g, self.spec) for g in self.plan.groups]

    def spec_for(self, parts: list[Part]) -> ScenarioSpec:
        """The spec one worker runs for several parts (consecutive groups sharing an image)."""
        return parts[0].spec

    def is_done(self, part: Part) -> bool:
        """Whether every unit of ``part`` came back (default: all its expected cells; a part
        with no expected cells is done only when its worker finishes)."""
        return bool(part.expected) and {c.spec_hash() for c in part.expected} <= part.finished_hashes()

    def owns(self, part: Part, running: Running) -> bool:
        """Whether the unit a worker was running belongs to ``part`` (default: a cell of its
        group, or any cell when the part has no expected cells)."""
        if isinstance(running, Cell):
            return not part.expected or running.spec_hash() in {c.spec_hash() for c in part.group.cells}
        return False

    def split(self, part: Part, cells: list[Cell]) -> Part:
        """Move ``cells`` (cells of ``part`` not started and not back) into a new part of the
        same group, which another worker measures: same cells, same ids, same claims. ``part``
        keeps the rest. Only scenarios with :attr:`splits` implement it.

        Raises:
            NotImplementedError: a scenario whose parts stay whole.
        """
        raise NotImplementedError(f"a {self.kind} part stays whole")

    def accept(self, part: Part, result: CellResult | PerplexityResult) -> None:
        """A result of ``part`` came back (stored by the caller)."""
        part.results.append(result)

    @abstractmethod
    def resume(self, part: Part) -> Part | None:
        """What is left of ``part`` from the results so far, nothing stored (a node was lost:
        its unit runs again elsewhere); None when nothing is left."""

    @abstractmethod
    def after_crash(self, part: Part, running: Running, error: str, refused: bool,
                    ctx: RunContext) -> Part | None:
        """A worker of ``part`` died (or refused the job). Store what it was running as failed
        with ``error`` (``refused``: everything left, the worker will refuse again), and
        return the part left to do from the results so far, or None when nothing is left."""
