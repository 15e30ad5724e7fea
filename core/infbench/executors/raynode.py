"""What the Ray executor runs on a node (:mod:`infbench.executors.ray`), kept free of
Ray so it runs and is tested as plain Python.

* :func:`detect_here`: the node's devices, resources-independent facts and provenance
  (the fleet detection task).
* :func:`group_events`: one group's cells through the worker contract
  (:mod:`infbench.worker`) on this node, as a stream of plain dicts the driver turns into
  stored cells and run events. The worker is ``infbench worker --spec --out`` in a child
  process (in-process engines, the node's own Python), or the plugin's image through the
  node's container runtime; either way its ``infbench-worker:`` log lines mark progress
  and each finished cell is read from its ``cells.jsonl`` and sent on at once.

Everything it writes (spec, worker output, dummy GGUF and HF folders) goes under the
node's own ``$INFBENCH_HOME``: no shared file system is assumed.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infbench.data.paths import default_home

PREFIX = "infbench-worker: "
#: Seconds without a worker event (on top of the cell timeout) before the worker is
#: killed as stalled; covers loading a model.
STALL_GRACE_S = 600.0
DEFAULT_STALL_S = 3600.0


def detect_here() -> dict[str, Any]:
    """Detect this node's devices (every plugin) and describe the node.

    Returns:
        The JSON-ready fields of :class:`infbench.fleet.NodeReport` except ``node_id``,
        ``ip`` and ``resources`` (Ray's, filled by the caller): hostname, devices,
        infbench and store schema versions, provenance, ``engines_missing``
        (engine -> modules it lacks here) and plugin ``errors``.
    """
    from infbench.data.version import SCHEMA_VERSION, __version__
    from infbench.detect import detect
    from infbench.plan import engine_specs
    from infbench.plugins import build_plugin_manager
    from infbench.run import provenance

    pm = build_plugin_manager()
    det = detect(pm)
    missing = {}
    for name, spec in engine_specs(pm).items():
        if spec.factory is None:
            missing[name] = ["adapter"]
        elif spec.missing():
            missing[name] = spec.missing()
    return {"hostname": socket.gethostname(), "devices": [d.model_dump() for d in det.devices],
            "infbench_version": __version__, "schema_version": SCHEMA_VERSION,
            "provenance": provenance(det, pm), "engines_missing": missing, "errors": [list(e) for e in det.errors]}


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Make the kernel kill this child when the process that started it dies (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ProcessWorker:
    """``infbench worker --spec JOB/spec.json --out JOB/out`` in a child process of this
    one, with the handle interface of a container runtime's worker (``lines``, ``wait``,
    ``kill``, ``cleanup``, ``description``, ``notes``).

    The child has its own process group (killed whole) and dies with this process.
    """

    def __init__(self, job: Path):
        cmd = [sys.executable, "-m", "infbench.cli", "worker", "--spec", str(job / "spec.json"),
               "--out", str(job / "out")]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, bufsize=1, start_new_session=True,
                                     preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.description = {"runtime": "process", "pid": self.proc.pid, "python": sys.executable}
        self.notes: list[str] = []

    def lines(self) -> Iterator[str]:
        """The worker's output lines (stdout and stderr), until it exits."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            yield line.rstrip("\n")

    def wait(self) -> int | None:
        """Its exit status."""
        return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL its process group."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def cleanup(self) -> None:
        """Kill it if it still runs and close its pipe."""
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _missing_models(cells: list[Any]) -> list[str]:
    """Models of ``cells`` this node cannot resolve (a real model path absent here)."""
    from infbench.errors import ConfigError
    from infbench.models import resolve

    out = []
    for m in dict.fromkeys(c.model for c in cells):
        try:
            resolve(m)
        except ConfigError:
            out.append(m)
    return out


def group_events(spec_json: str, job_name: str, container: dict[str, Any] | None = None,
                 node: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Run a worker spec's cells on this node and describe what happens, as it happens.

    Args:
        spec_json: a :class:`~infbench.worker.WorkerSpec` as JSON (one group's cells).
        job_name: the job folder's name under ``$INFBENCH_HOME/jobs`` on this node.
        container: ``{"runtime": "docker"|"apptainer", "spec": <plugin container spec>}``
            to run the worker in the plugin's image; None for ``infbench worker`` in a child
            process.
        node: ``{"node_id", "hostname", "ip"}`` of this node, echoed in the first event.

    Yields:
        ``{"event": "node", "node_id", "hostname", "pid", "job"}`` first; then
        ``{"event": "loading", "group": label}``, ``{"event": "cell", "spec_hash": h}``,
        ``{"event": "result", "result": <CellResult JSON>}`` (each finished cell, read
        from ``cells.jsonl`` as soon as its ``done`` line appears); and last either
        ``{"event": "refused", "error": why}`` (nothing ran: a model missing here, no
        image) or ``{"event": "exit", "exit_code", "reason", "running": spec hash of the
        cell in progress or None, "tail": last log lines, "provenance": the worker's}``.

    Stopping the generator (``close()``, or the ``KeyboardInterrupt`` Ray raises in a
    cancelled task) kills the worker (its process group, or the container).
    """
    from infbench.errors import InfbenchError
    from infbench.executors.container import _CellsTail, _local_paths
    from infbench.worker import WorkerSpec

    home = default_home()
    job = home / "jobs" / job_name
    job.mkdir(parents=True, exist_ok=True)
    node = node or {}
    host = node.get("hostname") or socket.gethostname()
    yield {"event": "node", **node, "hostname": host, "pid": os.getpid(), "job": str(job)}
    spec = WorkerSpec.model_validate_json(spec_json)
    missing = _missing_models(spec.cells)
    if missing:
        yield {"event": "refused", "error": f"model {', '.join(missing)} not found on node {host}: a real model must "
                                            "exist at the same path on every node that runs it (no shared file "
                                            "system is assumed; copy it there or use a zoo name)"}
        return
    (job / "spec.json").write_text(spec_json)
    opts = spec.options
    stall_s = (opts.cell_timeout_s + STALL_GRACE_S) if opts.cell_timeout_s else DEFAULT_STALL_S
    try:
        if container:
            from infbench.runtimes import container_runtime

            rt = container_runtime(container["runtime"])
            rt.check_image(container["spec"]["image"])
            handle = rt.start(container["spec"], job, home / "worker-home", home / "cache", f"infbench-{job_name}",
                              extra_mounts=_local_paths(spec.cells))
        else:
            handle = ProcessWorker(job)
    except InfbenchError as exc:
        yield {"event": "refused", "error": f"on node {host}: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")}
        return
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        try:
            for line in handle.lines():
                lines.put(line)
        finally:
            lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    tail_cells = _CellsTail(job / "out" / "cells.jsonl")
    log_tail: collections.deque[str] = collections.deque(maxlen=40)
    running: str | None = None
    sent: set[str] = set()
    stalled = False
    last = time.monotonic()

    def results() -> Iterator[dict[str, Any]]:
        for r in tail_cells.read():
            if r.spec_hash not in sent:
                sent.add(r.spec_hash)
                yield {"event": "result", "result": r.model_dump_json()}

    try:
        with (job / "worker.log").open("a") as log:
            while True:
                try:
                    line = lines.get(timeout=0.5)  # short waits: a cancel's KeyboardInterrupt lands here
                except queue.Empty:
                    if time.monotonic() - last > stall_s:
                        stalled = True
                        handle.kill()
                    continue
                if line is None:
                    break
                log.write(line + "\n")
                log.flush()
                if not line.startswith(PREFIX):
                    log_tail.append(line)
                    continue
                last = time.monotonic()
                kind, _, rest = line[len(PREFIX):].partition(" ")
                if kind == "loading":
                    yield {"event": "loading", "group": rest}
                elif kind == "cell":
                    running = rest.split(" ", 1)[0]
                    yield {"event": "cell", "spec_hash": running}
                elif kind == "done":
                    yield from results()
                    running = None
                else:
                    log_tail.append(line)
        code = handle.wait()
        yield from results()
    finally:
        handle.cleanup()
    prov = None
    with contextlib.suppress(OSError, ValueError):
        prov = json.loads((job / "out" / "provenance.json").read_text()).get("provenance")
    if stalled:
        reason = (f"reported nothing for {stall_s:.0f} s and was killed "
                  f"(stall limit: --cell-timeout + {STALL_GRACE_S:.0f} s)")
    elif code in (137, -9):
        reason = "was killed (SIGKILL: out of memory or the OOM killer)"
    else:
        reason = "exited"
    yield {"event": "exit", "exit_code": code, "reason": reason, "running": running, "tail": list(log_tail),
           "provenance": prov, "description": handle.description}
