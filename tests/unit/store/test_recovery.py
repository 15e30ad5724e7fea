"""The store's recovery (issue 14, section 3): the journal of cells a store refuses and its replay,
per-cell claims between processes and hosts, and runs left ``running`` by a dead process.
Real runs with injected faults are in ``tests/integration/test_fault_injection.py``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from infbench.data.events import CellFinished, Collector, Note
from infbench.data.run import RunSummary
from infbench.execution.bookkeeping import finishing, record
from infbench.store import Store, claims, journal, process_started
from infbench.store.recovery import interrupt_stale_runs, prepare
from tests.support.hostile import cell_result, make_store


class FullStore(Store):
    """A real store whose cell writes fail as SQLite fails on a full disk (SQLITE_FULL),
    after ``ok_writes`` successful ones; ``full = False`` frees the disk again."""

    def __init__(self, path, ok_writes=0, error="database or disk is full"):
        super().__init__(path)
        self.ok_writes, self.error, self.full = ok_writes, error, True

    def save_cell(self, run_id, r):
        if self.full and self.ok_writes <= 0:
            raise sqlite3.OperationalError(self.error)
        self.ok_writes -= 1
        return super().save_cell(run_id, r)

    def finish_run(self, run_id, status):
        if self.full and self.ok_writes <= 0:
            raise sqlite3.OperationalError(self.error)
        return super().finish_run(run_id, status)


def stored(path):
    return [(r["run_id"], r["cell_id"]) for r in Store(path, readonly=True).results(all_attempts=True)]


@pytest.mark.parametrize("error", ["database or disk is full", "database is locked",
                                   "database disk image is malformed"])
def test_refused_cells_go_to_the_journal_and_come_back(tmp_path, error):
    path = tmp_path / "s.db"
    s = FullStore(path, ok_writes=1, error=error)
    run = s.begin_run({"host": "h"}, command="infbench run")
    summary, events = RunSummary(run), Collector()
    cells = [cell_result(b) for b in (1, 2, 3)]
    with finishing(s, summary):
        for c in cells:
            record(s, run, summary, c, events)
    # every measured cell is accounted for: one stored, two kept in the journal
    assert len(summary.ok) == 3 and len(summary.journaled) == 2 and not summary.journal_stored
    assert len(events.of(CellFinished)) == 3
    [note] = events.of(Note)
    assert error in note.text and "journal" in note.text
    lines = [json.loads(x) for x in open(summary.journal)]
    assert [x["kind"] for x in lines] == ["run", "cell", "cell", "finish"] and lines[-1]["status"] == "completed"
    assert len(stored(path)) == 1
    s.full = False  # the disk has room again: the next start stores them
    rec = prepare(Store(path))
    assert rec.replayed_cells == 2 and rec.journal_files == 1
    assert sorted(c for _, c in stored(path)) == sorted(c.cell_id for c in cells)
    assert Store(path, readonly=True).runs()[0]["status"] == "completed"
    assert journal.pending(Store(path)) == [] and prepare(Store(path)).replayed_cells == 0  # once only


def test_a_store_that_recovers_during_the_run_gets_its_cells_at_the_end(tmp_path):
    path = tmp_path / "s.db"
    s = FullStore(path, ok_writes=0, error="database is locked")
    run = s.begin_run({})
    summary = RunSummary(run)
    with finishing(s, summary):
        record(s, run, summary, cell_result(1), Collector())
        s.full = False  # the other process released its lock
    assert summary.journal_stored and len(stored(path)) == 1
    assert Store(path, readonly=True).runs()[0]["status"] == "completed"


def test_replay_recreates_a_run_the_store_lost(tmp_path):
    """The store was restored from a backup older than the run: the journal still has it."""
    path = tmp_path / "s.db"
    backup = make_store(tmp_path / "backup.db", cells=1).read_bytes()
    s = FullStore(path, ok_writes=0)
    run = s.begin_run({"host": "h"}, command="infbench run --x")
    summary = RunSummary(run)
    with finishing(s, summary):
        record(s, run, summary, cell_result(3), Collector())
    s.close()
    path.write_bytes(backup)
    for side in ("-wal", "-shm"):
        if os.path.exists(f"{path}{side}"):
            os.unlink(f"{path}{side}")
    assert prepare(Store(path)).replayed_cells == 1
    runs = {r["run_id"]: r for r in Store(path, readonly=True).runs()}
    assert runs[run]["status"] == "completed" and runs[run]["command"] == "infbench run --x"


def test_journal_that_cannot_be_written_stops_with_a_clear_error(tmp_path, monkeypatch):
    s = FullStore(tmp_path / "s.db")
    run = s.begin_run({})
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "journal").write_text("a file where the journal folder belongs")
    monkeypatch.setenv("INFBENCH_HOME", str(tmp_path / "home"))
    with pytest.raises(journal.JournalError, match="cannot be written either"):
        record(s, run, RunSummary(run), cell_result(1), Collector())


def test_a_live_writers_journal_is_not_replayed(tmp_path):
    s = FullStore(tmp_path / "s.db")
    run = s.begin_run({})
    record(s, run, RunSummary(run), cell_result(1), Collector())  # journal open and locked by its writer
    other = Store(tmp_path / "s.db")
    assert journal.replay(other)["busy"] == 1 and len(stored(tmp_path / "s.db")) == 0
    journal.release(s, run)
    assert journal.replay(other)["cells"] == 1


def _other_process():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.2)
    return p


def test_claims_between_processes(tmp_path):
    s = Store(tmp_path / "s.db")
    mine, theirs = s.begin_run({}), s.begin_run({})
    other = _other_process()
    try:
        s.db.execute("INSERT INTO claims VALUES (?,?,?,?,?,?)",
                     ("cellA", theirs, __import__("socket").gethostname(), other.pid, process_started(other.pid),
                      time.time()))
        s.db.commit()
        holder = claims.claim(s, "cellA", mine)
        assert holder is not None and holder.pid == other.pid and holder.run_id == theirs
        assert claims.claim(s, "cellB", mine) is None          # free: mine now
        assert claims.claim(s, "cellB", mine) is None          # mine stays mine
    finally:
        other.kill()
        other.wait()
    assert claims.claim(s, "cellA", mine) is None              # its process died: taken over
    # a cell stored ok since this run planned is skipped (unless --force)
    r = cell_result(1)
    s.save_cell(theirs, r)
    holder = claims.claim(s, r.cell_id, mine)
    assert holder is not None and holder.pid is None and holder.run_id == theirs
    assert claims.claim(s, r.cell_id, mine, force=True) is None
    claims.release_run(s, mine)
    assert s.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_foreign_host_claims_expire(tmp_path):
    s = Store(tmp_path / "s.db")
    run = s.begin_run({})
    s.db.execute("INSERT INTO claims VALUES ('c', 'x', 'another-node', 1, 1.0, ?)", (time.time(),))
    s.db.commit()
    assert claims.claim(s, "c", run) is not None
    s.db.execute("UPDATE claims SET claimed_at=?", (time.time() - claims.FOREIGN_CLAIM_TTL_S - 1,))
    s.db.commit()
    assert claims.claim(s, "c", run) is None


def test_running_runs_of_dead_processes_are_marked_interrupted(tmp_path):
    path = make_store(tmp_path / "s.db", cells=1)
    s = Store(path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(dead.stdout)
    live = _other_process()
    host = __import__("socket").gethostname()
    try:
        for run_id, h, pid, started in (("dead00000001", host, gone, 1.0), ("live00000001", host, live.pid,
                                        process_started(live.pid)), ("away00000001", "other-node", 1, 1.0),
                                        ("reused000001", host, os.getpid(), 12.0), ("old000000001", None, None, None)):
            s.db.execute("INSERT INTO runs (run_id, started_at, status, command, provenance, host, pid, pid_started)"
                         " VALUES (?,?,?,?,?,?,?,?)", (run_id, time.time(), "running", "", "{}", h, pid, started))
        s.db.commit()
        assert sorted(interrupt_stale_runs(s)) == ["dead00000001", "old000000001", "reused000001"]
        status = {r["run_id"]: r["status"] for r in s.runs()}
        assert status["live00000001"] == status["away00000001"] == "running"
    finally:
        live.kill()
        live.wait()

