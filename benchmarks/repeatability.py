"""Repeatability: the default CPU sweep run N times, each metric's coefficient of variation,
and how many repeats a difference of X % needs (docs/metrics.md, "Repeatability").

``--runs`` times, one after another, a fresh ``infbench run --force`` of the detected
device's default sweep (on a CPU: the ``quick`` preset, 6 cells of SmolLM2-135M f16 on
llama.cpp) into one store; per cell and metric the N values give the mean, the sample
standard deviation ``s`` (ddof 1) and ``CV = s / mean``. Each cell's ``contention`` record
(:mod:`infbench.measure.contention`) says how quiet the machine was; runs whose cells met
noisy neighbours are kept and counted (``noisy_cells``), so the CVs are those of the
machine as it was. Run it under the shared lock (a quiet machine is the point):

    flock /tmp/infbench-heavy.lock python benchmarks/repeatability.py --runs 10 \\
        [--out benchmarks/results/repeatability.json]

**Repeats needed.** To tell two configurations apart whose true means differ by a fraction
``d``, each measured ``n`` times with coefficient of variation ``c``, a two-sided two-sample
t-test at significance ``alpha`` = 0.05 with power ``1 - beta`` = 0.8 needs
``n >= 2 ((t_{1-alpha/2, 2n-2} + t_{1-beta, 2n-2}) c / d)^2`` repeats per configuration
(the normal-approximation sample size with Student-t quantiles, solved for the smallest
integer n >= 2; e.g. Montgomery, "Design and Analysis of Experiments", ch. 2). The same
statement in MLPerf's manner: the minimum that makes the result's confidence sufficient,
derived from the measured variability rather than chosen (MLPerf Inference derives its
minimum query counts from a binomial confidence bound on the tail percentile). ``c`` is the
metric's CV from this run: the median over the sweep's cells, and the largest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (name in the JSON, metric key, statistic or None for a scalar metric)
METRICS = [("ttft_p50_s", "ttft_s", "p50"), ("tpot_p50_s", "tpot_s", "p50"), ("itl_p99_s", "itl_s", "p99"),
           ("e2e_p50_s", "e2e_s", "p50"), ("output_tok_s", "output_tok_s", None), ("total_tok_s", "total_tok_s", None)]
DIFFS = (0.01, 0.02, 0.05, 0.10)
ALPHA, POWER = 0.05, 0.80


def repeats_needed(cv: float, diff: float, alpha: float = ALPHA, power: float = POWER, cap: int = 10_000) -> int:
    """Smallest n >= 2 per configuration with ``n >= 2 ((t_{1-alpha/2, 2n-2} + t_{power, 2n-2})
    cv / diff)^2`` (two-sided two-sample t-test; see the module doc). ``cap`` when not reached.

    Raises:
        ValueError: ``diff`` <= 0 or ``cv`` < 0.
    """
    from scipy.stats import t

    if diff <= 0 or cv < 0:
        raise ValueError("diff must be > 0 and cv >= 0")
    for n in range(2, cap + 1):
        df = 2 * n - 2
        if n >= 2 * ((t.ppf(1 - alpha / 2, df) + t.ppf(power, df)) * cv / diff) ** 2:
            return n
    return cap


def value(cell: dict, key: str, stat: str | None) -> float | None:
    v = cell["metrics"].get(key)
    return (v or {}).get(stat) if stat else v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "repeatability.json")
    a = ap.parse_args()
    if a.runs < 2:
        raise SystemExit("--runs must be at least 2")
    work = Path(tempfile.mkdtemp(prefix="infbench-repeat-"))
    env = {**os.environ, "INFBENCH_HOME": str(work / "home")}
    store = work / "results.db"
    cmd = [sys.executable, "-m", "infbench.cli", "run", "--force", "--json", "--store", str(store)]
    subprocess.run([sys.executable, "-m", "infbench.cli", "run", "--json", "--store", str(work / "warm.db")],
                   capture_output=True, env=env, check=True)  # dummy GGUF written, CPU limits measured once
    values: dict[str, dict[str, list[float]]] = {}
    labels: dict[str, str] = {}
    others: list[float] = []
    walls = []
    t0 = time.time()
    for i in range(a.runs):
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            raise SystemExit(f"run {i} failed ({p.returncode}):\n{p.stderr[-3000:]}")
        for c in json.loads(p.stdout)["cells"]:
            if c["status"] != "ok":
                raise SystemExit(f"run {i}: cell {c['cell_id']} failed: {c['error']}")
            s = c["spec"]
            labels[c["cell_id"]] = f"{s['model']} {s['engine']} {s['dtype']} b{s['batch']} i{s['input_len']} " \
                                   f"o{s['output_len']}"
            for name, key, stat in METRICS:
                v = value(c, key, stat)
                if v is not None:
                    values.setdefault(c["cell_id"], {}).setdefault(name, []).append(v)
            others.append((c["metrics"].get("contention") or {}).get("other_cpu_cores") or 0.0)
            suspect = c["metrics"].get("suspect") or ""
            if "other processes used" in suspect:
                values[c["cell_id"]].setdefault("_noisy", []).append(i)
        print(f"run {i + 1}/{a.runs}: {walls[-1]:.1f} s", flush=True)
    cells = []
    for cid, per in sorted(values.items(), key=lambda kv: labels[kv[0]]):
        stats = {}
        for name, _, _ in METRICS:
            xs = per.get(name) or []
            if len(xs) >= 2:
                m, sd = statistics.fmean(xs), statistics.stdev(xs)
                stats[name] = {"mean": m, "std": sd, "cv": sd / m if m else None, "n": len(xs), "values": xs}
        cells.append({"cell_id": cid, "cell": labels[cid], "metrics": stats, "noisy_runs": per.get("_noisy", [])})
    summary = {}
    for name, _, _ in METRICS:
        cvs = [c["metrics"][name]["cv"] for c in cells if name in c["metrics"] and c["metrics"][name]["cv"] is not None]
        if not cvs:
            continue
        med, worst = statistics.median(cvs), max(cvs)
        summary[name] = {"cv_median": med, "cv_max": worst,
                         "repeats": {f"{100 * d:g}%": {"median_cell": repeats_needed(med, d),
                                                      "worst_cell": repeats_needed(worst, d)} for d in DIFFS}}
    import importlib.metadata as md

    res = {"runs": a.runs, "sweep": "default (infbench run with no arguments)", "cells": cells, "summary": summary,
           "alpha": ALPHA, "power": POWER, "wall_s_per_run": walls, "noisy_cells": sum(len(c["noisy_runs"])
                                                                                       for c in cells),
           "other_cpu_cores": {"median": statistics.median(others), "max": max(others)},
           "cpus": os.cpu_count(), "llama_cpp_python": md.version("llama_cpp_python"),
           "seconds": round(time.time() - t0, 1), "date": time.strftime("%Y-%m-%d")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))
    print(render(res, "repeats"))


NAMES = {"ttft_p50_s": "TTFT p50", "tpot_p50_s": "TPOT p50", "itl_p99_s": "ITL p99", "e2e_p50_s": "E2E p50",
         "output_tok_s": "output tok/s", "total_tok_s": "total tok/s"}


def render(data: dict, variant: str | None = None) -> str:
    """docs/metrics.md's figures from repeatability.json (benchmarks/docs_numbers.py): the CV
    per cell and metric (default) or the repeats needed per difference (``repeats``)."""
    names = [n for n in NAMES if n in data["summary"]]
    if variant == "repeats":
        diffs = list(next(iter(data["summary"].values()))["repeats"])
        out = ["| metric | CV (median cell / worst cell) | " + " | ".join(f"{d} apart" for d in diffs) + " |",
               "|---|---:|" + "---:|" * len(diffs)]
        for n in names:
            s = data["summary"][n]
            reps = " | ".join(f"{r['median_cell']} / {r['worst_cell']}" for r in s["repeats"].values())
            out.append(f"| {NAMES[n]} | {100 * s['cv_median']:.1f} % / {100 * s['cv_max']:.1f} % | {reps} |")
        return "\n".join(out)
    o = data["other_cpu_cores"]
    out = [f"{data['runs']} runs of the default sweep ({len(data['cells'])} cells, llama-cpp-python "
           f"{data['llama_cpp_python']}, {data['cpus']} CPUs, {data['date']}); other processes used a median of "
           f"{o['median']:.2f} cores (max {o['max']:.2f}) during the cells, {data['noisy_cells']} of "
           f"{data['runs'] * len(data['cells'])} cells flagged. CV = s / mean over the runs:", "",
           "| cell | " + " | ".join(NAMES[n] for n in names) + " |", "|---|" + "---:|" * len(names)]
    for c in data["cells"]:
        cv = [c["metrics"].get(n, {}).get("cv") for n in names]
        out.append(f"| {c['cell']} | " + " | ".join("-" if v is None else f"{100 * v:.1f} %" for v in cv) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
