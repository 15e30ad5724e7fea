"""Benchmark: the adaptive frontier search (``infbench run --preset frontier --adaptive 33%``)
against the full frontier grid, on this host's CPU with llama.cpp's real server (issue 31).

The grid: one model on ``llama.cpp-server``, two engine configurations (``parallel`` 2 and 16:
two servers), concurrency 1 to 256 by doubling (9 levels), input 32 and output 16 tokens,
``num_requests`` = max(32, 10 x concurrency) as the frontier preset sends: 18 cells. Each
run goes into a fresh store:

* **full**: every cell of the grid measured (the frontier preset's cells with
  ``frontier_stop: false`` in the sweep file, so no series is cut: the reference front);
* **adaptive**: ``--adaptive 33%`` on the same grid: each series' corners, then the cells
  whose optimistic corner lies furthest above the measured front; the rest stored as
  predicted cells with 90 % intervals (:mod:`infbench.analysis.adaptive`).

Reported: cells measured and why the search stopped; wall time of each run; the front
(``tok_s_per_device`` against ``tok_s_per_user``, :mod:`infbench.analysis.frontier`) of the full
grid and of the adaptive run (its measured and predicted cells) read at three interactivities
inside the full front's range (log-spaced at 25, 50 and 75 % of it), and their relative
error; and coverage: the share of the predicted cells whose full-grid measurements of TPOT
and total tok/s lie inside their predicted intervals.

Target (issue 31): at most a third of the cells measured, the front within 10 % of the full
grid's at the three interactivities. A timing benchmark: run it alone
(``flock /work/notes/bench.lock python benchmarks/adaptive_frontier.py``).

    python benchmarks/adaptive_frontier.py [--model tiny-random-llama] [--budget 33%] \\
        [--levels 1,2,...] [--as-run NAME] [--out benchmarks/results/adaptive_frontier.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
CONFIGS = [2, 16]
SWEEP = """preset: frontier
models: [{model}]
engines: [llama.cpp-server]
input_len: [32]
output_len: [16]
concurrency: {levels}
engine_configs: {configs}
"""


def run(store: Path, sweep: Path, env: dict[str, str], *extra: str) -> tuple[dict[str, Any], float]:
    """``infbench run --sweep`` into ``store`` (its JSON summary) and its wall time in s."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "run", "--sweep", str(sweep), *extra, "--store",
                        str(store), "--json"], capture_output=True, text=True, timeout=7200, env=env)
    if p.returncode != 0:
        raise SystemExit(f"infbench run failed ({p.returncode}): {p.stderr[-3000:]}")
    return json.loads(p.stdout), time.perf_counter() - t0


def rows(store: Path) -> list[dict[str, Any]]:
    from infbench.store import Store

    return Store(store).results()


def replay(full_rows: list[dict[str, Any]], budget: str) -> tuple[list[dict[str, Any]], list[tuple[int, int]], Any]:
    """The search run offline on the full grid's measurements: the planner picks as in a live
    run and is handed the full run's result of each cell it picks. Separates the search's own
    error from the run-to-run noise of two live runs. Returns the rows it ends with (measured
    and predicted), the order it picked and why it stopped."""
    from infbench.analysis.adaptive import AdaptivePlanner
    from infbench.analysis.floor import device_roofline_limits
    from infbench.analysis.profile import stack_of
    from infbench.contract.manager import build_plugin_manager
    from infbench.data.schema import Cell, DeviceInfo

    ok = [r for r in full_rows if r["status"] == "ok"]
    dev = DeviceInfo(**ok[0]["device"])
    cells = [Cell(**r["spec"]) for r in ok]
    by_id = {c.cell_id(dev): r for c, r in zip(cells, ok, strict=True)}
    limits, why = device_roofline_limits(build_plugin_manager(), dev)
    if limits is None:
        raise SystemExit(f"no roofline limits for {dev.model}: {why}")
    pl = AdaptivePlanner(cells, dev, limits, budget, stack=stack_of(dev.vendor), select="front")
    order, rows_ = [], []
    while (c := pl.next_cell()) is not None:
        r = by_id[c.cell_id(dev)]
        pl.record(r)
        order.append(key(r))
        rows_.append(r)
    pred = [{"cell_id": p.cell_id, "status": "predicted", "spec": p.cell.spec(), "metrics": p.metrics,
             "device": ok[0]["device"]} for p in pl.predicted_results()]
    return rows_ + pred, order, pl.stop_reason


def front_reads(ff: Any, rows_: list[dict[str, Any]], at: list[float]) -> tuple[list[dict[str, Any]], Any]:
    """The front of ``rows_`` read at ``at`` against the full front ``ff``."""
    from infbench.analysis.frontier import fronts

    [fa] = fronts(rows_)
    reads = []
    for x in at:
        yf, ya = ff.interpolate(x), fa.interpolate(x)
        reads.append({"tok_s_per_user": x, "full": yf, "adaptive": ya,
                      "error": None if yf is None or ya is None else abs(ya / yf - 1)})
    return reads, fa


def key(r: dict[str, Any]) -> tuple[int, int]:
    s = r["spec"]
    return int((s.get("engine_args") or {}).get("parallel", 0)), int(s["load"]["concurrency"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-random-llama")
    ap.add_argument("--budget", default="33%")
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrency levels (default 1-256)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/adaptive_frontier.json"))
    ap.add_argument("--reuse-full", action="store_true",
                    help="take the full grid (its rows and wall time) from the JSON's run of the same name and "
                    "run only the adaptive search again (after a change to the search; the full grid is the slow part)")
    ap.add_argument("--as-run", default=None, metavar="NAME",
                    help="keep the JSON's main run and store this one under runs[NAME] (docs: variant NAME)")
    a = ap.parse_args()
    import os

    from infbench.analysis.frontier import fronts

    configs = json.dumps([{"parallel": p} for p in CONFIGS])
    levels = [int(x) for x in a.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {**os.environ, "INFBENCH_HOME": os.environ.get("INFBENCH_HOME", str(t / "home"))}
        sweep = t / "frontier.yaml"
        sweep.write_text(SWEEP.format(model=a.model, levels=json.dumps(levels), configs=configs))
        full_sweep = t / "full.yaml"   # the same cells, every one measured (no stop rule)
        full_sweep.write_text(sweep.read_text() + "frontier_stop: false\n")
        if a.reuse_full:
            prev = json.loads(a.out.read_text())
            prev = prev["runs"][a.as_run] if a.as_run else prev
            if prev["model"] != a.model or prev["levels"] != levels:
                raise SystemExit(f"--reuse-full: the stored run is {prev['model']} at {prev['levels']}, not "
                                 f"{a.model} at {levels}")
            full_rows, full_s, full_date = prev["full_rows"], prev["full_s"], prev.get("full_date", prev["date"])
        else:
            _, full_s = run(t / "full.db", full_sweep, env)
            full_rows, full_date = rows(t / "full.db"), time.strftime("%Y-%m-%d")
        adaptive, adaptive_s = run(t / "adaptive.db", sweep, env, "--adaptive", a.budget)
        ad_rows = rows(t / "adaptive.db")
    truth = {key(r): r for r in full_rows if r["status"] == "ok"}
    [ff] = fronts(full_rows)
    lo, hi = ff.front[0].x, ff.front[-1].x
    at = [lo * (hi / lo) ** q for q in (0.25, 0.5, 0.75)]
    reads, fa = front_reads(ff, ad_rows, at)
    rp_rows, rp_order, rp_stop = replay(full_rows, a.budget)
    rp_reads, rp_front = front_reads(ff, rp_rows, at)
    pred = [r for r in ad_rows if r["status"] == "predicted"]
    inside, cells = 0, []
    checked = 0
    for r in pred:
        t_ = truth.get(key(r))
        if t_ is None:
            continue
        iv = (r["metrics"].get("interval") or {})
        tm = t_["metrics"]
        meas = {"tpot_s": (tm.get("tpot_s") or {}).get("p50"), "total_tok_s": tm.get("total_tok_s")}
        pr = {"tpot_s": (r["metrics"].get("tpot_s") or {}).get("p50"), "total_tok_s": r["metrics"].get("total_tok_s")}
        for m in ("tpot_s", "total_tok_s"):
            lo_, hi_ = (iv.get(m) or [None, None])
            if lo_ is None or meas[m] is None:
                continue
            checked += 1
            inside += lo_ <= meas[m] <= hi_
        cells.append({"parallel": key(r)[0], "concurrency": key(r)[1], "measured": meas, "predicted": pr,
                      "interval": {m: iv.get(m) for m in ("tpot_s", "total_tok_s")}})
    measured = sum(1 for r in ad_rows if r["status"] == "ok")
    out = {"model": a.model, "engine": "llama.cpp-server", "configs": CONFIGS, "levels": levels,
           "input_len": 32, "output_len": 16, "budget": a.budget, "cells": len(levels) * len(CONFIGS),
           "measured": measured, "measured_share": measured / (len(levels) * len(CONFIGS)),
           "stopped": (adaptive.get("outcome") or {}).get("adaptive", {}).get("engines"),
           "full_s": full_s, "adaptive_s": adaptive_s, "time_saved": 1 - adaptive_s / full_s,
           "full_measured": len(truth), "reads": reads,
           "max_error": max((r["error"] for r in reads if r["error"] is not None), default=None),
           "coverage": inside / checked if checked else None, "coverage_n": checked,
           "adaptive_order": [key(r) for r in sorted((r for r in ad_rows if r["status"] == "ok"),
                                                     key=lambda r: r.get("started_at") or 0)],
           "replay": {"order": rp_order, "stopped": rp_stop, "measured": len(rp_order), "reads": rp_reads,
                      "max_error": max((r["error"] for r in rp_reads if r["error"] is not None), default=None),
                      "front": [[p.x, p.y, p.config, p.predicted] for p in rp_front.front]},
           "full_front": [[p.x, p.y, p.config] for p in ff.front],
           "full_rows": [{k: r.get(k) for k in ("cell_id", "status", "spec", "metrics", "device", "wall_s")}
                         for r in full_rows],
           "adaptive_front": [[p.x, p.y, p.config, p.predicted] for p in fa.front], "predicted_cells": cells,
           "date": time.strftime("%Y-%m-%d"), "full_date": full_date, "full_reused": a.reuse_full}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.as_run:
        kept = json.loads(a.out.read_text()) if a.out.exists() else {}
        kept.setdefault("runs", {})[a.as_run] = out
        a.out.write_text(json.dumps(kept, indent=2) + "\n")
    else:
        out["runs"] = json.loads(a.out.read_text()).get("runs", {}) if a.out.exists() else {}
        a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(render(out))


def render(d: dict[str, Any], variant: str | None = None) -> str:
    """The adaptive frontier search against the full grid (docs/benchmarks.md); ``variant``:
    the run stored under ``runs[variant]`` (``--as-run``) instead of the main one."""
    if variant is not None:
        d = d["runs"][variant]
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    met = d["measured_share"] <= 1 / 3 + 1e-9 and d["max_error"] is not None and d["max_error"] <= 0.10
    lines = [f"Grid: {d['model']} on {d['engine']}, `parallel` {' and '.join(map(str, d['configs']))}, concurrency "
             f"{d['levels'][0]}-{d['levels'][-1]} by doubling, input {d['input_len']} / output {d['output_len']}: "
             f"{d['cells']} cells; budget {d['budget']}; {d['date']}.", "",
             "| | full grid | adaptive search |", "|---|---:|---:|",
             f"| cells measured | {d['full_measured']} | {d['measured']} ({pct(d['measured_share'])}) |",
             f"| wall time s | {d['full_s']:.0f} | {d['adaptive_s']:.0f} ({pct(d['time_saved'])} saved) |"]
    for r in d["reads"]:
        full = "-" if r["full"] is None else f"{r['full']:.0f}"
        ad = "-" if r["adaptive"] is None else f"{r['adaptive']:.0f}"
        lines.append(f"| front at {r['tok_s_per_user']:.0f} tok/s/user, tok/s/device | {full} | {ad} "
                     f"(error {pct(r['error'])}) |")
    lines += [f"| predicted cells' TPOT and total tok/s inside their 90 % intervals | - | {pct(d['coverage'])} "
              f"of {d['coverage_n']} |"]
    rp = d.get("replay")
    if rp:
        lines += ["", f"The same search replayed on the full grid's measurements ({rp['measured']} cells picked, "
                  f"stopped: {rp['stopped']}; picks {', '.join(f'parallel {p} c{c}' for p, c in rp['order'])}), "
                  "so two live runs' noise is out of it:", "",
                  "| interactivity tok/s/user | full front tok/s/device | replayed search | error |",
                  "|---:|---:|---:|---:|"]
        for r in rp["reads"]:
            full = "-" if r["full"] is None else f"{r['full']:.0f}"
            ad = "-" if r["adaptive"] is None else f"{r['adaptive']:.0f}"
            lines.append(f"| {r['tok_s_per_user']:.0f} | {full} | {ad} | {pct(r['error'])} |")
        met_rp = rp["max_error"] is not None and rp["max_error"] <= 0.10
        lines += ["", f"Target (at most a third measured, the front within 10 % at the three interactivities): "
                  f"live run **{'met' if met else 'missed'}**, replay **{'met' if met_rp else 'missed'}**."]
    else:
        lines += ["", f"Target: at most a third measured and the front within 10 % at the three interactivities: "
                  f"**{'met' if met else 'missed'}**."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

