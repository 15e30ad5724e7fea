"""The Gaudi plugin: hl-smi parsers against the documented-format samples
(tests/samples/SOURCES.md), the real pyhlml on a host without libhlml, and the hooks."""

from pathlib import Path

import pytest

from infbench.contract.manager import check_plugin
from infbench.data.schema import DeviceInfo
from infbench.measure.power import energy_summary
from infbench_habana import hooks
from infbench_habana.hl import PowerLineParser, groups_from_query, number, power_argv

SAMPLES = Path(__file__).parent / "samples"


def test_hooks_match_the_contract():
    assert check_plugin(hooks) == sorted([
        "infbench_container_spec", "infbench_default_sweep", "infbench_detect", "infbench_device_backends",
        "infbench_device_catalog", "infbench_engines", "infbench_power_sampler", "infbench_supported_precisions"])


def test_real_pyhlml_without_libhlml_detects_nothing():
    """pyhlml is a dependency and installed; /usr/lib/habanalabs/libhlml.so is not."""
    assert hooks.infbench_detect() == []
    s = hooks.infbench_power_sampler(DeviceInfo(vendor="habana", kind="accelerator", model="HL-225"))
    assert not s.available and "pyhlml" in s.reason and "hl-smi" in s.reason


@pytest.mark.parametrize("name", ["query-nounits.csv", "query-units.csv"])
def test_query_groups_devices(name):
    (g,) = groups_from_query((SAMPLES / name).read_text())
    assert g.model == "HL-225" and g.memory_bytes == 96 * 2**30 and g.driver == "1.18.0-ee698fb"
    assert g.pci_ids[0] == "0000:33:00.0" and g.properties["indices"][:2] == [0, 1]
    assert g.count == (8 if name == "query-nounits.csv" else 2)


def test_query_rejects_wrong_field_count():
    with pytest.raises(ValueError, match="fields"):
        groups_from_query("0, HL-225, 0000:33:00.0\n")


def test_power_loop_lines_for_the_group_and_energy():
    p = PowerLineParser([0, 1])
    rs = []
    for k, line in enumerate((SAMPLES / "power-loop.csv").read_text().splitlines()):
        rs += p(line, (k // 8) * 1_000_000_000)  # the loop prints all 8 devices each second
    assert [(r.device_index, r.power_w) for r in rs] == [(0, 412), (1, 398), (0, 415), (1, 401)]
    e, method, _ = energy_summary(rs)
    assert method == "power" and e == pytest.approx((412 + 415) / 2 + (398 + 401) / 2)


def test_fields_with_and_without_units():
    assert number("101 W") == (101.0, "W") and number("98304") == (98304.0, "")
    assert number("N/A") == (None, "")
    assert power_argv() == ["hl-smi", "-Q", "index,power.draw,utilization.aip,temperature.aip,clocks.current.soc",
                            "-f", "csv,noheader,nounits", "-l", "1"]


def test_telemetry_loop_lines_give_channels():
    from infbench.data.schema import ChannelReading

    p = PowerLineParser([0, 3])
    rs = [r for line in (SAMPLES / "telemetry-loop.csv").read_text().splitlines() for r in p(line, 0)]
    ch = [r for r in rs if isinstance(r, ChannelReading)]
    assert [(c.device_index, c.values) for c in ch] == [
        (0, {"util_pct": 98.0, "temp_c": 54.0, "clock_mhz": 1600.0}),
        (1, {"util_pct": 0.0, "temp_c": 33.0, "clock_mhz": 1600.0})]
    assert [r.power_w for r in rs if not isinstance(r, ChannelReading)] == [512.0, 101.0]


class StandInHlml:
    """pyhlml's answers for one Gaudi2 (newer pyhlml: utilisation as a struct with ``aip``)."""

    def hlmlDeviceGetUtilizationRates(self, h):
        from types import SimpleNamespace

        return SimpleNamespace(aip=91)

    def hlmlDeviceGetClockInfo(self, h, clock_type):
        assert clock_type == 0  # SOC
        return 1600

    def hlmlDeviceGetTemperature(self, h, sensor):
        return 47

    def hlmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x2


def test_hlml_channels():
    from infbench_habana.hl import hlml_channels

    c = hlml_channels(StandInHlml(), "h", t_ns=3, device_index=1)
    assert c.values == {"util_pct": 91.0, "clock_mhz": 1600.0, "temp_c": 47.0} and c.throttle == ["hlml_reason_0x2"]


def test_precisions_and_container_spec():
    g2 = DeviceInfo(vendor="habana", kind="accelerator", model="HL-225")
    assert hooks.infbench_supported_precisions(g2)[:2] == ["bf16", "fp8"]
    spec = hooks.infbench_container_spec(g2, "vllm-server").as_dict()
    assert spec["runtime"] == "habana" and spec["cap_add"] == ["SYS_NICE"]
    assert spec["environment"]["HABANA_VISIBLE_DEVICES"] == "all" and not spec.get("privileged")


def test_catalog_matches_hl_names():
    from infbench.detect.devices import match_device

    s = match_device(hooks.infbench_device_catalog(), DeviceInfo(vendor="habana", kind="accelerator", model="HL-225"))
    assert s.id == "gaudi2" and s.per_device()["memory_bandwidth_bytes_s"] == pytest.approx(2.46e12)


def test_the_plugin_conforms_to_the_contract():
    """The conformance kit (``infbench plugins check habana``) on this host's answers and on a
    stand-in device of the vendor: every hook answers in the contract's types, none raises,
    and a power sampler's readings (NoPower without the driver) are finite and non-negative."""
    from infbench.plugin import DeviceInfo as _Device
    from infbench.testing.conformance import assert_conforms

    detected = hooks.infbench_detect()
    stand_in = _Device(vendor="habana", kind="accelerator", model="HL-225",
                       count=1, memory_bytes=96 * 2**30)
    findings = assert_conforms(hooks, devices=[*detected, stand_in])
    assert {"infbench_supported_precisions", "infbench_power_sampler"} <= {f.hook for f in findings}
