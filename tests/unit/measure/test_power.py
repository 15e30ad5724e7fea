"""Energy integration, RAPL reading with wraparound on a sysfs tree the test writes, and
the sampling thread."""

import time

import pytest

from infbench.data.schema import PowerReading
from infbench.detect.platforms.cpu import RaplSampler, rapl_sampler
from infbench.measure.power import NoPower, PowerMonitor, PowerSampler, energy_j

S = 1_000_000_000


def test_energy_counter_differences_with_wraparound():
    rs = [PowerReading(t_ns=0, energy_j=90.0, energy_range_j=100.0),
          PowerReading(t_ns=S, energy_j=98.0, energy_range_j=100.0),
          PowerReading(t_ns=2 * S, energy_j=3.0, energy_range_j=100.0)]  # wrapped: +5
    assert energy_j(rs) == pytest.approx(8.0 + 5.0)


def test_power_trapezoid_and_device_sum():
    rs = [PowerReading(t_ns=0, power_w=100.0), PowerReading(t_ns=2 * S, power_w=200.0),
          PowerReading(t_ns=0, device_index=1, power_w=50.0), PowerReading(t_ns=2 * S, device_index=1, power_w=50.0)]
    assert energy_j(rs) == pytest.approx(300.0 + 100.0)


def test_too_few_readings():
    assert energy_j([PowerReading(t_ns=0, power_w=1.0)]) is None
    assert energy_j([]) is None


def make_rapl(root, packages):
    for i, (uj, rng) in enumerate(packages):
        d = root / f"intel-rapl:{i}"
        d.mkdir(parents=True)
        (d / "energy_uj").write_text(f"{uj}\n")
        (d / "max_energy_range_uj").write_text(f"{rng}\n")
        (d / "name").write_text(f"package-{i}\n")
        sub = root / f"intel-rapl:{i}:0"  # a sub-zone that must not be counted
        sub.mkdir()
        (sub / "energy_uj").write_text("1\n")


def test_rapl_reads_packages_and_handles_wraparound(tmp_path):
    make_rapl(tmp_path, [(262_143_000_000, 262_143_328_850), (5_000_000, 262_143_328_850)])
    s = rapl_sampler(tmp_path)
    assert isinstance(s, RaplSampler) and s.available and len(s.domains) == 2
    first = s.read()
    assert [r.energy_j for r in first] == pytest.approx([262_143.0, 5.0])
    # package 0 wraps past max_energy_range_uj, package 1 advances by 2 J
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("1000000\n")
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("7000000\n")
    second = s.read()
    wrapped = 262_143.328850 - 262_143.0 + 1.0
    assert energy_j(first + second) == pytest.approx(wrapped + 2.0)


def test_rapl_unavailable_reasons(tmp_path):
    s = rapl_sampler(tmp_path / "absent")
    assert isinstance(s, NoPower) and "no powercap interface" in s.reason
    (tmp_path / "pc").mkdir()
    s = rapl_sampler(tmp_path / "pc")
    assert isinstance(s, NoPower) and "no RAPL package domains" in s.reason


class CountingSampler(PowerSampler):
    """Energy grows 2 J per read; counts reads."""

    name = "counting"
    source = "energy_counter"

    def __init__(self, fail_after=None):
        self.n = 0
        self.fail_after = fail_after

    def read(self):
        self.n += 1
        if self.fail_after is not None and self.n > self.fail_after:
            raise OSError("device gone")
        return [PowerReading(t_ns=time.perf_counter_ns(), energy_j=2.0 * self.n)]


def test_monitor_samples_on_its_thread():
    s = CountingSampler()
    m = PowerMonitor(s, interval_s=0.01)
    m.start()
    time.sleep(0.2)
    readings = m.stop()
    assert len(readings) >= 5            # start + periodic + stop
    e, note = m.energy()
    assert note is None and e == pytest.approx(2.0 * (len(readings) - 1))


def test_monitor_failure_marks_energy_unavailable():
    m = PowerMonitor(CountingSampler(fail_after=2), interval_s=0.01)
    m.start()
    time.sleep(0.1)
    m.stop()
    e, note = m.energy()
    assert e is None and "device gone" in note


def test_monitor_with_nopower_keeps_reason():
    m = PowerMonitor(NoPower("no RAPL here"))
    m.start()
    assert m.stop() == []
    assert m.energy() == (None, "no RAPL here")


def test_bad_interval():
    with pytest.raises(ValueError, match="power interval"):
        PowerMonitor(CountingSampler(), interval_s=0)
