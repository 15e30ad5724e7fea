"""The ``--find-max`` search as a scenario: the highest load at which ``goodput`` of the
requests meet an SLO, against one server kept up across probes (the method is in
:mod:`infbench.analysis.slo_search`).

Each probe is a stored cell of the run, measured through the engine session like any
other: the server proves its device before the first probe, each probe cell is claimed,
every result is stored with ``metrics["find_max"]``. Where the search runs in a worker (a
container, a Ray node) and the worker dies mid-probe, the host stores that probe failed
and a new worker resumes the search from the probes measured so far
(:attr:`~infbench.data.scenarios.FindMaxScenario.known`): the search is a deterministic
function of the probes' outcomes, so it takes the same path up to that point.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from infbench.analysis.slo_search import (
    DEFAULT_LIMIT,
    MODES,
    Probe,
    SearchResult,
    SloTarget,
    check_workload,
    envelope,
    judge,
    load_of,
    probe_cell,
    probe_metrics,
    search,
)
from infbench.data import metrics as M
from infbench.data.errors import ConfigError
from infbench.data.groups import Group, Plan
from infbench.data.scenarios import FindMaxScenario, KnownProbe
from infbench.data.schema import Cell, CellResult
from infbench.execution.scenarios.scenario import Part, Running, Scenario
from infbench.execution.session import EngineSession, RunContext


class _Claimed(Exception):
    """A probe cell is being measured by another live process."""


def find_max_plan(plan: Plan, mode: str, slo: SloTarget, limit: float | None = None, max_probes: int = 20,
                  rel_tol: float = 0.1) -> Plan:
    """``plan`` (one serving cell) with the search as its scenario.

    Args:
        plan: exactly one group of one serving cell, whose load gives the start
            (``--concurrency`` / ``--request-rate``), requests and lengths.
        mode: ``rate`` or ``concurrency``.
        slo: the target.
        limit: the highest load (default :data:`~infbench.analysis.slo_search.DEFAULT_LIMIT`).
        max_probes: probe budget (>= 1).
        rel_tol: rate-mode resolution, in (0, 1].

    Raises:
        ConfigError: not one serving cell, a trace or ``--no-stream`` workload, an unknown
            mode, a budget below 1, a start above the limit.
    """
    if mode not in MODES:
        raise ConfigError(f"--find-max takes rate or concurrency, got {mode!r}")
    if len(plan.groups) != 1 or len(plan.groups[0].cells) != 1:
        raise ConfigError(f"--find-max searches one configuration; this sweep has {len(plan.cells)} cells",
                          hint="give one --model, --engine, --dtype, --input-len, --output-len and one start "
                               "load (--concurrency or --request-rate), and no --repeat")
    template = plan.groups[0].cells[0]
    if template.load is None or template.load.mode == "batch":
        raise ConfigError("--find-max needs a server engine and a load", hint="e.g. --engine llama.cpp-server "
                          "--concurrency 1 --find-max concurrency")
    check_workload(template.trace is not None, template.load.stream is False)
    if max_probes < 1:
        raise ConfigError(f"--find-max-probes must be at least 1, got {max_probes}", hint="e.g. --find-max-probes 20")
    top = limit if limit is not None else DEFAULT_LIMIT[mode]
    start = _start(template, mode)
    if not 0 < top or start > top:
        raise ConfigError(f"--find-max start load {start:g} is outside (0, {top:g}]",
                          hint="the start is the first --concurrency/--request-rate value; raise --find-max-limit")
    spec = FindMaxScenario(mode=mode, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, goodput=slo.goodput, limit=limit,
                           max_probes=max_probes, rel_tol=rel_tol, search_id=uuid.uuid4().hex[:12])
    return plan.with_groups(plan.groups, spec)


def _start(template: Cell, mode: str) -> float:
    return load_of(template, mode) or 1.0


class FindMax(Scenario):
    """The search (see the module doc). Its :meth:`outcome` is the
    :meth:`~infbench.analysis.slo_search.SearchResult.as_dict` of the search."""

    kind = "find_max"
    spec: FindMaxScenario

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.group = plan.groups[0]
        self.template = self.group.cells[0]
        s = self.spec
        self.slo = SloTarget(ttft_s=s.ttft_s, tpot_s=s.tpot_s, goodput=s.goodput)
        self.limit = s.limit if s.limit is not None else DEFAULT_LIMIT[s.mode]
        self.result = SearchResult(search_id=s.search_id, mode=s.mode, slo=self.slo)

    def probe_of(self, load: float) -> Cell:
        """The cell of the probe at ``load``."""
        return probe_cell(self.template, self.spec.mode, load)

    def load_group(self, group: Group) -> Group:
        """The server is sized for the whole search: the template at the start and at the
        limit (``max_num_seqs``, llama.cpp slots)."""
        return group.with_cells(envelope(self.template, self.spec.mode, self.limit))

    def run_group(self, group: Group, session: EngineSession) -> None:
        """Bracket then bisect (:func:`~infbench.analysis.slo_search.search`), each new load a
        probe cell measured and stored through ``session``; probes in ``spec.known`` are
        taken as measured."""
        s = self.spec
        opts = replace(session.ctx.options, slo=self.slo.as_dict(), force=True)
        known = {k.load: Probe(k.load, None, k.fraction, k.passed, k.saturated, k.cell_id,
                               "ok" if k.passed else "failed") for k in s.known}
        count = [len(known)]

        def measure(x: float) -> Probe:
            if x in known:
                return known[x]
            cell = self.probe_of(x)
            count[0] += 1
            judged: list[Probe] = []

            def annotate(r: CellResult) -> None:
                judged.append(judge(r, s.mode, self.slo, x))
                r.metrics["find_max"] = probe_metrics(s.search_id, s.mode, self.slo, judged[0], count[0])

            r = session.measure(cell, opts, annotate)
            if r is None:
                raise _Claimed(cell.label())
            return judged[0]

        try:
            found = search(measure, s.mode, _start(self.template, s.mode), self.limit, s.rel_tol, s.max_probes)
        except _Claimed as exc:
            self.result.stopped = f"another process is measuring probe {exc}"
            return
        found.search_id, found.slo = s.search_id, self.slo
        self.result = found

    def start_failed(self, group: Group, error: str, ctx: RunContext) -> None:
        """The server did not start: the start load's probe is stored failed and the search
        stops with the error."""
        self._fail_probe(self.probe_of(_start(self.template, self.spec.mode)), error, ctx)
        self.result.stopped = error

    def _fail_probe(self, cell: Cell, error: str, ctx: RunContext) -> CellResult:
        s = self.spec
        load = load_of(cell, s.mode) or _start(self.template, s.mode)
        number = len(s.known) + 1
        fm = probe_metrics(s.search_id, s.mode, self.slo, Probe(load, None, 0.0, False), number)
        return ctx.fail(cell, error, metrics={"find_max": fm})

    def outcome(self) -> dict[str, Any]:
        """The search's result (knee, first failing load, probes, why it stopped)."""
        return {"find_max": self.result.as_dict()}

    def parts(self, ctx: RunContext) -> list[Part]:
        """The whole search is one part: the template cell (probes are claimed where they run)."""
        return [Part(self.group, self.spec)]

    def after_crash(self, part: Part, running: Running, error: str, refused: bool,
                    ctx: RunContext) -> Part | None:
        """A probe the worker was on is stored failed (it does not pass) and the search
        resumes from every probe so far; a worker that died before any probe (loading the
        server) or refused the job stops the search, as a server that does not start does."""
        spec: FindMaxScenario = part.spec  # type: ignore[assignment]
        if refused or not isinstance(running, Cell):
            sc = FindMax(self.plan.with_groups([part.group], spec))
            sc.start_failed(part.group, error, ctx)
            self.result.stopped = error
            return None
        part.results.append(FindMax(self.plan.with_groups([part.group], spec))._fail_probe(running, error, ctx))
        return self.resume(part)

    def resume(self, part: Part) -> Part | None:
        """The search again, from every probe that came back (a probe in progress is measured
        again); None when the probe budget is spent."""
        spec: FindMaxScenario = part.spec  # type: ignore[assignment]
        known = {k.load: k for k in spec.known}
        for r in part.results:
            if not isinstance(r, CellResult):
                continue
            fm = M.field(r.metrics, "find_max")
            if isinstance(fm, dict) and fm.get("search_id") == spec.search_id:
                known[float(fm["load"])] = KnownProbe(load=fm["load"], passed=bool(fm["passed"]),
                                                      fraction=float(fm["fraction"]), saturated=fm.get("saturated"),
                                                      cell_id=r.cell_id)
        if len(known) >= spec.max_probes:
            self.result.stopped = "probe budget"
            return None
        return Part(part.group, spec.model_copy(update={"known": list(known.values())}), results=part.results,
                    attempts=part.attempts)
