"""The Gaudi plugin's pyhlml library path (detection, energy sampler, telemetry, init/shutdown)
against a stand-in ``pyhlml`` module with the binding's documented API.

No Gaudi or libhlml.so is reachable here, so the stand-in is checked against a snapshot of
the real binding (tests/signatures/smi_api.json, written by tests/signatures/
extract_smi_api.py from habana-pyhlml 1.22.2.32's ``main.py`` and
``pyhlml_types_generated.py``): every function the plugin calls exists there with the same
parameters, and the structures it returns carry the binding's field names (as ctypes
structures, with ``bytes`` strings). The values are written by hand for two Gaudi2 (HL-225):
nothing here was captured from hardware.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import re
import sys
import types
from pathlib import Path

import pytest

from infbench_habana import hl, hooks

ROOT = Path(__file__).resolve().parents[3]
API = json.loads((ROOT / "tests" / "signatures" / "smi_api.json").read_text())["pyhlml"]


def _struct(name: str, ctypes_fields: dict) -> type:
    """A ctypes structure named as pyhlml's, its fields in the snapshot's order."""
    return type(name, (ctypes.Structure,), {"_fields_": [(f, ctypes_fields[f]) for f in API["structs"][name]]})


def make_pyhlml(fail_init: bool = False) -> types.ModuleType:
    """A module shaped like ``pyhlml`` for two HL-225 (96 GiB): energy in mJ advancing 600 J
    per read, power 600 W in mW, utilisation as ``c_hlml_utilization`` (``aip``)."""
    m = types.ModuleType("pyhlml")
    m.calls = []
    memory = _struct("c_hlml_memory", {"free": ctypes.c_ulonglong, "total": ctypes.c_ulonglong,
                                       "used": ctypes.c_ulonglong})
    pci = _struct("c_hlml_pci_info", {"bus": ctypes.c_uint, "bus_id": ctypes.c_char * 19, "device": ctypes.c_uint,
                                      "domain": ctypes.c_uint, "pci_device_id": ctypes.c_uint, "caps": ctypes.c_uint,
                                      "pci_rev": ctypes.c_uint, "pci_subsys_id": ctypes.c_uint})
    util = _struct("c_hlml_utilization", {"aip": ctypes.c_uint, "memory": ctypes.c_uint})
    energy = [7_000_000, 8_000_000]

    def hlmlInit():
        m.calls.append("init")
        if fail_init:
            raise RuntimeError("HLML_ERROR_DRIVER_NOT_LOADED")

    def hlmlShutdown():
        m.calls.append("shutdown")

    def hlmlGetDriverVersion():
        return b"1.22.0-f2c1f6e"

    def hlmlDeviceGetCount():
        return 2

    def hlmlDeviceGetHandleByIndex(index):
        return ("dev", index)

    def hlmlDeviceGetName(device):
        return b"HL-225"

    def hlmlDeviceGetMemoryInfo(device):
        return memory(free=90 * 2**30, total=96 * 2**30, used=6 * 2**30)

    def hlmlDeviceGetPCIInfo(device):
        return pci(bus=0x33 + device[1], bus_id=f"0000:{0x33 + device[1]:02x}:00.0".encode())

    def hlmlDeviceGetUUID(device):
        return f"01P0-HL2080A0-15-TNPS24-{device[1]:02d}".encode()

    def hlmlDeviceGetTotalEnergyConsumption(device):
        energy[device[1]] += 600_000
        return energy[device[1]]

    def hlmlDeviceGetPowerUsage(device):
        return 600_000

    def hlmlDeviceGetUtilizationRates(device):
        return util(aip=88, memory=40)

    def hlmlDeviceGetClockInfo(device, clock_type=0):
        return 1800

    def hlmlDeviceGetTemperature(device, sensor_type):
        return 51

    def hlmlDeviceGetCurrentClocksThrottleReasons(device):
        return 0x4 if device[1] == 1 else 0

    for f in list(locals().values()):
        if inspect.isfunction(f) and f.__name__.startswith("hlml"):
            setattr(m, f.__name__, f)
    return m


def test_the_plugin_calls_only_what_the_binding_has_with_its_parameters():
    called = set(re.findall(r"hlml\.(hlml\w+)", inspect.getsource(hl))) | {"hlmlInit"}
    assert called <= set(API["functions"]), called - set(API["functions"])
    standin = make_pyhlml()
    for name in called:
        assert list(inspect.signature(getattr(standin, name)).parameters) == API["functions"][name], name
    # the plugin asks for the AIP sensor as 0 when the module has no constant of that name: pyhlml's value
    assert API["temperature_sensors"]["HLML_TEMPERATURE_ON_AIP"] == 0


def test_detection_groups_devices_and_decodes_bytes():
    (g,) = hl.groups_from_hlml(make_pyhlml())
    assert (g.model, g.count, g.memory_bytes, g.driver) == ("HL-225", 2, 96 * 2**30, "1.22.0-f2c1f6e")
    assert g.pci_ids == ["0000:33:00.0", "0000:34:00.0"]
    assert g.properties == {"indices": [0, 1], "uuids": ["01P0-HL2080A0-15-TNPS24-00", "01P0-HL2080A0-15-TNPS24-01"]}
    assert hooks.infbench_supported_precisions(g)[:2] == ["bf16", "fp8"]


def test_energy_sampler_in_joules_and_watts_and_telemetry():
    m = make_pyhlml()
    s = hl.HlmlSampler(m, [0, 1])
    a, b = s.read(), s.read()
    assert b[0].energy_j - a[0].energy_j == pytest.approx(600.0) and a[1].energy_j == pytest.approx(8600.0)
    assert a[0].power_w == 600.0
    ch = s.read_channels()
    assert ch[0].values == {"util_pct": 88.0, "clock_mhz": 1800.0, "temp_c": 51.0} and ch[0].throttle == []
    assert ch[1].throttle == ["hlml_reason_0x4"]
    s.close()
    assert m.calls[-1] == "shutdown"


def test_hooks_init_the_binding_detect_and_shut_it_down(monkeypatch):
    m = make_pyhlml()
    monkeypatch.setitem(sys.modules, "pyhlml", m)
    (g,) = hooks.infbench_detect()
    assert g.count == 2 and m.calls == ["init", "shutdown"]
    assert isinstance(hooks.infbench_power_sampler(g), hl.HlmlSampler)


def test_a_failed_init_falls_back_to_hl_smi_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyhlml", make_pyhlml(fail_init=True))
    monkeypatch.setattr(hl.shutil, "which", lambda exe: None)
    with pytest.raises(hl.HlUnavailable, match="HLML_ERROR_DRIVER_NOT_LOADED"):
        hl.load_hlml()
    assert hooks.infbench_detect() == []
    from infbench.data.schema import DeviceInfo

    none = hooks.infbench_power_sampler(DeviceInfo(vendor="habana", kind="accelerator", model="HL-225", count=1))
    assert "HLML_ERROR_DRIVER_NOT_LOADED" in none.reason and "hl-smi is not installed" in none.reason
