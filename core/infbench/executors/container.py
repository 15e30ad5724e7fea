"""The container executor: a plan's cells run in the vendor plugin's worker image (Docker
or Apptainer) and are stored as one ordinary run.

For each run of consecutive groups that share an image (the plugin's
:func:`~infbench.hookspecs.infbench_container_spec` for the group's engine), the launcher

1. writes a worker spec of the cells not yet stored ok into a job folder
   (``$INFBENCH_HOME/jobs/<run>-<n>/``),
2. starts the worker (:class:`~infbench.runtimes.docker_runtime.DockerRuntime` or
   :class:`~infbench.runtimes.apptainer.ApptainerRuntime`) and reads its log: each
   ``infbench-worker: ...`` line moves the progress display, and at each ``done`` line
   the cell just appended to ``out/cells.jsonl`` is stored at once in the host's store,
3. if the worker dies mid-cell (killed, out of memory, crashed, or silent for longer
   than the stall limit), stores that cell as failed with the exit status and the last
   log lines, and starts a fresh worker for the cells after it: the sweep goes on.

The container is removed after every attempt, including timeouts and Ctrl-C. The run's
provenance is the worker's (libraries of the image, devices it saw) plus ``container``
(runtime, image, image id and labels) and ``launcher`` (the host's provenance), so
container runs and in-process runs have the same form and compare cell by cell.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

from infbench.data.paths import default_home
from infbench.errors import ConfigError
from infbench.executors.events import CellStarted, GroupLoading, LogLine, Note, Observer, ignore
from infbench.plan import Group, Plan
from infbench.run import (
    RunOptions,
    RunSummary,
    pending_cells,
    record,
    run_command,
    started_run,
    take_cell,
    unmeasured_failure,
)
from infbench.schema import Cell, CellResult
from infbench.store import Store

PREFIX = "infbench-worker: "
#: Seconds of silence (no worker event) allowed on top of the cell timeout before the
#: worker is killed; covers loading a model.
STALL_GRACE_S = 600.0
#: Stall limit when no cell timeout is set.
DEFAULT_STALL_S = 3600.0


def container_spec(pm: Any, device: Any, engine: str) -> dict[str, Any]:
    """The plugin's container spec for ``engine`` on ``device``.

    Raises:
        ConfigError: no plugin provides an image for this engine on this device.
    """
    spec = pm.hook.infbench_container_spec(device=device, engine=engine)
    if not spec or not spec.get("image"):
        raise ConfigError(f"no worker image for engine {engine} on {device.vendor} ({device.model})",
                          hint="run it in-process with --executor inprocess, or use an engine the plugin's images "
                               "carry (`infbench containers list`)")
    return dict(spec)


def _local_paths(cells: list[Cell]) -> list[str]:
    """Models and datasets given as host paths (mounted read-only into the worker)."""
    paths = set()
    for c in cells:
        if Path(c.model).exists():
            paths.add(str(Path(c.model).resolve()))
        if c.dataset is not None and Path(c.dataset.path).exists():
            paths.add(str(Path(c.dataset.path).resolve()))
    return sorted(paths)


def read_no_follow(path: Path, offset: int = 0) -> bytes:
    """The bytes of ``path`` from ``offset``, refusing a symlink (the worker writes the
    folder: a planted ``cells.jsonl -> /etc/shadow`` must not be read on the host).

    Raises:
        OSError: missing, a symlink (ELOOP) or not a regular file.
    """
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _CellsTail:
    """Reads the complete lines appended to a worker's ``cells.jsonl`` since the last read."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def read(self) -> list[CellResult]:
        try:
            data = read_no_follow(self.path, self.offset)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for line in data[:end].splitlines():
            if line.strip():
                try:
                    out.append(CellResult.model_validate_json(line))
                except ValueError:
                    pass
        return out


def _batches(plan: Plan, pm: Any) -> list[tuple[dict[str, Any], list[Group]]]:
    out: list[tuple[dict[str, Any], list[Group]]] = []
    for g in plan.groups:
        spec = container_spec(pm, plan.device, g.engine)
        if out and out[-1][0] == spec:
            out[-1][1].append(g)
        else:
            out.append((spec, [g]))
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

    def __init__(self, pm: Any, runtime: Any, provenance: dict[str, Any], job_root: Path | None = None):
        self.pm, self.runtime, self.provenance, self.job_root = pm, runtime, provenance, job_root

    def run(self, plan: Plan, store: Store, options: RunOptions | None = None,
            observer: Observer = ignore) -> RunSummary:
        """Run every cell of ``plan`` in the plugin's images; same contract as
        :meth:`~infbench.executors.inprocess.InProcessExecutor.run`, plus
        :class:`~infbench.executors.events.Note` (e.g. a privileged container) and
        :class:`~infbench.executors.events.LogLine` (worker log lines that are not events).

        Returns:
            The :class:`~infbench.run.RunSummary` (``status`` completed,
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
        batches = _batches(plan, pm)
        for spec, _ in batches:  # fail before starting anything if an image is missing or skewed
            runtime.check_image(spec["image"])
        root = Path(self.job_root or default_home() / "jobs")
        cache = default_home() / "cache"
        home = default_home() / "worker-home"
        stall_s = (opts.cell_timeout_s + STALL_GRACE_S) if opts.cell_timeout_s else DEFAULT_STALL_S
        provenance_set = False
        attempt = 0
        with started_run(store, {**host_provenance, "runtime": runtime.name}, run_command()) as summary:
            run_id = summary.run_id
            done = set() if opts.force else store.finished_cell_ids()
            for spec, groups in batches:
                remaining = pending_cells([c for g in groups for c in g.cells], device, done, summary, observer)
                remaining = [c for c in remaining if take_cell(store, run_id, c, device, summary, observer, opts.force)]
                by_hash = {c.spec_hash(): c for c in remaining}
                group_of = {g.label(): g for g in groups}
                while remaining:
                    attempt += 1
                    job = root / f"{run_id}-{attempt}"
                    _write_job(plan, remaining, opts, job)
                    res = _attempt(runtime, spec, job, home, cache, f"infbench-{run_id}-{attempt}", remaining,
                                   stall_s, by_hash, group_of, store, run_id, summary, observer)
                    if not provenance_set and res["provenance"]:
                        store.update_provenance(run_id, {**res["provenance"], "container": res["description"],
                                                         "launcher": host_provenance, "runtime": runtime.name})
                        provenance_set = True
                    remaining = [c for c in remaining if c.spec_hash() not in res["finished"]]
                    if not remaining:
                        break
                    if res["exit_code"] == 2 and not res["finished"]:
                        # The worker refused the spec (no device, bad spec): every attempt would.
                        victims, why = list(remaining), "refused the job"
                    else:
                        victims, why = [by_hash.get(res["running"] or "") or remaining[0]], res["reason"]
                    tail = " | ".join(res["tail"][-5:])
                    for c in victims:
                        r = unmeasured_failure(c, device, f"worker {why} (exit status {res['exit_code']}) during "
                                                          f"this cell; last log lines: {tail}", res["started_at"])
                        record(store, run_id, summary, r, observer)
                    remaining = [c for c in remaining if c not in victims]
        return summary


def _write_job(plan: Plan, cells: list[Cell], opts: RunOptions, job: Path) -> None:
    """Write ``job/spec.json`` for ``cells``, keeping the plan's groups and order."""
    from infbench.worker import write_spec

    want = {c.spec_hash() for c in cells}
    groups = [Group(g.model, g.engine, g.dtype, g.tensor_parallel_size, [c for c in g.cells if c.spec_hash() in want])
              for g in plan.groups]
    write_spec(Plan(device=plan.device, groups=[g for g in groups if g.cells]), job / "spec.json", opts)


def _attempt(runtime: Any, spec: dict[str, Any], job: Path, home: Path, cache: Path, name: str, cells: list[Cell],
             stall_s: float, by_hash: dict[str, Cell], group_of: dict[str, Group], store: Store, run_id: str,
             summary: RunSummary, observer: Observer) -> dict[str, Any]:
    """One worker: start it, follow its log, store cells as they finish, remove it."""
    import json

    started_at = time.time()
    mounts = _local_paths(cells)
    handle = runtime.start(spec, job, home, cache, name, extra_mounts=mounts)
    for n in handle.notes:
        observer(Note(n))
    tail_cells = _CellsTail(job / "out" / "cells.jsonl")
    finished: set[str] = set()
    running: str | None = None
    log_tail: collections.deque[str] = collections.deque(maxlen=40)
    stalled = threading.Event()
    timer: list[threading.Timer] = []

    def arm() -> None:
        if timer:
            timer[0].cancel()
            timer.clear()

        def fire() -> None:
            stalled.set()
            handle.kill()

        t = threading.Timer(stall_s, fire)
        t.daemon = True
        t.start()
        timer.append(t)

    def take() -> None:
        for r in tail_cells.read():
            if r.spec_hash in finished:
                continue
            finished.add(r.spec_hash)
            record(store, run_id, summary, r, observer)

    exit_code = None
    try:
        arm()
        with (job / "worker.log").open("a") as log:
            for line in handle.lines():
                log.write(line + "\n")
                log.flush()
                if not line.startswith(PREFIX):
                    log_tail.append(line)
                    observer(LogLine(line))
                    continue
                arm()
                kind, _, rest = line[len(PREFIX):].partition(" ")
                if kind == "loading" and rest in group_of:
                    observer(GroupLoading(group_of[rest]))
                elif kind == "cell":
                    running = rest.split(" ", 1)[0]
                    if running in by_hash:
                        observer(CellStarted(by_hash[running]))
                elif kind == "done":
                    take()
                    running = None
                else:
                    log_tail.append(line)
        exit_code = handle.wait()
        take()
    except KeyboardInterrupt:
        handle.kill()
        take()
        raise
    finally:
        if timer:
            timer[0].cancel()
        handle.cleanup()
    prov = None
    try:
        prov = json.loads(read_no_follow(job / "out" / "provenance.json")).get("provenance")
    except (OSError, ValueError, AttributeError):
        pass
    if stalled.is_set():
        reason = (f"reported nothing for {stall_s:.0f} s and was killed "
                  f"(stall limit: --cell-timeout + {STALL_GRACE_S:.0f} s)")
    elif exit_code == 137:
        reason = "was killed (SIGKILL: out of memory, `docker kill`, or the OOM killer)"
    elif exit_code is None:
        reason = "vanished (its exit status could not be read)"
    else:
        reason = "exited"
    return {"finished": finished, "running": running, "exit_code": exit_code, "reason": reason,
            "tail": list(log_tail), "provenance": prov, "description": handle.description,
            "started_at": started_at}
