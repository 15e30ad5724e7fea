"""A power reading below zero (issue 33, item 3) makes the cell's energy unavailable, with a note."""

from __future__ import annotations

from infbench.data.schema import Sweep


def test_a_power_reading_below_zero_makes_energy_unavailable(tmp_path, cpu):
    """The probe: `run --power-command 'echo -50'` stored an ok cell with no power note."""
    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.run import RunOptions
    from infbench.data.schema import PowerReading
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.measure.power import CommandPowerSampler, energy_j, energy_summary
    from infbench.plan import plan
    from infbench.store import Store

    neg = [PowerReading(t_ns=0, power_w=100.0), PowerReading(t_ns=10**9, power_w=-50.0)]
    e, _, note = energy_summary(neg)
    assert e is None and "below zero" in note and energy_j(neg) is None
    nan = [PowerReading(t_ns=0, energy_j=1.0), PowerReading(t_ns=10**9, energy_j=float("nan"))]
    assert energy_summary(nan)[0] is None and energy_j(nan) is None

    fpm = testing.plugin_manager()
    store = Store(tmp_path / "r.db")
    sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1], input_len=[16],
               output_len=[4])
    opts = RunOptions(power_override=CommandPowerSampler("echo -50"), power_interval_s=0.01,
                      engine_options={"sleep_s": 0.05})
    s = InProcessExecutor(fpm, {"test": True}).run(plan(sw, cpu, fpm), store, opts, ev.ignore)
    (cell,) = s.ok
    assert cell.metrics.get("energy_j") is None and "below zero" in (cell.power_note or "")
    store.close()

