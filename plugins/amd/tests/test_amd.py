"""The AMD plugin: amd-smi JSON parsers against the documented-format samples
(tests/samples/SOURCES.md), amdsmi value decoding, and detection on a GPU-less host."""

from pathlib import Path

import pytest

from infbench.contract.manager import check_plugin
from infbench.data.schema import DeviceInfo, PowerReading
from infbench.measure.power import energy_summary
from infbench_amd import hooks
from infbench_amd.smi import (
    energy_j_from_count,
    groups_from_static,
    parse_json_output,
    power_w_from_info,
    precisions_for_gfx,
    readings_from_metric,
)

SAMPLES = Path(__file__).parent / "samples"


def sample(name):
    return parse_json_output((SAMPLES / name).read_text())


def test_hooks_match_the_contract():
    assert check_plugin(hooks) == sorted([
        "infbench_container_spec", "infbench_default_sweep", "infbench_detect", "infbench_device_backends",
        "infbench_device_catalog", "infbench_engines", "infbench_power_sampler", "infbench_supported_precisions"])


def test_no_gpu_here_detects_nothing_without_error():
    """amdsmi is importable only with libamd_smi.so and amd-smi is not installed: []."""
    assert hooks.infbench_detect() == []
    s = hooks.infbench_power_sampler(DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI300X"))
    assert not s.available and "amd-smi" in s.reason


def test_amdsmi_binding_without_its_library_is_contained(monkeypatch, capsys):
    """The pip binding on a host without ROCm prints a message and raises KeyError('libamd_smi.so')
    at import (seen with amdsmi 7.0.2): detection says why, prints nothing, raises nothing."""
    import builtins
    import sys

    from infbench_amd.smi import SmiUnavailable, load_amdsmi

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "amdsmi":
            print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
            raise KeyError("libamd_smi.so")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(SmiUnavailable, match="KeyError: 'libamd_smi.so'.*Unable to find libamd_smi.so"):
        load_amdsmi()
    assert hooks.infbench_detect() == []
    assert capsys.readouterr().out == ""


def test_static_json_groups_identical_gpus():
    (g,) = groups_from_static(sample("amd-smi-static-mi300x.json"))
    assert g.model == "AMD Instinct MI300X" and g.count == 2
    assert g.memory_bytes == 196592 * 2**20 and g.driver == "6.8.5"
    assert g.pci_ids == ["0000:0c:00.0", "0000:22:00.0"] and g.properties["gfx_version"] == "gfx942"
    assert g.properties["indices"] == [0, 1]
    assert "fp8" in hooks.infbench_supported_precisions(g)


def test_metric_json_rocm7_power_and_energy_units():
    rs = readings_from_metric(sample("amd-smi-metric-rocm7.json"), t_ns=5, indices=[0, 1])
    assert [(r.device_index, r.power_w) for r in rs] == [(0, 542.0), (1, 141.0)]
    assert rs[0].energy_j == pytest.approx(2148573.406)
    only1 = readings_from_metric(sample("amd-smi-metric-rocm7.json"), t_ns=5, indices=[1])
    assert [(r.device_index, r.power_w) for r in only1] == [(0, 141.0)]


def test_metric_json_after_a_warning_line_with_uj_and_average_power():
    rs = readings_from_metric(sample("amd-smi-metric-mi250-warning.txt"), t_ns=0)
    assert rs[0].power_w == 212.0 and rs[0].energy_j == pytest.approx(730.2145125)
    assert rs[1].power_w == 0.0 and rs[1].energy_j == 0.0


def test_counter_that_disagrees_with_power_is_replaced_by_power_x_time():
    """A GPU whose counter stays at 0 J while it reports 500 W for 2 s: 1000 J from power."""
    s = 1_000_000_000
    rs = [PowerReading(t_ns=0, energy_j=0.0, power_w=500.0), PowerReading(t_ns=2 * s, energy_j=0.0, power_w=500.0)]
    e, method, note = energy_summary(rs)
    assert e == pytest.approx(1000.0) and method == "power" and "using power x time" in note


def test_amdsmi_library_values():
    assert energy_j_from_count({"energy_accumulator": 1_000_000, "counter_resolution": 15.3,
                                "timestamp": 1}) == pytest.approx(15.3)
    assert energy_j_from_count({"power": 2_000_000, "counter_resolution": 15.3}) == pytest.approx(30.6)
    assert power_w_from_info({"socket_power": "N/A", "current_socket_power": 612, "average_socket_power": "N/A"}) == 612
    assert power_w_from_info({"socket_power": 65535}) is None


def test_precisions_by_gfx_target():
    assert "fp8" not in precisions_for_gfx("gfx90a") and "bf16" in precisions_for_gfx("gfx90a")
    assert "fp8" in precisions_for_gfx("gfx942")
    assert precisions_for_gfx(None) == ["fp32", "fp16"]


def test_container_spec_rocm_devices():
    spec = hooks.infbench_container_spec(DeviceInfo(vendor="amd", kind="gpu", model="x"), "vllm-server").as_dict()
    assert spec["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert spec["group_add"] == ["video"] and spec["ipc_mode"] == "host"
    assert spec["security_opt"] == ["seccomp=unconfined"] and not spec.get("privileged")


def test_mi250_catalog_is_per_gcd():
    from infbench.detect.devices import match_device

    cat = hooks.infbench_device_catalog()
    s = match_device(cat, DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI250X / MI250"))
    d = s.per_device()
    assert s.id == "mi250" and d["memory_bytes"] == 64 * 2**30
    assert d["peak_flops"]["bf16"] == pytest.approx(181.05e12) and "fp8" not in d["peak_flops"]


def test_metric_json_usage_and_throttle_channels():
    from infbench_amd.smi import channels_from_metric

    cs = channels_from_metric(sample("amd-smi-metric-rocm7.json"), t_ns=5, indices=[0, 1])
    assert cs[0].values == {"util_pct": 87.0, "mem_util_pct": 41.0} and cs[0].throttle == []
    assert cs[1].values == {"util_pct": 0.0} and cs[1].device_index == 1


class StandInAmdsmi:
    """amdsmi's answers for one MI300X (the binding's dict shapes, ROCm 6.1+ ``clk`` key);
    the memory clock query is unsupported, as on some SKUs."""

    class AmdSmiClkType:
        GFX, MEM = 1, 7

    class AmdSmiTemperatureType:
        HOTSPOT = 1

    class AmdSmiTemperatureMetric:
        CURRENT = 0

    def amdsmi_get_gpu_activity(self, h):
        return {"gfx_activity": 93, "umc_activity": 37, "mm_activity": "N/A"}

    def amdsmi_get_clock_info(self, h, kind):
        if kind == self.AmdSmiClkType.MEM:
            raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")
        return {"clk": 2100, "min_clk": 500, "max_clk": 2100, "clk_locked": False}

    def amdsmi_get_temp_metric(self, h, sensor, metric):
        return 74

    def amdsmi_get_gpu_metrics_info(self, h):
        return {"throttle_status": True}


def test_amdsmi_library_channels():
    from infbench_amd.smi import channels_from_amdsmi

    c = channels_from_amdsmi(StandInAmdsmi(), "h0", t_ns=1, device_index=0)
    assert c.values == {"util_pct": 93.0, "mem_util_pct": 37.0, "clock_mhz": 2100.0, "temp_c": 74.0}
    assert c.throttle == ["throttled"]


def test_the_plugin_conforms_to_the_contract():
    """The conformance kit (``infbench plugins check amd``) on this host's answers and on a
    stand-in device of the vendor: every hook answers in the contract's types, none raises,
    and a power sampler's readings (NoPower without the driver) are finite and non-negative."""
    from infbench.plugin import DeviceInfo as _Device
    from infbench.testing.conformance import assert_conforms

    detected = hooks.infbench_detect()
    stand_in = _Device(vendor="amd", kind="gpu", model="AMD Instinct MI300X",
                       count=1, memory_bytes=192 * 2**30)
    findings = assert_conforms(hooks, devices=[*detected, stand_in])
    assert {"infbench_supported_precisions", "infbench_power_sampler"} <= {f.hook for f in findings}
