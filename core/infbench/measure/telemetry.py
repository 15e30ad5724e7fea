"""Accelerator telemetry beyond power: the channels a power sampler may read with each
power reading (plugin contract 1.5, ``PowerSampler.read_channels``), and their summary
per cell.

Channel names are shared by every vendor, so reports compare them across devices; a
plugin gives the ones its device reads and leaves the rest out. Throttle reasons are
vendor words (NVML's ``sw_power_cap``, ``hw_thermal_slowdown``...) listed only while
they lower the clocks; a cell with any of them in its timed part is flagged
``throttled``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from infbench.schema import ChannelReading

#: The channel names, with what they measure and their unit (the unit is in the name).
CHANNELS: dict[str, str] = {
    "util_pct": "device busy time over the driver's sample period, % (NVML utilization.gpu, amdsmi "
                "gfx_activity, xpu-smi GPU Utilization, hl-smi utilization.aip, psutil cpu_percent)",
    "mem_util_pct": "memory-controller busy time, % (NVML utilization.memory, amdsmi umc_activity, xpu-smi "
                    "GPU Memory Utilization)",
    "clock_mhz": "core clock in MHz (NVML SM clock, amdsmi GFX clock, xpu-smi GPU Frequency, hl-smi "
                 "clocks.current.soc, psutil cpu_freq)",
    "mem_clock_mhz": "memory clock in MHz (NVML MEM clock, amdsmi MEM clock)",
    "temp_c": "device temperature in degrees C (NVML GPU sensor, amdsmi hotspot, xpu-smi GPU Core "
              "Temperature, hl-smi temperature.aip, psutil's package sensor)",
    "mem_temp_c": "memory temperature in degrees C (xpu-smi GPU Memory Temperature)",
}


def summarize_channels(readings: Iterable[ChannelReading], window: tuple[int, int] | None = None) -> dict[str, Any]:
    """Summary of a cell's channel readings, for ``CellResult.metrics``.

    Args:
        readings: the readings taken while the cell ran.
        window: ``(t0_ns, t1_ns)``, the timed part (first send to last token); readings
            outside it are left out, unless that leaves none (a sampler slower than
            the cell), when all are used.

    Returns:
        ``{"telemetry": {channel: {"mean", "min", "max", "count"}}, "throttled": bool,
        "throttle_reasons": [names]}`` (means over every device and reading); ``{}``
        when there are no readings.
    """
    rs = list(readings)
    if window is not None:
        inside = [r for r in rs if window[0] <= r.t_ns <= window[1]]
        rs = inside or rs
    if not rs:
        return {}
    by: dict[str, list[float]] = defaultdict(list)
    reasons: set[str] = set()
    for r in rs:
        for k, v in r.values.items():
            if v is not None:
                by[k].append(float(v))
        reasons.update(r.throttle)
    tel = {k: {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "count": len(v)} for k, v in sorted(by.items())}
    return {"telemetry": tel, "throttled": bool(reasons), "throttle_reasons": sorted(reasons)}
