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

Every line carries ``"mac"``: an HMAC-SHA256 (RFC 2104) of the rest of the line, as
canonical JSON, under a random key kept in ``$INFBENCH_HOME/journal.key`` (mode 0600,
made once, outside the journal folder). The store's path is part of what is signed, so
an entry is bound to its store. :func:`replay` checks every line before it stores
anything: a file with a line that is unsigned or signed with another key (a file
dropped into the folder, an entry edited by hand, a journal of another home) is refused
whole, named in :attr:`Replayed.refused` with the reason, and left where it is
(issue 41: a dropped file with TTFT -5 s and 1e15 tok/s was stored ok).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.data import metrics as M
from infbench.data.errors import InfbenchError
from infbench.data.paths import default_home
from infbench.data.schema import CellResult
from infbench.measure.derive import impossible_timing

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store


class JournalError(InfbenchError):
    """A cell could be written neither to the store nor to the journal: it is lost, and
    the run stops with this error."""


def journal_dir() -> Path:
    """``$INFBENCH_HOME/journal``."""
    return default_home() / "journal"


#: The file, in ``$INFBENCH_HOME``, holding the key that signs journal entries.
KEY_FILE = "journal.key"


def _mac_key() -> bytes:
    """The journal's signing key (32 random bytes, hex in :data:`KEY_FILE`), made on first
    use; two processes making it at once agree (the file is linked into place once).

    Raises:
        OSError: the key can be neither read nor made.
    """
    path = default_home() / KEY_FILE
    for _ in range(2):
        try:
            text = path.read_text().strip()
            if len(text) == 64:
                return bytes.fromhex(text)
        except FileNotFoundError:
            pass
        except ValueError:
            raise OSError(f"{path} is not a journal key (64 hex digits); move it away and run again") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic: the first process's key wins
        tmp.unlink(missing_ok=True)
    raise OSError(f"cannot make the journal key {path}")


def _mac(key: bytes, entry: dict[str, Any]) -> str:
    """HMAC-SHA256 of ``entry`` (without its ``mac``) as canonical JSON."""
    body = {k: v for k, v in entry.items() if k != "mac"}
    return hmac.new(key, json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode(),
                    hashlib.sha256).hexdigest()


def _store_key(store: Store) -> str:
    return str(Path(store.path).resolve())


class _Open:
    """One journal file held open (and locked) by this process."""

    def __init__(self, path: Path):
        self.path = path
        self.key = _mac_key()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd

    def append(self, obj: dict[str, Any]) -> None:
        plain = json.loads(json.dumps(obj, default=str))  # what replay will read back, signed as such
        data = (json.dumps({**plain, "mac": _mac(self.key, plain)}) + "\n").encode()
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


def unsigned(path: Path, entries: list[dict[str, Any]], key: bytes) -> str | None:
    """Why the journal file ``path`` may not be replayed, or None when every entry is
    signed with this home's key (:func:`_mac`) and the file begins with its run entry."""
    if not entries or entries[0].get("kind") != "run":
        return "it does not begin with a run entry"
    for n, e in enumerate(entries, 1):
        mac = e.get("mac")
        if not isinstance(mac, str):
            return f"entry {n} is not signed"
        if not hmac.compare_digest(mac, _mac(key, e)):
            return f"entry {n}'s signature does not match (written by another infbench home, or edited)"
    return None


def refused_note(refused: list[tuple[str, str]]) -> str:
    """The line that names the journal files :func:`replay` refused, and what to do."""
    shown = "; ".join(f"{name}: {why}" for name, why in refused[:5])
    more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
    return (f"{len(refused)} journal file(s) in {journal_dir()} were not written by infbench for this store and "
            f"were not replayed ({shown}{more}); they are left as they are: inspect and delete them")


def replay(store: Store, refused: list[tuple[str, str]] | None = None,
           check: Callable[[Any], list[str]] | None = None) -> dict[str, int]:
    """Store every journalled cell and status for ``store``, then delete the journal files.

    Each file is replayed in one transaction, after every entry's signature is checked
    (:func:`unsigned`): a file that fails is not replayed, not deleted, and named in
    ``refused``. A file still locked by a live writer is left for later; a cell already
    in the store (same run, cell id and start time: a replay cut short after its commit)
    is not stored twice. A run the store does not know (the store was restored from a
    backup) is recreated from the journal.

    Args:
        store: the store to replay into.
        refused: a list that receives ``(file name, reason)`` for each refused file.
        check: the physics check of a replayed ok cell (:func:`infbench.analysis.floor.recheck`,
            passed in by the command); its reasons mark the cell ``suspect``. Without it,
            the device-free floors (:func:`infbench.measure.derive.impossible_timing`) apply.

    Returns:
        ``{"files": n, "cells": n, "statuses": n, "busy": n, "refused": n}`` (busy:
        files in use).

    Raises:
        sqlite3.Error: the store cannot take them yet (the files are kept).
        OSError: the signing key can be neither read nor made.
    """
    counts = {"files": 0, "cells": 0, "statuses": 0, "busy": 0, "refused": 0}
    files = pending(store)
    key = _mac_key() if files else b""
    for path in files:
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
            entries = _entries(path)
            why = unsigned(path, entries, key)
            if why is None and any(e.get("store") != _store_key(store) for e in entries):
                why = "its entries name more than one store"
            if why is not None:
                counts["refused"] += 1
                if refused is not None:
                    refused.append((path.name, why))
                continue
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
                        reasons = check(r) if check is not None else impossible_timing(r.records)
                        if reasons and r.status == "ok":  # what run applies to its own cells
                            had = [x for x in str(M.field(r.metrics, "suspect") or "").split("; ") if x]
                            r.metrics["suspect"] = "; ".join(dict.fromkeys(had + reasons))
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
