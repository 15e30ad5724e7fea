"""The Intel plugin: xpu-smi parsers against the user guides' samples (tests/samples/SOURCES.md),
and the hooks end to end against a stand-in ``xpu-smi`` that replays those samples as a
real subprocess (discovery JSON, a streaming dump)."""

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from infbench.contract.manager import check_plugin
from infbench.data.schema import ChannelReading, DeviceInfo, PowerReading
from infbench.measure.power import PowerMonitor
from infbench_intel import hooks
from infbench_intel.xpusmi import DumpParser, dump_argv, groups_from_discovery, parse_discovery, parse_version

SAMPLES = Path(__file__).parent / "samples"


def lines(name):
    return (SAMPLES / name).read_text().splitlines()


def test_hooks_match_the_contract():
    assert check_plugin(hooks) == sorted([
        "infbench_container_spec", "infbench_default_sweep", "infbench_detect", "infbench_device_backends",
        "infbench_device_catalog", "infbench_engines", "infbench_power_sampler", "infbench_supported_precisions"])


def test_without_xpusmi_nothing_is_detected(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert hooks.infbench_detect() == []
    s = hooks.infbench_power_sampler(DeviceInfo(vendor="intel", kind="gpu", model="x"))
    assert not s.available and "xpu-smi is not installed" in s.reason


def test_discovery_json_and_details():
    devs = parse_discovery(json.loads((SAMPLES / "discovery-1x.json").read_text()))
    det = {0: json.loads((SAMPLES / "discovery-d0-1x.json").read_text())}
    (g,) = groups_from_discovery(devs, det)
    assert g.model == "Intel(R) Graphics [0x020a]" and g.memory_bytes == 32 * 2**30
    assert g.driver == "16929133" and g.pci_ids == ["0000:4d:00.0"] and g.properties["indices"] == [0]


def power(rs):
    return [r for r in rs if isinstance(r, PowerReading)]


def channels(rs):
    return [r for r in rs if isinstance(r, ChannelReading)]


def test_dump_1x_power_only():
    p = DumpParser([0])
    rs = [r for ln in lines("dump-1x.csv") for r in p(ln, 7)]
    assert [r.power_w for r in power(rs)] == [14.61, 14.59, 14.61, 14.61, 14.61] and rs[0].energy_j is None
    # the guide's utilisation and frequency columns are telemetry channels
    assert [c.values for c in channels(rs)][0] == {"util_pct": 0.0, "clock_mhz": 0.0}


def test_dump_multi_gpu_keeps_only_the_group():
    p = DumpParser([1, 4])
    rs = [r for ln in lines("dump-aurora-6gpu.csv") for r in p(ln, 0)]
    assert [(r.device_index, r.power_w) for r in power(rs)] == [(0, 286.91), (1, 279.70), (0, 287.57), (1, 279.89)]
    # utilisation prints N/A on Aurora, memory utilisation only from the second row: left out where N/A
    assert [c.values for c in channels(rs)] == [{"clock_mhz": 1600.0}, {"clock_mhz": 1600.0},
                                                {"clock_mhz": 1600.0, "mem_util_pct": 11.53},
                                                {"clock_mhz": 1600.0, "mem_util_pct": 11.78}]


def test_dump_telemetry_with_core_temperature():
    """XPU Manager's README example (metrics 0-3): utilisation, frequency and temperature."""
    p = DumpParser([0])
    rs = [r for ln in lines("dump-temp-xpumcli.csv") for r in p(ln, 0)]
    assert [c.values for c in channels(rs)][2] == {"util_pct": 99.48, "clock_mhz": 1750.0, "temp_c": 50.5}
    assert [r.power_w for r in power(rs)] == [119.61, 119.36, 119.55, 119.24]


def test_dump_power_and_energy_columns_by_header():
    p = DumpParser([0, 1])
    rs = [r for ln in lines("dump-power-energy.csv") for r in p(ln, 0)]
    assert rs[0].power_w == 410.25 and rs[0].energy_j == 1200345.5
    assert rs[3].power_w is None and rs[3].energy_j == 1100402.0  # "N/A" power


def test_dump_rows_before_a_header_are_an_error():
    with pytest.raises(ValueError, match="before its header"):
        DumpParser([0])("06:14:46.000,    0, 0.00, 14.61,    0", 0)


def test_version_and_command_lines():
    assert parse_version("CLI:\n    Version: 1.0.0.20211217\n    Build ID: f847c0fa\n") == (1, 0)
    assert dump_argv((1, 2), [0]) == ["xpu-smi", "dump", "-d", "0", "-m", "0,1,2,3,5,8", "-i", "1"]
    assert dump_argv((2, 0), [0, 1]) == ["xpu-smi", "dump", "-d", "0,1", "--metrics", "0,1,2,3,5,8", "--interval",
                                         "1"]


STAND_IN = r'''#!PYTHON
"""A stand-in xpu-smi replaying the user guide's outputs (see tests/samples/SOURCES.md)."""
import sys, time, pathlib
S = pathlib.Path(r"SAMPLES")
a = sys.argv[1:]
if a == ["-v"]:
    print("CLI:\n    Version: 1.2.39.20240624\n    Build ID: 00000000\n")
elif a == ["discovery", "-j"]:
    print((S / "discovery-1x.json").read_text())
elif a[:1] == ["discovery"]:
    print((S / "discovery-d0-1x.json").read_text())
elif a[:1] == ["dump"]:
    assert a == ["dump", "-d", "0", "-m", "0,1,2,3,5,8", "-i", "1"], a
    print("Timestamp, DeviceId, GPU Utilization (%), GPU Power (W), GPU Frequency (MHz), "
          "GPU Core Temperature (Celsius Degree), GPU Memory Utilization (%), GPU Energy Consumed (J)", flush=True)
    e = 1000.0
    while True:
        print(f"10:00:00.000,    0, 97.00, 400.00, 1600, 55.00, N/A, {e:.2f}", flush=True)
        e += 40.0  # 400 W at the stand-in's 0.1 s interval
        time.sleep(0.1)
'''


@pytest.fixture
def xpusmi_on_path(tmp_path, monkeypatch):
    exe = tmp_path / "xpu-smi"
    exe.write_text(STAND_IN.replace("PYTHON", sys.executable).replace("SAMPLES", str(SAMPLES)))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return exe


def test_hooks_against_a_streaming_xpusmi(xpusmi_on_path):
    (dev,) = hooks.infbench_detect()
    assert dev.vendor == "intel" and dev.memory_bytes == 32 * 2**30
    sampler = hooks.infbench_power_sampler(dev)
    assert sampler.available and sampler.name == "xpu-smi-dump"
    mon = PowerMonitor(sampler, interval_s=0.1)
    try:
        mon.start()
        time.sleep(1.0)
        readings = mon.stop()
        energy, note = mon.energy()
    finally:
        sampler.close()
    assert len(readings) >= 5 and note is None
    # counter differences: 40 J per streamed line, over the lines that arrived in the window
    assert energy == pytest.approx(40.0 * (len(readings) - 1))
    # the same lines' telemetry comes through the channel side of the sampler
    assert len(mon.channels) >= 4 and mon.channel_error is None
    assert mon.channels[-1].values == {"util_pct": 97.0, "clock_mhz": 1600.0, "temp_c": 55.0}


def test_the_plugin_conforms_to_the_contract():
    """The conformance kit (``infbench plugins check intel``) on this host's answers and on a
    stand-in device of the vendor: every hook answers in the contract's types, none raises,
    and a power sampler's readings (NoPower without the driver) are finite and non-negative."""
    from infbench.plugin import DeviceInfo as _Device
    from infbench.testing.conformance import assert_conforms

    detected = hooks.infbench_detect()
    stand_in = _Device(vendor="intel", kind="gpu", model="Intel(R) Data Center GPU Max 1550",
                       count=1, memory_bytes=128 * 2**30)
    findings = assert_conforms(hooks, devices=[*detected, stand_in])
    assert {"infbench_supported_precisions", "infbench_power_sampler"} <= {f.hook for f in findings}
