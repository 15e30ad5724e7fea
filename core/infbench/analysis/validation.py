"""Held-out validation of the prediction per (device, engine) on stored cells, e.g.
LLM-Inference-Bench's published results after ``infbench import --format lib-csv``.

:func:`validate` groups the stored cells by device (the published hardware name where
the cells were imported, so two measurement campaigns on one device stay apart) and
engine, fits each group on a deterministic 70 % (:func:`~infbench.analysis.predict.calibrate`)
and reports the geometric-mean error of the batch duration (LLM-Inference-Bench's
``Latency``, the batch E2E) on the other 30 %, next to the error of the uncalibrated
defaults on the same cells. ``benchmarks/lib_validation.py`` runs it on the paper's CSV
and writes the table of docs/roofline.md.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from infbench.analysis.predict import (
    calibrate,
    device_catalog_id,
    engine_family,
    limits_for_id,
    measured_points,
)
from infbench.errors import ConfigError


def group_rows(pm: Any, rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Stored rows by ``(device label, catalog id, engine family)``; the label is the
    published hardware name of imported cells, else the catalog id. Rows on devices the
    catalog does not describe are left out."""
    from infbench.devices import catalog

    specs = catalog(pm)
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        cid = device_catalog_id(pm, r["device"], specs)
        if cid is None:
            continue
        label = (r["device"].get("properties") or {}).get("published_name") or cid
        out.setdefault((label, cid, engine_family(r["spec"].get("engine", ""))), []).append(r)
    return out


def validate(pm: Any, rows: list[dict[str, Any]], min_cells: int = 8,
             metric: str = "duration_s") -> list[dict[str, Any]]:
    """Calibrate and hold out per group (:func:`group_rows`).

    Args:
        pm: plugin manager (device catalog).
        rows: ``Store.results()`` items.
        min_cells: groups with fewer usable cells are reported but not fitted.
        metric: the measurement whose held-out error is the headline (default the
            batch duration; ``e2e_s``, ``ttft_s``, ``tpot_s`` for local cells).

    Returns:
        One dict per group: ``device``, ``catalog_id``, ``engine``, ``cells`` (usable),
        ``unknown_model`` (cells whose model the zoo lacks), ``below_floor`` (left out),
        ``n_train``, ``n_test``, ``error`` and ``error_default`` (held-out geometric-mean
        error of ``metric``, fractions), ``errors`` (every metric with its cell count),
        ``efficiency`` (the fitted factors), ``fit_s`` (seconds) or ``skipped`` (why).
    """
    from infbench.models import resolve

    out = []
    for (label, cid, engine), group in sorted(group_rows(pm, rows).items()):
        pts = measured_points(group)
        known = []
        for p in pts:
            try:
                resolve(p["model"])
                known.append(p)
            except ConfigError:
                continue
        row: dict[str, Any] = {"device": label, "catalog_id": cid, "engine": engine, "cells": len(known),
                               "unknown_model": len(pts) - len(known)}
        if len(known) < min_cells:
            out.append({**row, "skipped": f"{len(known)} usable cells (< {min_cells})"})
            continue
        try:
            lim = limits_for_id(pm, cid)
        except ConfigError as exc:
            out.append({**row, "skipped": exc.message})
            continue
        t0 = time.perf_counter()
        cal = calibrate(known, lim, engine=engine)
        row.update({"below_floor": len(cal.excluded.get("below_floor", [])), "n_train": cal.n_train,
                    "n_test": cal.n_test, "error": cal.error_test[metric]["error"],
                    "n_metric": cal.error_test[metric]["n"], "error_default": cal.error_default[metric]["error"],
                    "errors": cal.error_test, "efficiency": cal.efficiency.__dict__,
                    "fit_s": time.perf_counter() - t0})
        out.append(row)
    return out


def summary(results: list[dict[str, Any]], engines: tuple[str, ...] = ("vllm", "trtllm-serve"),
            limit: float = 0.15) -> dict[str, Any]:
    """Median held-out error over the fitted groups, and the groups of ``engines`` above
    ``limit`` (the issue's target: median <= 8 %, no vLLM/TensorRT-LLM group above 15 %)."""
    errs = [r["error"] for r in results if r.get("error") is not None and math.isfinite(r["error"])]
    defaults = [r["error_default"] for r in results if r.get("error_default") is not None]
    return {"groups": len(errs), "median": float(np.median(errs)) if errs else None,
            "median_default": float(np.median(defaults)) if defaults else None,
            "cells": sum(r["cells"] for r in results if "error" in r),
            "over_limit": [f"{r['device']} / {r['engine']}" for r in results
                           if r.get("error") is not None and r["engine"] in engines and r["error"] > limit]}


def markdown_table(results: list[dict[str, Any]]) -> str:
    """The validation as a markdown table (docs/roofline.md)."""
    lines = ["| device (published name) | engine | cells | held out | held-out error | uncalibrated | left out |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        if "error" not in r:
            lines.append(f"| {r['device']} | {r['engine']} | {r['cells']} | - | - | - | {r.get('skipped', '')} |")
            continue
        left = []
        if r.get("below_floor"):
            left.append(f"{r['below_floor']} below the roofline floor")
        if r.get("unknown_model"):
            left.append(f"{r['unknown_model']} models not in the zoo")
        lines.append(f"| {r['device']} | {r['engine']} | {r['cells']} | {r['n_test']} | {100 * r['error']:.1f} % | "
                     f"{100 * r['error_default']:.1f} % | {'; '.join(left)} |")
    return "\n".join(lines)
