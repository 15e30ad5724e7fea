"""Issue 30: ``infbench run`` starts the engine process's imports while it plans
(execution.orchestrator.head_start), only when the run will use an in-process engine in its
own process on this machine."""

from __future__ import annotations

import pytest

from infbench.data.run_config import RunConfig
from infbench.data.schema import DeviceInfo
from infbench.detect import Detection
from infbench.detect.registry import Registry
from infbench.execution import orchestrator as O
from infbench.testing import plugin_manager

GPU = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3")
CPU = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


@pytest.fixture
def started(monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(O, "prewarm", lambda mods, python=None: calls.append(list(mods)) or True)
    return calls


@pytest.fixture
def specs():
    from infbench.contract.registry import engine_specs

    return engine_specs(plugin_manager())


def run_config(**flags):
    return RunConfig.from_flags(flags)


def host(*devices: DeviceInfo) -> Registry:
    """A registry whose detection saw ``devices``."""
    reg = Registry(plugin_manager())
    reg._detection = Detection(devices=list(devices))
    return reg


def test_one_named_in_process_engine_starts_with_its_modules(started, specs):
    for m in specs["transformers"].modules:
        pytest.importorskip(m)
    assert O.head_start(run_config(engine=["transformers"]), host(CPU)) is True
    assert started == [list(specs["transformers"].modules)] == [["torch", "transformers"]]


@pytest.mark.parametrize("req", [
    run_config(engine=["llama.cpp"], dry_run=True),                      # nothing will start
    run_config(engine=["llama.cpp"], engine_process=False),              # measured in this process
    run_config(engine=["llama.cpp"], executor="container"),              # elsewhere
    run_config(engine=["llama.cpp", "transformers"]),                    # which one first is the plan's
    run_config(engine=["llama.cpp-server"]),                             # a server, no engine process
    run_config(engine=["nonesuch"]),                                     # the plan reports it
    run_config(),                                                        # the CPU's default sweep
])
def test_no_head_start_where_no_engine_process_of_this_run_would_take_it(started, specs, req):
    assert O.head_start(req, host(CPU)) is False
    assert started == []


def test_default_sweep_on_an_accelerator_imports_torch_and_transformers(started, specs, monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())   # as on the GPU host
    assert O.head_start(run_config(), host(CPU, GPU)) is True
    assert started == [O.HEAD_START_MODULES]
    assert O.head_start(run_config(preset="lib-corner"), host(GPU)) is False
