"""Benchmark: the Ray driver's own cost on a large fleet, without Ray.

Simulates fleet detection results (``NodeReport``s like the detection task returns, each
carrying a copy of this host's real provenance), then times what the driver of
``infbench run --executor ray`` does before and while tasks run:

* ``fleet_s``: grouping the node reports into device types (``Fleet.from_reports``);
* ``plan_s``: selecting every type and planning the sweep once per type
  (``plan_fleet``: the real ``infbench.plan.plan`` with the real plugins);
* ``items_s``: the work items (pending cells per group) and the worker spec JSON of
  every group (what the driver sends to a node);
* ``schedule_s``: the scheduler handing every group to a node of its type, with tasks
  completing one by one in start order (each completion releases its node and assigns
  again) until all are done: the driver's loop without Ray;

and the driver's memory: the node reports it keeps (``nodes MiB``), the ``tracemalloc``
peak of all of the above (reports included), and the resident set size growth
(``ru_maxrss``, only the part above the process's earlier peak). The fleet mixes four
device types (H100 x8, A100 x4, MI300X x8 GPU nodes with Ray ``GPU`` resources, and
CPU-only nodes). The grid is nodes x cells; the cells grow with more output lengths per group (groups stay ~160).

    python benchmarks/fleet_scheduling.py [--nodes 10,100,1000,4000] [--outputs 1,3,13]
        [--out benchmarks/results/fleet_scheduling.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from infbench.detect import detect  # noqa: E402
from infbench.fleet import Fleet, NodeReport, Scheduler, WorkItem, plan_fleet  # noqa: E402
from infbench.plugins import build_plugin_manager  # noqa: E402
from infbench.run import RunOptions, provenance  # noqa: E402
from infbench.schema import DeviceInfo, Sweep  # noqa: E402

TYPES = [  # (device, Ray resources, share of the nodes)
    (DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=8, memory_bytes=80 * 2**30,
                properties={"compute_capability": "9.0"}), {"CPU": 96, "GPU": 8}, 0.4),
    (DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA A100-SXM4-40GB", count=4, memory_bytes=40 * 2**30,
                properties={"compute_capability": "8.0"}), {"CPU": 64, "GPU": 4}, 0.3),
    (DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI300X", count=8, memory_bytes=192 * 2**30,
                properties={"gfx_version": "gfx942"}), {"CPU": 96, "GPU": 8}, 0.2),
    (DeviceInfo(vendor="cpu", kind="cpu", model="Fake Xeon 8480+", count=2, memory_bytes=512 * 2**30,
                properties={"isa_flags": ["avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16", "f16c"]}),
     {"CPU": 112}, 0.1),
]
MODELS = ["llama-2-7b", "llama-3-8b", "mistral-7b", "qwen-2-7b", "llama-3.1-8b", "qwen3-8b", "qwen3-14b",
          "smollm2-135m", "qwen2.5-0.5b", "tinyllama-1.1b"]


def fake_reports(n: int, prov: dict) -> list[NodeReport]:
    """``n`` node reports, device types in the proportions of :data:`TYPES`."""
    out = []
    for i in range(n):
        x, acc, k = (i + 0.5) / n, 0.0, 0
        while k < len(TYPES) - 1 and x > acc + TYPES[k][2]:
            acc += TYPES[k][2]
            k += 1
        dev, res, _ = TYPES[k]
        host = f"node{i:05d}"
        p = copy.deepcopy(prov)
        p["host"] = host
        out.append(NodeReport(node_id=f"{i:056x}", hostname=host, ip=f"127.0.{i // 250}.{i % 250 + 1}",
                              devices=[dev], resources=dict(res), infbench_version=prov["infbench_version"],
                              schema_version=prov["schema_version"], provenance=p))
    return out


def sweep(outputs: int) -> Sweep:
    """~40 groups per type (10 models x 2 dtypes x tp 1, 2), 20 x ``outputs`` cells each."""
    return Sweep(models=MODELS, engines=["vllm"], dtypes=["bfloat16", "float16"], tensor_parallel_size=[1, 2],
                 batch=[1, 4, 16, 64, 256], input_len=[128, 512, 1024, 2048],
                 output_len=[128 * (k + 1) for k in range(outputs)])


def one(nodes: int, outputs: int, pm, prov: dict) -> dict:
    from infbench.executors.ray import _spec_json

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    reports = fake_reports(nodes, prov)  # what the detection tasks return: kept by the driver for the run
    reports_mib = tracemalloc.get_traced_memory()[0] / 2**20
    t0 = time.perf_counter()
    fleet = Fleet.from_reports(reports)
    t1 = time.perf_counter()
    plans = plan_fleet(sweep(outputs), fleet.select("all"), pm)
    t2 = time.perf_counter()
    items: list[WorkItem] = []
    for p in plans:
        for g in p.groups:
            items.append(WorkItem(len(items), p.device, g, list(g.cells)))
    opts = RunOptions()
    specs = [_spec_json(it, opts) for it in items]
    t3 = time.perf_counter()
    sched = Scheduler(fleet, items)
    running: list[WorkItem] = []
    assigned = 0
    peak_running = 0
    while sched.pending() or running:
        got = sched.assign()
        assigned += len(got)
        running += [it for it, _ in got]
        peak_running = max(peak_running, len(running))
        if running:
            sched.release(running.pop(0))
    t4 = time.perf_counter()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cells = sum(len(p.cells) for p in plans)
    return {"nodes": nodes, "types": len(fleet.types), "cells": cells, "groups": len(items),
            "spec_bytes": sum(len(s) for s in specs), "assigned": assigned, "peak_running": peak_running,
            "fleet_s": t1 - t0, "plan_s": t2 - t1, "items_s": t3 - t2, "schedule_s": t4 - t3,
            "driver_s": t4 - t0, "reports_mib": reports_mib, "tracemalloc_peak_mib": peak / 2**20,
            "rss_growth_mib": (rss1 - rss0) / 1024}


HEADER = (f"{'nodes':>6} {'cells':>7} {'groups':>6} {'fleet s':>8} {'plan s':>8} {'items s':>8} {'sched s':>8} "
          f"{'total s':>8} {'nodes MiB':>9} {'peak MiB':>9} {'RSS+ MiB':>9}")


def line(r: dict) -> str:
    """One printed row (times in s, memory in MiB)."""
    return (f"{r['nodes']:>6} {r['cells']:>7} {r['groups']:>6} {r['fleet_s']:>8.3f} {r['plan_s']:>8.3f} "
            f"{r['items_s']:>8.3f} {r['schedule_s']:>8.3f} {r['driver_s']:>8.3f} {r['reports_mib']:>9.1f} "
            f"{r['tracemalloc_peak_mib']:>9.1f} {r['rss_growth_mib']:>9.1f}")


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's block from fleet_scheduling.json (benchmarks/docs_numbers.py), or
    (``reading``) the figures read off it: the 1,000-node / ~10,000-cell row, the planning
    cost per cell (slope between the smallest and largest sweep, averaged over fleets), the
    grouping cost per node, the scheduling range, and memory per cell and per node."""
    rows = data["rows"]
    if variant == "reading":
        mid = min(rows, key=lambda r: abs(r["nodes"] - 1000) + abs(r["cells"] - 10000))
        lo, hi = min(r["cells"] for r in rows), max(r["cells"] for r in rows)

        def mean(key: str, cells: int) -> float:
            xs = [r[key] for r in rows if r["cells"] == cells]
            return sum(xs) / len(xs)

        per_cell_us = 1e6 * (mean("plan_s", hi) - mean("plan_s", lo)) / (hi - lo)
        big = max(rows, key=lambda r: r["nodes"])
        per_node_us = 1e6 * big["fleet_s"] / big["nodes"]
        sched = [r["schedule_s"] * 1e3 for r in rows]
        small = [r for r in rows if r["nodes"] == min(x["nodes"] for x in rows)]
        kib_cell = 1024 * (max(small, key=lambda r: r["cells"])["tracemalloc_peak_mib"]
                           - min(small, key=lambda r: r["cells"])["tracemalloc_peak_mib"]) / (hi - lo)
        kib_node = 1024 * big["reports_mib"] / big["nodes"]
        return (f"- **{mid['cells']:,} cells over {mid['nodes']:,} nodes**: {mid['driver_s']:.2f} s of driver time "
                f"and a\n  {mid['tracemalloc_peak_mib']:.1f} MiB peak, of which {mid['reports_mib']:.1f} MiB are the "
                f"{mid['nodes']:,} node reports.\n"
                f"- Time grows with the cells, not the nodes: planning is ~{per_cell_us:.0f} us per cell (`plan()`: "
                f"cell\n  models, ids, validation), linear ({mean('plan_s', lo):.2f} s for {lo:,} cells, "
                f"{mean('plan_s', hi):.1f} s for {hi:,}, averaged over the fleets).\n"
                f"  Grouping the reports into device types is ~{per_node_us:.1f} us per node "
                f"({big['fleet_s'] * 1e3:.0f} ms for\n  {big['nodes']:,}). Scheduling {rows[0]['groups']} groups takes "
                f"{min(sched):.0f} to {max(sched):.0f} ms at every fleet size.\n"
                f"- Memory grows linearly with both: ~{kib_cell:.1f} KiB per planned cell and ~{kib_node:.0f} KiB per "
                f"node;\n  the largest sweep over {big['nodes']:,} nodes peaks at "
                f"{max(r['tracemalloc_peak_mib'] for r in rows):.1f} MiB.")
    return "\n".join(["```", "$ python benchmarks/fleet_scheduling.py", HEADER, *map(line, data["rows"]), "```"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="10,100,1000,4000")
    ap.add_argument("--outputs", default="1,3,13")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/fleet_scheduling.json"))
    a = ap.parse_args()
    pm = build_plugin_manager()
    prov = provenance(detect(pm), pm)
    rows = []
    print(HEADER)
    for n in [int(x) for x in a.nodes.split(",")]:
        for k in [int(x) for x in a.outputs.split(",")]:
            r = one(n, k, pm, prov)
            rows.append(r)
            print(line(r), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"rows": rows, "provenance_bytes": len(json.dumps(prov, default=str))}, indent=2))


if __name__ == "__main__":
    main()
