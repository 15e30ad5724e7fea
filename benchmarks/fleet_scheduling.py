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

Second part (``makespan``): how long LLM-Inference-Bench's grid takes on a fleet of one
device type, with whole groups (one task per group, the executor before group splitting)
and with the driver's splitting (:class:`infbench.execution.executors.fleet.Splitter`), simulated in
simulated time by :func:`infbench.execution.executors.fleet.simulate` (the driver's own scheduler and
splitter): per device type of the published results, 8, 64 and 1,000 nodes; cell times
from the calibrated prediction (:func:`lib_groups`), model loads from the weights' size
over :data:`DISK_BYTES_S` plus the worker's start; the splitter sees each cell's time
with a log-normal error of the type's held-out calibration error. Reported: makespan /
ideal (ideal = total cell time / nodes + one mean load, the issue's definition),
makespan / bound (bound = the larger of the ideal and the longest cell after its group's
load: no schedule of indivisible cells beats it) and node utilisation (node-seconds busy
loading or measuring / nodes x makespan).

    python benchmarks/fleet_scheduling.py [--part all|driver|makespan] [--nodes 10,100,1000,4000]
        [--outputs 1,3,13] [--fleet 8,64,1000] [--out benchmarks/results/fleet_scheduling.json]

``--part`` runs one part and keeps the other's figures in ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from infbench.contract.manager import build_plugin_manager  # noqa: E402
from infbench.data.run import RunOptions  # noqa: E402
from infbench.data.schema import DeviceInfo, Sweep  # noqa: E402
from infbench.detect import detect  # noqa: E402
from infbench.execution.bookkeeping import provenance  # noqa: E402
from infbench.execution.executors.fleet import (  # noqa: E402
    WORKER_START_S,
    Estimates,
    Fleet,
    NodeReport,
    Progress,
    Scheduler,
    WorkItem,
    plan_fleet,
    simulate,
)

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


# -- makespan of LLM-Inference-Bench's grid on simulated fleets, with and without splitting ---------------

#: The rate (bytes/s) at which a node reads a model's weights in the simulation: a stated
#: assumption (a node-local NVMe drive, or a parallel file system's share per node).
DISK_BYTES_S = 2e9
#: Fleet sizes simulated per device type.
NODE_COUNTS = (8, 64, 1000)
LIB_CSV = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "lib_all_results.csv"
LIB_FITS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "lib_validation.json"


def lib_groups(pm, csv: Path = LIB_CSV, fits: Path = LIB_FITS) -> dict[str, dict]:
    """LLM-Inference-Bench's grid per device type, with each cell's time from the calibrated
    prediction: ``{published device name: {"device", "gpus", "error", "items": [WorkItem],
    "cell_s": {spec_hash: s}, "load_s": {item key: s}}}``.

    A device type is one published hardware name; a group one (model, framework, tensor
    parallel size) of it, its cells the published (batch, input, output) points, smallest
    first. A cell's time is the batch's predicted duration plus one warm-up pass (2 output
    tokens), predicted with the efficiencies fitted on that (device, framework) by
    ``benchmarks/lib_validation.py`` (``lib_validation.json``). A node holds as many devices
    as the type's largest tensor-parallel group. Devices and models the prediction cannot
    cover are left out (with the count of cells left out).
    """
    from infbench.analysis import predict as pr
    from infbench.data.groups import Group
    from infbench.data.models import resolve
    from infbench.data.stored import StoredCell
    from infbench.execution.executors.fleet import weights_bytes
    from infbench.report.lib_import import published_cells, read_lib_csv

    fitted = {(g["device"], g["engine"]): g for g in json.loads(fits.read_text())["groups"] if g.get("efficiency")}
    results, _ = published_cells(read_lib_csv(csv), None, pm)
    by_type: dict[str, list] = {}
    for r in results:
        by_type.setdefault(r.device.properties.get("published_name") or r.device.model, []).append(r)
    out: dict[str, dict] = {}
    for label, rs in sorted(by_type.items()):
        gpus = max(r.cell.tensor_parallel_size for r in rs)
        d0 = rs[0].device
        device = d0.model_copy(update={"count": gpus})
        try:
            limits = pr.limits_for_id(pm, d0.properties["catalog_id"])
        except Exception as exc:  # noqa: BLE001 - a device the catalog cannot predict
            out[label] = {"skipped": f"{type(exc).__name__}: {exc}", "cells": len(rs)}
            continue
        groups: dict[tuple, list] = {}
        left_out = 0
        for r in rs:
            fam = pr.engine_family(r.cell.engine)
            if (label, fam) not in fitted:
                left_out += 1
                continue
            try:
                resolve(r.cell.model)
            except Exception:  # noqa: BLE001 - a model the zoo lacks
                left_out += 1
                continue
            groups.setdefault((r.cell.model, r.cell.engine, r.cell.dtype, r.cell.tensor_parallel_size), []).append(r)
        if not groups:
            out[label] = {"skipped": "no predictable group", "cells": len(rs)}
            continue
        items, cell_s, load_s, errors = [], {}, {}, []
        for (model, engine, dtype, tp), grs in sorted(groups.items()):
            eff = pr.Efficiency.from_dict(fitted[(label, pr.engine_family(engine))]["efficiency"])
            errors.append(fitted[(label, pr.engine_family(engine))]["error"])
            pts = pr.measured_points([StoredCell.from_result(r, status="ok") for r in grs])
            if len(pts) != len(grs):
                left_out += len(grs)
                continue
            pred = pr.predict_points(pts, limits, eff)["duration_s"]
            warm = pr.predict_points([{**p, "n_out": 2} for p in pts], limits, eff)["duration_s"]
            cells = []
            for r, t, w in zip(grs, pred, warm, strict=True):
                if not (t > 0 and w > 0) or r.cell.spec_hash() in cell_s:
                    continue  # unpredictable, or the same cell again (llama-bench rows differing in n_batch only)
                cells.append(r.cell)
                cell_s[r.cell.spec_hash()] = float(t + w)
            cells.sort(key=lambda c: (c.batch, c.input_len, c.output_len))
            g = Group(resolve(model), engine, dtype, tp, cells)
            it = WorkItem(len(items), device, g, list(cells))
            items.append(it)
            load_s[it.key] = WORKER_START_S + (weights_bytes(g) or 0.0) / DISK_BYTES_S
        # no schedule beats its longest cell after its group's load: cells are indivisible
        bound = max(load_s[it.key] + max(cell_s[c.spec_hash()] for c in it.cells) for it in items if it.cells)
        out[label] = {"device": device, "gpus": gpus, "items": [it for it in items if it.cells], "cell_s": cell_s,
                      "load_s": load_s, "bound_s": bound, "error": float(statistics.median(errors)),
                      "left_out": left_out}
    return out


def fake_nodes(device: DeviceInfo, n: int) -> list[NodeReport]:
    """``n`` nodes holding ``device`` (Ray ``GPU`` resources = its count for a GPU)."""
    res = {"CPU": 64.0, **({"GPU": float(device.count)} if device.kind == "gpu" else {})}
    return [NodeReport(node_id=f"{i:056x}", hostname=f"node{i:05d}", devices=[device], resources=dict(res))
            for i in range(n)]


def makespan(grid: dict, nodes: int, split: bool, seed: int = 0) -> dict:
    """One simulated run of a device type's grid on ``nodes`` nodes
    (:func:`infbench.execution.executors.fleet.simulate`).

    The splitter does not know the true times: it sees each cell's true time times a
    log-normal error of the type's held-out calibration error (seeded), a load guess of
    :data:`infbench.execution.executors.fleet.WORKER_START_S` plus the weights at the fleet module's own read
    rate until it observes one, and learns from each finished cell and load as the driver does.
    """
    import copy as _copy

    rng = np.random.default_rng(seed)
    items = [_copy.copy(it) for it in grid["items"]]
    for it in items:
        it.cells, it.progress = list(it.cells), Progress()
    true_cell = grid["cell_s"]
    sigma = math.log1p(grid["error"])
    noisy = {h: t * float(np.exp(rng.normal(0.0, sigma))) for h, t in true_cell.items()}
    loads = {it.key: grid["load_s"][it.key] for it in items}
    group_load = {_gk(it): loads[it.key] for it in items}
    est = Estimates(predict=lambda it, c: noisy[c.spec_hash()])
    fleet = Fleet.from_reports(fake_nodes(grid["device"], nodes))
    t0 = time.perf_counter()
    r = simulate(fleet, items, lambda it, c: true_cell[c.spec_hash()], lambda it: group_load[_gk(it)], split=split,
                 estimates=est)
    wall = time.perf_counter() - t0
    mean_load = statistics.mean(grid["load_s"].values())
    ideal = r.cell_s / nodes + mean_load
    bound = max(ideal, grid["bound_s"])
    return {"nodes": nodes, "split": split, "makespan_s": r.makespan_s, "ideal_s": ideal, "bound_s": bound,
            "ratio": r.makespan_s / ideal, "ratio_bound": r.makespan_s / bound,
            "utilisation": r.busy_s / (nodes * r.makespan_s),
            "cell_utilisation": r.cell_s / (nodes * r.makespan_s), "loads": r.loads, "splits": r.splits,
            "cells": len(r.ran), "longest_cell_s": max(true_cell.values()), "sim_wall_s": wall}


def _gk(it: WorkItem) -> tuple:
    g = it.group
    return (g.model.name, g.engine, g.dtype, g.tensor_parallel_size)


def run_makespan(pm, node_counts=NODE_COUNTS) -> dict:
    """Every device type of the grid at every fleet size, whole groups and split."""
    grids = lib_groups(pm)
    types = []
    print(f"{'device type':22} {'gpus':>4} {'groups':>6} {'cells':>5} {'nodes':>5} {'whole':>6} {'split':>6} "
          f"{'util whole':>10} {'util split':>10} {'splits':>6}")
    for label, g in grids.items():
        if "skipped" in g:
            types.append({"type": label, "skipped": g["skipped"], "cells": g["cells"]})
            print(f"{label:22} skipped: {g['skipped']}")
            continue
        runs = []
        for n in node_counts:
            whole, split = makespan(g, n, False), makespan(g, n, True)
            runs += [whole, split]
            print(f"{label:22} {g['gpus']:>4} {len(g['items']):>6} {len(g['cell_s']):>5} {n:>5} "
                  f"{whole['ratio']:>6.2f} {split['ratio']:>6.2f} {whole['utilisation']:>10.2f} "
                  f"{split['utilisation']:>10.2f} {split['splits']:>6}", flush=True)
        types.append({"type": label, "gpus": g["gpus"], "groups": len(g["items"]), "cells": len(g["cell_s"]),
                      "left_out": g["left_out"], "calibration_error": g["error"],
                      "cell_s_total": sum(g["cell_s"].values()), "load_s_mean": statistics.mean(g["load_s"].values()),
                      "runs": runs})
    return {"disk_bytes_s": DISK_BYTES_S, "worker_start_s": WORKER_START_S, "node_counts": list(node_counts),
            "types": types}


def one(nodes: int, outputs: int, pm, prov: dict) -> dict:
    from infbench.execution.executors.ray import _spec_json

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


MAKESPAN_VARIANTS = ("makespan", "makespan_reading")
_render_driver = render


def render(data: dict, variant: str | None = None) -> str:  # noqa: F811 - the driver part's render, extended
    """docs/benchmarks.md's blocks from fleet_scheduling.json: the driver's cost (default and
    ``reading``, :func:`_render_driver`), or the simulated makespan table (``makespan``) and
    what it says (``makespan_reading``)."""
    if variant not in MAKESPAN_VARIANTS:
        return _render_driver(data, variant)
    m = data["makespan"]
    types = [t for t in m["types"] if "runs" in t]
    if variant == "makespan":
        out = ["| device type | groups | cells | nodes | whole groups: makespan / ideal | split: makespan / ideal | "
               "split: makespan / bound | utilisation whole / split | splits |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for t in types:
            for w, sp in zip(t["runs"][::2], t["runs"][1::2], strict=True):
                out.append(f"| {t['type']} | {t['groups']} | {t['cells']} | {w['nodes']:,} | {w['ratio']:.2f} | "
                           f"{sp['ratio']:.2f} | {sp['ratio_bound']:.2f} | {w['utilisation']:.2f} / "
                           f"{sp['utilisation']:.2f} | {sp['splits']} |")
        skipped = [f"{t['type']} ({t['skipped'].splitlines()[0]})" for t in m["types"] if "skipped" in t]
        if skipped:
            out.append("")
            out.append("Left out: " + "; ".join(skipped) + ".")
        return "\n".join(out)
    at = {n: [(t, t["runs"][2 * i], t["runs"][2 * i + 1]) for t in types] for i, n in enumerate(m["node_counts"])}
    mid = 64 if 64 in at else m["node_counts"][len(m["node_counts"]) // 2]
    met = [t["type"] for t, _, sp in at[mid] if sp["ratio"] <= 1.15]
    bound_ok = [t["type"] for t, _, sp in at[mid] if sp["ratio_bound"] <= 1.15]
    worst_b = max(sp["ratio_bound"] for _, _, sp in at[mid])
    over = [(t["type"], sp["bound_s"] / sp["ideal_s"]) for t, _, sp in at[mid] if sp["bound_s"] > 1.15 * sp["ideal_s"]]
    small = min(m["node_counts"])
    whole_s = [w["ratio"] for _, w, _ in at[small]]
    split_s = [sp["ratio"] for _, _, sp in at[small]]
    return (f"- **{mid} nodes**: the issue's target (makespan within 15 % of total cell time / nodes + one load) "
            f"is met for {len(met)} of {len(types)} device types{(' (' + ', '.join(met) + ')') if met else ''}. For "
            f"{len(over)} types the grid itself forbids it: one cell after its group's load lasts "
            f"{min(x for _, x in over):.1f} to {max(x for _, x in over):.1f} times that ideal, and cells are "
            f"indivisible. Against that bound the split schedule ends within "
            f"{100 * (worst_b - 1):.0f} % on every type ({len(bound_ok)} of {len(types)} within 15 %).\n"
            f"- **{small} nodes**: whole groups end at {min(whole_s):.2f} to {max(whole_s):.2f} x ideal, split "
            f"groups at {min(split_s):.2f} to {max(split_s):.2f} x.\n"
            f"- Model loads: the weights over {m['disk_bytes_s'] / 1e9:g} GB/s plus {m['worker_start_s']:g} s of "
            f"worker start (stated assumptions, not measurements); utilisation counts loads as busy. The "
            f"splitter's view of each cell errs by the type's held-out calibration error, "
            f"{100 * min(t['calibration_error'] for t in types):.0f} to "
            f"{100 * max(t['calibration_error'] for t in types):.0f} % (median over its frameworks).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("all", "driver", "makespan"), default="all")
    ap.add_argument("--nodes", default="10,100,1000,4000")
    ap.add_argument("--outputs", default="1,3,13")
    ap.add_argument("--fleet", default=",".join(map(str, NODE_COUNTS)), help="fleet sizes of the makespan part")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/fleet_scheduling.json"))
    a = ap.parse_args()
    pm = build_plugin_manager()
    data = json.loads(a.out.read_text()) if a.out.exists() else {}
    if a.part in ("all", "driver"):
        prov = provenance(detect(pm), pm)
        rows = []
        print(HEADER)
        for n in [int(x) for x in a.nodes.split(",")]:
            for k in [int(x) for x in a.outputs.split(",")]:
                r = one(n, k, pm, prov)
                rows.append(r)
                print(line(r), flush=True)
        data.update(rows=rows, provenance_bytes=len(json.dumps(prov, default=str)))
    if a.part in ("all", "makespan"):
        data["makespan"] = run_makespan(pm, tuple(int(x) for x in a.fleet.split(",")))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
