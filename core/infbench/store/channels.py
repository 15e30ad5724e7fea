"""Store accessors for a cell's telemetry channels and its server's Prometheus metrics
(tables of schema 3, :mod:`infbench.store.migrations.m0003_telemetry_server_metrics`).

:func:`save` is called by :meth:`infbench.store.Store.save_cell` inside the cell's
transaction; the readers take a :class:`~infbench.store.Store` and a cell row id.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

from infbench.data.schema import CellResult, ChannelReading

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store


def save(db: sqlite3.Connection, row: int, r: CellResult) -> None:
    """Write ``r.telemetry`` and ``r.server_metrics`` for cell attempt ``row`` (the caller
    holds the transaction)."""
    if r.telemetry:
        db.executemany("INSERT INTO telemetry_samples VALUES (?,?,?,?,?)",
                       [(row, c.t_ns, c.device_index, json.dumps(c.values), json.dumps(c.throttle) if c.throttle
                         else None) for c in r.telemetry])
    sm = r.server_metrics
    if sm:
        db.execute("INSERT INTO server_metrics VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (row, sm.get("server"), sm.get("url"), sm.get("scrapes"), sm.get("failures"), sm.get("interval_s"),
                    sm.get("t0_ns"), sm.get("t1_ns"), json.dumps(sm.get("deltas") or {}),
                    json.dumps(sm.get("histograms") or {})))
        db.executemany("INSERT INTO server_metric_samples VALUES (?,?,?,?)",
                       [(row, int(t), name, float(v)) for name, pts in (sm.get("series") or {}).items()
                        for t, v in pts])


def telemetry(store: Store, cell_row: int) -> list[ChannelReading]:
    """The channel readings of one stored attempt, by time."""
    rows = store.db.execute("SELECT * FROM telemetry_samples WHERE cell_row=? ORDER BY t_ns, device_index",
                            (cell_row,))
    return [ChannelReading(t_ns=r["t_ns"], device_index=r["device_index"], values=json.loads(r["channels"] or "{}"),
                           throttle=json.loads(r["throttle"]) if r["throttle"] else []) for r in rows]


def server_metrics(store: Store, cell_row: int) -> dict[str, Any] | None:
    """The server metrics of one stored attempt in the form the scraper produced them
    (:meth:`infbench.measure.server_metrics.ServerMetricsScraper.result`), or None."""
    r = store.db.execute("SELECT * FROM server_metrics WHERE cell_row=?", (cell_row,)).fetchone()
    if r is None:
        return None
    series: dict[str, list[list[float]]] = {}
    for s in store.db.execute("SELECT t_ns, name, value FROM server_metric_samples WHERE cell_row=? ORDER BY t_ns",
                              (cell_row,)):
        series.setdefault(s["name"], []).append([s["t_ns"], s["value"]])
    return {"server": r["server"], "url": r["url"], "interval_s": r["interval_s"], "scrapes": r["scrapes"],
            "failures": r["failures"], "t0_ns": r["t0_ns"], "t1_ns": r["t1_ns"], "series": series,
            "deltas": json.loads(r["deltas"] or "{}"), "histograms": json.loads(r["histograms"] or "{}")}
