"""Noisy neighbours: what other processes did on the host and the device during a cell.

Two processes sharing cores slow each other down, and llama.cpp's spinning worker threads
collapse when they do (an E2E of 46.8 s instead of 1.2 s was once stored as ``ok``). So
during the timed part of every cell (:func:`infbench.measure.cell.measure_cell`) infbench
measures:

* **CPU time of other processes** on the CPUs this process may run on
  (``os.sched_getaffinity``): the busy time of those CPUs in ``/proc/stat`` (``user +
  nice + system``, in USER_HZ ticks; ``idle``, ``iowait``, ``irq``, ``softirq`` and
  ``steal`` left out) minus the CPU time of infbench's own process tree (this process and
  every descendant: ``utime + stime`` and the reaped children's ``cutime + cstime``, from
  ``/proc/PID/stat``), over the cell's wall time: ``other_cpu_cores``. ``steal`` (the hypervisor
  running other guests on these CPUs) is recorded beside it (``steal_cores``), not counted.
* **Other processes on the accelerator**, where the device's power sampler can list the
  processes using its devices (optional sampler method ``device_processes()``, plugin
  contract: see docs/plugins.md; NVML's ``nvmlDeviceGetComputeRunningProcesses``): read at
  the start, every ``interval_s`` and at the end; a PID outside infbench's tree is another
  process. A PID this process cannot see (another PID namespace: infbench in a container
  without the host's) cannot be judged and is only counted.

:func:`contention_reasons` turns the record into the cell's ``suspect`` reasons
(:mod:`infbench.analysis.physics`): on a CPU cell, other processes using more than
:data:`CPU_CELL_SHARE` of a core (and at least :data:`MIN_OTHER_CORE_S` core-seconds,
above the tick resolution of short cells); on an accelerator cell, any other process on
the device, or other processes using more than :data:`ACCEL_CELL_CORES` cores of the host.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

#: A CPU cell is suspect when other processes used more than this many cores on its CPUs.
CPU_CELL_SHARE = 0.10
#: ... and at least this many core-seconds in all (2 ticks per CPU of a 2-core host are
#: 0.04 core-s: below this, a short cell's figure is tick noise).
MIN_OTHER_CORE_S = 0.05
#: An accelerator cell is suspect on host CPU load only beyond this many cores (its host
#: thread needs one core; the device does the work). A choice, not a measured bound.
ACCEL_CELL_CORES = 1.0
#: Default period (s) of the device process-list reads.
DEVICE_INTERVAL_S = 1.0

_BUSY = (0, 1, 2)  # user, nice, system
_STEAL = 7


def parse_proc_stat(text: str, cpus: set[int] | None = None) -> tuple[int, int, int]:
    """Busy, steal and total ticks of the given CPUs from the text of ``/proc/stat``.

    Args:
        text: the file's content (``cpuN user nice system idle iowait irq softirq steal guest
            guest_nice`` lines; proc(5)).
        cpus: CPU numbers to sum (None: the aggregate ``cpu`` line).

    Returns:
        ``(busy, steal, total)`` in USER_HZ ticks; busy = user + nice + system (guest time is
        already inside user and nice), total = every field up to steal.

    Raises:
        ValueError: no matching CPU line.
    """
    busy = steal = total = 0
    found = False
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *fields = line.split()
        if cpus is None:
            if name != "cpu":
                continue
        elif name == "cpu" or int(name[3:]) not in cpus:
            continue
        v = [int(x) for x in fields[:8]] + [0] * (8 - len(fields[:8]))
        busy += sum(v[i] for i in _BUSY)
        steal += v[_STEAL]
        total += sum(v[:8])
        found = True
    if not found:
        raise ValueError(f"no cpu line for CPUs {sorted(cpus) if cpus else 'all'} in /proc/stat")
    return busy, steal, total


def _proc_children(pid: int) -> list[int] | None:
    """Children of ``pid`` from ``/proc/PID/task/*/children`` (every thread's; Linux 3.5+ with
    CONFIG_PROC_CHILDREN), or None when the kernel does not provide the file."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return out


def _proc_cpu_s(pid: int, hz: float) -> float | None:
    """utime + stime + cutime + cstime of ``pid`` (s) from ``/proc/PID/stat`` (proc(5) fields
    14-17, after the parenthesised command name), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return sum(int(x) for x in fields[11:15]) / hz


def own_tree_cpu_s(root: int | None = None, hz: float = 100.0) -> tuple[float, set[int]]:
    """CPU seconds used so far by the process ``root`` (default: this one) and every
    descendant (user + system, plus the reaped children's), and the tree's PIDs.

    Reads ``/proc`` directly (the tree through each thread's ``children`` file: a few reads
    for a small tree, whatever runs beside it); falls back to psutil where the kernel lacks
    those files. A descendant that exits between listing and reading is skipped (its time
    moves to its parent's children counters once reaped)."""
    root = root or os.getpid()
    pids, i = [root], 0
    while i < len(pids):
        kids = _proc_children(pids[i])
        if kids is None:
            return _own_tree_psutil(root)
        pids += kids
        i += 1
    total, seen = 0.0, set()
    for pid in pids:
        t = _proc_cpu_s(pid, hz)
        if t is not None:
            total += t
            seen.add(pid)
    return total, seen


def _own_tree_psutil(root: int) -> tuple[float, set[int]]:
    me = psutil.Process(root)
    procs = [me]
    try:
        procs += me.children(recursive=True)
    except psutil.Error:
        pass
    total, pids = 0.0, set()
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
        pids.add(p.pid)
    return total, pids


@dataclass
class CpuSample:
    """One reading: ``t`` (perf_counter s), ``busy``/``steal`` ticks of the affinity CPUs, ``own_s``."""

    t: float
    busy: int
    steal: int
    own_s: float


def other_cores(a: CpuSample, b: CpuSample, hz: float) -> dict[str, float]:
    """Cores used by processes outside the tree, and stolen, between two samples.

    ``other_cpu_cores = max(0, (busy_b - busy_a) / hz - (own_b - own_a)) / (t_b - t_a)``;
    ``steal_cores = (steal_b - steal_a) / hz / (t_b - t_a)``; also ``own_cpu_cores``,
    ``other_cpu_core_s`` (core-seconds) and ``wall_s``.

    Raises:
        ValueError: ``b`` is not after ``a``.
    """
    wall = b.t - a.t
    if wall <= 0:
        raise ValueError("the second sample must be later than the first")
    busy_s = (b.busy - a.busy) / hz
    own = b.own_s - a.own_s
    other = max(0.0, busy_s - own)
    return {"other_cpu_cores": other / wall, "other_cpu_core_s": other, "own_cpu_cores": own / wall,
            "steal_cores": (b.steal - a.steal) / hz / wall, "wall_s": wall}


class ContentionMonitor:
    """Measures other processes' CPU time (and, where the sampler lists them, other
    processes on the device) between :meth:`start` and :meth:`stop`.

    Args:
        sampler: the device's power sampler (its optional ``device_processes()`` is used).
        interval_s: period of the device process-list reads (s).
        proc_stat: path of ``/proc/stat`` (tests).
    """

    def __init__(self, sampler: Any = None, interval_s: float = DEVICE_INTERVAL_S, proc_stat: str = "/proc/stat"):
        self.sampler = sampler
        self.interval_s = interval_s
        self.proc_stat = proc_stat
        self.error: str | None = None
        self._a: CpuSample | None = None
        self._cpus: set[int] | None = None
        self._hz = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._lister = getattr(sampler, "device_processes", None) if sampler is not None else None
        self._device_pids: dict[int, str] = {}
        self._device_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _cpu_sample(self) -> CpuSample:
        with open(self.proc_stat) as f:
            text = f.read()
        busy, steal, _ = parse_proc_stat(text, self._cpus)
        own, self._own_pids = own_tree_cpu_s(hz=self._hz)
        return CpuSample(time.perf_counter(), busy, steal, own)

    def _read_device(self) -> None:
        if self._lister is None or self._device_error:
            return
        try:
            pids = self._lister()
        except Exception as exc:  # noqa: BLE001 - a neighbour check must not stop the cell
            self._device_error = f"device process list failed: {type(exc).__name__}: {exc}"
            return
        if pids is None:
            self._lister = None
            return
        _, own = own_tree_cpu_s(hz=self._hz)
        for pid in pids:
            if pid in own:
                continue
            self._device_pids[int(pid)] = "other" if os.path.exists(f"/proc/{pid}") else "unseen"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read_device()

    def start(self) -> None:
        """Take the first sample (and start the device thread when the sampler lists processes)."""
        self._device_pids = {}
        try:
            self._cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
            self._a = self._cpu_sample()
        except Exception as exc:  # noqa: BLE001 - no /proc (not Linux), no psutil: recorded, not fatal
            self.error = f"CPU contention not measured: {type(exc).__name__}: {exc}"
            self._a = None
        if self._lister is not None:
            self._read_device()
            if self._lister is None:  # the device cannot list its processes
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="infbench-contention", daemon=True)
            self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Take the last sample; the record stored as ``metrics["contention"]``:
        ``other_cpu_cores``, ``other_cpu_core_s``, ``own_cpu_cores``, ``steal_cores``,
        ``wall_s``, ``cpus`` (the affinity CPUs counted), ``source``; with a device process
        list also ``other_device_pids`` and ``unseen_device_pids``; ``note`` when something
        could not be measured."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        out: dict[str, Any] = {"source": "/proc/stat (user+nice+system of the affinity CPUs) - own process tree "
                                         "(psutil)"}
        if self._a is not None:
            try:
                out.update({k: round(v, 4) for k, v in other_cores(self._a, self._cpu_sample(), self._hz).items()})
                out["cpus"] = len(self._cpus) if self._cpus else os.cpu_count()
            except Exception as exc:  # noqa: BLE001
                self.error = f"CPU contention not measured: {type(exc).__name__}: {exc}"
        if self._lister is not None:
            self._read_device()
        if self._lister is not None or self._device_pids:
            out["other_device_pids"] = sorted(p for p, k in self._device_pids.items() if k == "other")
            out["unseen_device_pids"] = sorted(p for p, k in self._device_pids.items() if k == "unseen")
        notes = [n for n in (self.error, self._device_error) if n]
        if notes:
            out["note"] = "; ".join(notes)
        return out


def contention_reasons(contention: dict[str, Any] | None, device_kind: str = "cpu") -> list[str]:
    """The ``suspect`` reasons of a cell's contention record (see the module doc for the
    thresholds); ``[]`` when there is no record or nothing exceeded them."""
    if not contention:
        return []
    out = []
    cores, core_s = contention.get("other_cpu_cores"), contention.get("other_cpu_core_s")
    limit = CPU_CELL_SHARE if device_kind == "cpu" else ACCEL_CELL_CORES
    if cores is not None and cores > limit and (core_s or 0) >= MIN_OTHER_CORE_S:
        out.append(f"other processes used {cores:.2f} cores during the cell (more than {limit:g} of "
                   f"{contention.get('cpus') or '?'} CPUs: noisy neighbours slow the engine down)")
    pids = contention.get("other_device_pids") or []
    if pids:
        shown = ", ".join(str(p) for p in pids[:5]) + (" ..." if len(pids) > 5 else "")
        out.append(f"other processes on the device during the cell: {len(pids)} (PID {shown})")
    return out


def wait_for_quiet(limit_s: float, cores: float = 0.05, window_s: float = 1.0) -> float | None:
    """Wait until other processes used less than ``cores`` over a ``window_s`` window, for
    at most ``limit_s`` seconds (benchmarks and tests that compare two tools start their
    runs in a quiet moment). Returns the last window's ``other_cpu_cores``: below ``cores``
    when a quiet window came, else the figure at the deadline (None where not measurable)."""
    deadline = time.monotonic() + limit_s
    last = None
    while True:
        m = ContentionMonitor()
        m.start()
        time.sleep(window_s)
        last = m.stop().get("other_cpu_cores")
        if last is None or last < cores or time.monotonic() >= deadline:
            return last
