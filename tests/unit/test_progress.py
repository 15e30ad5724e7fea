"""Issue 25: the run's terminal observer (one bar over the sweep with a weighted ETA, one line per
cell) and the first-run note, fed with the typed events executors send."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from infbench.cli.progress import SweepProgress, cell_line, cell_weight, first_run_note, fmt_duration
from infbench.executors import events as ev
from infbench.schema import Cell, CellResult, DeviceInfo, Load

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
