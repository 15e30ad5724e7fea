"""Benchmark: how fast `infbench predict` covers a whole LLM-Inference-Bench grid, and the
calibration's accuracy on LLM-Inference-Bench's published A100 cells.

Grid: every zoo model x every described device x batch {1, 16, 32, 64} x input and output
{128, 256, 512, 1024, 2048} x tp {1, 2, 4, 8} (the paper's axes), bf16. The vectorised
path calls :func:`infbench.analysis.predict.predict` once per (model, device) over a
broadcast grid; the scalar path calls it once per point, for a sample of points, and the
per-point time is scaled to the grid. Both run in this process, one after the other, so
their ratio is what to read on a shared machine.

Calibration: the 60 Llama-2-7B / DeepSpeed-MII / A100 cells of tests/fixtures (from
LLM-Inference-Bench's Plots/All_results.csv): fit on ~70 %, geometric-mean E2E error on
the held-out rest.

    python benchmarks/predict_speed.py [--out benchmarks/results/predict_speed.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from infbench.analysis.predict import calibrate, predict
from infbench.analysis.roofline import Limits, RooflineError
from infbench.devices import catalog
from infbench.models import zoo
from infbench.plugins import get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
AXES = {"batch": [1, 16, 32, 64], "n_in": [128, 256, 512, 1024, 2048], "n_out": [128, 256, 512, 1024, 2048],
        "tp": [1, 2, 4, 8]}


def grid_once(pairs: list[tuple]) -> tuple[float, int]:
    b, i, o, t = np.meshgrid(*(np.asarray(v, dtype=float) for v in AXES.values()), indexing="ij")
    t0 = time.perf_counter()
    n = 0
    for m, lim in pairs:
        pr = predict(m, lim, b, i, o, t, "bf16")
        n += pr["e2e_s"].size
    return time.perf_counter() - t0, n


def scalar_sample(pairs: list[tuple], k: int = 400) -> float:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(k):
        m, lim = pairs[rng.integers(len(pairs))]
        predict(m, lim, *(float(rng.choice(v)) for v in AXES.values()), "bf16")
    return (time.perf_counter() - t0) / k


def lib_calibration() -> dict:
    path = ROOT / "tests" / "fixtures" / "lib_a100_llama2_7b_dsmii.csv"
    rows = list(csv.DictReader(line for line in path.open() if not line.startswith("#")))
    pts = [{"cell_id": f"lib-{j}", "model": "llama-2-7b", "dtype": "fp16", "batch": int(r["Batch Size"]),
            "n_in": int(r["Input Output Length"]), "n_out": int(r["Input Output Length"]),
            "tp": int(r["Num of Hardware"]), "ttft_s": None, "tpot_s": None, "e2e_s": float(r["Latency"]),
            "output_tok_s": None} for j, r in enumerate(rows)]
    lim = Limits("a100-40gb", 1.555e12, {"fp16": 312e12, "bf16": 312e12}, link_bytes_s=300e9)
    t0 = time.perf_counter()
    cal = calibrate(pts, lim)
    return {"fit_s": time.perf_counter() - t0, **cal.to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "predict_speed.json")
    args = ap.parse_args()
    pm = get_plugin_manager()
    pairs = []
    for s in catalog(pm):
        try:
            lim = Limits.from_info(s.per_device())
            lim.peak("bf16")
        except RooflineError:
            continue
        pairs += [(m, lim) for m in zoo().values()]
    grid_once(pairs)  # warm-up
    best, n = min(grid_once(pairs) for _ in range(5))
    per_point = scalar_sample(pairs)
    res = {"pairs": len(pairs), "points": n, "vectorised_s": best, "scalar_s_estimated": per_point * n,
           "speedup": per_point * n / best, "calibration_lib_a100": lib_calibration()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    c = res["calibration_lib_a100"]
    print(f"{len(pairs)} (model, device) pairs, {n:,} grid points: vectorised {best * 1e3:.0f} ms, "
          f"point by point ~{per_point * n:.1f} s ({res['speedup']:.0f}x)")
    print(f"LIB A100 calibration: fit {c['fit_s']:.2f} s on {c['n_train']} cells; held-out E2E error "
          f"{100 * c['error_test']['e2e_s']:.1f} % (defaults {100 * c['error_default']['e2e_s']:.1f} %)")


if __name__ == "__main__":
    main()
