"""Advisory per-cell claims: two ``infbench run`` processes on one store never measure
the same cell at the same time.

Before measuring a cell, a run claims it (:func:`claim`): in one ``BEGIN IMMEDIATE``
transaction it checks that no *live* process holds a claim on the cell and that the
cell is not stored ok by now (another process may have finished it since this run
planned), then writes its own claim (run, host, pid and process start time). The claim
is dropped once the cell is stored (:func:`release`), and all of a run's claims when the
run ends (:func:`release_run`). A second process running the same sweep so skips the
cells the first is measuring or has finished, and the two share the sweep.

A claim is live when its process still runs: same host, the pid exists and started when
the claim says (pid reuse is told apart). A claim from another host (a store on a shared
file system) is trusted for :data:`FOREIGN_CLAIM_TTL_S`. A dead process's claims are
simply taken over. Claims are advisory: a store that cannot take a claim (locked, full)
does not stop the run, which then measures without one.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infbench.store import process_started

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store

#: Seconds a claim written on another host is trusted (its process cannot be checked).
FOREIGN_CLAIM_TTL_S = 6 * 3600.0
#: Seconds a claim waits for another process's write lock (claims are best effort).
CLAIM_BUSY_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: run id, host and pid."""

    run_id: str
    host: str | None
    pid: int | None

    def describe(self) -> str:
        """``run 3f2a9c (pid 1234 on node7)``."""
        return f"run {self.run_id} (pid {self.pid} on {self.host})"


def owner_alive(host: str | None, pid: int | None, pid_started: float | None, claimed_at: float | None = None,
                now: float | None = None) -> bool:
    """Whether the process that wrote a claim or a run still runs (see the module doc)."""
    if host != socket.gethostname():
        return claimed_at is not None and (now or time.time()) - claimed_at < FOREIGN_CLAIM_TTL_S
    if not pid:
        return False
    started = process_started(pid)
    if started is None:
        return False
    return pid_started is None or abs(started - pid_started) < 2.0


class _busy_timeout:
    def __init__(self, db: sqlite3.Connection, seconds: float):
        self.db, self.ms = db, int(seconds * 1000)

    def __enter__(self) -> None:
        self.old = self.db.execute("PRAGMA busy_timeout").fetchone()[0]
        self.db.execute(f"PRAGMA busy_timeout={self.ms}")

    def __exit__(self, *exc: Any) -> None:
        self.db.execute(f"PRAGMA busy_timeout={int(self.old)}")


def claim(store: Store, cell_id: str, run_id: str, force: bool = False) -> Holder | None:
    """Claim ``cell_id`` for ``run_id``.

    Args:
        store: the :class:`~infbench.store.Store`.
        cell_id: the cell to measure.
        run_id: this run.
        force: measure it even when it is stored ok already (``--force``); a live
            claim of another process still wins.

    Returns:
        None when the cell is this run's to measure; else who has it: the live process
        measuring it, or (``run_id`` of the stored attempt, pid None) the run that
        stored it ok since this run planned.

    Raises:
        sqlite3.Error: the store cannot take the claim (locked, full, corrupt).
    """
    db = store.db
    me, pid, started = socket.gethostname(), os.getpid(), process_started()
    with _busy_timeout(db, CLAIM_BUSY_TIMEOUT_S), store.transaction():
        row = db.execute("SELECT run_id, host, pid, pid_started, claimed_at FROM claims WHERE cell_id=?",
                         (cell_id,)).fetchone()
        if row is not None and row["run_id"] != run_id and owner_alive(row["host"], row["pid"], row["pid_started"],
                                                                      row["claimed_at"]):
            return Holder(row["run_id"], row["host"], row["pid"])
        if not force:
            done = db.execute("SELECT run_id, status FROM cells WHERE cell_id=? ORDER BY id DESC LIMIT 1",
                              (cell_id,)).fetchone()
            if done is not None and done["status"] == "ok":
                return Holder(done["run_id"], None, None)
        db.execute("INSERT OR REPLACE INTO claims VALUES (?,?,?,?,?,?)",
                   (cell_id, run_id, me, pid, started, time.time()))
    return None


def release(store: Store, cell_id: str, run_id: str) -> None:
    """Drop this run's claim on ``cell_id`` (no error if it holds none).

    Raises:
        sqlite3.Error: the store cannot be written.
    """
    with _busy_timeout(store.db, CLAIM_BUSY_TIMEOUT_S), store.transaction() as db:
        db.execute("DELETE FROM claims WHERE cell_id=? AND run_id=?", (cell_id, run_id))


def release_run(store: Store, run_id: str) -> None:
    """Drop every claim of ``run_id``.

    Raises:
        sqlite3.Error: the store cannot be written.
    """
    with _busy_timeout(store.db, CLAIM_BUSY_TIMEOUT_S), store.transaction() as db:
        db.execute("DELETE FROM claims WHERE run_id=?", (run_id,))


def live_claims(store: Store) -> dict[str, Holder]:
    """Cell id -> holder, for the claims whose process still runs."""
    out = {}
    for r in store.db.execute("SELECT cell_id, run_id, host, pid, pid_started, claimed_at FROM claims"):
        if owner_alive(r["host"], r["pid"], r["pid_started"], r["claimed_at"]):
            out[r["cell_id"]] = Holder(r["run_id"], r["host"], r["pid"])
    return out
