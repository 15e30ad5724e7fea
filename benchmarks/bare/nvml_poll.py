"""The NVML reads infbench's samplers make, done bare: a stand-in for infbench's power, telemetry
and contention threads in the cause study of benchmarks/harness_overhead.py (issue 30).

Per tick (every ``interval`` s, 10 Hz as infbench's ``--power-interval`` default), on every GPU,
the calls of the nvidia plugin's sampler (plugins/nvidia/infbench_nvidia/nvml.py):
``nvmlDeviceGetTotalEnergyConsumption``, ``nvmlDeviceGetPowerUsage``, ``nvmlDeviceGetFieldValues``
(instant power), ``nvmlDeviceGetUtilizationRates``, ``nvmlDeviceGetClockInfo`` (SM and memory),
``nvmlDeviceGetTemperature`` and ``nvmlDeviceGetCurrentClocksEventReasons``; once a second the
contention monitor's ``nvmlDeviceGetComputeRunningProcesses`` and
``nvmlDeviceGetGraphicsRunningProcesses``. It imports nvidia-ml-py and nothing of infbench.

Two uses:

* ``Poller(...).start()`` / ``.stop()``: a Python thread in the caller's process (the engine's
  interpreter shared, as with ``--no-engine-process``);
* ``python nvml_poll.py --interval 0.1``: a process of its own (the engine's interpreter left
  alone, the driver shared) that prints one JSON line of its call times when stdin closes.

Without NVML (no driver, no nvidia-ml-py) every tick does nothing, and the summary says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no GPU
        return None, str(exc)


class Poller:
    """Reads NVML every ``interval`` s on a daemon thread; ``stop()`` returns the call times.

    Returns from stop(): ``{"nvml": bool, "ticks": n, "tick_ms_p50": ms, "tick_ms_max": ms,
    "python_busy_ms": ms}`` where a tick is all the calls of one reading (ms of wall time) and
    ``python_busy_ms`` the thread's CPU time over the whole run (``time.thread_time``).
    ``busy_ms`` > 0 adds that many ms of pure-Python work to every tick (no NVML needed): the
    interpreter-lock stand-in.
    """

    def __init__(self, interval: float = 0.1, busy_ms: float = 0.0, nvml: bool = True):
        self.interval, self.busy_ms = interval, busy_ms
        self.nv, self.handles = _nvml() if nvml else (None, "not asked")
        self.ticks: list[float] = []
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        t0 = time.perf_counter()
        nv = self.nv
        if nv is not None:
            for h in self.handles:
                nv.nvmlDeviceGetTotalEnergyConsumption(h)
                nv.nvmlDeviceGetPowerUsage(h)
                try:
                    nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_POWER_INSTANT])
                except Exception:  # noqa: BLE001 - an older driver
                    pass
                nv.nvmlDeviceGetUtilizationRates(h)
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
                nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                nv.nvmlDeviceGetCurrentClocksEventReasons(h)
                if len(self.ticks) % round(1 / self.interval) == 0:
                    nv.nvmlDeviceGetComputeRunningProcesses(h)
                    nv.nvmlDeviceGetGraphicsRunningProcesses(h)
        if self.busy_ms:
            end = time.perf_counter() + self.busy_ms / 1000
            x = 0
            while time.perf_counter() < end:
                x += 1
        self.ticks.append((time.perf_counter() - t0) * 1000)

    def _loop(self) -> None:
        c0 = time.thread_time()
        while not self._stop.wait(self.interval):
            self.tick()
        self.cpu_s = time.thread_time() - c0

    def start(self) -> Poller:
        self._stop.clear()
        self.ticks = []
        self._thread = threading.Thread(target=self._loop, name="nvml-poll", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        t = self.ticks or [0.0]
        return {"nvml": self.nv is not None, "nvml_error": None if self.nv is not None else self.handles,
                "ticks": len(self.ticks), "tick_ms_p50": statistics.median(t), "tick_ms_max": max(t),
                "python_busy_ms": self.cpu_s * 1000, "busy_ms_per_tick": self.busy_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between readings (default 0.1)")
    a = ap.parse_args()
    p = Poller(a.interval).start()
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    print(json.dumps(p.stop()), flush=True)


if __name__ == "__main__":
    main()
