"""Prediction and its calibration per (device, engine) against published measured cells
(LLM-Inference-Bench), imported through the store as `infbench import` does."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from infbench.analysis.calibration import calibrate
from infbench.analysis.predict import (
    Calibration,
    Efficiency,
    below_floor,
    calibration_path,
    default_efficiency,
    geomean_error,
    held_out,
    load_calibration,
    measured_points,
    predict,
    save_calibration,
    serving_for,
)
from infbench.analysis.roofline import Limits
from infbench.analysis.validation import summary, validate
from infbench.cli import app
from infbench.data.errors import ConfigError
from infbench.data.models import resolve
from infbench.data.stored import StoredCell
from infbench.report.lib_import import published_cells, read_lib_csv
from infbench.store import Store
from infbench.store.published import import_published

FIXTURES = Path(__file__).parents[2] / "fixtures"
A100 = Limits(id="a100-40gb", bandwidth_bytes_s=1.555e12, peak_flops={"fp16": 312e12, "bf16": 312e12},
              link_bytes_s=300e9)


@pytest.fixture(scope="module")
def published_rows(tmp_path_factory):
    """LLM-Inference-Bench's Llama-2-7B cells on three devices (A100 vLLM, H100 TensorRT-LLM,
    MI250 llama.cpp), imported into a store."""
    from infbench.contract.manager import build_plugin_manager

    pm = build_plugin_manager()
    store = Store(tmp_path_factory.mktemp("pub") / "r.db")
    results, _ = published_cells(read_lib_csv(FIXTURES / "lib_published_3dev.csv"), None, pm)
    run = import_published(store, results, {"name": "LLM-Inference-Bench"})
    return store.results(run_id=run)


def test_calibration_and_held_out_error_on_three_devices(published_rows, pm):
    res = validate(pm, published_rows)
    assert [(r["catalog_id"], r["engine"], r["cells"]) for r in res] == [
        ("mi250", "llama.cpp", 60), ("a100-40gb", "vllm", 60), ("h100-sxm", "trtllm-serve", 60)]
    for r in res:
        # 70/30 split of the 60 cells by hash, the batch latency measured on every one.
        assert r["n_train"] + r["n_test"] + r["below_floor"] == 60 and 10 <= r["n_test"] <= 30
        assert r["errors"]["duration_s"]["n"] == r["n_test"] and r["errors"]["ttft_s"]["n"] == 0
        # Held-out error when written: 1.8 % (MI250 llama.cpp), 2.6 % (A100 vLLM), 3.0 %
        # (H100 TensorRT-LLM); the uncalibrated defaults miss by 208 %, 38 %, 38 %.
        assert r["error"] < 0.1 and r["error"] < r["error_default"] / 4
    s = summary(res)
    assert s["groups"] == 3 and s["median"] < 0.08 and s["over_limit"] == []


def test_measured_points_published_and_local():
    pub = StoredCell(cell_id="p1", spec_hash="", run_id="", status="ok", device={},
                     engine={"name": "llama.cpp", "published": True, "options": {"n_batch": 16}},
                     spec={"model": "llama-2-7b", "engine": "llama.cpp", "dtype": "f16", "batch": 1, "input_len": 128,
                           "output_len": 128, "tensor_parallel_size": 2}, metrics={"duration_s": 2.3})
    local = StoredCell(cell_id="c1", spec_hash="", run_id="", status="ok", device={},
                       spec={"model": "tiny", "engine": "vllm", "dtype": "fp32", "batch": 2, "input_len": 16,
                             "output_len": 4, "tensor_parallel_size": 1},
                       metrics={"ttft_s": {"mean": 0.01}, "tpot_s": {"mean": 0.002}, "e2e_s": {"mean": 0.016},
                                "output_tok_s": 500.0})
    failed = local.replace(cell_id="c2", status="failed")
    p, c = measured_points([pub, local, failed])
    assert p["published"] and p["options"] == {"n_batch": 16} and p["duration_s"] == 2.3 and p["ttft_s"] is None
    assert not c["published"] and c["batch"] == 2 and c["tpot_s"] == 0.002 and c["duration_s"] is None
    share = np.mean([held_out(f"cell-{i}") for i in range(2000)])
    assert 0.25 < share < 0.35 and held_out("cell-7") == held_out("cell-7")
    with pytest.raises(ConfigError, match="at least 4"):
        calibrate([c], A100)


def test_cells_below_the_roofline_floor_are_left_out():
    # Llama-2-7B fp16 on one A100 cannot generate 2048 x 64 tokens in 1 s: it must read 13 GB
    # of weights per step, 8.6 ms at least, so 2048 steps take 17.6 s or more.
    pts = [{"cell_id": f"c{i}", "model": "llama-2-7b", "dtype": "fp16", "engine": "vllm", "options": {},
            "batch": 64, "n_in": 2048, "n_out": 2048, "tp": 1, "ttft_s": None, "tpot_s": None, "e2e_s": None,
            "duration_s": d, "output_tok_s": None} for i, d in enumerate([1.0, 300.0])]
    assert below_floor(pts, A100).tolist() == [True, False]


def test_predict_grid_shape_and_physics():
    m = resolve("llama-3-70b")
    b = np.array([1, 16, 64])[:, None]
    tp = np.array([1, 2, 4, 8])[None, :]
    pr = predict(m, A100, b, 1024, 128, tp, "bf16")
    assert pr["tpot_s"].shape == (3, 4)
    assert np.all(np.diff(pr["tpot_s"], axis=1) < 0)          # more devices, faster decode
    assert np.all(np.diff(pr["output_tok_s"], axis=0) > 0)     # bigger batch, more throughput
    assert np.allclose(pr["e2e_s"], pr["ttft_s"] + 127 * pr["tpot_s"])  # one wave: no memory limit given
    assert np.allclose(pr["duration_s"], pr["e2e_s"])
    # Per device: 70.6e9 bf16 weights and the KV cache of the batch's mean footprint (paged:
    # 1024 + 128 / 2 tokens) at 327,680 B per token, both split over tp.
    weights = m.param_counts()["total"] * 2
    assert pr["memory_bytes"][0, 0] == pytest.approx(weights + 1 * 1088 * 327_680)
    assert pr["memory_bytes"][2, 3] == pytest.approx((weights + 64 * 1088 * 327_680) / 8)
    # tp = 1 has no all-reduce; tp = 2 pays one even where compute halves.
    one = predict(m, A100, 1, 1024, 128, 1, "bf16", Efficiency(1, 1, 1))
    two = predict(m, A100, 1, 1024, 128, 2, "bf16", Efficiency(1, 1, 1))
    assert two["tpot_s"] > one["tpot_s"] / 2
    # Defaults seeded from published figures: A100 0.4 compute (GenZ), H100 0.65.
    assert default_efficiency("a100-40gb").eff_compute == 0.4 and default_efficiency("h100-sxm").eff_compute == 0.65
    assert serving_for("vllm").max_num_seqs == 256


def test_geomean_error_and_calibration_per_device_and_engine(tmp_path):
    assert geomean_error(np.array([2.0, 0.5]), np.array([1.0, 1.0])) == pytest.approx(1.0)
    cal = Calibration("a100-40gb", "vllm", Efficiency(0.3, 0.9, overhead_s=0.001, source="fitted"), 5, 2,
                      {"duration_s": {"error": 0.1, "n": 2}}, {}, {})
    p = save_calibration(tmp_path, cal)
    assert p == calibration_path(tmp_path, "a100-40gb", "vllm-server") and p.name == "a100-40gb__vllm.json"
    back = load_calibration(tmp_path, "a100-40gb", "vllm")
    assert back.efficiency.eff_memory == 0.9 and back.n_test == 2 and back.engine == "vllm"
    assert load_calibration(tmp_path, "a100-40gb", "trtllm-serve") is None
    # A calibration saved per device by an older version loads for any engine of it.
    old = {"device_id": "cpu", "efficiency": {"eff_compute": 0.3, "eff_memory": 0.9, "overhead_s": 0.001,
                                              "source": "fitted"}, "n_train": 5, "n_test": 2,
           "error_test": {"e2e_s": 0.1}, "error_train": {}, "error_default": {}}
    (tmp_path / "calibration" / "cpu.json").write_text(json.dumps(old))
    legacy = load_calibration(tmp_path, "cpu", "llama.cpp")
    assert legacy.engine == "*" and legacy.error_test["e2e_s"]["error"] == 0.1 and legacy.efficiency.overhead_s == 0.001


def test_predict_calibrate_command_on_imported_cells(tmp_path):
    runner = CliRunner()
    db = tmp_path / "r.db"
    assert runner.invoke(app, ["import", str(FIXTURES / "lib_published_3dev.csv"), "--store", str(db)]).exit_code == 0
    res = runner.invoke(app, ["predict", "--calibrate", "-d", "h100-sxm", "-e", "trtllm-serve", "--store", str(db),
                              "-m", "llama-2-7b", "-b", "16", "--input", "512", "--output", "512", "--dtype", "fp16",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    [cal] = out["calibrations"]
    assert cal["engine"] == "trtllm-serve" and cal["sources"]["published"] == cal["n_train"]
    assert cal["error_test"]["duration_s"]["error"] < 0.1 and Path(cal["saved"]).is_file()
    [row] = out["predictions"]
    assert row["efficiency"]["source"].startswith("fitted on") and row["engine"] == "trtllm-serve"
    # The paper's H100 / TensorRT-LLM cell: 4.78 s for 16 x (512 + 512) tokens.
    assert row["duration_s"] == pytest.approx(4.78, rel=0.1)


def test_requirements_and_what_if_commands():
    runner = CliRunner()
    res = runner.invoke(app, ["predict", "--requirements", "-m", "llama-3-70b", "--preset", "genz-chat", "-b", "1",
                              "--json"])
    assert res.exit_code == 0, res.output
    [r] = json.loads(res.stdout)["requirements"]
    # genz-chat: 3000 tokens in, 1000 out, TTFT 0.2 s, TPOT 10 ms. Prefill 2 x 70.6e9 x 3000
    # FLOPs (+ attention) at eff 0.55 in 0.2 s: ~3.8 PFLOP/s; the last decode step reads 141 GB
    # of weights + 4000 x 327,680 B of KV at eff 0.75 in 10 ms: ~19 TB/s; 142 GB of memory.
    assert r["compute_pflop_s"] == pytest.approx(2 * 70.55e9 * 3000 / 0.55 / 0.2 / 1e15, rel=0.05)
    assert r["bandwidth_tb_s"] == pytest.approx((141.1e9 + 4000 * 327_680) / 0.75 / 0.01 / 1e12, rel=0.02)
    assert r["capacity_gb"] == pytest.approx(141.1 + 4000 * 327_680 / 1e9, rel=0.01)
    assert r["check"]["meets_slo"]
    res = runner.invoke(app, ["predict", "-m", "llama-3-8b", "--set", "memory_bandwidth_tb_s=8", "--set",
                              "peak_bf16_tflops=2500", "-b", "1", "--json"])
    assert res.exit_code == 0, res.output
    [p] = json.loads(res.stdout)["predictions"]
    # Batch-1 decode reads the weights but the embedding table: (8,030,261,248 - 128,256 x
    # 4096) x 2 B = 15.0 GB, at 8 TB/s x 0.75: 2.50 ms per token (+ 1 % KV and activations).
    assert p["device"] == "custom" and p["tpot_s"] == pytest.approx(7_504_924_672 * 2 / (8e12 * 0.75), rel=0.02)
    bad = runner.invoke(app, ["predict", "-m", "llama-3-8b", "--set", "bandwidth=8"])
    assert bad.exit_code == 2 and "unknown key" in bad.output
    spec = runner.invoke(app, ["predict", "-m", "llama-3-8b", "--set", "memory_bandwidth_tb_s=8"])
    assert spec.exit_code == 2 and "needs at least a bandwidth and a peak" in spec.output


def test_device_file(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("- id: future-gpu\n  name: Future GPU\n  vendor: nvidia\n  memory_gib: 288\n  bandwidth_tb_s: 8\n"
                 "  peak_tflops: {bf16: 2500}\n  sources: [\"what-if\"]\n")
    res = CliRunner().invoke(app, ["predict", "-m", "llama-3-70b", "--device-file", str(f), "-b", "64", "--json"])
    assert res.exit_code == 0, res.output
    [p] = json.loads(res.stdout)["predictions"]
    assert p["device"] == "future-gpu" and p["fits_memory"] is True
