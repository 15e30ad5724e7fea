"""The container executor: a plan's cells run in the vendor plugin's worker image (Docker
or Apptainer) and are stored as one ordinary run.

The plan's scenario (:mod:`infbench.execution.scenarios`) splits the work into parts, one per group
(a sweep's cells not yet stored ok, a ``--find-max`` search, a perplexity measurement).
For each run of consecutive parts that share an image (the plugin's
:func:`~infbench.contract.hookspecs.infbench_container_spec` for the group's engine), the launcher

1. writes a worker spec of those parts (cells and scenario) into a job folder
   (``$INFBENCH_HOME/jobs/<run>-<n>/``),
2. starts the worker (:class:`~infbench.runtimes.docker_runtime.DockerRuntime` or
   :class:`~infbench.runtimes.apptainer.ApptainerRuntime`) and reads its log: each
   ``infbench-worker: ...`` line moves the progress display, and at each ``done`` line
   the cell just appended to ``out/cells.jsonl`` is stored at once in the host's store,
3. if the worker dies mid-cell (killed, out of memory, crashed, or silent for longer
   than the stall limit), the scenario stores what it was on as failed with the exit
   status and the last log lines, and a fresh worker runs what is left (a sweep's cells
   after it; a search resumed from its probes so far): the run goes on.

The container is removed after every attempt, including timeouts and Ctrl-C. The run's
provenance is the worker's (libraries of the image, devices it saw) plus ``container``
(runtime, image, image id and labels) and ``launcher`` (the host's provenance), so
container runs and in-process runs have the same form and compare cell by cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.contract.registry import container_spec as typed
from infbench.data.errors import ConfigError
from infbench.data.events import CellStarted, CellTimed, GroupLoading, LogLine, Note, Observer, ScoreStarted, ignore
from infbench.data.groups import Plan
from infbench.data.paths import default_home
from infbench.data.run import RunOptions, RunSummary
from infbench.data.schema import Cell, CellResult
from infbench.data.scores import PerplexityResult
from infbench.data.worker_spec import write_spec
from infbench.execution.bookkeeping import conclude, run_command, started_run
from infbench.execution.executors.follow import JsonlTail, WorkerExit, follow_worker, read_no_follow, stall_limit
from infbench.execution.scenarios import Part, Scenario, make_scenario
from infbench.execution.session import RunContext
from infbench.store import Store

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager

__all__ = ["ContainerExecutor", "container_spec", "read_no_follow"]

def container_spec(pm: PluginManager, device: Any, engine: str) -> dict[str, Any]:
    """The plugin's container spec for ``engine`` on ``device``, as the container runtimes
    take it (:meth:`~infbench.data.contract.ContainerSpec.as_dict`).

    Raises:
        ConfigError: no plugin provides an image for this engine on this device.
    """
    spec = typed(pm, device, engine)
    if spec is None:
        raise ConfigError(f"no worker image for engine {engine} on {device.vendor} ({device.model})",
                          hint="run it in-process with --executor inprocess, or use an engine the plugin's images "
                               "carry (`infbench containers list`)")
    return spec.as_dict()


def _local_paths(cells: list[Cell], extra: list[str] | None = None) -> list[str]:
    """Models, datasets and texts given as host paths (mounted read-only into the worker)."""
    paths = set()
    for c in cells:
        if Path(c.model).exists():
            paths.add(str(Path(c.model).resolve()))
        if c.dataset is not None and Path(c.dataset.path).exists():
            paths.add(str(Path(c.dataset.path).resolve()))
    for x in extra or []:
        if Path(x).exists():
            paths.add(str(Path(x).resolve()))
    return sorted(paths)


def scenario_paths(spec: Any) -> list[str]:
    """Host files a scenario spec reads besides its cells' (a perplexity text)."""
    text = getattr(spec, "text_path", None)
    return [text] if text else []


def _batches(parts: list[Part], device: Any, pm: PluginManager) -> list[tuple[dict[str, Any], list[Part]]]:
    """Consecutive parts whose engines share one image, with that image's container spec."""
    out: list[tuple[dict[str, Any], list[Part]]] = []
    for part in parts:
        spec = container_spec(pm, device, part.group.engine)
        if out and out[-1][0] == spec:
            out[-1][1].append(part)
        else:
            out.append((spec, [part]))
    return out


class ContainerExecutor:
    """Run a plan in worker containers (see the module doc).

    Args:
        pm: the plugin manager (the plugins' container specs).
        runtime: a :class:`~infbench.runtimes.docker_runtime.DockerRuntime` or
            :class:`~infbench.runtimes.apptainer.ApptainerRuntime`.
        provenance: the host's provenance (kept under ``launcher``; the run's own
            provenance is the worker's).
        job_root: where job folders go (default ``$INFBENCH_HOME/jobs``).
    """

    name = "container"

    def __init__(self, pm: PluginManager, runtime: Any, provenance: dict[str, Any], job_root: Path | None = None):
        self.pm, self.runtime, self.provenance, self.job_root = pm, runtime, provenance, job_root

    def run(self, plan: Plan, store: Store, options: RunOptions | None = None,
            observer: Observer = ignore) -> RunSummary:
        """Run the plan's scenario in the plugin's images; same contract as
        :meth:`~infbench.execution.executors.inprocess.InProcessExecutor.run`, plus
        :class:`~infbench.data.events.Note` (e.g. a privileged container) and
        :class:`~infbench.data.events.LogLine` (worker log lines that are not events).

        The scenario's parts (:meth:`~infbench.execution.scenarios.scenario.Scenario.parts`) that share an
        image run in one worker; when it dies, the scenario stores what it was running as
        failed and says what is left (:meth:`~infbench.execution.scenarios.scenario.Scenario.after_crash`),
        which a fresh worker runs.

        Returns:
            The :class:`~infbench.execution.bookkeeping.RunSummary` (``status`` completed,
            completed_with_failures or interrupted).

        Raises:
            ConfigError: no image for an engine (before anything runs), image not built.
            VersionSkew: an image holds another store schema.
            KeyboardInterrupt: after killing and removing the container and marking the run
                interrupted; finished cells are stored.
        """
        opts = options or RunOptions()
        runtime, pm, host_provenance = self.runtime, self.pm, self.provenance
        device = plan.device
        scenario = make_scenario(plan)
        for g in plan.groups:  # fail before starting anything if an image is missing or skewed
            runtime.check_image(container_spec(pm, device, g.engine)["image"])
        root = Path(self.job_root or default_home() / "jobs")
        cache = default_home() / "cache"
        home = default_home() / "worker-home"
        stall_s = stall_limit(opts.cell_timeout_s)
        run_prov: dict[str, Any] = {**host_provenance, "runtime": runtime.name}
        outcome: dict[str, Any] = {}
        attempt = 0
        with started_run(store, run_prov, run_command()) as summary:
            ctx = RunContext(pm, device, store, summary, opts, observer,
                             done=set() if opts.force else store.finished_cell_ids())
            try:
                for spec, live in _batches(scenario.parts(ctx), device, pm):
                    while live:
                        attempt += 1
                        job = root / f"{summary.run_id}-{attempt}"
                        for part in live:
                            part.attempts += 1
                        write_spec(plan.with_groups([p.group for p in live], scenario.spec_for(live)),
                                   job / "spec.json", opts)
                        ended = _attempt(runtime, spec, job, home, cache, f"infbench-{summary.run_id}-{attempt}",
                                         live, stall_s, scenario, ctx)
                        if ended.provenance and run_prov.get("container") is None:
                            run_prov = {**(ended.provenance.get("provenance") or {}),
                                        "container": ended.description, "launcher": host_provenance,
                                        "runtime": runtime.name}
                            store.update_provenance(summary.run_id, run_prov)
                        done_outcome = (ended.provenance or {}).get("scenario")
                        if isinstance(done_outcome, dict):
                            outcome.update(done_outcome)
                        live = _left(scenario, live, ended, ctx)
            finally:
                outcome.update(scenario.concluded() if not outcome else {})
                conclude(store, summary, outcome, run_prov)
        return summary


def _left(scenario: Scenario, live: list[Part], ended: WorkerExit, ctx: RunContext) -> list[Part]:
    """The parts still to run after a worker ended: none when it ran its whole spec (parts
    of a sweep that lack cells are treated as crashed); else the scenario stores what the
    worker was running (everything, when it refused the job) and says what is left."""
    left = [p for p in live if not scenario.is_done(p)]
    if ended.finished:
        left = [p for p in left if p.expected]  # a sweep's cells that did not come back
        if not left:
            return []
        why = "worker exited without measuring this cell"
        return [q for p in left if (q := scenario.after_crash(p, None, why, False, ctx)) is not None]
    error = ended.error()
    if ended.refused and not any(p.results for p in live):
        for p in left:
            scenario.after_crash(p, ended.running, error, True, ctx)
        return []
    hit = next((p for p in left if scenario.owns(p, ended.running)), left[0] if left else None)
    out = []
    for p in left:
        if p is hit:
            q = scenario.after_crash(p, ended.running, error, False, ctx)
            if q is not None:
                out.append(q)
        else:
            out.append(p)
    return out


def _attempt(runtime: Any, spec: dict[str, Any], job: Path, home: Path, cache: Path, name: str, live: list[Part],
             stall_s: float, scenario: Scenario, ctx: RunContext) -> WorkerExit:
    """One worker: start it, follow it (:func:`~infbench.execution.executors.follow.follow_worker`),
    store results as they arrive, remove it. Returns its
    :class:`~infbench.execution.executors.follow.WorkerExit` (with ``description``: the container)."""
    cells = [c for p in live for c in p.group.cells]
    mounts = _local_paths(cells, [x for p in live for x in scenario_paths(p.spec)])
    handle = runtime.start(spec, job, home, cache, name, extra_mounts=mounts)
    for n in handle.notes:
        ctx.observer(Note(n))
    groups = {p.group.label(): p.group for p in live}
    seen: set[Any] = set()
    back: set[str] = set()  # spec hashes of the cells that came back: one starting again is measured again

    def take(kind: str, r: Any) -> None:
        # a line once: a cell measured again or flagged by its group's sentinel is another line
        key = ((r.spec_hash, r.model_dump_json()) if kind == "result" else "q:" + r.key())
        if key in seen:
            return
        seen.add(key)
        if kind == "result":
            back.add(r.spec_hash)
        part = _part_of(live, r)
        if kind == "result":
            ctx.record(r)
        else:
            ctx.record_quality(r)
        if part is not None:
            scenario.accept(part, r)

    ended = None
    running: Cell | None = None
    events = follow_worker(handle, job, stall_s)
    try:
        for kind, payload in events:
            if kind == "log":
                ctx.observer(LogLine(payload))
            elif kind == "loading" and payload in groups:
                ctx.observer(GroupLoading(groups[payload]))
            elif kind == "cell" and payload[1] is not None:
                ctx.observer(CellStarted(payload[1], again=payload[0] in back))
                running = payload[1]
            elif kind == "timed" and running is not None and running.spec_hash() == payload:
                ctx.observer(CellTimed(running))
            elif kind == "score":
                ctx.observer(ScoreStarted(payload[1], payload[0]))
            elif kind in ("result", "quality"):
                take(kind, payload)
            elif kind == "exit":
                ended = payload
    except KeyboardInterrupt:
        events.close()  # kills and removes the container
        for r in JsonlTail(job / "out" / "cells.jsonl", CellResult).read():
            take("result", r)
        for q in JsonlTail(job / "out" / "quality.jsonl", PerplexityResult).read():
            take("quality", q)
        raise
    if ended is None:  # the stream always ends with its exit event
        raise RuntimeError("worker stream ended without an exit event")
    ended.description = handle.description
    return ended


def _part_of(parts: list[Part], r: Any) -> Part | None:
    """The part a result belongs to: a cell's group (model, engine, dtype, TP), or a
    perplexity result's item."""
    if isinstance(r, CellResult):
        key = r.cell.group_key()
        return next((p for p in parts if p.group.cells and p.group.cells[0].group_key() == key), None)
    k = r.key()
    return next((p for p in parts if k in {it.key for it in getattr(p.spec, "items", [])}), None)
