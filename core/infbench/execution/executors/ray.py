"""The Ray executor: a sweep's groups spread over the nodes of a Ray cluster.

The driver (the process running ``infbench run --executor ray``) connects to an existing
cluster (``--ray-address ADDR`` or ``RAY_ADDRESS``; it never starts one), then:

1. **Fleet detection** (:func:`detect_fleet`): one task pinned to every alive node runs
   every plugin's detection there (:func:`~infbench.execution.executors.raynode.detect_here`);
   the reports form device types (:class:`~infbench.execution.executors.fleet.Fleet`).
2. **Planning**: the sweep is planned once per selected device type
   (:func:`~infbench.execution.executors.fleet.plan_fleet`); cell ids include the device as everywhere.
3. **Scheduling**: each group's pending cells are one Ray task, pinned to a node of its
   device type (``NodeAffinitySchedulingStrategy(node_id, soft=False)``), asking for
   ``num_gpus`` = ``tensor_parallel_size`` on GPU nodes and for all CPUs elsewhere
   (:func:`~infbench.execution.executors.fleet.task_resources`); the driver's
   :class:`~infbench.execution.executors.fleet.Scheduler` hands groups to free nodes as others finish.
   **Splitting**: a node of a type left free while a sweep's part of that type still has
   cells not started takes the tail of those cells as a new part (the same model loaded
   there, the same cell ids and claims), when the cells' estimated time exceeds the extra
   load (:class:`~infbench.execution.executors.fleet.Splitter`). A part not started yet just loses the cells;
   a running worker first hands them off (:func:`~infbench.execution.executors.raynode.hand_off_here`,
   a task on its node: each cell goes to whichever of the two takes it first,
   :mod:`infbench.data.handoff`), so every cell is measured by one worker.
4. **On the node**: the task runs the worker contract there
   (:func:`~infbench.execution.executors.raynode.group_events`: ``infbench worker`` in a child
   process, or the plugin's image through the node's container runtime) and streams
   each finished cell back (a Ray streaming generator). The driver stores each cell as
   it arrives: the store has one writer.
5. **Faults**: a node that dies mid-group keeps its finished cells; the rest go back to
   the queue for another node of the same type, or, when none is left, are stored failed
   with the node's error. A worker that dies on a live node fails the cell it was on
   (like the container executor) and the rest run again.
6. **Interrupts**: Ctrl-C or SIGTERM cancels every task (the node kills its worker),
   stores what already finished, marks the run ``interrupted``; rerunning resumes.

Every stored cell's device carries ``properties["ray_node"] = {"node_id", "hostname",
"ip"}``, and the run's provenance has ``ray.nodes[node_id]`` with that node's own
provenance (the worker's: its libraries, devices, git sha); read both with
:func:`infbench.store.nodes.cell_node`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from infbench.data.errors import ConfigError, EngineUnavailable
from infbench.data.events import CellStarted, CellTimed, GroupLoading, NodeLost, Note, Observer, ScoreStarted, ignore
from infbench.data.groups import Plan
from infbench.data.run import RunOptions, RunSummary
from infbench.data.schema import Cell, CellResult
from infbench.data.scores import PerplexityResult
from infbench.data.secrets import redact
from infbench.data.version import SCHEMA_VERSION
from infbench.data.worker_spec import make_spec
from infbench.execution.bookkeeping import conclude, run_command, started_run
from infbench.execution.executors.container import container_spec
from infbench.execution.executors.fleet import (
    Estimates,
    Fleet,
    NodeReport,
    Scheduler,
    Split,
    Splitter,
    WorkItem,
    longest_first,
    prediction,
    split_item,
    task_resources,
)
from infbench.execution.executors.follow import WorkerExit
from infbench.execution.executors.raynode import detect_here, group_events, hand_off_here
from infbench.execution.scenarios import Scenario, make_scenario
from infbench.execution.session import RunContext
from infbench.store import Store

if TYPE_CHECKING:
    from infbench.contract.manager import PluginManager


#: Seconds the driver waits for cancelled tasks to stop before force-killing them.
CANCEL_GRACE_S = 15.0
#: Seconds to decide whether a node whose task failed is still alive.
NODE_CHECK_S = 60.0
#: Tasks started for one group before its remaining cells are stored failed.
MAX_ATTEMPTS = 4
#: Seconds the driver waits for a hand-off task on a worker's node (splitting a running part).
HANDOFF_TIMEOUT_S = 120.0


def import_ray() -> Any:
    """Import Ray, or raise a :class:`ConfigError` saying how to install it.

    An ``amdsmi`` binding installed without ROCm's ``libamd_smi.so`` raises ``KeyError``
    on import, which Ray 2.60's accelerator probe does not catch; such a binding is
    hidden from Ray (it could not work here anyway).
    """
    try:
        import amdsmi  # noqa: F401
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - KeyError('libamd_smi.so'): the library is missing
        sys.modules["amdsmi"] = None  # type: ignore[assignment]
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--executor ray needs Ray", hint="pip install 'infbench[ray]'") from exc
    return ray


def ray_address(address: str | None) -> str:
    """``--ray-address``, else ``RAY_ADDRESS``.

    Raises:
        ConfigError: neither is set (infbench connects to a running cluster; it never
            starts one).
    """
    addr = address or os.environ.get("RAY_ADDRESS")
    if not addr:
        raise ConfigError("--executor ray needs the address of a running Ray cluster",
                          hint="pass --ray-address HOST:PORT (the head's GCS address, `ray start --head` prints it) "
                               "or set RAY_ADDRESS; docs/cluster.md shows how to start one")
    return addr


#: Longest wait (s) for a Ray cluster to answer at ``--ray-address`` before the command
#: fails; ``INFBENCH_RAY_CONNECT_TIMEOUT`` changes it.
CONNECT_TIMEOUT_S = 60.0


def connect_timeout_s() -> float:
    """``$INFBENCH_RAY_CONNECT_TIMEOUT`` (s) when set to a positive number, else
    :data:`CONNECT_TIMEOUT_S`."""
    try:
        v = float(os.environ.get("INFBENCH_RAY_CONNECT_TIMEOUT") or CONNECT_TIMEOUT_S)
    except ValueError:
        return CONNECT_TIMEOUT_S
    return v if 0 < v < 1e6 else CONNECT_TIMEOUT_S


def _bounded(fn: Any, limit_s: float) -> tuple[bool, Any]:
    """Run ``fn()`` in a daemon thread for at most ``limit_s``: ``(finished, result or
    exception)``; a call that does not finish is left behind (it holds no lock of ours)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box.append(exc)

    t = threading.Thread(target=run, name="infbench-ray-probe", daemon=True)
    t.start()
    t.join(limit_s)
    return (not t.is_alive()), (box[0] if box else None)


def probe_address(addr: str, limit_s: float) -> None:
    """Check within ``limit_s`` seconds that a Ray cluster answers at ``addr``: a TCP
    connection to HOST:PORT, then (for a GCS address, not ``ray://``) the cluster's id
    from its GCS. ``auto`` and ``local`` are not probed.

    Raises:
        ConfigError: a malformed address, nothing listening, no answer in time, or a
            listener that is not a Ray GCS, naming the address and how to check it.
    """
    if addr in ("auto", "local"):
        return
    shown = redact(addr)  # every message and suggested command: user info never printed
    hint = (f"check the head is up and reachable from here: `ray status --address {shown}` (`ray start --head` "
            "prints the address: the head's IP and GCS port, default 6379); infbench waits at most "
            f"{limit_s:g} s (INFBENCH_RAY_CONNECT_TIMEOUT)")
    hostport = addr.split("://", 1)[1] if "://" in addr else addr
    host, _, port_s = hostport.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ConfigError(f"--ray-address {shown!r} is not HOST:PORT", hint=hint)
    t0 = time.monotonic()

    def tcp() -> None:
        with socket.create_connection((host, int(port_s)), timeout=limit_s):
            pass

    done, res = _bounded(tcp, limit_s)
    if not done:
        raise ConfigError(f"cannot connect to the Ray cluster at {shown}: no answer within {limit_s:g} s", hint=hint)
    if isinstance(res, BaseException):
        why = res.strerror if isinstance(res, OSError) and res.strerror else str(res) or type(res).__name__
        raise ConfigError(f"cannot connect to the Ray cluster at {shown}: {redact(why)}", hint=hint)
    if "://" in addr:
        return  # a Ray Client server, not a GCS: ray.init checks it
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - a Ray without it: ray.init checks
        return
    left = max(1.0, limit_s - (time.monotonic() - t0))
    done, res = _bounded(lambda: GcsClient(address=f"{host}:{port_s}").cluster_id, left)
    if not done or isinstance(res, BaseException):
        why = f"no Ray GCS answered within {limit_s:g} s" if not done else f"not a Ray GCS ({str(res)[:200]})"
        raise ConfigError(f"cannot connect to the Ray cluster at {shown}: something listens there, but {redact(why)}",
                          hint=hint)


def _connected_address(ray: Any) -> str | None:
    """The GCS address (HOST:PORT) this process's Ray connection uses, or None if unknown."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - an older Ray or a client connection: unknown
        return None


def _same_address(asked: str, current: str) -> bool:
    """Whether ``--ray-address`` ``asked`` names the cluster at GCS ``current`` (HOST:PORT).

    ``auto``/``local`` count as the same (they mean "the cluster this machine knows"). A
    ``ray://`` address names a Ray Client server, whose port is not the GCS's, so it cannot be
    compared and never counts as the same: it is probed and connected to (issue 33's probe found a
    ``ray://`` address silently answered by the cluster this process was already connected to).
    """
    if asked in ("auto", "local"):
        return True
    if "://" in asked:
        return False
    return asked.strip().rstrip("/") == current.strip()


def connect(address: str | None, timeout_s: float | None = None) -> bool:
    """Connect this process to the Ray cluster at ``address`` (see :func:`ray_address`)
    unless it already is, after :func:`probe_address` (so an address where nothing or no
    Ray answers fails within ``timeout_s``, default :func:`connect_timeout_s`, instead of
    Ray's own retries of minutes).

    Returns:
        True if this call connected (the caller then disconnects with ``ray.shutdown()``).

    Raises:
        ConfigError: no address, or no Ray cluster answers there in time.
    """
    ray = import_ray()
    if ray.is_initialized():
        current = _connected_address(ray)
        if address is None or address in ("auto", "local"):
            return False
        if current is not None and _same_address(address, current):
            return False
        # Connected elsewhere (a library user's earlier cluster): the address asked for is
        # probed and connected to, never silently replaced by the one already open.
        probe_address(address, timeout_s or connect_timeout_s())
        ray.shutdown()
    addr = ray_address(address)
    probe_address(addr, timeout_s or connect_timeout_s())
    try:
        ray.init(address=addr, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"cannot connect to the Ray cluster at {redact(addr)}: {redact(str(exc))}",
                          hint=f"check with `ray status --address {redact(addr)}`; the address is the head's IP "
                               "and GCS port (default 6379)") from None
    return True


@functools.cache
def _tasks() -> tuple[Any, Any]:
    """The remote functions (defined on first use, so importing this module needs no Ray)."""
    ray = import_ray()

    @ray.remote(num_cpus=0, max_retries=0)
    def detect_node() -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {**detect_here(), "node_id": ctx.get_node_id()}

    @ray.remote(max_retries=0)
    def run_group(spec_json: str, job_name: str, container: dict[str, Any] | None,
                  node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from group_events(spec_json, job_name, container, node)

    return detect_node, run_group


@functools.cache
def _handoff_task() -> Any:
    """The remote function handing a running worker's cells to another one (a task pinned
    to the worker's node that reserves nothing; :func:`~infbench.execution.executors.raynode.hand_off_here`)."""
    ray = import_ray()

    @ray.remote(num_cpus=0, max_retries=0)
    def hand_off(job_name: str, spec_hashes: list[str]) -> list[str]:
        return hand_off_here(job_name, spec_hashes)

    return hand_off


def _affinity(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def detect_fleet(address: str | None = None, timeout_s: float = 300.0) -> Fleet:
    """Run device detection on every alive node of the cluster (connecting if needed).

    Args:
        address: the cluster (see :func:`ray_address`); ignored when already connected.
        timeout_s: how long to wait for every node's answer.

    Returns:
        The :class:`~infbench.execution.executors.fleet.Fleet`. A node that does not answer in time or whose
        task fails (infbench missing there) is listed with no devices and the error in
        its report's ``errors``.
    """
    ray = import_ray()
    connect(address)
    detect_node, _ = _tasks()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    refs = {n["NodeID"]: detect_node.options(scheduling_strategy=_affinity(n["NodeID"])).remote() for n in alive}
    reports = []
    deadline = time.monotonic() + timeout_s
    for n in alive:
        nid = n["NodeID"]
        base = {"node_id": nid, "hostname": n.get("NodeManagerHostname") or n.get("NodeName", ""),
                "ip": n.get("NodeManagerAddress", ""), "resources": dict(n.get("Resources") or {})}
        try:
            got = ray.get(refs[nid], timeout=max(1.0, deadline - time.monotonic()))
            reports.append(NodeReport.from_dict({**got, "ip": base["ip"], "resources": base["resources"]}))
        except Exception as exc:  # noqa: BLE001 - one node's failure must not hide the fleet
            reports.append(NodeReport.from_dict({**base, "errors": [("detect", f"{type(exc).__name__}: {exc}")]}))
    return Fleet.from_reports(reports, address=ray_address(address) if address or os.environ.get("RAY_ADDRESS")
                              else "")


@contextlib.contextmanager
def _sigterm_interrupts(before: Any) -> Iterator[None]:
    """While the run lasts, SIGTERM interrupts it like Ctrl-C.

    ``ray.init`` replaces the SIGTERM handler with one calling ``sys.exit``; this puts
    back the handler the process had before (``before``) if it was one of its own (a
    process-wide SIGTERM -> KeyboardInterrupt conversion), else (default handler, or Ray's
    from an earlier ``ray.init``) installs one raising ``KeyboardInterrupt``, and restores
    ``before`` afterwards.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    theirs = callable(before) and not getattr(before, "__module__", "").startswith("ray.")
    mine = before if theirs else interrupt
    current = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, mine)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before if before is not None else current)


class _Task:
    """One running group task: its item, node, job folder name, stream and what it has reported."""

    def __init__(self, item: WorkItem, node: NodeReport, gen: Any, job: str = ""):
        self.item, self.node, self.gen, self.job = item, node, gen, job
        self.running: Cell | str | None = None
        self.exited: dict[str, Any] | None = None
        self.ended = False
        self.loaded = False


class RayExecutor:
    """Run plans on a Ray cluster (see the module doc).

    Args:
        pm: the plugin manager (the container specs of ``container_runtime``).
        provenance: the driver's provenance (the run's, with ``ray`` added).
        ray_address: the cluster (``--ray-address``; default ``RAY_ADDRESS``).
        fleet: a fleet already detected (``infbench run`` detects it to plan); None:
            detect when :meth:`run` starts.
        container_runtime: ``docker`` or ``apptainer`` to run each group in the
            plugin's image with that runtime on its node; None: ``infbench worker`` in a
            child process on the node.
        job_prefix: prefix of the job folders on the nodes.
        split: split a sweep's groups over nodes left free (see the module doc); False:
            one task per group.
        estimates: the cell and load estimates splitting decides with (default: this
            run's observations, the store's durations, the calibrated prediction;
            :class:`~infbench.execution.executors.fleet.Estimates`).
    """

    name = "ray"

    def __init__(self, pm: PluginManager, provenance: dict[str, Any], ray_address: str | None = None,
                 fleet: Fleet | None = None, container_runtime: str | None = None, job_prefix: str = "ray",
                 split: bool = True, estimates: Estimates | None = None):
        self.pm, self.provenance, self.address = pm, provenance, ray_address
        self.fleet, self.container_runtime, self.job_prefix = fleet, container_runtime, job_prefix
        self.split, self.estimates = split, estimates
        self._est: Estimates | None = None

    # -- the run -------------------------------------------------------------------------
    def run(self, plan: Plan | list[Plan], store: Store, options: RunOptions | None = None,
            observer: Observer = ignore) -> RunSummary:
        """Run the scenario of ``plan`` (one plan, or one per device type) on the cluster;
        same contract as :meth:`~infbench.execution.executors.inprocess.InProcessExecutor.run`, plus
        :class:`~infbench.data.events.NodeLost` and events naming their node. Each
        part of the scenario (:meth:`~infbench.execution.scenarios.scenario.Scenario.parts`: a group's
        pending cells, a search, a perplexity measurement) is one task.

        Returns:
            The :class:`~infbench.execution.bookkeeping.RunSummary`.

        Raises:
            ConfigError: no cluster address, nothing answers there, a plan's device is on
                no node, or a node runs another store schema.
            EngineUnavailable: no node of a type has an engine of its plan.
            KeyboardInterrupt: Ctrl-C or SIGTERM, after cancelling every task, storing
                what finished and marking the run interrupted.
        """
        ray = import_ray()
        plans = [plan] if isinstance(plan, Plan) else list(plan)
        opts = options or RunOptions()
        before = signal.getsignal(signal.SIGTERM)
        connected = connect(self.address)
        try:
            with _sigterm_interrupts(before):
                return self._run(ray, plans, store, opts, observer)
        finally:
            if connected:
                ray.shutdown()

    def _check(self, fleet: Fleet, plans: list[Plan]) -> None:
        for p in plans:
            t = fleet.type_of(p.device)
            if t is None or not t.alive():
                raise ConfigError(f"no node of the Ray cluster has {p.device.vendor} {p.device.model} "
                                  f"x{p.device.count}", hint="see `infbench detect --ray-address ADDR`")
            for n in t.nodes:
                if n.schema_version != SCHEMA_VERSION:
                    raise ConfigError(f"node {n.name()} runs infbench {n.infbench_version} (store schema "
                                      f"{n.schema_version}); this driver has schema {SCHEMA_VERSION}",
                                      hint="install the same infbench on every node and the driver")
            for e in {g.engine for g in p.groups}:
                lacking = [n for n in t.nodes if e in n.engines_missing]
                if len(lacking) == len(t.nodes):
                    raise EngineUnavailable(
                        f"engine {e!r} is not usable on any node with {t.label()} (missing on {lacking[0].name()}: "
                        f"{', '.join(lacking[0].engines_missing[e])})", hint="install it on those nodes")

    def _run(self, ray: Any, plans: list[Plan], store: Store, opts: RunOptions, observer: Observer) -> RunSummary:
        fleet = self.fleet or detect_fleet(self.address)
        self._check(fleet, plans)
        if opts.load_nodes is not None and not opts.ray_address:  # the workers' spread clients join this cluster
            opts = replace(opts, ray_address=fleet.address or ray.get_runtime_context().gcs_address)
        nodes_prov = {n.node_id: {"hostname": n.hostname, "ip": n.ip, "provenance": n.provenance}
                      for n in fleet.nodes}
        ray_prov = {"address": fleet.address, "ray_version": ray.__version__, "nodes": nodes_prov,
                    "container_runtime": self.container_runtime}
        run_prov = {**self.provenance, "executor": "ray", "ray": ray_prov}
        outcome: dict[str, Any] = {}
        with started_run(store, run_prov, run_command()) as summary:  # no signal can leave the run `running`
            done = set() if opts.force else store.finished_cell_ids()
            items: list[WorkItem] = []
            contexts: dict[int, tuple[Scenario, RunContext]] = {}
            for p in plans:
                scenario = make_scenario(p)
                ctx = RunContext(self.pm, p.device, store, summary, opts, observer, done=done)
                # parts claim their known cells for this driver (the single writer) until stored, as the
                # container executor does: a second driver or `infbench run` on this store skips them
                for part in scenario.parts(ctx):
                    it = WorkItem(len(items), p.device, part.group, list(part.group.cells), part=part)
                    contexts[it.key] = (scenario, ctx)
                    items.append(it)

            def eligible(item: WorkItem, node: NodeReport) -> bool:
                return item.group.engine not in node.engines_missing

            events: queue.Queue[tuple[_Task, str, Any]] = queue.Queue()
            tasks: dict[int, _Task] = {}
            state: dict[str, Any] = {"prov_dirty": False, "outcome": outcome}

            def node_ctx(item: WorkItem, node: NodeReport | None) -> RunContext:
                _, ctx = contexts[item.key]
                if node is None:
                    return ctx
                return replace(ctx, node=node.name(),
                               stamp=lambda r: r.model_copy(update={"device": _on_node(r.device, node)}))

            def splits(item: WorkItem) -> bool:
                return (self.split and item.part is not None and contexts[item.key][0].splits
                        and bool(item.part.expected))

            def start(item: WorkItem, node: NodeReport) -> None:
                spec = _spec_json(item, opts, handoff=splits(item))
                container = self._container(item) if self.container_runtime else None
                res = task_resources(item.device, item.tensor_parallel_size, node, _uses_ray(opts))
                _, run_group = _tasks()
                item.part.attempts += 1
                job = f"{self.job_prefix}-{summary.run_id}-{item.key}-{item.attempts}"
                gen = run_group.options(scheduling_strategy=_affinity(node.node_id), **res).remote(
                    spec, job, container, {"node_id": node.node_id, "hostname": node.hostname, "ip": node.ip})
                t = _Task(item, node, gen, job)
                item.progress.reset()
                item.progress.started_at = time.monotonic()
                tasks[item.key] = t
                threading.Thread(target=_pump, args=(ray, t, events), daemon=True).start()

            def hand_off(item: WorkItem, cells: list[Cell]) -> list[Cell]:
                """Take ``cells`` from ``item``'s running worker: the ones it had not started."""
                t = tasks.get(item.key)
                if t is None:
                    return []
                try:
                    got = set(ray.get(_handoff_task().options(scheduling_strategy=_affinity(t.node.node_id)).remote(
                        t.job, [c.spec_hash() for c in cells]), timeout=HANDOFF_TIMEOUT_S))
                except Exception:  # noqa: BLE001 - the node is gone or slow: no split now
                    return []
                return [c for c in cells if c.spec_hash() in got]

            def split_now(fresh: list[tuple[WorkItem, NodeReport]]) -> list[tuple[WorkItem, NodeReport]]:
                """Split parts (``fresh``: about to start; or running) onto nodes left free."""
                out: list[tuple[WorkItem, NodeReport]] = []
                active = [it for it, _ in fresh] + [t.item for t in tasks.values() if t.item.part is not None]
                while (s := splitter.propose(active)) is not None and s.node is not None:
                    cells = hand_off(s.item, s.cells) if s.started else s.cells
                    if not cells:
                        s.item.progress.hold = True   # it started them meanwhile: until it reports again
                        continue
                    new = self._apply_split(s, cells, len(items) + len(out), contexts, observer)
                    sched.place(new, s.node)
                    out.append((new, s.node))
                    active.append(new)
                return out

            sched = Scheduler(fleet, [], eligible)
            try:
                runnable = []
                for it in items:
                    if sched.can_run(it):
                        runnable.append(it)
                        continue
                    scenario, _ = contexts[it.key]
                    scenario.after_crash(it.part, None, f"no node with {it.device.vendor} {it.device.model} has "
                                                        f"{it.tensor_parallel_size} device(s) and engine "
                                                        f"{it.group.engine}", True, node_ctx(it, None))
                self._est = self.estimates or self._estimates(store, items)
                sched = Scheduler(fleet, [], eligible)
                splitter = Splitter(sched, self._est, splits)
                if self.split:  # shares as far as the estimates go, longest first
                    while (s0 := splitter.initial(runnable)) is not None:
                        new0 = self._apply_split(s0, s0.cells, len(items), contexts, observer)
                        items.append(new0)
                        runnable.append(new0)
                    runnable = longest_first(runnable, self._est)
                for it in runnable:
                    sched.add(it)
                while sched.pending() or tasks:
                    fresh = sched.assign()
                    if self.split:
                        new = split_now(fresh)
                        items += [it for it, _ in new]
                        fresh += new
                    for item, node in fresh:
                        start(item, node)
                    try:
                        t, kind, payload = events.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    self._handle(ray, t, kind, payload, sched, tasks, contexts, node_ctx, observer, nodes_prov,
                                 state)
                    if state["prov_dirty"]:
                        store.update_provenance(summary.run_id, run_prov)
                        state["prov_dirty"] = False
            except KeyboardInterrupt:
                self._cancel(ray, tasks, events, sched, contexts, node_ctx, observer, nodes_prov, state)
                store.update_provenance(summary.run_id, run_prov)
                raise
            finally:
                if not outcome:
                    for scenario, _ in {id(sc): (sc, c) for sc, c in contexts.values()}.values():
                        outcome.update(scenario.concluded())
                conclude(store, summary, outcome, run_prov)
        return summary

    def _container(self, item: WorkItem) -> dict[str, Any]:
        return {"runtime": self.container_runtime, "spec": container_spec(self.pm, item.device, item.group.engine)}

    def _apply_split(self, s: Split, cells: list[Cell], key: int, contexts: dict[int, Any],
                     observer: Observer) -> WorkItem:
        """Move ``cells`` of ``s.item`` into a new work item (the scenario's split of its part)."""
        scenario, _ = contexts[s.item.key]
        part = scenario.split(s.item.part, cells)
        new = split_item(s.item, cells, key)
        new.group, new.part = part.group, part
        s.item.group = s.item.part.group
        contexts[key] = contexts[s.item.key]
        where = f"node {s.node.name()}" if s.node is not None else "a node of its type"
        observer(Note(f"{part.group.label()}: {len(cells)} cell(s) split off to {where} "
                      f"(estimated finish {s.before_s:.0f} s -> {s.after_s:.0f} s)"))
        return new

    def _estimates(self, store: Store, items: list[WorkItem]) -> Estimates:
        """This run's :class:`~infbench.execution.executors.fleet.Estimates`: the durations stored for its cells
        (newest ok attempt, warm-up included) and the calibrated prediction."""
        stored: dict[str, float] = {}
        try:
            db: Any = store.db
            for cid, t0, t1 in db.execute(
                    "SELECT cell_id, started_at, finished_at FROM cells WHERE status='ok' ORDER BY id"):
                if t0 is not None and t1 is not None and t1 > t0:
                    stored[cid] = t1 - t0
        except Exception:  # noqa: BLE001 - estimates are optional
            stored = {}
        return Estimates(prediction(self.pm), lambda it, c: stored.get(c.cell_id(it.device)))

    # -- events ---------------------------------------------------------------------------
    def _handle(self, ray: Any, t: _Task, kind: str, payload: Any, sched: Scheduler, tasks: dict[int, _Task],
                contexts: dict[int, Any], node_ctx: Any, observer: Observer, nodes_prov: dict[str, Any],
                state: dict[str, Any]) -> None:
        item, node = t.item, t.node
        where = node.name()
        scenario, _ = contexts[item.key]
        ctx = node_ctx(item, node)
        if kind == "event":
            ev = payload
            e = ev.get("event")
            if e == "loading":
                observer(GroupLoading(item.group, where))
            elif e == "cell":
                cell = Cell.model_validate_json(ev["cell"]) if ev.get("cell") else next(
                    (c for c in item.part.group.cells if c.spec_hash() == ev.get("spec_hash")), None)
                t.running = cell
                self._progress(t, cell)
                if cell is not None:
                    observer(CellStarted(cell, where))
            elif e == "timed":
                if t.running is not None and not isinstance(t.running, str) \
                        and t.running.spec_hash() == ev.get("spec_hash"):
                    observer(CellTimed(t.running, where))
            elif e == "score":
                t.running = ev["key"]
                observer(ScoreStarted(ev.get("label", ""), ev["key"], where))
            elif e in ("result", "quality"):
                if e == "result":
                    r: Any = CellResult.model_validate_json(ev["result"])
                    ctx.record(r)
                    self._finished(t, r)
                else:
                    r = PerplexityResult.model_validate_json(ev["result"])
                    ctx.record_quality(r)
                scenario.accept(item.part, r)
                t.running = None
            elif e == "refused":
                scenario.after_crash(item.part, None, ev["error"], True, ctx)
                item.part = None
            elif e == "exit":
                t.exited = ev
                prov = ev.get("provenance") or {}
                if prov.get("provenance"):
                    nodes_prov.setdefault(node.node_id, {})["provenance"] = prov["provenance"]
                    state["prov_dirty"] = True
                if isinstance(prov.get("scenario"), dict):
                    state["outcome"].update(prov["scenario"])
                self._exited(item, ev, t, scenario, ctx, where)
            return
        # the stream ended: ``payload`` is None, or the exception that ended it
        t.ended = True
        tasks.pop(item.key, None)
        sched.release(item)
        item.progress.reset()
        if item.part is None:
            return
        if payload is None:  # what a worker that died left (``_exited``), or all of it when no exit came
            why = "the task ended without running them" if t.exited is None else "the worker died"
            self._again(item, sched, scenario, ctx, why)
            return
        exc = payload
        if _node_dead(ray, exc, node.node_id):
            err = f"node {where} was lost: {type(exc).__name__}: {_first_line(exc)}"
            observer(NodeLost(where, err))
            sched.lose(node.node_id)
            rest = scenario.resume(item.part)
            if rest is None:
                item.part = None
                return
            item.part, item.cells = rest, list(rest.group.cells)
            if not sched.can_run(item):
                scenario.after_crash(rest, None, err + f"; no other alive node has {item.device.vendor} "
                                                       f"{item.device.model}", True, ctx)
                item.part = None
                return
            sched.requeue(item)
            return
        err = f"task failed on node {where}: {type(exc).__name__}: {_first_line(exc)}"
        item.part = scenario.after_crash(item.part, t.running, err, False, ctx) if t.running is not None \
            else item.part
        self._again(item, sched, scenario, ctx, err)

    def _progress(self, t: _Task, cell: Cell | None) -> None:
        """A cell started on ``t``'s worker; its first one ends the part's model load, whose
        time (from the task's start) feeds the estimates."""
        p, now = t.item.progress, time.monotonic()
        if not t.loaded and p.started_at is not None and self._est is not None:
            self._est.observe_load(t.item, now - p.started_at)
        t.loaded = True
        p.cell, p.cell_at, p.hold = cell, now, False

    def _finished(self, t: _Task, r: CellResult) -> None:
        """A cell came back from ``t``'s worker: its time (warm-up included) feeds the estimates."""
        p = t.item.progress
        p.done.add(r.spec_hash)
        p.cell, p.cell_at, p.hold = None, None, False
        if r.status == "ok" and self._est is not None:
            self._est.observe_cell(t.item, r.cell, r.finished_at - r.started_at)

    @staticmethod
    def _exited(item: WorkItem, ev: dict[str, Any], t: _Task, scenario: Scenario, ctx: RunContext,
                where: str) -> None:
        """The worker ended: done when it ran its whole spec; else the scenario stores what it
        was on as failed and keeps what is left in ``item.part`` (run again by ``_again``)."""
        r = ev.get("running") or {}
        running: Cell | str | None = (Cell.model_validate_json(r["cell"]) if r.get("cell") else r.get("key"))
        ended = WorkerExit(ev.get("exit_code"), ev.get("reason", "exited"), running, ev.get("tail") or [],
                           ev.get("provenance"))
        if ended.finished:
            rest = scenario.resume(item.part) if item.part.expected else None
            if rest is not None:
                rest = scenario.after_crash(rest, None, f"worker exited without measuring this cell on node {where}",
                                            False, ctx)
            item.part = rest
            return
        refused = ended.refused and not item.part.results
        item.part = scenario.after_crash(item.part, running, ended.error(where), refused, ctx)

    @staticmethod
    def _again(item: WorkItem, sched: Scheduler, scenario: Scenario, ctx: RunContext, why: str) -> None:
        """Queue what is left of ``item`` again, or fail it after too many attempts."""
        if item.part is None:
            return
        if item.part.attempts >= MAX_ATTEMPTS or not sched.can_run(item):
            scenario.after_crash(item.part, None, f"gave up after {item.part.attempts} task(s): {why}", True, ctx)
            item.part = None
        else:
            item.cells = list(item.part.group.cells)
            sched.requeue(item)

    def _cancel(self, ray: Any, tasks: dict[int, _Task], events: queue.Queue, sched: Scheduler,
                contexts: dict[int, Any], node_ctx: Any, observer: Observer, nodes_prov: dict[str, Any],
                state: dict[str, Any]) -> None:
        """Ctrl-C/SIGTERM: cancel every task, keep storing what arrives until they stopped
        (force-kill after :data:`CANCEL_GRACE_S`), and leave the rest unmeasured."""
        sched.drain()
        for t in list(tasks.values()):
            with contextlib.suppress(Exception):
                ray.cancel(t.gen)
        deadline = time.monotonic() + CANCEL_GRACE_S
        forced = False
        while tasks:
            if time.monotonic() > deadline and not forced:
                for t in list(tasks.values()):
                    with contextlib.suppress(Exception):
                        ray.cancel(t.gen, force=True)
                forced, deadline = True, time.monotonic() + CANCEL_GRACE_S
            elif time.monotonic() > deadline:
                break
            try:
                t, kind, payload = events.get(timeout=0.5)
            except queue.Empty:
                continue
            if kind == "event" and payload.get("event") in ("result", "quality"):
                self._handle(ray, t, kind, payload, sched, tasks, contexts, node_ctx, observer, nodes_prov, state)
            elif kind == "end":
                t.ended = True
                tasks.pop(t.item.key, None)


def _on_node(device: Any, node: NodeReport) -> Any:
    """``device`` with ``properties["ray_node"]`` naming ``node`` (id, hostname, IP)."""
    props = {**device.properties, "ray_node": {"node_id": node.node_id, "hostname": node.hostname, "ip": node.ip}}
    return device.model_copy(update={"properties": props})


def _pump(ray: Any, t: _Task, events: queue.Queue) -> None:
    """Move one task's stream into the driver's queue; ``("end", exception or None)`` last."""
    try:
        for ref in t.gen:
            events.put((t, "event", ray.get(ref)))
    except BaseException as exc:  # noqa: BLE001 - reported to the driver's loop
        events.put((t, "end", exc))
        return
    events.put((t, "end", None))


def _spec_json(item: WorkItem, opts: RunOptions, handoff: bool = False) -> str:
    """The worker spec of what is left of ``item``'s part (its cells and scenario), as JSON;
    ``handoff``: the worker takes each cell through :mod:`infbench.data.handoff` (its part
    may be split while it runs)."""
    part = item.part
    spec = part.spec
    if handoff and getattr(spec, "kind", None) == "sweep":
        spec = spec.model_copy(update={"handoff": True})
    return make_spec(Plan(item.device, [part.group], scenario=spec), opts).model_dump_json()


def _uses_ray(opts: RunOptions) -> bool:
    """Whether the engine starts Ray workers itself (vLLM ``distributed_executor_backend=ray``)."""
    return str(opts.engine_options.get("distributed_executor_backend", "")) == "ray"


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip().splitlines()
    return s[0] if s else ""


def _node_dead(ray: Any, exc: BaseException, node_id: str, wait_s: float = NODE_CHECK_S) -> bool:
    """Whether the task failed because its node is gone: Ray says so (``NodeDiedError``),
    or the node is marked dead, or a probe pinned to it gets no answer in ``wait_s``."""
    from ray.exceptions import NodeDiedError

    if isinstance(exc, NodeDiedError):
        return True

    @ray.remote(num_cpus=0, max_retries=0)
    def probe() -> bool:
        return True

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        alive = {n["NodeID"]: n.get("Alive") for n in ray.nodes()}
        if not alive.get(node_id):
            return True
        try:
            return not ray.get(probe.options(scheduling_strategy=_affinity(node_id)).remote(), timeout=5)
        except Exception:  # noqa: BLE001 - no answer: look again
            continue
    return True
