"""A fixed piece of pure-Python work, timed: how fast one core of this host runs the
interpreter right now (the host-speed probe of benchmarks/harness_overhead.py --paired, issue 30).

``work_ms()`` runs :data:`N` iterations of an integer loop and returns its wall time in ms
(about 3-5 ms on a current server core). ``python probe.py --interval 0.25`` prints one JSON
line ``{"t_ns", "ms", "steal_s"}`` every ``interval`` s until killed (``t_ns`` on
``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux, shared by every process of the host;
``steal_s`` the host's cumulative steal time from /proc/stat, in s). It imports nothing of infbench.
"""

from __future__ import annotations

import argparse
import json
import os
import time

#: Iterations of the probe's loop.
N = 100_000


def work_ms(n: int = N) -> float:
    """Wall time (ms) of ``n`` iterations of ``x += i * i`` in the calling thread."""
    t0 = time.perf_counter_ns()
    x = 0
    for i in range(n):
        x += i * i
    return (time.perf_counter_ns() - t0) / 1e6


def steal_s() -> float | None:
    """The host's cumulative steal time (s) from the ``cpu`` line of /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.25)
    a = ap.parse_args()
    while True:
        t = time.perf_counter_ns()
        print(json.dumps({"t_ns": t, "ms": work_ms(), "steal_s": steal_s()}), flush=True)
        time.sleep(a.interval)


if __name__ == "__main__":
    main()
