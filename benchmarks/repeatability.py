"""Repeatability: the default CPU sweep run N times, each metric's coefficient of variation,
and how many repeats a difference of X % needs (docs/metrics.md, "Repeatability").

``--runs`` times, one after another (each started in a quiet second where one comes within
``--wait-quiet`` s), a fresh ``infbench run --force`` of the detected
device's default sweep (on a CPU: the ``quick`` preset, 6 cells of SmolLM2-135M f16 on
llama.cpp) into one store; per cell and metric the N values give the mean, the sample
standard deviation ``s`` (ddof 1) and ``CV = s / mean``. Each cell's ``contention`` record
(:mod:`infbench.measure.contention`) says how quiet the machine was; runs whose cells met
noisy neighbours are kept and counted (``noisy_cells``), so the CVs are those of the
machine as it was. Run it under the shared lock (a quiet machine is the point):

    python benchmarks/repeatability.py --runs 10 \\
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
CAP = 10_000
ALPHA, POWER = 0.05, 0.80


def repeats_needed(cv: float, diff: float, alpha: float = ALPHA, power: float = POWER, cap: int = CAP) -> int:
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


def cv_stats(xs: list[float]) -> dict | None:
    """mean, sample std (ddof 1), CV = std / mean and n of ``xs``; None for fewer than 2."""
    if len(xs) < 2:
        return None
    m, sd = statistics.fmean(xs), statistics.stdev(xs)
    return {"mean": m, "std": sd, "cv": sd / m if m else None, "n": len(xs)}


def analyse(res: dict) -> dict:
    """Per cell and metric the CV over all runs (``metrics``) and over the runs in which the
    cell was not flagged for noisy neighbours (``quiet``, when at least 3 remain); per metric
    the median and worst CV over the cells and the repeats needed per difference
    (:func:`repeats_needed`), from the quiet CVs of the cells that have them
    (``summary_cells``), else from all runs of every cell (``summary_basis``). Works on the raw
    values the run recorded; sets and returns ``res``."""
    for c in res["cells"]:
        noisy = set(c["noisy_runs"])
        c["metrics"] = {n: cv_stats(xs) for n, xs in c["values"].items() if cv_stats(xs)}
        c["quiet"] = {n: cv_stats([x for i, x in enumerate(xs) if i not in noisy]) for n, xs in c["values"].items()
                      if len(xs) - len(noisy) >= 3}
    with_quiet = [c for c in res["cells"] if c["quiet"] and len(c["quiet"]) == len(c["metrics"])]
    quiet = len(with_quiet) > 0
    res["summary_basis"] = "quiet runs" if quiet else "all runs"
    res["summary_cells"] = [c["cell"] for c in (with_quiet if quiet else res["cells"])]
    res["noisy_cells"] = sum(len(c["noisy_runs"]) for c in res["cells"])
    summary = {}
    for name, _, _ in METRICS:
        cvs = [c["quiet"].get(name) if quiet else c["metrics"].get(name) for c in (with_quiet or res["cells"])]
        cvs = [x["cv"] for x in cvs if x and x["cv"] is not None]
        if not cvs:
            continue
        med, worst = statistics.median(cvs), max(cvs)
        summary[name] = {"cv_median": med, "cv_max": worst, "cells": len(cvs),
                         "repeats": {f"{100 * d:g}%": {"median_cell": repeats_needed(med, d),
                                                      "worst_cell": repeats_needed(worst, d)} for d in DIFFS}}
    res["summary"] = summary
    return res


def value(cell: dict, key: str, stat: str | None) -> float | None:
    v = cell["metrics"].get(key)
    return (v or {}).get(stat) if stat else v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "repeatability.json")
    ap.add_argument("--wait-quiet", type=float, default=120.0,
                    help="before each run, wait up to this many s for a second in which other processes used "
                         "under 0.05 core")
    ap.add_argument("--reanalyse", type=Path, help="recompute the statistics of an earlier run's JSON (its raw "
                                                    "values), write them to --out; measures nothing")
    a = ap.parse_args()
    if a.reanalyse:
        old = json.loads(a.reanalyse.read_text())
        for c in old["cells"]:  # a JSON written before the raw values had their own key
            c.setdefault("values", {n: m["values"] for n, m in c.get("metrics", {}).items()})
        res = analyse(old)
        a.out.write_text(json.dumps(res, indent=2) + "\n")
        print(render(res))
        print(render(res, "repeats"))
        return
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
    from infbench.measure.contention import wait_for_quiet

    for i in range(a.runs):
        wait_for_quiet(a.wait_quiet)  # each run starts in a quiet second of the shared machine, where one comes
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
    cells = [{"cell_id": cid, "cell": labels[cid], "values": {n: per.get(n, []) for n, _, _ in METRICS},
              "noisy_runs": per.get("_noisy", [])} for cid, per in sorted(values.items(), key=lambda kv: labels[kv[0]])]
    import importlib.metadata as md

    res = {"runs": a.runs, "sweep": "default (infbench run with no arguments)", "cells": cells,
           "alpha": ALPHA, "power": POWER, "wall_s_per_run": walls,
           "other_cpu_cores": {"median": statistics.median(others), "max": max(others)},
           "cpus": os.cpu_count(), "llama_cpp_python": md.version("llama_cpp_python"),
           "seconds": round(time.time() - t0, 1), "date": time.strftime("%Y-%m-%d")}
    analyse(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))
    print(render(res, "repeats"))


NAMES = {"ttft_p50_s": "TTFT p50", "tpot_p50_s": "TPOT p50", "itl_p99_s": "ITL p99", "e2e_p50_s": "E2E p50",
         "output_tok_s": "output tok/s", "total_tok_s": "total tok/s"}


def _count(x: int) -> str:
    return f"> {CAP - 1:,}" if x >= CAP else f"{x:,}"


def render(data: dict, variant: str | None = None) -> str:
    """docs/metrics.md's figures from repeatability.json (benchmarks/docs_numbers.py): the CV
    per cell and metric (default) or the repeats needed per difference (``repeats``)."""
    names = [n for n in NAMES if n in data["summary"]]
    if variant == "repeats":
        diffs = list(next(iter(data["summary"].values()))["repeats"])
        out = [f"From the {data['summary_basis']} of {len(data['summary_cells'])} of the {len(data['cells'])} cells "
               f"(repeats per configuration; median cell / worst cell):", "",
               "| metric | CV (median cell / worst cell) | " + " | ".join(f"{d} apart" for d in diffs) + " |",
               "|---|---:|" + "---:|" * len(diffs)]
        for n in names:
            s = data["summary"][n]
            reps = " | ".join(f"{_count(r['median_cell'])} / {_count(r['worst_cell'])}" for r in s["repeats"].values())
            out.append(f"| {NAMES[n]} | {100 * s['cv_median']:.1f} % / {100 * s['cv_max']:.1f} % | {reps} |")
        return "\n".join(out)
    o = data["other_cpu_cores"]
    quiet = data["summary_basis"] == "quiet runs"
    out = [f"{data['runs']} runs of the default sweep ({len(data['cells'])} cells, llama-cpp-python "
           f"{data['llama_cpp_python']}, {data['cpus']} CPUs, {data['date']}); other processes used a median of "
           f"{o['median']:.2f} cores (max {o['max']:.2f}) during the cells, and {data['noisy_cells']} of "
           f"{data['runs'] * len(data['cells'])} cells were flagged for it. CV = s / mean over "
           + ("the runs in which the cell was not flagged (all runs in brackets):" if quiet else "all runs:"), "",
           "| cell | " + " | ".join(NAMES[n] for n in names) + " |", "|---|" + "---:|" * len(names)]

    def cv(c: dict, n: str) -> str:
        a = (c["metrics"].get(n) or {}).get("cv")
        q = (c["quiet"].get(n) or {}).get("cv") if quiet else None
        if a is None:
            return "-"
        if not quiet:
            return f"{100 * a:.1f} %"
        return f"{100 * q:.1f} % ({100 * a:.1f} %)" if q is not None else f"too few ({100 * a:.1f} %)"

    for c in data["cells"]:
        out.append(f"| {c['cell']} (flagged in {len(c['noisy_runs'])}) | " + " | ".join(cv(c, n) for n in names) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
