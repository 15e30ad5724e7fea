"""Benchmark: CPU cost of power sampling at 10 Hz (the default --power-interval 0.1 s).

For each sampler, a :class:`~infbench.measure.power.PowerMonitor` runs for ``--seconds``
while the main thread sleeps; the CPU time this process and its children used in that
time, over the wall time, is the sampler's CPU share (in % of one core). A baseline
with no monitor is measured the same way and subtracted. Samplers:

* ``rapl-sysfs``: the CPU plugin's RAPL reader on a powercap tree of real files (the
  reads are file reads, as on a host with RAPL; this VM has none).
* ``fixed``: a declared wattage (the floor: the thread and the reading objects).
* ``command``: ``--power-command`` with ``echo 250`` (one process per sample).
* ``stream``: a long-running tool printing one line per 0.1 s, parsed on a reader
  thread (how xpu-smi and hl-smi are read).

NVML, amdsmi and HLML need their hardware; their per-call cost is not measured here.

    python benchmarks/power_overhead.py [--seconds 10] [--out benchmarks/results/power_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from infbench.data.schema import PowerReading
from infbench.detect.platforms.cpu import rapl_sampler
from infbench.measure.power import CommandPowerSampler, FixedPowerSampler, PowerMonitor, StreamSampler

TOOL = "import time\nwhile True:\n    print('100', flush=True)\n    time.sleep(0.1)\n"


def cpu_s() -> float:
    """CPU seconds (user + system) of this process and its waited-for children."""
    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def measure(make, seconds: float, interval: float) -> dict:
    """CPU share (% of one core) and readings per second of one sampler."""
    sampler = make() if make else None
    mon = PowerMonitor(sampler, interval) if sampler else None
    c0, t0 = cpu_s(), time.perf_counter()
    if mon:
        mon.start()
    time.sleep(seconds)
    readings = mon.stop() if mon else []
    wall = time.perf_counter() - t0
    if sampler:
        sampler.close()
    c1 = cpu_s()
    return {"cpu_share_pct": 100 * (c1 - c0) / wall, "readings_per_s": len(readings) / wall,
            "error": mon.error if mon else None}


def fake_rapl(root: Path) -> Path:
    d = root / "intel-rapl:0"
    d.mkdir(parents=True)
    (d / "energy_uj").write_text("123456789\n")
    (d / "max_energy_range_uj").write_text("262143328850\n")
    return root


#: What each sampler is, for the table in docs/benchmarks.md.
DESCRIBE = {
    "fixed": "`fixed` (declared W: the thread and reading objects only)",
    "rapl-sysfs": "`rapl-sysfs` (the CPU plugin's RAPL reader on real sysfs-style files)",
    "stream (tool at 10 lines/s)": "`stream` (a tool printing 10 lines/s, parsed on a reader thread: how xpu-smi "
                                   "and hl-smi are read; includes the tool's own CPU)",
    "command (echo 250)": "`command` (`--power-command \"echo 250\"`: one process per sample)",
}


def render(data: dict, variant: str | None = None) -> str:
    """The table of docs/benchmarks.md (benchmarks/docs_numbers.py): per sampler, its CPU
    share over the baseline (% of one core) and readings per second, cheapest first."""
    rows = sorted(((k, v) for k, v in data["results"].items() if k in DESCRIBE),
                  key=lambda kv: kv[1]["cpu_share_over_baseline_pct"])
    out = [f"{data['seconds']:g} s per sampler at {1 / data['interval_s']:g} Hz, {data['cpus']} CPUs, "
           f"Python {data['python']}:", "", "| sampler | CPU share over baseline | readings/s |", "|---|---|---|"]
    out += [f"| {DESCRIBE[k]} | {v['cpu_share_over_baseline_pct']:.2f} % | {v['readings_per_s']:.1f} |"
            for k, v in rows]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    samplers = {
        "baseline (no monitor)": None,
        "fixed": lambda: FixedPowerSampler(100.0),
        "rapl-sysfs": lambda: rapl_sampler(fake_rapl(tmp / "powercap")),
        "command (echo 250)": lambda: CommandPowerSampler("echo 250"),
        "stream (tool at 10 lines/s)": lambda: StreamSampler(
            [sys.executable, "-c", TOOL], lambda line, t: [PowerReading(t_ns=t, power_w=float(line))], name="stream"),
    }
    res = {name: measure(make, a.seconds, a.interval) for name, make in samplers.items()}
    base = res["baseline (no monitor)"]["cpu_share_pct"]
    for name, r in res.items():
        r["cpu_share_over_baseline_pct"] = r["cpu_share_pct"] - base
        print(f"{name:30s} cpu {r['cpu_share_pct']:6.3f} % (over baseline {r['cpu_share_over_baseline_pct']:6.3f} %)"
              f"  {r['readings_per_s']:5.1f} readings/s  {r['error'] or ''}")
    out = {"interval_s": a.interval, "seconds": a.seconds, "cpus": os.cpu_count(), "python": sys.version.split()[0],
           "results": res}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
