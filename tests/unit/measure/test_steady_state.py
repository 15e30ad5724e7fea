"""Numbers at steady state (issue 38): the warm-up's stability rule, the drift and CV flags,
the sentinel and what it flags and measures again, the serving window, the re-warm rule, the
host-state reader and the ``unexpected`` note. Mechanisms only: no timing is asserted (the
accuracy figures live in benchmarks/warmup.py)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from infbench import testing
from infbench.analysis import steady
from infbench.analysis.expectation import Expectation
from infbench.contract.hookspecs import hookimpl
from infbench.data import events as ev
from infbench.data.engine import EngineSpec, RunOutput
from infbench.data.run import RunOptions
from infbench.data.schema import Cell, CellResult, Load, RequestRecord, Sweep
from infbench.data.warmup import WarmupPolicy, block_cell
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.measure import hoststate
from infbench.measure.steady import (
    WarmState,
    converged,
    first_steps_tpot_ms,
    steady_window,
    warm_up,
    window_metrics,
)
from infbench.plan import plan
from infbench.store import Store

MS = 1_000_000


class ScriptedEngine(testing.FakeEngine):
    """A fake batch engine whose TPOT (ms) is read from ``SPEED`` at each call: the test's stand-in
    for a host whose speed changes. Its warm-up is a real block (it returns the block's records)."""

    name = "scripted"
    speed: list[float] = [2.0]   # the current TPOT in ms (the last element)
    calls: list[tuple[str, int]] = []

    def _opt(self, key, default):
        return self.speed[-1] / 1e3 if key == "tpot_s" else super()._opt(key, default)

    def run(self, cell, prompts, deadline_ns=None):
        ScriptedEngine.calls.append(("run", cell.output_len))
        return super().run(cell, prompts, deadline_ns)

    def warmup(self, cell, prompts):
        return self.run(block_cell(cell), prompts)


class ScriptedPlugin:
    @hookimpl
    def infbench_engines(self):
        return [EngineSpec("scripted", ScriptedEngine, ["cpu"], {"f16": "fp16"}, options=testing.FAKE_OPTIONS)]


@pytest.fixture
def spm():
    pm = testing.plugin_manager()
    pm.register(ScriptedPlugin(), name="scripted")
    ScriptedEngine.speed = [2.0]
    ScriptedEngine.calls = []
    return pm


def _records(n: int, tpots_ms: list[float], t0: int = 0, ttft_ms: float = 5.0) -> list[RequestRecord]:
    """``n`` batch requests sent at ``t0`` whose decode steps take ``tpots_ms`` in turn."""
    times = [t0 + int(ttft_ms * MS)]
    for t in tpots_ms:
        times.append(times[-1] + int(t * MS))
    return [RequestRecord(t_send_ns=t0, t_tokens_ns=list(times), n_in=8, n_out=len(times)) for _ in range(n)]


# -- the stability rule ------------------------------------------------------------------------

def test_stability_rule_on_synthetic_sequences():
    tol = 0.03
    # a monotone ramp that flattens: settles only once the last three agree
    ramp = [30.0, 25.0, 22.0, 20.5, 20.2, 20.1, 20.0]
    first = next(i for i in range(1, len(ramp) + 1) if converged(ramp[:i], None, tol)[0])
    assert first == 6 and converged(ramp[:5], None, tol) == (False, pytest.approx(1.8 / 20.5, rel=1e-3))
    # a step: the old level must leave the window of three
    step = [30.0, 20.0, 20.0, 20.0]
    assert [converged(step[:i], None, tol)[0] for i in range(1, 5)] == [False, False, False, True]
    # pure noise within the tolerance settles at the third block
    noise = [20.0, 20.2, 19.9]
    assert converged(noise, None, tol)[0]
    # a sequence that never settles never converges
    assert not any(converged(list(itertools.islice(itertools.cycle([20.0, 30.0]), i)), None, tol)[0]
                   for i in range(1, 30))
    # the clock takes part where every block has one; a missing clock leaves it out
    assert not converged([20.0] * 3, [1980.0, 1500.0, 1980.0], tol)[0]
    assert converged([20.0] * 3, [1980.0, 1975.0, 1981.0], tol)[0]
    assert converged([20.0] * 3, [1980.0, None, 1500.0], tol)[0]
    assert converged([None, 20.0, 20.0], None, tol) == (False, None)


class BlockEngine:
    """A bare engine for :func:`warm_up`: each warm-up block's TPOT is the next of ``tpots``
    (None: the engine returns no records), and each block advances the stand-in clock."""

    def __init__(self, tpots, clock):
        self.tpots, self.clock, self.blocks = iter(tpots), clock, 0

    def warmup(self, cell, prompts):
        self.blocks += 1
        self.clock.t += 1.0
        t = next(self.tpots)
        return None if t is None else RunOutput(records=_records(2, [t] * 15), engine_s=0.0)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


CELL = Cell(model="tiny-random-llama", engine="fake", dtype="f16", batch=2, input_len=16, output_len=64)


def test_warm_up_waits_out_a_ramp_and_records_each_block():
    clock = Clock()
    eng = BlockEngine([40.0, 30.0, 24.0, 21.0, 20.2, 20.0, 20.1], clock)
    state = WarmState(loaded_at=clock())
    rec = warm_up(eng, CELL, [], WarmupPolicy(), state, "cpu", clock=clock)
    assert rec["mode"] == "until-stable" and rec["converged"] is True and eng.blocks == 7
    assert [b["tpot_ms"] for b in rec["blocks"]] == pytest.approx([40, 30, 24, 21, 20.2, 20, 20.1])
    assert rec["seconds"] == 7.0 and "first cell since the engine loaded" in rec["why"]
    assert state.settled_by == CELL.label() and steady.warmup_flag(rec) is None


def test_warm_up_that_never_settles_stops_at_its_ceiling_and_flags_not_warm():
    clock = Clock()
    eng = BlockEngine(itertools.cycle([20.0, 30.0]), clock)
    rec = warm_up(eng, CELL, [], WarmupPolicy(max_s=10), WarmState(loaded_at=clock()), "cpu", clock=clock)
    assert rec["converged"] is False and eng.blocks == 10 and rec["max_s"] == 10
    text = steady.warmup_flag(rec)
    assert text.startswith("not-warm: the warm-up did not settle within 10 s (10 blocks") and "apart" in text
    m: dict[str, Any] = {}
    steady.add_flag(m, "not-warm", text)
    assert m["steady"]["flags"]["not-warm"] == text and m["suspect"] == text


def test_no_flag_text_holds_the_reasons_separator():
    """A cell's suspect reasons are ``; ``-joined: a flag whose text held ``; `` was cut in two by
    every reader that splits them (CI's physics check read "the host is slower now" as a reason
    of its own), and added twice by :func:`steady.add_flag`, which splits before it compares."""
    clock = Clock()
    never = warm_up(BlockEngine(itertools.cycle([20.0, 30.0]), clock), CELL, [], WarmupPolicy(max_s=10),
                    WarmState(loaded_at=clock()), "cpu", clock=clock)
    fixed = warm_up(BlockEngine([50.0, 30.0, 20.0], clock), CELL.model_copy(update={"warmup": 3}), [],
                    WarmupPolicy(), WarmState(loaded_at=0), "cpu", clock=clock)
    drift = steady.timed_drift(CELL, _records(2, [10.0] * 20 + [13.0] * 20 + [16.0] * 20))
    chk = {"now_ms": 12.0, "reference_ms": 6.0, "ratio": 2.0, "faster_now": False, "drift": True}
    texts = [steady.warmup_flag(never), steady.warmup_flag(fixed), steady.drift_flag(drift),
             steady.sentinel_flag(chk, CELL.label())]
    assert all(t and "; " not in t for t in texts), texts
    m: dict[str, Any] = {"suspect": "MFU 1.20 > 1: prefill ran faster"}
    for name, t in zip(("not-warm", "not-warm", "unsteady", "drift"), texts, strict=True):
        steady.add_flag(m, name, t)
        steady.add_flag(m, name, t)                                     # again: not repeated
    assert m["suspect"].split("; ") == ["MFU 1.20 > 1: prefill ran faster", *texts]


def test_fixed_warmup_runs_exactly_n_blocks_and_judges_three_or_more():
    clock = Clock()
    one = warm_up(BlockEngine([50.0], clock), CELL.model_copy(update={"warmup": 1}), [], WarmupPolicy(),
                  WarmState(loaded_at=0), "cpu", clock=clock)
    assert one["mode"] == "fixed" and len(one["blocks"]) == 1 and one["converged"] is None
    three = warm_up(BlockEngine([50.0, 30.0, 20.0], clock), CELL.model_copy(update={"warmup": 3}), [],
                    WarmupPolicy(), WarmState(loaded_at=0), "cpu", clock=clock)
    assert three["converged"] is False and steady.warmup_flag(three).startswith("not-warm: the 3 warm-up blocks")
    none = warm_up(BlockEngine([], clock), CELL.model_copy(update={"warmup": 0}), [], WarmupPolicy(),
                   WarmState(loaded_at=0), "cpu", clock=clock)
    assert none["mode"] == "none" and none["blocks"] == []


def test_rewarm_after_idle_with_a_stand_in_clock():
    """A settled engine carries its state into the next cell; after more than rewarm_after_s idle
    it warms up until stable again, and says why."""
    clock = Clock()
    state = WarmState(loaded_at=clock())
    warm_up(BlockEngine([20.0] * 3, clock), CELL, [], WarmupPolicy(), state, "cpu", clock=clock)
    clock.t += 30  # 30 s later: carried, one block (an in-process engine compiles its shape)
    eng = BlockEngine([20.0] * 5, clock)
    rec = warm_up(eng, CELL, [], WarmupPolicy(rewarm_after_s=60), state, "cpu", clock=clock)
    assert rec["mode"] == "carried" and eng.blocks == 1 and rec["converged"] is True
    assert "ran 30.0 s ago" in rec["why"]
    served = CELL.model_copy(update={"load": Load(mode="concurrency", concurrency=2)})
    clock.t += 10  # a server cell carries the state with no block (its own warm-up requests go first)
    assert warm_up(BlockEngine([], clock), served, [], WarmupPolicy(), state, "cpu", clock=clock)["blocks"] == []
    clock.t += 61  # idle past the threshold (71 s since its last block): until stable again
    eng = BlockEngine([20.0] * 5, clock)
    rec = warm_up(eng, CELL, [], WarmupPolicy(rewarm_after_s=60), state, "cpu", clock=clock)
    assert rec["mode"] == "until-stable" and eng.blocks == 3 and "idle 71 s (more than 60 s)" in rec["why"]


def test_an_engine_without_block_records_runs_one_block_and_says_so():
    clock = Clock()
    eng = BlockEngine([None, None], clock)
    rec = warm_up(eng, CELL, [], WarmupPolicy(), WarmState(loaded_at=0), "cpu", clock=clock)
    assert eng.blocks == 1 and rec["converged"] is None and "stability is unknown" in rec["why"]


def test_block_cell_shortens_the_output_and_gives_serving_its_own_load():
    b = block_cell(CELL)
    assert (b.output_len, b.batch, b.input_len) == (16, 2, 16) and b.spec_hash() != CELL.spec_hash()
    c = CELL.model_copy(update={"load": Load(mode="concurrency", concurrency=8, num_requests=80, warmup_requests=16)})
    bl = block_cell(c).load
    assert (bl.mode, bl.concurrency, bl.num_requests, bl.warmup_requests) == ("concurrency", 8, 16, 0)
    r = block_cell(CELL.model_copy(update={"load": Load(mode="rate", request_rate=100.0)})).load
    assert (r.mode, r.num_requests) == ("rate", 64)
    assert block_cell(CELL.model_copy(update={"output_len": 1})).output_len == 1


# -- the timed part: drift and repeats -----------------------------------------------------------

def test_timed_drift_flags_a_slowing_batch_and_not_a_steady_one():
    steps = [10.0] * 20 + [13.0] * 20 + [16.0] * 20
    d = steady.timed_drift(CELL, _records(2, steps))
    assert d["basis"] == "steps" and d["ratio"] == pytest.approx(1.6) and d["expected"] == 1.0
    assert steady.drift_flag(d).startswith("unsteady: the timed part's first third of decode steps took 10.00 ms")
    flat = steady.timed_drift(CELL, _records(2, [10.0, 10.2] * 30))
    assert abs(flat["drift"]) < 0.02 and steady.drift_flag(flat) is None
    assert steady.timed_drift(CELL, _records(2, [10.0] * 5)) is None  # too few steps to judge


def test_timed_drift_expects_the_kv_cache_growth():
    """A long-output, large-batch cell's steps legitimately slow as the KV cache grows: the
    expected ratio from the model's bytes per step absorbs it."""
    from infbench.data.models import resolve

    big = Cell(model="llama-3-8b", engine="fake", dtype="f16", batch=64, input_len=1024, output_len=1024)
    growth = steady.kv_growth(big, resolve("llama-3-8b"))
    assert 1.2 < growth < 1.5
    recs = _records(2, [10.0 * (1 + (growth - 1) * i / 89) for i in range(90)])
    d = steady.timed_drift(big, recs, resolve("llama-3-8b"))
    assert d["expected"] == pytest.approx(growth, rel=1e-3) and steady.drift_flag(d) is None


def test_serving_drift_compares_requests_in_send_order():
    cell = CELL.model_copy(update={"load": Load(mode="concurrency", concurrency=1, num_requests=12)})
    recs, t = [], 0
    for i in range(12):
        tp = 10.0 if i < 6 else 14.0
        recs += _records(1, [tp] * 9, t0=t)
        t += 200 * MS
    d = steady.timed_drift(cell, recs)
    assert d["basis"] == "requests" and d["ratio"] == pytest.approx(1.4) and steady.drift_flag(d)


def test_repeat_cv_flags_repeats_that_vary():
    def result(tpot, rep):
        c = CELL.model_copy(update={"repeat": rep})
        return CellResult(cell_id="x", spec_hash="y", cell=c, device=_dev(), status="ok",
                          metrics={"tpot_s": {"p50": tpot}}, started_at=0, finished_at=1)

    cv = steady.repeat_cv([result(0.010, None), result(0.010, 2), result(0.014, 3)])
    assert cv["metric"] == "tpot_s" and cv["cv"] == pytest.approx(0.2038, abs=1e-3) and cv["unsteady"]
    assert "CV 20.4 %" in steady.repeat_flag(cv)
    assert not steady.repeat_cv([result(0.010, None), result(0.0101, 2)])["unsteady"]


def _dev():
    from infbench.data.schema import DeviceInfo

    return DeviceInfo(vendor="cpu", kind="cpu", model="test", count=1)


# -- the sentinel, end to end through the session ---------------------------------------------------

def _plan(spm, cpu, batch=(1, 2, 4), **kw):
    sw = Sweep(models=["tiny-random-llama"], engines=["scripted"], dtypes=["f16"], batch=list(batch),
               input_len=[16], output_len=[32], **kw)
    return plan(sw, cpu, spm)


class SpeedChange:
    """An observer that changes the stand-in host's speed when the ``n``-th cell finishes."""

    def __init__(self, after: int, tpot_ms: float):
        self.after, self.tpot, self.seen = after, tpot_ms, ev.Collector()

    def __call__(self, e):
        self.seen(e)
        if isinstance(e, ev.CellFinished) and len(self.seen.of(ev.CellFinished)) == self.after:
            ScriptedEngine.speed.append(self.tpot)


def test_sentinel_flags_the_cells_of_a_slow_stretch_and_measures_them_again(spm, cpu, tmp_path):
    """A stretch that is slow but steady (6 ms per token for the first two cells, 2 ms after): the
    warm-up settles inside it, so only the sentinel sees it. The two slow cells are flagged drift
    with both figures, measured again as new attempts, and their newest attempts are fast."""
    ScriptedEngine.speed = [6.0]
    store = Store(tmp_path / "r.db")
    obs = SpeedChange(after=2, tpot_ms=2.0)
    p = _plan(spm, cpu)
    s = InProcessExecutor(spm, {"t": 1}).run(p, store, RunOptions(), obs)
    assert s.status == "completed" and len(s.ok) == 3       # the summary keeps the newest attempt of each
    flagged = obs.seen.of(ev.CellFlagged)
    assert [f.flag for f in flagged] == ["drift", "drift"]
    assert "take 2.00 ms now" in next(e.text for e in obs.seen.of(ev.Note) if e.text.startswith("sentinel:"))
    again = [e for e in obs.seen.of(ev.CellStarted) if e.again]
    assert [e.cell.batch for e in again] == [1, 2]
    rows = store.results(all_attempts=True)
    assert len(rows) == 5
    old = [r for r in rows if steady.flags(r["metrics"]).get("drift")]
    assert sorted(r["spec"]["batch"] for r in old) == [1, 2]
    assert all("6.00 ms when it was measured" in r["metrics"]["suspect"] for r in old)
    newest = {r["spec"]["batch"]: r for r in store.results()}
    assert all(not steady.flags(r["metrics"]) for r in newest.values())
    assert newest[1]["metrics"]["tpot_s"]["p50"] == pytest.approx(0.002)
    assert newest[1]["metrics"]["steady"]["remeasured"]["sentinel"]["ratio"] == pytest.approx(1 / 3, rel=1e-3)
    store.close()


def test_no_remeasure_only_flags(spm, cpu, tmp_path):
    ScriptedEngine.speed = [6.0]
    store = Store(tmp_path / "r.db")
    obs = SpeedChange(after=2, tpot_ms=2.0)
    InProcessExecutor(spm, {"t": 1}).run(_plan(spm, cpu), store, RunOptions(warmup=WarmupPolicy(remeasure=False)), obs)
    rows = store.results(all_attempts=True)
    assert len(rows) == 3 and sum(1 for r in rows if "drift" in steady.flags(r["metrics"])) == 2
    assert not [e for e in obs.seen.of(ev.CellStarted) if e.again]
    store.close()


def test_a_host_slower_at_the_end_is_flagged_but_not_measured_in_its_slow_state(spm, cpu, tmp_path):
    ScriptedEngine.speed = [2.0]
    store = Store(tmp_path / "r.db")
    obs = SpeedChange(after=3, tpot_ms=6.0)
    InProcessExecutor(spm, {"t": 1}).run(_plan(spm, cpu), store, RunOptions(), obs)
    rows = store.results(all_attempts=True)
    assert len(rows) == 3 and all("the host is slower now" in r["metrics"]["suspect"] for r in rows)
    store.close()


def test_a_steady_group_costs_one_sentinel_block(spm, cpu, tmp_path):
    store = Store(tmp_path / "r.db")
    seen = ev.Collector()
    InProcessExecutor(spm, {"t": 1}).run(_plan(spm, cpu), store, RunOptions(), seen)
    assert not seen.of(ev.CellFlagged) and len(store.results(all_attempts=True)) == 3
    # first cell: 3 blocks until stable; the two others carry its state (one block each); one sentinel block
    blocks = [n for kind, n in ScriptedEngine.calls if n == 16]
    assert len(blocks) == 3 + 1 + 1 + 1
    r0 = store.results()[0]["metrics"]
    assert r0["warmup"]["mode"] == "until-stable" and r0["warmup"]["converged"] is True
    assert store.results()[1]["metrics"]["warmup"]["mode"] == "carried"
    store.close()


def test_repeats_that_vary_are_flagged_unsteady(spm, cpu, tmp_path):
    store = Store(tmp_path / "r.db")

    def slower(e):
        if isinstance(e, ev.CellFinished):
            ScriptedEngine.speed.append(ScriptedEngine.speed[-1] * 1.3)

    InProcessExecutor(spm, {"t": 1}).run(_plan(spm, cpu, batch=[1], repeat=3), store,
                                        RunOptions(warmup=WarmupPolicy(remeasure=False)), slower)
    rows = store.results()
    assert len(rows) == 3 and all("--repeat measurements of this workload vary" in r["metrics"]["suspect"]
                                  for r in rows)
    store.close()


def test_first_steps_reference_is_what_a_block_measures():
    recs = _records(3, [4.0] * 15 + [9.0] * 40)
    assert first_steps_tpot_ms(recs, 15) == pytest.approx(4.0)


# -- the serving window ------------------------------------------------------------------------------

def _timeline(sends_ms, ends_ms, tokens=5):
    out = []
    for s, e in zip(sends_ms, ends_ms, strict=True):
        step = (e - s) / tokens
        out.append(RequestRecord(t_send_ns=int(s * MS), t_tokens_ns=[int((s + step * (i + 1)) * MS)
                                                                   for i in range(tokens)], n_in=10, n_out=tokens))
    return out


def test_steady_window_from_reaching_the_target_to_last_falling_below():
    """Concurrency 2: requests ramp up (one, then two in flight), a plateau, then the drain."""
    recs = _timeline([0, 100, 300, 600, 900], [300, 600, 900, 1500, 1000])
    t0, t1, peak = steady_window(recs, 2)
    assert (t0, t1, peak) == (100 * MS, 1000 * MS, 2)
    seen = []

    def energy(window):
        seen.append(window)
        return 9.0, None

    m = window_metrics(recs, (t0, t1), run_s=1.5, energy=energy)
    assert seen == [(t0, t1)]                          # energy over exactly the metrics' window
    assert m["duration_s"] == pytest.approx(0.9) and m["energy_j"] == 9.0
    inside = sum(1 for r in recs for t in r.t_tokens_ns if t0 <= t <= t1)
    assert m["output_tok_s"] == pytest.approx(inside / 0.9)
    assert m["tokens_per_j"] == pytest.approx((m["n_in_in_window"] + inside) / 9.0)
    assert "shorter than max(10 s" in m["warning"]      # 0.9 s < 10 s: stored as a warning
    assert steady_window(recs, 3) is None              # never three in flight


def test_a_long_window_has_no_warning():
    sends = [i * 1000 for i in range(30)]
    recs = _timeline(sends, [s + 2500 for s in sends])
    t0, t1, _ = steady_window(recs, 2)
    assert "warning" not in window_metrics(recs, (t0, t1), run_s=(t1 - t0) / 1e9 + 3)


# -- the host's state ---------------------------------------------------------------------------------

def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_host_state_reads_fixture_proc_and_sys(tmp_path):
    for c in (0, 1):
        _write(tmp_path, f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor", "powersave\n")
    _write(tmp_path, "sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
    _write(tmp_path, "sys/kernel/mm/transparent_hugepage/defrag", "[always] defer defer+madvise madvise never\n")
    _write(tmp_path, "proc/vmstat", "nr_free_pages 123\ncompact_stall 42\ncompact_fail 1\n")
    _write(tmp_path, "proc/meminfo", "MemTotal: 1000 kB\nSwapTotal: 2048 kB\nSwapFree: 1024 kB\n")
    for n, cpus in ((0, "0"), (1, "1")):
        _write(tmp_path, f"sys/devices/system/node/node{n}/cpulist", cpus + "\n")
    st = hoststate.host_state(tmp_path)
    assert st == {"governor": "powersave", "thp_enabled": "always", "thp_defrag": "always", "compact_stall": 42,
                  "numa_nodes": 2, "swap_used_bytes": 1024 * 1024, "binding": None}
    warned = hoststate.state_warnings({**st, "binding": {"numa_nodes": [0, 1]}})
    assert [w.split(" ")[0] for w in warned] == ["CPU", "transparent", "1", "infbench"]
    stalls = hoststate.CompactionStalls(tmp_path)
    stalls.start()
    _write(tmp_path, "proc/vmstat", "compact_stall 45\n")
    assert stalls.stop() == 3
    assert hoststate.host_state(tmp_path / "nothing")["governor"] is None   # no /sys: nothing, no error


def test_a_run_stores_the_host_state_in_its_provenance(spm, cpu, tmp_path):
    from infbench.detect import detect
    from infbench.execution.bookkeeping import provenance

    prov = provenance(detect(spm), spm)
    assert set(prov["host_state"]) == {"host", "devices", "warnings"}
    assert "governor" in prov["host_state"]["host"]
    json.dumps(prov)


# -- the unexpected note --------------------------------------------------------------------------------

def test_unexpected_note_against_the_shipped_profile(pm):
    """The built-in llama.cpp profile holds H100 terms (LLM-Inference-Bench's campaign): a cell
    measured at three times its predicted TPOT is noted, one at the prediction is not."""
    from infbench.analysis.predict import limits_for_id
    from infbench.data.paths import default_home
    from infbench.data.schema import DeviceInfo

    lim = limits_for_id(pm, "h100-sxm")
    exp = Expectation(lim, "nvidia", default_home())
    if exp.basis("llama.cpp") is None:
        pytest.fail("the built-in llama.cpp profile no longer covers h100-sxm: pick another fixture pair")
    dev = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=1)
    cell = Cell(model="llama-3-8b", engine="llama.cpp", dtype="f16", batch=1, input_len=128, output_len=128)

    def result(tpot_s):
        e2e = 0.02 + 127 * tpot_s
        return CellResult(cell_id="x", spec_hash=cell.spec_hash(), cell=cell, device=dev, status="ok",
                          metrics={"ttft_s": {"mean": 0.02, "p50": 0.02}, "tpot_s": {"mean": tpot_s, "p50": tpot_s},
                                   "e2e_s": {"mean": e2e, "p50": e2e}, "duration_s": e2e,
                                   "output_tok_s": 128 / e2e}, started_at=0, finished_at=1)

    from infbench.analysis.predict import measured_points, predict_points
    from infbench.data.stored import StoredCell

    row = result(0.01)
    pts = measured_points([StoredCell.from_result(row)])
    basis = exp.basis("llama.cpp")
    predicted = float(predict_points(pts, lim, basis.efficiency_for("llama.cpp", lim, "llama-3-8b"))["tpot_s"][0])
    assert exp.check(result(predicted)) is None
    note = exp.check(result(3 * predicted))
    assert note["outside"][0]["metric"] == "tpot_s" and note["outside"][0]["ratio"] == pytest.approx(3, rel=1e-3)
    assert note["text"].startswith("unexpected: tpot_s 3.00x the prediction")
    cpu_exp = Expectation(limits_for_id(pm, "h100-sxm"), "nvidia", default_home())
    assert cpu_exp.check(result(3 * predicted).model_copy(update={"status": "failed"})) is None


def test_the_hardware_page_sets_default_sweep_cells_beside_the_bare_engine_of_the_same_call():
    """Issue 38, item 10: a cell in the warm regime (TPOT within 10 % of the bare median) and
    one in a slow stretch (3x), each with what its warm-up waited for; a cell of another shape
    has no counterpart and is left out."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from hardware_runs import _warmup_summary, warm_regime

    w = {"mode": "until-stable", "converged": True, "seconds": 4.2,
         "blocks": [{"tpot_ms": 30.0, "clock_mhz": 1980, "s": 1.0}, {"tpot_ms": 22.1, "clock_mhz": 1980, "s": 1.0}]}
    base = {"engine": "transformers", "model": "llama-3-8b", "input_len": 128, "output_len": 128}
    cells = [{**base, "batch": 1, "tpot_s": 0.0231, "warmup": _warmup_summary(w)},
             {**base, "batch": 16, "tpot_s": 0.081, "warmup": None},
             {**base, "batch": 1, "input_len": 1024, "output_len": 1024, "tpot_s": 0.099}]
    bare = [{**base, "batch": 1, "bare": {"tpot_s": 0.022}}, {**base, "batch": 16, "bare": {"tpot_s": 0.027}}]
    rows = warm_regime(cells, bare)
    assert [(r["batch"], r["warm"]) for r in rows] == [(1, True), (16, False)]
    assert rows[0]["ratio"] == pytest.approx(0.0231 / 0.022, rel=1e-3) and rows[1]["ratio"] == pytest.approx(3.0)
    assert rows[0]["warmup"]["block_tpot_ms"] == [30.0, 22.1] and rows[0]["warmup"]["converged"] is True


def test_a_sentinel_drift_needs_a_second_block_that_agrees():
    """One block beyond 10 % is a hiccup unless a second block, run at once, is beyond it on the
    same side; the figures kept are the nearer block's."""
    from infbench.analysis.steady import confirmed, sentinel_check

    slow_then_fast = confirmed(sentinel_check(10.0, 6.0), sentinel_check(10.0, 10.3))
    assert slow_then_fast["drift"] is False and slow_then_fast["now_ms"] == 10.3
    both = confirmed(sentinel_check(10.0, 6.0), sentinel_check(10.0, 6.5))
    assert both["drift"] is True and both["faster_now"] is True and both["blocks_ms"] == [6.0, 6.5]
    assert both["now_ms"] == 6.5  # the smaller claim
    opposite = confirmed(sentinel_check(10.0, 6.0), sentinel_check(10.0, 14.0))
    assert opposite["drift"] is False
    assert confirmed(sentinel_check(10.0, 6.0), None)["drift"] is True and confirmed(None, None) is None
