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
input_len: [{input_len}]
output_len: [{output_len}]
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


def rows(store: Path) -> list[Any]:
    """The stored cells of ``store`` (:class:`~infbench.data.stored.StoredCell` each)."""
    from infbench.store import Store

    return Store(store).results()


def kept_rows(saved: list[dict[str, Any]]) -> list[Any]:
    """The full grid's rows as this benchmark's JSON keeps them (``full_rows``: cell_id, status,
    spec, metrics, device, wall_s) back as stored cells (:meth:`StoredCell.from_row`)."""
    from infbench.data.stored import StoredCell

    return [StoredCell.from_row(r) for r in saved]


#: What the JSON keeps of each of the full grid's rows (``full_rows``, for ``--reuse-full``).
KEPT = ("cell_id", "status", "spec", "metrics", "device", "wall_s")


def replay(full_rows: list[Any], budget: str) -> tuple[list[Any], list[tuple[int, int]], Any]:
    """The search run offline on the full grid's measurements: the planner picks as in a live
    run and is handed the full run's result of each cell it picks. Separates the search's own
    error from the run-to-run noise of two live runs. Returns the rows it ends with (measured
    and predicted), the order it picked and why it stopped."""
    from infbench.analysis.adaptive import AdaptivePlanner
    from infbench.analysis.floor import device_roofline_limits
    from infbench.analysis.profile import stack_of
    from infbench.contract.manager import build_plugin_manager
    from infbench.data.schema import Cell, DeviceInfo
    from infbench.data.stored import StoredCell

    ok = [r for r in full_rows if r.ok]
    dev = DeviceInfo(**ok[0].device)
    cells = [Cell(**r.spec) for r in ok]
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
    pred = [StoredCell.from_result(p, status="predicted", device=ok[0].device) for p in pl.predicted_results()]
    return rows_ + pred, order, pl.stop_reason


def front_reads(ff: Any, rows_: list[Any], at: list[float]) -> tuple[list[dict[str, Any]], Any]:
    """The front of ``rows_`` read at ``at`` against the full front ``ff``."""
    from infbench.analysis.frontier import fronts

    [fa] = fronts(rows_)
    reads = []
    for x in at:
        yf, ya = ff.interpolate(x), fa.interpolate(x)
        reads.append({"tok_s_per_user": x, "full": yf, "adaptive": ya,
                      "error": None if yf is None or ya is None else abs(ya / yf - 1)})
    return reads, fa


def key(r: Any) -> tuple[int, int]:
    s = r.spec
    return int((s.get("engine_args") or {}).get("parallel", 0)), int(s["load"]["concurrency"])


#: Grids the search was not developed on (issue 43, item 4): each is measured in full (a live
#: run) and searched by a replay of the planner on those measurements (:func:`replay`). Not the
#: tiny model: on this CPU its 0.1 ms steps leave every cell client-bound, throughput falls with
#: concurrency and the front is a single point (tried: `parallel` 4/8 gave a one-point front).
UNTUNED: dict[str, dict[str, Any]] = {
    "parallel-4-8": {"model": "smollm2-135m", "configs": [4, 8], "levels": [1, 2, 4, 8, 16, 32],
                     "input_len": 32, "output_len": 16,
                     "shape": "another `parallel` pair (4 and 8), concurrency 1-32"},
    "lengths-256-64": {"model": "smollm2-135m", "configs": [2, 16], "levels": [1, 2, 4, 8, 16, 32],
                       "input_len": 256, "output_len": 64,
                       "shape": "other lengths: input 256 / output 64 (8x and 4x the development grid's)"},
    "qwen2.5-0.5b": {"model": "qwen2.5-0.5b", "configs": [2, 8], "levels": [1, 2, 4, 8, 16],
                     "input_len": 32, "output_len": 16,
                     "shape": "a model with a different step cost (qwen2.5-0.5b: 494 M parameters, 3.7x "
                              "smollm2-135m's), `parallel` 2 and 8, concurrency 1-16"},
}
#: Where the shown front is read, as shares of the full front's interactivity range (log-spaced,
#: as the development grid's reads: interactivity spans decades).
UNTUNED_AT = (0.10, 0.50, 0.90)
#: The error beyond which a point counts as off (issue 43's target).
OFF = 0.10


def _flag_at(front: Any, x: float) -> str | None:
    """The doubt (:meth:`infbench.analysis.frontier.Front.doubt`, at :data:`OFF`) of either
    shown-front point around interactivity ``x`` (None: both trusted)."""
    pts = front.front
    for a_, b_ in zip(pts, pts[1:], strict=False):
        if a_.x <= x <= b_.x:
            return front.doubt(a_, OFF) or front.doubt(b_, OFF)
    near = min(pts, key=lambda p: abs(p.x - x)) if pts else None
    return front.doubt(near, OFF) if near is not None else None


def evaluate_untuned(name: str, budget: str, env: dict[str, str], work: Path,
                     reuse: dict[str, Any] | None = None) -> dict[str, Any]:
    """Grid ``name`` of :data:`UNTUNED` measured in full (a live run, or ``reuse``'s stored rows)
    and searched by :func:`replay` at ``budget``. Returns: the cells measured and the order; the
    shown front's error (its measured and predicted points) against the full front at
    :data:`UNTUNED_AT` of the full front's interactivity range and at its peak (highest
    tok/s/device), each with the shown front's flag there; and ``met``: at most half the
    cells measured and every read within 10 % or flagged (issue 43, item 5)."""
    from infbench.analysis.frontier import fronts
    from infbench.data import metrics as M

    g = UNTUNED[name]
    n_cells = len(g["configs"]) * len(g["levels"])
    if reuse is not None:
        full_rows, full_s, full_date = kept_rows(reuse["full_rows"]), reuse["full_s"], reuse["full_date"]
    else:
        sweep = work / f"{name}.yaml"
        sweep.write_text(SWEEP.format(model=g["model"], levels=json.dumps(g["levels"]), input_len=g["input_len"],
                                      output_len=g["output_len"],
                                      configs=json.dumps([{"parallel": p} for p in g["configs"]]))
                         + "frontier_stop: false\n")
        _, full_s = run(work / f"{name}.db", sweep, env)
        full_rows, full_date = rows(work / f"{name}.db"), time.strftime("%Y-%m-%d")
    rp_rows, order, stop = replay(full_rows, budget)
    [ff] = fronts(full_rows)
    [fa] = fronts(rp_rows)
    lo, hi = ff.front[0].x, ff.front[-1].x
    reads = []
    for q in UNTUNED_AT:
        x = lo * (hi / lo) ** q
        yf, ya = ff.interpolate(x), fa.interpolate(x)
        err = None if yf is None or ya is None else abs(ya / yf - 1)
        reads.append({"at": q, "tok_s_per_user": x, "full": yf, "shown": ya, "error": err,
                      "flag": _flag_at(fa, x)})
    pf, pa = max(ff.front, key=lambda p: p.y), max(fa.front, key=lambda p: p.y)
    peak = {"full": pf.y, "full_config": pf.config, "shown": pa.y, "shown_config": pa.config,
            "shown_predicted": pa.predicted, "error": abs(pa.y / pf.y - 1),
            "flag": "predicted peak" if pa.predicted else None}
    cert = fa.certainty()
    # how often the predicted cells' nominal 90 % intervals (TPOT p50 and total tok/s) hold the
    # full grid's measurement of the same cell
    truth = {key(r): r.metrics for r in full_rows if r.ok}
    inside = checked = 0
    for r in rp_rows:
        tm = truth.get(key(r)) if r.status == "predicted" else None
        for m, v in ((M.TPOT.key, M.TPOT.value(tm, "p50")), (M.TOTAL_TOK_S.key, M.TOTAL_TOK_S.value(tm))):
            lo_, hi_ = ((r.field("interval") or {}).get(m) or [None, None])[:2]
            if v is not None and lo_ is not None and hi_ is not None:
                checked += 1
                inside += lo_ <= v <= hi_
    ok_points = [r for r in reads + [peak] if r["error"] is not None]
    within = all(r["error"] <= OFF or r["flag"] for r in ok_points) and len(ok_points) == len(reads) + 1
    return {"grid": name, **{k: g[k] for k in ("model", "configs", "levels", "input_len", "output_len", "shape")},
            "engine": "llama.cpp-server", "budget": budget, "cells": n_cells,
            "full_measured": sum(1 for r in full_rows if r.ok), "full_s": full_s,
            "measured": len(order), "measured_share": len(order) / n_cells, "order": order, "stopped": stop,
            "reads": reads, "peak": peak, "certainty": cert,
            "coverage": inside / checked if checked else None, "coverage_n": checked,
            "max_error": max(r["error"] for r in ok_points) if ok_points else None,
            "met": len(order) <= n_cells / 2 and within,
            "full_front": [[p.x, p.y, p.config] for p in ff.front],
            "shown_front": [[p.x, p.y, p.config, p.predicted] for p in fa.front],
            "full_rows": [{k: getattr(r, k) for k in KEPT} for r in full_rows],
            "date": time.strftime("%Y-%m-%d"), "full_date": full_date}


def untuned_main(names: list[str], budget: str, out: Path, reuse_full: bool) -> None:
    """Evaluate grids ``names`` (:func:`evaluate_untuned`) and store each under
    ``untuned[name]`` of ``out``, keeping the rest of the JSON."""
    import os

    kept = json.loads(out.read_text()) if out.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {**os.environ, "INFBENCH_HOME": os.environ.get("INFBENCH_HOME", str(t / "home"))}
        for name in names:
            prev = (kept.get("untuned") or {}).get(name) if reuse_full else None
            if reuse_full and prev is None:
                raise SystemExit(f"--reuse-full: no stored full grid for {name!r} in {out}")
            t0 = time.perf_counter()
            res = evaluate_untuned(name, budget, env, t, reuse=prev)
            kept.setdefault("untuned", {})[name] = res
            out.write_text(json.dumps(kept, indent=2) + "\n")  # each grid kept as soon as it is measured
            print(f"{name}: {res['measured']}/{res['cells']} measured, max error "
                  f"{res['max_error']:.3f}, met {res['met']} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(render(kept, "untuned"))


def render_untuned(d: dict[str, Any]) -> str:
    """The untuned grids' table (docs/benchmarks.md, variant ``untuned``)."""
    grids = d.get("untuned") or {}

    def cell(r: dict[str, Any]) -> str:
        if r["error"] is None:
            return "undefined"
        s = f"{100 * r['error']:.1f} %"
        return s + (f" (flagged: {r['flag']})" if r["flag"] else "")

    lines = ["| grid | shape | cells measured | stopped | error at 10 % | at 50 % | at 90 % | at the peak | "
             "intervals holding the truth | target |", "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for name, g in grids.items():
        e = [cell(r) for r in g["reads"]]
        cov = (f"{round(g['coverage'] * g['coverage_n'])} of {g['coverage_n']}" if g.get("coverage") is not None
               else "-")
        lines.append(f"| {name} ({g['model']}, {g['input_len']}/{g['output_len']}) | {g['shape']} | "
                     f"{g['measured']} of {g['cells']} ({100 * g['measured_share']:.0f} %) | {g['stopped']} | "
                     f"{' | '.join(e)} | {cell(g['peak'])} | {cov} | {'met' if g['met'] else 'missed'} |")
    notes = []
    for name, g in grids.items():
        pk = g["peak"]
        notes.append(f"* {name}: the full grid's peak {pk['full']:,.0f} tok/s/device at {pk['full_config']}; the "
                     f"shown front's {pk['shown']:,.0f} at {pk['shown_config']} "
                     f"({'predicted' if pk['shown_predicted'] else 'measured'}); picks "
                     f"{', '.join(f'parallel {p} c{c}' for p, c in g['order'])}; full grid measured "
                     f"{g['full_date']} in {g['full_s']:.0f} s."
                     + ("".join(f" Flag: {n}." for n in g["certainty"]["notes"])))
    met = [n for n, g in grids.items() if g["met"]]
    tail = [f"Target (at most half the cells measured; each read within 10 % or flagged): met on {len(met)} of "
            f"{len(grids)} grids."]
    for name, g in grids.items():
        off = [f"{int(100 * r['at'])} % of the range ({100 * r['error']:.1f} % off)" for r in g["reads"]
               if r["error"] is not None and r["error"] > OFF and not r["flag"]]
        if g["peak"]["error"] > OFF and not g["peak"]["flag"]:
            off.append(f"the peak ({100 * g['peak']['error']:.1f} % off)")
        if off:
            tail.append(f"Missed on {name}: unflagged at {', '.join(off)}.")
    return "\n".join(lines + [""] + notes + [""] + tail)


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
    ap.add_argument("--untuned", default=None, metavar="GRID[,GRID]|all",
                    help=f"evaluate the search on grids it was not tuned on ({', '.join(UNTUNED)}): each grid "
                    "measured in full, then the search replayed on it; stored under untuned[GRID]")
    a = ap.parse_args()
    if a.untuned:
        names = list(UNTUNED) if a.untuned == "all" else a.untuned.split(",")
        unknown = [n for n in names if n not in UNTUNED]
        if unknown:
            raise SystemExit(f"--untuned: unknown grid(s) {unknown}; known: {', '.join(UNTUNED)}")
        untuned_main(names, a.budget, a.out, a.reuse_full)
        return
    import os

    from infbench.analysis.frontier import fronts
    from infbench.data import metrics as M

    configs = json.dumps([{"parallel": p} for p in CONFIGS])
    levels = [int(x) for x in a.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {**os.environ, "INFBENCH_HOME": os.environ.get("INFBENCH_HOME", str(t / "home"))}
        sweep = t / "frontier.yaml"
        sweep.write_text(SWEEP.format(model=a.model, levels=json.dumps(levels), configs=configs, input_len=32,
                                      output_len=16))
        full_sweep = t / "full.yaml"   # the same cells, every one measured (no stop rule)
        full_sweep.write_text(sweep.read_text() + "frontier_stop: false\n")
        if a.reuse_full:
            prev = json.loads(a.out.read_text())
            prev = prev["runs"][a.as_run] if a.as_run else prev
            if prev["model"] != a.model or prev["levels"] != levels:
                raise SystemExit(f"--reuse-full: the stored run is {prev['model']} at {prev['levels']}, not "
                                 f"{a.model} at {levels}")
            full_rows, full_s = kept_rows(prev["full_rows"]), prev["full_s"]
            full_date = prev.get("full_date", prev["date"])
        else:
            _, full_s = run(t / "full.db", full_sweep, env)
            full_rows, full_date = rows(t / "full.db"), time.strftime("%Y-%m-%d")
        adaptive, adaptive_s = run(t / "adaptive.db", sweep, env, "--adaptive", a.budget)
        ad_rows = rows(t / "adaptive.db")
    truth = {key(r): r for r in full_rows if r.ok}
    [ff] = fronts(full_rows)
    lo, hi = ff.front[0].x, ff.front[-1].x
    at = [lo * (hi / lo) ** q for q in (0.25, 0.5, 0.75)]
    reads, fa = front_reads(ff, ad_rows, at)
    rp_rows, rp_order, rp_stop = replay(full_rows, a.budget)
    rp_reads, rp_front = front_reads(ff, rp_rows, at)
    pred = [r for r in ad_rows if r.status == "predicted"]
    inside, cells = 0, []
    checked = 0
    for r in pred:
        t_ = truth.get(key(r))
        if t_ is None:
            continue
        iv = (r.field("interval") or {})
        meas = {M.TPOT.key: M.TPOT.value(t_.metrics, "p50"), M.TOTAL_TOK_S.key: M.TOTAL_TOK_S.value(t_.metrics)}
        pr = {M.TPOT.key: M.TPOT.value(r.metrics, "p50"), M.TOTAL_TOK_S.key: M.TOTAL_TOK_S.value(r.metrics)}
        for m in ("tpot_s", "total_tok_s"):
            lo_, hi_ = (iv.get(m) or [None, None])
            if lo_ is None or meas[m] is None:
                continue
            checked += 1
            inside += lo_ <= meas[m] <= hi_
        cells.append({"parallel": key(r)[0], "concurrency": key(r)[1], "measured": meas, "predicted": pr,
                      "interval": {m: iv.get(m) for m in ("tpot_s", "total_tok_s")}})
    measured = sum(1 for r in ad_rows if r.ok)
    out = {"model": a.model, "engine": "llama.cpp-server", "configs": CONFIGS, "levels": levels,
           "input_len": 32, "output_len": 16, "budget": a.budget, "cells": len(levels) * len(CONFIGS),
           "measured": measured, "measured_share": measured / (len(levels) * len(CONFIGS)),
           "stopped": (adaptive.get("outcome") or {}).get("adaptive", {}).get("engines"),
           "full_s": full_s, "adaptive_s": adaptive_s, "time_saved": 1 - adaptive_s / full_s,
           "full_measured": len(truth), "reads": reads,
           "max_error": max((r["error"] for r in reads if r["error"] is not None), default=None),
           "coverage": inside / checked if checked else None, "coverage_n": checked,
           "adaptive_order": [key(r) for r in sorted((r for r in ad_rows if r.ok),
                                                     key=lambda r: r.started_at or 0)],
           "replay": {"order": rp_order, "stopped": rp_stop, "measured": len(rp_order), "reads": rp_reads,
                      "max_error": max((r["error"] for r in rp_reads if r["error"] is not None), default=None),
                      "front": [[p.x, p.y, p.config, p.predicted] for p in rp_front.front]},
           "full_front": [[p.x, p.y, p.config] for p in ff.front],
           "full_rows": [{k: getattr(r, k) for k in KEPT} for r in full_rows],
           "adaptive_front": [[p.x, p.y, p.config, p.predicted] for p in fa.front], "predicted_cells": cells,
           "date": time.strftime("%Y-%m-%d"), "full_date": full_date, "full_reused": a.reuse_full}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.as_run:
        kept = json.loads(a.out.read_text()) if a.out.exists() else {}
        kept.setdefault("runs", {})[a.as_run] = out
        a.out.write_text(json.dumps(kept, indent=2) + "\n")
    else:
        kept = json.loads(a.out.read_text()) if a.out.exists() else {}
        for k in ("runs", "untuned"):  # the other runs and the untuned grids stay as they are
            if k in kept:
                out[k] = kept[k]
        a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(render(out))


def render(d: dict[str, Any], variant: str | None = None) -> str:
    """The adaptive frontier search against the full grid (docs/benchmarks.md); ``variant``:
    the run stored under ``runs[variant]`` (``--as-run``) instead of the main one."""
    if variant == "untuned":
        return render_untuned(d)
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

