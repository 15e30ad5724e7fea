"""Serving load spread over several client nodes, the parts that need no cluster: how one
cell's request schedule is shared out (:func:`partition`), and how the nodes' raw records
come back together as one cell (:func:`merge`). The Ray side (client actors, the clock
offsets, the start) is :mod:`infbench.execution.executors.spread`.

Sharing out (each node releases its share on its own clock, from a common start):

* **rate**, Poisson (``burstiness`` 1): ``N`` independent Poisson streams of ``rate / N``
  each, seeded apart; their superposition is a Poisson stream of ``rate`` (the
  superposition theorem), so no node needs another's clock to keep the arrival process.
* **rate**, gamma (``burstiness`` != 1): a superposition of gamma streams is not a gamma
  stream, so the one schedule of the cell (:func:`~infbench.measure.loadgen.arrival_offsets_s`,
  the cell's seed) is dealt round robin: node ``k`` releases arrivals ``k, k + N, ...`` at
  their offsets from its start (a trace-mode share).
* **concurrency** ``C``: ``C // N`` in flight per node (the first ``C % N`` nodes one more;
  never more nodes than ``C``).
* **trace**: by request, round robin, each at its trace time from its node's start.
* **sessions** (multi-turn): whole sessions round robin, the concurrency (sessions in
  flight) shared as above.

``num_requests`` and ``warmup_requests`` are shared like the concurrency, and every node
gets the prompts of its own units, so the nodes together send the prompts a single client
would. A cell in batch mode is not spread.

Merging: every record keeps the timestamps of the node that measured it, so TTFT, TPOT,
ITL and E2E (differences within one record) never see another clock. Each node's records
are shifted as a whole onto the measuring process's clock (its start, mapped through the
node's wall clock and the node's measured offset from ours), which only aligns the common
window of the cell (the duration behind throughput, the energy window); the offsets used
are recorded with the cell (``metrics["client"]["nodes"]``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infbench.data import metrics as M
from infbench.data.schema import Cell, Load, RequestRecord
from infbench.measure.loadgen import arrival_offsets_s

#: Timestamp fields of a record shifted onto the measuring process's clock.
TIME_FIELDS = ("t_send_ns", "t_sched_ns", "t_first_reasoning_ns", "t_first_answer_ns")


@dataclass(frozen=True)
class _At:
    t_s: float


@dataclass(frozen=True)
class Timed:
    """A prompt released at ``record.t_s`` seconds after its node's start (the shape of a
    trace request, so a node replays its share as a trace): ``materialize()`` gives the
    prompt."""

    prompt: Any
    record: _At

    def materialize(self) -> Any:
        """The prompt (already built)."""
        p = self.prompt
        return p.materialize() if hasattr(p, "materialize") else p


@dataclass
class Share:
    """What one client node sends.

    Attributes:
        index: the node's place among the shares (0-based).
        cell: the cell as the node runs it: its load is the node's share, its seed the
            node's own arrival stream (rate mode); the stored cell is the original.
        prompts: the node's prompts, warm-up first, in the order its units use them.
        method: how the schedule was shared (``poisson streams``, ``dealt schedule``,
            ``concurrency shares``, ``trace by request``).
    """

    index: int
    cell: Cell
    prompts: list[Any]
    method: str


def shares_of(total: int | None, n: int) -> list[int | None]:
    """``total`` shared over ``n``: ``total // n`` each, the first ``total % n`` one more
    (None stays None: no count given)."""
    if total is None:
        return [None] * n
    return [total // n + (1 if k < total % n else 0) for k in range(n)]


def stream_seed(seed: int, k: int, n: int) -> int:
    """The arrival seed of node ``k`` of ``n`` (independent streams, reproducible)."""
    return int(hashlib.sha256(f"{seed}:{k}:{n}".encode()).hexdigest()[:8], 16)


def planned_requests(load: Load) -> int | None:
    """The timed units a single client sends for ``load`` without a duration, as
    :func:`~infbench.measure.loadgen.run_load` counts them (None: as many as the duration allows)."""
    if load.num_requests:
        return load.num_requests
    if load.duration_s:
        return None
    return max(4 * (load.concurrency or 1), 16)


def partition(cell: Cell, prompts: Sequence[Any], n: int) -> list[Share]:
    """Share a serving cell's schedule over ``n`` client nodes (see the module doc).

    Args:
        cell: a serving cell (``cell.load`` not batch mode).
        prompts: its prompts as the engine built them (warm-up first; trace requests and
            sessions included), each node getting those of its own units.
        n: client nodes (>= 1).

    Returns:
        One :class:`Share` per node that gets work (fewer than ``n`` when the concurrency
        or the requests are fewer than the nodes).

    Raises:
        ValueError: ``n`` < 1, a batch-mode cell, or no prompts.
    """
    load = cell.load
    if n < 1:
        raise ValueError(f"client nodes must be >= 1, got {n}")
    if load is None or load.mode == "batch":
        raise ValueError("a batch-mode cell is not spread over client nodes")
    if not prompts:
        raise ValueError("no prompts to share out")
    w = load.warmup_requests
    warm, timed = list(prompts[:w]), list(prompts[w:]) or list(prompts)
    total = planned_requests(load)
    cap = load.concurrency
    limit = min(x for x in (n, cap, total, len(timed)) if x)
    n = max(1, limit)
    counts, caps, warms = shares_of(total, n), shares_of(cap, n), shares_of(w, n)
    out = []
    for k in range(n):
        mine = timed[k::n]
        update: dict[str, Any] = {"num_requests": counts[k] if load.num_requests or counts[k] else None,
                                  "warmup_requests": warms[k] or 0, "concurrency": caps[k]}
        seed, method = cell.seed, "concurrency shares"
        rate = load.request_rate or 0.0
        if load.mode == "rate" and load.burstiness == 1.0:
            update["request_rate"] = rate / n
            seed, method = stream_seed(cell.seed, k, n), "poisson streams"
        elif load.mode == "rate":
            count = total or int(rate * (load.duration_s or 0) * 2 + 16)
            offsets = arrival_offsets_s(count, rate, load.burstiness, cell.seed).tolist()
            mine = [Timed(timed[i % len(timed)], _At(offsets[i])) for i in range(k, count, n)]
            update.update(mode="trace", request_rate=None, burstiness=1.0, num_requests=len(mine))
            method = "dealt schedule"
        elif load.mode == "trace":
            mine = [Timed(p.materialize() if hasattr(p, "materialize") else p, _At(p.record.t_s)) for p in mine]
            update["num_requests"] = len(mine) if load.num_requests else None
            method = "trace by request"
        node_load = load.model_copy(update=update)
        out.append(Share(k, cell.model_copy(update={"load": node_load, "seed": seed}), warm[k::n] + mine, method))
    return out


@dataclass
class NodeOutput:
    """What one client node measured, as it sent it back.

    Attributes:
        node: ``{"node_id", "hostname", "ip"}`` of the node.
        records: its raw records, timestamps on its own ``perf_counter_ns`` clock.
        anchor_perf_ns, anchor_wall_ns: its ``perf_counter_ns`` and ``time_ns`` read
            together at its start.
        offset_ns: its wall clock minus ours (measured before the cell), in ns.
        rtt_ns: the round trip of the measurement that gave ``offset_ns`` (its error is at
            most half of it).
        late_ns: how late the node started against the common start (its own clock).
        metrics: its client metrics (``client_lag_p99_ms``, ``client``: health).
        warnings: its warnings.
        engine_s: seconds its load took.
        load: its share of the load (``Load.model_dump()``).
        method: how the schedule was shared.
    """

    node: dict[str, Any]
    records: list[RequestRecord]
    anchor_perf_ns: int
    anchor_wall_ns: int
    offset_ns: int = 0
    rtt_ns: int = 0
    late_ns: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    engine_s: float = 0.0
    load: dict[str, Any] = field(default_factory=dict)
    method: str = ""


def node_label(node: dict[str, Any]) -> str:
    """The short name a record carries for its client node: the node id's first 12 hex digits."""
    return str(node.get("node_id") or node.get("hostname") or "?")[:12]


def shift_of(out: NodeOutput, anchor_perf_ns: int, anchor_wall_ns: int) -> int:
    """Nanoseconds to add to the node's ``perf_counter_ns`` stamps to put them on ours:
    node perf -> node wall (its anchor) -> our wall (minus its offset) -> our perf (our
    anchor, read together at our start)."""
    return (out.anchor_wall_ns - out.offset_ns - anchor_wall_ns + anchor_perf_ns) - out.anchor_perf_ns


def shifted(r: RequestRecord, delta: int, label: str) -> RequestRecord:
    """``r`` with every timestamp moved by ``delta`` ns and its client node set."""
    upd: dict[str, Any] = {k: getattr(r, k) + delta for k in TIME_FIELDS if getattr(r, k) is not None}
    upd["t_tokens_ns"] = [t + delta for t in r.t_tokens_ns]
    upd["client_node"] = label
    return r.model_copy(update=upd)


def merge(outs: Sequence[NodeOutput], anchor_perf_ns: int, anchor_wall_ns: int
          ) -> tuple[list[RequestRecord], dict[str, Any], list[str], float]:
    """The nodes' raw records as one cell's (see the module doc).

    Args:
        outs: every node's output.
        anchor_perf_ns, anchor_wall_ns: our ``perf_counter_ns`` and ``time_ns`` read together.

    Returns:
        ``(records, metrics, warnings, engine_s)``: every record, on our clock, each naming
        its node (``client_node``), ordered by send time; ``metrics`` with
        ``client_lag_p99_ms`` (the worst node's) and ``client``: the worst node's health
        at the top level (``loop_lag_ms``, ``release_lag_ms``, ``event_loop``), ``behind``
        and ``stopped`` of every node (prefixed with its name), ``nodes`` (each node: id,
        host, address, requests, its share of the load, clock offset and its error bound,
        start lateness, its own health) and ``spread`` (how many nodes, how the schedule
        was shared, the largest clock-offset error bound); warnings prefixed with their
        node; the longest node's ``engine_s``.
    """
    records: list[RequestRecord] = []
    nodes, behind, stopped, warnings = [], [], [], []
    worst: dict[str, Any] = {}
    worst_lag = -1.0
    for o in outs:
        label = node_label(o.node)
        delta = shift_of(o, anchor_perf_ns, anchor_wall_ns)
        records += [shifted(r, delta, label) for r in o.records]
        health = dict(M.field(o.metrics, "client") or {})
        lag = M.CLIENT_LAG_P99.value(o.metrics)
        if lag is not None and lag > worst_lag:
            worst_lag, worst = lag, health
        behind += [f"{label}: {b}" for b in health.get("behind") or []]
        if health.get("stopped"):
            stopped.append(f"{label}: {health['stopped']}")
        warnings += [f"client node {label}: {w}" for w in o.warnings]
        nodes.append({"node_id": o.node.get("node_id"), "hostname": o.node.get("hostname"), "ip": o.node.get("ip"),
                      "label": label, "requests": len(o.records), "load": o.load,
                      "clock_offset_s": o.offset_ns / 1e9, "clock_error_s": o.rtt_ns / 2e9,
                      "start_late_s": o.late_ns / 1e9, "engine_s": o.engine_s, "health": health})
    records.sort(key=lambda r: r.t_send_ns)
    client = {"loop_lag_ms": worst.get("loop_lag_ms"), "release_lag_ms": worst.get("release_lag_ms"),
              "event_loop": worst.get("event_loop"), "behind": behind, "stopped": "; ".join(stopped) or None,
              "nodes": nodes,
              "spread": {"nodes": len(outs), "method": outs[0].method if outs else "",
                         "clock_error_s": max((o.rtt_ns / 2e9 for o in outs), default=0.0)}}
    metrics = {"client_lag_p99_ms": worst_lag if worst_lag >= 0 else None, "client": client}
    return records, metrics, warnings, max((o.engine_s for o in outs), default=0.0)
