"""A fleet of nodes (a Ray cluster) seen as device types: what each node detected, the
device types they form, the sweep planned once per type, and the driver's scheduling of
groups onto nodes. Nothing here talks to Ray (:mod:`infbench.executors.ray` does), so
planning and scheduling can be measured on simulated fleets (``benchmarks/``).

A **device type** is a device signature (:meth:`~infbench.schema.DeviceInfo.signature`:
vendor, model, count), the same thing a cell id is made of, so a cell measured on any
node of a type has the id the plan gave it, and the id an in-process run on that node
would give it. ``infbench detect --ray-address`` shows the types grouped by (vendor,
model).

Scheduling (:class:`Scheduler`): each group of a plan is one unit of work, pinned to one
node of its type. A GPU node (kind ``gpu`` with Ray ``GPU`` resources) runs groups side
by side as long as their ``tensor_parallel_size`` fits its free GPUs (Ray's ``num_gpus``
accounting enforces the same); any other node runs one group at a time, holding all its
CPUs, so two measurements never share a CPU or an accelerator Ray does not count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from infbench.errors import ConfigError
from infbench.schema import Cell, DeviceInfo


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
        provenance: the node's provenance (:func:`infbench.run.provenance`).
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


def plan_fleet(sweep: Any, types: list[DeviceType], pm: Any) -> list[Any]:
    """Plan ``sweep`` once per device type (:func:`infbench.plan.plan` on the type's device).

    Returns:
        One :class:`~infbench.plan.Plan` per type, in the order of ``types``.

    Raises:
        ConfigError, EngineUnavailable: as :func:`infbench.plan.plan`, for the first type
            it fails on (the message names the type).
    """
    from infbench.errors import InfbenchError
    from infbench.plan import plan

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
        return int(node.resources.get("GPU", 0))
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
class WorkItem:
    """One group's cells still to run, on one device type.

    Attributes:
        key: unique id within a run.
        device: the planned device (its type).
        group: the :class:`~infbench.plan.Group`.
        cells: the cells not yet stored.
        attempts: tasks started for it so far.
        part: the scenario's part it runs (:class:`infbench.scenarios.base.Part`: the
            cells and scenario sent to the node, and what came back); None once nothing is
            left of it.
    """

    key: int
    device: DeviceInfo
    group: Any
    cells: list[Cell]
    attempts: int = 0
    part: Any = None

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
        self.queues: dict[tuple, deque[WorkItem]] = {}
        for it in items:
            self.queues.setdefault(self._bucket(it), deque()).append(it)
        self.busy: dict[str, int] = {}  # node id -> GPU slots used, or 1 for a whole-node item
        self.running: dict[int, str] = {}  # item key -> node id

    @staticmethod
    def _bucket(item: WorkItem) -> tuple:
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
                node = next((n for n in t.nodes if self._fits(item, n)), None)
                if node is None:
                    break  # the rest of the bucket needs the same
                q.popleft()
                self.busy[node.node_id] = self.busy.get(node.node_id, 0) + self._need(item, node)
                self.running[item.key] = node.node_id
                item.attempts += 1
                out.append((item, node))
        return out

    def release(self, item: WorkItem) -> None:
        """``item``'s task ended: free its node's share."""
        nid = self.running.pop(item.key, None)
        if nid is not None:
            self.busy[nid] = max(0, self.busy.get(nid, 0) - self._need(item, self.nodes[nid]))

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
