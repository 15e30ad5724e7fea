"""Prediction and calibration against published measured cells (LLM-Inference-Bench)."""

import csv
from pathlib import Path

import numpy as np
import pytest

from infbench.analysis.predict import (
    Calibration,
    Efficiency,
    calibrate,
    geomean_error,
    held_out,
    load_calibration,
    measured_points,
    predict,
    save_calibration,
)
from infbench.analysis.roofline import Limits
from infbench.errors import ConfigError
from infbench.models import resolve

FIXTURE = Path(__file__).parent.parent / "fixtures" / "lib_a100_llama2_7b_dsmii.csv"
A100 = Limits(id="a100-40gb", bandwidth_bytes_s=1.555e12, peak_flops={"fp16": 312e12, "bf16": 312e12},
              link_bytes_s=300e9)


def lib_points():
    rows = list(csv.DictReader(line for line in FIXTURE.open() if not line.startswith("#")))
    pts = []
    for i, r in enumerate(rows):
        n, b, e2e = int(r["Input Output Length"]), int(r["Batch Size"]), float(r["Latency"])
        pts.append({"cell_id": f"lib-{i}", "model": "llama-2-7b", "dtype": "fp16", "batch": b, "n_in": n, "n_out": n,
                    "tp": int(r["Num of Hardware"]), "ttft_s": None, "tpot_s": None, "e2e_s": e2e,
                    "output_tok_s": b * n / e2e})
    return pts


def test_calibration_on_published_cells_predicts_held_out_cells():
    pts = lib_points()
    assert len(pts) == 60
    cal = calibrate(pts, A100)
    assert cal.n_test + cal.n_train == 60 and cal.n_test >= 10
    # Held-out geometric-mean E2E error: 10.8 % when written (uncalibrated defaults: 72 %).
    assert cal.error_test["e2e_s"] < 0.2
    assert cal.error_test["e2e_s"] < cal.error_default["e2e_s"] / 3
    assert cal.error_test["output_tok_s"] == pytest.approx(cal.error_test["e2e_s"])  # same cells, B n / E2E
    e = cal.efficiency
    assert 0 < e.eff_compute <= 1 and 0 < e.eff_memory <= 1 and e.overhead_s >= 0


def test_predict_grid_shape_and_physics():
    m = resolve("llama-3-70b")
    b = np.array([1, 16, 64])[:, None]
    tp = np.array([1, 2, 4, 8])[None, :]
    pr = predict(m, A100, b, 1024, 128, tp, "bf16")
    assert pr["tpot_s"].shape == (3, 4)
    assert np.all(np.diff(pr["tpot_s"], axis=1) < 0)          # more devices, faster decode
    assert np.all(np.diff(pr["output_tok_s"], axis=0) > 0)     # bigger batch, more throughput
    assert np.allclose(pr["e2e_s"], pr["ttft_s"] + 127 * pr["tpot_s"])
    # Per device: 70.6e9 bf16 weights = 141 GB (does not fit one 80 GB device) plus the KV
    # cache, 2 x 80 layers x 8 kv heads x 128 x 2 B = 327,680 B per token; both split over tp.
    weights = resolve("llama-3-70b").param_counts()["total"] * 2
    assert pr["memory_bytes"][0, 0] == pytest.approx(weights + 1 * 1152 * 327_680)
    assert pr["memory_bytes"][2, 3] == pytest.approx((weights + 64 * 1152 * 327_680) / 8)
    # tp = 1 has no all-reduce; tp = 2 pays one even where compute halves.
    one = predict(m, A100, 1, 1024, 128, 1, "bf16", Efficiency(1, 1, 0))
    two = predict(m, A100, 1, 1024, 128, 2, "bf16", Efficiency(1, 1, 0))
    assert two["tpot_s"] > one["tpot_s"] / 2


def test_measured_points_from_store_rows_and_split():
    row = {"cell_id": "c1", "status": "ok", "spec": {"model": "tiny", "dtype": "fp32", "batch": 2, "input_len": 16,
                                                     "output_len": 4, "tensor_parallel_size": 1},
           "metrics": {"ttft_s": {"mean": 0.01}, "tpot_s": {"mean": 0.002}, "e2e_s": {"mean": 0.016},
                       "output_tok_s": 500.0}}
    failed = {**row, "cell_id": "c2", "status": "failed"}
    pts = measured_points([row, failed])
    assert len(pts) == 1 and pts[0]["batch"] == 2 and pts[0]["tpot_s"] == 0.002
    share = np.mean([held_out(f"cell-{i}") for i in range(2000)])
    assert 0.25 < share < 0.35 and held_out("cell-7") == held_out("cell-7")
    with pytest.raises(ConfigError, match="at least 4"):
        calibrate(pts, A100)


def test_geomean_error_and_saved_calibration(tmp_path):
    assert geomean_error(np.array([2.0, 0.5]), np.array([1.0, 1.0])) == pytest.approx(1.0)
    cal = Calibration("cpu", Efficiency(0.3, 0.9, 0.001, "fitted"), 5, 2, {"e2e_s": 0.1}, {}, {})
    save_calibration(tmp_path, cal)
    back = load_calibration(tmp_path, "cpu")
    assert back.efficiency.eff_memory == 0.9 and back.n_test == 2
    assert load_calibration(tmp_path, "h100-sxm") is None
