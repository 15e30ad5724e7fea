"""Issue 31: the adaptive frontier search (``--preset frontier --adaptive 30%``): each series'
corners first, then the cell whose optimistic corner lies furthest above the measured front,
stopping once no cell can move it."""

from __future__ import annotations

import math

from infbench.analysis.adaptive import AdaptivePlanner, front_corners, series_of, staircase
from infbench.data.groups import Group, Plan
from infbench.data.models import resolve
from infbench.data.scenarios import FrontierScenario
from infbench.data.schema import Cell, CellResult, Load
from infbench.execution.scenarios.adaptive_sweep import adaptive_plan
from tests.unit.test_predict_profile import DEV, H100

LEVELS = (1, 2, 4, 8, 16, 32, 64)
CONFIGS = ({"max_num_seqs": 8}, {"max_num_seqs": 64})


def cells() -> list[Cell]:
    return [Cell(model="llama-2-7b", engine="vllm-server", dtype="float16", batch=1, input_len=128, output_len=64,
                 load=Load(mode="concurrency", concurrency=c, num_requests=max(32, 10 * c)), engine_args=cfg)
            for cfg in CONFIGS for c in LEVELS]


def truth(c: Cell) -> tuple[float, float]:
    """(TPOT s, total tok/s): a server that batches up to max_num_seqs, then queues."""
    cap = c.engine_args["max_num_seqs"]
    b = min(c.load.concurrency, cap)
    tpot = 0.01 * (1 + 0.08 * b)
    return tpot, b * (c.input_len + c.output_len) / (tpot * c.output_len + 0.05)


def measure(c: Cell) -> CellResult:
    tpot, tot = truth(c)
    m = {"tpot_s": {"mean": tpot, "p50": tpot}, "ttft_s": {"mean": 0.05, "p50": 0.05},
         "e2e_s": {"mean": 0.05 + tpot * c.output_len, "p50": 0.05 + tpot * c.output_len},
         "total_tok_s": tot, "duration_s": c.load.num_requests * (c.input_len + c.output_len) / tot,
         "devices_used": 1}
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status="ok", metrics=m,
                      wall_s=m["duration_s"], started_at=0.0, finished_at=0.0)


def test_staircase_and_corners():
    pts = [(10.0, 100.0), (50.0, 60.0), (100.0, 10.0)]
    assert staircase(pts, 5) == 100 and staircase(pts, 20) == 60 and staircase(pts, 100) == 10
    assert staircase(pts, 101) == 0 and staircase([], 1) == 0
    cs = cells()
    idx = front_corners(cs)
    assert [(cs[i].engine_args["max_num_seqs"], cs[i].load.concurrency) for i in idx] == [(8, 1), (64, 1), (8, 64),
                                                                                        (64, 64)]
    assert series_of(cs[0]) == series_of(cs[6]) != series_of(cs[7])


def test_front_search_measures_corners_then_only_cells_that_can_move_the_front():
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "50%", stack="cuda", select="front")
    assert pl.target is None                                  # the grid's narrow-interval stop does not apply
    order: list[Cell] = []
    while (c := pl.next_cell()) is not None:
        if len(order) >= 4:                                   # after the corners: a cell that could move the front
            assert pl.front_score(cs.index(c)) > 0
        order.append(c)
        pl.record(measure(c))
    assert {(c.engine_args["max_num_seqs"], c.load.concurrency) for c in order[:4]} == {(8, 1), (64, 1), (8, 64),
                                                                                        (64, 64)}
    assert len(order) <= math.floor(0.5 * len(cs)) and pl.stop_reason in ("budget", "front")
    if pl.stop_reason == "front":
        assert all(not pl.front_score(i) > 0 for i in pl.remaining())
    assert len(pl.predicted_results()) == len(cs) - len(order)


def test_front_score_is_infinite_beyond_the_measured_front_and_negative_below_it():
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    assert pl.front_score(0) == math.inf                      # nothing measured: every cell could extend it
    for i in front_corners(cs):
        pl.record(measure(cs[i]))
    pts = pl.measured_front_points()
    assert len(pts) == 4
    hi_x = max(x for x, _ in pts)
    # a cell predicted far above every measured point scores positive; the measured corners' own
    # neighbours below the front score lower than it
    scores = [pl.front_score(i) for i in pl.remaining()]
    assert any(s > 0 for s in scores) and all(isinstance(s, float) for s in scores)
    assert staircase(pts, hi_x * 1.01) == 0


def test_adaptive_plan_of_a_frontier_plan_aims_at_the_front():
    cs = cells()
    groups = [Group(resolve("llama-2-7b"), "vllm-server", "float16", 1, [c for c in cs if c.engine_args == cfg])
              for cfg in CONFIGS]
    fr = Plan(DEV, groups, scenario=FrontierScenario())
    assert adaptive_plan(fr, "30%").scenario.objective == "front"
    assert adaptive_plan(Plan(DEV, groups), "30%").scenario.objective == "grid"


def test_predicted_cells_of_a_front_search_follow_their_series_measurements():
    """The stored predictions of a front search are corrected by their own series: with its
    corners measured, a series' middle cells are predicted between the corners' measured TPOT
    (the model alone has no term for max_num_seqs and predicts both configurations alike)."""
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    for i in front_corners(cs):
        pl.record(measure(cs[i]))
    preds = {(p.cell.engine_args["max_num_seqs"], p.cell.load.concurrency): p.metrics for p in pl.predicted_results()}
    for cap in (8, 64):
        lo, hi = truth(next(c for c in cs if c.engine_args["max_num_seqs"] == cap and c.load.concurrency == 1))[0], \
            truth(next(c for c in cs if c.engine_args["max_num_seqs"] == cap and c.load.concurrency == 64))[0]
        for c in (2, 4, 8, 16, 32):
            tpot = preds[(cap, c)]["tpot_s"]["p50"]
            assert lo * 0.999 <= tpot <= hi * 1.001, (cap, c, tpot, lo, hi)
            iv = preds[(cap, c)]["interval"]["tpot_s"]
            assert iv[0] < tpot < iv[1]
    assert preds[(8, 16)]["tpot_s"]["p50"] != preds[(64, 16)]["tpot_s"]["p50"]   # the two configurations apart


def test_front_prediction_keeps_tpot_between_its_measured_neighbours():
    """A series' TPOT does not fall as concurrency rises: a predicted cell's TPOT stays within
    the measured cells just below and above it in its series, whatever the model predicts
    (smollm2-135m on llama.cpp's server: the model put parallel-2 concurrency 2 at 9.0 ms,
    under the 10.1 ms measured at concurrency 1)."""
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    series = [c for c in cs if c.engine_args["max_num_seqs"] == 8]
    lo_c, hi_c = series[0], series[-1]   # concurrency 1 and 64
    for c, tpot in ((lo_c, 0.05), (hi_c, 0.06)):   # measured: far above what any model says for c1
        r = measure(c)
        r.metrics["tpot_s"] = {"mean": tpot, "p50": tpot}
        pl.record(r)
    for c in series[1:-1]:
        i = cs.index(c)
        t = pl.front_prediction(i)["tpot_s"]
        assert 0.05 <= t <= 0.06, (c.load.concurrency, t)
    assert pl._series_tpot_bounds(cs.index(series[3])) == (0.05, 0.06)
    # the other series has nothing measured: unbounded
    assert pl._series_tpot_bounds(cs.index(next(c for c in cs if c.engine_args["max_num_seqs"] == 64))) == \
        (0.0, math.inf)
