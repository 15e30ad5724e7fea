"""Shared fixtures. Every test gets its own INFBENCH_HOME (store, caches) under tmp_path,
except that dummy GGUF files and the measured CPU limits are kept per session to save time."""

from __future__ import annotations

import signal

import pytest

from infbench.contract.manager import build_plugin_manager, get_plugin_manager
from infbench.data.secrets import forget_all
from tests.support.home import make_home


def pytest_configure(config):
    """Ctrl-C as Python sets it up when the suite starts with SIGINT ignored (a shell starts its
    background jobs so, `nohup ... &`): the signal tests send SIGINT to this process and to the
    `infbench` processes it starts, which inherit an ignored signal but not a handler. Run in
    the background that way, a CI replica failed every one of them."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def gguf_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf-cache")


@pytest.fixture(scope="session")
def cpu_limits_file(tmp_path_factory):
    """One measurement of this host's CPU limits (roofline) for the whole session."""
    return tmp_path_factory.mktemp("cpu-limits") / "cpu_limits.json"


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
