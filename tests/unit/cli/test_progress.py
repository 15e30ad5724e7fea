"""Issue 25: the run's terminal observer (one bar over the sweep with a weighted ETA, one line per
cell) and the first-run note, fed with the typed events executors send."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from infbench.cli.progress import SweepProgress, cell_line, cell_weight, first_run_note, fmt_duration
from infbench.data import events as ev
from infbench.data.schema import Cell, CellResult, DeviceInfo, Load

DEV = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


def cell(batch, i, o=64, engine="llama.cpp", load=None, warmup=1):
    return Cell(model="smollm2-135m", engine=engine, dtype="f16", batch=batch, input_len=i, output_len=o, load=load,
                warmup=warmup)


def result(c, status="ok", wall=2.0):
    m = {"e2e_s": {"p50": 2.54}, "ttft_s": {"p50": 0.803}, "output_tok_s": 100.7} if status == "ok" else {}
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status=status,
                      error=None if status == "ok" else "OOM: MemoryError", metrics=m, wall_s=wall, started_at=0.0,
                      finished_at=1.0)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_cell_weight_follows_the_quick_sweep_costs():
    small, big = cell_weight(cell(1, 128, warmup=0)), cell_weight(cell(8, 512, warmup=0))
    # measured on llama.cpp, 2 cores (README's run): E2E p50 1.03 s for b1 i128 against 10.5 s for b8 i512
    assert 8 < big / small < 12
    assert cell_weight(cell(8, 512)) > big    # the warm-up pass: the whole prompt again
    assert cell_weight(cell(4, 512)) > cell_weight(cell(4, 128)) > cell_weight(cell(1, 128))
    served = cell(1, 128, engine="llama.cpp-server", load=Load(mode="concurrency", concurrency=4, num_requests=16))
    assert cell_weight(served) > cell_weight(cell(4, 128))   # 4 rounds of 4 in flight


def test_one_bar_weighted_eta_and_a_line_per_cell():
    cells = [cell(1, 128), cell(8, 512), cell(4, 128)]
    buf = io.StringIO()
    clock = Clock()
    obs = SweepProgress(cells, Console(file=buf, width=200, force_terminal=False), clock=clock)
    assert obs.eta_s() is None
    with obs:
        obs(ev.GroupLoading(SimpleNamespace(label=lambda: "smollm2-135m on llama.cpp (f16)")))
        obs(ev.CellSkipped(cells[2]))                       # already stored: no time, no rate
        obs(ev.CellStarted(cells[0]))
        clock.t += 3.0
        obs(ev.CellFinished(result(cells[0])))
        eta = obs.eta_s()
        # the rate of the one measured cell (3 s for its weight) times the weight of the one left
        assert eta == pytest.approx(3.0 / cell_weight(cells[0]) * cell_weight(cells[1]))
        obs(ev.CellStarted(cells[1]))
        clock.t += 20.0
        obs(ev.CellFinished(result(cells[1], status="failed")))
        assert obs.eta_s() == pytest.approx(0.0, abs=1e-9) and obs.count == 3
        obs(ev.Note("a note"))
        obs(object())                                       # an unknown event is ignored, never raised
    text = buf.getvalue()
    assert "skipped smollm2-135m llama.cpp f16 b4 i128 o64: already stored ok" in text
    assert "[2/3] ok smollm2-135m llama.cpp f16 b1 i128 o64: E2E p50 2.54 s, TTFT p50 803 ms, 100.7 out tok/s " \
           "(2.0 s)" in text
    assert "[3/3] failed smollm2-135m llama.cpp f16 b8 i512 o64: OOM: MemoryError" in text
    assert "note: a note" in text


def test_disabled_progress_prints_nothing():
    buf = io.StringIO()
    c = cell(1, 128)
    with SweepProgress([c], Console(file=buf), disable=True) as obs:
        obs(ev.CellFinished(result(c)))
    assert buf.getvalue() == ""


def test_cell_line_and_durations():
    assert cell_line(result(cell(1, 128)), 1, 6).startswith("[1/6] [green]ok[/] smollm2-135m")
    assert fmt_duration(65) == "1:05" and fmt_duration(3725) == "1:02:05" and fmt_duration(-3) == "0:00"


def test_first_run_note_names_the_store_and_three_commands(tmp_path, monkeypatch):
    from infbench.store import Store

    store = Store(tmp_path / "r.db")
    run = store.begin_run({"host": "h"}, "infbench run")
    summary = SimpleNamespace(run_id=run, ok=[result(cell(1, 128)), result(cell(4, 128))], failed=[], skipped=[])
    buf = io.StringIO()
    con = Console(file=buf, width=300)
    assert first_run_note(store, summary, con)
    text = buf.getvalue()
    assert f"first run stored: 2 cell(s) of run {run} in {tmp_path / 'r.db'}" in text
    for cmd in (f"infbench results --store {tmp_path / 'r.db'}", f"infbench report --store {tmp_path / 'r.db'} --out",
                f"infbench compare --store {tmp_path / 'r.db'} {run} RUN"):
        assert cmd in text
    assert "(e.g. another engine, image or machine)" in text      # the compiled llama.cpp ran: no upgrade hint
    assert not first_run_note(store, summary, con, as_json=True)
    store.begin_run({"host": "h"}, "infbench run")               # a second run: no note any more
    assert not first_run_note(store, summary, Console(file=io.StringIO()))
    store.close()


# -- issue 30: model load and warm-up are phases of their own; the H100 replay -----------------

H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3")


def h100_cell(b, i, o):
    return Cell(model="llama-3-8b", engine="transformers", dtype="bfloat16", batch=b, input_len=i, output_len=o)


#: The default sweep of the first H100 run, in its run order (lib-corner: batch 1/16/64,
#: input = output 128/1024; ../shared/hardware/h100-2026-11-26/run1-log.txt).
H100_SWEEP = [h100_cell(1, 128, 128), h100_cell(1, 1024, 1024), h100_cell(16, 128, 128), h100_cell(16, 1024, 1024),
              h100_cell(64, 128, 128), h100_cell(64, 1024, 1024)]
#: What the five cells after the first would have taken on that GPU at the rate of those runs
#: (s): the 128/128 cells as measured in run 2 (finished_at - started_at of
#: run2-results-device-init.json); the 1024/1024 cells from run 2's TTFT and TPOT of the same
#: batch and input (TTFT + 1023 x TPOT, plus a warm-up of about one 128/128 cell's prefill and 2 steps).
H100_TRUE_REST_S = [0.034 + 1023 * 0.0746 + 1.0, 10.19, 0.475 + 1023 * 0.0693 + 1.0, 8.38, 1.90 + 1023 * 0.0669 + 2.0]


def test_eta_replays_the_first_h100_run_within_2x():
    """Run 1: the model load took 268 s, then the first cell (b1 128/128) 11.45 s (its warm-up
    and a 9.3 s timed part). The old ETA divided 279 s by the first cell's weight on the CPU's
    costs and printed 27:59:08; the ETA now leaves the load out of the rate, weighs cells for an
    accelerator and must be within 2x of what was really left."""
    clock = Clock()
    obs = SweepProgress(H100_SWEEP, Console(file=io.StringIO(), width=200), clock=clock, device_kind="accelerator")
    group = SimpleNamespace(label=lambda: "llama-3-8b on transformers (bfloat16)",
                            key=lambda: ("llama-3-8b", "transformers", "bfloat16", 1))
    with obs:
        obs(ev.GroupLoading(group))
        clock.t += 268.0                                 # building the dummy weights on the host
        obs(ev.CellStarted(H100_SWEEP[0]))
        assert obs.eta_s() is None                       # no ETA before a timed cell finished
        clock.t += 2.15
        obs(ev.CellTimed(H100_SWEEP[0]))
        assert obs.eta_s() is None
        clock.t += 9.3
        obs(ev.CellFinished(result(H100_SWEEP[0], wall=9.3)))
        eta, true = obs.eta_s(), sum(H100_TRUE_REST_S)
    print(f"ETA {eta:.0f} s for a true remainder of {true:.0f} s")
    assert eta is not None and true / 2 <= eta <= 2 * true, (eta, true)
    assert obs.loads == [268.0] and not obs.groups_left    # the one load, seen and done


def test_the_cpu_weights_would_have_missed_it_by_far():
    """The same replay weighed as CPU cells (the old behaviour on a GPU): the ETA is off by more
    than 10x, which is why the weights depend on the kind of device."""
    w = [cell_weight(c, "cpu") for c in H100_SWEEP]
    old = sum(w[1:]) / w[0] * 11.45
    assert old > 10 * sum(H100_TRUE_REST_S)


def test_warm_up_and_load_are_left_out_of_the_timed_rate():
    cells = [cell(1, 128), cell(1, 128, o=128), Cell(model="tinyllama-1.1b", engine="llama.cpp", dtype="f16",
                                                       batch=1, input_len=128, output_len=64)]
    buf = io.StringIO()
    clock = Clock()
    obs = SweepProgress(cells, Console(file=buf, width=200, force_terminal=False), clock=clock)
    g1 = SimpleNamespace(label=lambda: "smollm2-135m on llama.cpp (f16)",
                         key=lambda: ("smollm2-135m", "llama.cpp", "f16", 1))
    with obs:
        obs(ev.GroupLoading(g1))
        assert "(model load)" in obs.progress.tasks[0].description
        clock.t += 50.0                                   # load: 50 s
        obs(ev.CellStarted(cells[0]))
        assert obs.progress.tasks[0].description.endswith(": warm-up")
        clock.t += 4.0                                    # warm-up: 4 s
        obs(ev.CellTimed(cells[0]))
        assert obs.progress.tasks[0].description.endswith(": timed")
        clock.t += 6.0                                    # timed part: 6 s
        obs(ev.CellFinished(result(cells[0])))
        from infbench.cli.progress import timed_weight, warmup_weight
        rate = 6.0 / timed_weight(cells[0])
        warm_rate = 4.0 / warmup_weight(cells[0])
        expect = (timed_weight(cells[1]) + timed_weight(cells[2])) * rate \
            + (warmup_weight(cells[1]) + warmup_weight(cells[2])) * warm_rate + 50.0   # one more model to load
        assert obs.eta_s() == pytest.approx(expect)


def test_predicted_cells_are_named_predicted_not_failed():
    """Issue 33, item 7: an adaptive sweep's predicted cell is a prediction, never a failure."""
    c = cell(4, 512)
    r = CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status="predicted",
                   metrics={"e2e_s": {"p50": 3.2}, "predicted": True}, started_at=0.0, finished_at=0.0)
    line = cell_line(r, 2, 4)
    assert "predicted" in line and "failed" not in line and "3.20 s" in line
    buf = io.StringIO()
    with SweepProgress([c], Console(file=buf, width=200, force_terminal=False)) as obs:
        obs(ev.CellFinished(r))
    assert "predicted" in buf.getvalue() and "failed" not in buf.getvalue()
    assert obs.eta_s() is None                            # a prediction took no time: no rate from it
