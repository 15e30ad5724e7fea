"""The plugin manager: built-ins, disabling, strict hook names, failure isolation."""

import pluggy
import pytest

from infbench import hookimpl
from infbench.contract.manager import build_plugin_manager
from tests.conftest import VENDOR_PLUGINS


def test_builtins_and_their_hooks(pm):
    assert pm.has_plugin("cpu") and pm.has_plugin("engines")
    assert "infbench_detect" in pm.infos["cpu"].hooks
    assert pm.infos["engines"].hooks == ["infbench_engines"]
    assert pm.infos["cpu"].distribution == "infbench"


def test_disable_env(monkeypatch):
    monkeypatch.setenv("INFBENCH_DISABLE_PLUGINS", "cpu, other, " + VENDOR_PLUGINS)
    pm = build_plugin_manager()
    assert not pm.has_plugin("cpu") and pm.infos["cpu"].disabled
    assert pm.hook.infbench_detect() == []


class Misspelled:
    @hookimpl
    def infbench_detcet(self):
        return []


def test_misspelled_hook_fails_loudly(pm):
    pm.register(Misspelled(), name="typo")
    with pytest.raises(pluggy.PluginValidationError, match="infbench_detcet"):
        pm.check_pending()


class WrongArgs:
    @hookimpl
    def infbench_supported_precisions(self, device, extra):
        return None


def test_hook_with_unknown_argument_rejected(pm):
    with pytest.raises(pluggy.PluginValidationError, match="extra"):
        pm.register(WrongArgs(), name="wrong")


def test_firstresult_precisions_dispatch(pm, cpu):
    assert "fp32" in pm.hook.infbench_supported_precisions(device=cpu)
    other = cpu.model_copy(update={"vendor": "nobody"})
    # no vendor plugin owns it: the core's trylast default answers, last (every precision class)
    from infbench.data.schema import PRECISIONS

    assert pm.hook.infbench_supported_precisions(device=other) == list(PRECISIONS)
    impls = pm.hook.infbench_supported_precisions.get_hookimpls()
    assert impls[0].plugin_name == "core" and impls[0].trylast   # pluggy calls the first impl last


def test_core_defaults_are_trylast_hooks_inside_pluggy(pm, cpu):
    from infbench.measure.power import NoPower

    names = {"infbench_launch_engine", "infbench_device_info", "infbench_supported_precisions",
             "infbench_power_sampler"}
    for name in names:
        core = [i for i in getattr(pm.hook, name).get_hookimpls() if i.plugin_name == "core"]
        assert core and core[0].trylast, name
    nobody = cpu.model_copy(update={"vendor": "nvidia", "kind": "gpu", "model": "NVIDIA H100 80GB HBM3"})
    assert isinstance(pm.hook.infbench_power_sampler(device=nobody), NoPower)
    info = pm.hook.infbench_device_info(device=nobody)       # the catalog, through the core's default
    assert info is not None and info.memory_bandwidth_bytes_s > 1e12
    eng = pm.hook.infbench_launch_engine(engine="llama.cpp", device=cpu, options={})
    assert type(eng).__name__ == "LlamaCppEngine"


def test_dict_answers_of_older_plugins_are_validated_into_the_models(pm, cpu):
    from infbench.contract.hookspecs import hookimpl
    from infbench.contract.registry import container_spec
    from infbench.data.contract import ContainerSpec
    from infbench.data.errors import ConfigError

    class Old:
        @hookimpl
        def infbench_container_spec(self, device, engine):
            return {"image": "infbench/old:1", "shm_size": "1g"} if engine == "old" else None

    class Bad:
        @hookimpl
        def infbench_container_spec(self, device, engine):
            return {"image": "x", "shm_sise": "1g"} if engine == "bad" else None

    pm.register(Old(), name="old")
    pm.register(Bad(), name="bad")
    assert container_spec(pm, cpu, "old") == ContainerSpec(image="infbench/old:1", shm_size="1g")
    with pytest.raises(ConfigError, match="shm_sise"):
        container_spec(pm, cpu, "bad")
