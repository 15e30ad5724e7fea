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

from infbench.data.metrics import TELEMETRY_CHANNELS
from infbench.data.schema import ChannelReading

#: The channel names, with what they measure and their unit (the unit is in the name; the
#: definitions: :data:`infbench.data.metrics.TELEMETRY_CHANNELS`).
CHANNELS: dict[str, str] = {d.key: d.description for d in TELEMETRY_CHANNELS}


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
