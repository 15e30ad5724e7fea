"""Benchmark: how fast `infbench predict` covers the whole LLM-Inference-Bench grid.

Two measurements, each the best of 5 in this process:

1. **The paper's cells**: every published cell of benchmarks/data/lib_all_results.csv that
   the zoo and the catalog describe (~4,500), predicted with each (device, engine)
   group's own profile (`predict_points`, one vectorised call per model/engine/options
   group): what the validation (benchmarks/lib_validation.py) evaluates.
2. **The paper's axes on every device**: every zoo model x every described device with a
   bf16 rate x batch {1, 16, 32, 64} x input and output {128 .. 2048} x tp {1, 2, 4, 8},
   as vLLM schedules it (KV capacity and waves included); and, for comparison, the
   per-point time of the scalar path on a sample, scaled to the grid.

The target is the whole grid under 1 s.

    python benchmarks/predict_speed.py [--out benchmarks/results/predict_speed.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from infbench.analysis.predict import default_efficiency, paged_schedule, predict, predict_points, serving_for
from infbench.analysis.roofline import Limits, RooflineError
from infbench.contract.manager import get_plugin_manager
from infbench.data.models import resolve, zoo
from infbench.data.stored import StoredCell
from infbench.detect.devices import catalog
from infbench.report.lib_import import published_cells, read_lib_csv

ROOT = Path(__file__).resolve().parents[1]
AXES = {"batch": [1, 16, 32, 64], "n_in": [128, 256, 512, 1024, 2048], "n_out": [128, 256, 512, 1024, 2048],
        "tp": [1, 2, 4, 8]}
VLLM = serving_for("vllm")


def group_rows(pm, rows: list[StoredCell]) -> dict[tuple[str, str, str], list[StoredCell]]:
    """Stored rows by ``(device label, catalog id, engine family)``; the label is the
    published hardware name of imported cells, else the catalog id. Rows on devices the
    catalog does not describe are left out."""
    from infbench.analysis.predict import device_catalog_id, engine_family
    from infbench.detect.devices import catalog

    specs = catalog(pm)
    out: dict[tuple[str, str, str], list[StoredCell]] = {}
    for r in rows:
        cid = device_catalog_id(pm, r.device, specs)
        if cid is None:
            continue
        label = (r.device.get("properties") or {}).get("published_name") or cid
        out.setdefault((label, cid, engine_family(r.spec.get("engine", ""))), []).append(r)
    return out


def paper_groups(pm) -> list[tuple]:
    """(limits, points) per (device, engine) of the published cells the model covers."""
    from infbench.analysis.predict import limits_for_id, measured_points

    results, _ = published_cells(read_lib_csv(ROOT / "benchmarks" / "data" / "lib_all_results.csv"), None, pm)
    rows = [StoredCell.from_result(r, status="ok", spec=r.cell.model_dump()) for r in results]
    out = []
    for (_, cid, _), group in group_rows(pm, rows).items():
        try:
            lim = limits_for_id(pm, cid)
        except Exception:  # noqa: BLE001 - an undescribed device (SN40L) has no prediction
            continue
        pts = []
        for p in measured_points(group):
            try:
                resolve(p["model"])
                pts.append(p)
            except Exception:  # noqa: BLE001 - a model outside the zoo
                continue
        out.append((lim, pts))
    return out


def paper_once(groups: list[tuple]) -> tuple[float, int]:
    paged_schedule.cache_clear()  # every repetition simulates the paged engines' preemption afresh
    t0 = time.perf_counter()
    n = 0
    for lim, pts in groups:
        pr = predict_points(list(pts), lim, default_efficiency(lim.id))  # a new list: no cached grouping
        n += len(pr["duration_s"])
    return time.perf_counter() - t0, n


def grid_once(pairs: list[tuple]) -> tuple[float, int]:
    b, i, o, t = np.meshgrid(*(np.asarray(v, dtype=float) for v in AXES.values()), indexing="ij")
    paged_schedule.cache_clear()
    t0 = time.perf_counter()
    n = 0
    for m, lim in pairs:
        pr = predict(m, lim, b, i, o, t, "bf16", serving=VLLM)
        n += pr["duration_s"].size
    return time.perf_counter() - t0, n


def scalar_sample(pairs: list[tuple], k: int = 300) -> float:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(k):
        m, lim = pairs[rng.integers(len(pairs))]
        predict(m, lim, *(float(rng.choice(v)) for v in AXES.values()), "bf16", serving=VLLM)
    return (time.perf_counter() - t0) / k


def render(data: dict, variant: str | None = None) -> str:
    """docs' figures from predict_speed.json (benchmarks/docs_numbers.py): the table of
    docs/benchmarks.md (default) or the paragraph of docs/roofline.md (``roofline``)."""
    paper, grid = data["paper_s"] * 1e3, data["vectorised_s"] * 1e3
    if variant == "roofline":
        return (f"`python benchmarks/predict_speed.py` (2-core shared VM, best of 5; docs/benchmarks.md): the paper's\n"
                f"{data['paper_cells']:,} cells ({data['paper_groups']} device/engine groups, each with its engine "
                f"profile and calibration path) in\n**{paper:.0f} ms**; every zoo model on every described device "
                f"over the paper's axes (batch 1/16/32/64 x\ninput and output 128-2048 x tp 1/2/4/8, vLLM's "
                f"scheduling: {data['pairs']} pairs, {data['points']:,} points) in\n**{grid:.0f} ms**, "
                f"{data['speedup']:.0f}x faster "
                f"than point by point. Target: under 1 s.")
    return "\n".join([
        "| what | result |", "|---|---|",
        f"| the paper's cells: LLM-Inference-Bench's {data['paper_cells']:,} published cells the zoo and catalog "
        f"describe, {data['paper_groups']} (device, engine) groups, each with its engine's scheduling (KV capacity, "
        f"waves, chunks, pipeline) | **{paper:.0f} ms** |",
        f"| the paper's axes on every device: the zoo's models x the described devices with a bf16 rate "
        f"({data['pairs']} pairs) x batch 1/16/32/64 x input 128-2048 x output 128-2048 x tp 1/2/4/8 = "
        f"{data['points']:,} points, vLLM's scheduling | **{grid:.0f} ms** vectorised |",
        f"| the same, point by point (300 sampled points, scaled) | ~{data['scalar_s_estimated']:.0f} s, so "
        f"vectorised is {data['speedup']:.0f}x faster |",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "predict_speed.json")
    args = ap.parse_args()
    pm = get_plugin_manager()
    groups = paper_groups(pm)
    paper_once(groups)  # warm-up
    paper_best, n_paper = min(paper_once(groups) for _ in range(5))
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
    res = {"paper_cells": n_paper, "paper_groups": len(groups), "paper_s": paper_best,
           "pairs": len(pairs), "points": n, "vectorised_s": best, "scalar_s_estimated": per_point * n,
           "speedup": per_point * n / best}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    print(f"the paper's {n_paper:,} cells ({len(groups)} device/engine groups): {paper_best * 1e3:.0f} ms")
    print(f"{len(pairs)} (model, device) pairs x the paper's axes, {n:,} points: vectorised {best * 1e3:.0f} ms, "
          f"point by point ~{per_point * n:.1f} s ({res['speedup']:.0f}x)")


if __name__ == "__main__":
    main()
