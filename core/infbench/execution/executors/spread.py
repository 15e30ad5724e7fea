"""Serving load generated from several nodes of a Ray cluster (``--load-nodes N``).

One process measures a serving cell (it launched the server, or it drives an endpoint):
it keeps the engine session, the power sampling and the server's metrics, and it stores
the cell. With a :class:`LoadSpread` in its run context
(:attr:`infbench.execution.session.RunContext.spread`), the engine session measures each serving
cell through :meth:`LoadSpread.runner` instead of the engine's own client: the cell's
request schedule is shared out over ``N`` client nodes (:func:`infbench.measure.remote_load.partition`),
each node sends its share with infbench's own client on its own clock, and the records
come back to be merged into the one cell (:func:`infbench.measure.remote_load.merge`). Every
scenario gets it through the session: a sweep's serving cells, each probe of a
``--find-max`` search.

The client nodes: one client actor per node (:func:`run_share` on the node) (Ray node affinity, no CPU reserved,
like the fleet detection), kept for the whole run; by default the alive nodes with the
most free CPUs, the node of the measuring process last. A client never shares a node with
another client of the same cell. Each node's clock offset from ours is measured before
every cell (the quickest of a few round trips: the offset's error is at most half that
round trip), the common start is set far enough ahead for every node to get it, and each
node starts at that instant on its own wall clock.

Limits: the server must be reachable from the client nodes (a managed server infbench
starts listens on 127.0.0.1, so its clients must be raylets of the same host; on a real
multi-host cluster drive a server that listens on the network with ``--engine openai
--base-url``); client nodes are not reserved (a node that measures another group while
it sends load is visible in its client health, not prevented).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from typing import Any

from infbench.data.engine import RunOutput
from infbench.data.engine_options import as_dict
from infbench.data.errors import ConfigError, EngineUnavailable
from infbench.data.schema import Cell
from infbench.engines.openai import OpenAIEngine
from infbench.execution.executors.ray import _affinity, connect, import_ray
from infbench.execution.executors.raynode import NODE_ENV
from infbench.measure.remote_load import NodeOutput, merge, partition

#: Seconds between the start being set and the nodes starting, at least (Ray delivers the
#: call meanwhile); more when a round trip to a node takes longer.
START_LEAD_S = 1.0
#: Round trips to each node to measure its clock offset (the quickest one counts).
CLOCK_PINGS = 5
#: Seconds a client node may take beyond the cell's own limits before it is given up.
GRACE_S = 120.0


def clock_offset(ray: Any, actor: Any, pings: int = CLOCK_PINGS) -> tuple[int, int]:
    """The node's wall clock minus ours and the round trip it was measured with (ns), from
    the quickest of ``pings`` calls (Cristian's method: the node's reading is taken as the
    midpoint of the call, so the offset's error is at most half the round trip)."""
    best: tuple[int, int] | None = None
    for _ in range(pings):
        t0 = time.time_ns()
        theirs = ray.get(actor.clock.remote())
        t1 = time.time_ns()
        if best is None or t1 - t0 < best[1]:
            best = (theirs - (t0 + t1) // 2, t1 - t0)
    assert best is not None
    return best


def client_job(engine: Any, share: Any, start_wall_ns: int, limit_s: float | None) -> dict[str, Any]:
    """What a client node needs to send its share: the server's URL and the engine's request
    options (a managed server's served model name included), the API key's value (kept in
    memory on the node, never written), the share's cell and prompts, the start on the
    node's own wall clock and the time limit."""
    options = {k: v for k, v in as_dict(engine.options).items() if k not in ("api_key_env", "base_url")}
    return {"base_url": engine.base_url, "key": getattr(engine, "_key", None), "options": options,
            "device": engine.device, "cell": share.cell, "prompts": share.prompts, "start_wall_ns": start_wall_ns,
            "limit_s": limit_s, "method": share.method}


def run_share(job: dict[str, Any]) -> dict[str, Any]:
    """Send one share from this process (what :class:`ClientActor.run` does on its node):
    infbench's OpenAI client pointed at the server, started at ``job["start_wall_ns"]`` on
    this host's wall clock.

    Returns:
        ``{"records", "anchor_perf_ns", "anchor_wall_ns", "late_ns", "metrics", "warnings",
        "engine_s"}`` (records on this process's ``perf_counter_ns`` clock).

    Raises:
        EngineUnavailable: the server does not answer from here.
    """
    engine = OpenAIEngine(job["device"], {**job["options"], "base_url": job["base_url"]})
    engine._key = job["key"]
    engine._check_server()
    deadline = None
    while (left := job["start_wall_ns"] - time.time_ns()) > 0:
        time.sleep(min(left / 1e9, 0.5) if left > 2_000_000 else 0)
    anchor_perf, anchor_wall = time.perf_counter_ns(), time.time_ns()
    if job["limit_s"]:
        deadline = anchor_perf + int(job["limit_s"] * 1e9)
    out = engine.run(job["cell"], job["prompts"], deadline_ns=deadline)
    return {"records": out.records, "anchor_perf_ns": anchor_perf, "anchor_wall_ns": anchor_wall,
            "late_ns": anchor_wall - job["start_wall_ns"], "metrics": out.metrics, "warnings": out.warnings,
            "engine_s": out.engine_s}


@functools.cache
def _client_class() -> Any:
    """The client actor class (defined on first use: importing this module needs no Ray)."""
    ray = import_ray()

    @ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
    class ClientActor:
        """A load client on one node: reads its clock, sends shares (:func:`run_share`)."""

        def clock(self) -> int:
            return time.time_ns()

        def run(self, job: dict[str, Any]) -> dict[str, Any]:
            return run_share(job)

    return ClientActor


class LoadSpread:
    """Serving cells' load sent from ``nodes`` client nodes of a Ray cluster (see the module doc).

    Args:
        nodes: client nodes per cell (>= 1; 0: every alive node of the cluster).
        address: the cluster (``--ray-address``, else ``RAY_ADDRESS``; ignored when this
            process is connected already).
        exclude: a node id to use last (the node of the measuring process; default
            ``$INFBENCH_RAY_NODE``, set for a worker on a Ray node, else the node this
            process's Ray connection reports).

    Raises:
        ConfigError: ``nodes`` < 1.
    """

    def __init__(self, nodes: int, address: str | None = None, exclude: str | None = None):
        if nodes < 0:
            raise ConfigError(f"--load-nodes must be at least 1, got {nodes}")


        self.n, self.address, self.exclude = nodes, address, exclude or os.environ.get(NODE_ENV)
        self.ray: Any = None
        self.connected = False
        self.actors: list[tuple[dict[str, Any], Any]] = []

    # -- the session's hook ----------------------------------------------------------------
    def runner(self, engine: Any, cell: Cell) -> Callable[[Cell, list[Any], int | None], RunOutput] | None:
        """How the session runs ``cell`` on ``engine``: spread over the client nodes when it is
        a serving cell of an OpenAI-compatible engine (a managed server or an endpoint), else
        None (measured here as usual)."""
        if cell.load is None or cell.load.mode == "batch" or not isinstance(engine, OpenAIEngine):
            return None

        def run(c: Cell, prompts: list[Any], deadline_ns: int | None = None) -> RunOutput:
            return self.run(engine, c, prompts, deadline_ns)

        return run

    def close(self) -> None:
        """Stop the client actors, and disconnect if this object connected."""
        ray = self.ray
        for _, a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self.actors = []
        if self.connected and ray is not None:
            with contextlib.suppress(Exception):
                ray.shutdown()
            self.connected = False

    # -- the work --------------------------------------------------------------------------
    def _clients(self) -> list[tuple[dict[str, Any], Any]]:
        """The client actors, started on first use on the chosen nodes.

        Raises:
            ConfigError: fewer alive nodes than asked for.
        """
        if self.actors:
            return self.actors
        ray = self.ray = import_ray()
        self.connected = connect(self.address) or self.connected
        here = self.exclude or ray.get_runtime_context().get_node_id()
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if self.n == 0:
            self.n = len(alive)
        if len(alive) < self.n or not alive:
            raise ConfigError(f"--load-nodes {self.n} but the Ray cluster has {len(alive)} alive node(s)",
                              hint=f"use --load-nodes {len(alive)} or add nodes")
        free = ray.available_resources_per_node() if hasattr(ray, "available_resources_per_node") else {}

        def rank(n: dict[str, Any]) -> tuple[int, float, str]:
            cpus = float((free.get(n["NodeID"]) or {}).get("CPU", n.get("Resources", {}).get("CPU", 0)))
            return (n["NodeID"] == here, -cpus, n["NodeID"])

        chosen = sorted(alive, key=rank)[:self.n]
        cls = _client_class()
        self.actors = [({"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname", ""),
                         "ip": n.get("NodeManagerAddress", "")},
                        cls.options(scheduling_strategy=_affinity(n["NodeID"])).remote()) for n in chosen]
        return self.actors

    def run(self, engine: Any, cell: Cell, prompts: list[Any], deadline_ns: int | None = None) -> RunOutput:
        """Measure ``cell``'s load from the client nodes and merge what they send back.

        Args:
            engine: the started engine (its URL, key and request options are the clients').
            cell: the serving cell.
            prompts: its prompts (:meth:`~infbench.data.engine.Engine.make_prompts`).
            deadline_ns: the cell's deadline on this process's ``perf_counter_ns`` clock.

        Returns:
            The merged :class:`~infbench.data.engine.RunOutput`: every node's records on
            this process's clock, each naming its node; ``metrics["client"]`` with every
            node, its clock offset and health (:func:`~infbench.measure.remote_load.merge`).

        Raises:
            EngineUnavailable: a client node cannot reach the server, or fails.
            KeyboardInterrupt: the clients are stopped first.
        """
        actors = self._clients()
        ray = self.ray
        shares = partition(cell, prompts, len(actors))
        used = actors[:len(shares)]
        offsets = [clock_offset(ray, a) for _, a in used]
        lead = max(START_LEAD_S, 4 * max(rtt for _, rtt in offsets) / 1e9)
        anchor_perf, anchor_wall = time.perf_counter_ns(), time.time_ns()
        start = anchor_wall + int(lead * 1e9)
        limit = (deadline_ns - anchor_perf) / 1e9 - lead if deadline_ns is not None else None
        refs = [a.run.remote(client_job(engine, s, start + off, limit)) for s, (_, a), (off, _) in
                zip(shares, used, offsets, strict=True)]
        wait = None if limit is None else limit + lead + GRACE_S
        try:
            got = ray.get(refs, timeout=wait)
        except KeyboardInterrupt:
            for _, a in used:
                with contextlib.suppress(Exception):
                    ray.kill(a)
            self.actors = []
            raise
        except Exception as exc:  # noqa: BLE001 - a node failed or could not reach the server
            raise EngineUnavailable(f"a client node failed: {type(exc).__name__}: {str(exc).strip()[:400]}",
                                    hint="every client node must reach the server's URL (see docs/cluster.md)") \
                from exc
        outs = [NodeOutput(node, g["records"], g["anchor_perf_ns"], g["anchor_wall_ns"], off, rtt, g["late_ns"],
                           g["metrics"], g["warnings"], g["engine_s"],  # metrics-dict: a client node's reply
                           s.cell.load.model_dump(exclude_none=True) if s.cell.load is not None else {}, s.method)
                for (node, _), (off, rtt), g, s in zip(used, offsets, got, shares, strict=True)]
        records, metrics, warnings, engine_s = merge(outs, anchor_perf, anchor_wall)
        return RunOutput(records=records, engine_s=engine_s, warnings=warnings, metrics=metrics)
