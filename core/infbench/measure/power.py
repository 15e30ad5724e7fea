"""Power sampling: the sampler interface plugins implement, the core's sampling
thread, and energy integration.

A plugin returns a :class:`PowerSampler` from ``infbench_power_sampler``; the core
wraps it in a :class:`PowerMonitor` that reads it every ``interval_s`` on a daemon
thread while a cell runs. Since plugin contract 1.5 a sampler may also give extra
channels (utilisation, clocks, temperature, throttle reasons) through
:meth:`PowerSampler.read_channels`, read on the same thread
(:mod:`infbench.measure.telemetry`). Energy is taken from cumulative counters where the
sampler has them (differences, wraparound at ``energy_range_j``), otherwise by
trapezoidal integration of power over time (:func:`energy_j`).
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from infbench.data.errors import ConfigError
from infbench.data.schema import ChannelReading, DeviceInfo, PowerReading
from infbench.data.secrets import command_label

#: Counter energy and integrated power disagreeing by more than this fraction means one
#: of them is wrong (AMD: some GPUs report bad counters; MI250's second GCD reads 0 W).
CROSS_CHECK_TOLERANCE = 0.5


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
            One :class:`~infbench.data.schema.PowerReading` per device, ``t_ns`` from
            ``time.perf_counter_ns()``.

        Raises:
            Exception: any; the monitor stops sampling and records the error as the
                reason energy is unavailable; the cell itself goes on.
        """

    def read_channels(self) -> list[ChannelReading]:
        """Extra telemetry per device now (optional, plugin contract 1.5): utilisation,
        clocks, temperature and throttle reasons (:data:`infbench.measure.telemetry.CHANNELS`
        names the channels and units). Called right after :meth:`read` on the monitor's
        thread, also when the sampler has no power (:class:`NoPower`).

        Returns:
            One :class:`~infbench.data.schema.ChannelReading` per device; default ``[]``.

        Raises:
            Exception: any; the monitor stops reading channels and notes why; power goes on.
        """
        return []

    def device_processes(self) -> list[int] | None:
        """PIDs of the processes using this sampler's devices now, in the host's PID
        namespace (optional, for the noisy-neighbour check of
        :mod:`infbench.measure.contention`; NVML: ``nvmlDeviceGetComputeRunningProcesses``).
        Called at the start and end of each cell and every second in between, on the
        contention monitor's thread.

        Returns:
            The PIDs, or None (the default) when the device cannot list them.

        Raises:
            Exception: any; the check notes it and stops asking; the cell goes on.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most samplers hold nothing
        """Release handles (NVML, subprocesses). Default: nothing to do."""

    def drain(self) -> None:  # noqa: B027 - optional hook
        """Forget readings buffered before a measurement starts (samplers that collect in
        the background, such as :class:`StreamSampler`). Default: nothing to do."""


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
    timed interval even when it is shorter than ``interval_s``. The sampler's extra
    channels (:meth:`PowerSampler.read_channels`) are read right after each power reading,
    into :attr:`channels`; a failing channel read stops only the channels
    (:attr:`channel_error`), and a sampler without power still has its channels read.
    """

    def __init__(self, sampler: PowerSampler, interval_s: float = 0.1):
        if interval_s <= 0:
            raise ValueError(f"power interval must be > 0 s, got {interval_s}")
        self.sampler = sampler
        self.interval_s = interval_s
        self.readings: list[PowerReading] = []
        self.channels: list[ChannelReading] = []
        self.error: str | None = None if sampler.available else getattr(sampler, "reason", "unavailable")
        self.channel_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read_once(self) -> None:
        if self.error is None:
            try:
                self.readings.extend(self.sampler.read())
            except Exception as exc:  # noqa: BLE001 - sampling must not stop the run
                self.error = f"{self.sampler.name} failed: {type(exc).__name__}: {exc}"
        if self.channel_error is None:
            try:
                self.channels.extend(self.sampler.read_channels())
            except Exception as exc:  # noqa: BLE001 - telemetry must not stop the run
                self.channel_error = f"{self.sampler.name} channels failed: {type(exc).__name__}: {exc}"

    def _active(self) -> bool:
        return self.error is None or self.channel_error is None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read_once()
            if not self._active():
                return

    def start(self) -> None:
        """Take the first reading and start the sampling thread."""
        self.readings = []
        self.channels = []
        self._stop.clear()
        if self.error is None:
            try:
                self.sampler.drain()
            except Exception as exc:  # noqa: BLE001 - sampling must not stop the run
                self.error = f"{self.sampler.name} failed: {type(exc).__name__}: {exc}"
        self._read_once()
        if self.error is None or (self.channel_error is None and self.channels):
            self._thread = threading.Thread(target=self._loop, name="infbench-power", daemon=True)
            self._thread.start()

    def stop(self) -> list[PowerReading]:
        """Stop the thread, take the last reading, return all power readings of the
        interval (the channel readings are in :attr:`channels`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 5 * self.interval_s))
            self._thread = None
        self._read_once()
        return list(self.readings)

    def energy(self, window: tuple[int, int] | None = None) -> tuple[float | None, str | None]:
        """(energy in J, reason if unavailable or a cross-check note).

        Args:
            window: ``(t0_ns, t1_ns)`` to which the energy is interpolated (the cell's
                timed part); None for the whole sampled span.

        Uses :func:`energy_summary`; a note is returned with a value when the counter
        failed its cross-check against power and integrated power was used instead."""
        if self.error is not None:
            return None, self.error
        e, _method, note = energy_summary(self.readings, window)
        if e is None:
            return None, f"{self.sampler.name}: {note or 'too few readings'}"
        return e, (f"{self.sampler.name}: {note}" if note else None)

    def source(self) -> dict[str, str | None]:
        """What the energy of this monitor came from: ``{"name", "source", "label"}``
        (stored with each cell so user-supplied readings stay labelled as such)."""
        return {"name": self.sampler.name, "source": self.sampler.source, "label": self.sampler.label}


def impossible_reading(readings: Iterable[PowerReading]) -> str | None:
    """Why a series of readings cannot give an energy, or None: a power below zero, or a
    power or energy counter that is NaN or infinite (a sampler's bug or a command that
    printed ``-50``; issue 33). One such reading makes the whole cell's energy unavailable,
    with this note, rather than an energy silently lowered by it."""
    for r in readings:
        for what, v, unit in (("power", r.power_w, "W"), ("energy counter", r.energy_j, "J")):
            if v is None:
                continue
            if not math.isfinite(v):
                return f"device {r.device_index}: a {what} reading of {v} {unit}; energy unavailable"
            if v < 0:
                return (f"device {r.device_index}: a {what} reading of {v:g} {unit} is below zero, which no meter "
                        "reads; energy unavailable")
    return None


def energy_j(readings: Iterable[PowerReading]) -> float | None:
    """Energy in J over a series of readings, summed over devices.

    Per device, sorted by time: if every reading has ``energy_j`` the result is the
    sum of successive counter differences; a negative difference is a wraparound and
    ``energy_range_j`` is added (without a range it is treated as a counter reset and
    skipped). Otherwise ``power_w`` is integrated with the trapezoidal rule over
    ``t_ns``. Returns None when a device has fewer than two usable readings, or a reading
    is impossible (:func:`impossible_reading`).
    """
    readings = list(readings)
    by_dev: dict[int, list[PowerReading]] = defaultdict(list)
    for r in readings:
        by_dev[r.device_index].append(r)
    if not by_dev or impossible_reading(readings) is not None:
        return None
    total = 0.0
    for rs in by_dev.values():
        rs.sort(key=lambda r: r.t_ns)
        counter = all(r.energy_j is not None for r in rs)
        usable = rs if counter else [r for r in rs if r.power_w is not None]
        if len(usable) < 2:
            return None
        total += _cumulative(usable, counter)[-1][1]
    return total


def _cumulative(rs: list[PowerReading], counter: bool) -> list[tuple[int, float]]:
    """``(t_ns, J so far)`` from counter differences (wraparound as in :func:`energy_j`) or
    from the trapezoidal integral of power; ``rs`` sorted by time."""
    out = [(rs[0].t_ns, 0.0)]
    for a, b in zip(rs, rs[1:]):
        if counter:
            d = (b.energy_j or 0.0) - (a.energy_j or 0.0)
            if d < 0:
                d = d + b.energy_range_j if b.energy_range_j else 0.0
        else:
            d = 0.5 * ((a.power_w or 0.0) + (b.power_w or 0.0)) * (b.t_ns - a.t_ns) / 1e9
        out.append((b.t_ns, out[-1][1] + d))
    return out


def _at(cum: list[tuple[int, float]], t: int) -> float:
    """Cumulative energy at ``t``: linear between readings, and beyond the first or last
    reading along the slope of the edge segment (a sampler slower than the cell)."""
    if t <= cum[0][0]:
        (t0, e0), (t1, e1) = cum[0], cum[1]
    elif t >= cum[-1][0]:
        (t0, e0), (t1, e1) = cum[-2], cum[-1]
    else:
        i = next(i for i in range(1, len(cum)) if cum[i][0] >= t)
        (t0, e0), (t1, e1) = cum[i - 1], cum[i]
    return e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0)


def energy_summary(readings: Iterable[PowerReading], window: tuple[int, int] | None = None,
                   tolerance: float = CROSS_CHECK_TOLERANCE) -> tuple[float | None, str | None, str | None]:
    """Energy in J over ``window`` with the method used and a note, cross-checking counters
    against power.

    Per device, the readings become a cumulative energy curve, from counter differences
    (wraparound handled as in :func:`energy_j`) or from the trapezoidal integral of power.
    With ``window=(t0_ns, t1_ns)`` (the cell's timed part: first send to last token, the
    ``duration_s`` of docs/metrics.md) the curve is interpolated at t0 and t1, so the energy
    covers exactly the interval that ``avg_power_w = energy_j / duration_s`` divides by,
    however far before and after it the sampler read; beyond the first/last reading it
    is extended along the edge segment's slope. Without a window the whole span is used.

    Cross-check: when readings carry both a counter (``energy_j``) and power
    (``power_w``), the two energies are compared; if they differ by more than
    ``tolerance`` (relative to the larger), or the counter did not advance while the
    power was above 1 W, the counter is distrusted and power x time is used for that
    device. (AMD documents wrong counters on some GPUs, and MI250's second GCD reads 0 W;
    a counter stuck under load is the common case, and power integration is what the
    energy study used.)

    A power below zero, or a NaN or infinite power or counter, makes the energy unavailable
    (:func:`impossible_reading` gives the note).

    Returns:
        ``(energy_j or None, method, note)``; method is ``counter``, ``power`` or
        ``mixed``; note explains a fallback or why energy is None.
    """
    readings = list(readings)
    by_dev: dict[int, list[PowerReading]] = defaultdict(list)
    for r in readings:
        by_dev[r.device_index].append(r)
    if not by_dev:
        return None, None, "no readings"
    bad = impossible_reading(readings)
    if bad is not None:
        return None, None, bad
    total, methods, notes = 0.0, set(), []
    for dev, rs in sorted(by_dev.items()):
        rs.sort(key=lambda r: r.t_ns)
        t0, t1 = window if window else (rs[0].t_ns, rs[-1].t_ns)
        counter = None
        if len(rs) >= 2 and all(r.energy_j is not None for r in rs):
            cum = _cumulative(rs, counter=True)
            counter = _at(cum, t1) - _at(cum, t0)
        ps = [r for r in rs if r.power_w is not None]
        integral = None
        if len(ps) >= 2:
            cum = _cumulative(ps, counter=False)
            integral = _at(cum, t1) - _at(cum, t0)
        if counter is not None and integral is not None:
            hi = max(abs(counter), abs(integral))
            stuck = counter == 0 and integral > 1.0 * max(t1 - t0, 0) / 1e9
            if stuck or (hi > 0 and abs(counter - integral) / hi > tolerance):
                notes.append(f"device {dev}: energy counter gave {counter:.3f} J but power x time gave "
                             f"{integral:.3f} J; using power x time")
                total += integral
                methods.add("power")
                continue
        if counter is not None:
            total += counter
            methods.add("counter")
        elif integral is not None:
            total += integral
            methods.add("power")
        else:
            return None, None, f"device {dev}: fewer than two usable readings"
    method = methods.pop() if len(methods) == 1 else "mixed"
    return total, method, "; ".join(notes) or None


class FixedPowerSampler(PowerSampler):
    """A constant, user-declared power (W) for a whole system, e.g. a rack's nameplate or
    a PDU average measured separately, as the energy study did for SambaNova and Cerebras.

    Energy is ``watts x duration``: it says nothing about the workload and is labelled so.

    Args:
        watts: the declared power in W (> 0).
        label: what the number is (stored with every cell).

    Raises:
        ValueError: ``watts`` is not positive.
    """

    name = "fixed"
    source = "power"

    def __init__(self, watts: float, label: str | None = None):
        if not watts > 0:
            raise ValueError(f"a fixed power must be > 0 W, got {watts}")
        self.watts = float(watts)
        self.label = label or f"user-supplied fixed power {self.watts:g} W (not measured)"

    def read(self) -> list[PowerReading]:
        """One reading of the declared power now."""
        return [PowerReading(t_ns=now_ns(), power_w=self.watts)]


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def parse_watts(text: str) -> float:
    """The first number in a command's output, in W (``"2315.5"``, ``"Power: 2315 W"``).

    Raises:
        ValueError: no number in ``text``.
    """
    m = _NUMBER.search(text)
    if not m:
        raise ValueError(f"no number in power command output {text.strip()[:80]!r}")
    return float(m.group())


class CommandPowerSampler(PowerSampler):
    """Power from a user command that prints watts (a PDU or BMC reading, for example
    ``ipmitool dcmi power reading`` piped through awk), run once per sample.

    Args:
        command: shell command line; its first number on stdout is the power in W.
        label: what the reading covers (stored with every cell).
        timeout_s: limit per call; a slow command lowers the effective sampling rate.

    Raises (from :meth:`read`):
        subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError: the
        command failed, hung or printed no number; the monitor then marks energy
        unavailable with that reason.
    """

    name = "command"
    source = "power"

    def __init__(self, command: str, label: str | None = None, timeout_s: float = 5.0):
        self.command = command
        self.timeout_s = timeout_s
        # Named by its executable only: the command line may carry a BMC password or a token.
        self.label = label or f"user-supplied power command: {command_label(command)}"

    def read(self) -> list[PowerReading]:
        """Run the command once; one reading stamped halfway through the call.

        Errors name the executable, never the command line (it may hold a secret)."""
        t0 = now_ns()
        try:
            out = subprocess.run(self.command, shell=True, capture_output=True, text=True, timeout=self.timeout_s,
                                 check=True).stdout
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"power command {command_label(self.command)} exited with status "
                               f"{exc.returncode}") from None
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"power command {command_label(self.command)} took longer than "
                               f"{self.timeout_s:g} s") from None
        t1 = now_ns()
        return [PowerReading(t_ns=(t0 + t1) // 2, power_w=parse_watts(out))]


class StreamSampler(PowerSampler):
    """Readings from a long-running vendor tool that prints one line per sample
    (``xpu-smi dump``, ``hl-smi -l``): a reader thread parses lines as they come, and
    :meth:`read` hands over what arrived since the last call.

    This suits tools too slow to start per sample (xpu-smi answers in hundreds of ms):
    the tool keeps its own interval and the monitor's interval only sets how often the
    readings are collected.

    Args:
        argv: the command (list of arguments, no shell).
        parse_line: ``parse_line(line, t_ns) -> list[PowerReading | ChannelReading]``
            (``[]`` for headers and blank lines; channel readings, since contract 1.5,
            come back from :meth:`read_channels`); raising ValueError marks the line
            unparseable.
        name: sampler name shown in results.
        source: ``power`` or ``energy_counter``.
        start_timeout_s: :meth:`start` waits this long for the first reading.

    Raises (from :meth:`read`):
        RuntimeError: the tool exited, or printed a line the parser rejected.
    """

    def __init__(self, argv: Sequence[str], parse_line: Callable[[str, int], list[PowerReading]],
                 name: str = "stream", source: str = "power", start_timeout_s: float = 10.0):
        self.argv = list(argv)
        self.parse_line = parse_line
        self.name = name
        self.source = source
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen | None = None
        self._buf: list[PowerReading] = []
        self._chan: list[ChannelReading] = []
        self._lock = threading.Lock()
        self._error: str | None = None
        self._got = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the tool and wait for its first reading.

        Raises:
            FileNotFoundError: the tool is not installed.
            RuntimeError: no reading within ``start_timeout_s`` or it exited.
        """
        self._proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      bufsize=1)
        self._thread = threading.Thread(target=self._pump, name=f"infbench-{self.name}", daemon=True)
        self._thread.start()
        if not self._got.wait(self.start_timeout_s):
            self.close()
            raise RuntimeError(self._error or f"{shlex.join(self.argv)} gave no reading in {self.start_timeout_s} s")
        if self._error:
            self.close()
            raise RuntimeError(self._error)

    def _pump(self) -> None:
        # A local reference: close() may drop self._proc while this thread still reads.
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            try:
                rs: list[Any] = list(self.parse_line(line, now_ns()) or [])
            except ValueError as exc:
                self._error = f"{self.argv[0]} printed an unparseable line {line.strip()[:80]!r}: {exc}"
                self._got.set()
                return
            if rs:
                with self._lock:
                    self._buf.extend(r for r in rs if isinstance(r, PowerReading))
                    self._chan.extend(r for r in rs if isinstance(r, ChannelReading))
                self._got.set()
        try:
            err = (proc.stderr.read() if proc.stderr else "").strip()
        except (OSError, ValueError):  # the pipe was closed by close()
            err = ""
        self._error = self._error or f"{self.argv[0]} exited ({proc.wait()}): {err[:200]}"
        self._got.set()

    def drain(self) -> None:
        """Start the tool if needed and drop readings taken before now."""
        if self._proc is None:
            self.start()
        with self._lock:
            self._buf = []
            self._chan = []

    def read(self) -> list[PowerReading]:
        """The readings parsed since the last call (possibly none)."""
        if self._proc is None:
            self.start()
        with self._lock:
            out, self._buf = self._buf, []
        if not out and self._error:
            raise RuntimeError(self._error)
        return out

    def read_channels(self) -> list[ChannelReading]:
        """The channel readings parsed since the last call (possibly none)."""
        with self._lock:
            out, self._chan = self._chan, []
        return out

    def close(self) -> None:
        """Stop the tool (SIGTERM, then SIGKILL after 2 s)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None


class WithChannels(PowerSampler):
    """A power sampler whose extra channels come from another sampler: the device's
    telemetry kept when ``--power-command``/``--power-watts`` replace its power.

    Args:
        power: the sampler that gives power (its name, source, label and availability).
        channels: the sampler whose :meth:`~PowerSampler.read_channels` is used.
    """

    def __init__(self, power: PowerSampler, channels: PowerSampler):
        self.power, self.channel_source = power, channels
        self.name, self.source, self.available = power.name, power.source, power.available
        self.label = power.label
        self.reason = getattr(power, "reason", None)

    def read(self) -> list[PowerReading]:
        """The power sampler's readings."""
        return self.power.read()

    def read_channels(self) -> list[ChannelReading]:
        """The channel sampler's readings."""
        return self.channel_source.read_channels()

    def drain(self) -> None:
        """Drain both."""
        self.power.drain()
        self.channel_source.drain()

    def device_processes(self) -> list[int] | None:
        """The channel sampler's (the device's own) process list."""
        return self.channel_source.device_processes()

    def close(self) -> None:
        """Close both."""
        self.power.close()
        self.channel_source.close()


def now_ns() -> int:
    """``time.perf_counter_ns()``: the one clock of a measurement (docs/metrics.md)."""
    return time.perf_counter_ns()


def user_power_sampler(command: str | None, watts: float | None, label: str | None) -> PowerSampler | None:
    """The sampler of ``--power-command`` / ``--power-watts`` (labelled user-supplied), or None.

    Args:
        command: a shell command printing watts (a PDU or BMC reading), or None.
        watts: a declared constant power in W, or None.
        label: what the reading covers (``"rack PDU, 8 nodes"``), stored with the energy.

    Raises:
        ConfigError: both given, or a non-positive wattage.
    """
    if command and watts is not None:
        raise ConfigError("give --power-command or --power-watts, not both")
    if watts is not None:
        if watts <= 0:
            raise ConfigError(f"--power-watts must be > 0, got {watts}")
        return FixedPowerSampler(watts, f"user-supplied: {label}" if label else None)
    if command:
        return CommandPowerSampler(command, f"user-supplied: {label}" if label else None)
    return None


def device_power_sampler(pm: Any, device: DeviceInfo) -> PowerSampler:  # Any: the plugin manager sits above measure
    """The device plugin's sampler, or :class:`NoPower` with the reason (the core's default
    answer when no plugin reads the device, :mod:`infbench.detect.platforms.defaults`)."""
    try:
        s = pm.hook.infbench_power_sampler(device=device)
    except Exception as exc:  # noqa: BLE001
        return NoPower(f"power sampler failed to start: {type(exc).__name__}: {exc}")
    return s if s is not None else NoPower(f"no plugin provides a power sampler for {device.vendor}")
