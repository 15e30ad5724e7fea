"""Where a stored cell ran, for runs of the Ray executor (:mod:`infbench.execution.executors.ray`).

A Ray run stores, on every cell's device, ``properties["ray_node"] = {"node_id",
"hostname", "ip"}``, and in the run's provenance ``ray.nodes[node_id] = {"hostname",
"ip", "provenance"}`` with that node's own provenance (its worker's libraries, devices,
infbench version and git sha). No store schema change: both are JSON the store keeps.
"""

from __future__ import annotations

import json
from typing import Any

from infbench.store import Store


def cell_node(store: Store, row: dict[str, Any]) -> dict[str, Any] | None:
    """The node a stored cell ran on, with its provenance.

    Args:
        store: the store.
        row: a row of :meth:`Store.results` (its ``device`` and ``run_id``).

    Returns:
        ``{"node_id", "hostname", "ip", "provenance"}``, or None for a cell not run by
        the Ray executor (or a Ray cell failed before reaching a node).
    """
    node = ((row.get("device") or {}).get("properties") or {}).get("ray_node")
    if not node:
        return None
    nodes = run_nodes(store, row["run_id"])
    return {**node, "provenance": (nodes.get(node["node_id"]) or {}).get("provenance")}


def run_nodes(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    """``node_id -> {"hostname", "ip", "provenance"}`` of a Ray run (empty for other runs)."""
    row = store.db.execute("SELECT provenance FROM runs WHERE run_id=?", (run_id,)).fetchone()
    if row is None or not row[0]:
        return {}

    return (json.loads(row[0]).get("ray") or {}).get("nodes") or {}
