"""Energy over a cell's window, the counter/power cross-check, user-supplied power
sources, the streaming-tool sampler (a real subprocess), and the monitor's failure path."""

import sys
import time

import pytest

from infbench.data.schema import PowerReading
from infbench.measure.power import (
    CommandPowerSampler,
    FixedPowerSampler,
    PowerMonitor,
    StreamSampler,
    energy_summary,
    parse_watts,
)

S = 1_000_000_000


def test_window_interpolates_counters_and_power():
    # 100 W counter read at 0 s and 10 s; the cell ran from 2 s to 5 s: 300 J, not 1000 J
    rs = [PowerReading(t_ns=0, energy_j=0.0), PowerReading(t_ns=10 * S, energy_j=1000.0)]
    assert energy_summary(rs, (2 * S, 5 * S))[0] == pytest.approx(300.0)
    ps = [PowerReading(t_ns=0, power_w=100.0), PowerReading(t_ns=10 * S, power_w=100.0)]
    assert energy_summary(ps, (2 * S, 5 * S))[0] == pytest.approx(300.0)


def test_window_beyond_slow_readings_extends_the_edge_slope():
    # a 1 s sampler whose readings fall inside a 3 s cell: extrapolated at 50 W
    rs = [PowerReading(t_ns=1 * S, energy_j=10.0), PowerReading(t_ns=2 * S, energy_j=60.0)]
    assert energy_summary(rs, (0, 3 * S))[0] == pytest.approx(150.0)


def test_cross_check_keeps_a_consistent_counter_and_replaces_a_wrong_one():
    good = [PowerReading(t_ns=0, energy_j=0.0, power_w=100.0), PowerReading(t_ns=2 * S, energy_j=210.0, power_w=100.0)]
    assert energy_summary(good)[:2] == (pytest.approx(210.0), "counter")
    bad = [PowerReading(t_ns=0, energy_j=0.0, power_w=100.0), PowerReading(t_ns=2 * S, energy_j=5.0, power_w=100.0)]
    e, method, note = energy_summary(bad)
    assert e == pytest.approx(200.0) and method == "power" and "5.000 J" in note


def test_mixed_methods_across_devices():
    rs = [PowerReading(t_ns=0, energy_j=0.0), PowerReading(t_ns=S, energy_j=7.0),
          PowerReading(t_ns=0, device_index=1, power_w=3.0), PowerReading(t_ns=S, device_index=1, power_w=3.0)]
    assert energy_summary(rs) == (pytest.approx(10.0), "mixed", None)


def test_parse_watts_and_errors():
    assert parse_watts("Instantaneous power reading:   2315 Watts") == 2315.0
    assert parse_watts("1.5e3\n") == 1500.0
    with pytest.raises(ValueError, match="no number"):
        parse_watts("N/A")
    with pytest.raises(ValueError, match="> 0"):
        FixedPowerSampler(0)


def test_command_sampler_runs_the_command_and_reports_failures():
    s = CommandPowerSampler("echo 42.5")
    # labelled by the executable's name only: the command line may carry a secret
    assert s.read()[0].power_w == 42.5 and s.label == "user-supplied power command: echo"
    mon = PowerMonitor(CommandPowerSampler("SECRET=hunter2 sh -c 'exit 3' --password hunter2"), 0.05)
    mon.start()
    mon.stop()
    e, reason = mon.energy()
    assert e is None and "command failed" in reason and "sh exited with status 3" in reason
    assert "hunter2" not in reason


TOOL = """
import sys, time
print("header", flush=True)
for i in range(1000):
    print(f"{i}, 100", flush=True)
    time.sleep(0.02)
"""


def parse(line, t):
    if line.startswith("header"):
        return []
    i, w = line.split(",")
    return [PowerReading(t_ns=t, power_w=float(w))]


def test_stream_sampler_collects_lines_from_a_real_process():
    s = StreamSampler([sys.executable, "-c", TOOL], parse, name="tool")
    mon = PowerMonitor(s, 0.05)
    try:
        mon.start()
        time.sleep(0.5)
        rs = mon.stop()
    finally:
        s.close()
    e, note = mon.energy()
    assert len(rs) >= 10 and note is None
    span = (rs[-1].t_ns - rs[0].t_ns) / 1e9
    assert e == pytest.approx(100.0 * span)


def test_stream_sampler_that_exits_or_prints_garbage_marks_energy_unavailable():
    s = StreamSampler([sys.executable, "-c", "print('not a number, x')"], parse, name="tool", start_timeout_s=5)
    mon = PowerMonitor(s, 0.05)
    mon.start()
    mon.stop()
    e, reason = mon.energy()
    assert e is None and "tool failed" in reason and "unparseable" in reason
    s.close()
