"""A stand-in for the H100's slow stretch after a model load (issue 38): a test plugin that
makes a real engine on this CPU slow for some seconds after its model loads, in a way the
noisy-neighbour check cannot see.

With ``INFBENCH_SLOWSTART=PROFILE`` set, ``infbench_launch_engine`` hands out the real
llama.cpp (in-process) or llama.cpp-server adapter with one change: once its model has loaded
(``start`` returned), a small process of its own throttles the engine's process by
SIGSTOP/SIGCONT, a duty cycle of 20 ms, so the engine runs ``1 / slowdown`` of the time. The
throttler sleeps between signals (a few tenths of a per cent of a core), and it is a
descendant of infbench's own process tree, so the contention monitor counts no neighbour, as on
the H100 where no other process was busy.

Profiles (``SECONDS`` after the load, ``FACTOR`` the slowdown at its worst):

* ``ramp:SECONDS:FACTOR``: FACTOR x slow at the load, easing linearly to full speed at SECONDS
  (a transient the warm-up should wait out);
* ``long:SECONDS:FACTOR``: FACTOR x slow, steady, for SECONDS, then full speed at once (a
  stretch that is slow and stable: only the sentinel sees it);
* ``until:PATH:FACTOR``: FACTOR x slow, steady, until the file PATH exists (a test ends the
  stretch when the run has reached a given point, whatever the machine's speed).

Installed like any plugin: :func:`plugin_dir` writes this module with a ``.dist-info`` into a
folder for ``PYTHONPATH``, so the ``infbench`` entry point finds it in every process (the engine
process imports it to rebuild the adapter).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from infbench.contract.hookspecs import hookimpl
from infbench.engines.llama_cpp_engine import LlamaCppEngine
from infbench.engines.llama_server import LlamaServerEngine

PERIOD_S = 0.02


def slowdown(profile: str, t: float) -> float:
    """The slowdown factor ``profile`` asks for ``t`` seconds after the load (1: full speed).

    Raises:
        ValueError: an unknown profile.
    """
    kind, rest = profile.split(":", 1)
    if kind == "until":
        path, factor = rest.rsplit(":", 1)
        return 1.0 if os.path.exists(path) else float(factor)
    secs, factor = rest.split(":")
    seconds, f = float(secs), float(factor)
    if kind == "ramp":
        return 1.0 + (f - 1.0) * max(0.0, 1.0 - t / seconds)
    if kind == "long":
        return f if t < seconds else 1.0
    raise ValueError(f"unknown slow-start profile {profile!r} (ramp:SECONDS:FACTOR or long:SECONDS:FACTOR)")


def throttle(pid: int, profile: str) -> None:
    """Duty-cycle ``pid`` by SIGSTOP/SIGCONT per ``profile`` until it is at full speed for good or
    gone; the process is always left running."""
    secs = 0.0 if profile.startswith("until:") else float(profile.split(":")[1])
    t0 = time.monotonic()
    try:
        while True:
            t = time.monotonic() - t0
            s = slowdown(profile, t)
            if s <= 1.0 and t >= secs:
                return
            stopped = PERIOD_S * (1.0 - 1.0 / s)
            if stopped > 0:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stopped)
                os.kill(pid, signal.SIGCONT)
            time.sleep(PERIOD_S - stopped)
    except ProcessLookupError:
        return
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _spawn(pid: int) -> subprocess.Popen | None:
    profile = os.environ.get("INFBENCH_SLOWSTART")
    if not profile:
        return None
    log = os.environ.get("INFBENCH_SLOWSTART_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{time.time():.3f} throttle {pid} {profile}\n")
    return subprocess.Popen([sys.executable, "-c", f"import infbench_slowstart as s; s.throttle({pid}, {profile!r})"])


def _end(p: subprocess.Popen | None, pid: int | None) -> None:
    if p is not None and p.poll() is None:
        p.kill()
        p.wait(5)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


class SlowLlamaCpp(LlamaCppEngine):
    """llama.cpp in-process, throttled after its model loads (in the engine's own process)."""

    def start(self, group):
        super().start(group)
        self._throttler = _spawn(os.getpid())

    def stop(self):
        _end(getattr(self, "_throttler", None), None)
        super().stop()


class SlowLlamaServer(LlamaServerEngine):
    """llama.cpp's server, its process throttled after the model loads."""

    def start(self, group):
        super().start(group)
        self._pid = self.server.proc.pid if self.server is not None and self.server.proc else None
        self._throttler = _spawn(self._pid) if self._pid else None

    def stop(self):
        _end(getattr(self, "_throttler", None), getattr(self, "_pid", None))
        super().stop()


@hookimpl(tryfirst=True)
def infbench_launch_engine(engine, device, options):
    """The throttled adapter of llama.cpp or llama.cpp-server when ``INFBENCH_SLOWSTART`` is set."""
    if not os.environ.get("INFBENCH_SLOWSTART") or engine not in ("llama.cpp", "llama.cpp-server"):
        return None
    cls = SlowLlamaCpp if engine == "llama.cpp" else SlowLlamaServer
    return cls(device, options)


def plugin_dir(root: Path) -> Path:
    """Write this plugin with its ``.dist-info`` into ``root`` (a folder for ``PYTHONPATH``)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(__file__, root / "infbench_slowstart.py")
    info = root / "infbench_slowstart-0.0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: infbench-slowstart\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[infbench]\nslowstart = infbench_slowstart\n")
    return root
