"""The in-process executor: every group's engine is launched in this process, its cells
measured one after another, and each result stored as soon as it finishes.

This is also what runs inside a worker container and on a Ray node (``infbench worker``
uses it), so every executor measures with this code.
"""

from __future__ import annotations

from typing import Any

from infbench.analysis.floor import add_roofline, device_roofline_limits
from infbench.engines.availability import device_backends
from infbench.engines.base import Engine
from infbench.engines.device_proof import group_failure, start_on_device
from infbench.engines.launch import launch
from infbench.executors.events import CellStarted, GroupLoading, Observer, ignore
from infbench.measure.cell import measure_cell
from infbench.measure.power import PowerSampler, WithChannels, device_power_sampler
from infbench.plan import Plan
from infbench.plugins import PluginManager
from infbench.run import (
    RunOptions,
    RunSummary,
    busy_elsewhere,
    pending_cells,
    record,
    run_command,
    started_run,
    take_cell,
    unmeasured_failure,
)
from infbench.store import Store


class InProcessExecutor:
    """Run a plan in this process.

    Args:
        pm: the plugin manager (engines, power sampler, device limits).
        provenance: the run's provenance (:func:`infbench.run.provenance`).
    """

    name = "inprocess"

    def __init__(self, pm: PluginManager, provenance: dict[str, Any]):
        self.pm = pm
        self.provenance = provenance

    def run(self, plan: Plan, store: Store, options: RunOptions | None = None,
            observer: Observer = ignore) -> RunSummary:
        """Run every cell of ``plan`` on its device and store each result as it finishes.

        Cells whose newest stored attempt is ok are skipped unless ``options.force``, and
        so are cells another live process on the same store is measuring (each cell is
        claimed before it is measured: :func:`~infbench.run.take_cell`). A group whose
        engine fails to start stores all its cells as failed with that error, and the
        sweep goes on. On Ctrl-C or SIGTERM the engine is stopped, the run is marked
        ``interrupted`` and the exception propagates; everything measured is stored.

        Returns:
            The :class:`~infbench.run.RunSummary`.

        Raises:
            KeyboardInterrupt: after the run is marked interrupted.
        """
        opts = options or RunOptions()
        with started_run(store, self.provenance, run_command()) as summary:
            done = set() if opts.force else store.finished_cell_ids()
            sampler = device_power_sampler(self.pm, plan.device)
            if opts.power_override is not None:  # the user's power, the device's telemetry channels
                sampler = WithChannels(opts.power_override, sampler)
            try:
                limits, limits_reason = device_roofline_limits(self.pm, plan.device)
                self._groups(plan, store, opts, observer, summary, done, sampler, limits, limits_reason)
            finally:
                sampler.close()
        return summary

    def _groups(self, plan: Plan, store: Store, opts: RunOptions, observer: Observer, summary: RunSummary,
                done: set[str], sampler: PowerSampler, limits: Any, limits_reason: str | None) -> None:
        device, run_id = plan.device, summary.run_id
        for group in plan.groups:
            todo = pending_cells(group.cells, device, done, summary, observer)
            busy = busy_elsewhere(store, todo, device, run_id, opts.force)
            if todo and all(c.cell_id(device) in busy for c in todo):
                for c in todo:  # another process has them all: announce, do not load the model
                    take_cell(store, run_id, c, device, summary, observer, opts.force)
                continue
            if not todo:
                continue
            observer(GroupLoading(group))
            engine: Engine | None = None
            try:
                engine = launch(self.pm, group.engine, device, opts.engine_options)
                start_on_device(engine, group, device_backends(self.pm, device))  # refuses a device it is not on
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - the whole group fails, the sweep goes on
                err = group_failure(exc)
                for c in todo:
                    record(store, run_id, summary, unmeasured_failure(c, device, err), observer)
                if engine is not None:
                    engine.stop()
                continue
            try:
                for c in todo:
                    if not take_cell(store, run_id, c, device, summary, observer, opts.force):
                        continue
                    observer(CellStarted(c))
                    r = None
                    try:
                        r = measure_cell(engine, group, c, device, sampler, opts)
                        add_roofline(r, group.model, limits, limits_reason)
                    except KeyboardInterrupt:
                        if r is not None:  # measured before the signal: keep it
                            record(store, run_id, summary, r, observer)
                        raise
                    record(store, run_id, summary, r, observer)
            finally:
                engine.stop()
