"""The in-process executor with the real llama.cpp engine: failures are stored results,
the sweep goes on, Ctrl-C keeps what finished, a re-run resumes."""

import pytest

from infbench import hookimpl
from infbench.data.run import RunOptions
from infbench.data.schema import Sweep
from infbench.detect import detect
from infbench.engines.llama_cpp_engine import LlamaCppEngine
from infbench.execution.bookkeeping import provenance
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.plan import plan
from infbench.store import Store

pytestmark = pytest.mark.integration


def run_plan(plan, store, pm, prov, opts=None):
    return InProcessExecutor(pm, prov).run(plan, store, opts)


class FaultyLlama(LlamaCppEngine):
    """The real llama.cpp engine, with a fault injected on one batch size, or at start.

    The class attributes are the test's settings; the launcher copies them onto each adapter,
    since the adapter runs in a process of its own (infbench.engines.process), which receives
    the instance, not this module's state."""

    fail_batch: int | None = None
    fault: type[BaseException] = MemoryError
    start_error: str | None = None

    def start(self, group):
        if self.start_error:
            raise RuntimeError(self.start_error)
        super().start(group)

    def run(self, cell, prompts, deadline_ns=None):
        if cell.batch == self.fail_batch and cell.output_len > 2:  # not during warm-up
            raise self.fault("injected")
        return super().run(cell, prompts, deadline_ns)


class Launcher:
    @hookimpl
    def infbench_launch_engine(self, engine, device, options):
        if engine != "llama.cpp":
            return None
        e = FaultyLlama(device, options)
        e.fail_batch, e.fault, e.start_error = FaultyLlama.fail_batch, FaultyLlama.fault, FaultyLlama.start_error
        return e


def engine_processes():
    """The engine processes (python -m infbench.engines.process) this test process still has."""
    import os

    import psutil

    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if "infbench.engines.process" in " ".join(p.cmdline()):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def setup(pm, tmp_path, batches=(1, 2, 3)):
    pm.register(Launcher(), name="faulty")
    det = detect(pm)
    dev = det.devices[0]
    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=list(batches),
               input_len=[16], output_len=[4])
    return plan(sw, dev, pm), Store(tmp_path / "r.db"), provenance(det, pm)


def test_failed_cell_is_stored_and_sweep_goes_on(pm, tmp_path):
    FaultyLlama.fail_batch, FaultyLlama.fault = 2, MemoryError
    p, store, prov = setup(pm, tmp_path)
    s = run_plan(p, store, pm, prov)
    assert [c.cell.batch for c in s.ok] == [1, 3] and [c.cell.batch for c in s.failed] == [2]
    rows = {r["spec"]["batch"]: r for r in store.results()}
    assert rows[2]["status"] == "failed" and rows[2]["error"].startswith("OOM: MemoryError: injected")
    assert rows[3]["status"] == "ok" and rows[3]["metrics"]["output_tok_s"] > 0
    assert store.runs()[0]["status"] == "completed_with_failures"
    # A re-run measures only the failed cell.
    FaultyLlama.fail_batch = None
    s2 = run_plan(p, store, pm, prov)
    assert [c.cell.batch for c in s2.ok] == [2] and len(s2.skipped) == 2


def test_interrupt_keeps_finished_cells_and_resumes(pm, tmp_path):
    FaultyLlama.fail_batch, FaultyLlama.fault = 2, KeyboardInterrupt
    p, store, prov = setup(pm, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_plan(p, store, pm, prov)
    assert engine_processes() == []                       # engine freed on Ctrl-C: its process ended
    assert [r["spec"]["batch"] for r in store.results()] == [1]
    assert store.runs()[0]["status"] == "interrupted"
    FaultyLlama.fail_batch = None
    s = run_plan(p, store, pm, prov)
    assert [c.cell.batch for c in s.ok] == [2, 3] and [c.batch for c in s.skipped] == [1]


def test_engine_start_failure_fails_the_group(pm, tmp_path, monkeypatch):
    FaultyLlama.fail_batch = None
    monkeypatch.setattr(FaultyLlama, "start_error", "cannot load model")
    p, store, prov = setup(pm, tmp_path, batches=(1, 2))
    s = run_plan(p, store, pm, prov)
    assert len(s.failed) == 2 and not s.ok
    assert all("engine start failed: RuntimeError: cannot load model" in r["error"] for r in store.results())


def test_force_and_provenance(pm, tmp_path):
    FaultyLlama.fail_batch = None
    p, store, prov = setup(pm, tmp_path, batches=(1,))
    run_plan(p, store, pm, prov)
    s = run_plan(p, store, pm, prov, RunOptions(force=True))
    assert len(s.ok) == 1 and len(store.results(all_attempts=True)) == 2
    pv = store.runs()[0]["provenance"]
    assert pv["infbench_version"] and pv["libraries"]["llama_cpp_python"] and pv["devices"][0]["vendor"] == "cpu"
    r = store.results()[0]
    assert r["engine"]["name"] == "llama.cpp" and r["engine"]["n_threads"] >= 1
    assert r["power_note"]                                  # this VM has no RAPL: the reason is stored


class SteadyTenWatts:
    """A power source for a host without one (this VM has no RAPL): a cumulative energy
    counter advancing at 10 W of wall time, wrapping at 1 J so wraparound is exercised."""

    @hookimpl(tryfirst=True)
    def infbench_power_sampler(self, device):
        import time

        from infbench.data.schema import PowerReading
        from infbench.measure.power import PowerSampler

        class S(PowerSampler):
            name, source = "steady-10w", "energy_counter"

            def read(self):
                t = time.perf_counter_ns()
                return [PowerReading(t_ns=t, energy_j=(t * 1e-8) % 1.0, energy_range_j=1.0)]

        return S()


def test_energy_flows_into_metrics_and_store(pm, tmp_path):
    FaultyLlama.fail_batch = None
    pm.register(SteadyTenWatts(), name="steady")
    p, store, prov = setup(pm, tmp_path, batches=(2,))
    s = run_plan(p, store, pm, prov, RunOptions(power_interval_s=0.005))
    [r] = s.ok
    m = r.metrics
    assert r.power_note is None and len(r.power) >= 2
    # The monitor spans the timed part: it encloses [first t_send, last token] and lies within wall_s.
    assert 10.0 * m["duration_s"] * 0.99 <= m["energy_j"] <= 10.0 * r.wall_s * 1.01
    assert m["avg_power_w"] == pytest.approx(m["energy_j"] / m["duration_s"])
    assert m["tokens_per_j"] == pytest.approx((m["n_in_total"] + m["n_out_total"]) / m["energy_j"])
    row = store.results()[0]
    assert len(store.power(row["id"])) == len(r.power) and row["metrics"]["energy_j"] == m["energy_j"]
