"""The cerebras plugin: a remote platform declared in the site config (no hardware to find),
with a user-supplied power source. End-to-end against a real server: tests/integration/
test_remote_platforms.py."""

import pytest

from infbench.contract.manager import check_plugin
from infbench.data.errors import ConfigError
from infbench.measure.power import CommandPowerSampler, FixedPowerSampler
from infbench_cerebras.hooks import plugin


@pytest.fixture
def site(tmp_path, monkeypatch):
    p = tmp_path / "site.toml"
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(p))
    monkeypatch.delenv("CEREBRAS_API_KEY", raising=False)
    return p


def test_hooks_match_the_contract():
    assert check_plugin(plugin) == sorted([
        "infbench_default_sweep", "infbench_detect", "infbench_device_catalog", "infbench_engines",
        "infbench_power_sampler", "infbench_supported_precisions"])


def test_not_declared_means_not_detected(site):
    site.write_text("[other]\nx = 1\n")
    assert plugin.infbench_detect() == []


def test_declared_with_defaults_and_no_power(site):
    site.write_text("[cerebras]\n")
    (dev,) = plugin.infbench_detect()
    assert dev.vendor == "cerebras" and dev.kind == "remote" and dev.model == "Cerebras CS-3 (Cerebras Inference)"
    assert dev.properties["base_url"] == "https://api.cerebras.ai/v1"
    assert dev.properties["api_key_env"] == "CEREBRAS_API_KEY"
    assert dev.properties["api_key_set"] is False
    s = plugin.infbench_power_sampler(dev)
    assert not s.available and "power_w or power_command" in s.reason


def test_power_sources_are_labelled(site):
    site.write_text('[cerebras]\npower_w = 10000\npower_label = "rack PDU"\n')
    (dev,) = plugin.infbench_detect()
    s = plugin.infbench_power_sampler(dev)
    assert isinstance(s, FixedPowerSampler) and s.label == "user-supplied: rack PDU" and s.read()[0].power_w == 10000
    site.write_text('[cerebras]\npower_command = "echo 9876.5"\n')
    s = plugin.infbench_power_sampler(plugin.infbench_detect()[0])
    assert isinstance(s, CommandPowerSampler) and s.read()[0].power_w == 9876.5 and s.label.endswith(": echo")


def test_invalid_table_names_the_problem(site):
    site.write_text('[cerebras]\npower_w = 100\npower_command = "echo 1"\n')
    with pytest.raises(ConfigError, match="not both"):
        plugin.infbench_detect()


def test_engine_and_catalog():
    (spec,) = plugin.infbench_engines()
    assert spec.name == "openai" and spec.platforms == ["cerebras"] and spec.factory is None
    assert [s.id for s in plugin.infbench_device_catalog()] == ["cs-3"]


def test_the_plugin_conforms_to_the_contract():
    """The conformance kit (``infbench plugins check cerebras``): every hook answers in the
    contract's types and none raises."""
    from infbench.testing.conformance import assert_conforms

    findings = assert_conforms(plugin)
    assert {"hooks", "infbench_detect"} <= {f.hook for f in findings}
