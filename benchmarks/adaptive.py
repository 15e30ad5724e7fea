"""Benchmark: the adaptive sweep (``infbench run --adaptive``) against the full sweep, on this
host's CPU with the real llama.cpp engine.

The grid: the SmolLM2-135M shape (dummy weights) on llama.cpp at f16, batch 1/2/4/8 x input
64/128/256/512 tokens, 32 output tokens: 16 cells. The full sweep measures all 16 in one
store; the adaptive sweep (``--adaptive 25%``) measures a designed subset in another store
and predicts the rest. Reported:

* cells measured by the adaptive sweep, and its wall time against the full sweep's;
* the median absolute relative error of the predicted ``e2e_s``, ``ttft_s``, ``tpot_s``,
  ``output_tok_s`` against the full sweep's measurements of the same cells;
* coverage: the share of the full sweep's measured values (those metrics) inside the
  predicted 90 % intervals.

Targets (issue 23): at most 6 cells measured, median error <= 10 %, coverage >= 80 %.

    python benchmarks/adaptive.py [--budget 25%] [--out benchmarks/results/adaptive.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GRID = ["--model", "smollm2-135m", "--engine", "llama.cpp", "--dtype", "f16", "--batch", "1,2,4,8",
        "--input-len", "64,128,256,512", "--output-len", "32"]
METRICS = ("e2e_s", "ttft_s", "tpot_s", "output_tok_s")


def run(store: Path, *extra: str) -> tuple[dict[str, Any], float]:
    """``infbench run`` of the grid into ``store`` (JSON summary) and its wall time in s."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "run", *GRID, *extra, "--store", str(store), "--json"],
                       capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"infbench run failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout), time.perf_counter() - t0


def value(metrics: dict[str, Any], m: str) -> float | None:
    """A cell's value of ``m`` (the p50 of a summary)."""
    v = metrics.get(m)
    return v.get("p50") if isinstance(v, dict) else v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", default="25%")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/adaptive.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full, full_s = run(Path(tmp) / "full.db")
        adaptive, adaptive_s = run(Path(tmp) / "adaptive.db", "--adaptive", a.budget)
    truth = {c["cell_id"]: c for c in full["cells"] if c["status"] == "ok"}
    errors: dict[str, list[float]] = {m: [] for m in METRICS}
    inside = total = 0
    for c in adaptive["cells"]:
        if c["status"] != "predicted" or c["cell_id"] not in truth:
            continue
        meas, pm = truth[c["cell_id"]]["metrics"], c["metrics"]
        for m in METRICS:
            t, p = value(meas, m), value(pm, m)
            if t and p:
                errors[m].append(abs(p / t - 1))
            lo, hi = (pm.get("interval") or {}).get(m) or (None, None)
            if t is not None and lo is not None and hi is not None:
                total += 1
                inside += lo <= t <= hi
    out = {
        "command": "python benchmarks/adaptive.py --budget " + a.budget,
        "grid": " ".join(GRID), "budget": a.budget, "cells": len(full["cells"]),
        "measured": adaptive["ok"] + adaptive["failed"], "predicted": adaptive["predicted"],
        "full_wall_s": round(full_s, 1), "adaptive_wall_s": round(adaptive_s, 1),
        "wall_saved": round(1 - adaptive_s / full_s, 3),
        "median_error": {m: round(statistics.median(v), 4) if v else None for m, v in errors.items()},
        "median_error_all": round(statistics.median([x for v in errors.values() for x in v]), 4)
        if any(errors.values()) else None,
        "coverage": round(inside / total, 3) if total else None, "coverage_n": total,
        "host": "shared 2-core VM (CPU only); see docs/benchmarks.md",
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(render(out))


def render(data: dict[str, Any], variant: str | None = None) -> str:
    """The adaptive sweep against the full sweep, as a markdown table (docs/benchmarks.md)."""
    me = data["median_error"]
    rows = [
        ("cells measured / planned", f"{data['measured']} / {data['cells']} ({data['budget']})"),
        ("wall time, adaptive / full", f"{data['adaptive_wall_s']:.1f} s / {data['full_wall_s']:.1f} s "
                                       f"({100 * data['wall_saved']:.0f} % saved)"),
        ("median error of the predicted cells", ", ".join(f"{m} {100 * v:.1f} %" for m, v in me.items()
                                                           if v is not None)),
        ("median error, all metrics", f"{100 * data['median_error_all']:.1f} %"
         if data["median_error_all"] is not None else "-"),
        ("measured values inside the 90 % interval", f"{100 * data['coverage']:.0f} % of {data['coverage_n']}"
         if data["coverage"] is not None else "-"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


if __name__ == "__main__":
    main()
