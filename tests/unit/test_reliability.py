"""Issue 14, sections 3 and 5, in the fast layer: the journal of cells a store refuses,
per-cell claims, runs left ``running`` by a dead process, signals that wait for a write,
server process groups, and container mounts/settings. Real runs with injected faults are
in ``tests/integration/test_fault_injection.py``."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from infbench.data import signals
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


def test_deferred_signals_wait_for_the_write():
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or Ray's handler once a test in this process started Ray
    hits = []
    with pytest.raises(KeyboardInterrupt):
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            hits.append("write finished")
    assert hits == ["write finished"]
    with signals.terminate_as_interrupt(), pytest.raises(signals.Terminated) as e:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            hits.append("second write")
    assert hits[-1] == "second write" and signals.exit_status(e.value) == 143
    assert signal.getsignal(signal.SIGTERM) == before  # the handler in place before is restored



def _qsort_calling(compare):
    """Sort 64 ints with libc's qsort, which calls ``compare`` (a Python function) from C,
    as llama.cpp calls its log and progress callbacks during a load or a decode."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
    arr = (ctypes.c_int * 64)(*range(64, 0, -1))
    cb = cmp_t(compare)
    libc.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int), cb)
    return list(arr)


def _until_raised(deadline_s=5.0):
    """Run Python code (where a pending signal handler runs) until ``deadline_s`` passed."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        time.sleep(0.005)


@pytest.mark.parametrize("signum, exc", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, signals.Terminated)])
def test_a_signal_inside_a_c_callback_is_not_lost(signum, exc):
    """ctypes drops an exception raised in a callback ("Exception ignored"): Ctrl-C landing
    in llama.cpp's log callback used to vanish and the sweep ran on (CI caught it). A
    :func:`signals.c_callback` callback returns its default to C and the same signal is
    raised again in Python code after the C call."""
    calls = []

    def compare(a, b):
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signum)      # its handler runs here, inside the callback
        return a[0] - b[0]

    with signals.terminate_as_interrupt():
        with pytest.raises(exc):
            try:
                out = _qsort_calling(signals.c_callback(compare, default=0))
            except exc:
                pytest.fail("raised inside the C call: the test does not exercise the callback path")
            assert out == list(range(1, 65)) or len(calls) > 1   # C went on after the callback returned
            _until_raised()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


async def _read_until_sigterm(received, signum=signal.SIGTERM):
    """Open a TCP connection to a server on 127.0.0.1 that streams bytes; SIGTERM is raised
    inside the client protocol's ``data_received`` (where a signal lands while a served
    cell streams); then keep reading for 1 s. ``received`` gets each chunk's size, and
    ``"end"`` only if the coroutine ran to its end."""
    import asyncio

    loop = asyncio.get_running_loop()

    async def serve(reader, writer):
        try:
            for _ in range(200):
                writer.write(b"x" * 64)
                await writer.drain()
                await asyncio.sleep(0.005)
        except ConnectionError:
            pass                                      # the client went away: expected here
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    class Reader(asyncio.Protocol):
        def data_received(self, data):
            received.append(len(data))
            if len(received) == 1:
                signal.raise_signal(signum)           # its handler runs here, in the callback

    transport, _ = await loop.create_connection(Reader, "127.0.0.1", port)
    try:
        await asyncio.sleep(1.0)
    finally:
        transport.close()
        server.close()
    received.append("end")
    return "finished"


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_inside_a_protocol_callback_is_not_lost(loop, signum):
    """uvloop catches an exception raised in ``data_received`` as "Fatal error on
    transport" and goes on: SIGTERM landing there while a served cell streamed was lost and
    ``infbench run`` exited 0 (CI's fault injection caught it); Ctrl-C's KeyboardInterrupt
    lands there the same way (infbench's own SIGINT handler keeps ``asyncio.Runner`` from
    installing its one). Under :func:`signals.run_event_loop` either signal cancels the load
    and :class:`Terminated` or :class:`KeyboardInterrupt` is raised after the loop ended, on
    both event loops."""
    import asyncio

    import uvloop  # a dependency of infbench (pyproject.toml)

    runner = uvloop.run if loop == "uvloop" else asyncio.run
    received: list = []

    def interrupt(sig, frame):  # infbench's SIGINT handler while a run is on (native_call_watchdog)
        raise KeyboardInterrupt

    prev = signal.signal(signal.SIGINT, interrupt)
    try:
        if loop == "uvloop":
            # what this guards against, as uvloop 0.23 does it: the signal is lost, the coroutine
            # runs to its end (should uvloop stop swallowing it, this line goes; the wrapper stays right)
            with signals.terminate_as_interrupt():
                assert runner(_read_until_sigterm(received, signum)) == "finished" and received[-1] == "end"
        received = []
        with signals.terminate_as_interrupt():
            want = signals.Terminated if signum == signal.SIGTERM else KeyboardInterrupt
            with pytest.raises(want) as exc:
                signals.run_event_loop(runner, _read_until_sigterm(received, signum))
            assert isinstance(exc.value, signals.Terminated) == (signum == signal.SIGTERM)
            assert signal.getsignal(signal.SIGTERM) is signals._raise_terminated  # put back by run_event_loop
            assert signal.getsignal(signal.SIGINT) is interrupt
        assert received and "end" not in received     # the load was cancelled, not read to its end
    finally:
        signal.signal(signal.SIGINT, prev)
    assert signals.run_event_loop(runner, asyncio.sleep(0, result=7)) == 7  # no handler of ours: plain run


def test_server_group_is_killed_even_after_its_leader_exited(tmp_path):
    from infbench.engines.server_process import ServerProcess, _group_alive

    # the leader starts a grandchild and exits: the grandchild must not outlive stop()
    srv = ServerProcess(["sh", "-c", "sleep 60 & echo $! > child.pid; sleep 0.3"], "http://127.0.0.1:9/health",
                        tmp_path / "log")
    srv.proc = subprocess.Popen(srv.argv, cwd=tmp_path, start_new_session=True)
    srv.pgid = srv.proc.pid
    srv.proc.wait(10)
    child = int((tmp_path / "child.pid").read_text())
    assert _group_alive(srv.pgid) and not _zombie(child)    # the leader is gone, its child is not
    srv.stop(grace_s=2)
    for _ in range(50):
        if _zombie(child):
            break
        time.sleep(0.1)
    assert _zombie(child)


def _zombie(pid):
    """True when ``pid`` has exited (gone, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_its_parent(tmp_path):
    """SIGKILL the process that started a server: the kernel sends the server SIGTERM."""
    code = ("import subprocess, sys, time; from infbench.data.signals import dying_with_parent;"
            "p = subprocess.Popen(dying_with_parent(['sleep', '60']), start_new_session=True);"
            "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.3)
    assert not _zombie(child)
    parent.kill()
    parent.wait()
    for _ in range(50):
        if _zombie(child):
            break
        time.sleep(0.1)
    assert _zombie(child), "the server outlived its parent"


# -- section 5: containers -----------------------------------------------------------
def test_cache_symlinks_are_never_followed_into_a_writable_mount(tmp_path):
    from infbench.runtimes.mounts import cache_link_mounts

    cache, private = tmp_path / "cache", tmp_path / "private"
    cache.mkdir()
    (tmp_path / "models").mkdir()
    os.symlink("/etc", cache / "evil")
    os.symlink(tmp_path / "models", cache / "models")
    os.symlink("/nonexistent/x", cache / "dangling")
    (cache / "plain").mkdir()
    mounts, notes = cache_link_mounts(cache, private, [], "/job/home/cache")
    assert all(host.startswith(str(private)) and mode == "rw" for host, _, mode in mounts)
    assert {d for _, d, _ in mounts} == {"/job/home/cache/evil", "/job/home/cache/models", "/job/home/cache/dangling"}
    assert any("/etc" in n and "not mounted" in n for n in notes)
    mounts, notes = cache_link_mounts(cache, private, [(tmp_path / "models").resolve()], "/job/home/cache")
    assert (str((tmp_path / "models").resolve()), "/job/home/cache/models", "ro") in mounts
    assert not any(h == "/etc" for h, _, _ in mounts)


def test_allowed_mount_roots_from_site_and_env(tmp_path, monkeypatch):
    from infbench.data.errors import ConfigError
    from infbench.runtimes.mounts import allowed_mount_roots

    site = tmp_path / "site.toml"
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    site.write_text('[containers]\nmount_roots = ["/scratch/models"]\n')
    monkeypatch.setenv("INFBENCH_MOUNT_ROOTS", f"/data{os.pathsep}/other")
    assert [str(p) for p in allowed_mount_roots()] == ["/scratch/models", "/data", "/other"]
    site.write_text('[containers]\nmount_roots = "/scratch"\n')
    with pytest.raises(ConfigError, match="must be a list"):
        allowed_mount_roots()


def test_every_loosened_container_setting_is_announced(pm):
    from infbench.contract.registry import container_spec
    from infbench.data.schema import DeviceInfo
    from infbench.runtimes.docker_runtime import security_notes

    def spec(vendor):
        return container_spec(pm, DeviceInfo(vendor=vendor, kind="gpu", model="x"), "vllm").as_dict()

    amd = " | ".join(security_notes(spec("amd"), "img"))
    assert "seccomp=unconfined" in amd and "IPC namespace" in amd
    habana = " | ".join(security_notes(spec("habana"), "img"))
    assert "SYS_NICE" in habana and "IPC namespace" in habana
    notes = security_notes({"privileged": True, "pid_mode": "host", "network_mode": "host",
                            "device_cgroup_rules": ["c 189:* rmw"], "user": "0:0", "sysctls": {"a.b": 1},
                            "userns_mode": "host"}, "img")
    assert len(notes) == 7 and any("privileged" in n for n in notes) and any("189" in n for n in notes)
    assert security_notes({"network_mode": "none", "ipc_mode": "private", "user": "1000:1000"}, "img") == []
