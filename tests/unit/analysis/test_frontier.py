"""The throughput-interactivity frontier (issue 31): the front of hand-made points, the
per-device and per-user quantities, interpolation, the frontier sweep's loads and stop rule,
engine configurations, and unique prompts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from infbench.analysis.frontier import Point, area, compare, fronts, interpolate, pareto
from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.prompts import synthetic_prompts
from infbench.data.scenarios import FrontierScenario
from infbench.data.schema import Cell, Load, RequestRecord, Sweep
from infbench.data.stored import StoredCell
from infbench.execution.scenarios.frontier import Frontier, series_key, stop_reason
from infbench.execution.session import group_engine_options
from infbench.measure.derive import cell_metrics
from infbench.workloads.prompt import PromptMaker


def P(x, y, cid=None):  # noqa: N802 - a point, short
    return Point(x, y, cid or f"{x}-{y}", "")


def test_the_front_keeps_what_nothing_beats_and_names_the_dominator():
    pts = [P(10, 100, "a"), P(20, 80, "b"), P(15, 70, "c"), P(5, 90, "d"), P(30, 20, "e"), P(25, 20, "f")]
    front = pareto(pts)
    assert [p.cell_id for p in front] == ["a", "b", "e"]   # by increasing interactivity
    dom = {p.cell_id: p.dominated_by for p in pts}
    assert dom["c"] == "b" and dom["d"] == "a" and dom["f"] == "e"
    assert all(dom[k] is None for k in "abe")


def test_ties_stay_and_a_single_point_is_its_own_front():
    a, b = P(10, 50, "a"), P(10, 50, "b")
    assert {p.cell_id for p in pareto([a, b])} == {"a", "b"}
    assert [p.cell_id for p in pareto([P(3, 4, "only")])] == ["only"]
    assert pareto([]) == []


def test_a_lower_is_better_axis_keeps_the_cheapest():
    pts = [P(10, 0.5, "a"), P(20, 0.8, "b"), P(15, 0.9, "c")]
    assert [p.cell_id for p in pareto(pts, higher_is_better=False)] == ["a", "b"]


def test_interpolation_between_front_points_and_nothing_outside():
    front = pareto([P(10, 100), P(30, 60), P(50, 10)])
    assert interpolate(front, 20) == pytest.approx(80.0)
    assert interpolate(front, 30) == pytest.approx(60.0)
    assert interpolate(front, 40) == pytest.approx(35.0)
    assert interpolate(front, 9.9) is None and interpolate(front, 50.1) is None
    assert area(front) == pytest.approx(20 * 80 + 20 * 35)


def _row(cid, engine, x, y, status="ok", device="Dev X1"):
    return StoredCell(cell_id=cid, spec_hash="", run_id="", status=status, device={"model": device, "count": 1},
                      spec={"engine": engine, "batch": 1, "tensor_parallel_size": 1, "input_len": 8, "output_len": 8,
                            "load": {"mode": "concurrency", "concurrency": 1}},
                      metrics={"tok_s_per_user": x, "tok_s_per_device": y})


def test_fronts_group_by_device_and_engine_and_compare_at_equal_interactivity():
    rows = [_row("a1", "A", 10, 100), _row("a2", "A", 30, 60), _row("a3", "A", 20, 50),
            _row("b1", "B", 10, 200), _row("b2", "B", 40, 120), _row("bad", "B", 5, 1, status="failed")]
    fa, fb = fronts(rows)
    assert (fa.engine, [p.cell_id for p in fa.front]) == ("A", ["a1", "a2"])
    assert [p.cell_id for p in fb.front] == ["b1", "b2"]
    res = compare(fa, fb, at=(10.0, 20.0, 30.0, 35.0))
    assert res["overlap"] == [10, 30]
    ratios = {p["tok_s_per_user"]: p["ratio"] for p in res["points"]}
    assert ratios[10.0] == pytest.approx(2.0) and ratios[35.0] is None
    assert ratios[20.0] == pytest.approx((200 - 80 * 10 / 30) / 80)
    d = fa.as_dict()
    assert d["front"][0]["tok_s_per_user"] == 10 and d["dominated"][0]["dominated_by"] == "a2"


def _records(n, n_in, n_out, step_ns=10_000_000):
    out = []
    for i in range(n):
        t0 = 1_000_000_000 + i
        toks = [t0 + 50_000_000 + k * step_ns for k in range(n_out)]
        out.append(RequestRecord(t_send_ns=t0, t_tokens_ns=toks, n_in=n_in, n_out=n_out))
    return out


def test_per_device_and_per_user_quantities():
    one = cell_metrics(_records(4, 100, 11), devices_used=1, energy_j=50.0)
    two = cell_metrics(_records(4, 100, 11), devices_used=2, energy_j=50.0)
    assert two["tok_s_per_device"] == pytest.approx(one["tok_s_per_device"] / 2)
    assert one["tok_s_per_device"] == pytest.approx(one["total_tok_s"])
    assert one["tok_s_per_user"] == pytest.approx(100.0)          # TPOT 10 ms
    assert one["j_per_token"] == pytest.approx(50.0 / (4 * 111))
    assert one["j_per_output_token"] == pytest.approx(50.0 / 44)


def test_frontier_loads_follow_inferencex():
    sw = Sweep(models=["tiny"], engines=["llama.cpp-server"], dtypes=["f16"], batch=[1], input_len=[8],
               output_len=[8], concurrency=[1, 2, 8], frontier=True)
    assert [(ld.concurrency, ld.num_requests, ld.warmup_requests) for ld in sw.loads()] == [
        (1, 32, 2), (2, 32, 4), (8, 80, 16)]


def test_the_stop_rule():
    spec = FrontierScenario(tpot_s=0.05)
    assert stop_reason({"total_tok_s": 100.0}, None, spec) is None
    assert stop_reason({"total_tok_s": 180.0}, 100.0, spec) is None
    assert "saturated: +3.0 %" in stop_reason({"total_tok_s": 103.0}, 100.0, spec)
    assert "SLO broken: TPOT" in stop_reason({"total_tok_s": 300.0, "tpot_s": {"p50": 0.06}}, 100.0, spec)
    assert stop_reason(None, 100.0, spec) == "the cell failed"
    every = FrontierScenario(tpot_s=0.05, stop=False)          # a sweep file's frontier_stop: false
    assert stop_reason({"total_tok_s": 103.0}, 100.0, every) is None
    assert stop_reason({"total_tok_s": 300.0, "tpot_s": {"p50": 0.06}}, 100.0, every) is None
    assert stop_reason(None, 100.0, every) is None


def _cell(c, **kw):
    return Cell(model="tiny-random-llama", engine="llama.cpp-server", dtype="f16", batch=1, input_len=8,
                output_len=8, load=Load(mode="concurrency", concurrency=c, num_requests=max(32, 10 * c),
                                        warmup_requests=2 * c), **kw)


def test_a_series_stops_once_a_doubling_stops_paying():
    cells = [_cell(c) for c in (1, 2, 4, 8, 16)]
    tok_s = {1: 100.0, 2: 190.0, 4: 300.0, 8: 305.0, 16: 320.0}
    measured, notes = [], []
    summary = SimpleNamespace(not_reached=[])
    ctx = SimpleNamespace(device=SimpleNamespace(), done=set(), summary=summary, observer=notes.append)

    class Sess:
        def __init__(self):
            self.ctx = ctx

        def measure(self, c):
            measured.append(c.load.concurrency)
            return SimpleNamespace(status="ok", metrics={"total_tok_s": tok_s[c.load.concurrency]})

    for c in cells:  # cell_id needs a device: the stand-in keys it by concurrency
        object.__setattr__(c, "cell_id", lambda device, c=c: f"c{c.load.concurrency}")
    sc = Frontier.__new__(Frontier)
    sc.spec = FrontierScenario()
    sc.run_group(Group(resolve("tiny"), "llama.cpp-server", "f16", 1, list(reversed(cells))), Sess())
    assert measured == [1, 2, 4, 8]                 # 8 added +1.7 %: 16 is not measured
    assert [c.load.concurrency for c in summary.not_reached] == [16]
    assert notes[0].cell.load.concurrency == 16 and "saturated: +1.7 %" in notes[0].reason
    assert len({series_key(c) for c in cells}) == 1


def test_engine_configurations_start_their_own_server_with_their_arguments():
    a, b = _cell(1, engine_args={"parallel": 4}), _cell(1, engine_args={"parallel": 16})
    assert a.group_key() != b.group_key() and a.spec_hash() != b.spec_hash()
    assert _cell(1).group_key() == ("tiny-random-llama", "llama.cpp-server", "f16", 1)  # old ids and groups stay
    g = Group(resolve("tiny"), "llama.cpp-server", "f16", 1, [b])
    assert group_engine_options({"n_threads": 2}, g) == {"n_threads": 2, "parallel": 16}
    assert group_engine_options({"extra_body": {"k": "s3cret"}},
                                Group(resolve("tiny"), "openai", "auto", 1, [_cell(1, engine_args={
                                    "extra_body": {"k": "[redacted]"}})])) == {"extra_body": {"k": "s3cret"}}


def test_no_two_requests_of_a_frontier_cell_share_their_first_32_tokens():
    n = 80 + 16   # c8: 80 timed + 16 warm-up
    ids = synthetic_prompts(n, 256, 49152, seed=7)
    assert len({tuple(p[:32]) for p in ids}) == n
    text = PromptMaker("text").prompts(n, 256, seed=7)
    assert len({" ".join(str(p.content).split()[:32]) for p in text}) == n
