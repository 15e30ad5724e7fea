"""Issue 31: the adaptive frontier search (``--preset frontier --adaptive 30%``): each series'
corners first, then the cell whose optimistic corner lies furthest above the measured front,
stopping once no cell can move it."""

from __future__ import annotations

import math

import pytest

from infbench.analysis.adaptive import (
    FULL_WIDTH_DISTANCE,
    NOISE_HALF_WIDTH,
    TARGET_HALF_WIDTH,
    AdaptivePlanner,
    front_corners,
    front_line,
    series_of,
)
from infbench.analysis.predict import SLOT_OPTIONS, cell_options, predict, serving_for
from infbench.data.groups import Group, Plan
from infbench.data.models import resolve
from infbench.data.scenarios import FrontierScenario
from infbench.data.schema import Cell, CellResult, Load
from infbench.data.stored import StoredCell
from infbench.execution.scenarios.adaptive_sweep import adaptive_plan
from tests.unit.analysis.test_predict_profile import DEV, H100

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


def test_corners():
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
    assert front_line(pts, hi_x * 1.01) == 0


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
    (the model caps the batch at max_num_seqs; the series' measurements carry the rest)."""
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


def test_front_line_reads_the_measured_front_as_the_report_does():
    """Linear between the two Pareto points around x (the front is read so:
    frontier.interpolate); a dominated point does not count; the highest throughput below the
    front's lowest interactivity; 0 beyond its highest."""
    pts = [(10.0, 100.0), (50.0, 60.0), (100.0, 10.0), (40.0, 20.0)]   # (40, 20) is dominated by (50, 60)
    assert front_line(pts, 30.0) == 80.0 and front_line(pts, 75.0) == 35.0
    assert front_line(pts, 5.0) == 100.0 and front_line(pts, 10.0) == 100.0 and front_line(pts, 100.0) == 10.0
    assert front_line(pts, 100.5) == 0.0 and front_line([], 1.0) == 0.0
    def step(x):   # the highest throughput among points at least as interactive
        return max((py for px, py in pts if px >= x), default=0.0)
    assert all(front_line(pts, x) >= step(x) for x in (5, 10, 20, 45, 50, 60, 99))   # never below that


def test_server_slots_cap_the_predicted_batch():
    """A concurrency above the server's slots queues: the step runs the slots (vLLM max_num_seqs,
    SGLang max_running_requests, TensorRT-LLM max_batch_size, llama.cpp parallel)."""
    for k in SLOT_OPTIONS:
        assert serving_for("llama.cpp", {k: 4}).max_num_seqs == 4
        assert serving_for("llama.cpp", {k: "4"}).max_num_seqs == 4
    assert serving_for("llama.cpp", {"parallel": 4, "max_num_seqs": 2}).max_num_seqs == 2      # the tighter one
    for bad in (0, -1, "x", True, None):
        assert serving_for("llama.cpp", {"parallel": bad}).max_num_seqs is None
    m = resolve("llama-2-7b")
    capped = predict(m, H100, 64, 128, 64, 1, "float16", serving=serving_for("vllm", {"max_num_seqs": 8}))
    at_cap = predict(m, H100, 8, 128, 64, 1, "float16", serving=serving_for("vllm", {"max_num_seqs": 8}))
    free = predict(m, H100, 64, 128, 64, 1, "float16", serving=serving_for("vllm"))
    assert float(capped["tpot_s"]) == float(at_cap["tpot_s"]) < float(free["tpot_s"])
    # eight waves of the slots: the throughput of one (the batch's fixed overhead spread wider)
    assert abs(float(capped["total_tok_s"]) / float(at_cap["total_tok_s"]) - 1) < 0.05
    assert float(capped["total_tok_s"]) < float(free["total_tok_s"])


def test_a_static_server_with_slots_holds_only_its_slots():
    """llama.cpp's server allocates its context for its slots (parallel x per slot), so a
    concurrency far above them queues; it is not refused as a static batch of that size that
    would not fit (a review found 64 and 256 refused at parallel 4, 2048 in / 2048 out)."""
    m = resolve("llama-2-7b")
    sv = serving_for("llama.cpp-server", {"parallel": 4})
    at4, at256 = (predict(m, H100, b, 2048, 2048, 1, "float16", serving=sv) for b in (4, 256))
    assert float(at256["fits_memory"]) == 1.0 and math.isfinite(float(at256["tpot_s"]))
    assert float(at256["tpot_s"]) == float(at4["tpot_s"])
    free = predict(m, H100, 256, 2048, 2048, 1, "float16", serving=serving_for("llama.cpp-server"))
    assert float(free["fits_memory"]) == 0.0 and math.isnan(float(free["tpot_s"]))   # no slots: all 256 at once


def test_stored_cells_are_fitted_with_their_slots():
    """`predict --calibrate` and the fits read a stored cell's slots as the planner does: its
    spec's engine_args, else the slots its llama.cpp server ran with."""
    def row(spec: dict, engine: dict) -> StoredCell:
        return StoredCell(cell_id="c", spec_hash="h", run_id="r", status="ok", spec=spec, device={}, engine=engine)

    row1 = row({"engine_args": {"parallel": 2}}, {"name": "llama.cpp-server", "parallel": 2})
    assert serving_for("llama.cpp", cell_options(row1)).max_num_seqs == 2
    row2 = row({"engine_args": {}}, {"name": "llama.cpp-server", "parallel": 8})
    assert cell_options(row2) == {"parallel": 8}
    row3 = row({}, {"options": {"n_batch": 512}})
    assert cell_options(row3) == {"n_batch": 512} and serving_for("llama.cpp", cell_options(row3)).max_num_seqs is None


def test_the_planner_predicts_a_capped_series_flat_past_its_slots():
    """Before anything is measured: the max_num_seqs-8 series' TPOT stops rising at
    concurrency 8; the max_num_seqs-64 series' keeps rising."""
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    tpot = {(c.engine_args["max_num_seqs"], c.load.concurrency): pl.prediction(i)["tpot_s"] for i, c in enumerate(cs)}
    assert tpot[(8, 8)] == tpot[(8, 16)] == tpot[(8, 64)]
    assert tpot[(64, 8)] < tpot[(64, 16)] < tpot[(64, 64)]


def test_a_cells_interval_narrows_with_its_distance_to_a_measured_cell_of_its_series():
    """Fewer than three measured cells in a series: x/ 1.2 two doublings or more from its nearest
    measured cell, half that one doubling away, x/ 1.03 at a measured cell's load."""
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    for i in front_corners(cs):
        pl.record(measure(cs[i]))
    idx = {(c.engine_args["max_num_seqs"], c.load.concurrency): i for i, c in enumerate(cs)}
    def hw(key):
        return pl.series_half_width(idx[key], bracket=False)

    assert hw((8, 8)) == TARGET_HALF_WIDTH                                        # three doublings from c1 and c64
    assert math.isclose(hw((8, 32)), TARGET_HALF_WIDTH * math.log(2) / FULL_WIDTH_DISTANCE)
    assert math.isclose(hw((8, 2)), hw((8, 32)))
    assert hw((8, 1)) == NOISE_HALF_WIDTH == pl.series_half_width(idx[(8, 1)])    # a measured cell's own load


def test_a_cell_between_measured_neighbours_is_never_surer_than_their_bracket():
    """Issue 43: between two measured cells of its series, a cell's interval reaches the farther
    neighbour's measured throughput (without trusting the correction's shape, the truth lies
    anywhere between them), unless the model's own interval is narrower; outside the measured
    range, and at a measured load, the bracket adds nothing."""
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    for i in front_corners(cs):
        pl.record(measure(cs[i]))
    idx = {(c.engine_args["max_num_seqs"], c.load.concurrency): i for i, c in enumerate(cs)}
    i = idx[(8, 4)]
    lo, hi = truth(cs[idx[(8, 1)]])[1], truth(cs[idx[(8, 64)]])[1]
    tot = pl.series_corrected(i)[1]
    far = max(abs(math.log(tot / lo)), abs(math.log(tot / hi)))
    assert far > 0.3 and math.isclose(pl.bracket_half_width(i), min(far, pl.half_width(i)))
    assert pl.series_half_width(i) == max(pl.series_half_width(i, bracket=False), pl.bracket_half_width(i))
    # the interval of its prediction (what the shown front carries) is that wide
    pr = pl.front_prediction(i)
    assert math.isclose(pr["interval"]["total_tok_s"][1] / pr["total_tok_s"], math.exp(pl.series_half_width(i)))
    pl2 = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    pl2.record(measure(cs[idx[(8, 1)]]))
    pl2.record(measure(cs[idx[(8, 16)]]))
    assert pl2.bracket_half_width(idx[(8, 32)]) == 0.0 == pl2.bracket_half_width(idx[(8, 16)])


def test_a_cell_without_tpot_still_corrects_its_series_throughput():
    """A measured cell whose TPOT p50 is 0 (tokens streamed in chunks faster than the stream's
    granularity: tiny-random-llama on llama.cpp's server) has no interactivity, but its
    throughput still corrects its series; its TPOT ratio is left out, not read as 0."""
    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "100%", stack="cuda", select="front")
    series = [c for c in cs if c.engine_args["max_num_seqs"] == 8]
    lo_c, hi_c = series[0], series[-1]
    r = measure(lo_c)
    r.metrics["tpot_s"] = {"mean": 0.0, "p50": 0.0}
    r.metrics["total_tok_s"] *= 3.0                           # the server did three times what the model says
    pl.record(r)
    pl.record(measure(hi_c))
    pts = pl._series_points(series_of(lo_c))
    assert len(pts) == 2 and pts[0][1] is None and pts[1][1] is not None
    i2 = cs.index(series[1])                                  # concurrency 2: near the chunked cell
    _, tot = pl.series_corrected(i2)
    assert tot > 1.5 * pl.prediction(i2)["total_tok_s"]       # lifted towards the measured 3x
    tpot, _ = pl.series_corrected(i2)
    # its TPOT is corrected by the one cell that has a TPOT ratio (the chunked cell's is not read as 0)
    assert math.isclose(tpot / pl.prediction(i2)["tpot_s"], math.exp(pts[1][1]), rel_tol=1e-9)


def _corners_of(order):
    return {(c.engine_args["max_num_seqs"], c.load.concurrency) for c in order}


def test_the_corners_are_measured_whatever_the_budget():
    """Issue 43: 14 cells, 2 series, 4 corners. 20 % (2 cells) is raised to the corners, 29 %
    (4) is exactly them, 50 % (7) measures them and then spends the rest; each may add one
    predicted peak per series up to half the grid (20 % and 29 %: 6 at most; 50 %: 7); a time
    budget too short for one cell still measures the corners."""
    from infbench.analysis.adaptive import peak_allowance
    from infbench.execution.scenarios.adaptive_sweep import corner_budget

    assert [peak_allowance(14, 2, b) for b in (4, 5, 7, 9)] == [6, 7, 7, 9]
    corners = {(8, 1), (64, 1), (8, 64), (64, 64)}
    for budget, want, raised, n_max in (("20%", 2, True, 6), ("29%", 4, False, 6), ("50%", 7, False, 7)):
        cov = corner_budget(cells(), budget)
        assert (cov["budget_cells"], cov["corners"], cov["series"], cov["raised"]) == (want, 4, 2, raised)
        assert (cov["note"] is not None) == raised and cov["measured_at_most"] == n_max
        pl = AdaptivePlanner(cells(), DEV, H100, budget, stack="cuda", select="front")
        order = []
        while (c := pl.next_cell()) is not None:
            order.append(c)
            pl.record(measure(c))
        assert _corners_of(order[:4]) == corners and 4 <= len(order) <= n_max, (budget, len(order))
    pl = AdaptivePlanner(cells(), DEV, H100, "1s", stack="cuda", select="front")
    order = []
    while (c := pl.next_cell(elapsed_s=10.0)) is not None:
        order.append(c)
        pl.record(measure(c))
    assert _corners_of(order) == corners and len(order) == 4 and pl.stop_reason == "budget"


def test_a_budget_below_the_corners_is_said_before_the_run_or_refused_when_strict():
    import pytest

    from infbench.data.errors import ConfigError

    cs = cells()
    groups = [Group(resolve("llama-2-7b"), "vllm-server", "float16", 1, [c for c in cs if c.engine_args == cfg])
              for cfg in CONFIGS]
    fr = Plan(DEV, groups, scenario=FrontierScenario())
    raised = adaptive_plan(fr, "20%")
    assert any("below the 4 corners of 2 series" in w and "raised to 4" in w for w in raised.warnings), raised.warnings
    assert not any("corners" in w for w in adaptive_plan(fr, "29%").warnings)
    with pytest.raises(ConfigError, match="--adaptive-strict refuses") as e:
        adaptive_plan(fr, "20%", strict=True)
    assert "29%" in e.value.hint
    assert adaptive_plan(fr, "29%", strict=True).scenario.strict is True
    with pytest.raises(ConfigError, match="applies to the frontier"):   # the grid objective has no corners
        adaptive_plan(Plan(DEV, groups), "10%", strict=True)


def test_a_series_peak_below_its_highest_concurrency_is_measured_after_the_corners():
    """Issue 43's peak rule on a synthetic server whose throughput peaks at its slot count (8)
    and falls beyond it (each queued request costs the batch 1 %): after the four corners, the
    search's next cells are the cells predicted to hold each series' peak, and the max_num_seqs=8
    series' peak (c=8, below its highest concurrency 64) is measured, not predicted."""
    def measure_peaked(c: Cell) -> CellResult:
        r = measure(c)
        queued = max(0, c.load.concurrency - c.engine_args["max_num_seqs"])
        r.metrics["total_tok_s"] *= 1 / (1 + 0.01 * queued)
        return r

    cs = cells()
    pl = AdaptivePlanner(cs, DEV, H100, "50%", stack="cuda", select="front")
    for _ in range(4):
        pl.record(measure_peaked(pl.next_cell()))
    assert not pl.corners_left()
    peaks = pl.peak_cells()
    by_cap = {cs[i].engine_args["max_num_seqs"]: cs[i].load.concurrency for i in peaks}
    assert 8 in by_cap and by_cap[8] < 64, by_cap          # predicted below the highest concurrency
    assert pl.next_cell() is cs[peaks[0]]                   # and measured next, before the front's score
    true_peak = max((c for c in cs if c.engine_args["max_num_seqs"] == 8),
                    key=lambda c: measure_peaked(c).metrics["total_tok_s"])
    assert true_peak.load.concurrency == 8
    for i in peaks:
        pl.record(measure_peaked(cs[i]))
    # once measured, a series' peak is no longer asked for unless a prediction now lies above it
    assert all(pl.ids[i] not in pl.measured for i in pl.peak_cells())
    # every series' peak measured: the cells beside the highest one whose interval reaches it
    # are next (the front's peak may lie there), then none once they are measured below it
    meas = {cs.index(c) for c in cs if pl.ids[cs.index(c)] in pl.measured}
    top = max(meas, key=lambda i: measure_peaked(cs[i]).metrics["total_tok_s"])
    side = pl.peak_cells()
    series = sorted((i for i in range(len(cs)) if series_of(cs[i]) == series_of(cs[top])),
                    key=lambda i: cs[i].load.concurrency)
    k = series.index(top)
    assert side and set(side) <= set(series[max(0, k - 1):k + 2]) - {top}, (cs[top].load, side)
    peak_y = measure_peaked(cs[top]).metrics["total_tok_s"]
    assert all(pl.series_corrected(i)[1] * math.exp(pl.series_half_width(i)) >= peak_y for i in side)
    for i in side:
        pl.record(measure_peaked(cs[i]))
    assert not pl.peak_cells()                              # known now: measured on every side that could beat it


def test_a_front_whose_highest_point_is_predicted_says_so():
    """Issue 43: the shown front states its largest relative interval, and a front whose
    highest throughput is a predicted point is flagged; a measured peak is not."""
    from infbench.analysis.frontier import Front, Point, pareto

    pts = [Point(100.0, 50.0, "a", "c1"), Point(50.0, 200.0, "b", "c64"),
           Point(30.0, 300.0, "p", "c32", predicted=True, interval=(240.0, 390.0))]
    f = Front("dev", "eng", "total_tok_s_per_device", pts, pareto(list(pts)))
    cert = f.certainty()
    assert cert["peak_predicted"] is True and cert["peak_cell"] == "p"
    assert cert["largest_interval"] == pytest.approx(0.25)                  # (390 - 240) / 2 / 300
    assert "highest point" in cert["notes"][0] and "+/-25 %" in cert["notes"][1]
    assert f.as_dict()["certainty"] == cert
    measured = [Point(100.0, 50.0, "a", "c1"), Point(30.0, 300.0, "b", "c64"),
                Point(60.0, 100.0, "p", "c8", predicted=True, interval=(90.0, 110.0))]
    g = Front("dev", "eng", "total_tok_s_per_device", measured, pareto(list(measured)))
    assert g.certainty()["peak_predicted"] is False and g.certainty()["largest_interval"] == pytest.approx(0.1)
    assert len(g.certainty()["notes"]) == 1
    # on a lower-is-better axis (J/token) the best point is the lowest: a predicted lowest point
    # is flagged, a predicted highest one is not the peak
    j = [Point(100.0, 0.5, "a", "c1"), Point(50.0, 0.2, "p", "c16", predicted=True, interval=(0.15, 0.25)),
         Point(30.0, 0.9, "q", "c64", predicted=True, interval=(0.8, 1.0))]
    h = Front("dev", "eng", "j_per_token", j, pareto(list(j), higher_is_better=False))
    assert h.certainty()["peak_cell"] == "p" and h.certainty()["peak_predicted"] is True
    assert "lowest point" in h.certainty()["notes"][0]


def test_a_front_point_far_from_anything_measured_in_its_series_says_so():
    """A predicted front point at concurrency 32 whose series was measured only at 1 and 2 is
    four doublings away: the front says so; one at 4 (one doubling from 2) does not."""
    from infbench.analysis.frontier import Front, Point, pareto

    pts = [Point(100.0, 50.0, "m1", "c1, tp1, 32/16", load=1, series="tp1, 32/16"),
           Point(90.0, 90.0, "m2", "c2, tp1, 32/16", load=2, series="tp1, 32/16"),
           Point(80.0, 150.0, "p4", "c4, tp1, 32/16", predicted=True, interval=(140.0, 160.0), load=4,
                 series="tp1, 32/16"),
           Point(40.0, 400.0, "p32", "c32, tp1, 32/16", predicted=True, interval=(300.0, 500.0), load=32,
                 series="tp1, 32/16")]
    notes = Front("dev", "eng", "total_tok_s_per_device", pts, pareto(list(pts))).certainty()["notes"]
    far = [n for n in notes if "doublings" in n]
    assert len(far) == 1 and "c32" in far[0] and "4.0 doublings" in far[0]


def test_a_predicted_rows_interval_reaches_the_shown_front():
    """The planner predicts total tok/s with its interval; the front's y is per device: the
    point carries that interval divided by the devices, so the front says how sure it is."""
    from infbench.analysis.frontier import axis_interval, fronts

    spec = {"model": "m", "engine": "e", "dtype": "f16", "batch": 1, "input_len": 8, "output_len": 8,
            "tensor_parallel_size": 2, "load": {"mode": "concurrency", "concurrency": 4}}
    m = {"tpot_s": {"p50": 0.01}, "total_tok_s": 400.0, "devices_used": 2,
         "interval": {"total_tok_s": [300.0, 500.0], "tpot_s": [0.008, 0.012]}}
    assert axis_interval(m, "tok_s_per_device") == (150.0, 250.0)
    assert axis_interval(m, "j_per_token") is None and axis_interval({"interval": {"total_tok_s": [1, None]}},
                                                                      "tok_s_per_device") is None
    [f] = fronts([StoredCell(cell_id="a", spec_hash="", run_id="", status="predicted", spec=spec, metrics=m,
                             device={"model": "X"})])
    assert f.front[0].interval == (150.0, 250.0) and abs(f.certainty()["largest_interval"] - 0.25) < 1e-9
    assert f.doubt(f.front[0], 0.10) == "interval +/-25 %"           # wider than +/-10 %
    assert f.doubt(f.front[0], 0.30) == "more than two doublings from a measured cell"  # nothing measured
