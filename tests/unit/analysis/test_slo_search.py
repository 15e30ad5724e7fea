"""The SLO search (bracket, then bisect) against load curves with known knees, goodput per
request, and the saturation signs (server queue, release lag)."""

import pytest

from infbench.analysis.slo_search import (
    Probe,
    SloTarget,
    goodput_fraction,
    probe_cell,
    saturation,
    search,
    searches,
)
from infbench.data.errors import ConfigError
from infbench.data.schema import Cell, CellResult, DeviceInfo, Load, RequestRecord
from infbench.data.stored import StoredCell

MS = 1_000_000
DEV = DeviceInfo(vendor="cpu", kind="cpu", model="x")


def rec(ttft_ms, tpot_ms=5, n=8, sched=0, send=None, error=None):
    t0 = send if send is not None else sched
    toks = [t0 + int(ttft_ms * MS) + int(i * tpot_ms * MS) for i in range(n)]
    return RequestRecord(t_send_ns=t0, t_sched_ns=sched, t_tokens_ns=toks if error is None else [], n_in=8,
                         n_out=n, error=error)


def result(records, load=None, metrics=None):
    cell = Cell(model="m", engine="openai", dtype="auto", batch=1, input_len=8, output_len=8,
                load=load or Load(mode="rate", request_rate=4.0))
    return CellResult(cell_id="c", spec_hash="s", cell=cell, device=DEV, status="ok", records=records,
                      metrics=metrics or {}, started_at=0, finished_at=1)


def curve(knee, mode="concurrency"):
    """A server that meets the SLO exactly up to ``knee``."""
    calls = []

    def measure(x):
        calls.append(x)
        return Probe(x, result([]), 1.0 if x <= knee else 0.2, x <= knee)

    return measure, calls


@pytest.mark.parametrize("knee", [1, 3, 4, 7, 100, 511])
def test_concurrency_search_finds_the_knee_exactly(knee):
    measure, calls = curve(knee)
    r = search(measure, "concurrency", 1)
    assert r.knee == knee and r.first_fail == knee + 1 and r.stopped == "converged"
    assert len(calls) == len(set(calls))               # each load measured once
    assert len(calls) <= 2 * knee.bit_length() + 2       # bracket + bisection: logarithmic


def test_rate_search_converges_within_tolerance():
    measure, calls = curve(13.7, "rate")
    r = search(measure, "rate", 1.0, rel_tol=0.05)
    assert r.knee <= 13.7 < r.first_fail and (r.first_fail - r.knee) <= 0.05 * r.knee


def test_failing_start_halves_down_and_limit_stops_up():
    measure, calls = curve(3)
    r = search(measure, "concurrency", 16)
    assert calls[:3] == [16, 8, 4] and r.knee == 3 and r.first_fail == 4
    measure, _ = curve(10**6)
    r = search(measure, "concurrency", 1, limit=64)
    assert r.knee == 64 and r.first_fail is None and r.stopped == "limit"
    measure, _ = curve(0)
    r = search(measure, "concurrency", 4)
    assert r.knee is None and r.stopped == "nothing passes"


def test_probe_budget_and_bad_arguments():
    measure, calls = curve(300)
    r = search(measure, "concurrency", 1, max_probes=4)
    assert len(calls) == 4 and r.stopped == "probe budget" and r.knee == 8
    with pytest.raises(ConfigError, match="rate or concurrency"):
        search(measure, "batch", 1)
    with pytest.raises(ConfigError, match="outside"):
        search(measure, "concurrency", 0)
    with pytest.raises(ConfigError, match="needs an SLO"):
        SloTarget()
    with pytest.raises(ConfigError, match="--goodput"):
        SloTarget(ttft_s=1, goodput=1.5)


def test_goodput_counts_every_sent_request():
    slo = SloTarget(ttft_s=0.1, tpot_s=0.01)
    rs = [rec(50), rec(150), rec(50, tpot_ms=20), rec(50, error="HTTP 500"), rec(50, n=1)]
    assert [slo.meets(r) for r in rs] == [True, False, False, False, True]
    assert goodput_fraction(rs, slo) == pytest.approx(2 / 5)
    assert goodput_fraction([], slo) == 0.0


def test_saturation_from_the_server_queue_only_in_rate_mode():
    rs = [rec(10, sched=i * 250 * MS) for i in range(40)]
    grew = {"server_name": "vllm", "server_waiting": {"max": 17.0, "slope_per_s": 3.2}, "n_requests": 40}
    assert "server queue grew to 17" in saturation(result(rs, metrics=grew), "rate")
    assert saturation(result(rs, metrics=grew), "concurrency") is None          # a closed loop bounds it
    drained = {**grew, "server_waiting": {"max": 3.0, "slope_per_s": 0.5}}
    assert saturation(result(rs, metrics=drained), "rate") is None


def test_saturation_from_growing_release_lag():
    # the client falls behind: request i is sent i * 100 ms after its schedule
    late = [rec(10, sched=i * 250 * MS, send=i * 250 * MS + i * 100 * MS) for i in range(40)]
    assert "release lag grew" in saturation(result(late), "rate")
    steady = [rec(10, sched=i * 250 * MS, send=i * 250 * MS + 2 * MS) for i in range(40)]
    assert saturation(result(steady), "rate") is None


def test_probe_cells_keep_the_workload_and_searches_are_read_back():
    t = Cell(model="m", engine="openai", dtype="auto", batch=1, input_len=8, output_len=8,
             load=Load(mode="concurrency", concurrency=1, num_requests=24, warmup_requests=2))
    c = probe_cell(t, "concurrency", 6)
    assert c.load.concurrency == 6 and c.load.num_requests == 24 and c.load.warmup_requests == 2
    r = probe_cell(t, "rate", 2.5)
    assert r.load.mode == "rate" and r.load.request_rate == 2.5 and r.load.concurrency is None
    rows = []
    for load, frac in ((1, 1.0), (2, 1.0), (4, 0.95), (8, 0.1), (6, 0.3), (5, 0.5)):
        fm = {"search_id": "s1", "mode": "concurrency", "load": load, "fraction": frac, "passed": frac >= 0.9,
              "saturated": None, "goodput": 0.9, "slo": {"tpot_s": 0.025}}
        rows.append(StoredCell(cell_id=f"c{load}", spec_hash="", run_id="", status="ok",
                               spec=probe_cell(t, "concurrency", load).model_dump(), device={},
                               metrics={"find_max": fm, "goodput_req_s": frac * load}))
    (s,) = searches(rows)
    assert [p["load"] for p in s["points"]] == [1, 2, 4, 5, 6, 8]
    assert s["knee"] == 4 and s["first_fail"] == 5


def test_search_refuses_a_trace_and_non_streaming_requests(tmp_path):
    """A trace brings its own arrival times and --no-stream has no TTFT/TPOT: refused with
    the reason, before any engine starts (also from the command line, exit 2)."""
    from typer.testing import CliRunner

    from infbench.analysis.slo_search import check_workload
    from infbench.cli import app

    check_workload(False, False)
    with pytest.raises(ConfigError, match="--trace releases its requests at its own times"):
        check_workload(True, False)
    with pytest.raises(ConfigError, match="--no-stream measures E2E only"):
        check_workload(False, True)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n')
    common = ["run", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
              "--slo-ttft-ms", "100", "--store", str(tmp_path / "r.db")]
    res = CliRunner().invoke(app, [*common, "--trace", str(trace), "--find-max", "rate"])
    assert res.exit_code == 2 and "--trace-speed" in res.output
    res = CliRunner().invoke(app, [*common, "--no-stream", "--find-max", "concurrency"])
    assert res.exit_code == 2 and "--no-stream measures E2E only" in res.output
