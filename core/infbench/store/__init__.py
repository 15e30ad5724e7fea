"""Step 5 of a run: the embedded results store (SQLite in WAL mode).

Default location: ``$INFBENCH_HOME/results.db``, with ``INFBENCH_HOME`` defaulting to
``~/.infbench``; ``--store PATH`` overrides it. Tables:

* ``runs``: one row per ``infbench run`` with its provenance (host, devices, driver and
  library versions, infbench version and git sha) as JSON.
* ``cells``: one row per attempt at a cell (ok or failed, with the error), its spec,
  device, engine description and derived metrics as JSON.
* ``requests``: the raw per-request records (token times as little-endian int64 blobs;
  the server's per-request fields as JSON in ``server``, which also carries the client's
  serving-mode details under the reserved key ``_client``: :meth:`RequestRecord.client`).
* ``power_samples``: raw power readings per cell.
* ``telemetry_samples``, ``server_metric_samples``, ``server_metrics``: telemetry channels
  and the server's Prometheus metrics per cell (:mod:`infbench.store.telemetry`).

The layout is built and upgraded by numbered migrations (:mod:`infbench.store.migrations`);
a store written by a newer infbench is refused.

The newest attempt of a ``cell_id`` is its current result; a cell whose newest attempt
is ``ok`` is skipped by later runs unless ``--force``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from infbench import SCHEMA_VERSION
from infbench.errors import InfbenchError
from infbench.schema import CellResult, PowerReading, RequestRecord
from infbench.store import migrations, telemetry


def default_home() -> Path:
    """``$INFBENCH_HOME`` or ``~/.infbench``: the store, caches (dummy GGUFs) and logs."""
    return Path(os.environ.get("INFBENCH_HOME") or Path.home() / ".infbench").expanduser()


def default_store_path() -> Path:
    """``$INFBENCH_HOME/results.db``."""
    return default_home() / "results.db"


#: Key of ``requests.server`` that holds the client's details of a request (``RequestRecord.client()``).
CLIENT_KEY = "_client"


def _server_json(q: RequestRecord) -> str | None:
    """``requests.server`` of a record: the server's fields, plus the client's under :data:`CLIENT_KEY`."""
    client = q.client()
    if q.server is None and client is None:
        return None
    return json.dumps({**(q.server or {}), **({CLIENT_KEY: client} if client else {})})


class StoreVersionError(InfbenchError):
    """The store was written by a newer infbench with an incompatible layout."""


class Store:
    """The SQLite results store.

    Args:
        path: database file (created with its folder if missing).

    Raises:
        StoreVersionError: the file's schema version is newer than this infbench's.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"{self.path} was written by a newer infbench (store schema {version}, this one reads "
                f"{SCHEMA_VERSION})", hint="upgrade infbench, or use another --store")
        #: The migrations this open applied (empty when the store was current).
        self.migrated = migrations.apply(self.db)

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    # -- writing -------------------------------------------------------------------
    def begin_run(self, provenance: dict[str, Any], command: str = "") -> str:
        """Record the start of a run; returns its id (uuid4 hex)."""
        run_id = uuid.uuid4().hex[:12]
        with self.db:
            self.db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?)",
                            (run_id, time.time(), None, "running", command, json.dumps(provenance, default=str)))
        return run_id

    def update_provenance(self, run_id: str, provenance: dict[str, Any]) -> None:
        """Replace a run's provenance (a container run learns the worker's once it starts)."""
        with self.db:
            self.db.execute("UPDATE runs SET provenance=? WHERE run_id=?",
                            (json.dumps(provenance, default=str), run_id))

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark a run ``completed``, ``failed`` or ``interrupted``."""
        with self.db:
            self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE run_id=?", (time.time(), status, run_id))

    def save_cell(self, run_id: str, r: CellResult) -> int:
        """Store one cell attempt with its records and power readings in one transaction.

        Returns:
            The row id of the attempt.
        """
        with self.db:
            cur = self.db.execute(
                "INSERT INTO cells (cell_id, spec_hash, run_id, status, error, spec, device, metrics, engine,"
                " power_note, wall_s, engine_s, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (r.cell_id, r.spec_hash, run_id, r.status, r.error, r.cell.model_dump_json(),
                 r.device.model_dump_json(), json.dumps(r.metrics), json.dumps(r.engine, default=str),
                 r.power_note, r.wall_s, r.engine_s, r.started_at, r.finished_at))
            row = cur.lastrowid
            self.db.executemany(
                "INSERT INTO requests VALUES (?,?,?,?,?,?,?,?,?,?)",
                [(row, i, q.t_send_ns, np.asarray(q.t_tokens_ns, dtype="<i8").tobytes(), q.n_in, q.n_out,
                  q.n_out_source, q.error, q.t_sched_ns, _server_json(q)) for i, q in enumerate(r.records)])
            self.db.executemany(
                "INSERT INTO power_samples VALUES (?,?,?,?,?,?)",
                [(row, p.t_ns, p.device_index, p.power_w, p.energy_j, p.energy_range_j) for p in r.power])
            telemetry.save(self.db, row, r)
        return row

    # -- reading -------------------------------------------------------------------
    def finished_cell_ids(self) -> set[str]:
        """Cell ids whose newest attempt succeeded (skipped by a re-run)."""
        q = ("SELECT c.cell_id FROM cells c JOIN (SELECT cell_id, MAX(id) AS id FROM cells GROUP BY cell_id) l "
             "ON c.id = l.id WHERE c.status = 'ok'")
        return {r[0] for r in self.db.execute(q)}

    def results(self, run_id: str | None = None, all_attempts: bool = False) -> list[dict[str, Any]]:
        """Stored cells as dicts (spec, device, metrics parsed), oldest first.

        Args:
            run_id: only the cells of this run (a unique prefix works).
            all_attempts: every attempt instead of the newest per cell id.
        """
        where, args = [], []
        if not all_attempts:
            where.append("c.id IN (SELECT MAX(id) FROM cells GROUP BY cell_id)")
        if run_id:
            where.append("c.run_id LIKE ?")
            args.append(run_id + "%")
        sql = "SELECT c.* FROM cells c" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY c.id"
        out = []
        for row in self.db.execute(sql, args):
            d = dict(row)
            for k in ("spec", "device", "metrics", "engine"):
                d[k] = json.loads(d[k]) if d[k] else None
            out.append(d)
        return out

    def records(self, cell_row: int) -> list[RequestRecord]:
        """The raw request records of one stored attempt (``results()[i]["id"]``)."""
        rows = self.db.execute("SELECT * FROM requests WHERE cell_row=? ORDER BY idx", (cell_row,))
        out = []
        for r in rows:
            server = json.loads(r["server"]) if r["server"] else None
            client = server.pop(CLIENT_KEY, None) if isinstance(server, dict) else None
            times = np.frombuffer(r["t_tokens_ns"], "<i8").tolist()
            out.append(RequestRecord(t_send_ns=r["t_send_ns"], t_tokens_ns=times, n_in=r["n_in"], n_out=r["n_out"],
                                     n_out_source=r["n_out_source"], error=r["error"], t_sched_ns=r["t_sched_ns"],
                                     server=server or None, **(client or {})))
        return out

    def power(self, cell_row: int) -> list[PowerReading]:
        """The raw power readings of one stored attempt."""
        rows = self.db.execute("SELECT * FROM power_samples WHERE cell_row=? ORDER BY t_ns", (cell_row,))
        return [PowerReading(t_ns=r["t_ns"], device_index=r["device_index"], power_w=r["power_w"],
                             energy_j=r["energy_j"], energy_range_j=r["energy_range_j"]) for r in rows]

    def runs(self) -> list[dict[str, Any]]:
        """All runs, newest first, provenance parsed."""
        out = []
        for row in self.db.execute("SELECT * FROM runs ORDER BY started_at DESC"):
            d = dict(row)
            d["provenance"] = json.loads(d["provenance"]) if d["provenance"] else None
            out.append(d)
        return out
