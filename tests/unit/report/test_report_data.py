"""Plot-ready rows, the Pareto front, LLM-Inference-Bench's CSV layout and run comparison,
on hand-made stored cells (`StoredCell`, what `Store.results()` returns)."""

import pytest

from infbench.data.stored import StoredCell
from infbench.report.compare import compare_rows
from infbench.report.data import config_label, flat_row, lib_rows, pareto_front


def stored(cell_id="c1", batch=4, tput=100.0, status="ok", mode=None, ttft=0.05, power=None, spec_hash=None):
    load = {"mode": mode, "concurrency": 8} if mode == "concurrency" else None
    return StoredCell(
        cell_id=cell_id, spec_hash=spec_hash or f"h-{cell_id}", run_id="r1", status=status,
        error=None if status == "ok" else "OOM: MemoryError",
        spec={"model": "llama-2-7b", "engine": "vllm", "dtype": "float16", "batch": batch, "input_len": 128,
              "output_len": 64, "tensor_parallel_size": 2, "load": load},
        device={"vendor": "nvidia", "kind": "gpu", "model": "NVIDIA A100-SXM4-40GB", "count": 4},
        metrics={} if status != "ok" else {
            "ttft_s": {"mean": ttft, "p50": ttft, "p99": 2 * ttft},
            "tpot_s": {"mean": 0.01, "p50": 0.01, "p99": 0.02},
            "itl_s": {"p50": 0.01, "p99": 0.03}, "e2e_s": {"mean": 0.7, "p50": 0.7, "p99": 0.9},
            "duration_s": 0.75, "output_tok_s": tput, "total_tok_s": 3 * tput, "output_tok_s_per_device": tput / 2,
            "avg_power_w": power, "tokens_per_j": 3 * tput * 0.75 / (power * 0.75) if power else None},
        finished_at=1.0)


def test_flat_row_units_and_label():
    f = flat_row(stored(power=300.0))
    assert f["ttft_ms_p50"] == pytest.approx(50) and f["ttft_ms_p99"] == pytest.approx(100)
    assert f["itl_ms_p99"] == pytest.approx(30) and f["e2e_s_p50"] == 0.7 and f["precision"] == "fp16"
    assert f["device"] == "NVIDIA A100-SXM4-40GB x4" and f["tp"] == 2 and f["batch"] == 4
    assert f["mbu"] is None and not f["roofline_backfilled"]  # no limits given, none stored
    assert config_label(f) == "llama-2-7b vllm float16 tp2 | NVIDIA A100-SXM4-40GB x4 | b4 i128 o64"
    c = flat_row(stored(mode="concurrency"))
    assert c["mode"] == "concurrency" and c["batch"] == 8 and "c8 i128" in c["label"]


def test_flat_row_backfills_the_roofline():
    from infbench.analysis.roofline import Limits

    lim = Limits("a100-40gb", 1.555e12, {"fp16": 312e12})
    f = flat_row(stored(), limits_for=lambda dev: lim)
    assert f["roofline_backfilled"] and 0 < f["mbu"] < 1 and f["tpot_floor_ms"] > 0


def test_pareto_front():
    pts = [(10, 100), (5, 50), (20, 90), (20, 300), (1, 10), (5, 40)]
    # (1,10) -> (5,50) -> (10,100) -> (20,300): each faster point or more throughput; (20,90), (5,40) beaten.
    assert pareto_front(pts) == [4, 1, 0, 3]
    assert pareto_front([]) == []


def test_lib_rows_layout():
    rows = lib_rows([stored(power=250.0), stored("c2", status="failed"), stored("c3", mode="concurrency")])
    assert len(rows) == 1  # failed and serving-mode cells have no place in that layout
    r = rows[0]
    assert r["Hardware"] == "NVIDIA A100-SXM4-40GB" and r["Num of Hardware"] == 2 and r["Framework"] == "vLLM"
    assert r["Model"] == "meta-llama/Llama-2-7b-hf" and r["Input Output Length"] == "128/64"
    assert r["Latency"] == 0.75 and r["Throughput"] == 300.0 and r["avg_power"] == 250_000.0
    assert r["TTFT Latency"] == pytest.approx(0.05) and r["end_latency"] == 0.7


def test_compare_rows_ratios_and_unmatched():
    a = [stored("a1", tput=100, spec_hash="w1"), stored("a2", tput=100, spec_hash="w2"),
         stored("a3", spec_hash="w3")]
    b = [stored("b1", tput=200, ttft=0.025, spec_hash="w1"), stored("b2", tput=50, spec_hash="w2"),
         stored("b4", spec_hash="w4"), stored("b3", status="failed", spec_hash="w3")]
    res = compare_rows(a, b)
    ratios = {p["spec_hash"]: p["ratio"] for p in res["pairs"]}
    assert set(ratios) == {"w1", "w2"} and res["only_a"] == 1 and res["only_b"] == 1
    assert ratios["w1"]["output_tok_s"] == 2.0 and ratios["w1"]["ttft_ms_p50"] == pytest.approx(0.5)
    assert ratios["w2"]["output_tok_s"] == 0.5
    assert res["geomean"]["output_tok_s"] == pytest.approx(1.0)  # sqrt(2 x 0.5)
    assert res["geomean"]["tokens_per_j"] is None  # no power on either side
