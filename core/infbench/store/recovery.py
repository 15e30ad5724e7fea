"""What a command that writes the store does first (``infbench run``, ``ingest``):
refuse a damaged store, close the runs whose process is gone, drop dead claims, and
store the cells the journal kept (:mod:`infbench.store.journal`).
"""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infbench.store import StoreError, describe_db_error, journal
from infbench.store.claims import live_claims, owner_alive

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store


@dataclass
class Recovery:
    """What :func:`prepare` did.

    Attributes:
        interrupted: ids of the ``running`` runs whose process was gone, now ``interrupted``.
        replayed_cells: cells stored from the journal.
        journal_files: journal files replayed (and deleted).
        notes: lines for the user (a journal that could not be replayed yet...).
    """

    interrupted: list[str] = field(default_factory=list)
    replayed_cells: int = 0
    journal_files: int = 0
    notes: list[str] = field(default_factory=list)


def check_integrity(store: Store) -> None:
    """Refuse a store that fails ``PRAGMA integrity_check``.

    Raises:
        StoreError: the check finds problems (the first ones are named) or cannot run.
    """
    try:
        problems = store.integrity_problems()
    except sqlite3.DatabaseError as exc:
        problems = [describe_db_error(exc)]
    if problems:
        raise StoreError(f"the results store {store.path} is damaged (PRAGMA integrity_check: "
                         f"{'; '.join(problems[:3])}); infbench does not write into it",
                         hint=f"salvage it with `sqlite3 {store.path} .recover | sqlite3 recovered.db` and pass "
                              "--store recovered.db (or restore a backup); cells journalled for it are stored by "
                              "the next run on the repaired file")


def interrupt_stale_runs(store: Store) -> list[str]:
    """Mark ``interrupted`` every ``running`` run whose process is gone (killed with
    SIGKILL, out of memory, its node lost): same host and a dead pid, or no owner
    recorded (written before owners were). Runs of other hosts are left alone.

    Returns:
        The ids of the runs marked.
    """
    here = socket.gethostname()
    rows = store.db.execute("SELECT run_id, host, pid, pid_started FROM runs WHERE status='running'").fetchall()
    stale = [r["run_id"] for r in rows
             if r["host"] is None or (r["host"] == here and not owner_alive(r["host"], r["pid"], r["pid_started"]))]
    if stale:
        with store.transaction() as db:
            for run_id in stale:
                last = db.execute("SELECT MAX(finished_at) FROM cells WHERE run_id=?", (run_id,)).fetchone()[0]
                db.execute("UPDATE runs SET status='interrupted', finished_at=? WHERE run_id=? AND status='running'",
                           (last or time.time(), run_id))
                db.execute("DELETE FROM claims WHERE run_id=?", (run_id,))
    return stale


def drop_dead_claims(store: Store) -> int:
    """Delete the claims whose process is gone; returns how many."""
    live = live_claims(store)
    dead = [r[0] for r in store.db.execute("SELECT cell_id FROM claims") if r[0] not in live]
    if dead:
        with store.transaction() as db:
            db.executemany("DELETE FROM claims WHERE cell_id=?", [(c,) for c in dead])
    return len(dead)


def prepare(store: Store, integrity: bool = True, check: Callable[[Any], list[str]] | None = None) -> Recovery:
    """Make ``store`` ready for a writing command (see the module doc).

    Args:
        store: a writable :class:`~infbench.store.Store`.
        integrity: run ``PRAGMA integrity_check`` first (``infbench run``, ``ingest``).
        check: the physics check of a journalled cell (:func:`infbench.store.journal.replay`).

    Returns:
        :class:`Recovery`.

    Raises:
        StoreError: the store is damaged, or cannot be written.
    """
    if integrity:
        check_integrity(store)
    rec = Recovery()
    try:
        rec.interrupted = interrupt_stale_runs(store)
        drop_dead_claims(store)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot write the results store {store.path}: {describe_db_error(exc)}",
                         hint="free disk space, wait for the process holding it, or pass --store another "
                              "file") from None
    refused: list[tuple[str, str]] = []
    try:
        counts = journal.replay(store, refused, check)
    except (sqlite3.Error, OSError, ValueError) as exc:
        rec.notes.append(f"cells kept in the journal ({journal.journal_dir()}) could not be stored yet: "
                         f"{describe_db_error(exc)}; the next run tries again")
        return rec
    rec.replayed_cells, rec.journal_files = counts["cells"], counts["files"]
    if refused:
        rec.notes.append(journal.refused_note(refused))
    if counts["busy"]:
        rec.notes.append(f"{counts['busy']} journal file(s) for this store belong to a run still going; "
                         "they are stored when it ends")
    return rec
