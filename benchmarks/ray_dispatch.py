"""Benchmark: what running a group through the Ray executor costs over running it in-process.

Starts a one-node Ray cluster on 127.0.0.1 (tests/support/ray_cluster.py; one raylet, so
groups run one after another as in-process) and runs the same sweep of G groups of one
tiny cell each (tiny-random-llama on llama.cpp, one dtype per group, batch 1, 16 tokens
in, 4 out), ``--repeat`` times alternately with the in-process executor and the Ray
executor (driver in this process, already connected), each with ``force``. The engine
work per group is a few tenths of a second, so the difference is the dispatch: fleet
detection (once per run), the task's scheduling, the ``infbench worker`` child process
on the node (Python start, imports, plugin detection) and streaming the cells back.

Reports per executor the median wall time of a run and per group, and the overhead per
group = (Ray - in-process) / G, plus the fleet detection time of a Ray run. One noisy
shared machine: compare the numbers of one run of this script.

    python benchmarks/ray_dispatch.py [--repeat 3] [--out benchmarks/results/ray_dispatch.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "core"), str(ROOT)]

from infbench.contract.manager import build_plugin_manager  # noqa: E402
from infbench.data import events as ev  # noqa: E402
from infbench.data.run import RunOptions  # noqa: E402
from infbench.data.schema import Sweep  # noqa: E402
from infbench.detect import detect  # noqa: E402
from infbench.execution.bookkeeping import provenance  # noqa: E402
from infbench.execution.executors.inprocess import InProcessExecutor  # noqa: E402
from infbench.plan import plan  # noqa: E402
from infbench.store import Store  # noqa: E402

DTYPES = ["f16", "q8_0", "f32", "q4_0", "bf16"]


def summary(res: dict) -> str:
    """The lines the script prints last (also docs/benchmarks.md's block)."""
    m, g = res["median_run_s"], res["median_per_group_s"]
    return "\n".join([
        f"median wall per run:  in-process {m['inprocess']:.3f} s   ray {m['ray']:.2f} s   ({res['groups']} groups)",
        f"per group:            in-process {g['inprocess']:.3f} s   ray {g['ray']:.2f} s",
        f"overhead per group:   {res['overhead_per_group_s']:.2f} s",
        f"fleet detection (one task per node, warm workers): {res['fleet_detect_s_median']:.2f} s"])


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's block from ray_dispatch.json (benchmarks/docs_numbers.py); variant
    ``reading``: the per-group overhead and the ratio in words."""
    if variant == "reading":
        return (f"- About {data['overhead_per_group_s']:.1f} s per group, almost all of it the `infbench worker` "
                f"child process on the node:\n  a fresh Python, infbench's imports and every plugin's detection, "
                f"before the group's\n  model loads. The fleet detection of a warm cluster took "
                f"{data['fleet_detect_s_median'] * 1e3:.0f} ms.\n"
                f"- The ratio of the two runs (about {data['ratio_ray_over_inprocess']:.0f}x) only says that this "
                f"sweep does no work; it is not\n  a figure for real sweeps.")
    return "\n".join(["```", f"$ python benchmarks/ray_dispatch.py --repeat {data['repeat']}", summary(data), "```"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ray_dispatch.json"))
    a = ap.parse_args()
    from infbench.execution.executors.ray import RayExecutor, detect_fleet
    from tests.support.ray_cluster import LocalRayCluster

    pm = build_plugin_manager()
    det = detect(pm)
    dev = det.devices[0]
    sweep = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=DTYPES, batch=[1], input_len=[16],
                  output_len=[4])
    p = plan(sweep, dev, pm)
    groups = len(p.groups)
    prov = provenance(det, pm)
    cluster = LocalRayCluster()
    walls: dict[str, list[float]] = {"inprocess": [], "ray": []}
    detect_s = []
    try:
        cluster.add_node()
        cluster.connect()
        # warm both paths once (dummy GGUFs on the node and here, imports, Ray workers)
        InProcessExecutor(pm, prov).run(p, Store(cluster.root / "warm-in.db"), RunOptions(force=True), ev.ignore)
        RayExecutor(pm, prov).run(p, Store(cluster.root / "warm-ray.db"), RunOptions(force=True), ev.ignore)
        for i in range(a.repeat):
            for name in ("inprocess", "ray"):
                store = Store(cluster.root / f"{name}-{i}.db")
                t0 = time.perf_counter()
                if name == "ray":
                    fleet = detect_fleet()
                    detect_s.append(time.perf_counter() - t0)
                    s = RayExecutor(pm, prov, fleet=fleet).run(p, store, RunOptions(force=True), ev.ignore)
                else:
                    s = InProcessExecutor(pm, prov).run(p, store, RunOptions(force=True), ev.ignore)
                walls[name].append(time.perf_counter() - t0)
                assert len(s.ok) == groups, (name, [r.error for r in s.failed])
                print(f"{name:9} run {i}: {walls[name][-1]:.2f} s", flush=True)
    finally:
        cluster.shutdown()
    med = {k: statistics.median(v) for k, v in walls.items()}
    res = {"groups": groups, "cells": len(p.cells), "repeat": a.repeat, "walls_s": walls,
           "median_run_s": med, "median_per_group_s": {k: v / groups for k, v in med.items()},
           "overhead_per_group_s": (med["ray"] - med["inprocess"]) / groups,
           "fleet_detect_s_median": statistics.median(detect_s),
           "ratio_ray_over_inprocess": med["ray"] / med["inprocess"]}
    print(summary(res))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
