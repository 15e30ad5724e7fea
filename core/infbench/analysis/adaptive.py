"""An adaptive sweep: measure a designed subset of a grid's cells, predict the rest (step
"plan" and "analysis"; the scenario that runs the engine calls this module).

:class:`AdaptivePlanner` holds the planned cells of one device and engine, a budget
(:class:`Budget`: a share of the cells or seconds) and the measured results so far. After
every result it recalibrates: the device's terms are fitted to the measured cells against
the engine's profile (stored or built in: :func:`infbench.analysis.calibration.prior_terms`),
as ``infbench predict --calibrate`` does, and every unmeasured cell is predicted with a 90 %
interval. :meth:`AdaptivePlanner.next_cell` picks what to measure next:

1. the **design** cells first (:func:`design`): per model and dtype, the cell with every
   varying numeric axis at its smallest, the one at its largest, and the one nearest the
   middle of every axis (on a log scale), so each axis's extremes and middle are covered;
2. then the cell whose predicted interval is **widest** (the largest half-width of the
   E2E's log interval; ties to the planned order): where the fit knows least;
3. None once the budget is spent (a share: ``floor(share x cells)`` measured, at least one; seconds: the
   time measured so far, or a cell whose predicted time no longer fits), or once every
   unmeasured cell's interval is within :data:`TARGET_HALF_WIDTH` (the sweep stops early
   when more cells would not tell it much).

**The frontier's objective** (``select="front"``, ``--preset frontier --adaptive 30%``, issue
31): the design cells are each series' corners (:func:`front_corners`: per engine
configuration and shape, the lowest and the highest concurrency); then the cell whose
optimistic corner lies furthest above the measured front (:meth:`AdaptivePlanner.front_score`:
its interactivity ``1 / TPOT`` and throughput per device ``total_tok_s / tp`` each at the top
of its 90 % interval, against the measured front there read as the report reads it, linear
between its points: :func:`front_line`); the search stops early
(``stop_reason`` ``front``) once no unmeasured cell's interval reaches above the front, since
none could raise it (a cell under the line between two front points may still be
Pareto-optimal and, measured, would bend the line down there: the search's front errs high,
not low, where it stopped early), and every series with a cell left has three measured
cells (before that, the highest-scoring cell is measured even if its score is not above 0). An
upper-confidence-bound rule aimed at the front, where AIPerf's and GuideLLM's searches
optimise one scalar.

A cell is predicted with its own engine options, so a server's slots (``max_num_seqs``,
llama.cpp's ``parallel``: :data:`~infbench.analysis.predict.SLOT_OPTIONS`) cap the batch its
step runs: past them, concurrency queues. What the model still misses (the queueing's own
cost, an engine configuration's efficiency) is carried by the series' measured cells:
:meth:`AdaptivePlanner.series_corrected` interpolates their ratios measured / predicted in
log concurrency, and a cell's interval narrows as it nears one of them
(:meth:`AdaptivePlanner.series_half_width`).

Each recalibration fits the device's own terms to the measured cells against the engine
profile, held fixed, with the hierarchical priors pulling the device terms to the profile
(:data:`PLANNER_PRIORS`): with a handful of cells the profile decides what they cannot.

:meth:`AdaptivePlanner.predicted_results` then gives a ``predicted`` :class:`CellResult`
for every unmeasured cell: the id the measured cell would have, the predicted ``ttft_s``,
``tpot_s``, ``e2e_s`` (as summaries), ``duration_s``, ``output_tok_s``, ``total_tok_s`` and
their intervals. A predicted cell is never ``ok`` and never counted as measured
(``Store.finished_cell_ids`` skips it), so a later plain run measures it.

The interval of a cell is ``sqrt(q^2 + (1.645 s(x))^2)`` in log units: ``q`` from the
measured cells' leave-one-out residuals (the split-conformal quantile once there are nine
or more, their largest before that) and ``s(x)`` the cell's own standard deviation from the
fit's parameter covariance (delta method), which is what makes cells far from the measured
ones wide.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infbench.analysis.calibration import prior_terms
from infbench.analysis.frontier import Point, interpolate, pareto
from infbench.analysis.intervals import INTERVAL_METRICS, conformal_quantile
from infbench.analysis.predict import (
    FIT_METRICS,
    METRICS,
    _column,
    default_efficiency,
    engine_family,
    measured_points,
    predict_points,
)
from infbench.analysis.profile import FleetFit, Group, K, Priors, _block_params, efficiency_of, fit_fleet
from infbench.analysis.roofline import Limits, effective_batch
from infbench.data import metrics as M
from infbench.data.errors import ConfigError
from infbench.data.models import resolve
from infbench.data.schema import Cell, CellResult, DeviceInfo
from infbench.data.stored import StoredCell

#: The status a predicted cell is stored with.
PREDICTED: Literal["predicted"] = "predicted"
#: z of a two-sided 90 % normal interval.
Z90 = 1.6449
#: The metric whose interval width picks the next cell.
SELECT_METRIC = "e2e_s"
#: A sweep stops before its budget once every unmeasured cell's 90 % interval is within
#: this half-width (log units): x/ 1.2, an interval about as wide as the held-out errors
#: of a 10 % median error (a half-normal log error of median 0.10 has its 90th percentile
#: at 0.24; x/ 1.2 is 0.18). At least the design cells (:func:`design`) are measured first.
TARGET_HALF_WIDTH = math.log(1.2)
#: The narrowest half-width (log units) of a frontier cell's interval: x/ 1.03, the
#: run-to-run noise of a serving cell's TPOT and throughput on a quiet host (issue 30's
#: paired runs moved by 2-3 %), for a cell at a measured cell's load.
NOISE_HALF_WIDTH = math.log(1.03)
#: The distance (log load: concurrency) at which a frontier cell's interval reaches its
#: series' full half-width: two doublings from the nearest measured cell of its series.
FULL_WIDTH_DISTANCE = math.log(4)
#: The hierarchical priors of the planner's recalibration: the fit's defaults
#: (:class:`~infbench.analysis.profile.Priors`); a device's terms move from the profile
#: only as far as its few cells demand.
PLANNER_PRIORS = Priors()


#: Longest budget text (``AdaptiveScenario.budget``), and the longest measuring time (s,
#: the sweep's bound on durations, :data:`infbench.data.schema.SWEEP_LIMITS`).
MAX_BUDGET_TEXT = 16
MAX_BUDGET_S = 1e7


@dataclass(frozen=True)
class Budget:
    """How much of a grid an adaptive sweep may measure.

    Attributes:
        share: fraction of the planned cells (0, 1]; at most ``floor(share x cells)``, at least 1.
        seconds: measuring time.
    """

    share: float | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> Budget:
        """``25%`` or ``0.25`` (a share of the cells), ``90s``, ``10m``, ``1.5h`` (time).

        Raises:
            ConfigError: anything else, a share outside (0, 100 %], a time <= 0 or above
                :data:`MAX_BUDGET_S`, or a text longer than :data:`MAX_BUDGET_TEXT`.
        """
        t = str(text).strip().lower()
        if len(t) > MAX_BUDGET_TEXT:
            raise ConfigError(f"adaptive budget {t[:24]!r}... is {len(t)} characters long (at most "
                              f"{MAX_BUDGET_TEXT})", hint="e.g. 25% (of the planned cells), 0.25, 90s, 10m or 1h")
        m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(%|s|m|min|h)?", t)
        if not m:
            raise ConfigError(f"adaptive budget {text!r} is neither a share nor a time",
                              hint="e.g. 25% (of the planned cells), 0.25, 90s, 10m or 1h")
        v, unit = float(m.group(1)), m.group(2)
        if unit in ("s", "m", "min", "h"):
            if v <= 0:
                raise ConfigError(f"adaptive budget {text!r}: the time must be positive")
            seconds = v * {"s": 1, "m": 60, "min": 60, "h": 3600}[unit]
            if seconds > MAX_BUDGET_S:
                raise ConfigError(f"adaptive budget {text!r} is {seconds:.3g} s; at most {MAX_BUDGET_S:,.0f} s "
                                  "(115 days) is a measuring time", hint="e.g. 10m or 1h")
            return cls(seconds=seconds)
        share = v / 100 if unit == "%" else v
        if not 0 < share <= 1:
            raise ConfigError(f"adaptive budget {text!r}: a share must be above 0 and at most 100 %",
                              hint="e.g. 25%")
        return cls(share=share)

    def cells(self, planned: int) -> int | None:
        """Most cells to measure of ``planned`` (None: no count limit): ``floor(share x
        planned)``, at least 1, so ``--adaptive 33%`` never measures more than 33 % of them."""
        return None if self.share is None else max(1, math.floor(self.share * planned + 1e-9))


def _point(cell: Cell, cell_id: str) -> dict[str, Any]:
    """The prediction input of a planned cell (:func:`~infbench.analysis.predict.measured_points`'s shape)."""
    spec = cell.spec()
    b = effective_batch(spec, {})
    if b is None or cell.dataset is not None or cell.trace is not None:
        raise ConfigError(f"an adaptive sweep predicts batch and fixed-concurrency cells; {cell.label()} is neither",
                          hint="plan batch-mode cells (or --load concurrency) for --adaptive")
    return {"cell_id": cell_id, "model": cell.model, "dtype": cell.dtype, "engine": cell.engine,
            "options": dict(cell.engine_args or {}),
            "batch": b, "n_in": cell.input_len, "n_out": cell.output_len, "tp": cell.tensor_parallel_size,
            "published": False, **{k: None for k in METRICS}}


def corners(cells: list[Cell]) -> list[int]:
    """Indices of the grid's corner cells, in the order to measure them: per (model, engine,
    dtype), the cells whose every varying numeric axis (batch or load, input, output, tp)
    is at its smallest or largest value; all-smallest first, all-largest next, then the
    mixed ones, each group in planned order."""
    axes = _axes
    by: dict[tuple, list[int]] = {}
    for i, c in enumerate(cells):
        by.setdefault((c.model, c.engine, c.dtype), []).append(i)
    firsts, lasts, mixed = [], [], []
    for idx in by.values():
        vals = [axes(cells[i]) for i in idx]
        varying = [a for a in vals[0] if len({v[a] for v in vals}) > 1]
        lo = {a: min(v[a] for v in vals) for a in varying}
        hi = {a: max(v[a] for v in vals) for a in varying}
        for i, v in zip(idx, vals, strict=True):
            if not varying:
                firsts.append(i)
                continue
            at = [v[a] == lo[a] or v[a] == hi[a] for a in varying]
            if not all(at):
                continue
            if all(v[a] == lo[a] for a in varying):
                firsts.append(i)
            elif all(v[a] == hi[a] for a in varying):
                lasts.append(i)
            else:
                mixed.append(i)
    return firsts + lasts + mixed


def peak_allowance(n_cells: int, n_series: int, budget_cells: int) -> int:
    """The cells a frontier search may measure so that each series' predicted peak is measured
    (issue 43): the budget's cells (raised to the corners) plus one per series, at most half the
    grid (never below the budget): ``max(budget, min(budget + series, cells // 2))``. Only spent
    on peak cells and the cells beside the front's measured peak (:meth:`AdaptivePlanner.peak_cells`)."""
    return max(budget_cells, min(budget_cells + n_series, n_cells // 2))


def series_of(c: Cell) -> str:
    """What a frontier series shares: the cell without its load and warm-up (one engine
    configuration, one shape), as text."""
    return repr(sorted(c.model_dump(exclude={"load", "warmup"}, exclude_none=True).items()))


def front_corners(cells: list[Cell]) -> list[int]:
    """Indices of each frontier series' lowest- and highest-concurrency cells (the lowest of
    every series first, in planned order, then the highest)."""
    by: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        by.setdefault(series_of(c), []).append(i)
    lows, highs = [], []
    for idx in by.values():
        lv = sorted(idx, key=lambda i: (_axes(cells[i])["load"], i))
        lows.append(lv[0])
        if len(lv) > 1:
            highs.append(lv[-1])
    return lows + highs


def front_line(points: list[tuple[float, float]], x: float) -> float:
    """The measured front's throughput at interactivity ``x``, read as the report reads a
    front (:func:`~infbench.analysis.frontier.pareto`, then
    :func:`~infbench.analysis.frontier.interpolate`: linear between the two Pareto points
    around ``x``); below the front's lowest interactivity its highest throughput (every
    point there is at least as interactive); 0 beyond its highest (nothing measured reaches
    that far)."""
    front = pareto([Point(px, py, "", "") for px, py in points])
    if not front or x > front[-1].x:
        return 0.0
    if x <= front[0].x:
        return front[0].y
    y = interpolate(front, x)
    return 0.0 if y is None else y


def _axes(c: Cell) -> dict[str, float]:
    """A cell's numeric axes: load (batch, or concurrency / rate when served), input,
    output, tp."""
    ld = c.load
    served = ld is not None and ld.mode != "batch"
    level = float(ld.concurrency or ld.request_rate or 0) if ld is not None and served else float(c.batch)
    return {"load": level, "in": float(c.input_len), "out": float(c.output_len), "tp": float(c.tensor_parallel_size)}


def _log_load(c: Cell) -> float:
    """``log`` of a cell's load level (:func:`_axes`): the axis a series is interpolated along."""
    return math.log(max(_axes(c)["load"], 1e-9))


def design(cells: list[Cell]) -> list[int]:
    """The cells to measure first, in order: per (model, engine, dtype), the all-smallest
    cell, the all-largest and the one nearest the middle of every varying axis (each axis
    on a log scale, from 0 at its smallest to 1 at its largest: batch 1-8 puts 2 and 4
    near the middle, lengths 64-512 puts 128 and 256), so each axis's extremes and middle
    are covered before any cell is picked by its interval (:meth:`AdaptivePlanner.next_cell`).
    A grid without varying axes gives its first cell."""
    by: dict[tuple, list[int]] = {}
    for i, c in enumerate(cells):
        by.setdefault((c.model, c.engine, c.dtype), []).append(i)
    firsts, lasts, mids = [], [], []
    for idx in by.values():
        vals = [_axes(cells[i]) for i in idx]
        varying = [a for a in vals[0] if len({v[a] for v in vals}) > 1]
        if not varying:
            firsts.append(idx[0])
            continue
        lo = {a: math.log(max(min(v[a] for v in vals), 1e-9)) for a in varying}
        hi = {a: math.log(max(max(v[a] for v in vals), 1e-9)) for a in varying}

        spots = [[(math.log(max(v[a], 1e-9)) - lo[a]) / (hi[a] - lo[a]) for a in varying] for v in vals]
        low = [i for i, x in zip(idx, spots, strict=True) if all(t == 0 for t in x)]
        high = [i for i, x in zip(idx, spots, strict=True) if all(t == 1 for t in x)]
        firsts += low[:1]
        lasts += high[:1]
        taken = set(low[:1] + high[:1])
        near = [(round(sum((t - 0.5) ** 2 for t in x), 9), n, i)
                for n, (i, x) in enumerate(zip(idx, spots, strict=True)) if i not in taken]
        if near:
            mids.append(min(near)[2])
    return firsts + lasts + mids


class AdaptivePlanner:
    """Chooses the cells of a grid to measure and predicts the others (module doc).

    The loop a scenario runs (the engine session measures, the store keeps)::

        planner = AdaptivePlanner(cells, device, limits_for_id(pm, catalog_id), Budget.parse("25%"),
                                  stack=stack_of(vendor_of(pm, catalog_id)), home=default_home())
        for row in already_stored_rows_of_these_cells:  # a resumed sweep: they count
            planner.record(row)
        while (cell := planner.next_cell(elapsed_s)) is not None:
            result = measure(cell)                 # a CellResult, ok or failed
            store.save_cell(run_id, result)
            planner.record(result)
        for r in planner.predicted_results():
            store.save_cell(run_id, r)

    Args:
        cells: the planned cells (one device, one engine), in planned order.
        device: the device they run on (their ids: :meth:`Cell.cell_id`).
        limits: its limits (:func:`~infbench.analysis.predict.limits_for_id`).
        budget: a :class:`Budget` (or its text, ``25%``, ``10m``).
        stack: the device's software stack (:data:`infbench.analysis.profile.STACKS`), for
            the engine profile's stack term.
        home: ``$INFBENCH_HOME`` (a stored engine profile there is preferred to the built-in one).
        priors: fit hyper-parameters.
        target: stop before the budget once every unmeasured cell's 90 % half-width (log
            units) is at most this (None: spend the whole budget); :data:`TARGET_HALF_WIDTH`.
        select: ``grid`` (the widest interval) or ``front`` (the frontier's objective,
            module doc; ``target`` then does not apply).

    Attributes:
        stop_reason: why :meth:`next_cell` last returned None (``budget``, ``narrow``:
            every interval within ``target``, ``front``: no unmeasured cell can move the
            front, ``done``: every cell measured), else None.

    Raises:
        ConfigError: cells of several engines, a cell that cannot be predicted (a
            dataset, a trace, a rate load; a model outside the zoo), a bad budget.
    """

    def __init__(self, cells: list[Cell], device: DeviceInfo, limits: Limits, budget: Budget | str,
                 stack: str | None = None, home: Path | None = None, priors: Priors | None = None,
                 target: float | None = TARGET_HALF_WIDTH, select: Literal["grid", "front"] = "grid") -> None:
        if not cells:
            raise ConfigError("an adaptive sweep needs planned cells")
        engines = {engine_family(c.engine) for c in cells}
        if len(engines) != 1:
            raise ConfigError(f"an adaptive sweep runs one engine at a time; the plan has {', '.join(sorted(engines))}")
        self.cells = list(cells)
        self.device = device
        self.limits = limits
        self.budget = Budget.parse(budget) if isinstance(budget, str) else budget
        self.engine = engines.pop()
        self.stack = stack or "unknown"
        self.priors = priors or PLANNER_PRIORS
        self.ids = [c.cell_id(device) for c in cells]
        self.points = [_point(c, i) for c, i in zip(cells, self.ids, strict=True)]
        self.shapes: dict[str, Any] = {}
        for c in cells:
            try:
                self.shapes.setdefault(c.model, resolve(c.model))
            except ConfigError as exc:
                raise ConfigError(f"an adaptive sweep predicts from the model's shape; {c.model}: {exc.message}",
                                  hint="use a zoo model (`infbench models`)") from exc
        self.fixed, self.prior_source = prior_terms(self.engine, self.stack, home)
        self.select = select
        self.target = target if select == "grid" else None
        self.stop_reason: str | None = None
        self.design = design(self.cells) if select == "grid" else front_corners(self.cells)
        self.key = limits.id
        self.measured: dict[str, StoredCell] = {}
        self.wall_s = 0.0
        self.fit: FleetFit | None = None
        self.q_loo = float("nan")
        self._pred: dict[str, np.ndarray] = {}
        self._sd: np.ndarray = np.zeros(len(cells))
        self.refit()

    # -- measurements ------------------------------------------------------------------
    def record(self, result: CellResult | StoredCell) -> None:
        """Take one measured result (a :class:`CellResult` or a stored cell,
        :class:`~infbench.data.stored.StoredCell`) of a planned cell and recalibrate. Failed
        results count against the budget but not in the fit; results of cells outside the plan
        are ignored."""
        row = _row(result)
        if row.cell_id not in self.ids:
            return
        self.wall_s += float(row.wall_s or 0.0)
        self.measured[row.cell_id] = row
        self.refit()

    def _train(self) -> list[dict[str, Any]]:
        """The measured ok cells as fit points, each with its planned cell's engine options
        (so a server's slots, ``parallel`` or ``max_num_seqs``, cap its batch as in the
        predictions), whatever the stored engine description holds."""
        pts = measured_points([r for r in self.measured.values() if r.ok])
        for p in pts:
            p["options"] = self.points[self.ids.index(p["cell_id"])]["options"]
        return pts

    def _fit(self, pts: list[dict[str, Any]], covariance: bool = True) -> FleetFit:
        g = Group(self.key, self.limits.id, self.engine, self.stack, self.limits, pts, self.shapes)
        return fit_fleet([g], self.priors, fixed=self.fixed, covariance=covariance)

    def refit(self) -> None:
        """Fit the measured cells (none: the profile alone), predict every planned cell and
        its interval (module doc)."""
        pts = self._train()
        self.fit = self._fit(pts) if pts else None
        self._predict_all(self.key if pts else None)
        self.q_loo = self._loo(pts)

    def _eff(self, key: str | None, model: str, u_shift: np.ndarray | None = None) -> Any:
        if self.fit is None:
            # Nothing measured yet: the profile (its stack and model terms) and the datasheet.
            if not self.fixed:
                return default_efficiency(self.limits.id)
            u = np.zeros(K)
            for k, v in self.fixed.items():
                if k[0] in ("mu", "stack") or (k[0] == "model" and k[2] == model):
                    u[_block_params(k[0])] += v
            return efficiency_of(u, None, "adaptive (profile)")
        u, _, _ = self.fit.u_for(self.engine, self.stack, key, model)
        reserve = self.fit.groups.get(self.key, {}).get("reserve_bytes") if key else None
        return efficiency_of(u if u_shift is None else u + u_shift, reserve, "adaptive")

    def _predict_all(self, key: str | None) -> None:
        """Predictions of every planned cell and their delta-method log sd."""
        out = {k: np.full(len(self.points), np.nan) for k in METRICS}
        sd = np.zeros(len(self.points))
        h = 1e-4
        for model in sorted({p["model"] for p in self.points}):
            idx = [i for i, p in enumerate(self.points) if p["model"] == model]
            pts = [self.points[i] for i in idx]
            base = predict_points(pts, self.limits, self._eff(key, model), self.shapes)
            for k in METRICS:
                out[k][idx] = base[k]
            if self.fit is None or not self.fit.cov_blocks:
                continue
            cov = self.fit.u_cov(self.engine, self.stack, key, model)
            grad = np.zeros((len(pts), K))
            for j in range(K):
                if cov[j, j] <= 0:
                    continue
                e = np.zeros(K)
                e[j] = h
                shifted = predict_points(pts, self.limits, self._eff(key, model, e), self.shapes)
                grad[:, j] = (np.log(shifted[SELECT_METRIC]) - np.log(base[SELECT_METRIC])) / h
            sd[idx] = np.sqrt(np.clip(np.einsum("ij,jk,ik->i", grad, cov, grad), 0, None))
        self._pred, self._sd = out, sd

    def _loo(self, pts: list[dict[str, Any]]) -> float:
        """The leave-one-out residuals' quantile (log units; NaN with fewer than 2 cells)."""
        if len(pts) < 2:
            return float("nan")
        scores = []
        for i, p in enumerate(pts):
            fit = self._fit(pts[:i] + pts[i + 1:], covariance=False)
            u, _, _ = fit.u_for(self.engine, self.stack, self.key, p["model"])
            eff = efficiency_of(u, fit.groups[self.key]["reserve_bytes"], "loo")
            pr = predict_points([p], self.limits, eff, self.shapes)
            for m in FIT_METRICS:
                meas = _column([p], m)[0]
                if np.isfinite(meas) and meas > 0 and np.isfinite(pr[m][0]) and pr[m][0] > 0:
                    scores.append(abs(math.log(pr[m][0] / meas)))
        q = conformal_quantile(scores)
        return q if math.isfinite(q) else (max(scores) if scores else float("nan"))

    # -- what to measure ----------------------------------------------------------------
    def half_width(self, i: int) -> float:
        """The 90 % half-width (log units) of planned cell ``i``'s prediction: the
        leave-one-out quantile and its own parameter uncertainty in quadrature (inf before
        two cells are measured)."""
        if not math.isfinite(self.q_loo):
            return float("inf")
        return math.sqrt(self.q_loo ** 2 + (Z90 * float(self._sd[i])) ** 2)

    def spent(self, elapsed_s: float | None = None) -> bool:
        """Whether the budget is used up (``elapsed_s``: measuring time so far; default the
        recorded results' wall time)."""
        if self.corners_left():
            return False  # the frontier's corners are measured whatever the budget (issue 43)
        n = self.budget.cells(len(self.cells))
        if n is not None and len(self.measured) >= n:
            # each series' predicted peak is measured too (:func:`peak_allowance`; issue 43: the
            # peak is where a user looks first and where the predictions were weakest); past
            # the allowance, a predicted peak is flagged on the shown front instead
            # (:meth:`infbench.analysis.frontier.Front.certainty`)
            extra = peak_allowance(len(self.cells), len({series_of(c) for c in self.cells}),
                                   max(n, len(self.design))) if self.select == "front" else n
            if not (len(self.measured) < extra and self.peak_cells()):
                return True
        used = self.wall_s if elapsed_s is None else elapsed_s
        return self.budget.seconds is not None and used >= self.budget.seconds

    def corners_left(self) -> list[int]:
        """The frontier's design cells (each series' lowest and highest concurrency,
        :func:`front_corners`) not measured yet: the search measures them whatever its budget
        (the budget is raised to them, said before the run:
        :func:`infbench.execution.scenarios.adaptive_sweep.corner_budget`). Empty for the grid
        objective, whose design cells count against the budget."""
        if self.select != "front":
            return []
        return [i for i in self.design if self.ids[i] not in self.measured]

    def remaining(self) -> list[int]:
        """Indices of the planned cells not measured yet."""
        return [i for i, cid in enumerate(self.ids) if cid not in self.measured]

    def narrow(self) -> bool:
        """Whether every unmeasured cell's interval is within :attr:`target`, with the
        design cells (:func:`design`) measured and at least two cells fitted (so the
        leave-one-out quantile exists)."""
        if self.target is None or not math.isfinite(self.q_loo):
            return False
        if any(self.ids[i] not in self.measured for i in self.design):
            return False
        return all(self.half_width(i) <= self.target for i in self.remaining())

    def next_cell(self, elapsed_s: float | None = None) -> Cell | None:
        """The next cell to measure (module doc), or None when the budget is spent, every
        interval is narrow enough (:meth:`narrow`) or every cell is measured
        (:attr:`stop_reason` says which). With a time budget, a cell whose predicted
        duration (its upper bound, with a warm-up pass) no longer fits is passed over."""
        self.stop_reason = None
        if self.spent(elapsed_s):
            self.stop_reason = "budget"
            return None
        left = self.remaining()
        if not left:
            self.stop_reason = "done"
            return None
        if self.narrow():
            self.stop_reason = "narrow"
            return None
        if self.budget.seconds is not None:
            used = self.wall_s if elapsed_s is None else elapsed_s
            room = self.budget.seconds - used
            corners = set(self.corners_left())
            left = [i for i in left if i in corners or self._cost(i) <= room] or []
            if not left:
                self.stop_reason = "budget"
                return None
        todo = set(left)
        for i in self.design:
            if i in todo:
                return self.cells[i]
        if self.select == "front":
            for i in self.peak_cells():  # the peak is measured, not predicted (issue 43)
                if i in todo:
                    return self.cells[i]
            scores = {i: self.front_score(i) for i in left}
            best = max(left, key=lambda i: (scores[i], -i))
            # stop early only once every series can judge its own cells (three measured:
            # :meth:`series_half_width` then rests on its own leave-one-out error)
            judged = all(len(self._series_points(series_of(self.cells[i]))) >= 3 for i in left)
            if not scores[best] > 0 and judged:
                self.stop_reason = "front"
                return None
            return self.cells[best]
        best = max(left, key=lambda i: (self.half_width(i), -i))
        return self.cells[best]

    def front_prediction(self, i: int) -> dict[str, Any]:
        """:meth:`prediction` for the frontier's objective: TPOT, total and output tok/s and
        the duration corrected by the cell's series (:meth:`series_corrected`), E2E moved by
        the TPOT correction, every interval :meth:`series_half_width` wide once its series
        has a measured cell (the model's own before)."""
        pr = self.prediction(i)
        if not self._series_points(series_of(self.cells[i])):
            return pr
        tpot, tot = self.series_corrected(i)
        hw = self.series_half_width(i)
        vals = {k: pr.get(k) for k in INTERVAL_METRICS}
        if tpot:  # a series' TPOT does not fall as its concurrency rises: within its measured neighbours'
            lo, hi = self._series_tpot_bounds(i)
            tpot = min(max(tpot, lo), hi)
        if tpot and pr.get("tpot_s"):
            r = tpot / pr["tpot_s"]
            vals["tpot_s"] = tpot
            e2e, ttft = vals.get("e2e_s"), vals.get("ttft_s")
            if e2e is not None and ttft is not None:
                vals["e2e_s"] = ttft + (e2e - ttft) * r
        if tot and pr.get("total_tok_s"):
            r = tot / pr["total_tok_s"]
            vals["total_tok_s"] = tot
            for k in ("output_tok_s",):
                if vals.get(k) is not None:
                    vals[k] = vals[k] * r
            if pr.get("duration_s"):
                vals["duration_s"] = pr["duration_s"] / r
        iv = {m: ([v * math.exp(-hw), v * math.exp(hw)] if v is not None else [None, None]) for m, v in vals.items()}
        return {**vals, "interval": iv, "half_width": hw}

    def _series_tpot_bounds(self, i: int) -> tuple[float, float]:
        """The TPOT p50 (s) of the measured ok cells of planned cell ``i``'s series just below
        and just above its load (0 and inf where there is none): a series' TPOT does not fall
        as its concurrency rises (the same server, more sequences per step), so a prediction
        between them stays between them."""
        load, key = _axes(self.cells[i])["load"], series_of(self.cells[i])
        below, above = [], []
        for cid, r in self.measured.items():
            j = self.ids.index(cid)
            t = M.TPOT.value(r.metrics, "p50")
            if not r.ok or series_of(self.cells[j]) != key or not t:
                continue
            lj = _axes(self.cells[j])["load"]
            if lj < load:
                below.append((lj, t))
            elif lj > load:
                above.append((lj, t))
        lo = max(below)[1] if below else 0.0
        hi = min(above)[1] if above else float("inf")
        return lo, max(lo, hi)

    def measured_front_points(self) -> list[tuple[float, float]]:
        """The measured ok cells as ``(tok_s_per_user, tok_s_per_device)`` (1 / TPOT p50, and
        total tok/s over the cell's devices)."""
        out = []
        for cid, r in self.measured.items():
            if not r.ok:
                continue
            tpot = M.TPOT.value(r.metrics, "p50")
            tot = M.TOTAL_TOK_S.value(r.metrics)
            i = self.ids.index(cid)
            devices = M.DEVICES_USED.value(r.metrics) or self.cells[i].tensor_parallel_size
            if tpot and tot and tpot > 0 and tot > 0:
                out.append((1.0 / tpot, tot / devices))
        return out

    def _series_points(self, key: str) -> list[tuple[float, float | None, float]]:
        """The measured ok cells of series ``key`` as ``(log load, log(TPOT measured /
        predicted), log(total tok/s measured / predicted))``, by load. The TPOT ratio is None
        for a cell whose TPOT p50 is 0 (tokens streamed in chunks, faster than the stream's
        granularity): its throughput still counts."""
        pts: list[tuple[float, float | None, float]] = []
        for cid, r in self.measured.items():
            j = self.ids.index(cid)
            if not r.ok or series_of(self.cells[j]) != key:
                continue
            pj = self.prediction(j)
            mt, mo = M.TPOT.value(r.metrics, "p50"), M.TOTAL_TOK_S.value(r.metrics)
            if mo and pj.get("total_tok_s"):
                rt = math.log(mt / pj["tpot_s"]) if mt and pj.get("tpot_s") else None
                pts.append((_log_load(self.cells[j]), rt, math.log(mo / pj["total_tok_s"])))
        return sorted(pts, key=lambda p: p[0])

    @staticmethod
    def _interp(pts: list[tuple[float, float | None, float]], x: float) -> tuple[float, float]:
        """The two log ratios at log load ``x``, each over the points that have it: linear
        between the nearest points below and above, the nearest one's beyond them; 0 (no
        correction) where no point has it."""
        def one(k: int) -> float:
            have = [(p[0], float(v)) for p in pts if (v := p[k]) is not None]
            if not have:
                return 0.0
            below = [p for p in have if p[0] <= x]
            above = [p for p in have if p[0] >= x]
            lo, hi = (below[-1] if below else above[0]), (above[0] if above else below[-1])
            w = 0.0 if hi[0] == lo[0] else (x - lo[0]) / (hi[0] - lo[0])
            return float(lo[1] + w * (hi[1] - lo[1]))

        return one(1), one(2)

    def series_half_width(self, i: int, bracket: bool = True) -> float:
        """The nominal 90 % half-width (log units; docs/benchmarks.md gives the coverage
        measured) of :meth:`series_corrected` for cell ``i``'s series:
        the largest error, on either axis, of predicting each measured inner cell of the series
        from the others (leave-one-out); :data:`TARGET_HALF_WIDTH` while the series has fewer
        than three measured cells. Scaled by the cell's distance (log concurrency) to the
        series' nearest measured cell: full at :data:`FULL_WIDTH_DISTANCE` or further,
        :data:`NOISE_HALF_WIDTH` at a measured cell, linear between (a neighbour's ratio
        measured / predicted tells more about a cell the nearer it is).

        Never narrower, for a cell between two measured cells of its series, than
        :meth:`bracket_half_width`: on the untuned grid ``parallel-4-8`` (docs/benchmarks.md) the
        corrections of a cell's two measured neighbours agreed, and the series' leave-one-out
        error gave +/-4 % to a cell whose TPOT was 23 % off (the model's batch cost had the
        wrong shape between them) and the shown front 22 % off there. ``bracket=False``: without
        that floor (what the search's own pick uses, :meth:`front_score`: with it, the replayed
        development grid picked a cell of the other series and its front moved 24 % off)."""
        pts = self._series_points(series_of(self.cells[i]))
        errs = []
        for k in range(1, len(pts) - 1):
            rt, ro = self._interp(pts[:k] + pts[k + 1:], pts[k][0])
            mt = pts[k][1]
            errs.append(max(abs(rt - mt) if mt is not None else 0.0, abs(ro - pts[k][2])))
        full = max(errs) if errs else TARGET_HALF_WIDTH
        if not pts:
            return full
        near = min(abs(_log_load(self.cells[i]) - p[0]) for p in pts)
        scaled = max(NOISE_HALF_WIDTH, full * min(1.0, near / FULL_WIDTH_DISTANCE))
        return max(scaled, self.bracket_half_width(i)) if bracket else scaled

    def bracket_half_width(self, i: int) -> float:
        """What planned cell ``i``'s interval may not go below when it lies between two measured
        ok cells of its series (the nearest below and above in load), log units: the narrower of
        two bounds that need no trust in the correction's shape,

        * the bracket: how far the corrected total tok/s (:meth:`series_corrected`) is from the
          farther of the two neighbours' measured total tok/s (a series' throughput rises to its
          peak: without a model, the truth lies anywhere between its neighbours; TPOT was tried
          as well and widened every interval to +/-100 % and more on the replayed grids);
        * the model's own half-width (:meth:`half_width`: its leave-one-out quantile over every
          measured cell; a model that predicts the grid well vouches for the shape between
          the neighbours).

        0 outside the series' measured range (the distance rule of :meth:`series_half_width`
        covers extrapolation) and for a measured load."""
        c = self.cells[i]
        key, load = series_of(c), _axes(c)["load"]
        below: list[tuple[float, float]] = []
        above: list[tuple[float, float]] = []
        for cid, r in self.measured.items():
            j = self.ids.index(cid)
            tot = M.TOTAL_TOK_S.value(r.metrics)
            if not r.ok or series_of(self.cells[j]) != key or not tot:
                continue
            lj = _axes(self.cells[j])["load"]
            (below if lj < load else above if lj > load else []).append((lj, tot))
        pred = self.series_corrected(i)[1]
        if not below or not above or not pred:
            return 0.0
        a, b = max(below)[1], min(above)[1]
        return min(max(abs(math.log(pred / a)), abs(math.log(pred / b))), self.half_width(i))

    def series_corrected(self, i: int) -> tuple[float | None, float | None]:
        """Planned cell ``i``'s predicted TPOT (s) and total tok/s, each corrected by the
        measured cells of its own series (:func:`series_of`): the log ratio measured /
        predicted, interpolated linearly in log concurrency between the nearest measured
        cells below and above it (the nearest one's beyond them). The model caps the batch at
        the server's slots but has no term for the queue's own cost or an engine
        configuration's efficiency: a series' own measurements carry those."""
        pr = self.prediction(i)
        tpot, tot = pr.get("tpot_s"), pr.get("total_tok_s")
        pts = self._series_points(series_of(self.cells[i]))
        if not pts or tpot is None or tot is None:
            return tpot, tot
        rt, ro = self._interp(pts, _log_load(self.cells[i]))
        return tpot * math.exp(rt), tot * math.exp(ro)

    def peak_cells(self) -> list[int]:
        """Per frontier series whose corners are measured, the planned cell that holds (measured)
        or is predicted to hold (:meth:`series_corrected`) its highest throughput per device, when
        it is not measured yet: the search measures these right after the corners (issue 43:
        a series' peak often lies below its highest concurrency, where the predictions were
        weakest), past a cell budget up to :func:`peak_allowance` (:meth:`spent`). Once every
        series' peak is measured, the unmeasured cells beside the highest of them whose interval
        reaches it (:meth:`_peak_neighbours`: the front's peak may lie there). Indices in
        planned order of their series."""
        by: dict[str, list[int]] = {}
        for i, c in enumerate(self.cells):
            by.setdefault(series_of(c), []).append(i)
        out: list[int] = []
        peaks: list[tuple[float, list[int], int]] = []
        for idx in by.values():
            if any(self.ids[i] not in self.measured for i in idx if i in self.design):
                continue
            best, best_y = None, -math.inf
            for i in idx:
                r = self.measured.get(self.ids[i])
                if r is not None:
                    tot = M.TOTAL_TOK_S.value(r.metrics) if r.ok else None
                    y = tot / (M.DEVICES_USED.value(r.metrics) or self.cells[i].tensor_parallel_size) if tot else None
                else:
                    tot = self.series_corrected(i)[1]
                    y = tot / self.cells[i].tensor_parallel_size if tot else None
                if y is not None and y > best_y:
                    best, best_y = i, y
            if best is None:
                continue
            if self.ids[best] not in self.measured:
                out.append(best)
            else:
                peaks.append((best_y, idx, best))
        if peaks and not out and len(peaks) == len(by):
            # every series' peak is measured: the front's peak (the highest of them) is known only
            # once the cells beside it cannot hold more
            best_y, idx, best = max(peaks, key=lambda t: t[0])
            out.extend(self._peak_neighbours(idx, best, best_y))
        return out

    def _peak_neighbours(self, idx: list[int], best: int, peak: float) -> list[int]:
        """The unmeasured cells on either side (in load) of series cells ``idx``'s measured peak
        ``best`` (``peak`` tok/s per device) whose interval (:meth:`series_half_width`, with its
        bracket) reaches the peak: the truth there may be higher, so the series' peak is not
        known until they are measured (issue 43). Highest interval top first."""
        order = sorted(idx, key=lambda i: _axes(self.cells[i])["load"])
        k = order.index(best)
        tops = []
        for j in (order[k - 1] if k > 0 else None, order[k + 1] if k + 1 < len(order) else None):
            if j is None or self.ids[j] in self.measured:
                continue
            tot = self.series_corrected(j)[1]
            if tot:
                top = tot * math.exp(self.series_half_width(j)) / self.cells[j].tensor_parallel_size
                if top >= peak:
                    tops.append((top, j))
        return [j for _, j in sorted(tops, reverse=True)]

    def front_score(self, i: int) -> float:
        """How far planned cell ``i``'s optimistic corner lies above the measured front (log
        units; module doc): ``log(y_hi / F(x_hi))`` with ``x_hi = 1 / TPOT_lo`` and ``y_hi`` the
        top of its throughput-per-device interval (the values corrected by its series'
        measured cells, :meth:`series_corrected`, the interval :meth:`series_half_width`; the
        model's own interval for a series not measured yet), ``F`` the measured front
        (:func:`front_line`: linear between its points, as its reads are), ``x_hi`` at most
        the interactivity of the measured cell just below it in its series (a series'
        interactivity does not rise with concurrency); ``inf``
        where no measured point reaches ``x_hi`` (the cell would extend the front) or before
        any cell is measured, ``-inf`` without a prediction."""
        tpot, tot = self.series_corrected(i)
        if not tpot or not tot:
            return float("-inf")
        hw = self.series_half_width(i, bracket=False) if self._series_points(series_of(self.cells[i])) else \
            (self.prediction(i)["half_width"] or 0.0)
        x_hi = math.exp(hw) / tpot
        # a series' interactivity does not rise with its concurrency: no more than the measured
        # cell just below this one in its series
        tpot_below, _ = self._series_tpot_bounds(i)
        if tpot_below > 0:
            x_hi = min(x_hi, 1.0 / tpot_below)
        y_hi = tot * math.exp(hw) / self.cells[i].tensor_parallel_size
        f = front_line(self.measured_front_points(), x_hi)
        return float("inf") if f <= 0 else math.log(y_hi / f)

    def _cost(self, i: int) -> float:
        """Predicted measuring time of planned cell ``i`` (s): its duration's upper bound,
        once more per warm-up pass."""
        d = float(self._pred["duration_s"][i])
        hw = self.half_width(i)
        up = d * math.exp(hw) if math.isfinite(hw) else d
        passes = self.cells[i].warmup
        return up * (1 + (1 if passes is None else passes)) if math.isfinite(up) else 0.0

    # -- the unmeasured cells -----------------------------------------------------------
    def prediction(self, i: int) -> dict[str, Any]:
        """Planned cell ``i``'s predicted metrics and intervals: ``{metric: value}`` for
        :data:`~infbench.analysis.intervals.INTERVAL_METRICS` and ``interval``
        (metric -> ``[lo, hi]``; None bounds before two cells are measured)."""
        hw = self.half_width(i)
        vals: dict[str, Any] = {}
        for m in INTERVAL_METRICS:
            if m == "total_tok_s":
                p = self.points[i]
                d = self._pred["duration_s"][i]
                v = p["batch"] * (p["n_in"] + p["n_out"]) / d if d > 0 else float("nan")
            else:
                v = float(self._pred[m][i])
            vals[m] = v if math.isfinite(v) else None
        iv = {m: ([v * math.exp(-hw), v * math.exp(hw)] if v is not None and math.isfinite(hw) else [None, None])
              for m, v in vals.items()}
        return {**vals, "interval": iv, "half_width": hw if math.isfinite(hw) else None}

    def predicted_results(self, now: float | None = None) -> list[CellResult]:
        """A ``predicted`` :class:`CellResult` for every unmeasured planned cell (module
        doc): the cell's own id, metrics shaped as measured ones (``ttft_s`` etc. as
        ``{"mean", "p50"}`` summaries) plus ``predicted: true``, ``interval``,
        ``interval_half_width`` and what the prediction rests on."""
        t = time.time() if now is None else now
        ok = sum(1 for r in self.measured.values() if r.ok)
        basis = (f"fitted on {ok} measured cells of this sweep against the {self.prior_source}"
                 if ok else f"{self.prior_source} (no cell measured)")
        out = []
        for i in self.remaining():
            c = self.cells[i]
            pr = self.prediction(i) if self.select == "grid" else self.front_prediction(i)
            metrics: dict[str, Any] = {"predicted": True, "interval": pr["interval"],
                                       "interval_half_width": pr["half_width"], "prediction_basis": basis,
                                       "devices_used": c.tensor_parallel_size}
            for m in ("ttft_s", "tpot_s", "e2e_s"):
                if pr[m] is not None:
                    metrics[m] = {"mean": pr[m], "p50": pr[m]}
            for m in ("duration_s", "output_tok_s", "total_tok_s"):
                metrics[m] = pr[m]
            out.append(CellResult(cell_id=self.ids[i], spec_hash=c.spec_hash(), cell=c, device=self.device,
                                  status=PREDICTED, metrics=metrics,
                                  engine={"name": c.engine, "predicted": True, "basis": basis},
                                  power_note="predicted: not measured", started_at=t, finished_at=t))
        return out


def _row(result: CellResult | StoredCell) -> StoredCell:
    """A result as a stored cell (what :func:`measured_points` reads): a :class:`CellResult` not
    stored yet through :meth:`StoredCell.from_result`, a stored cell as it is."""
    return StoredCell.from_result(result) if isinstance(result, CellResult) else result


