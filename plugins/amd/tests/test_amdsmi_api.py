"""The AMD plugin's amdsmi library path (detection, energy sampler, telemetry, init/shutdown)
against a stand-in ``amdsmi`` module with the binding's documented API.

No AMD GPU or libamd_smi.so is reachable here, and the ``amdsmi`` wheel cannot be imported
without that library, so the stand-in is checked against a snapshot of the real binding
(tests/signatures/smi_api.json, written by tests/signatures/extract_smi_api.py from
amdsmi 7.0.2's ``amdsmi_interface.py``): every function the plugin calls exists there with
the same parameters, and every dict the stand-in returns uses only keys the binding builds.
The values are written by hand for two MI300X and one MI250X GCD: nothing here was captured
from hardware.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import sys
import types
from pathlib import Path

import pytest

from infbench_amd import hooks, smi

ROOT = Path(__file__).resolve().parents[3]
API = json.loads((ROOT / "tests" / "signatures" / "smi_api.json").read_text())["amdsmi"]


def make_amdsmi(fail_init: bool = False) -> types.ModuleType:
    """A module shaped like ``amdsmi`` (functions, enums, return dicts of amdsmi 7.0.2).

    GPUs 0 and 1: MI300X (192 GiB as ``vram_size`` MB, gfx942), GPU 2: MI250X GCD (64 GiB,
    gfx90a, no ``socket_power``: the binding's "N/A"). Energy counters advance 1e6 ticks of
    15.3 uJ (15.3 J) per read; calls are logged in ``calls``.
    """
    m = types.ModuleType("amdsmi")
    m.calls = []
    gpus = [("AMD Instinct MI300X", 196592, "gfx942"), ("AMD Instinct MI300X", 196592, "gfx942"),
            ("AMD Instinct MI250X", 65520, "gfx90a")]
    ticks = [5_000_000, 9_000_000, 1_000]

    m.AmdSmiInitFlags = enum.IntEnum("AmdSmiInitFlags", {"INIT_ALL_PROCESSORS": 0, "INIT_AMD_CPUS": 1,
                                                         "INIT_AMD_GPUS": 2})
    m.AmdSmiClkType = enum.IntEnum("AmdSmiClkType", {"SYS": 0, "GFX": 1, "MEM": 5})
    m.AmdSmiTemperatureType = enum.IntEnum("AmdSmiTemperatureType", {"EDGE": 0, "HOTSPOT": 1})
    m.AmdSmiTemperatureMetric = enum.IntEnum("AmdSmiTemperatureMetric", {"CURRENT": 0})

    def amdsmi_init(flag=m.AmdSmiInitFlags.INIT_AMD_GPUS):
        m.calls.append(("init", flag))
        if fail_init:
            raise RuntimeError("AMDSMI_STATUS_DRIVER_NOT_LOADED")

    def amdsmi_shut_down():
        m.calls.append(("shut_down",))

    def amdsmi_get_processor_handles():
        return [f"handle-{i}" for i in range(len(gpus))]

    def _i(processor_handle):
        return int(processor_handle.rsplit("-", 1)[1])

    def amdsmi_get_gpu_asic_info(processor_handle):
        name, _, gfx = gpus[_i(processor_handle)]
        return {"market_name": name, "vendor_id": "0x1002", "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                "device_id": "0x74a1", "asic_serial": f"0x{_i(processor_handle):016x}",
                "target_graphics_version": gfx, "num_compute_units": 304}

    def amdsmi_get_gpu_vram_info(processor_handle):
        return {"vram_type": 10, "vram_vendor": "HYNIX", "vram_size": gpus[_i(processor_handle)][1],
                "vram_bit_width": 8192}

    def amdsmi_get_gpu_driver_info(processor_handle):
        return {"driver_name": "amdgpu", "driver_version": "6.10.5", "driver_date": "2015/01/01 00:00"}

    def amdsmi_get_gpu_device_bdf(processor_handle):
        return f"0000:{0x0c + 0x10 * _i(processor_handle):02x}:00.0"

    def amdsmi_get_gpu_device_uuid(processor_handle):
        return f"uuid-{_i(processor_handle)}"

    def amdsmi_get_energy_count(processor_handle):
        i = _i(processor_handle)
        ticks[i] += 1_000_000
        return {"energy_accumulator": ticks[i], "counter_resolution": 15.3, "timestamp": ticks[i]}

    def amdsmi_get_power_info(processor_handle):
        i = _i(processor_handle)
        if i == 2:
            return {"socket_power": "N/A", "current_socket_power": "N/A", "average_socket_power": 212,
                    "power_limit": 500}
        return {"socket_power": 640 + i, "current_socket_power": 640 + i, "average_socket_power": 600,
                "power_limit": 750}

    def amdsmi_get_gpu_activity(processor_handle):
        return {"gfx_activity": 97, "umc_activity": 55, "mm_activity": "N/A"}

    def amdsmi_get_clock_info(processor_handle, clock_type):
        return {"clk": 2100 if clock_type == m.AmdSmiClkType.GFX else 1300, "min_clk": 500, "max_clk": 2100}

    def amdsmi_get_temp_metric(processor_handle, sensor_type, metric):
        assert sensor_type == m.AmdSmiTemperatureType.HOTSPOT and metric == m.AmdSmiTemperatureMetric.CURRENT
        return 81

    def amdsmi_get_gpu_metrics_info(processor_handle):
        return {"throttle_status": _i(processor_handle) == 1, "temperature_hotspot": 81}

    for f in list(locals().values()):
        if inspect.isfunction(f) and f.__name__.startswith("amdsmi_"):
            setattr(m, f.__name__, f)
    return m


def test_the_plugin_calls_only_what_the_binding_has_with_its_parameters():
    called = set(re.findall(r"amdsmi\.(amdsmi_\w+)", inspect.getsource(smi)))
    assert called <= set(API["functions"]), called - set(API["functions"])
    standin = make_amdsmi()
    for name in called | {"amdsmi_get_processor_handles"}:
        assert list(inspect.signature(getattr(standin, name)).parameters) == API["functions"][name], name
    for enum_name, members in (("AmdSmiClkType", ("GFX", "MEM")), ("AmdSmiTemperatureType", ("HOTSPOT",)),
                               ("AmdSmiTemperatureMetric", ("CURRENT",)), ("AmdSmiInitFlags", ("INIT_AMD_GPUS",))):
        assert set(members) <= set(API["enums"][enum_name])
        assert set(members) <= set(getattr(standin, enum_name).__members__)


def test_the_stand_in_returns_only_keys_the_binding_builds():
    m = make_amdsmi()
    for name, keys in API["returns"].items():
        if not keys:
            continue
        args = ["handle-0"] + ([m.AmdSmiClkType.GFX] if name == "amdsmi_get_clock_info" else [])
        got = getattr(m, name)(*args)
        assert set(got) <= set(keys), (name, set(got) - set(keys))


def test_detection_groups_gpus_by_model_and_memory():
    groups = smi.groups_from_amdsmi(make_amdsmi())
    assert [(g.model, g.count) for g in groups] == [("AMD Instinct MI300X", 2), ("AMD Instinct MI250X", 1)]
    mi300 = groups[0]
    assert mi300.memory_bytes == 196592 * 2**20 and mi300.driver == "6.10.5"
    assert mi300.pci_ids == ["0000:0c:00.0", "0000:1c:00.0"]
    assert mi300.properties == {"indices": [0, 1], "gfx_version": "gfx942", "uuids": ["uuid-0", "uuid-1"]}
    assert hooks.infbench_supported_precisions(mi300)[3] == "fp8"
    assert "fp8" not in hooks.infbench_supported_precisions(groups[1])


def test_energy_sampler_reads_counters_in_joules_and_socket_power():
    m = make_amdsmi()
    s = smi.AmdSmiSampler(m, [1, 2])
    first = s.read()
    second = s.read()
    assert [r.device_index for r in first] == [0, 1]
    assert second[0].energy_j - first[0].energy_j == pytest.approx(15.3)      # 1e6 ticks x 15.3 uJ
    assert first[0].energy_j == pytest.approx(10_000_000 * 15.3 / 1e6)
    assert first[0].power_w == 641 and first[1].power_w == 212                  # "N/A" -> average_socket_power
    ch = s.read_channels()
    assert ch[0].values == {"util_pct": 97.0, "mem_util_pct": 55.0, "clock_mhz": 2100.0, "mem_clock_mhz": 1300.0,
                            "temp_c": 81.0}
    assert ch[0].throttle == ["throttled"] and ch[1].throttle == []
    s.close()
    assert m.calls[-1] == ("shut_down",)


def test_hooks_load_the_binding_init_for_gpus_and_shut_it_down(monkeypatch):
    m = make_amdsmi()
    monkeypatch.setitem(sys.modules, "amdsmi", m)
    devices = hooks.infbench_detect()
    assert [d.model for d in devices] == ["AMD Instinct MI300X", "AMD Instinct MI250X"]
    assert m.calls == [("init", m.AmdSmiInitFlags.INIT_AMD_GPUS), ("shut_down",)]
    sampler = hooks.infbench_power_sampler(devices[0])
    assert isinstance(sampler, smi.AmdSmiSampler) and len(sampler.read()) == 2


def test_a_failed_init_falls_back_to_the_cli_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", make_amdsmi(fail_init=True))
    monkeypatch.setattr(smi.shutil, "which", lambda exe: None)          # no amd-smi CLI either
    with pytest.raises(smi.SmiUnavailable, match="amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED"):
        smi.load_amdsmi()
    assert hooks.infbench_detect() == []
    from infbench.data.schema import DeviceInfo

    none = hooks.infbench_power_sampler(DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI300X", count=1))
    assert "amdsmi_init failed" in none.reason and "amd-smi CLI" in none.reason
