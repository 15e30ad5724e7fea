"""What the Ray executor runs on a node (:mod:`infbench.execution.executors.ray`), kept free of
Ray so it runs and is tested as plain Python.

* :func:`detect_here`: the node's devices, resources-independent facts and provenance
  (the fleet detection task).
* :func:`hand_off_here`: cells of a running worker on this node handed to another
  worker (the driver splitting its group, :mod:`infbench.data.handoff`).
* :func:`group_events`: one group's cells through the worker contract
  (:mod:`infbench.execution.worker`) on this node, as a stream of plain dicts the driver turns into
  stored cells and run events. The worker is ``infbench worker --spec --out`` in a child
  process (in-process engines, the node's own Python), or the plugin's image through the
  node's container runtime; either way its ``infbench-worker:`` log lines mark progress
  and each finished cell is read from its ``cells.jsonl`` and sent on at once.

Everything it writes (spec, worker output, dummy GGUF and HF folders) goes under the
node's own ``$INFBENCH_HOME``: no shared file system is assumed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infbench.contract.manager import build_plugin_manager
from infbench.contract.registry import engine_specs
from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.handoff import hand_off
from infbench.data.models import resolve
from infbench.data.paths import default_home
from infbench.data.version import SCHEMA_VERSION, __version__
from infbench.data.worker_spec import WorkerSpec
from infbench.detect import detect
from infbench.execution.bookkeeping import provenance
from infbench.execution.executors.container import _local_paths, scenario_paths
from infbench.execution.executors.follow import follow_worker, stall_limit
from infbench.runtimes import container_runtime

#: The environment variable naming the Ray node a worker runs on (node id, hex).
NODE_ENV = "INFBENCH_RAY_NODE"


def detect_here() -> dict[str, Any]:
    """Detect this node's devices (every plugin) and describe the node.

    Returns:
        The JSON-ready fields of :class:`infbench.execution.executors.fleet.NodeReport` except ``node_id``,
        ``ip`` and ``resources`` (Ray's, filled by the caller): hostname, devices,
        infbench and store schema versions, provenance, ``engines_missing``
        (engine -> modules it lacks here) and plugin ``errors``.
    """
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
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ProcessWorker:
    """``infbench worker --spec JOB/spec.json --out JOB/out`` in a child process of this
    one, with the handle interface of a container runtime's worker (``lines``, ``wait``,
    ``kill``, ``cleanup``, ``description``, ``notes``).

    The child has its own process group (killed whole) and dies with this process; it gets
    the Ray node it runs on in ``$INFBENCH_RAY_NODE`` (its spread load's clients go to the
    other nodes first, :mod:`infbench.execution.executors.spread`).
    """

    def __init__(self, job: Path, node_id: str | None = None):
        cmd = [sys.executable, "-m", "infbench.cli", "worker", "--spec", str(job / "spec.json"),
               "--out", str(job / "out")]
        env = {**os.environ, **({NODE_ENV: node_id} if node_id else {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, bufsize=1, start_new_session=True, env=env,
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


def hand_off_here(job_name: str, spec_hashes: list[str]) -> list[str]:
    """Hand the cells ``spec_hashes`` of the worker of job ``job_name`` on this node to
    another worker (:func:`infbench.data.handoff.hand_off`): the ones it had not taken, in
    order. Works before the worker started too (it then finds them taken).

    Raises:
        ValueError: a job name with a path separator, or a malformed spec hash.
    """
    if not job_name or "/" in job_name or job_name in (".", ".."):
        raise ValueError(f"not a job name: {job_name!r}")
    return hand_off(default_home() / "jobs" / job_name / "out", spec_hashes)


def _missing_models(cells: list[Any]) -> list[str]:
    """Models of ``cells`` this node cannot resolve (a real model path absent here)."""
    out = []
    for m in dict.fromkeys(c.model for c in cells):
        try:
            resolve(m)
        except ConfigError:
            out.append(m)
    return out


def group_events(spec_json: str, job_name: str, container: dict[str, Any] | None = None,
                 node: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Run a worker spec (one group's part of a scenario) on this node and describe what
    happens, as it happens.

    Args:
        spec_json: a :class:`~infbench.execution.worker.WorkerSpec` as JSON (one group's cells and scenario).
        job_name: the job folder's name under ``$INFBENCH_HOME/jobs`` on this node.
        container: ``{"runtime": "docker"|"apptainer", "spec": <plugin container spec>}``
            to run the worker in the plugin's image; None for ``infbench worker`` in a child
            process.
        node: ``{"node_id", "hostname", "ip"}`` of this node, echoed in the first event.

    Yields:
        ``{"event": "node", "node_id", "hostname", "pid", "job"}`` first; then
        ``{"event": "loading", "group": label}``, ``{"event": "cell", "spec_hash": h,
        "cell": <Cell JSON or None>}``, ``{"event": "timed", "spec_hash": h}`` (its warm-up done),
        ``{"event": "result", "result": <CellResult JSON>}``
        (each finished cell, read from ``cells.jsonl`` as soon as its ``done`` line
        appears), ``{"event": "score", "key", "label"}``, ``{"event": "quality", "result":
        <PerplexityResult JSON>}``; and last either ``{"event": "refused", "error": why}``
        (nothing ran: a model missing here, no image) or ``{"event": "exit", "exit_code",
        "reason", "running": {"cell": <JSON>} or {"key": k} or None, "tail": last log lines,
        "provenance": the worker's provenance.json}``.

    Stopping the generator (``close()``, or the ``KeyboardInterrupt`` Ray raises in a
    cancelled task) kills the worker (its process group, or the container).
    """
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
    try:
        if container:
            rt = container_runtime(container["runtime"])
            rt.check_image(container["spec"]["image"])
            handle = rt.start(container["spec"], job, home / "worker-home", home / "cache", f"infbench-{job_name}",
                              extra_mounts=_local_paths(spec.cells, scenario_paths(spec.scenario)))
        else:
            handle = ProcessWorker(job, node.get("node_id"))
    except InfbenchError as exc:
        yield {"event": "refused", "error": f"on node {host}: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")}
        return
    for kind, payload in follow_worker(handle, job, stall_limit(spec.config.sweep.cell_timeout_s)):
        if kind == "loading":
            yield {"event": "loading", "group": payload}
        elif kind == "cell":
            yield {"event": "cell", "spec_hash": payload[0],
                   "cell": payload[1].model_dump_json() if payload[1] is not None else None}
        elif kind == "timed":
            yield {"event": "timed", "spec_hash": payload}
        elif kind == "result":
            yield {"event": "result", "result": payload.model_dump_json()}
        elif kind == "score":
            yield {"event": "score", "key": payload[0], "label": payload[1]}
        elif kind == "quality":
            yield {"event": "quality", "result": payload.model_dump_json()}
        elif kind == "exit":
            r = payload.running
            running = ({"cell": r.model_dump_json()} if r is not None and not isinstance(r, str)
                       else {"key": r} if isinstance(r, str) else None)
            yield {"event": "exit", "exit_code": payload.exit_code, "reason": payload.reason, "running": running,
                   "tail": payload.tail, "provenance": payload.provenance, "description": handle.description}
