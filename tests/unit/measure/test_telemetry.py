"""Telemetry channels (plugin contract 1.5): the CPU's, read for real through the CPU plugin's
sampler by the core's monitor; summaries and throttle flags; a failing channel source
stops only the channels."""

import time

import pytest

from infbench.data.schema import ChannelReading, PowerReading
from infbench.detect.platforms.cpu import CpuTelemetry, infbench_power_sampler
from infbench.measure.power import NoPower, PowerMonitor, PowerSampler, WithChannels
from infbench.measure.telemetry import CHANNELS, summarize_channels


def test_real_cpu_channels_through_the_plugin_sampler(cpu):
    """This VM has no RAPL: power is unavailable, yet utilisation and clock are sampled."""
    s = infbench_power_sampler(cpu)
    mon = PowerMonitor(s, interval_s=0.05)
    mon.start()
    end = time.perf_counter() + 0.4
    while time.perf_counter() < end:   # keep one core busy
        sum(i * i for i in range(2000))
    mon.stop()
    assert mon.channel_error is None and len(mon.channels) >= 4
    assert {c.device_index for c in mon.channels} == {0}
    assert set(mon.channels[-1].values) <= set(CHANNELS)
    summ = summarize_channels(mon.channels)
    assert summ["telemetry"]["util_pct"]["max"] > 0          # a busy core shows
    assert summ["telemetry"]["clock_mhz"]["mean"] > 100       # psutil.cpu_freq, MHz
    assert summ["throttled"] is False
    if not s.available:
        assert mon.error and mon.readings == []


def test_cpu_thermal_throttle_counter(tmp_path):
    for cpu, pkg in (("cpu0", "0"), ("cpu1", "0"), ("cpu2", "1")):
        (tmp_path / cpu / "thermal_throttle").mkdir(parents=True)
        (tmp_path / cpu / "topology").mkdir()
        (tmp_path / cpu / "topology" / "physical_package_id").write_text(pkg)
        (tmp_path / cpu / "thermal_throttle" / "package_throttle_count").write_text("5")
    t = CpuTelemetry(tmp_path)
    assert len(t.counters) == 2                                # one per package
    assert t.read_channels()[0].throttle == []
    (tmp_path / "cpu2" / "thermal_throttle" / "package_throttle_count").write_text("7")
    assert t.read_channels()[0].throttle == ["thermal"]
    assert t.read_channels()[0].throttle == []                 # no new events since


def test_summary_keeps_the_timed_window_and_flags_throttling():
    rs = [ChannelReading(t_ns=t, device_index=d, values={"util_pct": 10.0 * t + d, "temp_c": 50.0 + t},
                         throttle=["hw_slowdown"] if t == 9 else []) for t in range(10) for d in (0, 1)]
    s = summarize_channels(rs, window=(2, 5))
    assert s["telemetry"]["util_pct"]["min"] == 20.0 and s["telemetry"]["util_pct"]["max"] == 51.0
    assert s["telemetry"]["util_pct"]["count"] == 8 and not s["throttled"]
    s = summarize_channels(rs)
    assert s["throttled"] and s["throttle_reasons"] == ["hw_slowdown"]
    assert summarize_channels(rs, window=(100, 200))["telemetry"]["util_pct"]["count"] == 20   # none inside: all
    assert summarize_channels([]) == {}


class Watts(PowerSampler):
    name = "watts"

    def read(self):
        return [PowerReading(t_ns=time.perf_counter_ns(), power_w=100.0)]


class BrokenChannels(Watts):
    def read_channels(self):
        raise OSError("sensor gone")


def test_a_failing_channel_source_stops_only_the_channels():
    mon = PowerMonitor(BrokenChannels(), interval_s=0.02)
    mon.start()
    time.sleep(0.1)
    readings = mon.stop()
    assert len(readings) >= 3 and mon.error is None
    assert mon.channels == [] and "sensor gone" in mon.channel_error


def test_with_channels_keeps_user_power_and_device_channels():
    class Chan(NoPower):
        def __init__(self):
            super().__init__("no power")

        def read_channels(self):
            return [ChannelReading(t_ns=1, values={"util_pct": 42.0})]

    w = WithChannels(Watts(), Chan())
    assert w.available and w.name == "watts"
    assert w.read()[0].power_w == 100.0 and w.read_channels()[0].values == {"util_pct": 42.0}
    mon = PowerMonitor(WithChannels(NoPower("none here"), Chan()), interval_s=0.02)
    mon.start()
    time.sleep(0.08)
    mon.stop()
    assert mon.error == "none here" and len(mon.channels) >= 2


@pytest.mark.parametrize("name", sorted(CHANNELS))
def test_channel_names_carry_their_unit(name):
    assert name.endswith(("_pct", "_mhz", "_c"))
