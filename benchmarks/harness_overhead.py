"""Benchmark: infbench's own cost around the engine, and the saving from loading a model
once per group.

1. Harness overhead per cell: for real llama.cpp cells, the time the harness spends
   outside the engine's compute calls (prompt synthesis, power monitor start/stop,
   record building, metric derivation, the SQLite write) = cell time - engine time.
   ``engine_s`` is the time inside ``llama_decode`` + greedy argmax (llama.cpp) or
   inside ``generate()`` (transformers).
2. Load once per group: N cells of one model run with one ``start()`` versus a
   ``start()``/``stop()`` per cell; the ratio of total times is the saving.

Ratios are compared within one run (the machine is shared and noisy).

    python benchmarks/harness_overhead.py [--engine llama.cpp|transformers] [--out docs/bench.json]
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
                r = measure_cell(eng, g, c, dev, sampler, RunOptions())
                t = time.perf_counter()
                store.save_cell(run_id, r)
                save_s = time.perf_counter() - t
                assert r.status == "ok", r.error
                per.append((r.wall_s, r.engine_s, save_s))
            wall = statistics.median(p[0] for p in per)
            eng_s = statistics.median(p[1] for p in per)
            save = statistics.median(p[2] for p in per)
            over = wall - eng_s + save
            rows.append({"engine": engine_name, "model": model, "batch": b, "input_len": i, "output_len": o,
                         "engine_s": eng_s, "harness_s": over, "store_write_s": save,
                         "harness_pct_of_engine": 100 * over / eng_s})
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
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
    print("| engine | model | batch | in | out | engine s | harness ms | store write ms | harness / engine |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["overhead"]:
        print(f"| {r['engine']} | {r['model']} | {r['batch']} | {r['input_len']} | {r['output_len']} | "
              f"{r['engine_s']:.3f} | {1e3 * r['harness_s']:.2f} | {1e3 * r['store_write_s']:.2f} | "
              f"{r['harness_pct_of_engine']:.2f} % |")
    print()
    print("| engine | model | cells | load once per group s | load per cell s | speed-up |")
    print("|---|---|---:|---:|---:|---:|")
    for r in res["load_once"]:
        print(f"| {r['engine']} | {r['model']} | {r['cells']} | {r['load_once_s']:.2f} | "
              f"{r['load_per_cell_s']:.2f} | {r['speedup']:.2f}x |")
    if args.out:
        args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
