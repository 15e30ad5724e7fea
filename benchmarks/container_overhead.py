"""Benchmark: does running in the worker container change the numbers, and what does it cost?

Runs the same sweep (default: the `quick` preset, 6 cells of SmolLM2-135M on llama.cpp)
``--repeat`` times alternately in-process (``--executor inprocess``) and in the CPU worker image
(``--executor container``), each into its own store, and reports per cell the ratio
container / in-process of the medians of TTFT p50, TPOT p50 and output tok/s over the
repeats, with their geometric means, plus the wall time of each ``infbench run`` (the
container's fixed cost: start, worker start-up, plugin loading). Ratios from one run of
this script, on one noisy shared machine, are what to compare; not absolute times.

Needs a Docker engine and the image ``infbench/cpu-llamacpp:<version>``
(``containers/README.md``).

    python benchmarks/container_overhead.py [--repeat 3] [--out benchmarks/results/container_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEYS = {"ttft_p50_s": ("ttft_s", "p50"), "tpot_p50_s": ("tpot_s", "p50"), "output_tok_s": ("output_tok_s", None)}


def run(runtime: str, store: Path, home: Path) -> tuple[float, list[dict]]:
    """One `infbench run --json` with ``runtime``; returns (wall s, cells)."""
    t0 = time.perf_counter()
    executor = {"none": "inprocess", "docker": "container"}[runtime]
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "run", "--executor", executor, "--store", str(store),
                        "--force", "--json"], capture_output=True, text=True,
                       env={**os.environ, "INFBENCH_HOME": str(home)}, timeout=1800)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"infbench run --executor {executor} failed:\n{p.stderr[-3000:]}")
    return wall, json.loads(p.stdout)["cells"]


def value(cell: dict, key: str) -> float:
    name, stat = KEYS[key]
    v = cell["metrics"][name]
    return v[stat] if stat else v


def table(result: dict) -> str:
    """What the script prints: per cell the ratios, their geometric means, the wall times."""
    lines = [f"{'cell':<16}" + "".join(f"{k:>16}" for k in KEYS)]
    for c in result["cells"]:
        lines.append(f"{c['cell']:<16}" + "".join(f"{c['ratio_container_over_in_process'][k]:>16.3f}" for k in KEYS))
    lines.append(f"{'geomean':<16}" + "".join(f"{result['geomean_ratio'][k]:>16.3f}" for k in KEYS))
    lines.append(f"wall s (median of {result['repeat']}): in-process {result['wall_s_median']['none']:.1f}, "
                 f"container {result['wall_s_median']['docker']:.1f}")
    return "\n".join(lines)


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's figures from container_overhead.json (benchmarks/docs_numbers.py):
    the printed table (default) or the reading (``reading``)."""
    if variant == "reading":
        r = [v for c in data["cells"] for v in c["ratio_container_over_in_process"].values()]
        g = data["geomean_ratio"]
        spread = max(abs(v - 1) for v in g.values())
        fixed = data["wall_s_median"]["docker"] - data["wall_s_median"]["none"]
        return (f"- The per-cell ratios scatter between {min(r):.2f} and {max(r):.2f}, and the geometric\n"
                f"  means are within {100 * spread:.0f} % of 1 (TTFT {g['ttft_p50_s']:.3f}, "
                f"TPOT {g['tpot_p50_s']:.3f}, "
                f"throughput {g['output_tok_s']:.3f}).\n"
                f"- The container's fixed cost is about {fixed:.1f} s per `infbench run` (difference of the median "
                f"wall times):\n  starting the container, the worker's Python start-up and plugin loading.")
    return "\n".join(["```", f"$ python benchmarks/container_overhead.py --repeat {data['repeat']}", table(data),
                      "```"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/container_overhead.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        walls: dict[str, list[float]] = {"none": [], "docker": []}
        vals: dict[str, dict[str, dict[str, list[float]]]] = {"none": {}, "docker": {}}
        labels: dict[str, str] = {}
        run("none", Path(tmp) / "warm.db", home)          # dummy GGUF written once, CPU limits measured
        for i in range(a.repeat):
            for rt in ("none", "docker") if i % 2 == 0 else ("docker", "none"):
                wall, cells = run(rt, Path(tmp) / f"{rt}.db", home)
                walls[rt].append(wall)
                for c in cells:
                    labels[c["cell_id"]] = f"b{c['spec']['batch']} i{c['spec']['input_len']} o{c['spec']['output_len']}"
                    for k in KEYS:
                        vals[rt].setdefault(c["cell_id"], {}).setdefault(k, []).append(value(c, k))
    cells_out = []
    for cid in sorted(labels, key=labels.get):
        ratios = {k: statistics.median(vals["docker"][cid][k]) / statistics.median(vals["none"][cid][k]) for k in KEYS}
        cells_out.append({"cell_id": cid, "cell": labels[cid], "ratio_container_over_in_process": ratios})
    geo = {k: math.exp(statistics.fmean(math.log(c["ratio_container_over_in_process"][k]) for c in cells_out))
           for k in KEYS}
    result = {"repeat": a.repeat, "cells": cells_out, "geomean_ratio": geo,
              "wall_s_median": {rt: statistics.median(w) for rt, w in walls.items()},
              "wall_s": walls}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(table(result))

if __name__ == "__main__":
    main()
