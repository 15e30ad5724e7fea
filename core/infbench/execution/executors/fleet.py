"""A fleet of nodes (a Ray cluster) seen as device types: what each node detected, the
device types they form, the sweep planned once per type, and the driver's scheduling of
groups onto nodes. Nothing here talks to Ray (:mod:`infbench.execution.executors.ray` does), so
planning and scheduling can be measured on simulated fleets (``benchmarks/``).

A **device type** is a device signature (:meth:`~infbench.data.schema.DeviceInfo.signature`:
vendor, model, count), the same thing a cell id is made of, so a cell measured on any
node of a type has the id the plan gave it, and the id an in-process run on that node
would give it. ``infbench detect --ray-address`` shows the types grouped by (vendor,
model).

Scheduling (:class:`Scheduler`): each group of a plan is one unit of work, pinned to one
node of its type. A GPU node (kind ``gpu`` with Ray ``GPU`` resources) runs groups side
by side as long as their ``tensor_parallel_size`` fits its free GPUs (Ray's ``num_gpus``
accounting enforces the same); any other node runs one group at a time, holding all its
CPUs, so two measurements never share a CPU or an accelerator Ray does not count.

Splitting (:class:`Splitter`): when a node of a type is free and nothing waits for it, a
part that still has cells not started is split: a new part of the same group (same model
load, same cell ids) takes the tail of its cells onto the free node. It happens only where
the estimated time of the cells moved exceeds the new part's model load by a margin
(:func:`best_tail`), from :class:`Estimates`: this run's own observations first, then
durations stored earlier, then the calibrated prediction, then the worker start and the
weights' size over a stated read rate for a load. The same code runs in the Ray driver and
in ``benchmarks/fleet_scheduling.py``'s simulated fleets.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infbench.analysis import predict as pr
from infbench.analysis.floor import device_roofline_limits
from infbench.analysis.roofline import weight_bytes
from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.paths import default_home
from infbench.data.schema import Cell, DeviceInfo
from infbench.plan import plan

if TYPE_CHECKING:
    from infbench.contract.manager import PluginManager



@dataclass
class NodeReport:
    """What the detection task found on one node.

    Attributes:
        node_id: the Ray node id (hex).
        hostname: the node's host name.
        ip: the node's address as Ray knows it.
        devices: the device groups its plugins reported.
        resources: the node's Ray resources (``CPU``, ``GPU``, ``memory``...).
        infbench_version, schema_version: of the infbench installed on the node.
        provenance: the node's provenance (:func:`infbench.execution.bookkeeping.provenance`).
        engines_missing: engine name -> Python modules it lacks on the node (engines
            that are installed have no entry).
        errors: ``(plugin, error)`` of detect hooks that raised there.
        alive: False once the node was lost.
    """

    node_id: str
    hostname: str
    ip: str = ""
    devices: list[DeviceInfo] = field(default_factory=list)
    resources: dict[str, float] = field(default_factory=dict)
    infbench_version: str = ""
    schema_version: int = 0
    provenance: dict[str, Any] = field(default_factory=dict)
    engines_missing: dict[str, list[str]] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)
    alive: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeReport:
        """From the detection task's JSON-ready dict (devices as dicts)."""
        return cls(**{**d, "devices": [DeviceInfo(**x) for x in d.get("devices", [])],
                      "errors": [tuple(e) for e in d.get("errors", [])]})

    def name(self) -> str:
        """``hostname (node_id[:8])`` for messages."""
        return f"{self.hostname} ({self.node_id[:8]})"


def type_key(device: DeviceInfo) -> tuple[str, str, int]:
    """The device type of a device group: (vendor, model, count), as in its cell ids."""
    return (device.vendor, device.model, device.count)


@dataclass
class DeviceType:
    """Nodes holding the same device group.

    Attributes:
        device: the device as the first node reported it (the plan's device).
        nodes: the nodes that hold it, in detection order.
    """

    device: DeviceInfo
    nodes: list[NodeReport] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, int]:
        """(vendor, model, count)."""
        return type_key(self.device)

    def label(self) -> str:
        """``cpu AMD EPYC 7B13 x1``."""
        return f"{self.device.vendor} {self.device.model} x{self.device.count}"

    def alive(self) -> list[NodeReport]:
        """The nodes not lost."""
        return [n for n in self.nodes if n.alive]


@dataclass
class Fleet:
    """The nodes of a cluster and the device types they form.

    Attributes:
        nodes: one report per node.
        types: the device types, in order of first appearance.
        address: the cluster address it was detected at (for provenance).
    """

    nodes: list[NodeReport]
    types: list[DeviceType]
    address: str = ""

    @classmethod
    def from_reports(cls, reports: list[NodeReport], address: str = "") -> Fleet:
        """Group node reports into device types (remote endpoints are left out: they are
        not on the node).

        Cost: O(nodes x device groups per node).
        """
        types: dict[tuple[str, str, int], DeviceType] = {}
        for n in reports:
            for d in n.devices:
                if d.kind == "remote":
                    continue
                types.setdefault(type_key(d), DeviceType(d)).nodes.append(n)
        return cls(nodes=list(reports), types=list(types.values()), address=address)

    def type_of(self, device: DeviceInfo) -> DeviceType | None:
        """The device type of ``device`` (by signature), or None if no node holds it."""
        key = type_key(device)
        return next((t for t in self.types if t.key == key), None)

    def by_model(self) -> dict[tuple[str, str], list[DeviceType]]:
        """Device types grouped by (vendor, model), for display."""
        out: dict[tuple[str, str], list[DeviceType]] = {}
        for t in self.types:
            out.setdefault((t.device.vendor, t.device.model), []).append(t)
        return out

    def select(self, selection: str | None = None) -> list[DeviceType]:
        """The device types ``--device`` selects.

        Args:
            selection: ``all``; a comma list of vendors or models (``cpu,nvidia``, ``NVIDIA
                H100 80GB HBM3``), case-insensitive; or None for the default: every
                accelerator type (kind gpu or accelerator), else every CPU type.

        Raises:
            ConfigError: no node holds a selected device, or the fleet is empty.
        """
        if not self.types:
            raise ConfigError("no node of the Ray cluster reported a device",
                              hint="is infbench installed on the nodes? see `infbench detect --ray-address ADDR`")
        if not selection:
            accel = [t for t in self.types if t.device.kind in ("gpu", "accelerator")]
            return accel or [t for t in self.types if t.device.kind == "cpu"]
        if selection.strip().lower() == "all":
            return list(self.types)
        out: list[DeviceType] = []
        for name in (s.strip().lower() for s in selection.split(",") if s.strip()):
            hit = [t for t in self.types if name in (t.device.vendor.lower(), t.device.model.lower())]
            if not hit:
                raise ConfigError(f"no node of the Ray cluster has a device matching {name!r}",
                                  hint="the fleet has: " + "; ".join(t.label() for t in self.types)
                                       + " (see `infbench detect --ray-address ADDR`)")
            out += [t for t in hit if t not in out]
        return out


def plan_fleet(sweep: Any, types: list[DeviceType], pm: PluginManager) -> list[Any]:
    """Plan ``sweep`` once per device type (:func:`infbench.plan.plan` on the type's device).

    Returns:
        One :class:`~infbench.plan.Plan` per type, in the order of ``types``.

    Raises:
        ConfigError, EngineUnavailable: as :func:`infbench.plan.plan`, for the first type
            it fails on (the message names the type).
    """
    plans = []
    for t in types:
        try:
            plans.append(plan(sweep, t.device, pm))
        except InfbenchError as exc:
            exc.message = f"{t.label()}: {exc.message}"
            raise
    return plans


def gpu_slots(device: DeviceInfo, node: NodeReport) -> int:
    """How many devices of ``node`` the scheduler shares out: its Ray ``GPU`` count for a
    GPU device group, else 0 (the node runs one group at a time)."""
    if device.kind == "gpu":
        return int(node.resources.get("GPU", 0) or 0)
    return 0


def task_resources(device: DeviceInfo, tensor_parallel_size: int, node: NodeReport,
                   engine_uses_ray: bool = False) -> dict[str, float]:
    """The Ray resources a group's task asks for on ``node``.

    * GPU groups on a node with Ray ``GPU`` resources: ``num_gpus`` =
      ``tensor_parallel_size`` (Ray then sets ``CUDA_VISIBLE_DEVICES`` for the task), one CPU.
    * any other group: all of the node's CPUs, so nothing else Ray schedules shares them.
    * an engine that starts its own Ray workers (vLLM with
      ``distributed_executor_backend=ray``): nothing; its placement group reserves the
      devices, and a task holding them would deadlock it.

    Returns:
        ``{"num_cpus": ..., "num_gpus": ...}`` for ``.options()``.
    """
    if engine_uses_ray:
        return {"num_cpus": 0, "num_gpus": 0}
    if gpu_slots(device, node):
        return {"num_cpus": min(1.0, node.resources.get("CPU", 1.0)), "num_gpus": tensor_parallel_size}
    return {"num_cpus": node.resources.get("CPU", 1.0), "num_gpus": 0}


@dataclass
class Progress:
    """What the driver knows of a part's task while it runs (times: ``time.monotonic()`` s).

    Attributes:
        started_at: when its task was started (it loads the model until its first cell);
            None while it waits for a node.
        cell: the cell it is measuring, None while it loads or between cells.
        cell_at: when that cell started.
        done: spec hashes of its cells that came back.
        hold: True after a hand-off that took nothing (the worker had started every cell
            asked for): no split of it is tried again until it reports progress.
    """

    started_at: float | None = None
    cell: Cell | None = None
    cell_at: float | None = None
    done: set[str] = field(default_factory=set)
    hold: bool = False

    def reset(self) -> None:
        """Its task ended: nothing runs for it until it starts again."""
        self.started_at, self.cell, self.cell_at, self.hold = None, None, None, False


@dataclass
class WorkItem:
    """One group's cells still to run, on one device type.

    Attributes:
        key: unique id within a run.
        device: the planned device (its type).
        group: the :class:`~infbench.plan.Group`.
        cells: the cells not yet stored, in run order.
        attempts: tasks started for it so far.
        part: the scenario's part it runs (:class:`infbench.execution.scenarios.scenario.Part`: the
            cells and scenario sent to the node, and what came back); None once nothing is
            left of it.
        progress: what its running task reported (:class:`Progress`), for splitting.
        split_from: the key of the item it was split from, if any.
    """

    key: int
    device: DeviceInfo
    group: Any
    cells: list[Cell]
    attempts: int = 0
    part: Any = None
    progress: Progress = field(default_factory=Progress)
    split_from: int | None = None

    @property
    def type_key(self) -> tuple[str, str, int]:
        """The device type it runs on."""
        return type_key(self.device)

    @property
    def tensor_parallel_size(self) -> int:
        """The group's TP degree."""
        return self.group.tensor_parallel_size


class Scheduler:
    """Assigns work items to nodes of their device type (first fit, FIFO per bucket).

    Args:
        fleet: the fleet (node resources and types).
        items: the work, in plan order.
        eligible: optional ``(item, node) -> bool`` to exclude nodes (an engine missing
            there); it must depend only on the item's engine.

    Items wait in buckets of equal needs (device type, ``tensor_parallel_size``, engine),
    so when the head of a bucket fits nowhere the rest of it is skipped at once. A node
    runs items while its GPU slots allow (:func:`gpu_slots`), else one at a time. Cost of
    one :meth:`assign`: O(buckets + nodes scanned); of a whole run: O(items x nodes per
    type) in the worst case.
    """

    def __init__(self, fleet: Fleet, items: list[WorkItem], eligible: Any = None):
        self.fleet = fleet
        self.eligible = eligible
        self.nodes = {n.node_id: n for n in fleet.nodes}
        self.types = {t.key: t for t in fleet.types}
        self.queues: dict[tuple[Any, ...], deque[WorkItem]] = {}
        for it in items:
            self.queues.setdefault(self._bucket(it), deque()).append(it)
        self.busy: dict[str, int] = {}  # node id -> GPU slots used, or 1 for a whole-node item
        self.running: dict[int, str] = {}  # item key -> node id

    @staticmethod
    def _bucket(item: WorkItem) -> tuple[Any, ...]:
        return (item.type_key, item.tensor_parallel_size, item.group.engine)

    def _need(self, item: WorkItem, node: NodeReport) -> int:
        return item.tensor_parallel_size if gpu_slots(item.device, node) else 1

    def _fits(self, item: WorkItem, node: NodeReport) -> bool:
        if not node.alive or (self.eligible is not None and not self.eligible(item, node)):
            return False
        slots = gpu_slots(item.device, node)
        used = self.busy.get(node.node_id, 0)
        return used + item.tensor_parallel_size <= slots if slots else used == 0

    def assign(self) -> list[tuple[WorkItem, NodeReport]]:
        """Start whatever fits now: ``[(item, node)]``, each marked running."""
        out = []
        for bucket, q in self.queues.items():
            t = self.types.get(bucket[0])
            while q and t is not None:
                item = q[0]
                node = self._pick(item, t)
                if node is None:
                    break  # the rest of the bucket needs the same
                q.popleft()
                self.busy[node.node_id] = self.busy.get(node.node_id, 0) + self._need(item, node)
                self.running[item.key] = node.node_id
                item.attempts += 1
                out.append((item, node))
        return out

    def _pick(self, item: WorkItem, t: DeviceType) -> NodeReport | None:
        """The node of type ``t`` for ``item``: the first free one for a whole-node item; on
        GPU nodes the one it fills best (fewest devices left free), keeping whole nodes
        whole for larger tensor-parallel groups."""
        best, left = None, 0
        for n in t.nodes:
            if not self._fits(item, n):
                continue
            slots = gpu_slots(item.device, n)
            if not slots:
                return n
            free = slots - self.busy.get(n.node_id, 0) - item.tensor_parallel_size
            if free == 0:
                return n
            if best is None or free < left:
                best, left = n, free
        return best

    def bucket(self, item: WorkItem) -> tuple[Any, ...]:
        """The bucket of equal needs ``item`` waits in: (device type, TP degree, engine)."""
        return self._bucket(item)

    def free_slots(self, item: WorkItem) -> int:
        """How many more parts like ``item`` could start now on its type's nodes. O(nodes)."""
        t = self.types.get(item.type_key)
        n = 0
        for node in t.nodes if t is not None else []:
            if not node.alive or (self.eligible is not None and not self.eligible(item, node)):
                continue
            slots, used = gpu_slots(item.device, node), self.busy.get(node.node_id, 0)
            n += (slots - used) // item.tensor_parallel_size if slots else int(used == 0)
        return n

    def waiting(self, type_key: tuple[str, str, int]) -> int:
        """Items of a device type waiting for a node (they fit nowhere now: a GPU node's free
        devices are too few for their TP degree)."""
        return sum(len(q) for b, q in self.queues.items() if b[0] == type_key)

    def fit(self, item: WorkItem) -> NodeReport | None:
        """A node of ``item``'s type where it (or another part of its group) could start now,
        or None; nothing is marked."""
        t = self.types.get(item.type_key)
        return self._pick(item, t) if t is not None else None

    def place(self, item: WorkItem, node: NodeReport) -> None:
        """Mark ``item`` running on ``node`` (a split part placed on the free node it was
        split for), as :meth:`assign` does."""
        self.busy[node.node_id] = self.busy.get(node.node_id, 0) + self._need(item, node)
        self.running[item.key] = node.node_id
        item.attempts += 1

    def release(self, item: WorkItem) -> None:
        """``item``'s task ended: free its node's share."""
        nid = self.running.pop(item.key, None)
        if nid is not None:
            self.busy[nid] = max(0, self.busy.get(nid, 0) - self._need(item, self.nodes[nid]))

    def add(self, item: WorkItem) -> None:
        """Queue ``item`` after the others of its bucket."""
        self.queues.setdefault(self._bucket(item), deque()).append(item)

    def requeue(self, item: WorkItem) -> None:
        """Run ``item`` (its remaining cells) again, before the others of its bucket."""
        self.queues.setdefault(self._bucket(item), deque()).appendleft(item)

    def lose(self, node_id: str) -> None:
        """Mark a node lost: nothing more is assigned to it."""
        if node_id in self.nodes:
            self.nodes[node_id].alive = False

    def can_run(self, item: WorkItem) -> bool:
        """Whether an alive, eligible node of ``item``'s type could ever take it."""
        t = self.types.get(item.type_key)
        for n in t.alive() if t is not None else []:
            if self.eligible is not None and not self.eligible(item, n):
                continue
            slots = gpu_slots(item.device, n)
            if not slots or item.tensor_parallel_size <= slots:
                return True
        return False

    def pending(self) -> int:
        """Items waiting for a node."""
        return sum(len(q) for q in self.queues.values())

    def drain(self) -> list[WorkItem]:
        """Remove and return every waiting item."""
        out = [it for q in self.queues.values() for it in q]
        for q in self.queues.values():
            q.clear()
        return out


# -- splitting a group over idle nodes ----------------------------------------------------

#: Seconds a new part spends before its first cell besides reading the weights, when no
#: load of its type was observed yet: the ``infbench worker`` process starting on the node
#: (Python, imports, plugin detection; ``benchmarks/ray_dispatch.py`` measured 2.3 s).
WORKER_START_S = 2.5
#: Rate (bytes/s) at which a node is assumed to read a model's weights when no load was
#: observed yet: a stated assumption (one node-local NVMe drive or a parallel file
#: system's share, 1 GB/s); observed loads replace it as soon as a part reports one.
DISK_BYTES_S = 1e9
#: A split must bring the split part's estimated finish forward by at least this (s) ...
MIN_SPLIT_GAIN_S = 1.0
#: ... and by at least this fraction of the new part's estimated model load: estimates are
#: rough, and a split that barely pays is not worth a second copy of the model.
SPLIT_GAIN_LOAD = 0.25


_HASHES: dict[int, tuple[Cell, str]] = {}


def _hash(cell: Cell) -> str:
    """``cell.spec_hash()``, computed once per cell object (the splitter asks often; the cell
    is kept with it, so its id is not reused)."""
    hit = _HASHES.get(id(cell))
    if hit is None or hit[0] is not cell:
        hit = _HASHES[id(cell)] = (cell, cell.spec_hash())
    return hit[1]


def _group_key(item: WorkItem) -> tuple[Any, ...]:
    g = item.group
    return (item.type_key, getattr(getattr(g, "model", None), "name", None), g.engine, g.dtype,
            g.tensor_parallel_size)


def cell_weight(cell: Cell) -> float:
    """A rough relative cost of a cell, for scaling observed times to cells of the same group
    when nothing better is known: its tokens, ``batch x (input_len + 4 x output_len)`` (a
    decode step costs more than a prompt token; a coarse stand-in for the prediction)."""
    return float(cell.batch * (cell.input_len + 4 * cell.output_len))


def weights_bytes(group: Any) -> float | None:
    """Bytes of ``group``'s weights (all parameters at its dtype), or None when its model
    has no shape."""
    try:
        return float(group.model.param_counts()["total"]) * weight_bytes(group.dtype, precision_of(group.dtype))
    except Exception:  # noqa: BLE001 - a model without a config, an unknown dtype
        return None


def default_load_s(item: WorkItem) -> float:
    """A new part's model load when none was observed: :data:`WORKER_START_S` plus its
    weights over :data:`DISK_BYTES_S` (just the worker start for a model without a shape)."""
    b = weights_bytes(item.group)
    return WORKER_START_S + (b / DISK_BYTES_S if b else 0.0)


def prediction(pm: PluginManager) -> Callable[[WorkItem, Cell], float | None]:
    """The calibrated prediction of a batch-mode cell's time on its device type
    (:func:`infbench.analysis.predict.predict`: the timed batch plus ``cell.warmup`` passes
    of 2 output tokens), with the device's roofline limits and the calibration saved for
    its catalog id and engine where there is one (else the default efficiencies). None for
    serving cells, devices without limits and models without a shape: the estimate then
    comes from what the run observes."""
    cache: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def limits_of(item: WorkItem) -> tuple[Any, Any]:
        k = (*item.type_key, item.group.engine)
        if k not in cache:
            limits, eff = None, None
            try:
                limits, _ = device_roofline_limits(pm, item.device)
                cid = pr.device_catalog_id(pm, item.device.model_dump())
                if cid:
                    cal = (pr.load_calibration(default_home(), cid, pr.engine_family(item.group.engine))
                           or pr.load_calibration(default_home(), cid))
                    eff = cal.efficiency if cal is not None else None
            except Exception:  # noqa: BLE001 - the prediction is optional
                pass
            cache[k] = (limits, eff)
        return cache[k]

    def predict_cell(item: WorkItem, cell: Cell) -> float | None:
        if cell.load is not None and cell.load.mode != "batch":
            return None
        limits, eff = limits_of(item)
        if limits is None:
            return None

        sv = pr.serving_for(cell.engine)
        args = (item.group.model, limits, cell.batch, cell.input_len)
        t = float(pr.predict(*args, cell.output_len, cell.tensor_parallel_size, cell.dtype, eff, serving=sv)
                  ["duration_s"])
        w = float(pr.predict(*args, 2, cell.tensor_parallel_size, cell.dtype, eff, serving=sv)["duration_s"]) \
            if cell.warmup != 0 else 0.0
        return t + (1 if cell.warmup is None else cell.warmup) * w

    return predict_cell


class Estimates:
    """Estimated seconds of cells and model loads per device type, best source first:

    1. what this run observed: each finished cell (:meth:`observe_cell`) and each part's
       load, from its task's start to its first cell (:meth:`observe_load`);
    2. the cell's duration stored by an earlier run (``stored``);
    3. the calibrated prediction (``predict``), scaled by how this run's cells of the same
       group (else of the same device type) compared with it;
    4. this group's observed cells scaled by :func:`cell_weight`.

    A cell none of them covers has no estimate, and a part with such a cell is not split.
    A load never observed is :func:`default_load_s` (or ``load``).

    Args:
        predict: ``(item, cell) -> s or None``: the predicted time of a cell (warm-up included).
        stored: ``(item, cell) -> s or None``: the time an earlier run stored for it.
        load: ``item -> s``: the load of a new part when none was observed.
    """

    def __init__(self, predict: Callable[[WorkItem, Cell], float | None] | None = None,
                 stored: Callable[[WorkItem, Cell], float | None] | None = None,
                 load: Callable[[WorkItem], float] | None = None):
        self.predict, self.stored, self.load = predict, stored, load or default_load_s
        # per group: observed/predicted ratios, and (observed s, weight) sums; per type: ratios
        self._ratios: dict[tuple[Any, ...], list[float]] = {}
        self._ratios_type: dict[tuple[str, str, int], list[float]] = {}
        self._scale: dict[tuple[Any, ...], float] = {}
        self._scale_type: dict[tuple[str, str, int], float] = {}
        self._weighed: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._loads: dict[tuple[Any, ...], list[float]] = {}
        self._load: dict[tuple[Any, ...], float] = {}
        self._guess: dict[tuple[Any, ...], float] = {}
        self._cache: dict[tuple[Any, ...], float | None] = {}

    def observe_cell(self, item: WorkItem, cell: Cell, seconds: float) -> None:
        """A cell of ``item`` took ``seconds`` (warm-up included)."""
        if not math.isfinite(seconds) or seconds <= 0:
            return
        g = _group_key(item)
        pred = self._predicted(item, cell)
        o, w = self._weighed.get(g, (0.0, 0.0))
        self._weighed[g] = (o + seconds, w + cell_weight(cell))
        if pred:
            self._ratios.setdefault(g, []).append(seconds / pred)
            self._scale[g] = statistics.median(self._ratios[g])
            self._ratios_type.setdefault(item.type_key, []).append(seconds / pred)
            self._scale_type[item.type_key] = statistics.median(self._ratios_type[item.type_key])

    def observe_load(self, item: WorkItem, seconds: float) -> None:
        """A part of ``item``'s group took ``seconds`` from its task's start to its first cell."""
        if math.isfinite(seconds) and seconds >= 0:
            g = _group_key(item)
            self._loads.setdefault(g, []).append(seconds)
            self._load[g] = statistics.median(self._loads[g])

    def _predicted(self, item: WorkItem, cell: Cell) -> float | None:
        if self.predict is None:
            return None
        k = (_group_key(item), _hash(cell))
        if k not in self._cache:
            try:
                v = self.predict(item, cell)
            except Exception:  # noqa: BLE001 - a prediction is optional
                v = None
            self._cache[k] = v if v is not None and math.isfinite(v) and v > 0 else None
        return self._cache[k]

    def cell_s(self, item: WorkItem, cell: Cell) -> float | None:
        """The estimated seconds of ``cell`` (a cell of ``item``), or None (see the class doc)."""
        if self.stored is not None:
            v = self.stored(item, cell)
            if v is not None and math.isfinite(v) and v > 0:
                return v
        g = _group_key(item)
        pred = self._predicted(item, cell)
        if pred is not None:
            return pred * self._scale.get(g, self._scale_type.get(item.type_key, 1.0))
        if g in self._weighed:
            o, w = self._weighed[g]
            return cell_weight(cell) * o / w
        return None

    def load_s(self, item: WorkItem) -> float:
        """The estimated seconds a new part of ``item``'s group takes before its first cell."""
        g = _group_key(item)
        if g not in self._load:
            self._guess.setdefault(g, self.load(item))
            return self._guess[g]
        return self._load[g]


@dataclass
class Split:
    """A split the :class:`Splitter` proposes.

    Attributes:
        item: the part to split.
        cells: its cells the new part takes (the tail, in run order).
        node: the free node the new part runs on (None: a split before the run, the new
            part waits in the queue like the others).
        before_s: the part's estimated finish from now as it is (s).
        after_s: the later estimated finish of the two parts after the split (s).
        started: True when the part's task runs already (its worker must hand the cells
            off first, and may keep some it started meanwhile); False when it is still
            to start (the cells just move).
    """

    item: WorkItem
    cells: list[Cell]
    node: NodeReport | None
    before_s: float
    after_s: float
    started: bool

    @property
    def gain_s(self) -> float:
        """How much earlier the split part finishes (s)."""
        return self.before_s - self.after_s


def best_tail(ahead_s: float, cell_s: list[float], load_s: float, keep: int = 1,
              ways: int = 2) -> tuple[int, float, float] | None:
    """Where to cut a part's pending cells so that the tail goes to a new part.

    The part runs ``ahead_s`` more (its load or the cell in progress), then its pending
    cells ``cell_s`` in order; the new part loads for ``load_s``, then runs the tail
    ``cell_s[k:]``. With ``ways`` = 2 the cut minimises ``after = max(ahead_s +
    sum(cell_s[:k]), load_s + sum(cell_s[k:]))``: both parts finish together. With more
    ways (``ways - 1`` free nodes for this part), the tail is the share that makes every
    part finish at ``F = (before + (ways - 1) x load_s) / ways``: the cut whose new part
    ends closest to ``F``, the part keeping the rest for the next cuts (cutting ``F``-sized
    tails one after another gives equal shares).

    Returns:
        ``(k, before, after)`` with ``keep <= k < len(cell_s)``, ``before = ahead_s +
        sum(cell_s)`` and ``after`` the later finish of the two parts right after this cut;
        None when there is no such cut. O(len(cell_s)).
    """
    n = len(cell_s)
    total = sum(cell_s)
    before = ahead_s + total
    target = (before + (ways - 1) * load_s) / ways if ways > 2 else None
    best: tuple[float, int, float] | None = None
    head = sum(cell_s[:keep]) if keep > 0 else 0.0
    for k in range(max(keep, 0), n):
        new = load_s + (total - head)
        after = max(ahead_s + head, new)
        score = abs(new - target) if target is not None else after
        if best is None or score < best[0]:
            best = (score, k, after)
        head += cell_s[k]
    return (best[1], before, best[2]) if best is not None else None


class Splitter:
    """Proposes splits of running (or about to start) parts onto nodes that are free now
    (see the module doc).

    Each proposal takes the part that would finish last among those with a free node of
    their bucket, and cuts its tail for one new part: with ``f`` free slots in the bucket
    and this part holding a share ``w`` of the bucket's remaining work, the part is shared
    ``max(1, round(f x w))``-plus-one ways (:func:`best_tail`), so a lone group on an idle
    fleet ends in equal shares rather than halves of halves.

    Args:
        sched: the scheduler (which nodes are free, for whom).
        estimates: cell and load times.
        can_split: ``item -> bool``: whether a part may be split at all (a sweep's may; a
            ``--find-max`` search or a perplexity measurement stays whole).
        min_gain_s, gain_load: a split must bring the part's finish forward by at least
            ``max(min_gain_s, gain_load x load)``.
        clock: the time source (``time.monotonic``; a simulation passes its own).
    """

    def __init__(self, sched: Scheduler, estimates: Estimates, can_split: Callable[[WorkItem], bool] | None = None,
                 min_gain_s: float = MIN_SPLIT_GAIN_S, gain_load: float = SPLIT_GAIN_LOAD,
                 clock: Callable[[], float] | None = None):
        self.sched, self.estimates, self.can_split = sched, estimates, can_split
        self.min_gain_s, self.gain_load = min_gain_s, gain_load
        self.clock = clock or time.monotonic

    def pending(self, item: WorkItem) -> list[Cell]:
        """``item``'s cells not started and not back, in run order."""
        p = item.progress
        cur = _hash(p.cell) if p.cell is not None else None
        return [c for c in item.cells if (h := _hash(c)) not in p.done and h != cur]

    def _ahead(self, item: WorkItem, now: float) -> tuple[float, int]:
        """Seconds before ``item``'s first pending cell can start, and how many pending cells
        it keeps at least (one while it loads: a worker must not load for nothing)."""
        p = item.progress
        load = self.estimates.load_s(item)
        if p.started_at is None:
            return load, 1
        if p.cell is None:
            return max(0.0, load - (now - p.started_at)), 1
        return max(0.0, (self.estimates.cell_s(item, p.cell) or 0.0) - (now - (p.cell_at or now))), 0

    def plan_for(self, item: WorkItem, node: NodeReport, now: float, ways: int = 2) -> Split | None:
        """The best split of ``item`` onto ``node`` if it pays (see the class doc), sharing it
        ``ways`` ways (falling back to two), else None."""
        if (self.can_split is not None and not self.can_split(item)) or item.progress.hold:
            return None
        todo = self.pending(item)
        est = [self.estimates.cell_s(item, c) for c in todo]
        if not todo or any(e is None for e in est):
            return None
        load = self.estimates.load_s(item)
        ahead, keep = self._ahead(item, now)
        for w in dict.fromkeys((max(2, ways), 2)):
            cut = best_tail(ahead, [float(e) for e in est], load, keep, w)  # type: ignore[arg-type]
            if cut is None:
                return None
            k, before, after = cut
            if before - after >= max(self.min_gain_s, self.gain_load * load):
                return Split(item, todo[k:], node, before, after, item.progress.started_at is not None)
        return None

    def finish_s(self, item: WorkItem, now: float) -> float:
        """``item``'s estimated finish from ``now`` (s; unknown cells count 0)."""
        return self._ahead(item, now)[0] + sum(self.estimates.cell_s(item, c) or 0.0 for c in self.pending(item))

    def capacity(self, item: WorkItem) -> float:
        """Parts like ``item`` its type's alive, eligible nodes run at once."""
        t = self.sched.types.get(item.type_key)
        n = 0.0
        for node in t.alive() if t is not None else []:
            if self.sched.eligible is None or self.sched.eligible(item, node):
                slots = gpu_slots(item.device, node)
                n += slots / item.tensor_parallel_size if slots else 1.0
        return n

    def initial(self, items: list[WorkItem]) -> Split | None:
        """Before anything runs: the next split that shares the parts not started over their
        type's capacity, as far as the estimates go (the new part waits in the queue:
        ``Split.node`` is None).

        Each part ``i`` (cells ``c_i`` s after a load) is to become ``p_i = ceil(c_i / x)``
        parts, ``x`` the smallest cell time per part for which all of a type's parts fit its
        nodes at once (``sum(p_i / capacity_i) <= 1``, :meth:`capacity`; found by bisection):
        every node gets about one part and they end together. Where the parts outnumber what
        the nodes hold at once, ``x`` is the balanced share ``sum(c_i / capacity_i)`` (the
        type's cell time per node) and only the parts longer than it are cut. The longest
        part with ``p_i >= 2`` gives up its tail share (:func:`best_tail` with ``p_i`` ways)
        if that pays. Splitting
        up front spares running workers later hand-offs; :meth:`propose` corrects what the
        estimates got wrong as the run goes."""
        cands = [it for it in items if it.progress.started_at is None and not it.progress.hold
                 and (self.can_split is None or self.can_split(it))]
        by_type: dict[tuple[str, str, int], list[tuple[WorkItem, float, float]]] = {}
        caps: dict[tuple[Any, ...], float] = {}
        for it in cands:
            b = self.sched.bucket(it)
            if b not in caps:
                caps[b] = self.capacity(it)
            if caps[b] > 0:
                cells = self.finish_s(it, 0.0) - self.estimates.load_s(it)
                by_type.setdefault(it.type_key, []).append((it, max(cells, 0.0), caps[b]))
        want: list[tuple[float, WorkItem, int]] = []
        for parts in by_type.values():
            def fits(x: float, parts: list[tuple[WorkItem, float, float]] = parts) -> bool:
                return sum(math.ceil(c / x) / cap for _, c, cap in parts if c > 0) <= 1.0

            hi = max(c for _, c, _ in parts)
            if hi <= 0:
                continue
            if fits(hi):
                lo = hi / 1e6
                for _ in range(60):
                    mid = (lo + hi) / 2
                    lo, hi = (lo, mid) if fits(mid) else (mid, hi)
            else:  # more parts than the nodes hold at once: cut only those longer than the balanced share
                hi = sum(c / cap for _, c, cap in parts)
            want += [(c, it, math.ceil(c / hi - 1e-9)) for it, c, _ in parts if c > hi * (1 + 1e-9)]
        for _, it, ways in sorted(want, key=lambda w: -w[0]):
            s = self.plan_for(it, None, 0.0, max(2, ways))  # type: ignore[arg-type]
            if s is not None:
                return s
        return None

    def propose(self, items: Iterable[WorkItem]) -> Split | None:
        """The split of the part that would finish last (among ``items``, running or about to
        start) onto a node free for it now, if one pays; else None. The caller applies it
        (:func:`split_item`) and places the new part (:meth:`Scheduler.place`).

        Cost: O(parts x pending cells) for the estimates, plus O(nodes of a type) per bucket
        with a part to split."""
        now = self.clock()
        cands = [it for it in items if not it.progress.hold and (self.can_split is None or self.can_split(it))]
        free: dict[tuple[Any, ...], tuple[NodeReport | None, int]] = {}
        for it in cands:
            b = self.sched.bucket(it)
            if b not in free:
                node = self.sched.fit(it)
                free[b] = (node, self.sched.free_slots(it) if node is not None else 0)
        open_types = {b[0] for b, (node, _) in free.items() if node is not None}
        cands = [it for it in cands if it.type_key in open_types]   # nothing is free elsewhere
        if not cands:
            return None
        fin = {it.key: self.finish_s(it, now) for it in cands}
        work: dict[tuple[Any, ...], float] = {}
        for it in cands:
            b = self.sched.bucket(it)
            work[b] = work.get(b, 0.0) + fin[it.key]
        seen: set[tuple[str, str, int]] = set()
        blocked: set[tuple[str, str, int]] = set()
        for it in sorted(cands, key=lambda x: -fin[x.key]):
            b, tk = self.sched.bucket(it), it.type_key
            first = tk not in seen
            seen.add(tk)
            if tk in blocked:
                continue
            node, slots = free[b]
            if node is None:
                # the part of its type that ends last would split but no node has room for it (a
                # larger TP degree than the GPUs left free): splitting the others would only keep
                # the nodes fragmented, so they wait until a node drains for it (a reservation)
                t = self.sched.types.get(tk)
                if first and t is not None and self.plan_for(it, t.nodes[0], now) is not None:
                    blocked.add(tk)
                continue
            share = fin[it.key] / work[b] if work[b] > 0 else 1.0
            s = self.plan_for(it, node, now, 1 + max(1, round(slots * share)))
            if s is not None:
                return s
        return None


def longest_first(items: list[WorkItem], estimates: Estimates) -> list[WorkItem]:
    """``items`` with the longest estimated work first (load plus cells; unknown cells count
    0), ties in their order: the longest-processing-time-first rule (Graham 1969), so the
    parts that bound the run start first and a group needing a whole node is not left to
    wait behind smaller ones."""
    def work(it: WorkItem) -> float:
        return estimates.load_s(it) + sum(estimates.cell_s(it, c) or 0.0 for c in it.cells)

    return sorted(items, key=lambda it: -work(it))


def split_item(item: WorkItem, cells: list[Cell], key: int) -> WorkItem:
    """Move ``cells`` out of ``item`` into a new work item (same device, group and bucket) with
    ``key``; the caller sets the new item's ``part`` and ``group`` to the scenario's split."""
    moving = {_hash(c) for c in cells}
    item.cells = [c for c in item.cells if _hash(c) not in moving]
    return WorkItem(key, item.device, item.group, list(cells), split_from=item.key)


@dataclass
class SimResult:
    """What :func:`simulate` found.

    Attributes:
        makespan_s: from the first task's start to the last cell's end (s).
        busy_s: node-seconds spent loading models and measuring cells (a GPU node's share
            counts in proportion to the GPUs a part holds).
        cell_s: node-seconds of cells alone.
        loads: model loads (parts started, splits included).
        splits: parts split off.
        ran: ``(spec_hash, node_id)`` of every cell measured, in order.
    """

    makespan_s: float
    busy_s: float
    cell_s: float
    loads: int
    splits: int
    ran: list[tuple[str, str]]


def simulate(fleet: Fleet, items: list[WorkItem], cell_s: Callable[[WorkItem, Cell], float],
             load_s: Callable[[WorkItem], float], split: bool = True, estimates: Estimates | None = None,
             observe: bool = True) -> SimResult:
    """Run the driver's scheduling (:class:`Scheduler`, and :class:`Splitter` with ``split``)
    on a simulated fleet, in simulated time: each part loads for ``load_s`` then runs its
    cells in order for ``cell_s`` each; a split of a running part moves exactly the cells it
    has not started (the hand-off of a real run can only leave it fewer).

    Args:
        fleet: the nodes (their resources decide GPU sharing).
        items: the work (consumed: cells move between items as they split).
        cell_s, load_s: the true times (s).
        split: split parts over free nodes, and start the longest parts first
            (:func:`longest_first`), as the driver does; False: whole groups in plan order.
        estimates: what the splitter believes (default: the true times, perfectly known).
        observe: feed each finished cell and load to ``estimates``, as the driver does.

    Returns:
        The :class:`SimResult`. Cost: O(events x parts) for the splitter's look at every
        running part when a node frees up.
    """
    now = [0.0]
    est = estimates or Estimates(predict=cell_s, load=load_s)
    sched = Scheduler(fleet, [])
    splitter = Splitter(sched, est, clock=lambda: now[0]) if split else None
    keys = itertools.count(max((it.key for it in items), default=-1) + 1)
    splits = 0
    items = list(items)
    if splitter is not None:
        while (s0 := splitter.initial(items)) is not None:
            items.append(split_item(s0.item, s0.cells, next(keys)))
            splits += 1
        items = longest_first(items, est)
    for it in items:
        sched.add(it)
    heap: list[tuple[float, int, int]] = []
    seq = itertools.count()
    running: dict[int, tuple[WorkItem, NodeReport, float]] = {}  # key -> (item, node, node share)
    ran: list[tuple[str, str]] = []
    busy = cells_total = 0.0
    loads = 0

    def share(item: WorkItem, node: NodeReport) -> float:
        slots = gpu_slots(item.device, node)
        return item.tensor_parallel_size / slots if slots else 1.0

    def start(item: WorkItem, node: NodeReport) -> None:
        nonlocal loads, busy
        item.progress.reset()
        item.progress.started_at = now[0]
        running[item.key] = (item, node, share(item, node))
        t = load_s(item)
        loads += 1
        busy += t * running[item.key][2]
        heapq.heappush(heap, (now[0] + t, next(seq), item.key))

    def next_cell(item: WorkItem) -> Cell | None:
        p = item.progress
        return next((c for c in item.cells if _hash(c) not in p.done), None)

    while True:
        pairs = sched.assign()
        if splitter is not None:
            active = [it for it, _ in pairs] + [it for it, _, _ in running.values()]
            while (s := splitter.propose(active)) is not None and s.node is not None:
                new = split_item(s.item, s.cells, next(keys))
                sched.place(new, s.node)
                pairs.append((new, s.node))
                active.append(new)
                splits += 1
        for item, node in pairs:
            start(item, node)
        if not heap:
            break
        now[0], _, key = heapq.heappop(heap)
        item, node, frac = running[key]
        p = item.progress
        if p.cell is None and observe:
            est.observe_load(item, now[0] - (p.started_at or 0.0))
        elif p.cell is not None:
            p.done.add(_hash(p.cell))
            ran.append((_hash(p.cell), node.node_id))
            if observe:
                est.observe_cell(item, p.cell, now[0] - (p.cell_at or 0.0))
        c = next_cell(item)
        if c is None:
            del running[key]
            sched.release(item)
            item.progress.reset()
            continue
        t = cell_s(item, c)
        p.cell, p.cell_at = c, now[0]
        busy += t * frac
        cells_total += t * frac
        heapq.heappush(heap, (now[0] + t, next(seq), key))
    return SimResult(now[0], busy, cells_total, loads, splits, ran)


def fleet_dict(fleet: Fleet) -> dict[str, Any]:
    """JSON-ready form of a fleet (``infbench detect --ray-address ... --json``): device
    groups by (vendor, model) with their types (count) and nodes, and every node with its
    devices, Ray resources, infbench version and detection errors."""
    groups = []
    for (vendor, model), types in fleet.by_model().items():
        groups.append({"vendor": vendor, "model": model, "kind": types[0].device.kind,
                       "types": [{"count": t.device.count, "cell_device": t.device.signature(),
                                  "nodes": [{"node_id": n.node_id, "hostname": n.hostname, "alive": n.alive}
                                            for n in t.nodes]} for t in types],
                       "nodes": sum(len(t.nodes) for t in types)})
    return {"address": fleet.address, "device_groups": groups,
            "nodes": [{"node_id": n.node_id, "hostname": n.hostname, "ip": n.ip, "alive": n.alive,
                       "resources": n.resources, "infbench_version": n.infbench_version,
                       "schema_version": n.schema_version, "devices": [d.model_dump() for d in n.devices],
                       "engines_missing": n.engines_missing,
                       "errors": [{"plugin": p, "error": e} for p, e in n.errors]} for n in fleet.nodes]}
