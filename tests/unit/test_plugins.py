"""The plugin manager: built-ins, disabling, strict hook names, failure isolation."""

import pluggy
import pytest

from infbench import hookimpl
from infbench.plugins import build_plugin_manager
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
    assert pm.hook.infbench_supported_precisions(device=other) is None
