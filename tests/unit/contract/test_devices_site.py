"""Device descriptions (schema, matching, per-device split), the site config, and the
merge of engine specs across plugins."""

import pytest

from infbench.contract.registry import engine_specs
from infbench.contract.site import site_config, site_section
from infbench.data.engine import EngineSpec
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo, DeviceSpec
from infbench.detect.devices import find_spec, load_device_specs, match_device


def spec(**kw):
    base = dict(id="x1", name="X One", vendor="acme", match=["x one"], memory_gib=80, bandwidth_tb_s=2.0,
                peak_tflops={"bf16": 100.0}, tdp_w=400, sources=["datasheet"])
    return DeviceSpec(**{**base, **kw})


def test_per_device_units_and_packages():
    d = spec(devices_per_package=2).per_device()
    assert d["memory_bytes"] == 40 * 2**30 and d["memory_bandwidth_bytes_s"] == pytest.approx(1e12)
    assert d["peak_flops"] == {"bf16": pytest.approx(50e12)} and d["tdp_w"] == 200


def test_longest_match_wins_and_vendor_must_agree():
    specs = [spec(id="a", match=["h100"]), spec(id="b", match=["h100 80gb hbm3"])]
    dev = DeviceInfo(vendor="acme", kind="gpu", model="H100 80GB HBM3")
    assert match_device(specs, dev).id == "b"
    assert match_device(specs, dev.model_copy(update={"vendor": "other"})) is None
    assert find_spec(specs, "A").id == "a"
    with pytest.raises(ConfigError, match="unknown device"):
        find_spec(specs, "zz")


def test_yaml_errors_name_the_entry(tmp_path):
    p = tmp_path / "devices.yaml"
    p.write_text("- id: bad\n  name: B\n  vendor: v\n  peak_tflops: {fp64: 1}\n  sources: [s]\n")
    with pytest.raises(ConfigError, match="device bad"):
        load_device_specs(p)


def test_site_config(tmp_path, monkeypatch):
    p = tmp_path / "site.toml"
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(p))
    with pytest.raises(ConfigError, match="does not exist"):
        site_config()
    p.write_text("[a]\nx = 1\nb = 2\n")
    assert site_section("a") == {"x": 1, "b": 2} and site_section("zzz") is None
    p.write_text("[a\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        site_config()
    monkeypatch.delenv("INFBENCH_SITE_CONFIG")
    assert site_config() == {}  # no $INFBENCH_HOME/site.toml: nothing declared


def test_engine_specs_merge_platforms_and_dtypes(pm):
    from infbench.contract.hookspecs import hookimpl

    class Vendor:
        @hookimpl
        def infbench_engines(self):
            return [EngineSpec("llama.cpp", None, ["acme"], {"q6_k": "int8"})]

    pm.register(Vendor(), name="acme")
    s = engine_specs(pm)["llama.cpp"]
    assert "acme" in s.platforms and "cpu" in s.platforms and s.factory is not None
    assert next(iter(s.dtypes)) == "f16" and s.dtypes["q6_k"] == "int8"
