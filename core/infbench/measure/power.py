"""Power sampling: the sampler interface plugins implement, the core's sampling
thread, and energy integration.

A plugin returns a :class:`PowerSampler` from ``infbench_power_sampler``; the core
wraps it in a :class:`PowerMonitor` that reads it every ``interval_s`` on a daemon
thread while a cell runs. Energy is taken from cumulative counters where the sampler
has them (differences, wraparound at ``energy_range_j``), otherwise by trapezoidal
integration of power over time (:func:`energy_j`).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable

from infbench.schema import PowerReading


class PowerSampler(ABC):
    """Base class of a device power source (what ``infbench_power_sampler`` returns).

    Subclasses implement :meth:`read`. ``source`` says what the readings carry:
    ``energy_counter`` (cumulative J, preferred) or ``power`` (W).

    Attributes:
        name: short description shown in results (``rapl``, ``nvml-energy``...).
        source: ``energy_counter`` or ``power``.
        available: False only for :class:`NoPower`.
        label: optional note stored with the energy (e.g. "user-supplied PDU reading").
    """

    name = "sampler"
    source = "power"
    available = True
    label: str | None = None

    @abstractmethod
    def read(self) -> list[PowerReading]:
        """Take one reading per device now.

        Returns:
            One :class:`~infbench.schema.PowerReading` per device, ``t_ns`` from
            ``time.perf_counter_ns()``.

        Raises:
            Any exception: the monitor stops sampling and records the error as the
            reason energy is unavailable; the cell itself goes on.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most samplers hold nothing
        """Release handles (NVML, subprocesses). Default: nothing to do."""


class NoPower(PowerSampler):
    """A device without a readable power source; ``reason`` says why."""

    name = "none"
    available = False

    def __init__(self, reason: str):
        self.reason = reason

    def read(self) -> list[PowerReading]:
        """Always empty: there is nothing to read."""
        return []


class PowerMonitor:
    """Reads a :class:`PowerSampler` on a background thread between start() and stop().

    Args:
        sampler: the plugin's sampler.
        interval_s: time between readings in s (default 0.1 s = 10 Hz).

    A reading is always taken at start() and at stop(), so counters span the whole
    timed interval even when it is shorter than ``interval_s``.
    """

    def __init__(self, sampler: PowerSampler, interval_s: float = 0.1):
        if interval_s <= 0:
            raise ValueError(f"power interval must be > 0 s, got {interval_s}")
        self.sampler = sampler
        self.interval_s = interval_s
        self.readings: list[PowerReading] = []
        self.error: str | None = None if sampler.available else getattr(sampler, "reason", "unavailable")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read_once(self) -> None:
        if self.error is not None:
            return
        try:
            self.readings.extend(self.sampler.read())
        except Exception as exc:  # noqa: BLE001 - sampling must not stop the run
            self.error = f"{self.sampler.name} failed: {type(exc).__name__}: {exc}"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read_once()
            if self.error is not None:
                return

    def start(self) -> None:
        """Take the first reading and start the sampling thread."""
        self.readings = []
        self._stop.clear()
        self._read_once()
        if self.error is None:
            self._thread = threading.Thread(target=self._loop, name="infbench-power", daemon=True)
            self._thread.start()

    def stop(self) -> list[PowerReading]:
        """Stop the thread, take the last reading, return all readings of the interval."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 5 * self.interval_s))
            self._thread = None
        self._read_once()
        return list(self.readings)

    def energy(self) -> tuple[float | None, str | None]:
        """(energy in J over the interval, reason if unavailable)."""
        if self.error is not None:
            return None, self.error
        e = energy_j(self.readings)
        return (e, None) if e is not None else (None, f"{self.sampler.name}: too few readings")


def energy_j(readings: Iterable[PowerReading]) -> float | None:
    """Energy in J over a series of readings, summed over devices.

    Per device, sorted by time: if every reading has ``energy_j`` the result is the
    sum of successive counter differences; a negative difference is a wraparound and
    ``energy_range_j`` is added (without a range it is treated as a counter reset and
    skipped). Otherwise ``power_w`` is integrated with the trapezoidal rule over
    ``t_ns``. Returns None when a device has fewer than two usable readings.
    """
    by_dev: dict[int, list[PowerReading]] = defaultdict(list)
    for r in readings:
        by_dev[r.device_index].append(r)
    if not by_dev:
        return None
    total = 0.0
    for rs in by_dev.values():
        rs.sort(key=lambda r: r.t_ns)
        if all(r.energy_j is not None for r in rs):
            if len(rs) < 2:
                return None
            for a, b in zip(rs, rs[1:]):
                d = b.energy_j - a.energy_j
                if d < 0:
                    d = d + b.energy_range_j if b.energy_range_j else 0.0
                total += d
        else:
            ps = [r for r in rs if r.power_w is not None]
            if len(ps) < 2:
                return None
            for a, b in zip(ps, ps[1:]):
                total += 0.5 * (a.power_w + b.power_w) * (b.t_ns - a.t_ns) / 1e9
    return total


def now_ns() -> int:
    """``time.perf_counter_ns()``: the one clock of a measurement (METRICS.md)."""
    return time.perf_counter_ns()
