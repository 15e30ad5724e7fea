"""How much of a cell's time infbench itself took, and when that may have limited the result.

A benchmark must not disturb what it measures. On the first real H100 run the transformers
engine's cells took 2.9-3.9x the time of a bare ``generate()`` timed minutes apart. The second
H100 run (docs/hardware-runs.md) found that this was not infbench's doing: timed back to back,
infbench's cell and the bare call agreed (median +1.7 % over 17 pairs), and both ran ~3x slower
in stretches of the host (the bare script too). In-process engines nevertheless run in a process
of their own (:mod:`infbench.engines.process`), so no harness thread can share their
interpreter on any engine; this module measures, for every cell, what the harness still costs,
so a regression or a starved client is visible in the stored figures instead of silently
inside them, and says when a cell's pace was set by the engine's host thread rather than by
the device (:func:`host_bound`).

During the timed part (:func:`infbench.measure.cell.measure_cell`) :class:`HarnessMonitor`
reads:

* this process's CPU time (``time.process_time``: every thread of the measuring process:
  samplers, display, and for serving cells the client);
* the CPU time of infbench's own threads in it (threads named ``infbench-*``, each read
  through its kernel thread id's CPU-time clock; a thread that ends inside the window is not
  counted after its last reading);
* the CPU time of this process's tree (:func:`infbench.measure.contention.own_tree_cpu_s`:
  with the started server or the engine process below it).

:func:`harness_metrics` turns them, with the engine process's own account
(:attr:`RunOutput.process <infbench.data.engine.RunOutput.process>`), into the cell's
metrics, by where the engine ran (``harness["mode"]``):

================  =====================================  =====================================
mode              harness CPU (``harness_cpu_s``)          engine CPU (``engine_cpu_s``)
================  =====================================  =====================================
``own process``   this (measuring) process                 the engine process (its getrusage)
``in process``    infbench's own threads here              this process minus those threads
``client``        this process (client, samplers)          the tree minus this process (a
                                                           started server; None for a remote one)
================  =====================================  =====================================

``harness_share = harness_cpu_s / (harness_cpu_s + engine_cpu_s)`` (0-1): the share of the
cell's CPU time that was infbench's own. It is a CPU-time share, not a slowdown: the
slowdown is what ``benchmarks/harness_overhead.py`` measures against the bare engine.

:func:`harness_reasons` gives the cell's ``suspect`` reasons
(:func:`infbench.analysis.physics.check_cell`):

* an in-process engine with infbench's threads alive beside it (``--no-engine-process``):
  always, whatever CPU they used: on the H100 they did not measurably slow transformers
  (py-spy found the engine's thread holding the interpreter in every sample), but nothing
  guarantees that for every engine;
* a batch cell whose harness used more than the noisy-neighbour thresholds of
  :mod:`infbench.measure.contention` (on a CPU device :data:`CPU_CELL_SHARE` of a core, on an
  accelerator :data:`ACCEL_CELL_CORES`): the harness was a neighbour of the engine;
* a serving cell whose client was the bottleneck (*client-bound*): its event loop fell
  behind (``client.behind``: loop lag or release lag p99 above 5 ms,
  :func:`infbench.engines.openai.client_health`), or its process used at least
  :data:`CLIENT_SATURATED_CORES` of a core (the client's one event-loop thread saturated).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from infbench.data import metrics as M
from infbench.measure.contention import ACCEL_CELL_CORES, CPU_CELL_SHARE, MIN_OTHER_CORE_S, own_tree_cpu_s

#: A serving client whose process used at least this many cores during the timed part was
#: saturated: its event loop runs on one thread, so it could not have gone faster.
CLIENT_SATURATED_CORES = 0.9
#: Prefix of the names of infbench's own threads (power sampler, contention monitor, scraper).
THREAD_PREFIX = "infbench"


def _own_threads() -> dict[int, str]:
    """``{kernel thread id: name}`` of infbench's threads alive in this process now."""
    return {t.native_id: t.name for t in threading.enumerate()
            if t.name.startswith(THREAD_PREFIX) and t.native_id is not None and t.is_alive()}


def _thread_cpu_s(tid: int) -> float | None:
    """CPU seconds of the kernel thread ``tid`` of this process, None once it has ended.

    Read through the thread's CPU-time clock, ``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`` =
    ``(~tid << 3) | 6`` (Linux, ``include/linux/posix-timers.h``): the clock names the kernel
    thread id, which is not reused while the thread lives and fails with EINVAL once it has ended.
    ``pthread_getcpuclockid`` was used first and was wrong: it takes a ``pthread_t``, the address
    of a structure glibc recycles for the next thread, so a thread that ended between the two
    readings was read at its end as another thread (CI saw 2.1 s of thread CPU in a 0.3 s window).
    """
    try:
        return time.clock_gettime(((~tid) << 3) | 6)
    except (OSError, OverflowError, ValueError):
        return None


class HarnessMonitor:
    """CPU time of this process, of infbench's own threads in it and of its tree, between
    :meth:`start` and :meth:`stop` (see the module doc). Reads a few counters at each end;
    runs no thread of its own."""

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.process_cpu_s = 0.0
        self.thread_cpu_s = 0.0
        self.tree_cpu_s: float | None = None
        self.threads: list[str] = []
        self._t0 = self._p0 = 0.0
        self._tree0: float | None = None
        self._threads0: dict[int, float] = {}
        self._names: dict[int, str] = {}

    def start(self) -> None:
        """Take the first reading (call right before the engine's timed call).

        The readings nest: tree, then this process, then infbench's threads at the start, in
        the reverse order at the end, so each window holds the next one and a thread's CPU can
        never exceed the process's (CI once read 0.35 s of thread CPU against 0.30 s of
        process CPU when the threads were read outside the process's window).
        """
        try:
            self._tree0 = own_tree_cpu_s()[0]
        except Exception:  # noqa: BLE001 - no /proc: the tree is not measured
            self._tree0 = None
        self._t0, self._p0 = time.perf_counter(), time.process_time()
        self._names = _own_threads()
        self._threads0 = {i: c for i in self._names if (c := _thread_cpu_s(i)) is not None}

    def stop(self) -> None:
        """Take the last reading (call right after the engine's timed call)."""
        total = 0.0
        for ident, c0 in self._threads0.items():
            c1 = _thread_cpu_s(ident)
            if c1 is not None:
                total += max(0.0, c1 - c0)
        self.process_cpu_s = time.process_time() - self._p0
        self.wall_s = time.perf_counter() - self._t0
        self.thread_cpu_s = total
        self.threads = sorted(set({**self._names, **_own_threads()}.values()))
        if self._tree0 is not None:
            try:
                self.tree_cpu_s = own_tree_cpu_s()[0] - self._tree0
            except Exception:  # noqa: BLE001
                self.tree_cpu_s = None


def harness_metrics(mon: HarnessMonitor, process: dict[str, Any] | None, serving: bool) -> dict[str, Any]:
    """The cell's ``harness_share`` and ``harness`` record from a stopped monitor.

    Args:
        mon: the monitor, stopped right after the engine's timed call.
        process: the engine process's account (:attr:`RunOutput.process`), or None when the
            engine ran in this process (an in-process engine measured beside infbench, or a
            serving client).
        serving: a serving cell (the client ran here and the engine is a server).

    Returns:
        ``{"harness_share": float 0-1 or None, "harness": {"mode", "harness_cpu_s",
        "engine_cpu_s", "wall_s", "harness_cores", "threads_beside_engine"}}``; the formula
        is in the module doc.
    """
    threads: list[str]
    engine: float | None
    if process is not None:
        mode, harness, engine = "own process", mon.process_cpu_s, float(process.get("cpu_s") or 0.0)
        threads = list(process.get("infbench_threads") or [])
    elif serving:
        mode, harness, threads = "client", mon.process_cpu_s, []
        engine = None if mon.tree_cpu_s is None else max(0.0, mon.tree_cpu_s - mon.process_cpu_s)
        if engine is not None and engine <= 0.0:
            engine = None  # a remote server: its CPU is not ours to read
    else:
        mode, harness = "in process", mon.thread_cpu_s
        engine = max(0.0, mon.process_cpu_s - mon.thread_cpu_s)
        threads = list(mon.threads)
    share = harness / (harness + engine) if engine is not None and harness + engine > 0 else None
    rec = {"mode": mode, "harness_cpu_s": round(harness, 4),
           "engine_cpu_s": None if engine is None else round(engine, 4), "wall_s": round(mon.wall_s, 4),
           "harness_cores": round(harness / mon.wall_s, 4) if mon.wall_s > 0 else None,
           "threads_beside_engine": threads}
    return {"harness_share": None if share is None else round(share, 4), "harness": rec}


def harness_reasons(metrics: dict[str, Any] | None, device_kind: str = "cpu") -> list[str]:
    """The ``suspect`` reasons of a cell's harness record (``metrics["harness"]`` and the
    serving client's ``metrics["client"]``); ``[]`` when nothing says the harness or the
    client may have limited the result. Thresholds: see the module doc."""
    if not metrics:
        return []
    out: list[str] = []
    h = M.field(metrics, "harness") or {}
    mode = h.get("mode")
    threads = h.get("threads_beside_engine") or []
    if mode == "in process" and threads:
        out.append(f"infbench's own threads ({', '.join(threads)}) ran in the engine's process during the timed part "
                   f"({h.get('harness_cpu_s', 0):.3f} core-s) and may compete with the engine's host thread for "
                   "the interpreter; measure with the engine in its own process (without --no-engine-process)")
    cores, core_s = h.get("harness_cores"), h.get("harness_cpu_s")
    limit = CPU_CELL_SHARE if device_kind == "cpu" else ACCEL_CELL_CORES
    if mode in ("own process", "in process") and cores is not None and cores > limit \
            and (core_s or 0) >= MIN_OTHER_CORE_S:
        out.append(f"infbench itself used {cores:.2f} cores during the cell (more than {limit:g}): the harness may "
                   "have slowed the engine")
    client = M.field(metrics, "client") or {}
    behind = client.get("behind") or []
    if mode == "client" and cores is not None and cores >= CLIENT_SATURATED_CORES:
        behind = [*behind, f"the client's process used {cores:.2f} cores (its event loop saturated its thread)"]
    if behind:
        out.append("client-bound: the load generator, not the server, may have limited this cell ("
                   + ", and ".join(behind) + ")")
    return out


#: A cell whose device was busy (``util_pct``, the share of time a kernel ran) less than this on
#: average over the timed part, while the engine's process was busy, was paced by the engine's
#: host thread (:func:`host_bound`).
HOST_BOUND_UTIL_PCT = 30.0
#: ... busy meaning: the engine's CPU seconds over the timed part's wall seconds at least this.
HOST_BOUND_ENGINE_BUSY = 0.9


def host_bound(metrics: dict[str, Any] | None, device_kind: str) -> dict[str, Any]:
    """Whether an accelerator cell's pace was set by the engine's host thread, not the device.

    On the H100, eager transformers at Llama-3-8B b1-b16 kept its host thread 100 % busy while
    the GPU ran kernels 11-16 % of the time (NVML ``util_pct``); the same cell with a static
    KV cache (CUDA graphs) ran at 72 % and 9.2 ms per token instead of 73 ms. Such a cell is
    measured correctly, but its TPOT and throughput describe the engine's Python and launch
    path on that host, not the device. Rule: device ``util_pct`` mean below
    :data:`HOST_BOUND_UTIL_PCT` and the engine's CPU seconds at least
    :data:`HOST_BOUND_ENGINE_BUSY` of the timed part's wall seconds (``metrics["harness"]``).

    Args:
        metrics: the cell's metrics with ``telemetry`` and ``harness`` (None: nothing).
        device_kind: the device's kind; a ``cpu`` device is never host-bound (it is the host).

    Returns:
        ``{"host_bound": True, "host_bound_reason": text}``, or ``{}`` when the rule does not
        hold or a figure is missing (no ``util_pct`` channel, a remote server's CPU unknown).
    """
    if not metrics or device_kind == "cpu":
        return {}
    util = ((M.field(metrics, "telemetry") or {}).get("util_pct") or {}).get("mean")
    h = M.field(metrics, "harness") or {}
    engine, wall = h.get("engine_cpu_s"), h.get("wall_s")
    if util is None or engine is None or not wall:
        return {}
    busy = engine / wall
    if util >= HOST_BOUND_UTIL_PCT or busy < HOST_BOUND_ENGINE_BUSY:
        return {}
    return {"host_bound": True,
            "host_bound_reason": f"the device ran kernels {util:.0f} % of the timed part while the engine's process "
                                 f"was busy {100 * min(busy, 1.0):.0f} % of it: the engine's host thread (Python, "
                                 "kernel launches) set the pace, so TPOT and throughput describe that path on this "
                                 "host, not the device (an engine or setting with CUDA graphs or a compiled step, "
                                 "e.g. --engine-arg cache_implementation=static, measures the device)"}
