"""Benchmark: infbench's own cost around the engine, and the saving from loading a model
once per group.

1. Harness overhead per cell: for real llama.cpp and transformers cells, the time the
   harness spends outside the engine's compute calls = the cell's measured wall time
   (``CellResult.wall_s``: from after the warm-up to the derived metrics; power, telemetry
   and contention monitors started and stopped inside it) - engine time, plus the SQLite
   write of the cell with all its raw records. Prompt synthesis and the warm-up come
   before that interval and are not counted. ``engine_s`` is the time inside
   ``llama_decode`` + greedy argmax (llama.cpp) or inside ``generate()`` (transformers).
2. Load once per group: N cells of one model run with one ``start()`` versus a
   ``start()``/``stop()`` per cell; the ratio of total times is the saving.

Ratios are compared within one run (the machine is shared and noisy). Run it under the
shared lock:

    python benchmarks/harness_overhead.py --reps 3 \
        --out benchmarks/results/harness_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from infbench.engines.launch import launch
from infbench.measure.cell import measure_cell
from infbench.measure.contention import wait_for_quiet
from infbench.measure.power import device_power_sampler as power_sampler
from infbench.models import resolve
from infbench.plan import Group
from infbench.platforms.cpu import cpu_device
from infbench.plugins import build_plugin_manager
from infbench.run import RunOptions
from infbench.schema import Cell
from infbench.store import Store


def overhead(engine_name: str, model: str, dtype: str, cells: list[tuple[int, int, int]], reps: int):
    pm = build_plugin_manager()
    dev = cpu_device()
    g = Group(resolve(model), engine_name, dtype, 1)
    eng = launch(pm, engine_name, dev, {})
    eng.start(g)
    sampler = power_sampler(pm, dev)
    store = Store(Path(tempfile.mkdtemp()) / "bench.db")
    run_id = store.begin_run({})
    rows = []
    try:
        for b, i, o in cells:
            c = Cell(model=g.model.name, engine=engine_name, dtype=dtype, batch=b, input_len=i, output_len=o)
            per = []
            for _ in range(reps):
                wait_for_quiet(30)  # start in a quiet second of the shared machine, where one comes
                r = measure_cell(eng, g, c, dev, sampler, RunOptions())
                t = time.perf_counter()
                store.save_cell(run_id, r)
                save_s = time.perf_counter() - t
                assert r.status == "ok", r.error
                per.append((r.wall_s, r.engine_s, save_s, (r.metrics.get("contention") or {}).get("other_cpu_cores")))
            wall = statistics.median(p[0] for p in per)
            eng_s = statistics.median(p[1] for p in per)
            save = statistics.median(p[2] for p in per)
            over = wall - eng_s + save
            others = [p[3] for p in per if p[3] is not None]
            rows.append({"engine": engine_name, "model": model, "batch": b, "input_len": i, "output_len": o,
                         "engine_s": eng_s, "harness_s": over, "store_write_s": save,
                         "harness_pct_of_engine": 100 * over / eng_s,
                         "other_cpu_cores": statistics.median(others) if others else None})
    finally:
        eng.stop()
    return rows


def load_once(engine_name: str, model: str, dtype: str, n_cells: int):
    pm = build_plugin_manager()
    dev = cpu_device()
    g = Group(resolve(model), engine_name, dtype, 1)
    sampler = power_sampler(pm, dev)
    cells = [Cell(model=g.model.name, engine=engine_name, dtype=dtype, batch=1, input_len=32, output_len=8,
                  seed=k) for k in range(n_cells)]

    def one_group():
        t = time.perf_counter()
        e = launch(pm, engine_name, dev, {})
        e.start(g)
        for c in cells:
            assert measure_cell(e, g, c, dev, sampler, RunOptions()).status == "ok"
        e.stop()
        return time.perf_counter() - t

    def per_cell():
        t = time.perf_counter()
        for c in cells:
            e = launch(pm, engine_name, dev, {})
            e.start(g)
            assert measure_cell(e, g, c, dev, sampler, RunOptions()).status == "ok"
            e.stop()
        return time.perf_counter() - t

    one_group()  # warm file caches (and write the dummy GGUF once)
    a, b = one_group(), per_cell()
    return {"engine": engine_name, "model": model, "cells": n_cells, "load_once_s": a, "load_per_cell_s": b,
            "speedup": b / a}


def machine() -> dict:
    """CPU, CPUs, memory and the versions the numbers depend on."""
    import importlib.metadata as md
    import platform

    import psutil

    from infbench.platforms.cpu import cpu_device

    dev = cpu_device()
    vers = {}
    for d in ("llama_cpp_python", "transformers", "torch"):
        try:
            vers[d] = md.version(d)
        except md.PackageNotFoundError:
            vers[d] = None
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    accel = [str(p) for pat in ("nvidia[0-9]*", "kfd", "accel/accel*", "dri/renderD*") for p in Path("/dev").glob(pat)]
    return {"cpu": dev.model, "cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30),
            "virtual_machine": " hypervisor" in flags, "accelerator_devices": accel,
            "python": platform.python_version(), "versions": vers, "date": time.strftime("%Y-%m-%d")}


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's figures from harness_overhead.json (benchmarks/docs_numbers.py): the
    machine line (``machine``), the overhead table (default) or the load-once table (``load_once``)."""
    if variant == "machine":
        m = data["machine"]
        v = m["versions"]
        kind = "VM" if m.get("virtual_machine") else "host"
        gpu = "no GPU" if not m.get("accelerator_devices") else "accelerators " + ", ".join(m["accelerator_devices"])
        return (f"Machine: {m['cpus']}-core {m['cpu']} {kind} (shared), {m['memory_gib']} GiB, {gpu}, Python "
                f"{m['python']}, llama-cpp-python {v['llama_cpp_python']},\ntransformers {v['transformers']}, torch "
                f"{v['torch']}; {m['date']}; medians of {data['reps']} repetitions:")
    if variant == "load_once":
        out = ["| engine | model | cells | load once per group s | load per cell s | speed-up |",
               "|---|---|---:|---:|---:|---:|"]
        out += [f"| {r['engine']} | {r['model']} | {r['cells']} | {r['load_once_s']:.2f} | "
                f"{r['load_per_cell_s']:.2f} | {r['speedup']:.2f}x |" for r in data["load_once"]]
        return "\n".join(out)
    out = ["| engine | model | batch | in | out | engine s | harness ms | store write ms | harness / engine | "
           "other processes (cores) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def others(r: dict) -> str:
        return "-" if r.get("other_cpu_cores") is None else f"{r['other_cpu_cores']:.2f}"

    out += [f"| {r['engine']} | {r['model']} | {r['batch']} | {r['input_len']} | {r['output_len']} | "
            f"{r['engine_s']:.3f} | {1e3 * r['harness_s']:.2f} | {1e3 * r['store_write_s']:.2f} | "
            f"{r['harness_pct_of_engine']:.2f} % | {others(r)} |" for r in data["overhead"]]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "harness_overhead.json",
                    help="write the results as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("INFBENCH_HOME", str(Path(tempfile.gettempdir()) / "infbench-bench"))
    grid = [(1, 32, 16), (8, 32, 16), (1, 128, 64), (8, 128, 64)]
    res = {
        "overhead": overhead("llama.cpp", "tiny-random-llama", "f16", grid, args.reps)
        + overhead("llama.cpp", "smollm2-135m", "f16", grid[:2] + [(1, 128, 64)], args.reps)
        + overhead("transformers", "smollm2-135m", "float32", [(1, 32, 16), (8, 32, 16)], args.reps),
        "load_once": [load_once("llama.cpp", "smollm2-135m", "f16", 6),
                      load_once("transformers", "smollm2-135m", "float32", 6)],
    }
    res["reps"] = args.reps
    res["machine"] = machine()
    print(render(res))
    print(render(res, "load_once"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")

if __name__ == "__main__":
    main()
