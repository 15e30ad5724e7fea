"""Runs on real accelerators: one JSON per run under ``benchmarks/results/hardware/``, all of them
gathered into ``benchmarks/results/hardware_runs.json`` and rendered into docs/hardware-runs.md
(``<!-- numbers: hardware_runs:RUN -->``, RUN the file's name without ``.json``).

Three commands:

    # what scripts/gpu_check.sh runs on a GPU host: its step outputs (a folder) into one run JSON
    python benchmarks/hardware_runs.py assemble OUT_DIR --name h100-2027-01-05
    # the first H100 run (2026-11-26, before issue 30's fixes), from its raw files
    python benchmarks/hardware_runs.py import-first-run ../shared/hardware/h100-2026-11-26
    # gather every run JSON into results/hardware_runs.json (then: python benchmarks/docs_numbers.py)
    python benchmarks/hardware_runs.py index

The energy cross-check integrates nvidia-smi's ``power.draw`` (W, its own clock, sampled every
100 ms by ``nvidia-smi --query-gpu=timestamp,power.draw,... -lms 100``) by the trapezoidal rule
over each cell's timed part (``metrics["timed_window_epoch_s"]``, the wall clock) and sets it
beside infbench's ``energy_j`` (NVML's energy counter on an H100).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import sys
from pathlib import Path

from infbench.measure.harness import host_bound

ROOT = Path(__file__).resolve().parents[1]
HARDWARE = ROOT / "benchmarks" / "results" / "hardware"
INDEX = ROOT / "benchmarks" / "results" / "hardware_runs.json"


# -- nvidia-smi ------------------------------------------------------------------------------

def read_smi(path: Path) -> list[tuple[float, float]]:
    """``(epoch s, power.draw W)`` from an nvidia-smi CSV (``timestamp, power.draw, ...``, no
    header, no units; plain or gzip). Timestamps are the host's local time
    (``2026/11/26 00:48:01.123``); lines that do not parse are skipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt") as f:
        for row in csv.reader(f):
            if len(row) < 2:
                continue
            try:
                t = dt.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((t, float(row[1])))
            except ValueError:
                continue
    return out


def smi_energy_j(samples: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Energy (J) over ``[t0, t1]`` (epoch s) by the trapezoidal rule over the samples, linear
    between them at both ends; None when fewer than two samples cover the window."""
    inside = [(t, w) for t, w in samples if t0 <= t <= t1]
    before = [(t, w) for t, w in samples if t < t0][-1:]
    after = [(t, w) for t, w in samples if t > t1][:1]
    pts = before + inside + after
    if len(pts) < 2:
        return None

    def at(t: float) -> float:
        for (ta, wa), (tb, wb) in zip(pts, pts[1:]):
            if ta <= t <= tb:
                return wa if tb == ta else wa + (wb - wa) * (t - ta) / (tb - ta)
        return pts[0][1] if t < pts[0][0] else pts[-1][1]

    xs = [t0] + [t for t, _ in inside] + [t1]
    return sum(0.5 * (at(a) + at(b)) * (b - a) for a, b in zip(xs, xs[1:]))


# -- one run ---------------------------------------------------------------------------------

def _cells(results: list[dict], smi: list[tuple[float, float]]) -> list[dict]:
    out = []
    for r in results:
        m = r.get("metrics") or {}
        s = r["spec"]
        row = {"batch": s["batch"], "input_len": s["input_len"], "output_len": s["output_len"],
               "engine": s["engine"], "model": s["model"], "dtype": s["dtype"], "status": r["status"],
               "error": r.get("error")}
        if r["status"] == "ok":
            row.update({"e2e_s": m["e2e_s"]["p50"], "ttft_s": m["ttft_s"]["p50"],
                        "tpot_s": (m.get("tpot_s") or {}).get("p50"), "output_tok_s": m.get("output_tok_s"),
                        "mbu": m.get("mbu"), "mfu": m.get("mfu"), "energy_j": m.get("energy_j"),
                        "avg_power_w": m.get("avg_power_w"), "energy_source": m.get("energy_source"),
                        "harness_share": m.get("harness_share"), "harness_mode": (m.get("harness") or {}).get("mode"),
                        "throttled": m.get("throttled"), "suspect": m.get("suspect"),
                        # stored by runs since the rule exists; for older runs, the rule applied to their figures
                        "host_bound": bool(m.get("host_bound") or host_bound(m, (r.get("device") or {}).get("kind",
                                                                                                        "gpu"))),
                        "device_proof": (r.get("engine") or {}).get("device_proof"),
                        "build_s": (r.get("engine") or {}).get("build_s"), "compile_s": m.get("compile_s"),
                        "engine_args": s.get("engine_args") or None,
                        "warmup": _warmup_summary(m.get("warmup")),
                        "steady_flags": sorted((m.get("steady") or {}).get("flags") or {}) or None})
            win = m.get("timed_window_epoch_s")
            if win and smi:
                e = smi_energy_j(smi, win[0], win[1])
                row["smi_energy_j"] = e
                if e and m.get("energy_j"):
                    row["energy_vs_smi_pct"] = 100 * (m["energy_j"] / e - 1)
        out.append(row)
    return out


def _warmup_summary(w: object) -> dict | None:
    """A cell's warm-up record (docs/metrics.md, "Steady state") cut to what the hardware page
    shows: mode, converged, seconds, and each block's TPOT (ms) and SM clock (MHz)."""
    if not isinstance(w, dict):
        return None
    blocks = w.get("blocks") or []
    return {"mode": w.get("mode"), "converged": w.get("converged"), "seconds": w.get("seconds"),
            "block_tpot_ms": [b.get("tpot_ms") for b in blocks if isinstance(b, dict)],
            "block_clock_mhz": [b.get("clock_mhz") for b in blocks if isinstance(b, dict)] or None}


def warm_regime(cells: list[dict], bare_rows: list[dict], tol: float = 0.10) -> list[dict]:
    """Issue 38, item 10: each default-sweep cell against the bare engine's median TPOT for the
    same (engine, model, batch, input, output) measured in the same call
    (``harness_overhead.py --gpu``'s rows). ``ratio`` = cell TPOT p50 / bare median TPOT;
    ``warm`` when within ``tol`` (10 %) of it. Cells without a bare counterpart are left out.

    Returns:
        One dict per matched cell: shape, ``cell_tpot_ms``, ``bare_tpot_ms``, ``ratio``, ``warm``,
        and the cell's warm-up summary (what it waited for)."""
    bare = {(r.get("engine"), r.get("model"), r.get("batch"), r.get("input_len"), r.get("output_len")):
            (r.get("bare") or {}).get("tpot_s") for r in bare_rows}
    out = []
    for c in cells:
        b = bare.get((c.get("engine"), c.get("model"), c.get("batch"), c.get("input_len"), c.get("output_len")))
        if not b or not c.get("tpot_s"):
            continue
        ratio = c["tpot_s"] / b
        out.append({"engine": c["engine"], "model": c["model"], "batch": c["batch"], "input_len": c["input_len"],
                    "output_len": c["output_len"], "cell_tpot_ms": round(1e3 * c["tpot_s"], 3),
                    "bare_tpot_ms": round(1e3 * b, 3), "ratio": round(ratio, 4), "warm": abs(ratio - 1) <= tol,
                    "warmup": c.get("warmup")})
    return out


def _load(path: Path) -> object | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def first_timed_after_s(run_out: object, started_epoch: float | None) -> float | None:
    """Seconds from ``infbench run``'s start (``sweep_started_epoch``, written by gpu_check.sh just
    before it) to the start of the first timed part of any of its cells (the earliest
    ``metrics["timed_window_epoch_s"][0]`` in ``run --json``'s cells, or in ``results --format
    json``'s list when the run was stopped before printing); None when either is missing."""
    cells = run_out.get("cells") if isinstance(run_out, dict) else run_out if isinstance(run_out, list) else None
    starts = [c["metrics"]["timed_window_epoch_s"][0] for c in cells or []
              if (c.get("metrics") or {}).get("timed_window_epoch_s")]
    if not starts or started_epoch is None:
        return None
    return round(min(starts) - started_epoch, 2)


def _paired(data: object) -> dict | None:
    """The back-to-back infbench/bare pairs of ``harness_overhead.py --gpu --paired`` (summary and
    each pair's E2E; the probe's series left out), or None."""
    p = data.get("paired_gpu") if isinstance(data, dict) else None
    if not p:
        return None
    return {k: p[k] for k in ("engine", "model", "dtype", "device", "batch", "input_len", "output_len", "seconds",
                              "summary")} | {
        "pairs": [{arm: {"e2e_s": round(x[arm]["e2e_s"], 4), "start_s": round(x[arm]["start_s"], 2)}
                   for arm in ("bare", "infbench")} for x in p["pairs"]]}


def assemble(out_dir: Path, name: str) -> dict:
    """One run's JSON from the folder scripts/gpu_check.sh filled: ``steps.json`` (each step's
    seconds and exit status), ``detect.json``, ``dry-run.json``, ``run.json`` (``run --json``),
    ``sweep_started_epoch``, ``results.json``, ``smi.csv``, ``harness.json``
    (benchmarks/harness_overhead.py --gpu --cause), ``plugins.txt`` (pytest's summary) and
    ``static.json`` (the static-cache cell's ``run --json``)."""
    steps = _load(out_dir / "steps.json") or {}
    det = _load(out_dir / "detect.json") or {}
    dry = _load(out_dir / "dry-run.json") or {}
    results = _load(out_dir / "results.json") or []
    smi = read_smi(out_dir / "smi.csv") if (out_dir / "smi.csv").exists() else []
    harness = _load(out_dir / "harness.json") or {}
    plugins = (out_dir / "plugins.txt").read_text().strip().splitlines()[-1:] if (out_dir / "plugins.txt").exists() \
        else []
    try:
        started: float | None = float((out_dir / "sweep_started_epoch").read_text())
    except (OSError, ValueError):
        started = None
    static = _load(out_dir / "static.json") or {}
    devs = det.get("devices") or []
    gpu = next((d for d in devs if d.get("kind") != "cpu"), devs[0] if devs else {})
    ds = dry.get("default_sweep") or {}
    run = {"name": name, "date": dt.date.today().isoformat(), "source": "scripts/gpu_check.sh",
           "device": {k: gpu.get(k) for k in ("vendor", "model", "count", "memory_bytes", "driver")},
           "properties": gpu.get("properties"), "steps": steps,
           "engines": {e["engine"]: e["status"] for e in (det.get("engines") or {}).get(gpu.get("vendor", ""), [])},
           "default_sweep": {"chosen": (ds.get("chosen") or {}).get("engine"), "why": ds.get("why"),
                             "cells": len(dry.get("cells") or [])},
           "first_timed_cell_after_s": first_timed_after_s(_load(out_dir / "run.json"), started)
           or first_timed_after_s(results, started),
           "paired": _paired(_load(out_dir / "paired.json")),
           "cells": _cells(results if isinstance(results, list) else [], smi),
           "static_cache": _cells(static.get("cells") or [] if isinstance(static, dict) else [], smi),
           "bare_vs_infbench": [{k: v for k, v in r.items() if k != "runs"} for r in harness.get("bare_gpu", [])
                                or harness.get("bare", [])],
           "plugins": plugins[0] if plugins else None, "smi_samples": len(smi)}
    run["warm_regime"] = warm_regime(run["cells"], run["bare_vs_infbench"])
    return run


def import_first_run(folder: Path) -> dict:
    """The JSON of the first H100 run (2026-11-26, main at a6bda0c, before issue 30's fixes), from
    its raw files (``../shared/hardware/h100-2026-11-26``, whose README says how each was made)."""
    detect = json.loads((folder / "detect.json").read_text())
    devs = detect.get("devices") or []
    gpu = next((d for d in devs if d.get("kind") != "cpu"), {})
    smi = read_smi(folder / "run1-nvidia-smi.csv.gz")

    def cells(path: Path) -> list[dict]:
        rows = json.loads(path.read_text())
        for r in rows:  # no timed window was stored then: the timed part ended when the cell finished
            m = r.get("metrics") or {}
            if r.get("wall_s") and r.get("finished_at"):
                m["timed_window_epoch_s"] = [r["finished_at"] - r["wall_s"], r["finished_at"]]
        return _cells(rows, smi)

    bare = []
    for line in (folder / "run1-xcheck.jsonl").read_text().splitlines():
        d = json.loads(line)
        if "batch" in d:
            bare.append({"batch": d["batch"], "input_len": d["input_len"], "output_len": d["output_len"],
                         "generate_e2e_s": d["generate_e2e_s"]})
    variants = []
    for line in (folder / "run2-xcheck2.jsonl").read_text().splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if "e2e_s" in d:
                variants.append({"variant": d["variant"], "e2e_s": d["e2e_s"]})
    return {"name": "h100-2026-11-26", "date": "2026-11-26", "source": "../shared/hardware/h100-2026-11-26 (main at "
            "a6bda0c, before issue 30's fixes)",
            "device": {k: gpu.get(k) for k in ("vendor", "model", "count", "memory_bytes", "driver")},
            "properties": gpu.get("properties"),
            "runs": {"run1_default_sweep_330s": cells(folder / "run1-results.json"),
                     "run2_weights_on_device": cells(folder / "run2-results-device-init.json"),
                     "run2_power_interval_1s": cells(folder / "run2-results-power1s.json")},
            "bare_generate": bare, "bare_variants_b1_128_128": variants,
            "first_cell_started_after_s": 268, "cells_in_330s": 1, "eta_printed": "27:59:08"}


def index() -> dict:
    """Every run JSON under results/hardware/, by name."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(HARDWARE.glob("*.json"))}


# -- docs ------------------------------------------------------------------------------------

def _f(x: object, fmt: str = ".2f", scale: float = 1.0) -> str:
    return "-" if x is None else format(float(x) * scale, fmt)  # type: ignore[arg-type]


def _cell_table(cells: list[dict]) -> list[str]:
    out = ["| batch | in | out | status | E2E s | TTFT ms | TPOT ms | MBU % | energy J | nvidia-smi J | "
           "energy vs smi | harness | flags |", "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in cells:
        flags = ", ".join(x for x in ("throttled" if c.get("throttled") else "", "suspect" if c.get("suspect") else "",
                                      "host-bound" if c.get("host_bound") else "") if x) or "-"
        vs = "-" if c.get("energy_vs_smi_pct") is None else f"{c['energy_vs_smi_pct']:+.1f} %"
        hm = c.get("harness_mode") or "in process (before the fix)"
        out.append(f"| {c['batch']} | {c['input_len']} | {c['output_len']} | {c['status']} | {_f(c.get('e2e_s'))} | "
                   f"{_f(c.get('ttft_s'), '.1f', 1e3)} | {_f(c.get('tpot_s'), '.1f', 1e3)} | "
                   f"{_f(c.get('mbu'), '.1f', 100)} | {_f(c.get('energy_j'), '.0f')} | "
                   f"{_f(c.get('smi_energy_j'), '.0f')} | {vs} | {hm} | {flags} |")
    return out


def render(data: dict, variant: str | None = None) -> str:
    """docs/hardware-runs.md's figures for the run named ``variant`` (default: the newest)."""
    name = variant or sorted(data)[-1]
    run = data[name]
    d = run["device"]
    lines = [f"Device: {d.get('model')} (x{d.get('count')}), driver {d.get('driver')}; source: {run['source']}."]
    if "runs" in run:  # the first run, before the fixes
        lines += ["", f"The default sweep stored {run['cells_in_330s']} cell in 330 s; its first cell started "
                  f"{run['first_cell_started_after_s']} s after `infbench run` began; the ETA printed "
                  f"`{run['eta_printed']}`.", ""]
        for key, title in (("run1_default_sweep_330s", "Run 1, the default sweep (330 s allowed)"),
                           ("run2_weights_on_device", "Run 2, dummy weights built on the GPU (scratch copy), "
                            "output 128"), ("run2_power_interval_1s", "Run 2, `--power-interval 1`")):
            lines += [f"**{title}:**", ""] + _cell_table(run["runs"][key]) + [""]
        lines += ["**The same `generate()` outside infbench** (run1-xcheck.jsonl, no streamer):", "",
                  "| batch | in | out | E2E s |", "|---:|---:|---:|---:|"]
        lines += [f"| {b['batch']} | {b['input_len']} | {b['output_len']} | {b['generate_e2e_s']:.2f} |"
                  for b in run["bare_generate"]]
        lines += ["", "**b1 128/128 outside infbench, two rounds each** (run2-xcheck2.jsonl):", "",
                  "| variant | E2E s, round 1 | E2E s, round 2 |", "|---|---:|---:|"]
        lines += [f"| {v['variant']} | {v['e2e_s'][0]:.2f} | {v['e2e_s'][1]:.2f} |"
                  for v in run["bare_variants_b1_128_128"]]
        return "\n".join(lines)
    steps = run.get("steps") or {}
    lines += ["", "| step | s | exit |", "|---|---:|---:|"]
    lines += [f"| {k} | {_f(v.get('s'), '.0f')} | {v.get('rc')} |" for k, v in steps.items()]
    lines += ["", f"Default sweep: {run['default_sweep']['chosen']} ({run['default_sweep']['cells']} cells).", ""]
    lines += _cell_table(run["cells"])
    rows = run.get("bare_vs_infbench") or []
    if rows:
        lines += ["", "| engine | model | batch | in | out | bare E2E s | infbench E2E s | infbench / bare E2E | "
                  "infbench / bare TPOT | in-process / bare E2E | within 3 % |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            lines.append(f"| {r['engine']} | {r['model']} | {r['batch']} | {r['input_len']} | {r['output_len']} | "
                         f"{r['bare']['e2e_s']:.3f} | {r['infbench']['e2e_s']:.3f} | "
                         f"{100 * (r['ratio_e2e'] - 1):+.1f} % | {100 * (r['ratio_tpot'] - 1):+.1f} % | "
                         f"{100 * (r['ratio_e2e_in_process'] - 1):+.1f} % | {'yes' if r['within_3pct'] else 'no'} |")
    pr = run.get("paired")
    if pr:
        sm = pr["summary"]
        lines += ["", f"**Back-to-back pairs** (`harness_overhead.py --gpu --paired {pr['seconds']:g}`: {pr['model']} "
                  f"b{pr['batch']} {pr['input_len']}/{pr['output_len']}, the bare call and the infbench cell one after "
                  f"the other, the order flipped each pair): {sm['pairs']} pairs; infbench / bare E2E median "
                  f"{100 * (sm['ratio_e2e_median'] - 1):+.1f} % (10th-90th percentile "
                  f"{100 * (sm['ratio_e2e_p10'] - 1):+.0f} % to {100 * (sm['ratio_e2e_p90'] - 1):+.0f} %); median E2E "
                  f"bare {sm['bare']['median_e2e_s']:.2f} s, infbench {sm['infbench']['median_e2e_s']:.2f} s; fastest "
                  f"bare {sm['bare']['fastest_e2e_s']:.2f} s, infbench {sm['infbench']['fastest_e2e_s']:.2f} s; calls "
                  f"slower than 1.5x their fastest: bare {100 * sm['bare']['slow_share']:.0f} %, infbench "
                  f"{100 * sm['infbench']['slow_share']:.0f} %.", "",
                  "| pair | bare E2E s | infbench E2E s |", "|---:|---:|---:|"]
        lines += [f"| {k + 1} | {x['bare']['e2e_s']:.2f} | {x['infbench']['e2e_s']:.2f} |"
                  for k, x in enumerate(pr["pairs"])]
    cause = next((r for r in rows if r.get("cause")), None)
    if cause:
        lines += ["", f"**Where the slowdown comes from** ({cause['model']} b{cause['batch']} {cause['input_len']}/"
                  f"{cause['output_len']}, medians of {cause['rounds']} interleaved rounds; bare E2E "
                  f"{cause['bare']['e2e_s']:.3f} s):", "", "| arm | what differs | E2E s | / bare | poll tick ms |",
                  "|---|---|---:|---:|---:|",
                  f"| infbench | the engine in its own process (the default) | {cause['infbench']['e2e_s']:.3f} | "
                  f"{100 * (cause['ratio_e2e'] - 1):+.1f} % | - |",
                  f"| in_process | `--no-engine-process` (all of infbench's threads beside the engine) | "
                  f"{cause['in_process']['e2e_s']:.3f} | {100 * (cause['ratio_e2e_in_process'] - 1):+.1f} % | - |"]
        for arm, c in cause["cause"].items():
            tick = (c.get("poll") or {}).get("tick_ms_p50")
            lines.append(f"| {arm} | {c['what']} | {_f(c.get('e2e_s'), '.3f')} | {100 * (c['ratio_e2e'] - 1):+.1f} % | "
                         f"{_f(tick, '.2f')} |")
    spy = next((r["py_spy"] for r in rows if r.get("py_spy")), None)
    if spy:
        gil = spy.get("gil") or {}
        total = sum(t.get("samples", 0) for t in gil.values() if isinstance(t, dict)) or None
        if total:
            lines += ["", f"py-spy `--gil` over one `--no-engine-process` cell (E2E {spy['cell_e2e_s']:.2f} s): "
                      "samples in which each thread held the interpreter lock:", "",
                      "| thread | share of GIL samples | most sampled frames |", "|---|---:|---|"]
            for th, t in sorted(gil.items(), key=lambda kv: -kv[1].get("samples", 0)):
                top = "; ".join(f"`{f}` {n}" for f, n in list(t.get("leaf", {}).items())[:3])
                lines.append(f"| {th} | {100 * t['samples'] / total:.1f} % | {top} |")
    if run.get("warm_regime"):
        lines += ["", "**The default sweep against the bare engine of the same call** (issue 38: TPOT within 10 % "
                  "of the bare median, the warm regime):", "",
                  "| engine | batch | in | out | cell TPOT ms | bare TPOT ms | cell / bare | warm | warm-up: mode, "
                  "blocks, s, converged |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for w in run["warm_regime"]:
            wu = w.get("warmup") or {}
            lines.append(f"| {w['engine']} | {w['batch']} | {w['input_len']} | {w['output_len']} | "
                         f"{w['cell_tpot_ms']:.2f} | {w['bare_tpot_ms']:.2f} | {100 * (w['ratio'] - 1):+.1f} % | "
                         f"{'yes' if w['warm'] else 'no'} | {wu.get('mode')}, {len(wu.get('block_tpot_ms') or [])}, "
                         f"{_f(wu.get('seconds'), '.1f')}, {wu.get('converged')} |")
    if run.get("first_timed_cell_after_s") is not None:
        lines += ["", f"First timed cell of the default sweep: {run['first_timed_cell_after_s']:.1f} s after "
                  "`infbench run` started (target: 15 s on an H100)."]
    if run.get("static_cache"):
        lines += ["", "**transformers with `--engine-arg cache_implementation=static`** (compile time stored apart, "
                  "as `compile_s`):", ""] + _cell_table(run["static_cache"])
        lines += [f"compile_s: {_f(c.get('compile_s'), '.1f')} s" for c in run["static_cache"] if c.get("compile_s")]
    if run.get("plugins"):
        lines += ["", f"Plugin suite: `{run['plugins']}`."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("assemble", help="one run's JSON from scripts/gpu_check.sh's output folder")
    a.add_argument("folder", type=Path)
    a.add_argument("--name", required=True, help="the run's name, e.g. h100-2027-01-05")
    a.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/hardware/NAME.json")
    f = sub.add_parser("import-first-run", help="the first H100 run's JSON from its raw files")
    f.add_argument("folder", type=Path)
    sub.add_parser("index", help="gather results/hardware/*.json into results/hardware_runs.json")
    args = ap.parse_args(argv)
    if args.cmd == "assemble":
        run = assemble(args.folder, args.name)
        out = args.out or HARDWARE / f"{args.name}.json"
    elif args.cmd == "import-first-run":
        run = import_first_run(args.folder)
        out = HARDWARE / f"{run['name']}.json"
    else:
        INDEX.write_text(json.dumps(index(), indent=1) + "\n")
        print(f"wrote {INDEX.relative_to(ROOT)}")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(run, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
