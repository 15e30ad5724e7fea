"""Analytical prediction of TTFT, TPOT, E2E and throughput, and its calibration
against measured cells.

Method (GenZ, Bambhaniya et al. 2024): each operator of :mod:`infbench.analysis.roofline`
takes ``max(FLOPs / (peak x tp x eff_c), bytes / (bandwidth x tp x eff_m))``; a forward
pass adds ``overhead_s`` (kernel launches, scheduling, sampling: what a roofline cannot
see) and, for ``tp > 1``, two ring all-reduces per layer of the ``M x H`` activations,
``2 (tp - 1) / tp x bytes / link_bandwidth`` each (Megatron-LM's tensor parallelism,
Shoeybi et al. 2019)::

    TTFT = pass(prefill of B x n_in tokens)
    TPOT = pass(decode step at context n_in + n_out / 2)
    E2E  = TTFT + (n_out - 1) x TPOT
    output_tok_s = B n_out / E2E;  total_tok_s = B (n_in + n_out) / E2E   (LLM-Inference-Bench eq. 2)

Every quantity is a numpy array over the grid (batch x input x output x tp broadcast),
so a whole LLM-Inference-Bench grid is one call per (model, device).

:func:`calibrate` fits ``eff_c``, ``eff_m`` and ``overhead_s`` to stored cells of one
device by least squares on ``log(predicted / measured)`` of TTFT and TPOT
(``scipy.optimize.least_squares``), on a deterministic part of the cells, and reports
the geometric-mean error on the held-out rest.

The ``genz-llm`` package implements the same model with a richer operator set but pins
its own hardware table and pulls in pandas and a web UI; infbench needs the model on its
own device descriptions, vectorised over a grid, and fitted to its own cells, so it
keeps the ~100 lines here.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infbench.analysis.roofline import (
    Limits,
    act_bytes,
    decode_ops,
    effective_batch,
    pass_time,
    prefill_ops,
    weight_bytes,
)
from infbench.engines.base import DTYPE_ALIASES
from infbench.errors import ConfigError
from infbench.models import ModelShape

#: Link bandwidth assumed for the all-reduce when a device description gives none
#: (B/s): PCIe 4.0 x16, one direction. Said in the prediction's ``notes``.
DEFAULT_LINK_BYTES_S = 32e9
#: Per-message latency of one all-reduce (s), NCCL-like small-message latency.
ALLREDUCE_LATENCY_S = 10e-6


@dataclass
class Efficiency:
    """Efficiency factors of the analytical model.

    Attributes:
        eff_compute: fraction of peak FLOP/s reached by matmuls (0..1].
        eff_memory: fraction of peak bandwidth reached by weight/KV reads (0..1].
        overhead_s: fixed time per forward pass (s).
        source: ``default`` or what they were fitted on.
    """

    eff_compute: float = 0.7
    eff_memory: float = 0.8
    overhead_s: float = 0.0
    source: str = "default (GenZ-style typical efficiencies, not fitted)"


def _precision(dtype: str) -> str:
    return DTYPE_ALIASES.get(dtype.lower(), dtype.lower())


def allreduce_time(m: ModelShape, precision: str, batch: Any, tokens: Any, tp: Any,
                   link_bytes_s: float) -> np.ndarray:
    """Two ring all-reduces per layer of ``B x T x hidden`` activations (s); 0 at tp = 1."""
    tp = np.asarray(tp, dtype=float)
    size = np.asarray(batch, dtype=float) * np.asarray(tokens, dtype=float) * m.hidden * act_bytes(precision)
    one = 2 * (tp - 1) / tp * size / link_bytes_s + ALLREDUCE_LATENCY_S
    return np.where(tp > 1, 2 * m.layers * one, 0.0)


def predict(m: ModelShape, limits: Limits, batch: Any, n_in: Any, n_out: Any, tp: Any = 1,
            dtype: str = "bf16", eff: Efficiency | None = None) -> dict[str, np.ndarray]:
    """Predicted latencies and throughputs over a grid (arrays broadcast together).

    Args:
        m: model shape.
        limits: device limits (per device).
        batch, n_in, n_out, tp: sequences, tokens in/out per request, devices.
        dtype: engine dtype or precision class.
        eff: efficiency factors (default :class:`Efficiency`).

    Returns:
        ``{"ttft_s", "tpot_s", "e2e_s" (s), "output_tok_s", "total_tok_s" (tokens/s),
        "output_tok_s_per_device", "memory_bytes" (B per device: weights / tp + the KV
        cache of B x (n_in + n_out) tokens / tp)}`` arrays of the broadcast shape.

    Raises:
        RooflineError: the device lacks a figure.
    """
    eff = eff or Efficiency()
    precision = _precision(dtype)
    peak, _ = limits.peak(precision)
    bw = limits.bandwidth_bytes_s
    link = limits.link_bytes_s or DEFAULT_LINK_BYTES_S
    b, i, o, t = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (batch, n_in, n_out, tp)))
    ttft = (pass_time(prefill_ops(m, precision, dtype, b, i), peak, bw, t, eff.eff_compute, eff.eff_memory)
            + allreduce_time(m, precision, b, i, t, link) + eff.overhead_s)
    tpot = (pass_time(decode_ops(m, precision, dtype, b, i, o), peak, bw, t, eff.eff_compute, eff.eff_memory)
            + allreduce_time(m, precision, b, 1.0, t, link) + eff.overhead_s)
    e2e = ttft + np.maximum(o - 1, 0) * tpot
    out_tps = b * o / e2e
    # Memory each device holds: its share of the weights and of the full KV cache.
    mem = (m.param_counts()["total"] * weight_bytes(dtype, precision)
           + b * (i + o) * 2 * m.layers * m.kv_heads * m.head_dim * act_bytes(precision)) / t
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "output_tok_s": out_tps,
            "total_tok_s": b * (i + o) / e2e, "output_tok_s_per_device": out_tps / t, "memory_bytes": mem}


# -- calibration -------------------------------------------------------------------------

def measured_points(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The usable cells of ``Store.results()`` rows: ok, fixed lengths, a known
    effective batch and TTFT/TPOT means. Each point: ``cell_id, model, dtype, batch,
    n_in, n_out, tp, ttft_s, tpot_s, e2e_s, output_tok_s`` (s, tokens/s). Points from
    elsewhere (a published table) may leave any of the four measurements None."""
    pts = []
    for r in rows:
        s, m = r["spec"], r.get("metrics") or {}
        if r.get("status") != "ok" or s.get("dataset"):
            continue
        b = effective_batch(s, m)
        ttft, tpot = (m.get("ttft_s") or {}).get("mean"), (m.get("tpot_s") or {}).get("mean")
        if b is None or not ttft or not tpot:
            continue
        pts.append({"cell_id": r["cell_id"], "model": s["model"], "dtype": s["dtype"], "batch": b,
                    "n_in": s["input_len"], "n_out": s["output_len"], "tp": s.get("tensor_parallel_size") or 1,
                    "ttft_s": ttft, "tpot_s": tpot, "e2e_s": (m.get("e2e_s") or {}).get("mean"),
                    "output_tok_s": m.get("output_tok_s")})
    return pts


def held_out(cell_id: str, fraction: float = 0.3) -> bool:
    """Deterministic split: True for about ``fraction`` of cell ids (by their hash)."""
    return int(hashlib.sha256(cell_id.encode()).hexdigest()[:8], 16) / 2**32 < fraction


#: The measurements a prediction is compared with.
METRICS = ("ttft_s", "tpot_s", "e2e_s", "output_tok_s")
#: The ones the fit minimises (throughput follows from them).
FIT_METRICS = ("ttft_s", "tpot_s", "e2e_s")


def _column(points: list[dict[str, Any]], k: str) -> np.ndarray:
    return np.array([np.nan if p.get(k) is None else p[k] for p in points], dtype=float)


def _predict_points(pts: list[dict[str, Any]], limits: Limits, eff: Efficiency,
                    shapes: dict[str, ModelShape]) -> dict[str, np.ndarray]:
    keys = METRICS
    out = {k: np.empty(len(pts)) for k in keys}
    groups: dict[tuple[str, str], list[int]] = {}
    for j, p in enumerate(pts):
        groups.setdefault((p["model"], p["dtype"]), []).append(j)
    for (model, dtype), idx in groups.items():
        arr = {k: np.array([pts[j][k] for j in idx], dtype=float) for k in ("batch", "n_in", "n_out", "tp")}
        pr = predict(shapes[model], limits, arr["batch"], arr["n_in"], arr["n_out"], arr["tp"], dtype, eff)
        for k in keys:
            out[k][idx] = pr[k]
    return out


def geomean_error(pred: np.ndarray, meas: np.ndarray) -> float:
    """Geometric-mean relative error: ``exp(mean |ln(pred / meas)|) - 1`` (0.2 = 20 %)."""
    pred, meas = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    ok = (pred > 0) & (meas > 0) & np.isfinite(pred) & np.isfinite(meas)
    if not ok.any():
        return float("nan")
    return float(np.exp(np.mean(np.abs(np.log(pred[ok] / meas[ok])))) - 1)


@dataclass
class Calibration:
    """The result of :func:`calibrate`.

    Attributes:
        device_id: the device the factors belong to.
        efficiency: the fitted factors.
        n_train, n_test: cells fitted on / held out.
        error_test: geometric-mean error on held-out cells per metric (:data:`METRICS`),
            a fraction (0.2 = 20 %); NaN where no held-out cell has that measurement.
        error_train: the same on the fitted cells.
        error_default: held-out error of the unfitted defaults, for comparison.
    """

    device_id: str
    efficiency: Efficiency
    n_train: int
    n_test: int
    error_test: dict[str, float]
    error_train: dict[str, float]
    error_default: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "efficiency": Efficiency(**d["efficiency"])})


def calibrate(pts: list[dict[str, Any]], limits: Limits, test_fraction: float = 0.3) -> Calibration:
    """Fit ``eff_compute``, ``eff_memory`` and ``overhead_s`` to measured cells.

    Args:
        pts: :func:`measured_points` of one device.
        limits: that device's limits.
        test_fraction: share of cells held out (chosen by :func:`held_out`; at least one).

    Raises:
        ConfigError: fewer than 4 usable cells, or a model that cannot be resolved.
    """
    from scipy.optimize import least_squares

    from infbench.models import resolve

    if len(pts) < 4:
        raise ConfigError(f"calibration needs at least 4 measured ok cells with fixed lengths; found {len(pts)}",
                          hint="run a sweep on this device first (e.g. `infbench run --preset quick`)")
    shapes = {p["model"]: resolve(p["model"]) for p in pts}
    test = [p for p in pts if held_out(p["cell_id"], test_fraction)]
    if not test:
        test = [pts[-1]]
    train = [p for p in pts if p not in test]
    meas = {k: _column(train, k) for k in FIT_METRICS}
    # overhead_s is fitted in units of the shortest measured pass, so all three
    # parameters are of order one for the solver.
    shortest = [np.nanmin(meas[k]) for k in ("tpot_s", "ttft_s") if np.isfinite(meas[k]).any()]
    scale = float(min(shortest)) if shortest else float(np.nanmin(meas["e2e_s"])) / 100

    def residuals(x: np.ndarray) -> np.ndarray:
        e = Efficiency(float(x[0]), float(x[1]), float(x[2]) * scale)
        pr = _predict_points(train, limits, e, shapes)
        parts = []
        for k in FIT_METRICS:
            ok = np.isfinite(meas[k])
            parts.append(np.log(pr[k][ok] / meas[k][ok]))
        return np.concatenate(parts)

    best = None
    for x0 in ([0.5, 0.5, 0.1], [0.1, 0.3, 0.5], [0.8, 0.9, 0.0]):
        fit = least_squares(residuals, x0, bounds=([1e-4, 1e-4, 0.0], [1.0, 1.0, 1e3]))
        if best is None or fit.cost < best.cost:
            best = fit
    eff = Efficiency(float(best.x[0]), float(best.x[1]), float(best.x[2]) * scale,
                     source=f"fitted on {len(train)} cells of {limits.id}")

    def errors(points: list[dict[str, Any]], e: Efficiency) -> dict[str, float]:
        pr = _predict_points(points, limits, e, shapes)
        return {k: geomean_error(pr[k], _column(points, k)) for k in METRICS}

    return Calibration(device_id=limits.id, efficiency=eff, n_train=len(train), n_test=len(test),
                       error_test=errors(test, eff), error_train=errors(train, eff),
                       error_default=errors(test, Efficiency()))


def calibration_path(home: Path, device_id: str) -> Path:
    """Where a device's fitted factors are kept: ``$INFBENCH_HOME/calibration/<id>.json``."""
    return home / "calibration" / f"{device_id}.json"


def save_calibration(home: Path, cal: Calibration) -> Path:
    """Write ``cal`` to :func:`calibration_path`; returns the path."""
    p = calibration_path(home, cal.device_id)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(cal.to_dict(), indent=2))
    return p


def load_calibration(home: Path, device_id: str) -> Calibration | None:
    """The saved factors of ``device_id``, or None (unreadable files count as none)."""
    p = calibration_path(home, device_id)
    try:
        return Calibration.from_dict(json.loads(p.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def finite(x: float | None) -> float | None:
    """``x`` if it is a finite number, else None (for JSON output)."""
    return x if x is not None and math.isfinite(x) else None


def limits_for_id(pm: Any, ident: str) -> Limits:
    """The :class:`Limits` of a described device id (``h100-sxm``; ``infbench devices``),
    or of this host's CPU for ``cpu``.

    Raises:
        ConfigError: an unknown id, or a description without bandwidth or peak rate.
    """
    from infbench.analysis.roofline import RooflineError
    from infbench.devices import catalog, find_spec

    try:
        if ident.lower() == "cpu":
            from infbench.analysis.floor import device_roofline_limits
            from infbench.platforms.cpu import cpu_device

            lim, why = device_roofline_limits(pm, cpu_device())
            if lim is None:
                raise ConfigError(f"no limits for this CPU: {why}")
            return lim
        return Limits.from_info(find_spec(catalog(pm), ident).per_device())
    except RooflineError as exc:
        raise ConfigError(f"cannot predict on {ident}: {exc}", hint="see `infbench devices --json`") from exc


def rows_of_device(pm: Any, rows: list[dict[str, Any]], ident: str) -> list[dict[str, Any]]:
    """The stored rows measured on the described device ``ident`` (``cpu``: any CPU),
    matched through the catalog as the roofline matches them."""
    from infbench.devices import catalog, match_device
    from infbench.schema import DeviceInfo

    specs = catalog(pm)
    keep = []
    for r in rows:
        d = DeviceInfo(**r["device"])
        if ident.lower() == "cpu":
            if d.vendor == "cpu":
                keep.append(r)
        else:
            s = match_device(specs, d)
            if s is not None and s.id.lower() == ident.lower():
                keep.append(r)
    return keep


def predict_grid(models: list[ModelShape], limits: dict[str, Limits], batch: list[int], n_in: list[int],
                 n_out: list[int], tp: list[int], dtype: str,
                 efficiency: dict[str, Efficiency]) -> list[dict[str, Any]]:
    """Predictions for every (device, model, batch, input, output, tp) of a grid, one
    flat dict each (the rows of ``infbench predict``).

    Args:
        models: resolved model shapes.
        limits: device id -> its limits.
        batch, n_in, n_out, tp: the grid's axes (tokens; tp in devices).
        dtype: precision class or engine dtype.
        efficiency: device id -> the efficiency factors to use.

    Returns:
        Dicts with ``model``, ``device``, ``dtype``, ``batch``, ``input_len``, ``output_len``,
        ``tp``, every key of :func:`predict` (s, tokens/s, B) as finite floats or None,
        ``fits_memory`` (None when the device's memory is unknown) and ``efficiency``.

    Raises:
        ConfigError: a model that cannot be predicted on a device (e.g. no shape).
    """
    from infbench.analysis.roofline import RooflineError

    gb, gi, go, gt = np.meshgrid(*(np.asarray(v, dtype=float) for v in (batch, n_in, n_out, tp)), indexing="ij")
    rows: list[dict[str, Any]] = []
    for d, lim in limits.items():
        eff = efficiency[d]
        for m in models:
            try:
                pr = predict(m, lim, gb, gi, go, gt, dtype, eff)
            except RooflineError as exc:
                raise ConfigError(f"cannot predict {m.name} on {d}: {exc}") from exc
            for idx in np.ndindex(gb.shape):
                rows.append({
                    "model": m.name, "device": d, "dtype": dtype, "batch": int(gb[idx]), "input_len": int(gi[idx]),
                    "output_len": int(go[idx]), "tp": int(gt[idx]),
                    **{k: finite(float(v[idx])) for k, v in pr.items()},
                    "fits_memory": bool(pr["memory_bytes"][idx] <= lim.memory_bytes) if lim.memory_bytes else None,
                    "efficiency": eff.__dict__})
    return rows
