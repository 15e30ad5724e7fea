"""``infbench import`` of other tools' files (issue 42): each importer on the real output of
its tool (tests/fixtures/imports/SOURCES.md), each mapping pinned by a value computed by hand
from the file, and per format the edge cases derived from the real file by one named edit: a
missing field, a field renamed across versions, a negative value, NaN, a disaggregated row,
a mixed-GPU MLPerf system, GPU counts that do not divide, throughput beyond Little's law."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app
from infbench.data.errors import ConfigError
from infbench.report.imports import FORMATS, aiperf, guidellm, inference_perf, inferencex, mlperf, vllm_bench
from infbench.report.imports.common import MIN_TPOT_S, imported_cells
from infbench.report.lib_import import read_lib_csv
from infbench.store import Store

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "imports"


def load(name: str) -> dict | list:
    return json.loads((FIX / name).read_text())


def write(tmp_path: Path, name: str, obj) -> Path:
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


# -- vllm bench serve ----------------------------------------------------------------------
def test_vllm_bench_mapping():
    (r,), info = vllm_bench.read(FIX / "vllm_bench_serve_result.json")
    d = load("vllm_bench_serve_result.json")
    assert r.summaries["ttft_s"]["p50"] == pytest.approx(22229.044142000246 / 1e3)   # median_ttft_ms / 1000
    assert r.summaries["tpot_s"]["mean"] == pytest.approx(332.20430282841295 / 1e3)  # vLLM's TPOT = infbench's
    assert r.summaries["e2e_s"]["p99"] == pytest.approx(47301.13412070032 / 1e3)
    assert r.scalars["output_tok_s"] == pytest.approx(1012 / 169.26759272900017)    # its output tokens / duration
    assert r.scalars["request_s"] == pytest.approx(16 / 169.26759272900017)
    assert r.load == {"mode": "concurrency", "concurrency": 4, "num_requests": 16}
    assert (r.input_len, r.output_len, r.lengths) == (128, 63, "mean")  # 1012 re-tokenized output tokens / 16
    assert "mean_itl_ms" in r.unmapped and "itl_s" not in r.summaries        # chunk gaps: never infbench's ITL
    assert r.unmapped["std_ttft_ms"] == d["std_ttft_ms"]


def test_vllm_bench_edge_cases(tmp_path):
    d = load("vllm_bench_serve_result.json")
    older = {k: v for k, v in d.items() if not k.startswith(("p50_", "p90_")) and k != "total_token_throughput"}
    (r,), _ = vllm_bench.read(write(tmp_path, "old.json", older))  # an older layout: no p50_*/p90_*, no total
    assert r.summaries["ttft_s"]["p50"] == pytest.approx(d["median_ttft_ms"] / 1e3) and "total_tok_s" not in r.scalars
    with pytest.raises(ConfigError, match="'completed' is missing"):
        vllm_bench.read(write(tmp_path, "m.json", {k: v for k, v in d.items() if k != "completed"}))
    with pytest.raises(ConfigError, match="'mean_ttft_ms' is -5"):
        vllm_bench.read(write(tmp_path, "n.json", {**d, "mean_ttft_ms": -5.0}))
    p = tmp_path / "nan.json"
    p.write_text(json.dumps({**d, "output_throughput": float("nan")}))  # Python writes NaN: no JSON number
    with pytest.raises(ConfigError, match="NaN"):
        vllm_bench.read(p)
    # the same requests in a tenth of the time at the same latency and concurrency: beyond Little's law
    fast = {**d, **{k: d[k] * 10 for k in ("output_throughput", "total_token_throughput", "request_throughput")},
            "duration": d["duration"] / 10}
    with pytest.raises(ConfigError, match="Little's law"):
        vllm_bench.read(write(tmp_path, "f.json", fast))
    with pytest.raises(ConfigError, match="output throughput .* but 1012 output tokens"):
        vllm_bench.read(write(tmp_path, "c.json", {**d, "output_throughput": d["output_throughput"] * 1.5}))


# -- AIPerf --------------------------------------------------------------------------------
def test_aiperf_json_and_csv_mapping():
    (j,), info = aiperf.read(FIX / "aiperf_profile_export_aiperf.json")
    assert info["tool_version"] == "0.13.0"
    assert j.summaries["tpot_s"]["p50"] == pytest.approx(432.0287024523809 / 1e3)  # AIPerf's ITL is TPOT
    assert j.summaries["ttft_s"]["mean"] == pytest.approx(23087.608955875 / 1e3)
    assert j.scalars["output_tok_s"] == pytest.approx(5.390395724676628)  # its output_token_throughput
    assert j.scalars["duration_s"] == pytest.approx(189.957737216)
    assert j.load == {"mode": "concurrency", "concurrency": 4, "num_requests": 16, "warmup_requests": 4}
    assert "inter_chunk_latency" in j.unmapped and j.unmapped["inter_chunk_latency"]["unit"] == "ms"
    (c,), _ = aiperf.read(FIX / "aiperf_profile_export_aiperf.csv")
    assert c.summaries["tpot_s"]["p50"] == pytest.approx(0.43203)  # the CSV's two decimals in ms
    assert c.scalars["output_tok_s"] == pytest.approx(5.39) and c.scalars["request_s"] == pytest.approx(0.08)


def test_aiperf_edge_cases(tmp_path):
    text = (FIX / "aiperf_profile_export_aiperf.csv").read_text()
    genai = text.replace("Time to First Token (ms)", "Time To First Token (ms)")  # genai-perf's spelling
    (r,), _ = aiperf.read(write(tmp_path, "g.csv", genai))
    assert r.summaries["ttft_s"]["p50"] == pytest.approx(29.58893)
    d = load("aiperf_profile_export_aiperf.json")
    with pytest.raises(ConfigError, match="neither time_to_first_token nor request_latency"):
        aiperf.read(write(tmp_path, "m.json", {k: v for k, v in d.items()
                                                if k not in ("time_to_first_token", "request_latency")}
                          | {"output_token_throughput": d["output_token_throughput"], "request_latency": None}))
    neg = json.loads(json.dumps(d))
    neg["inter_token_latency"]["p50"] = -1.0
    with pytest.raises(ConfigError, match="inter_token_latency p50' is -1"):
        aiperf.read(write(tmp_path, "n.json", neg))
    with pytest.raises(ConfigError, match="not a number|finite"):
        aiperf.read(write(tmp_path, "nan.csv", text.replace("Request Latency (ms),47461.60",
                                                            "Request Latency (ms),nan")))
    order = json.loads(json.dumps(d))
    order["time_to_first_token"]["p90"] = order["time_to_first_token"]["max"] * 2
    with pytest.raises(ConfigError, match="ttft_s p90 .* exceeds its p99"):
        aiperf.read(write(tmp_path, "o.json", order))


# -- guidellm ------------------------------------------------------------------------------
def test_guidellm_mapping():
    (r,), info = guidellm.read(FIX / "guidellm_benchmarks.json")
    assert info["tool_version"] == "0.8.1"
    assert r.summaries["tpot_s"]["p50"] == pytest.approx(294.2922455923898 / 1e3)   # guidellm's ITL is TPOT
    assert r.summaries["e2e_s"]["mean"] == pytest.approx(46.84472121298313)
    assert r.scalars["request_s"] == pytest.approx(16 / 187.48710203170776)          # successful / duration
    assert r.scalars["output_tok_s"] == pytest.approx(1024 / 187.48710203170776, rel=1e-6)
    assert r.load["mode"] == "concurrency" and r.load["concurrency"] == 4
    assert r.input_len == 158  # its default chat endpoint: the template's tokens counted by the server
    assert r.unmapped["time_per_output_token_ms"]["median"] == pytest.approx(639.2580568790436)  # first token in


def test_guidellm_edge_cases(tmp_path):
    d = load("guidellm_benchmarks.json")
    old = json.loads(json.dumps(d))
    old["benchmarks"][0]["args"] = old["benchmarks"][0].pop("config")  # guidellm 0.3 kept the strategy in 'args'
    (r,), _ = guidellm.read(write(tmp_path, "old.json", old))
    assert r.load["concurrency"] == 4
    miss = json.loads(json.dumps(d))
    del miss["benchmarks"][0]["metrics"]["prompt_token_count"]
    with pytest.raises(ConfigError, match="lengths cannot be known"):
        guidellm.read(write(tmp_path, "m.json", miss))
    neg = json.loads(json.dumps(d))
    neg["benchmarks"][0]["metrics"]["request_latency"]["successful"]["mean"] = -3
    with pytest.raises(ConfigError, match="request_latency mean' is -3"):
        guidellm.read(write(tmp_path, "n.json", neg))
    nan = json.loads(json.dumps(d))
    nan["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["median"] = "nan"
    with pytest.raises(ConfigError, match="finite"):
        guidellm.read(write(tmp_path, "nan.json", nan))


# -- inference-perf ------------------------------------------------------------------------
def test_inference_perf_mapping():
    (s,), _ = inference_perf.read(FIX / "inference_perf_stage_0_lifecycle_metrics.json")
    assert s.summaries["tpot_s"]["p50"] == pytest.approx(0.3446489401303277)
    assert s.scalars["output_tok_s"] == pytest.approx(1024 / 182.12198404200035)  # the server's tokens, not 988
    assert s.unmapped["throughput.output_tokens_per_sec"] == pytest.approx(5.424935409072585)
    assert s.load["concurrency"] == 4
    (summ,), _ = inference_perf.read(FIX / "inference_perf_summary_lifecycle_metrics.json")
    assert "concurrency" not in summ.load  # the summary names no load: the stage files do


def test_inference_perf_edge_cases(tmp_path):
    d = load("inference_perf_stage_0_lifecycle_metrics.json")
    miss = json.loads(json.dumps(d))
    miss["successes"]["latency"] = {}
    with pytest.raises(ConfigError, match="holds no request_latency"):
        inference_perf.read(write(tmp_path, "m.json", miss))
    neg = json.loads(json.dumps(d))
    neg["benchmark_time_seconds"] = -1
    with pytest.raises(ConfigError, match="benchmark_time_seconds' is -1"):
        inference_perf.read(write(tmp_path, "n.json", neg))
    nan = json.loads(json.dumps(d))
    nan["successes"]["latency"]["time_to_first_token"]["mean"] = "NaN"
    with pytest.raises(ConfigError, match="finite"):
        inference_perf.read(write(tmp_path, "nan.json", nan))


# -- InferenceX ----------------------------------------------------------------------------
def test_inferencex_mapping():
    rows, _ = inferencex.read(FIX / "inferencex_benchmarks_excerpt.json")
    raw = load("inferencex_benchmarks_excerpt.json")
    h200 = rows[0]
    m = raw[0]["metrics"]
    assert (h200.device, h200.devices, h200.engine, h200.load["concurrency"]) == ("h200", 8, "sglang-server", 4)
    assert h200.scalars["total_tok_s"] == pytest.approx(98.82861137108823 * 8)       # tput_per_gpu x tp
    assert h200.scalars["tok_s_per_device"] == pytest.approx(m["tput_per_gpu"])      # input + output per GPU
    assert h200.scalars["output_tok_s"] == pytest.approx(49.173854925265026 * 8)
    assert h200.scalars["tok_s_per_user"] == pytest.approx(1 / 0.00972992689843301, rel=1e-9)
    assert "median_itl" in h200.unmapped  # chunk gaps (96 ms against a 9.7 ms TPOT): kept as they came
    dis = rows[10]  # H100, Dynamo + TensorRT-LLM: 16 prefill + 48 decode GPUs
    assert dis.devices == 64 and dis.device_props == {"prefill_gpus": 16, "decode_gpus": 48}
    assert dis.scalars["total_tok_s"] == pytest.approx(6.604228685073678 * 64)
    assert dis.scalars["output_tok_s"] == pytest.approx(4.392526798374095 * 48)      # per decode GPU x decode GPUs
    assert dis.scalars["output_tok_s_per_device"] == pytest.approx(4.392526798374095 * 48 / 64)
    assert dis.unmapped["output_tput_per_gpu"] == pytest.approx(4.392526798374095)
    power = rows[-1]  # MI355X tp8 with its per-GPU power
    assert power.scalars["avg_power_w"] == pytest.approx(561.79 * 8)
    assert power.scalars["j_per_token"] == pytest.approx(2.991524)


def test_inferencex_edge_cases(tmp_path):
    raw = load("inferencex_benchmarks_excerpt.json")
    v1 = json.loads(json.dumps(raw[:1]))  # the v1 layout (before 2025-12-19): one tp for both phases
    for k in ("prefill_tp", "prefill_ep", "prefill_dp_attention", "prefill_num_workers", "decode_tp", "decode_ep",
              "decode_dp_attention", "decode_num_workers", "num_prefill_gpu", "num_decode_gpu"):
        v1[0].pop(k)
    v1[0]["tp"] = 8
    (r,), _ = inferencex.read(write(tmp_path, "v1.json", v1))
    assert r.devices == 8 and r.scalars["total_tok_s"] == pytest.approx(98.82861137108823 * 8)
    odd = json.loads(json.dumps(raw[10:11]))
    odd[0]["num_decode_gpu"] = 47
    with pytest.raises(ConfigError, match="num_decode_gpu 47 is not a multiple of decode_tp 16"):
        inferencex.read(write(tmp_path, "odd.json", odd))
    miss = json.loads(json.dumps(raw[:1]))
    del miss[0]["metrics"]["tput_per_gpu"]
    with pytest.raises(ConfigError, match="lack tput_per_gpu"):
        inferencex.read(write(tmp_path, "m.json", miss))
    neg = json.loads(json.dumps(raw[:1]))
    neg[0]["metrics"]["median_ttft"] = -0.1
    with pytest.raises(ConfigError, match="median_ttft' is -0.1"):
        inferencex.read(write(tmp_path, "n.json", neg))
    nan = json.loads(json.dumps(raw[:1]))
    nan[0]["metrics"]["mean_e2el"] = "nan"
    with pytest.raises(ConfigError, match="finite"):
        inferencex.read(write(tmp_path, "nan.json", nan))
    parts = json.loads(json.dumps(raw[:1]))
    parts[0]["metrics"]["tput_per_gpu"] *= 2  # total no longer input + output
    with pytest.raises(ConfigError, match="add up to"):
        inferencex.read(write(tmp_path, "p.json", parts))
    little = json.loads(json.dumps(raw[:1]))
    for k in ("tput_per_gpu", "input_tput_per_gpu", "output_tput_per_gpu"):
        little[0]["metrics"][k] *= 10  # 4 users with a 9 s E2E cannot produce 10x the tokens
    with pytest.raises(ConfigError, match="Little's law"):
        inferencex.read(write(tmp_path, "l.json", little))


# -- MLPerf --------------------------------------------------------------------------------
def _mlperf_rows() -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO((FIX / "mlperf_v6.1_summary_excerpt.csv").read_text())))
    return rows[0], rows[1:]


def _mlperf_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows([header, *rows])
    return buf.getvalue()


def test_mlperf_mapping(pm):
    rows, info = mlperf.read(FIX / "mlperf_v6.1_summary_excerpt.csv")
    assert info == {"tool_version": "v6.1", "skipped": {"dlrm-v3": 1}}  # not an LLM: not imported
    by = {(r.device, r.extra["scenario"]): r for r in rows}
    b200 = by[("NVIDIA B200-SXM-180GB", "Offline")]
    assert b200.scalars == {"output_tok_s": 102703.0} and b200.devices == 8 and b200.model == "llama-2-70b"
    assert b200.output_len == 272 and b200.load == {"mode": "batch"}  # TOKENS_PER_SAMPLE 271.6
    server = by[("AMD Instinct MI355X 288GB HBM3e", "Server")]
    assert server.load == {"mode": "rate", "request_rate": pytest.approx(103275.0 / 284)}
    assert server.extra["latency_limits_p99_s"] == {"ttft": 2.0, "tpot": 0.2}
    mixed = by[("NVIDIA H200-SXM-141GB + AMD Instinct MI350X 288GB HBM3e", "Offline")]
    assert mixed.devices == 16 and mixed.device_props["mixed"] == ["NVIDIA H200-SXM-141GB",
                                                                  "AMD Instinct MI350X 288GB HBM3e"]
    cpu = by[("CPU: Intel(R) Xeon(R) 6787P", "Offline")]
    assert cpu.devices == 2  # two sockets, no accelerator
    results, summary = imported_cells(rows, {"name": "MLPerf Inference"}, pm)
    offline = next(r for r in results if r.device.model == "NVIDIA B200-SXM-180GB" and r.cell.load.mode == "batch")
    assert offline.metrics["output_tok_s_per_device"] == pytest.approx(102703.0 / 8)
    mixed_dev = next(r.device for r in results if r.device.properties.get("mixed"))
    assert mixed_dev.properties["catalog_id"] is None  # unlike devices: no catalog device, no roofline


def test_mlperf_edge_cases(tmp_path):
    header, rows = _mlperf_rows()
    col = {h: i for i, h in enumerate(header)}
    bad = [list(r) for r in rows]
    bad[7][col["total_accelerators"]] = "12"  # 8 per node x 1 node
    with pytest.raises(ConfigError, match="total_accelerators 12 is not accelerators_per_node 8 x number_of_nodes 1"):
        mlperf.read(write(tmp_path, "div.csv", _mlperf_text(header, bad)))
    for value, msg in (("-102703.0", "a throughput is above 0"), ("nan", "finite")):
        bad = [list(r) for r in rows]
        bad[7][col["Result"]] = value
        with pytest.raises(ConfigError, match=msg):
            mlperf.read(write(tmp_path, "v.csv", _mlperf_text(header, bad)))
    old_header = [h for h in header if h != "total_accelerators"]  # an older layout: no total_accelerators
    old = [[v for h, v in zip(header, r) if h != "total_accelerators"] for r in rows]
    got, _ = mlperf.read(write(tmp_path, "old.csv", _mlperf_text(old_header, old)))
    assert [r.devices for r in got] == [r.devices for r in mlperf.read(FIX / "mlperf_v6.1_summary_excerpt.csv")[0]]
    with pytest.raises(ConfigError, match="lacks Result"):
        mlperf.read(write(tmp_path, "m.csv", _mlperf_text([h for h in header if h != "Result"],
                                                          [[v for h, v in zip(header, r) if h != "Result"]
                                                           for r in rows])))


# -- LLM-Inference-Bench rows refused by physics (issue 41's cases) --------------------------
LIB = "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency{}\n"


@pytest.mark.parametrize("cols,row,msg", [
    ("", "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,16,0.000001", "under 10 µs per token"),
    (",Throughput", "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,64,2.0,128",
     "batch 64 x \\(128 \\+ 128\\) tokens"),  # one sequence's tokens in a batch-64 vLLM row
    (",Throughput,TTFT Latency,end_latency", "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,1,2.0,128,"
     "0.9999990,1.0000000", "TPOT of 7.87 ns"),
])
def test_lib_rows_that_break_physics_are_refused(tmp_path, cols, row, msg):
    p = write(tmp_path, "lib.csv", LIB.format(cols) + row + "\n")
    with pytest.raises(ConfigError, match=msg):
        read_lib_csv(p)


def test_lib_single_sequence_rows_of_the_paper_still_import(tmp_path):
    p = write(tmp_path, "lib.csv", LIB.format(",Throughput") + "AMD MI250 GPU,1,llama.cpp,meta-llama/Llama-2-7b-hf,"
              "128,16,10.0,25.6\n")  # llama-bench -b 16: (128 + 128) / 10 s
    (r,) = read_lib_csv(p)
    assert r.batch == 16 and r.throughput_tok_s == 25.6
    assert MIN_TPOT_S == 1e-5


# -- the command ---------------------------------------------------------------------------
def test_import_command_every_format_and_frontier(tmp_path):
    runner = CliRunner()
    db = str(tmp_path / "r.db")
    client = {"vllm-bench": "vllm_bench_serve_result.json", "aiperf": "aiperf_profile_export_aiperf.json",
              "guidellm": "guidellm_benchmarks.json", "inference-perf": "inference_perf_stage_0_lifecycle_metrics.json"}
    for fmt, name in client.items():
        res = runner.invoke(app, ["import", "-f", fmt, str(FIX / name), "--store", db, "--device", "cpu",
                                  "--model", "smollm2-135m", "--engine", "llama.cpp-server", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["source"]["format"] == fmt and out["devices"] == {"cpu": 1}
    res = runner.invoke(app, ["import", "-f", "inferencex", str(FIX / "inferencex_benchmarks_excerpt.json"),
                              "--store", db, "--json"])
    assert res.exit_code == 0, res.output
    ix_run = json.loads(res.stdout)["run_id"]
    res = runner.invoke(app, ["import", "-f", "inferencex", str(FIX / "inferencex_benchmarks_excerpt.json"),
                              "--store", db, "--device", "cpu"])
    assert res.exit_code == 2 and "names its hardware" in res.output
    assert set(FORMATS) == {"vllm-bench", "aiperf", "guidellm", "inference-perf", "inferencex", "mlperf"}
    store = Store(db)
    rows = store.results()
    assert all(r["engine"]["imported"] and r["metrics"]["published"] for r in rows)
    aip = next(r for r in rows if r["engine"]["source"] == "AIPerf")
    assert aip["engine"]["tool_version"] == "0.13.0" and aip["engine"]["file"].endswith(".json")
    assert "inter_chunk_latency" in aip["metrics"]["unmapped"]
    # imported fronts stand apart, one per source, model, precision and shape
    res = runner.invoke(app, ["results", "--store", db, "--frontier", "--format", "json"])
    fronts = json.loads(res.stdout)["fronts"]
    names = [f["engine"] for f in fronts]
    assert "sglang-server (InferenceX: deepseek-ai/DeepSeek-R1 fp8 1024/1024)" in names
    assert "llama.cpp-server (AIPerf: smollm2-135m auto 128/64)" in names
    # compare a run's fronts against an imported front: the MI300X front against itself reads 1
    res = runner.invoke(app, ["compare", "--store", db, "--frontier", ix_run, "--against", "imported:inferencex:mi300x",
                              "--json"])
    assert res.exit_code == 0, res.output
    comps = json.loads(res.stdout)["comparisons"]
    self_cmp = next(c for c in comps if c["a"] == c["b"])
    assert self_cmp["geomean_ratio"] == pytest.approx(1.0) and self_cmp["overlap"]
    res = runner.invoke(app, ["compare", "--store", db, "--frontier", ix_run, "--against", "imported:nonesuch"])
    assert res.exit_code == 2 and "no imported run from 'nonesuch'" in res.output
