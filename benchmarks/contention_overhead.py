"""Benchmark: CPU cost of the noisy-neighbour check (``infbench.measure.contention``).

Measured as benchmarks/power_overhead.py measures the power sampler: for ``--seconds``, this
process runs back-to-back "cells" of ``cell_s`` that only sleep, each wrapped in a
:class:`~infbench.measure.contention.ContentionMonitor` ``start()``/``stop()`` (two /proc/stat
reads, two walks of the process tree); the CPU time of the process (user + system, its
threads included) over the wall time is the check's CPU share (% of one core), minus a
baseline of the same loop without the monitor. Also with a device process list (a lister
returning three PIDs, read every second on the monitor's thread, as NVML's is), and the
cost of one start/stop pair in ms. The host's process count is recorded: walking the tree
reads every process's parent (psutil).

    python benchmarks/contention_overhead.py [--seconds 10] [--out benchmarks/results/contention_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_s() -> float:
    """CPU seconds (user + system) of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Lister:
    """Stands in for a device sampler's ``device_processes`` (NVML's answer is a short list)."""

    def device_processes(self) -> list[int]:
        return [os.getpid(), 1, 2]


def loop(seconds: float, cell_s: float, monitor: bool, lister: bool) -> dict:
    """Back-to-back sleeping cells for ``seconds``; CPU share (% of one core) and cells run."""
    from infbench.measure.contention import ContentionMonitor

    c0, t0, n = cpu_s(), time.perf_counter(), 0
    pair = []
    while time.perf_counter() - t0 < seconds:
        if monitor:
            m = ContentionMonitor(Lister() if lister else None)
            a = cpu_s()
            m.start()
            pair.append(cpu_s() - a)
        time.sleep(cell_s)
        if monitor:
            a = cpu_s()
            rec = m.stop()
            pair[-1] += cpu_s() - a
            assert "other_cpu_cores" in rec, rec
        n += 1
    wall = time.perf_counter() - t0
    return {"cpu_share_pct": 100 * (cpu_s() - c0) / wall, "cells": n,
            "start_stop_cpu_ms": 1e3 * sum(pair) / len(pair) if pair else 0.0}


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's table from contention_overhead.json (benchmarks/docs_numbers.py)."""
    out = [f"{data['seconds']:g} s per row, {data['cpus']} CPUs, {data['processes']} processes on the host, Python "
           f"{data['python']}:", "",
           "| cells of | device process list | CPU share over baseline | CPU per cell (start + stop) |",
           "|---:|---|---:|---:|"]
    for r in data["rows"]:
        out.append(f"| {r['cell_s']:g} s | {'every 1 s' if r['lister'] else 'none'} | "
                   f"{r['cpu_share_over_baseline_pct']:.2f} % | {r['start_stop_cpu_ms']:.2f} ms |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--cells", default="0.1,1", help="cell lengths (s)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "contention_overhead.json")
    a = ap.parse_args()
    import psutil

    rows = []
    for cell_s in [float(x) for x in a.cells.split(",")]:
        base = loop(a.seconds, cell_s, False, False)
        for lister in (False, True):
            r = loop(a.seconds, cell_s, True, lister)
            r.update(cell_s=cell_s, lister=lister, baseline_pct=base["cpu_share_pct"],
                     cpu_share_over_baseline_pct=r["cpu_share_pct"] - base["cpu_share_pct"])
            rows.append(r)
            print(f"cells of {cell_s:g} s, lister {lister}: {r['cpu_share_over_baseline_pct']:.3f} % of a core over "
                  f"baseline, {r['start_stop_cpu_ms']:.2f} ms per cell", flush=True)
    res = {"seconds": a.seconds, "cpus": os.cpu_count(), "processes": len(psutil.pids()),
           "python": sys.version.split()[0], "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))


if __name__ == "__main__":
    main()
