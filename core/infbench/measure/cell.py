"""Step 4 of a run: measure one cell on a started engine (warm-up until the engine is stable,
timed requests with power and telemetry sampling and, for servers, a scrape of their Prometheus
metrics; metrics from the raw records, a serving cell's steady window, docs/metrics.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from infbench.data import metrics as M
from infbench.data.engine import Engine, RunOutput
from infbench.data.errors import CellTimeout, describe_error
from infbench.data.schema import Cell, CellResult, DeviceInfo
from infbench.measure.contention import ContentionMonitor
from infbench.measure.cost import cost_metrics
from infbench.measure.derive import cell_metrics, failure_summary
from infbench.measure.harness import HarnessMonitor, harness_metrics, host_bound
from infbench.measure.hoststate import CompactionStalls
from infbench.measure.power import PowerMonitor, PowerSampler
from infbench.measure.server_metrics import ServerMetricsScraper, from_timings, metrics_url
from infbench.measure.server_metrics import summarize as server_summary
from infbench.measure.steady import WarmState, peak_in_flight, steady_window, warm_up, window_metrics
from infbench.measure.telemetry import summarize_channels

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.groups import Group
    from infbench.data.run import RunOptions


def measure_cell(engine: Engine, group: Group, cell: Cell, device: DeviceInfo, sampler: PowerSampler,
                 opts: RunOptions, run: Callable[..., RunOutput] | None = None,
                 on_timed: Callable[[], None] | None = None, warm: WarmState | None = None) -> CellResult:
    """Warm up (:func:`infbench.measure.steady.warm_up`: until stable by default, its record in
    ``metrics["warmup"]``), run the timed part with power and telemetry sampling (and a scrape
    of the server's ``/metrics`` for server engines), derive metrics; a serving cell at a fixed
    concurrency also gets its steady window (``metrics["steady_window"]``: throughput, TPOT,
    ITL and energy over the stretch at the target concurrency). Never raises for a failed
    cell (the error is in the result); re-raises KeyboardInterrupt.

    ``warm`` is the engine session's :class:`~infbench.measure.steady.WarmState` (a cell that
    follows a settled one carries its state); None: a fresh state (the cell warms up until
    stable).

    ``run(cell, prompts, deadline_ns=...)`` replaces ``engine.run`` for the timed part (serving
    load sent from other nodes, :mod:`infbench.execution.executors.spread`); its records must be on
    this process's ``perf_counter_ns`` clock. ``on_timed()`` is called when the warm-up is done,
    right before the timed part (the session announces it as
    :class:`~infbench.data.events.CellTimed`)."""
    started = time.time()
    monitor = PowerMonitor(sampler, opts.power_interval_s)
    neighbours = ContentionMonitor(sampler)
    scraper = server_scraper(engine, opts)
    base = dict(cell_id=cell.cell_id(device), spec_hash=cell.spec_hash(), cell=cell, device=device,
                engine=describe_engine(engine), started_at=started)
    try:
        prompts = engine.make_prompts(cell, group.model)
        state = warm if warm is not None else WarmState(loaded_at=time.perf_counter())
        warmed = warm_up(engine, cell, prompts, opts.warmup, state, device.kind, sampler, opts.power_interval_s)
        warmup_s = warmed["seconds"]
        stalls = CompactionStalls()
        if on_timed is not None:
            on_timed()
        t0 = time.perf_counter()
        deadline = (time.perf_counter_ns() + int(opts.cell_timeout_s * 1e9)) if opts.cell_timeout_s else None
        monitor.start()
        neighbours.start()
        if scraper is not None:
            scraper.start()
        harness = HarnessMonitor()
        stalls.start()
        try:
            harness.start()
            out = (run or engine.run)(cell, prompts, deadline_ns=deadline)
            harness.stop()
        finally:
            state.ran()
            stalled = stalls.stop()
            contention = neighbours.stop()
            readings = monitor.stop()
            if scraper is not None:
                scraper.stop()
        done = [r for r in out.records if r.error is None and r.t_tokens_ns]
        window = (min(r.t_send_ns for r in done), max(r.t_tokens_ns[-1] for r in done)) if done else None
        energy, note = monitor.energy(window)
        if window is not None:  # the timed part on the wall clock, for external meters (nvidia-smi, a PDU)
            off = time.time() - time.perf_counter_ns() / 1e9
            metrics_window = [round(off + window[0] / 1e9, 4), round(off + window[1] / 1e9, 4)]
        else:
            metrics_window = None
        metrics = cell_metrics(out.records, devices_used=cell.tensor_parallel_size, energy_j=energy, slo=opts.slo)
        if energy is not None:
            src = monitor.source()
            metrics["energy_source"] = src["name"]
            if src["label"]:
                metrics["energy_label"] = src["label"]
        metrics.update(out.metrics)
        metrics.update(summarize_channels(monitor.channels, window))
        metrics["contention"] = contention
        if metrics_window is not None:
            metrics["timed_window_epoch_s"] = metrics_window
        metrics.update(harness_metrics(harness, out.process, serving="client" in out.metrics))
        metrics.update(host_bound(metrics, device.kind))
        metrics["warmup"] = warmed
        if warmed["blocks"]:
            metrics[M.WARMUP.key] = round(warmup_s, 4)
        if stalled is not None:
            metrics["host"] = {"compact_stall": stalled}
            if stalled:
                out.warnings.append(f"{stalled} memory-compaction stall(s) during the timed part (/proc/vmstat "
                                    "compact_stall): the kernel paused allocations to defragment memory")
        if cell.load is not None and cell.load.mode == "concurrency" and cell.load.concurrency and window:
            metrics["steady_window"] = serving_window(out.records, cell.load.concurrency, window, monitor)
        if monitor.channel_error:
            metrics["telemetry_note"] = monitor.channel_error
        server = scraper.result() if scraper is not None else None
        metrics.update(server_summary(server))
        if scraper is not None and M.SERVER_TTFT.key not in metrics:  # llama.cpp: per-request timings instead
            metrics.update(from_timings(out.records))
        if scraper is not None and scraper.error:
            metrics["server_metrics_note"] = scraper.error
        if opts.price_per_hour is not None:
            metrics.update(cost_metrics(metrics, opts.price_per_hour))
        if out.warnings:
            metrics["warnings"] = list(out.warnings)
        wall = time.perf_counter() - t0
        status, error = "ok", None
        if metrics[M.N_COMPLETED.key] == 0:
            status, error = "failed", failure_summary(out.records)
        return CellResult(**base, status=status, error=error, metrics=metrics, records=out.records,
                          power=readings, power_note=note, telemetry=monitor.channels, server_metrics=server,
                          wall_s=wall, engine_s=out.engine_s, finished_at=time.time())
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed cell is a result
        err = describe_error(exc) if not isinstance(exc, CellTimeout) else f"timeout: {exc}"
        return CellResult(**base, status="failed", error=err, power_note=monitor.error, finished_at=time.time())


def server_scraper(engine: Engine, opts: RunOptions) -> ServerMetricsScraper | None:
    """A scraper of the engine's server metrics (:func:`~infbench.measure.server_metrics.metrics_url`),
    or None for in-process engines and when ``opts.server_metrics_interval_s`` is 0."""
    interval = getattr(opts, "server_metrics_interval_s", 1.0)
    url = metrics_url(engine)
    if not url or not interval:
        return None
    return ServerMetricsScraper(url, interval)


def describe_engine(engine: Engine) -> dict[str, Any]:
    """``engine.describe()`` with the evidence that it ran on the device
    (``device_proof``: :mod:`infbench.engines.device_proof`), or its name and the error when
    describing fails."""
    try:
        return {**engine.describe(), "device_proof": engine.device_proof}
    except Exception as exc:  # noqa: BLE001
        return {"name": getattr(engine, "name", "?"), "describe_error": str(exc), "device_proof": engine.device_proof}


def serving_window(records: list[Any], target: int, run: tuple[int, int], monitor: PowerMonitor) -> dict[str, Any]:
    """A concurrency cell's steady window and its figures
    (:func:`~infbench.measure.steady.steady_window`, :func:`~infbench.measure.steady.window_metrics`,
    energy from ``monitor`` over exactly the window), or ``{"warning"}`` when the requests in
    flight never reached ``target``."""
    win = steady_window(records, target)
    run_s = (run[1] - run[0]) / 1e9
    if win is None:
        return {"warning": f"the requests in flight never reached the target concurrency {target} (at most "
                           f"{peak_in_flight(records)}): no steady window; the whole-run figures include the ramp "
                           "and the drain"}
    return {**window_metrics(records, win[:2], run_s, monitor.energy), "peak_in_flight": win[2]}
