"""Serving as production looks (issue 16, parts 7-9 and 11) against real servers on 127.0.0.1:
the SLO search against a server whose latency grows with load at a known knee
(tests/support/slo_stub.py), server-queue saturation, llama.cpp's real server scraped for
its /metrics (prefix-cache hits with and without prompt reuse), repeats with their
t-interval, the price per token, CPU telemetry, and the report's serving sections drawn in
a real browser."""

import json
import os
from pathlib import Path

import pytest

from infbench.analysis.slo_search import saturation
from infbench.data.groups import Group
from infbench.data.models import ModelShape, resolve
from infbench.data.run import RunOptions
from infbench.data.schema import Cell, Load
from infbench.detect.platforms.cpu import cpu_device, infbench_power_sampler
from infbench.engines.openai import OpenAIEngine
from infbench.measure.cell import measure_cell
from infbench.measure.power import NoPower
from infbench.plan.target import remote_device
from tests.integration.test_cli import infbench
from tests.support.slo_stub import SloStub

pytestmark = pytest.mark.integration


def stub_engine(stub):
    e = OpenAIEngine(remote_device(stub.base_url), {"base_url": stub.base_url, "served_model": "stub"})
    e.start(Group(ModelShape(name="stub", config={}), "openai", "auto", 1))
    return e


@pytest.fixture(scope="module")
def knee_search(tmp_path_factory):
    """`infbench run --find-max concurrency` against a server that is fast up to 4 requests in
    flight (4 ms per token) and slow above (60 ms), with a TPOT SLO of 25 ms."""
    home = tmp_path_factory.mktemp("fm")
    store = home / "r.db"
    with SloStub(knee=4, itl_fast_s=0.004, itl_slow_s=0.06) as s:
        p = infbench("run", "--engine", "openai", "--base-url", s.base_url, "--model", "stub", "--concurrency", "1",
                     "--input-len", "8", "--output-len", "8", "--num-requests", "24", "--find-max", "concurrency",
                     "--slo-ttft-ms", "1000", "--slo-tpot-ms", "25", "--scrape-interval", "0.2", "--warmup", "1",
                     "--store", str(store), "--json", env={"INFBENCH_HOME": str(home)})
    return {"out": json.loads(p.stdout), "store": store, "home": home}


def test_find_max_concurrency_finds_the_known_knee(knee_search):
    fm = knee_search["out"]["find_max"]
    assert fm["knee"] == 4 and fm["first_fail"] == 5 and fm["stopped"] == "converged"     # one step apart
    loads = [p["load"] for p in fm["probes"]]
    assert loads[:4] == [1, 2, 4, 8] and sorted(loads) == [1, 2, 4, 5, 6, 8]               # bracket, then bisect
    for p in fm["probes"]:
        assert p["passed"] == (p["load"] <= 4) and p["status"] == "ok"
        assert (p["fraction"] >= 0.9) == (p["load"] <= 4)


def test_each_probe_is_a_stored_cell_with_the_server_view(knee_search):
    run = knee_search["out"]["run_id"]
    cells = json.loads(infbench("results", "--store", str(knee_search["store"]), "--run", run, "--format",
                                "json").stdout)
    assert len(cells) == 6
    for c in cells:
        m = c["metrics"]
        assert m["find_max"]["search_id"] == knee_search["out"]["find_max"]["search_id"]
        assert m["slo"] == {"ttft_s": 1.0, "tpot_s": 0.025} and m["goodput_req_s"] is not None
        # the stub's /metrics (prometheus_client text, vLLM's names) scraped over the cell: 24 timed + 1 warm-up
        assert m["server_name"] == "vllm" and m["server_ttft_s"]["count"] == 25
        assert m["server_running"]["max"] <= c["spec"]["load"]["concurrency"]
    (s,) = json.loads(infbench("results", "--store", str(knee_search["store"]), "--searches", "--format",
                               "json").stdout)
    assert s["knee"] == 4 and s["first_fail"] == 5 and s["mode"] == "concurrency"
    table = infbench("results", "--store", str(knee_search["store"]), "--run", run, env={"COLUMNS": "300"}).stdout
    assert "server" in table and "TTFT" in table        # the server's TTFT column beside the client's
    csv = infbench("results", "--store", str(knee_search["store"]), "--run", run, "--format", "csv").stdout
    assert "server_ttft_s_p50" in csv.splitlines()[0]


def test_rate_overload_saturates_the_server_queue(tmp_path):
    """Two slots of ~90 ms each serve ~22 requests/s: offered 80 requests/s, the server's own
    waiting queue (its /metrics) grows through the probe; offered 8/s, it stays short."""
    opts = RunOptions(server_metrics_interval_s=0.1)
    model = ModelShape(name="stub", config={})
    with SloStub(knee=None, slots=2, ttft_s=0.01, itl_fast_s=0.01) as s:
        e = stub_engine(s)
        dev = remote_device(s.base_url)
        results = {}
        for rate, n in ((8.0, 16), (80.0, 40)):
            cell = Cell(model="stub", engine="openai", dtype="auto", batch=1, input_len=8, output_len=8, warmup=1,
                        load=Load(mode="rate", request_rate=rate, num_requests=n, warmup_requests=0))
            g = Group(model, "openai", "auto", 1, [cell])
            results[rate] = measure_cell(e, g, cell, dev, NoPower("stub"), opts)
    hi, lo = results[80.0], results[8.0]
    assert hi.status == lo.status == "ok"
    assert hi.metrics["server_waiting"]["max"] >= 10
    assert "server queue grew" in saturation(hi, "rate")    # rose while requests arrived (then drained)
    assert lo.metrics["server_waiting"]["max"] <= 3 and saturation(lo, "rate") is None
    series = hi.server_metrics["series"]["vllm:num_requests_waiting"]
    assert len(series) >= 5 and max(v for _, v in series) == hi.metrics["server_waiting"]["max"]


def test_find_max_rate_brackets_the_capacity(tmp_path):
    """Rate mode against two slots of ~90 ms (capacity ~22 requests/s) with a 200 ms TTFT SLO:
    the knee lies between the start and the first overloaded rate, each probe stored."""
    with SloStub(knee=None, slots=2, ttft_s=0.01, itl_fast_s=0.01) as s:
        p = infbench("run", "--engine", "openai", "--base-url", s.base_url, "--model", "stub", "--request-rate", "8",
                     "--input-len", "8", "--output-len", "8", "--num-requests", "40", "--find-max", "rate",
                     "--slo-ttft-ms", "200", "--find-max-probes", "6", "--scrape-interval", "0.1", "--warmup", "1",
                     "--store", str(tmp_path / "r.db"), "--json", env={"INFBENCH_HOME": str(tmp_path)})
    fm = json.loads(p.stdout)["find_max"]
    assert 8 <= fm["knee"] < 32 and fm["first_fail"] > fm["knee"]
    assert [p["load"] for p in fm["probes"]][:2] == [8.0, 16.0] and len(fm["probes"]) <= 6
    failing = [p for p in fm["probes"] if not p["passed"]]
    assert failing and all(p["load"] > fm["knee"] for p in failing)


# --- llama.cpp's real server (xllamacpp, metrics on) ---------------------------------------

@pytest.fixture(scope="module")
def llama():
    from infbench.engines.llama_server import LlamaServerEngine

    m = resolve("tiny")
    # one warm-up block per cell: the server's metrics are the subject (warming until stable ran
    # the 30 s ceiling per cell: the tiny model's blocks of 8 tokens do not agree within 3 %)
    cell = Cell(model=m.name, engine="llama.cpp-server", dtype="f32", batch=1, input_len=32, output_len=8, warmup=1,
                load=Load(mode="concurrency", concurrency=1, num_requests=6, warmup_requests=0))
    e = LlamaServerEngine(cpu_device(), {"n_threads": 1})
    e.start(Group(m, "llama.cpp-server", "f32", 1, [cell.model_copy(update={"load": cell.load.model_copy(
        update={"concurrency": 2})})]))
    yield e, m, cell
    e.stop()


def test_llama_server_metrics_prefix_hits_only_with_reuse(llama):
    e, m, cell = llama
    group = Group(m, "llama.cpp-server", "f32", 1, [cell])
    sampler = infbench_power_sampler(cpu_device())
    opts = RunOptions(server_metrics_interval_s=0.2)
    distinct = measure_cell(e, group, cell.model_copy(update={"seed": 11}), cpu_device(), sampler, opts)
    e.make_prompts = lambda c, model: [OpenAIEngine.make_prompts(e, c, model)[0]] * 6   # one prompt, six times
    try:
        reused = measure_cell(e, group, cell.model_copy(update={"seed": 12}), cpu_device(), sampler, opts)
    finally:
        del e.make_prompts
    for r in (distinct, reused):
        m_ = r.metrics
        assert r.status == "ok" and m_["server_name"] == "llama.cpp"
        assert r.server_metrics["deltas"]["llamacpp:tokens_predicted_total"] == 6 * 8
        assert "llamacpp:requests_processing" in r.server_metrics["series"]
        # llama.cpp has no latency histograms: its per-request timings give the server's TTFT
        assert m_["server_latency_source"] == "timings" and m_["server_ttft_s"]["count"] == 6
        assert m_["server_ttft_s"]["p50"] <= m_["ttft_s"]["p50"]
        # the CPU's telemetry, read with the (absent) power by the CPU plugin's sampler
        assert m_["telemetry"]["util_pct"]["count"] >= 1 and r.telemetry
    assert distinct.metrics["server_prefix_cache_hit_rate"] == 0.0
    assert reused.metrics["server_prefix_cache_hit_rate"] > 0.5     # 5 of 6 prompts served from the slot's cache


@pytest.fixture(scope="module")
def repeated(knee_search):
    """`--repeat 3 --price-per-hour 3.6` on llama.cpp's server, stored beside the search."""
    home, store = knee_search["home"], knee_search["store"]
    env = {"INFBENCH_HOME": str(home)}
    out = json.loads(infbench("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dtype", "f32",
                              "--input-len", "16", "--output-len", "8", "--concurrency", "2", "--num-requests", "6",
                              "--repeat", "3", "--price-per-hour", "3.6", "--warmup", "1", "--store", str(store),
                              "--json", env=env).stdout)
    return {"out": out, "store": store, "env": env, "home": home}


def test_repeats_and_price(repeated):
    cells = repeated["out"]["cells"]
    assert repeated["out"]["ok"] == 3 and [c["spec"].get("repeat") for c in cells] == [None, 2, 3]
    assert len({c["cell_id"] for c in cells}) == 3
    for c in cells:
        m = c["metrics"]
        assert m["usd_per_mtok"] == pytest.approx(3.6 / 3600 * m["duration_s"] / (m["n_out_total"] / 1e6))
        assert m["server_name"] == "llama.cpp" and "util_pct" in m["telemetry"]
    (g,) = json.loads(infbench("results", "--store", str(repeated["store"]), "--repeats", "--format",
                               "json").stdout)   # the search's probes are single cells: one group
    assert g["n"] == 3 and g["cell_id"] == cells[0]["cell_id"]
    tok = g["metrics"]["output_tok_s"]
    assert tok["values"] == [c["metrics"]["output_tok_s"] for c in cells]
    assert tok["ci95"] > 0 and tok["min"] <= tok["mean"] <= tok["max"]
    table = infbench("results", "--store", str(repeated["store"]), "--repeats", env={"COLUMNS": "300"}).stdout
    assert "±" in table and "CV" in table


def test_report_draws_the_serving_sections(repeated, tmp_path):
    """The report of the store holding the search and the repeats: goodput vs load with the
    knee, server vs client TTFT, the repeats' spread and the telemetry table, drawn by
    plotly in headless chromium."""
    from tests.integration.test_report import _chrome

    out_dir = tmp_path / "report"
    res = json.loads(infbench("report", "--out", str(out_dir), "--store", str(repeated["store"]), "--json",
                              env=repeated["env"]).stdout)
    names = {Path(f).name for f in res["figures"]}
    assert {"goodput_vs_load.png", "server_vs_client_ttft.png", "repeats_spread.png"} <= names
    html = Path(res["html"]).read_text()
    assert "Device telemetry" in html and "Repeats: mean" in html and "own metrics" in html
    d = _chrome()
    try:
        d.get(Path(res["html"]).as_uri())
        shown = d.execute_script("""return ['fig-goodput', 'fig-server-ttft', 'fig-repeats'].map(id => {
            const g = document.getElementById(id);
            return {id: id, traces: (g && g.data || []).length, svg: g ? g.querySelectorAll('.main-svg').length : 0,
                    shapes: (g && g.layout && g.layout.shapes || []).length}; });""")
        for f in shown:
            assert f["traces"] > 0 and f["svg"] > 0, f
        assert next(f for f in shown if f["id"] == "fig-goodput")["shapes"] >= 2     # knee line, goodput line
        assert not [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        d.quit()
    assert os.path.getsize(out_dir / "figures" / "goodput_vs_load.png") > 5000
