"""Every scenario through the one engine session, with the stand-in engines of
``infbench.testing`` (milliseconds per run): run, resume, failure, interrupt, device proof,
and the host-side half the container and Ray executors use after a worker dies."""

from __future__ import annotations

import json

import pytest

from infbench import testing
from infbench.analysis.slo_search import SloTarget
from infbench.data import events as ev
from infbench.data.run import RunOptions
from infbench.data.schema import DeviceInfo, Sweep
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.execution.scenarios import make_scenario
from infbench.execution.scenarios.find_max import find_max_plan
from infbench.execution.session import RunContext
from infbench.plan import plan
from infbench.store import Store


@pytest.fixture
def fpm():
    return testing.plugin_manager()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "r.db")
    yield s
    s.close()


def _sweep_plan(fpm, cpu, **kw):
    sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=kw.pop("batch", [1, 2, 4]),
               input_len=[16], output_len=[4], **kw)
    return plan(sw, cpu, fpm)


def _run(fpm, p, store, observer=ev.ignore, **opts):
    return InProcessExecutor(fpm, {"test": True}).run(p, store, RunOptions(**opts), observer)


def test_sweep_stores_each_cell_once_then_resumes(fpm, cpu, store):
    p = _sweep_plan(fpm, cpu)
    seen = ev.Collector()
    s = _run(fpm, p, store, seen)
    assert s.status == "completed" and len(s.ok) == 3 and not s.failed
    rows = store.results(all_attempts=True)
    assert sorted(r["cell_id"] for r in rows) == sorted(c.cell_id(cpu) for c in p.cells)
    assert all(r["engine"]["device_proof"]["device"] == "cpu" for r in rows)       # proven by the session
    assert [type(e).__name__ for e in seen.events][:4] == ["GroupLoading", "CellStarted", "CellTimed", "CellFinished"]
    again = _run(fpm, p, store)                                                   # resume: nothing left
    assert not again.ok and len(again.skipped) == 3
    forced = _run(fpm, p, store, force=True)
    assert len(forced.ok) == 3 and len(store.results(all_attempts=True)) == 6


def test_sweep_failure_is_a_result_and_the_sweep_goes_on(fpm, cpu, store):
    p = _sweep_plan(fpm, cpu)
    s = _run(fpm, p, store, engine_options={"fail_batch": 2})
    assert s.status == "completed_with_failures"
    assert [r.cell.batch for r in s.failed] == [2] and [r.cell.batch for r in s.ok] == [1, 4]
    assert "fake failure at batch 2" in s.failed[0].error


def test_sweep_engine_start_failure_fails_the_group(fpm, cpu, store):
    s = _run(fpm, _sweep_plan(fpm, cpu), store, engine_options={"start_error": "no weights here"})
    assert len(s.failed) == 3 and not s.ok
    assert all("engine start failed" in r.error and "no weights here" in r.error for r in s.failed)


def test_sweep_interrupt_keeps_what_was_measured_and_resumes(fpm, cpu, store):
    p = _sweep_plan(fpm, cpu)
    starts = []

    def observer(e):
        if isinstance(e, ev.CellStarted):
            starts.append(e)
            if len(starts) == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(fpm, p, store, observer)
    assert [r["status"] for r in store.runs()] == ["interrupted"]
    assert len(store.results(all_attempts=True)) == 1                   # the first cell is kept
    s = _run(fpm, p, store)                                             # the rerun measures the other two
    assert len(s.ok) == 2 and len(s.skipped) == 1


def test_a_device_the_engine_is_not_on_stores_nothing_ok(fpm, store):
    h100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=1, plugin="stand-in")
    p = _sweep_plan(fpm, h100, batch=[1])
    s = _run(fpm, p, store)
    assert not s.ok and len(s.failed) == 1
    assert "nvidia NVIDIA H100" in s.failed[0].error                       # DeviceMismatch names the device
    assert all(r["status"] != "ok" for r in store.results(all_attempts=True))


def _search_plan(fpm, cpu, probes=20):
    sw = Sweep(models=["tiny-random-llama"], engines=["fake-server"], dtypes=["f16"], batch=[1], input_len=[16],
               output_len=[4], concurrency=[1], num_requests=8)
    # TTFT 10 ms x max(1, c / 4): an SLO of 15.5 ms passes up to 6 in flight
    return find_max_plan(plan(sw, cpu, fpm), "concurrency", SloTarget(ttft_s=0.0155), limit=64, max_probes=probes)


def test_find_max_finds_the_knee_through_the_session(fpm, cpu, store):
    p = _search_plan(fpm, cpu)
    s = _run(fpm, p, store, engine_options={"ttft_s": 0.01, "capacity": 4})
    fm = s.scenario["find_max"]
    assert fm["knee"] == 6 and fm["first_fail"] == 7 and fm["stopped"] == "converged"
    rows = store.results(all_attempts=True)
    loads = sorted(r["metrics"]["find_max"]["load"] for r in rows)
    assert loads == sorted(p_["load"] for p_ in fm["probes"]) and len(set(loads)) == len(loads)
    assert all(r["engine"]["device_proof"] for r in rows)                 # every probe proven, as sweep cells are
    prov = store.runs()[0]["provenance"]
    assert prov["scenario"]["find_max"]["knee"] == 6                      # the outcome is stored with the run


def test_find_max_every_probe_failing_has_no_knee(fpm, cpu, store):
    s = _run(fpm, _search_plan(fpm, cpu), store, engine_options={"fail_batch": 1})
    fm = s.scenario["find_max"]
    assert fm["knee"] is None and s.failed and not s.ok


def test_find_max_server_that_does_not_start_stores_the_start_probe_failed(fpm, cpu, store):
    s = _run(fpm, _search_plan(fpm, cpu), store, engine_options={"start_error": "port taken"})
    assert len(s.failed) == 1 and s.failed[0].metrics["find_max"]["load"] == 1
    assert "port taken" in s.scenario["find_max"]["stopped"]


def test_find_max_resumes_from_known_probes_on_the_same_path(fpm, cpu, store, tmp_path):
    from infbench.data.run import RunSummary
    from infbench.data.schema import CellResult

    opts = {"ttft_s": 0.01, "capacity": 4}
    p = _search_plan(fpm, cpu)
    full = _run(fpm, p, store, engine_options=opts)
    order = [p_["load"] for p_ in full.scenario["find_max"]["probes"]]
    assert len(order) >= 4
    # a worker died during its third probe: the host stores that probe failed and resumes the
    # search from the two that came back (Scenario.after_crash), as the container executor does
    sc = make_scenario(p)
    other = Store(tmp_path / "other.db")
    ctx = RunContext(fpm, cpu, other, RunSummary(other.begin_run({}, "x")))
    (part,) = sc.parts(ctx)
    for r in (r for r in full.ok + full.failed if r.metrics["find_max"]["load"] in order[:2]):
        part.results.append(CellResult(**{**r.model_dump(), "records": []}))
    rest = sc.after_crash(part, sc.probe_of(order[2]), "worker was killed", False, ctx)
    assert [k.load for k in rest.spec.known] == order[:3]
    assert rest.spec.known[2].passed is False                              # the crashed probe does not pass
    resumed = _run(fpm, p.with_groups(p.groups, rest.spec), other, engine_options=opts)
    measured = [r.metrics["find_max"]["load"] for r in resumed.ok + resumed.failed]
    assert not set(measured) & set(order[:3])                              # known probes are not measured again
    assert [x["load"] for x in resumed.scenario["find_max"]["probes"]][:3] == order[:3]
    other.close()


def test_perplexity_scenario_scores_stores_and_skips(fpm, cpu, store, tmp_path, monkeypatch):
    from infbench.data.models import resolve
    from infbench.execution.scenarios.scoring import perplexity_plan
    from infbench.quality.perplexity import PerplexityRequest

    text = tmp_path / "t.txt"
    text.write_text("abcdefgh" * 64)
    shape = resolve("tiny-random-llama")

    class W:
        sha256, format, path, dtype = "0" * 64, "hf", None, None

        def record(self):
            return {"real": True}

    req = PerplexityRequest(shape, W(), "fake", "f16", text.read_text(), str(text), "ab" * 32, 64, 2)
    monkeypatch.setattr("infbench.execution.scenarios.scoring.request_for", lambda item, spec, pm=None: req)
    p = perplexity_plan([req], cpu)
    s = _run(fpm, p, store)
    assert [q.status for q in s.quality] == ["ok"] and s.quality[0].perplexity == pytest.approx(2.0)
    assert s.quality[0].n_chunks == 2 and s.quality[0].engine_info["device_proof"]["device"] == "cpu"
    from infbench.store.quality import quality_results

    assert [r["value"] for r in quality_results(store)] == [pytest.approx(2.0)]
    again = _run(fpm, p, store)
    assert not again.quality and again.quality_skipped == [req.key()]
    failed = _run(fpm, p, store, force=True, engine_options={"start_error": "boom"})
    assert failed.quality[0].status == "failed" and "boom" in failed.quality[0].error


def test_every_run_command_and_provenance_is_redacted_in_the_store(fpm, cpu, store, monkeypatch):
    monkeypatch.setattr("sys.argv", ["infbench", "run", "--base-url", "http://bob:hunter2@h/v1?api_key=s3cret"])
    p = _sweep_plan(fpm, cpu, batch=[1])
    InProcessExecutor(fpm, {"url": "http://alice:pw9@x/v1", "api_key": "sk-abcdefghijkl"}).run(p, store)
    dump = json.dumps(store.runs())
    for secret in ("hunter2", "s3cret", "pw9", "sk-abcdefghijkl"):
        assert secret not in dump


def test_sweep_after_crash_fails_the_running_cell_and_keeps_the_rest(fpm, cpu, store):
    p = _sweep_plan(fpm, cpu)
    sc = make_scenario(p)
    from infbench.data.run import RunSummary

    ctx = RunContext(fpm, cpu, store, RunSummary(store.begin_run({}, "x")))
    (part,) = sc.parts(ctx)
    rest = sc.after_crash(part, p.cells[1], "worker was killed", False, ctx)
    assert [c.batch for c in rest.group.cells] == [1, 4]
    assert [r.cell.batch for r in ctx.summary.failed] == [2]
    assert sc.after_crash(rest, None, "refused", True, ctx) is None         # refused: all of it fails
    assert sorted(r.cell.batch for r in ctx.summary.failed) == [1, 2, 4]


def test_adaptive_measures_a_share_and_predicts_the_rest(fpm, cpu, store):
    from infbench.execution.scenarios.adaptive_sweep import adaptive_plan

    sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1, 2, 4, 8],
               input_len=[64, 128, 256, 512], output_len=[8])
    p = adaptive_plan(plan(sw, cpu, fpm), "25%")
    s = _run(fpm, p, store)
    assert len(s.ok) == 4 and len(s.predicted) == 12 and not s.failed          # ceil(25 % of 16) measured
    assert s.status == "completed"                                               # predictions are not failures
    assert len(store.finished_cell_ids()) == 4                                   # predictions never count as measured
    rows = store.results()
    assert {r["cell_id"] for r in rows} == {c.cell_id(cpu) for c in p.cells}     # the ids measured cells would have
    pred = [r for r in rows if r["status"] == "predicted"]
    assert all(r["metrics"]["predicted"] and r["metrics"]["e2e_s"]["p50"] > 0 for r in pred)
    corners = {(1, 64), (8, 512)}
    measured = {(r["spec"]["batch"], r["spec"]["input_len"]) for r in rows if r["status"] == "ok"}
    assert corners <= measured                                                   # the grid's corners first
    assert s.scenario["adaptive"]["engines"]["fake"]["predicted"] == 12
    plain = _run(fpm, plan(sw, cpu, fpm), store)                                 # a plain run measures the rest
    assert len(plain.ok) == 12 and len(plain.skipped) == 4


def test_frontier_stops_a_series_through_the_session_and_resumes_where_it_stopped(fpm, cpu, store):
    """The frontier scenario on the stand-in server (TTFT x max(1, c / 4)): every request of a
    cell goes at once, so concurrency 1 and 2 give the same throughput; the series stops at 2
    and 4, 8 are not reached. A second run measures nothing again: the stored cells count."""
    sw = Sweep(models=["tiny-random-llama"], engines=["fake-server"], dtypes=["f16"], batch=[1], input_len=[16],
               output_len=[4], concurrency=[1, 2, 4, 8], frontier=True, num_requests=8)
    p = plan(sw, cpu, fpm)
    assert p.scenario.kind == "frontier"
    s = _run(fpm, p, store, engine_options={"ttft_s": 0.01, "capacity": 4})
    assert sorted(r.cell.load.concurrency for r in s.ok) == [1, 2]
    assert [c.load.concurrency for c in s.not_reached] == [4, 8]
    again = _run(fpm, plan(sw, cpu, fpm), store, engine_options={"ttft_s": 0.01, "capacity": 4})
    assert not again.ok and [c.load.concurrency for c in again.not_reached] == [4, 8]
