"""Shared fixtures. Every test gets its own INFBENCH_HOME (store, caches) under tmp_path,
except that dummy GGUF files and the measured CPU limits are kept per session to save time
(shared by a session's pytest-xdist workers: :func:`tests.support.home.session_dir`)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys

import pytest
from filelock import FileLock

from infbench.contract.manager import build_plugin_manager, get_plugin_manager
from infbench.data.secrets import forget_all
from infbench.detect.platforms.cpu import cached_cpuinfo, cached_limits, cpu_device
from tests.support.home import make_home, session_dir


def pytest_configure(config):
    """Ctrl-C as Python sets it up when the suite starts with SIGINT ignored (a shell starts its
    background jobs so, `nohup ... &`): the signal tests send SIGINT to this process and to the
    `infbench` processes it starts, which inherit an ignored signal but not a handler. Run in
    the background that way, a CI replica failed every one of them."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _pin_worker()


def _pin_worker() -> None:
    """With ``INFBENCH_TEST_PIN_WORKERS=1`` (scripts/test.sh's parallel stage), pin
    pytest-xdist worker N to the N-th usable CPU (modulo their count), every thread of it, and so
    every process it starts (affinity is inherited). The engines size their threads to the CPUs
    they may use (``os.sched_getaffinity``: :func:`infbench.libs.llama.default_threads`, OpenMP
    and PyTorch likewise), and infbench's noisy-neighbour check counts only the cell's CPUs, so
    each worker is a one-core machine of its own: two workers' engines never share a core (llama.cpp's
    spinning threads collapse when they do: :mod:`infbench.measure.contention`). A worker
    container is started by the Docker daemon, not by the worker: infbench gives it the worker's
    CPU (``cpuset_cpus``: :func:`infbench.runtimes.docker_runtime.inherited_cpuset`)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if os.environ.get("INFBENCH_TEST_PIN_WORKERS") != "1" or not worker.startswith("gw"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    cpu = {cpus[int(worker[2:]) % len(cpus)]}
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpu)
        except OSError:  # a thread that ended meanwhile
            pass


@pytest.fixture(scope="session")
def gguf_cache(tmp_path_factory):
    """The session's dummy GGUF files, made on first use and shared by its workers (each file is
    written under a temporary name and renamed into place: :mod:`infbench.engines.gguf_dummy`)."""
    p = session_dir(tmp_path_factory) / "gguf-cache"
    p.mkdir(exist_ok=True)
    return p


@pytest.fixture(scope="session")
def cpu_limits_file(tmp_path_factory):
    """One measurement of this host's CPU limits (roofline) for the whole session, shared by its
    workers: the first worker measures them as it starts, the other waits on the lock (measured
    beside a running engine, the limits would come out low and the cells' physics checks would
    call sound figures suspect). Beside it, py-cpuinfo's answer and vLLM's platform and torch's
    answers, each linked into every home (make_home): asked once, not by every command a test
    starts (vLLM's costs 2.5-4 s of CPU each time, torch's 1.7 s)."""
    p = session_dir(tmp_path_factory) / "cpu_limits.json"
    with FileLock(f"{p}.lock"):
        cached_cpuinfo(p.with_name("cpuinfo.json"))
        if not p.exists():
            cached_limits(cpu_device(), p)
        kept_probe_answers(p.with_name("probe-home"))
    return p


def kept_probe_answers(home) -> None:
    """vLLM's platform answer and torch's kept in ``home/cache/vllm_platform.json`` and
    ``home/cache/torch_probe.json`` by infbench itself
    (:func:`infbench.engines.availability.vllm_probe`, :func:`~infbench.engines.availability.torch_probe`,
    in a process of their own with ``INFBENCH_HOME=home``: the test process imports neither
    vLLM nor torch); nothing for a package that is not installed, or whose file is there."""
    for name, module, probe in (("vllm_platform.json", "vllm", "vllm_probe"), ("torch_probe.json", "torch",
                                                                             "torch_probe")):
        if (home / "cache" / name).exists() or importlib.util.find_spec(module) is None:
            continue
        subprocess.run([sys.executable, "-c", f"from infbench.engines.availability import {probe}; {probe}()"],
                       env={**os.environ, "INFBENCH_HOME": str(home)}, capture_output=True, timeout=300, check=False)


@pytest.fixture(autouse=True)
def infbench_home(tmp_path, monkeypatch, gguf_cache, cpu_limits_file):
    home = make_home(tmp_path / "home", gguf_cache, cpu_limits_file)
    monkeypatch.setenv("INFBENCH_HOME", str(home))
    monkeypatch.delenv("INFBENCH_DISABLE_PLUGINS", raising=False)
    get_plugin_manager.cache_clear()
    forget_all()  # the secrets an earlier test's options held (data.secrets.remember)
    yield home
    get_plugin_manager.cache_clear()


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """SIGINT's and SIGTERM's handlers as they were before each test: an in-process run that a
    test interrupts may leave its own handler installed, and a later test that sends itself
    SIGINT then never sees KeyboardInterrupt (a unit test waited forever in a CI replica)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        if signal.getsignal(s) is not h and h is not None:
            signal.signal(s, h)


#: The vendor plugins under plugins/ (installed by scripts/test.sh).
VENDOR_PLUGINS = "nvidia,amd,intel,habana,sambanova,cerebras"


@pytest.fixture
def pm():
    return build_plugin_manager()


@pytest.fixture
def core_pm(monkeypatch):
    """A plugin manager with only the core's built-ins (vendor plugins disabled), for tests
    that register stand-in vendor plugins of their own."""
    monkeypatch.setenv("INFBENCH_DISABLE_PLUGINS", VENDOR_PLUGINS)
    return build_plugin_manager()


@pytest.fixture
def cpu(pm):
    from infbench.detect.platforms.cpu import cpu_device

    return cpu_device()
