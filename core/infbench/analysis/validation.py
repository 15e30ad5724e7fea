"""Held-out validation of the prediction on stored cells, e.g. LLM-Inference-Bench's
published results after ``infbench import --format lib-csv``.

Every split fits each engine's cells hierarchically (:func:`~infbench.analysis.profile.fit_fleet`:
one engine profile over every device, stack, device and model terms) on a training set,
predicts the held-out cells, and checks the 90 % intervals
(:mod:`infbench.analysis.intervals`, calibrated on inner folds of the training set only)
against them:

* ``random``: a deterministic 30 % of every group's cells held out
  (:func:`~infbench.analysis.predict.held_out`);
* ``length``: fitted on lengths <= 1024, the 2048-token cells predicted;
* ``lomo`` (leave one model out): per engine and model, the model's cells held out on
  every device (a model the fit has never seen), one fold per (device, model);
* ``lodo`` (leave one device out): per engine and device, every cell of the device held
  out (its published campaigns too) and predicted from the profile fitted on the other
  devices and the device's datasheet.

The metric is the geometric-mean relative error ``exp(mean |ln(pred / meas)|) - 1`` of the
batch duration (LLM-Inference-Bench's ``Latency``) per group or fold, and the coverage the
share of held-out measurements inside their interval. ``benchmarks/lib_validation.py``
runs it on the paper's CSV and writes the tables of docs/roofline.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from infbench.analysis.intervals import KINDS, IntervalTable, collect_residuals, novelty
from infbench.analysis.predict import (
    FIT_METRICS,
    _column,
    default_efficiency,
    held_out,
    point_errors,
    predict_points,
)
from infbench.analysis.profile import (
    FleetFit,
    Group,
    Priors,
    build_groups,
    fit_fleet,
    predict_group,
    subset,
)

if TYPE_CHECKING:
    from infbench.contract.manager import PluginManager
    from infbench.data.stored import StoredCell

#: The split kinds and the interval kind their held-out cells need.
SPLITS = {"random": "random", "length": "length", "lomo": "model", "lodo": "device"}
#: The (device, engine) groups the issue's leave-one-device-out figure is over.
LODO_DEVICES = ("a100-40gb", "h100-sxm", "gh200", "mi250", "mi300x")
LODO_ENGINES = ("vllm", "trtllm-serve", "llama.cpp")
#: Fitted on lengths up to this, predicted at :data:`LENGTH_TEST`.
LENGTH_FIT, LENGTH_TEST = 1024, 2048
#: The issue's targets: medians and p90 as fractions, coverage as a range.
TARGETS = {"random_median": 0.05, "length_median": 0.08, "lomo_p90": 0.20, "lodo_median": 0.25,
           "coverage": (0.85, 0.95)}


def geomean(scores: Any) -> float:
    """``exp(mean |log error|) - 1`` of absolute log errors (NaN for none)."""
    s = np.asarray([x for x in np.ravel(scores) if np.isfinite(x)], dtype=float)
    return float(np.exp(s.mean()) - 1) if len(s) else float("nan")


def _by_engine(groups: list[Group]) -> dict[str, list[Group]]:
    out: dict[str, list[Group]] = {}
    for g in groups:
        out.setdefault(g.engine, []).append(g)
    return out


def evaluate(train: list[Group], tests: list[Group], kind: str, priors: Priors | None = None,
             metric: str = "duration_s", seen: bool = True,
             fit: FleetFit | None = None) -> tuple[list[dict[str, Any]], FleetFit]:
    """Fit ``train`` (one engine), calibrate intervals on inner folds of it (``random`` and
    ``kind``), predict every cell of ``tests`` and score them.

    Args:
        train, tests: groups of one engine.
        kind: the interval kind the test cells need (:data:`infbench.analysis.intervals.KINDS`).
        priors: fit hyper-parameters.
        metric: the headline metric.
        seen: predict with each test device's own terms (False: profile and datasheet).
        fit: an already fitted ``train`` (skips the outer fit).

    Returns:
        ``(rows, fit)``: one row per test group with ``device, catalog_id, engine, n,
        error`` (geometric-mean error of ``metric``), ``errors`` (every measured metric),
        ``covered`` and ``measured`` (measurements inside their interval / all),
        ``unbounded`` (measurements without a finite interval: counted as not covered),
        ``q_median`` (median half-width, log units), ``scores`` (``|log|`` errors of
        ``metric``) and ``covered_mask``.
    """
    train = [g for g in train if g.points]

    def fit_fn(gs: list[Group]) -> FleetFit:
        return fit_fleet(gs, priors, covariance=False)

    fitted = fit or fit_fn(train)
    # The kinds the test cells need (the split's own, and any other novelty a cell has:
    # a model only the held-out device ran), each calibrated on inner folds of ``train``.
    needed = {"random", kind}
    for t in tests:
        for p in t.points:
            needed |= novelty(fitted.groups, t.engine, t.key if (seen and t.key in fitted.groups) else None,
                              p["model"], p["n_in"], p["n_out"])
    kinds = tuple(k for k in KINDS if k in needed)
    table = IntervalTable.from_residuals(collect_residuals(train, fit_fn, kinds), source="inner folds")
    rows = []
    for t in tests:
        if not t.points:
            continue
        use_seen = seen and t.key in fitted.groups
        pred = predict_group(fitted, t, seen=use_seen)
        covered = measured = unbounded = 0
        errors: dict[str, float] = {}
        mask = np.zeros(len(t.points), dtype=bool)
        for m in FIT_METRICS:
            meas = _column(t.points, m)
            ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred[m]) & (pred[m] > 0)
            if not ok.any():
                continue
            r = np.abs(np.log(pred[m][ok] / meas[ok]))
            errors[m] = geomean(r)
            q = np.array([table.quantile(t.engine, novelty(fitted.groups, t.engine, t.key if use_seen else None,
                                                           p["model"], p["n_in"], p["n_out"]), m, t.stack,
                                         t.key if use_seen else None)
                          for p, o in zip(t.points, ok, strict=True) if o])
            # An infinite interval (a kind the training cells cannot calibrate) is no
            # interval: it counts as a miss, and is counted apart.
            inside = (r <= q) & np.isfinite(q)
            unbounded += int((~np.isfinite(q)).sum())
            covered += int(inside.sum())
            measured += len(r)
            if m == metric:
                mask[ok] = inside
        sc = np.abs(np.log(pred[metric] / _column(t.points, metric)))
        qs = [table.quantile(t.engine, novelty(fitted.groups, t.engine, t.key if use_seen else None, p["model"],
                                               p["n_in"], p["n_out"]), metric, t.stack,
                             t.key if use_seen else None) for p in t.points]
        rows.append({"device": t.key, "catalog_id": t.device_id, "engine": t.engine, "stack": t.stack,
                     "n": len(t.points),
                     "error": errors.get(metric, float("nan")), "errors": errors, "covered": covered,
                     "measured": measured, "unbounded": unbounded,
                     "q_median": float(np.median(qs)) if qs else float("nan"),
                     "scores": sc.tolist(), "covered_mask": mask.tolist()})
    return rows, fitted


def run_split(split: str, groups: list[Group], priors: Priors | None = None, metric: str = "duration_s",
              log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """One split (:data:`SPLITS`) over every engine's groups.

    Returns:
        Rows of :func:`evaluate` with ``split`` and, for ``lomo``, ``model`` (one row per
        (device, model) fold); groups with nothing to hold out are left out.
    """
    kind = SPLITS[split]
    out: list[dict[str, Any]] = []
    for e, gs in sorted(_by_engine(groups).items()):
        t0 = time.perf_counter()
        if split == "random":
            rows, _ = evaluate([subset(g, lambda p: not held_out(p["cell_id"])) for g in gs],
                               [subset(g, lambda p: held_out(p["cell_id"])) for g in gs], kind, priors, metric)
        elif split == "length":
            rows, _ = evaluate([subset(g, lambda p: max(p["n_in"], p["n_out"]) <= LENGTH_FIT) for g in gs],
                               [subset(g, lambda p: max(p["n_in"], p["n_out"]) == LENGTH_TEST) for g in gs], kind,
                               priors, metric)
        elif split == "lomo":
            rows = []
            for m in sorted({p["model"] for g in gs for p in g.points}):
                train = [subset(g, lambda p, m=m: p["model"] != m) for g in gs]
                if not any(g.points for g in train):
                    continue
                got, _ = evaluate(train, [subset(g, lambda p, m=m: p["model"] == m) for g in gs], kind, priors,
                                  metric)
                rows += [{**x, "model": m} for x in got]
        elif split == "lodo":
            rows = []
            for d in sorted({g.device_id for g in gs}):
                train = [g for g in gs if g.device_id != d]
                if not train:
                    continue
                got, _ = evaluate(train, [g for g in gs if g.device_id == d], kind, priors, metric, seen=False)
                rows += got
        else:
            raise ValueError(f"unknown split {split!r}")
        for row in rows:
            row["split"] = split
        out += rows
        if log:
            log(f"{split:7s} {e:15s} {len(rows):3d} rows in {time.perf_counter() - t0:6.1f} s")
    return out


def summarize(split: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals of one split: ``groups`` (rows), ``median``, ``p90``, ``max``, ``over_20``
    (rows above 20 %), ``coverage`` (held-out measurements inside their interval),
    ``cells`` and, for ``lodo``, the same over the issue's groups (``issue``)."""
    def stats(rs: list[dict[str, Any]]) -> dict[str, Any]:
        errs = [r["error"] for r in rs if r.get("error") is not None and math.isfinite(r["error"])]
        cov = sum(r["covered"] for r in rs)
        meas = sum(r["measured"] for r in rs)
        return {"groups": len(errs), "cells": sum(r["n"] for r in rs),
                "median": float(np.median(errs)) if errs else None,
                "p90": float(np.percentile(errs, 90)) if errs else None, "max": max(errs) if errs else None,
                "over_20": sum(1 for x in errs if x > 0.2),
                "coverage": cov / meas if meas else None, "measured": meas,
                "unbounded": sum(r.get("unbounded", 0) for r in rs)}

    out = stats(rows)
    if split == "lodo":
        out["issue"] = stats([r for r in rows if r["catalog_id"] in LODO_DEVICES and r["engine"] in LODO_ENGINES])
    return out


def default_residuals(groups: list[Group], metric: str = "duration_s") -> list[float]:
    """``|log(pred / meas)|`` of ``metric`` with the generic uncalibrated factors
    (:func:`~infbench.analysis.predict.default_efficiency`) on every group's cells."""
    out: list[float] = []
    for g in groups:
        pr = predict_points(g.points, g.limits, default_efficiency(g.device_id), g.shapes)
        meas = _column(g.points, metric)
        ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pr[metric]) & (pr[metric] > 0)
        out += np.abs(np.log(pr[metric][ok] / meas[ok])).tolist()
    return out


def validate(pm: PluginManager, rows: Sequence[StoredCell], min_cells: int = 8, metric: str = "duration_s",
             priors: Priors | None = None) -> list[dict[str, Any]]:
    """The random split per group: each engine fitted hierarchically on a deterministic
    70 % of every group's cells, the error measured on the other 30 %.

    Args:
        pm: plugin manager (device catalog).
        rows: stored cells (``Store.results()`` items).
        min_cells: groups with fewer usable cells are reported but not fitted.
        metric: the headline metric (default the batch duration; ``e2e_s``, ``ttft_s``,
            ``tpot_s`` for local cells).
        priors: fit hyper-parameters.

    Returns:
        One dict per group, sorted by (device, catalog id, engine): ``device``,
        ``catalog_id``, ``engine``, ``cells`` (usable), ``unknown_model``, ``below_floor``,
        ``n_train``, ``n_test``, ``error`` and ``error_default`` (held-out geometric-mean
        error of ``metric`` fitted, and with the generic uncalibrated factors), ``errors``
        (every metric with its cell count), ``coverage`` (held-out measurements inside
        their 90 % interval), ``parameters`` (the device's fitted values with 90 % ranges),
        ``fit_s`` (seconds for its engine) or ``skipped`` (why).
    """
    groups, skipped = build_groups(pm, rows, min_cells=min_cells)
    extra: dict[tuple[str, str, str], dict[str, Any]] = {}
    out = []
    for s in skipped:
        k = (s["device"], s["catalog_id"], s["engine"])
        if s["why"] in ("unknown_model", "below_floor"):
            extra.setdefault(k, {})[s["why"]] = s["n"]
        else:
            out.append({"device": s["device"], "catalog_id": s["catalog_id"], "engine": s["engine"],
                        "cells": s["cells"], "skipped": s["why"]})
    for e, gs in sorted(_by_engine(groups).items()):
        t0 = time.perf_counter()
        train = [subset(g, lambda p: not held_out(p["cell_id"])) for g in gs]
        test = [subset(g, lambda p: held_out(p["cell_id"])) for g in gs]
        fit = fit_fleet([g for g in train if g.points], priors)
        res, _ = evaluate(train, test, "random", priors, metric, fit=fit)
        by_key = {r["device"]: r for r in res}
        dt = time.perf_counter() - t0
        for g, tr, te in zip(gs, train, test, strict=True):
            r = by_key.get(g.key)
            ex = extra.get((g.key, g.device_id, e), {})
            row: dict[str, Any] = {"device": g.key, "catalog_id": g.device_id, "engine": e,
                                   "cells": len(g.points) + ex.get("below_floor", 0),
                                   "unknown_model": ex.get("unknown_model", 0), "below_floor": ex.get("below_floor", 0)}
            if r is None or not te.points:
                out.append({**row, "skipped": "nothing held out"})
                continue
            pd = predict_points(te.points, te.limits, default_efficiency(g.device_id), te.shapes)
            row.update({"n_train": len(tr.points), "n_test": len(te.points), "error": r["error"],
                        "error_default": point_errors(te.points, pd)[metric]["error"],
                        "errors": point_errors(te.points, predict_group(fit, te)),
                        "coverage": r["covered"] / r["measured"] if r["measured"] else None,
                        "parameters": fit.parameters(e, g.stack, g.key) if g.key in fit.groups else None,
                        "fit_s": dt})
            out.append(row)
    return sorted(out, key=lambda r: (r["device"], r["catalog_id"], r["engine"]))


def summary(results: list[dict[str, Any]], engines: tuple[str, ...] = ("vllm", "trtllm-serve"),
            limit: float = 0.15) -> dict[str, Any]:
    """Median held-out error over the fitted groups of :func:`validate`, and the groups of
    ``engines`` above ``limit``."""
    errs = [r["error"] for r in results if r.get("error") is not None and math.isfinite(r["error"])]
    defaults = [r["error_default"] for r in results if r.get("error_default") is not None]
    return {"groups": len(errs), "median": float(np.median(errs)) if errs else None,
            "median_default": float(np.median(defaults)) if defaults else None,
            "cells": sum(r["cells"] for r in results if "error" in r),
            "over_limit": [f"{r['device']} / {r['engine']}" for r in results
                           if r.get("error") is not None and r["engine"] in engines and r["error"] > limit]}


__all__ = ["KINDS", "SPLITS", "TARGETS", "evaluate", "run_split", "summarize", "validate", "summary",
           "default_residuals", "geomean"]
