"""The journal: measured cells that could not be written to the store, kept on disk
until they can be.

When the store refuses a write (the disk is full, another process holds a lock past the
busy timeout, a page is corrupt), :func:`keep` appends the cell to
``$INFBENCH_HOME/journal/<run>-<pid>.jsonl`` and fsyncs it, and the sweep goes on. The
next ``infbench run`` or ``infbench ingest`` on that store calls :func:`replay`, which
stores every journalled cell (and the run's final status) in one transaction and then
deletes the journal file. A run also replays its own journal as it ends, so a store that
was only locked for a while gets its cells back at once.

Each line is one JSON object: ``{"kind": "run", "store", "run_id", "provenance",
"command", "started_at"}`` first, then ``{"kind": "cell", "store", "run_id", "cell":
<CellResult>, "error"}`` per cell and ``{"kind": "finish", "store", "run_id",
"status"}`` at the end. ``store`` is the store file's resolved path: only that store
replays the entry. A journal file is locked (``flock``) by the process writing it, so
no other process replays (and deletes) a journal that is still growing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.data.errors import InfbenchError

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store


class JournalError(InfbenchError):
    """A cell could be written neither to the store nor to the journal: it is lost, and
    the run stops with this error."""


def journal_dir() -> Path:
    """``$INFBENCH_HOME/journal``."""
    from infbench.data.paths import default_home

    return default_home() / "journal"


def _store_key(store: Store) -> str:
    return str(Path(store.path).resolve())


class _Open:
    """One journal file held open (and locked) by this process."""

    def __init__(self, path: Path):
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd

    def append(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        os.fsync(self.fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


#: Journal files this process writes, by (store, run id).
_open: dict[tuple[str, str], _Open] = {}


def keep(store: Store, run_id: str, result: Any, error: BaseException | str) -> Path:
    """Append ``result`` (a :class:`~infbench.data.schema.CellResult`) to the run's journal
    file, fsynced, because ``store`` could not take it.

    Args:
        store: the :class:`~infbench.store.Store` that refused the write.
        run_id: the run the cell belongs to.
        result: the measured cell.
        error: why the store refused it.

    Returns:
        The journal file.

    Raises:
        JournalError: the journal cannot be written either (the cell is lost).
    """
    return _append(store, run_id, {"kind": "cell", "cell": result.model_dump(mode="json"), "error": str(error)})


def keep_status(store: Store, run_id: str, status: str, error: BaseException | str) -> Path:
    """Journal a run's final status that the store could not take (see :func:`keep`)."""
    return _append(store, run_id, {"kind": "finish", "status": status, "error": str(error)})


def _append(store: Store, run_id: str, entry: dict[str, Any]) -> Path:
    key = (_store_key(store), run_id)
    try:
        j = _open.get(key)
        if j is None:
            d = journal_dir()
            d.mkdir(parents=True, exist_ok=True)
            j = _Open(d / f"{run_id}-{os.getpid()}.jsonl")
            _open[key] = j
            meta = store.run_meta.get(run_id, {})
            j.append({"kind": "run", "store": key[0], "run_id": run_id, "provenance": meta.get("provenance"),
                      "command": meta.get("command", ""), "started_at": meta.get("started_at", time.time())})
            with contextlib.suppress(OSError):  # the new file's name is durable too
                dfd = os.open(d, os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
        j.append({**entry, "store": key[0], "run_id": run_id})
    except OSError as exc:
        raise JournalError(f"the store {store.path} refused a measured cell and the journal {journal_dir()} "
                           f"cannot be written either ({exc.strerror or exc}): the cell is lost",
                           hint="free disk space or point INFBENCH_HOME at a writable folder; finished cells "
                                "already stored are kept") from None
    return j.path


def release(store: Store, run_id: str) -> Path | None:
    """Close (and unlock) this process's journal file of ``run_id``, so :func:`replay`
    can take it; returns its path, or None when the run journalled nothing."""
    j = _open.pop((_store_key(store), run_id), None)
    if j is None:
        return None
    j.close()
    return j.path


def _entries(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_bytes().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash while it was written: that cell was never acknowledged
        if isinstance(e, dict):
            out.append(e)
    return out


def pending(store: Store) -> list[Path]:
    """The journal files holding entries for ``store`` (whoever wrote them)."""
    d = journal_dir()
    if not d.is_dir():
        return []
    key = _store_key(store)
    found = []
    for p in sorted(d.glob("*.jsonl")):
        try:
            with p.open("rb") as f:
                first = json.loads(f.readline() or b"{}")
        except (OSError, ValueError):
            continue
        if isinstance(first, dict) and first.get("store") == key:
            found.append(p)
    return found


def replay(store: Store) -> dict[str, int]:
    """Store every journalled cell and status for ``store``, then delete the journal files.

    Each file is replayed in one transaction. A file still locked by a live writer is left
    for later; a cell already in the store (same run, cell id and start time: a replay
    cut short after its commit) is not stored twice. A run the store does not know (the
    store was restored from a backup) is recreated from the journal.

    Returns:
        ``{"files": n, "cells": n, "statuses": n, "busy": n}`` (busy: files in use).

    Raises:
        sqlite3.Error: the store cannot take them yet (the files are kept).
    """
    from infbench.data.schema import CellResult

    counts = {"files": 0, "cells": 0, "statuses": 0, "busy": 0}
    for path in pending(store):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                counts["busy"] += 1
                continue
            entries = [e for e in _entries(path) if e.get("store") == _store_key(store)]
            with store.transaction() as db:
                for e in entries:
                    run_id = e.get("run_id")
                    if e.get("kind") == "run":
                        if db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is None:
                            db.execute("INSERT INTO runs (run_id, started_at, finished_at, status, command, provenance)"
                                       " VALUES (?,?,?,?,?,?)",
                                       (run_id, e.get("started_at"), None, "interrupted", e.get("command", ""),
                                        json.dumps(e.get("provenance"), default=str)))
                    elif e.get("kind") == "cell":
                        r = CellResult.model_validate(e["cell"])
                        dup = db.execute("SELECT 1 FROM cells WHERE run_id=? AND cell_id=? AND started_at=?",
                                         (run_id, r.cell_id, r.started_at)).fetchone()
                        if dup is None:
                            store.save_cell(str(run_id), r)
                            counts["cells"] += 1
                    elif e.get("kind") == "finish":
                        db.execute("UPDATE runs SET status=?, finished_at=COALESCE(finished_at, ?) WHERE run_id=?",
                                   (e.get("status"), time.time(), run_id))
                        counts["statuses"] += 1
            path.unlink(missing_ok=True)
            counts["files"] += 1
        finally:
            os.close(fd)
    return counts
