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
  and the server's Prometheus metrics per cell (:mod:`infbench.store.channels`).

The layout is built and upgraded by numbered migrations (:mod:`infbench.store.migrations`);
a store written by a newer infbench is refused.

The newest attempt of a ``cell_id`` is its current result; a cell whose newest attempt
is ``ok`` is skipped by later runs unless ``--force``.

Opening is checked: a path that is a folder, a device, a file that is not SQLite, a
corrupt or foreign SQLite file, or a place that cannot be written is refused with a
:class:`StoreError` (exit 2) naming the file and what to do. Commands that only read
(``results``, ``report``, ``export``, ``compare``) open the store read-only
(``readonly=True``): the file is never rewritten, and a store of an older schema is
migrated in memory. What ``infbench run`` adds around a writable store (integrity check,
runs left ``running`` by a dead process, the journal of cells that could not be written,
per-cell claims) lives in :mod:`infbench.store.recovery`, :mod:`infbench.store.journal`
and :mod:`infbench.store.claims`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import psutil

from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.paths import default_store_path
from infbench.data.schema import CellResult, PowerReading, RequestRecord
from infbench.data.secrets import redact, redact_tree
from infbench.data.stored import StoredCell
from infbench.data.version import SCHEMA_VERSION
from infbench.measure.derive import cell_metrics
from infbench.store import channels, migrations

#: The cells table's columns a :class:`StoredCell` holds, with its ``attempt``.
_STORED_NAMES = tuple(StoredCell.__dataclass_fields__)

#: Key of ``requests.server`` that holds the client's details of a request (``RequestRecord.client()``).
CLIENT_KEY = "_client"


def _server_json(q: RequestRecord) -> str | None:
    """``requests.server`` of a record: the server's fields, plus the client's under :data:`CLIENT_KEY`."""
    client = q.client()
    if q.server is None and client is None:
        return None
    return json.dumps({**(q.server or {}), **({CLIENT_KEY: client} if client else {})})


def _loads(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _metric_shapes() -> dict[str, type]:
    """Each metric :func:`~infbench.measure.derive.cell_metrics` derives -> ``dict``
    (a summary or the SLO: numbers inside), ``bool`` or ``float`` (a number or None)."""
    rec = RequestRecord(t_send_ns=0, t_tokens_ns=[1, 2, 3], n_in=1, n_out=3, t_sched_ns=0)
    m = cell_metrics([rec], energy_j=1.0, slo={"ttft_s": 1.0})
    return {k: dict if isinstance(v, dict) else bool if isinstance(v, bool) else float for k, v in m.items()}


_SHAPES: dict[str, type] = {}


def _number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def checked_metrics(metrics: Any) -> dict[str, Any]:
    """A stored cell's metrics as readers expect them: each metric that
    :func:`~infbench.measure.derive.cell_metrics` derives has its shape (a summary dict of
    finite numbers, a bool, or a finite number or None); a value of another shape (a
    string where a number belongs, NaN, a list...) is replaced by None, and its key listed
    under ``"invalid"``. Other keys are kept as stored. One bad cell so never breaks a
    table, report or export of the whole store."""
    if not isinstance(metrics, dict):
        return {}
    if not _SHAPES:
        _SHAPES.update(_metric_shapes())
    out, bad = dict(metrics), []
    for k, v in metrics.items():
        shape = _SHAPES.get(k)
        if shape is None:
            continue
        ok = (isinstance(v, dict) and all(_number(x) for x in v.values())) if shape is dict else (
            isinstance(v, bool) if shape is bool else _number(v))
        if not ok and v is not None:
            out[k] = None
            bad.append(k)
    if bad:
        out["invalid"] = bad
    return out


def redacted_cell(r: CellResult) -> CellResult:
    """A copy of ``r`` with every stored text redacted (:func:`infbench.data.secrets.redact_tree`);
    the spec, ids and numbers are kept as they are."""
    def text(v: str | None) -> str | None:
        return redact(v) if v else v

    records = [q if q.error is None and not q.server else
               q.model_copy(update={"error": text(q.error), "server": redact_tree(q.server) if q.server else q.server})
               for q in r.records]
    sm = redact_tree(r.server_metrics) if r.server_metrics else r.server_metrics
    return r.model_copy(update={
        "error": text(r.error), "power_note": text(r.power_note), "engine": redact_tree(r.engine),
        "metrics": redact_tree(r.metrics), "records": records, "server_metrics": sm,
        "device": r.device.model_copy(update={"properties": redact_tree(r.device.properties),
                                              "model": redact(r.device.model)}),
    })


class StoreVersionError(InfbenchError):
    """The store was written by a newer infbench with an incompatible layout."""


class StoreError(ConfigError):
    """The store cannot be opened or written: not a file, not SQLite, corrupt, foreign,
    read-only, missing (read-only opens). Exit status 2, with what to do."""


#: Tables every infbench store has (any schema version).
STORE_TABLES = ("runs", "cells", "requests", "power_samples")
#: Seconds a write waits for another process's lock before failing ("database is locked").
BUSY_TIMEOUT_S = 30.0


def valid_run_prefix(text: str) -> bool:
    """True for a run id or a prefix of one: 1 to 32 lower-case hex digits."""
    return 0 < len(text) <= 32 and all(c in "0123456789abcdef" for c in text)


def describe_db_error(exc: BaseException) -> str:
    """A short reason for a failed SQLite/OS operation (``database or disk is full``,
    ``Permission denied``...)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def process_started(pid: int | None = None) -> float | None:
    """The start time (UNIX s) of process ``pid`` (default: this one), or None when it
    does not exist; with the pid and host it names a process even after pid reuse."""
    try:
        return psutil.Process(pid or os.getpid()).create_time()
    except (psutil.Error, OSError):
        return None


class Store:
    """The SQLite results store.

    Args:
        path: database file (created with its folder if missing, unless ``readonly``).
        readonly: open for reading only: nothing is created or written (an older schema
            is migrated in a copy in memory); the file must exist.
        timeout_s: seconds a write waits for another process's lock.

    Raises:
        StoreVersionError: the file's schema version is newer than this infbench's.
        StoreError: the path is not a usable infbench store (see the module doc).
    """

    def __init__(self, path: str | Path | None = None, readonly: bool = False, timeout_s: float = BUSY_TIMEOUT_S):
        self.path = Path(path) if path else default_store_path()
        self.readonly = readonly
        #: The migrations this open applied (empty when the store was current).
        self.migrated: list[migrations.Migration] = []
        #: Provenance and command of the runs begun by this connection (for the journal).
        self.run_meta: dict[str, dict[str, Any]] = {}
        self._tx_depth = 0
        self._db: sqlite3.Connection | None = None
        try:
            self._open(timeout_s)
        except BaseException:
            if self._db is not None:
                self._db.close()
            raise

    def _open(self, timeout_s: float) -> None:
        p = self.path
        if p.exists() and not p.is_file():
            kind = "a folder" if p.is_dir() else "not a regular file"
            raise StoreError(f"the results store {p} is {kind}",
                             hint="pass --store a results .db file (a new file name creates one)")
        if self.readonly:
            if not p.exists():
                raise StoreError(f"no results store at {p}", hint="run `infbench run` first, or pass --store FILE.db")
            self._db = self._connect_readonly(timeout_s)
        else:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
                    raise PermissionError(13, "read-only file or folder (SQLite needs to write beside the store)")
                self._db = sqlite3.connect(p, timeout=timeout_s)
            except (OSError, sqlite3.Error) as exc:
                raise StoreError(f"cannot open the results store {p}: {describe_db_error(exc)}",
                                 hint="pass --store a file in a writable folder, or set INFBENCH_HOME") from None
        self.db.row_factory = sqlite3.Row
        try:
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot open the results store {p}: {describe_db_error(exc)}",
                             hint="check the permissions of the file and its folder, or pass --store another "
                                  "file") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{p} is not a readable SQLite database ({describe_db_error(exc)})",
                             hint="pass --store a results .db file written by infbench; a damaged store can be "
                                  f"salvaged with `sqlite3 {p} .recover | sqlite3 recovered.db`") from None
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"{p} was written by a newer infbench (store schema {version}, this one reads "
                f"{SCHEMA_VERSION})", hint="upgrade infbench, or use another --store")
        theirs = tables - {"sqlite_sequence", "_migrations", *STORE_TABLES}
        if (tables and not set(STORE_TABLES) <= tables) or (version == 0 and theirs):
            shown = ", ".join(sorted(tables - {"sqlite_sequence"})[:8])
            raise StoreError(f"{p} is an SQLite database but not an infbench results store (its tables: {shown})",
                             hint="infbench does not write into other databases: pass --store another file")
        if self.readonly:
            if version < SCHEMA_VERSION:
                self._migrate_in_memory()
            return
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.migrated = migrations.apply(self.db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot write the results store {p}: {describe_db_error(exc)}",
                             hint="free disk space, check the file's permissions, or pass --store another "
                                  "file") from None

    def _connect_readonly(self, timeout_s: float) -> sqlite3.Connection:
        uri = "file:" + quote(str(self.path.resolve()))
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout_s)
        try:
            db.execute("PRAGMA user_version").fetchone()
            return db
        except sqlite3.OperationalError:
            # A WAL store on a read-only file system cannot take SQLite's shared-memory
            # lock; nobody can write it there either, so read it as immutable.
            db.close()
        except sqlite3.DatabaseError:
            return db  # not SQLite at all: the caller's check says so
        if not os.access(self.path, os.R_OK):
            raise StoreError(f"cannot read the results store {self.path}: permission denied")
        try:
            db = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout_s)
            db.execute("PRAGMA user_version").fetchone()
            return db
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the results store {self.path}: {describe_db_error(exc)}") from None

    def _migrate_in_memory(self) -> None:
        """Read an older store through a migrated copy in memory (the file is untouched)."""
        mem = sqlite3.connect(":memory:")
        try:
            self.db.backup(mem)
            self.migrated = migrations.apply(mem)
        except sqlite3.DatabaseError as exc:
            mem.close()
            raise StoreError(f"cannot read the results store {self.path}: {describe_db_error(exc)}") from None
        self.db.close()
        mem.row_factory = sqlite3.Row
        self._db = mem

    @property
    def db(self) -> sqlite3.Connection:
        """The open SQLite connection.

        Raises:
            StoreError: the store could not be opened.
        """
        if self._db is None:
            raise StoreError(f"the results store {self.path} is not open")
        return self._db

    def close(self) -> None:
        """Close the connection."""
        if self._db is not None:
            self._db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Group writes into one transaction: everything inside commits together or not
        at all (``ingest`` stores a whole worker folder this way). Nests."""
        if self._tx_depth:
            self._tx_depth += 1
            try:
                yield self.db
            finally:
                self._tx_depth -= 1
            return
        if self.db.in_transaction:
            self.db.commit()
        self.db.execute("BEGIN IMMEDIATE")
        self._tx_depth = 1
        try:
            yield self.db
        except BaseException:
            self._tx_depth = 0
            self.db.rollback()
            raise
        self._tx_depth = 0
        self.db.commit()

    def integrity_problems(self, limit: int = 10) -> list[str]:
        """What ``PRAGMA integrity_check`` finds wrong (empty when the store is sound).

        Raises:
            sqlite3.DatabaseError: the file is too damaged to check.
        """
        rows = [r[0] for r in self.db.execute(f"PRAGMA integrity_check({int(limit)})")]
        return [] if rows == ["ok"] else rows

    # -- writing -------------------------------------------------------------------
    def begin_run(self, provenance: dict[str, Any], command: str = "") -> str:
        """Record the start of a run; returns its id (uuid4 hex). The command line and the
        provenance are stored redacted (:func:`infbench.data.secrets.redact_tree`), whichever path
        began the run."""
        provenance, command = redact_tree(provenance), redact(command)
        run_id = uuid.uuid4().hex[:12]
        started = time.time()
        with self.transaction():
            self.db.execute("INSERT INTO runs (run_id, started_at, finished_at, status, command, provenance, host, pid,"
                            " pid_started) VALUES (?,?,?,?,?,?,?,?,?)",
                            (run_id, started, None, "running", command, json.dumps(provenance, default=str),
                             socket.gethostname(), os.getpid(), process_started()))
        self.run_meta[run_id] = {"provenance": provenance, "command": command, "started_at": started}
        return run_id

    def update_provenance(self, run_id: str, provenance: dict[str, Any]) -> None:
        """Replace a run's provenance (a container run learns the worker's once it starts);
        stored redacted, as :meth:`begin_run` does."""
        provenance = redact_tree(provenance)
        self.run_meta.setdefault(run_id, {})["provenance"] = provenance
        with self.transaction():
            self.db.execute("UPDATE runs SET provenance=? WHERE run_id=?",
                            (json.dumps(provenance, default=str), run_id))

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark a run ``completed``, ``failed`` or ``interrupted``."""
        with self.transaction():
            self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE run_id=?", (time.time(), status, run_id))

    def save_cell(self, run_id: str, r: CellResult) -> int:
        """Store one cell attempt with its records and power readings in one transaction.
        Every text that is not part of the cell's identity is stored redacted
        (:func:`infbench.data.secrets.redact`): the error, the device (its properties: a site's
        endpoint URL), the engine description, the metrics' notes, the power note, each
        request's error and server fields, the /metrics URL.

        The same attempt stored again (this run, this cell id, the same ``started_at``: a flag
        added after it was stored, :func:`infbench.execution.bookkeeping.record`) updates that
        row's status, error and metrics in place; its records and readings stay as stored.

        Returns:
            The row id of the attempt.
        """
        r = redacted_cell(r)
        with self.transaction():
            old = self.db.execute("SELECT id FROM cells WHERE run_id=? AND cell_id=? AND started_at=? "
                                  "ORDER BY id DESC LIMIT 1", (run_id, r.cell_id, r.started_at)).fetchone()
            if old is not None:
                self.db.execute("UPDATE cells SET status=?, error=?, metrics=? WHERE id=?",
                                (r.status, r.error, json.dumps(r.metrics), old[0]))
                return int(old[0])
            cur = self.db.execute(
                "INSERT INTO cells (cell_id, spec_hash, run_id, status, error, spec, device, metrics, engine,"
                " power_note, wall_s, engine_s, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (r.cell_id, r.spec_hash, run_id, r.status, r.error, r.cell.model_dump_json(),
                 r.device.model_dump_json(), json.dumps(r.metrics), json.dumps(r.engine, default=str),
                 r.power_note, r.wall_s, r.engine_s, r.started_at, r.finished_at))
            row = int(cur.lastrowid or 0)
            self.db.executemany(
                "INSERT INTO requests VALUES (?,?,?,?,?,?,?,?,?,?)",
                [(row, i, q.t_send_ns, np.asarray(q.t_tokens_ns, dtype="<i8").tobytes(), q.n_in, q.n_out,
                  q.n_out_source, q.error, q.t_sched_ns, _server_json(q)) for i, q in enumerate(r.records)])
            self.db.executemany(
                "INSERT INTO power_samples VALUES (?,?,?,?,?,?)",
                [(row, p.t_ns, p.device_index, p.power_w, p.energy_j, p.energy_range_j) for p in r.power])
            channels.save(self.db, row, r)
        return row

    # -- reading -------------------------------------------------------------------
    def finished_cell_ids(self) -> set[str]:
        """Cell ids whose newest attempt succeeded (skipped by a re-run)."""
        q = ("SELECT c.cell_id FROM cells c JOIN (SELECT cell_id, MAX(id) AS id FROM cells GROUP BY cell_id) l "
             "ON c.id = l.id WHERE c.status = 'ok'")
        return {r[0] for r in self.db.execute(q)}

    def results(self, run_id: str | None = None, all_attempts: bool = False,
                cell_ids: list[str] | None = None) -> list[StoredCell]:
        """Stored cells, typed (:class:`~infbench.data.stored.StoredCell`: the result, its run
        id and which attempt at its cell id it is), oldest first. A row whose spec or device
        is not a JSON object (written by something else) is skipped; its metrics are checked
        (:func:`checked_metrics`).

        Args:
            run_id: only the cells of this run (a unique prefix works).
            all_attempts: every attempt instead of the newest per cell id.
            cell_ids: only these cells.
        """
        where, args = [], []
        if cell_ids is not None:
            where.append(f"c.cell_id IN ({','.join('?' * len(cell_ids))})" if cell_ids else "0")
            args.extend(cell_ids)
        if not all_attempts:
            where.append("c.id IN (SELECT MAX(id) FROM cells GROUP BY cell_id)")
        if run_id:
            where.append("c.run_id LIKE ? ESCAPE '\\'")
            args.append(run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        sql = ("SELECT c.*, (SELECT COUNT(*) FROM cells a WHERE a.cell_id = c.cell_id AND a.id <= c.id) AS attempt"
               " FROM cells c" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY c.id")
        out = []
        for row in self.db.execute(sql, args):
            d = dict(row)
            for k in ("spec", "device", "metrics", "engine"):
                d[k] = _loads(d[k])
            if not isinstance(d["spec"], dict) or not isinstance(d["device"], dict):
                continue  # not a cell this infbench can read (written by something else)
            d["metrics"] = checked_metrics(d["metrics"])  # metrics-dict: the row being read, as sqlite gives it
            if not isinstance(d["engine"], dict):
                d["engine"] = {}
            out.append(StoredCell(**{k: d[k] for k in _STORED_NAMES if k in d}))
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
