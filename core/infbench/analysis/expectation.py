"""A measured cell against its calibrated prediction: the ``unexpected`` note
(docs/metrics.md, "Steady state").

Where a calibration covers the (device, engine) pair — the device's own calibration, a stored
engine profile or the built-in one holding terms for this device
(:func:`infbench.analysis.calibration.resolve_basis`, ``Basis.key``) — infbench knows what a cell
should measure and how sure it is (the 90 % split-conformal interval,
:mod:`infbench.analysis.intervals`). A cell whose TPOT or output throughput falls outside that
interval gets ``metrics["unexpected"]``: the metric, the measured and predicted values, their
ratio and the interval. It is a note, not a failure: the cell may be right and the profile
stale, but either way someone should look.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from infbench.analysis.calibration import Basis, resolve_basis
from infbench.analysis.predict import measured_points, predict_points
from infbench.analysis.profile import stack_of
from infbench.analysis.roofline import Limits
from infbench.data import metrics as M
from infbench.data.schema import CellResult
from infbench.data.stored import StoredCell

#: The measured figures checked, each with the stored statistic read (the fit uses means).
CHECKED = (("tpot_s", "mean"), ("output_tok_s", None))


class Expectation:
    """Predictions with intervals for the cells of one device (one basis per engine, resolved
    once).

    Args:
        limits: the device's roofline limits (its ``id`` is the catalog id the calibrations
            are keyed by).
        vendor: the device's vendor (its software stack, :func:`~infbench.analysis.profile.stack_of`).
        home: ``$INFBENCH_HOME`` (stored calibrations and profiles).
    """

    def __init__(self, limits: Limits, vendor: str | None, home: Path):
        self.limits, self.stack, self.home = limits, stack_of(vendor), home
        self._bases: dict[str, Basis | None] = {}

    def basis(self, engine: str) -> Basis | None:
        """The calibration covering ``engine`` on this device, or None when none holds terms for
        it (a prediction from a datasheet alone is not something to be surprised against)."""
        if engine not in self._bases:
            try:
                b = resolve_basis(self.home, self.limits.id.split("+")[0], engine, self.stack)
            except Exception:  # noqa: BLE001 - a broken calibration file must not fail a cell
                b = None
            self._bases[engine] = b if b is not None and b.key is not None and b.table is not None else None
        return self._bases[engine]

    def check(self, result: CellResult) -> dict[str, Any] | None:
        """The ``unexpected`` note of an ok cell, or None (inside every interval, not covered,
        not predictable). Never raises."""
        if result.status != "ok":
            return None
        basis = self.basis(result.cell.engine)
        if basis is None:
            return None
        try:
            pts = measured_points([StoredCell.from_result(result)])
            if not pts:
                return None
            p = pts[0]
            eff = basis.efficiency_for(result.cell.engine, self.limits, p["model"])
            pred = predict_points(pts, self.limits, eff)
            kinds = basis.kinds(result.cell.engine, p["model"], p["n_in"], p["n_out"])
            out: list[dict[str, Any]] = []
            for metric, stat in CHECKED:
                measured = M.metric(metric).value(result.metrics, stat)
                predicted = float(pred[metric][0]) if metric in pred else math.nan
                q = basis.quantile(result.cell.engine, kinds, metric)
                if not measured or not math.isfinite(predicted) or predicted <= 0 or not math.isfinite(q):
                    continue
                lo, hi = predicted * math.exp(-q), predicted * math.exp(q)
                if not lo <= measured <= hi:
                    out.append({"metric": metric, "measured": measured, "predicted": round(predicted, 6),
                                "ratio": round(measured / predicted, 4), "interval": [round(lo, 6), round(hi, 6)]})
        except Exception:  # noqa: BLE001 - a note must never fail a cell
            return None
        if not out:
            return None
        return {"outside": out, "basis": basis.detail,
                "text": "unexpected: " + "; ".join(
                    f"{o['metric']} {o['ratio']:.2f}x the prediction (outside its 90 % interval)" for o in out)}
