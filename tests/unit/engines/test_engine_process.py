"""Issue 30: in-process engines run in a process of their own (infbench.engines.process).

The stand-in engine of infbench.testing is sent to a real child process here (a few hundred ms
each): calls, errors, the shared clock, the process's own account of the timed part, kills from
outside (interrupt, a cell that does not stop, a crash, the measuring process's death), and the
engine session choosing it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from infbench.data.errors import CellTimeout, ConfigError, DeviceMismatch
from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.schema import Cell, DeviceInfo
from infbench.engines import process as P
from infbench.testing import FakeEngine

CPU = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


def cell(batch=2, out=8):
    return Cell(model="tiny-random-llama", engine="fake", dtype="f16", batch=batch, input_len=4, output_len=out)


def group(*cells):
    return Group(resolve("tiny-random-llama"), "fake", "f16", 1, list(cells) or [cell()])


class IsolatedFake(FakeEngine):
    """The stand-in, as an engine the session isolates (importable by the child from this module)."""

    isolate = True


class Crashing(FakeEngine):
    """Dies by a signal inside ``run`` (a segfault or abort in native code)."""

    signum = signal.SIGSEGV

    def run(self, cell, prompts, deadline_ns=None):
        os.kill(os.getpid(), self.signum)
        time.sleep(5)


class Refusing(FakeEngine):
    """Refuses the device after start, with a DeviceMismatch carrying every field."""

    def verify_device(self, group):
        raise DeviceMismatch("fake", "cpu Test CPU", "it went elsewhere", "the moon", "pip install sense")


class Hanging(FakeEngine):
    """Never returns from ``run`` and never checks its deadline (a native call that does not stop)."""

    def run(self, cell, prompts, deadline_ns=None):
        while True:
            time.sleep(0.05)


class Unpicklable(FakeEngine):
    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.handle = threading.Lock()


def started(engine):
    ep = P.EngineProcess(engine)
    ep.start(group())
    return ep


def test_calls_go_to_a_child_process_on_one_clock():
    ep = started(FakeEngine(CPU, {"ttft_s": 0.01, "tpot_s": 0.001}))
    try:
        assert ep.pid not in (None, os.getpid())
        proof = ep.verify_device(group())
        assert proof["engine_process"] == ep.pid and proof["device"] == "cpu"
        c = cell()
        prompts = ep.make_prompts(c, resolve("tiny-random-llama"))
        assert len(prompts) == 2 and len(prompts[0]) == 4
        ep.warmup(c, prompts)
        t0 = time.perf_counter_ns()
        out = ep.run(c, prompts)
        t1 = time.perf_counter_ns()
        # perf_counter_ns is CLOCK_MONOTONIC: the child's stamps lie inside the parent's window
        assert all(t0 <= r.t_send_ns <= r.t_tokens_ns[0] for r in out.records)
        assert all(r.t_send_ns <= t1 for r in out.records) and len(out.records) == 2
        p = out.process
        assert p["pid"] == ep.pid and p["infbench_threads"] == [] and p["cpu_s"] >= 0 and p["wall_s"] > 0
        assert ep.describe() == {"name": "fake", "fake": True, "engine_process": "own process"}
    finally:
        ep.stop()
    assert ep.pid is None and ep.proc is None
    ep.stop()                                           # safe twice


def test_errors_arrive_with_their_type_message_and_place():
    ep = started(FakeEngine(CPU, {"fail_batch": 2}))
    try:
        with pytest.raises(RuntimeError, match="fake failure at batch 2") as info:
            ep.run(cell(batch=2), [[1] * 4] * 2)
        assert "(at __init__.py:" in info.value.remote_description  # infbench/testing/__init__.py
        out = ep.run(cell(batch=1), [[1] * 4])          # the engine goes on after an error
        assert len(out.records) == 1
    finally:
        ep.stop()


def test_device_mismatch_keeps_its_fields():
    ep = started(Refusing(CPU))
    try:
        with pytest.raises(DeviceMismatch) as info:
            ep.verify_device(group())
        e = info.value
        assert (e.engine, e.reason, e.instead, e.fix) == ("fake", "it went elsewhere", "the moon", "pip install sense")
        assert e.cell_error().endswith("Fix: pip install sense")
    finally:
        ep.stop()


def test_start_error_and_unpicklable_adapter_are_clear():
    ep = P.EngineProcess(FakeEngine(CPU, {"start_error": "no weights here"}))
    with pytest.raises(RuntimeError, match="no weights here"):
        ep.start(group())
    ep.stop()
    with pytest.raises(P.EngineProcessError, match="does not pickle") as info:
        P.EngineProcess(Unpicklable(CPU)).start(group())
    assert "--no-engine-process" in info.value.hint


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGABRT])
def test_a_crash_fails_the_call_not_infbench(signum):
    eng = Crashing(CPU)
    eng.signum = signum
    ep = started(eng)
    with pytest.raises(P.EngineProcessError, match=signal.Signals(signum).name):
        ep.run(cell(), [[1] * 4] * 2)
    assert ep.proc is None and signal.Signals(signum).name in ep.dead
    with pytest.raises(P.EngineProcessError, match="not running"):   # the next cell fails at once, saying why
        ep.run(cell(), [[1] * 4] * 2)
    ep.stop()


def test_a_cell_that_does_not_stop_is_killed_from_outside(monkeypatch):
    monkeypatch.setattr(P, "KILL_GRACE_S", 0.5)
    ep = started(Hanging(CPU))
    pid = ep.pid
    with pytest.raises(CellTimeout, match="its process was killed"):
        ep.run(cell(), [[1] * 4] * 2, deadline_ns=time.perf_counter_ns())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    ep.stop()


def test_an_interrupt_here_ends_the_engine_process():
    # Python's own SIGINT handler, whatever an earlier test in this process left installed (with
    # another handler the interrupt never reached ep.run and the test waited forever in CI), and
    # a deadline, so that a lost interrupt fails the test instead of hanging the suite
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ep = started(Hanging(CPU))
        pid = ep.pid
        timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            ep.run(cell(), [[1] * 4] * 2, deadline_ns=time.perf_counter_ns() + 60 * 10**9)
        timer.join()
    finally:
        signal.signal(signal.SIGINT, before)
    assert ep.proc is None and "interrupt" in ep.dead
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_engine_process_dies_with_the_measuring_process(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = {sys.path!r}
        from infbench.engines.process import EngineProcess
        from tests.unit.engines.test_engine_process import CPU, Hanging, group
        ep = EngineProcess(Hanging(CPU))
        ep.start(group())
        print(ep.pid, flush=True)
        time.sleep(60)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert psutil.pid_exists(child)
    parent.kill()                                       # SIGKILL: no finally, no atexit
    parent.wait()
    gone = False
    for _ in range(100):                                # PR_SET_PDEATHSIG: the kernel sends SIGKILL
        if not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
            gone = True
            break
        time.sleep(0.05)
    assert gone


class _Steady:
    """A power sampler for a host without one, so the monitor's thread runs during each cell."""

    @staticmethod
    def sampler():
        from infbench.data.schema import PowerReading
        from infbench.measure.power import PowerSampler

        class S(PowerSampler):
            name, source = "steady", "power"

            def read(self):
                return [PowerReading(t_ns=time.perf_counter_ns(), power_w=10.0)]

        return S()


def test_the_session_isolates_in_process_engines_only(tmp_path):
    """Through the real session and in-process executor: an ``isolate`` engine is measured in
    its own process (no infbench thread beside it, harness mode 'own process'); the stand-in
    stays here; --no-engine-process keeps an isolating engine here and flags its cells."""
    from infbench import hookimpl, testing
    from infbench.data.groups import Plan
    from infbench.data.run import RunOptions
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.store import Store

    class Launch:
        @hookimpl(tryfirst=True)
        def infbench_launch_engine(self, engine, device, options):
            return IsolatedFake(device, options) if engine == "fake" else None

        @hookimpl(tryfirst=True)
        def infbench_power_sampler(self, device):
            return _Steady.sampler()

    pm = testing.plugin_manager()
    pm.register(Launch(), name="isolated-fake")
    cells = [cell(1, 16), cell(2, 16)]
    plan = Plan(CPU, [group(*cells)])
    store = Store(tmp_path / "r.db")
    s = InProcessExecutor(pm, {"host": "test"}).run(plan, store)
    assert len(s.ok) == 2
    for r in s.ok:
        h = r.metrics["harness"]
        assert h["mode"] == "own process" and h["threads_beside_engine"] == []
        assert r.metrics["harness_share"] is not None
        assert r.engine["device_proof"]["engine_process"] not in (None, os.getpid())
        assert "infbench's own threads" not in r.metrics.get("suspect", "")
    s2 = InProcessExecutor(pm, {"host": "test"}).run(plan, store, RunOptions(force=True, engine_process=False,
                                                                             power_interval_s=0.001))
    for r in s2.ok:
        assert r.metrics["harness"]["mode"] == "in process"
        assert "infbench-power" in r.metrics["harness"]["threads_beside_engine"]
        # the list names every infbench thread alive beside the engine (another test's may be too)
        assert "infbench's own threads (" in r.metrics["suspect"] and "infbench-power" in r.metrics["suspect"]


class Weights:
    """A real-weights record for the perplexity request (picklable: a module-level class)."""

    sha256, format, path, dtype = "0" * 64, "hf", None, None

    def record(self):
        return {"real": True}


def test_perplexity_is_scored_in_the_engine_process(tmp_path):
    from infbench.quality.perplexity import PerplexityRequest, new_result

    text = "abcdefgh" * 64
    req = PerplexityRequest(resolve("tiny-random-llama"), Weights(), "fake", "f16", text, str(tmp_path / "t.txt"),
                            "ab" * 32, 64, 2)
    ep = started(IsolatedFake(CPU))
    chunks = []
    try:
        res = ep.score(req, new_result(req, CPU), chunks.append)
    finally:
        ep.stop()
    assert res.perplexity == pytest.approx(2.0) and res.n_chunks == 2 and chunks == [2]
    assert res.engine_info["engine_process"] == "own process" and res.engine_info["name"] == "fake"


def test_config_errors_keep_their_exit_code():
    e = P.EngineProcessError("x")
    assert e.exit_code == 1 and ConfigError("y").exit_code == 2


class ImportsRecorder(FakeEngine):
    """Answers with the modules its process had imported when it started (the prewarm's proof)."""

    def describe(self):
        return {"name": self.name, "has_decimal": "decimal" in sys.modules, "pid": os.getpid()}


def test_a_prewarmed_process_is_taken_by_the_next_engine_process_with_its_imports():
    """``prewarm`` starts the process and its imports before the adapter exists; the next
    EngineProcess takes it (same PID), and the modules it named were imported there."""
    assert P.prewarm(["decimal", "no_such_module_xyz", "json:dumps"])   # a failing import is ignored there
    assert not P.prewarm(["decimal"])                                   # one at a time
    warm_pid = P._WARM[0].pid
    eng = P.EngineProcess(ImportsRecorder(CPU))
    try:
        eng.start(group())
        d = eng.describe()
        assert eng.pid == warm_pid == d["pid"] and d["has_decimal"] is True
        assert P._WARM is None
        assert eng.run(cell(), eng.make_prompts(cell(), resolve("tiny-random-llama"))).records
    finally:
        eng.stop()


def test_a_prewarmed_process_from_another_environment_is_not_used(monkeypatch):
    """A process started before the environment changed (a device mask set after it) is
    discarded, and a fresh one runs the engine."""
    assert P.prewarm(["decimal"])
    warm = P._WARM[0]
    monkeypatch.setenv("INFBENCH_TEST_PREWARM_ENV", "changed")
    eng = P.EngineProcess(ImportsRecorder(CPU))
    try:
        eng.start(group())
        assert eng.pid != warm.pid and warm.wait(10) is not None and P._WARM is None
    finally:
        eng.stop()


def test_discard_prewarmed_ends_an_unused_process():
    assert P.prewarm(["decimal"])
    warm = P._WARM[0]
    P.discard_prewarmed()
    assert warm.wait(10) is not None and P._WARM is None
    P.discard_prewarmed()   # safe twice
