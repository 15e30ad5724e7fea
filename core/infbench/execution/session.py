"""The one engine session: the only place infbench starts an engine and measures with it.

Every scenario (:mod:`infbench.execution.scenarios`: the sweep, the ``--find-max`` search,
perplexity) on every executor (:mod:`infbench.execution.executors`: in this process, in a worker
container, on a Ray node, where ``infbench worker`` runs the same code) measures through
:class:`EngineSession`, which keeps infbench's promises in one place:

* **the device**: the engine is launched for the group on the run's device and proves it
  runs there before its first request (:func:`~infbench.engines.device_proof.start_on_device`,
  refusing with :class:`~infbench.data.errors.DeviceMismatch` otherwise); the proof is stored
  with every result;
* **once**: each cell is claimed before it is measured (:func:`infbench.execution.bookkeeping.take_cell`), so
  two processes on one store never measure it twice;
* **stored**: every result goes through :func:`infbench.execution.bookkeeping.record` (cells) or
  :meth:`RunContext.record_quality` (perplexity), with signals held back while it is written;
  the run itself was begun by :func:`infbench.execution.bookkeeping.started_run`, whose command line and
  provenance are redacted (:mod:`infbench.data.secrets`) in the store;
* **stopped**: the engine is stopped on every path (:meth:`EngineSession.stop`);
* **steady**: each cell warms up until the engine is stable, or carries the state of the cell
  before it (:class:`~infbench.measure.steady.WarmState`, one per session); its timed part is
  checked for drift; at the end of the group a sentinel measures the group's first cell again
  and, where the host changed state meanwhile, flags the cells measured in the other state and
  measures them once more (:meth:`EngineSession.finish`; docs/metrics.md, "Steady state").

A scenario never starts an engine itself: it asks the session to measure a cell
(:meth:`EngineSession.measure`) or score a text (:meth:`EngineSession.score`) and decides
what comes next from the result.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infbench.analysis import steady
from infbench.analysis.expectation import Expectation
from infbench.analysis.floor import add_roofline, device_roofline_limits
from infbench.analysis.repeats import base_cell_id
from infbench.contract.manager import PluginManager
from infbench.contract.registry import device_backends
from infbench.data import metrics as M
from infbench.data import signals
from infbench.data.engine import Engine
from infbench.data.errors import ConfigError, EngineUnavailable, describe_error
from infbench.data.events import (
    CellSkipped,
    CellStarted,
    CellTimed,
    GroupLoading,
    Note,
    Observer,
    ScoreFinished,
    ScoreProgress,
    ScoreStarted,
    ignore,
)
from infbench.data.groups import Group
from infbench.data.paths import default_home
from infbench.data.run import RunOptions, RunSummary
from infbench.data.schema import Cell, CellResult, DeviceInfo, canonical_json
from infbench.data.scores import PerplexityResult
from infbench.data.secrets import REDACTED
from infbench.data.stored import StoredCell
from infbench.data.warmup import BLOCK_OUTPUT_TOKENS, MIN_SENTINEL_STEPS
from infbench.engines.device_proof import group_failure, start_on_device
from infbench.engines.launch import launch
from infbench.engines.process import EngineProcess
from infbench.execution.bookkeeping import record, take_cell, unmeasured_failure
from infbench.measure.cell import measure_cell
from infbench.measure.power import WithChannels, device_power_sampler
from infbench.measure.steady import WarmState, block_tpot_ms
from infbench.quality.perplexity import new_result, score_loaded
from infbench.store import Store, describe_db_error
from infbench.store.quality import save_quality

#: The least time a drifting group's remeasurements may take by default (s): a group of quick
#: cells still gets its slow ones measured again.
REMEASURE_FLOOR_S = 60.0


class GroupStartFailed(Exception):
    """A group's engine did not start or was refused on the device; ``error`` is the text
    stored with each of its cells (:func:`~infbench.engines.device_proof.group_failure`)."""

    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


@dataclass
class RunContext:
    """One run on one device, as the session and the scenarios see it.

    Attributes:
        pm: the plugin manager.
        device: the device group the cells are planned on.
        store: the store of this process (the host's, or a worker's own ``worker.db``).
        summary: the run's summary (filled as results are stored).
        options: the run's knobs.
        observer: receives the run's events.
        sampler: the device's power sampler (None where nothing is measured here: the host
            side of a container or Ray run).
        limits, limits_reason: the device's roofline limits, or None and why.
        backends: the device's :class:`~infbench.data.schema.DeviceBackends` (None: no plugin
            declares them).
        done: cell ids stored ok before the run (empty with ``force``).
        node: where the units run (a Ray node), for events; None: this host.
        stamp: applied to every cell result before it is stored (the Ray executor adds the
            node to the result's device); None: stored as measured.
        take: asked before each cell is claimed; False: another worker took the cell (a
            worker whose cells the Ray driver may hand to another node,
            :mod:`infbench.data.handoff`), and it is skipped. None: every cell is this run's.
        spread: where serving load is sent from when not from this process: its
            ``runner(engine, cell)`` returns the function that runs a cell's load instead of
            the engine's own client, or None for a cell it does not take
            (:class:`infbench.execution.executors.spread.LoadSpread`, ``--load-nodes``).
        expect: predictions to hold each measured cell against
            (:class:`~infbench.analysis.expectation.Expectation`: its ``unexpected`` note);
            None: none.
    """

    pm: PluginManager
    device: DeviceInfo
    store: Store
    summary: RunSummary
    options: RunOptions = field(default_factory=RunOptions)
    observer: Observer = ignore
    sampler: Any = None
    limits: Any = None
    limits_reason: str | None = None
    backends: Any = None
    done: set[str] = field(default_factory=set)
    node: str | None = None
    stamp: Callable[[CellResult], CellResult] | None = None
    take: Callable[[Cell], bool] | None = None
    spread: Any = None
    expect: Any = None

    @property
    def run_id(self) -> str:
        """The run's id in :attr:`store`."""
        return self.summary.run_id

    def claim(self, cell: Cell, force: bool | None = None) -> bool:
        """Claim ``cell`` for this run (:func:`infbench.execution.bookkeeping.take_cell`); False (announced as
        skipped) when another live process measures it or stored it ok meanwhile, or when
        :attr:`take` says another worker took it."""
        if self.take is not None and not self.take(cell):
            self.observer(CellSkipped(cell, "handed to another worker"))
            return False
        return take_cell(self.store, self.run_id, cell, self.device, self.summary, self.observer,
                         self.options.force if force is None else force)

    def record(self, result: CellResult, flag: tuple[str, str] | None = None) -> None:
        """Store one cell result (:func:`infbench.execution.bookkeeping.record`), count and announce
        it; ``flag`` = ``(name, text)`` when it is an attempt stored before, now flagged."""
        if self.stamp is not None:
            result = self.stamp(result)
        record(self.store, self.run_id, self.summary, result, self.observer, self.node, flag)

    def fail(self, cell: Cell, error: str, started_at: float | None = None,
             metrics: dict[str, Any] | None = None) -> CellResult:
        """Store ``cell`` as failed without a measurement (its engine did not start, its
        worker died), with the scenario's ``metrics`` if any, and return the stored result."""
        r = unmeasured_failure(cell, self.device, error, started_at)
        if metrics:
            r.metrics.update(metrics)
        self.record(r)
        return r

    def record_quality(self, result: PerplexityResult) -> None:
        """Store one perplexity measurement (:func:`infbench.store.quality.save_quality`),
        count it in the summary and announce it (:class:`~infbench.data.events.ScoreFinished`).
        SIGINT and SIGTERM wait until it is written. A store that refuses it (disk full,
        locked) loses no earlier result: a note says so and the run goes on."""
        with signals.deferred():
            try:
                save_quality(self.store, result)
            except (sqlite3.Error, OSError) as exc:
                self.observer(Note(f"the store {self.store.path} refused the perplexity of {result.model} on "
                                   f"{result.engine} ({describe_db_error(exc)}); measure it again later"))
            self.summary.quality.append(result)
            self.observer(ScoreFinished(result, self.node))



def group_engine_options(run_options: dict[str, Any], group: Group) -> dict[str, Any]:
    """The engine options a group starts with: the run's, with the engine arguments of its
    cells' identity over them (an engine configuration of ``engine_configs``: its ``parallel``
    or ``max_num_seqs``). An identity value holding a redacted secret is not used: the run's
    options hold it whole."""
    own = group.cells[0].engine_args if group.cells else None
    if not own:
        return run_options
    return {**run_options, **{k: v for k, v in own.items() if REDACTED not in canonical_json(v)}}


class EngineSession:
    """One engine loaded for one group on the run's device (see the module doc).

    Create it with :meth:`start`; always :meth:`stop` it (``with`` does).

    Args:
        ctx: the run.
        group: the group the engine loaded (what the scenario measures with it).
        engine: the started adapter, proven on ``ctx.device``.
    """

    def __init__(self, ctx: RunContext, group: Group, engine: Engine, load_s: float | None = None):
        self.ctx, self.group, self.engine = ctx, group, engine
        #: Seconds the engine took to launch, load and prove its device.
        self.load_s = load_s
        #: How warm the engine is (each cell's warm-up reads and updates it).
        self.warm = WarmState(loaded_at=time.perf_counter())
        #: The results this session measured, in order (the sentinel's material).
        self.results: list[CellResult] = []
        #: What :meth:`finish` found: the sentinel's comparison and what it flagged and measured again.
        self.sentinel: dict[str, Any] | None = None

    @classmethod
    def start(cls, ctx: RunContext, group: Group, load: Group | None = None) -> EngineSession:
        """Launch the engine of ``group`` on ``ctx.device`` and prove it runs there.

        Args:
            ctx: the run.
            group: the group to measure (announced as
                :class:`~infbench.data.events.GroupLoading`).
            load: what to load, when the scenario sizes the engine for more than
                ``group``'s cells (``--find-max``: its highest load); default ``group``.

        Raises:
            GroupStartFailed: the engine did not start or runs elsewhere (it is stopped).
            KeyboardInterrupt: Ctrl-C or SIGTERM while loading (the engine is stopped).
        """
        ctx.observer(GroupLoading(group, ctx.node))
        engine: Engine | None = None
        t0 = time.perf_counter()
        try:
            engine = launch(ctx.pm, group.engine, ctx.device, group_engine_options(ctx.options.engine_options, group))
            if ctx.options.engine_process and engine.isolate:  # nothing of infbench beside the engine's host thread
                engine = EngineProcess(engine)
            start_on_device(engine, load or group, ctx.backends)  # refuses a device it is not on
        except BaseException as exc:
            if engine is not None:
                with contextlib.suppress(Exception):
                    engine.stop()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise GroupStartFailed(group_failure(exc)) from exc
        return cls(ctx, group, engine, time.perf_counter() - t0)

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def measure(self, cell: Cell, options: RunOptions | None = None,
                annotate: Callable[[CellResult], None] | None = None, again: bool = False) -> CellResult | None:
        """Claim, measure and store one cell on the loaded engine: warm-up (carrying the
        session's :attr:`warm` state), timed part, roofline and physics, the steady-state checks
        (:func:`infbench.analysis.steady.check_timed`) and, where a calibration covers the device,
        the ``unexpected`` note.

        Args:
            cell: a cell of the loaded group (same model, engine, dtype and TP).
            options: knobs for this cell instead of the run's (``--find-max`` sets its SLO).
            annotate: called with the result before it is stored (a scenario adds its own
                metrics, e.g. ``metrics["find_max"]``).
            again: a cell stored in this run already, measured once more (:meth:`finish`): claimed
                with force, announced as such.

        Returns:
            The stored result (ok or failed), or None when the cell was claimed by another
            process (announced as skipped).

        Raises:
            KeyboardInterrupt: after storing a cell that finished before the signal.
        """
        opts = options or self.ctx.options
        if not self.ctx.claim(cell, True if again else opts.force):
            return None
        if isinstance(self.engine, EngineProcess) and self.engine.proc is None and self.engine.dead:
            dead = self.engine.dead
            try:  # the engine's process was killed (a cell past its time limit): this cell gets a new one
                self._revive()
            except GroupStartFailed as exc:
                self.ctx.observer(CellStarted(cell, self.ctx.node, again))
                return self.ctx.fail(cell, f"the engine's process {dead} after an earlier cell, and a new one did "
                                           f"not start: {exc}")
        self.ctx.observer(CellStarted(cell, self.ctx.node, again))
        r = None
        run = self.ctx.spread.runner(self.engine, cell) if self.ctx.spread is not None else None
        try:
            r = measure_cell(self.engine, self.group, cell, self.ctx.device, self.ctx.sampler, opts, run,
                             on_timed=lambda: self.ctx.observer(CellTimed(cell, self.ctx.node)), warm=self.warm)
            add_roofline(r, self.group.model, self.ctx.limits, self.ctx.limits_reason)
            steady.check_timed(r, self.group.model)
            if r.status == "ok":
                ref = steady.reference_tpot_ms(r)
                if ref is not None:
                    r.metrics.setdefault("steady", {})["reference_tpot_ms"] = round(ref, 4)
                note = self.ctx.expect.check(r) if self.ctx.expect is not None else None
                if note is not None:
                    r.metrics["unexpected"] = note
            if annotate is not None:
                annotate(r)
        except KeyboardInterrupt:
            if r is not None:  # measured before the signal: keep it
                self.ctx.record(r)
            raise
        self.ctx.record(r)
        self.results.append(r)
        return r

    def block_tpot_ms(self, cell: Cell) -> float | None:
        """One warm-up block of ``cell`` run now (:meth:`~infbench.data.engine.Engine.warmup`),
        its TPOT median in ms (None when the engine's warm-up gives no records)."""
        prompts = self.engine.make_prompts(cell, self.group.model)
        out = self.engine.warmup(cell, prompts)
        self.warm.ran()
        return block_tpot_ms(out.records) if out is not None else None

    def finish(self, remeasure: bool = True) -> dict[str, Any] | None:
        """At the end of the group, before the engine stops: the checks no single cell can make
        (docs/metrics.md, "Steady state").

        * ``--repeat``: the repeats of one workload whose TPOT varies with a CV above 10 % are
          flagged ``unsteady`` (:func:`~infbench.analysis.steady.repeat_cv`).
        * The **sentinel**: one block of the group's first measured cell, run now, against the
          same steps in its timed part (:func:`~infbench.analysis.steady.sentinel_check`). Where
          they differ by more than 10 %, the host changed state while the group ran: each cell is
          checked the same way in order, one block each, and a cell that differs is flagged
          ``drift`` with both figures (stored again in place) and, when it ran slower than the
          host runs now and ``remeasure`` and the run's policy allow, measured once more as a new
          attempt, within the policy's budget (by default as long as the group's cells took, at least
          :data:`REMEASURE_FLOOR_S`).

        Args:
            remeasure: whether this scenario may measure a cell again (a sweep may; a search
                decides from what it measured, and only flags).

        Returns:
            What it found (also :attr:`sentinel`): ``{"first", "check", "flagged", "remeasured",
            "budget_s", "spent_s"}``; None when nothing was measured ok or the engine gives no
            block to time. Never raises but for KeyboardInterrupt.
        """
        ctx = self.ctx
        ok = [r for r in self.results if r.status == "ok"]
        t_start = time.perf_counter()
        try:
            self._repeat_checks(ok)
            if not ok:
                return None
            first = ok[0]
            steps = min(first.cell.output_len, BLOCK_OUTPUT_TOKENS) - 1
            if steps < MIN_SENTINEL_STEPS:  # batch: the steps compared; serving: each request's TPOT
                self.sentinel = {"first": first.cell.label(), "skipped": (
                    f"its first cell's block compares {steps} decode step(s), fewer than {MIN_SENTINEL_STEPS}: "
                    "too few to tell a changed host from the scheduler's jitter")}
                return self.sentinel
            chk = self._sentinel_of(first)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed check loses nothing measured
            ctx.observer(Note(f"the sentinel of {self.group.label()} could not run ({describe_error(exc)})"))
            return None
        if chk is None:
            return None
        policy = ctx.options.warmup
        budget = policy.remeasure_budget_s if policy.remeasure_budget_s is not None else max(
            REMEASURE_FLOOR_S, sum((r.wall_s or 0.0) + float(M.WARMUP.value(r.metrics) or 0.0) for r in ok))
        found: dict[str, Any] = {"first": first.cell.label(), "check": chk, "flagged": [], "remeasured": [],
                                 "budget_s": round(budget, 3), "spent_s": 0.0,
                                 "seconds": round(time.perf_counter() - t_start, 4)}
        self.sentinel = found
        if not chk["drift"]:
            return found
        ctx.observer(Note(f"sentinel: {first.cell.label()}'s first decode steps take {chk['now_ms']:.2f} ms now, "
                          f"{chk['reference_ms']:.2f} ms when measured (x{chk['ratio']:.2f}): the host changed state "
                          f"during the group; checking each of its {len(ok)} cells"))
        t_spent = 0.0
        for r in ok:
            try:
                c = chk if r is first else self._sentinel_of(r)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - the engine failed its check block: stop checking, keep all
                ctx.observer(Note(f"the sentinel's check of {r.cell.label()} failed ({describe_error(exc)}); the "
                                  "cells not checked yet keep their figures unflagged"))
                break
            if c is None or not c["drift"]:
                continue
            text = steady.sentinel_flag(c, first.cell.label())
            self._reflag(r, "drift", text, {"sentinel": c})
            found["flagged"].append(r.cell.label())
            if remeasure and policy.remeasure and c["faster_now"] and t_spent < budget:
                t0 = time.perf_counter()
                note: dict[str, Any] = {"previous_started_at": r.started_at, "sentinel": c}

                def annotate(x: CellResult, note: dict[str, Any] = note) -> None:
                    x.metrics.setdefault("steady", {}).update(remeasured=note)
                again = self.measure(r.cell, again=True, annotate=annotate)
                t_spent += time.perf_counter() - t0
                if again is not None:
                    found["remeasured"].append(r.cell.label())
        found["spent_s"] = round(t_spent, 3)
        found["seconds"] = round(time.perf_counter() - t_start, 4)
        return found

    def _sentinel_of(self, r: CellResult) -> dict[str, Any] | None:
        """One sentinel block of ``r``'s cell against its reference, and where it differs beyond
        the tolerance a second block at once, which must agree
        (:func:`~infbench.analysis.steady.confirmed`); None without a reference or records."""
        ref = (M.field(r.metrics, "steady") or {}).get("reference_tpot_ms")
        if not ref:
            return None
        chk = steady.sentinel_check(ref, self.block_tpot_ms(r.cell))
        if chk is None or not chk["drift"]:
            return chk
        return steady.confirmed(chk, steady.sentinel_check(ref, self.block_tpot_ms(r.cell)))

    def _repeat_checks(self, ok: list[CellResult]) -> None:
        """Flag ``unsteady`` the repeats of one workload whose CV is above 10 % (:meth:`finish`)."""
        by: dict[str, list[CellResult]] = {}
        if any(o.cell.repeat for o in ok):
            for r in ok:  # the repeats of one workload share the id of its first measurement
                by.setdefault(base_cell_id(StoredCell.from_result(r, spec=r.cell.model_dump())), []).append(r)
        for rs in by.values():
            cv = steady.repeat_cv(rs) if len(rs) >= 2 else None
            if cv is None or not cv["unsteady"]:
                continue
            text = steady.repeat_flag(cv)
            for r in rs:
                self._reflag(r, "unsteady", text, {"repeat_cv": cv})

    def _reflag(self, r: CellResult, name: str, text: str, figures: dict[str, Any]) -> None:
        """Flag the stored attempt ``r`` after the fact: its newest version (earlier flags kept)
        with ``name`` and ``figures`` under ``metrics["steady"]``, stored again in place
        (:meth:`RunContext.record`, announced as :class:`~infbench.data.events.CellFlagged`)."""
        i = next((j for j, x in enumerate(self.results)
                  if x.cell_id == r.cell_id and x.started_at == r.started_at), None)
        flagged = (self.results[i] if i is not None else r).model_copy(deep=True)
        steady.add_flag(flagged.metrics, name, text)
        flagged.metrics["steady"].update(figures)  # metrics-dict: written into the result stored again
        self.ctx.record(flagged, (name, text))
        if i is not None:
            self.results[i] = flagged
    def _revive(self) -> None:
        """Replace an engine whose own process was killed (:class:`~infbench.engines.process.EngineProcess`
        after a cell ran past ``--cell-timeout``, issue 41: the next cell was stored failed
        without running) by a new one of the same group, announced as loading again.

        Raises:
            GroupStartFailed: the new engine did not start.
        """
        with contextlib.suppress(Exception):
            self.engine.stop()
        fresh = EngineSession.start(self.ctx, self.group)
        self.engine, self.load_s = fresh.engine, fresh.load_s

    def score(self, req: Any) -> PerplexityResult:
        """Measure and store the perplexity of a :class:`~infbench.quality.perplexity.PerplexityRequest`
        on the loaded engine (:func:`~infbench.quality.perplexity.score_loaded`).

        Returns:
            The stored result; ``status`` ``failed`` with the error when the engine failed (a
            failed measurement is a result too, and the run goes on).

        Raises:
            ConfigError: the text is too short for ``n_ctx`` (nothing is stored for it).
            KeyboardInterrupt: Ctrl-C or SIGTERM (nothing is stored for it).
        """
        res = new_result(req, self.ctx.device)
        res.load_s = self.load_s
        self.ctx.observer(ScoreStarted(req.label(), req.key(), self.ctx.node))
        def on_chunks(n: int) -> None:
            self.ctx.observer(ScoreProgress(req.key(), n, req.n_ctx, self.ctx.node))

        try:
            if isinstance(self.engine, EngineProcess):  # scored where the model is
                res = self.engine.score(req, res, on_chunks)
            else:
                score_loaded(self.engine, req, res, on_chunks=on_chunks)
        except (KeyboardInterrupt, ConfigError, EngineUnavailable):
            raise
        except Exception as exc:  # noqa: BLE001 - a failed measurement is a result
            res.status, res.error = "failed", describe_error(exc)
        res.finished_at = time.time()
        self.ctx.record_quality(res)
        return res

    def stop(self) -> None:
        """Stop the engine (safe to call twice)."""
        engine, self.engine = self.engine, None  # type: ignore[assignment]
        if engine is not None:
            engine.stop()


def measuring_context(pm: PluginManager, device: DeviceInfo, store: Store, summary: RunSummary,
                      options: RunOptions, observer: Observer = ignore, node: str | None = None) -> RunContext:
    """The :class:`RunContext` of a run that measures in this process: the device's power
    sampler (or ``options.power_override`` with the device's telemetry channels), its
    roofline limits and engine backends, and the cell ids stored ok (none with ``force``).
    The caller closes ``ctx.sampler``."""
    sampler = device_power_sampler(pm, device)
    if options.power_override is not None:  # the user's power, the device's telemetry channels
        sampler = WithChannels(options.power_override, sampler)
    try:
        limits, reason = device_roofline_limits(pm, device)
        done = set() if options.force else store.finished_cell_ids()
    except BaseException:
        sampler.close()
        raise
    expect = Expectation(limits, device.vendor, default_home()) if limits is not None else None
    return RunContext(pm, device, store, summary, options, observer, sampler, limits, reason,
                      device_backends(pm, device), done, node, expect=expect)
