"""Engine profiles: one hierarchical fit of the prediction's parameters over every device an
engine was measured on, so that a device with no cells is predicted from its datasheet and
a profile learned elsewhere (step "analysis" of detect -> plan -> run -> store -> report).

The analytical model (:mod:`infbench.analysis.predict`) has a handful of free parameters
(:data:`PARAMS`): kernel efficiencies against the roofline and scheduler overheads. They
belong to the engine's software far more than to the device, which enters through its
datasheet (peak FLOP/s, bandwidth, memory, links). :func:`fit_fleet` fits, for the cells
of model ``m`` on device ``d`` under engine ``e``,

    u = mu(e) + s(e, stack of d) + t(d) + w(e, m)

in unconstrained coordinates ``u`` (:func:`to_value`: every efficiency is a logistic
function of ``u``, bounded to (0, 1); every overhead a logistic function bounded to its
physical range in :data:`PARAMS`), where

* ``mu`` is the **engine profile**,
* ``s`` a term per vendor software stack (CUDA, ROCm, oneAPI, SynapseAI; :data:`STACKS`):
  the engine's kernels are built per stack,
* ``t`` the **device terms** (one per device the engine ran on),
* ``w`` a **model term** on the kernel efficiencies (:data:`MODEL_PARAMS`): how well the
  engine's kernels suit a model's shapes, shared by every device.

``s``, ``t`` and ``w`` carry Gaussian priors centred on zero (:class:`Priors`): a device
with few cells keeps the profile's values, one with hundreds moves to its own. The fit is
the maximum a posteriori of that model: robust least squares on ``log(predicted /
measured)`` of every measurement (soft-L1, as :func:`~infbench.analysis.calibration.calibrate`)
plus the prior terms, solved by Levenberg-Marquardt with a Jacobian assembled from each
(device, model)'s own finite differences, so one iteration costs ``len(PARAMS) + 1``
predictions of every cell whatever the number of devices.

Uncertainty: the coordinates' covariance is ``s^2 (J^T J)^-1`` at the optimum
(Gauss-Newton; ``J`` includes the prior rows, ``s^2`` is the data residuals' variance per
degree of freedom); each value is reported with the 90 % range of its ``u`` (+-1.645
standard deviations) mapped through its bounds (:meth:`FleetFit.parameters`). ``dof``, the
trace of the hat matrix of the data rows, is the number of parameters the cells actually
paid for (shrunk terms count less than one each).

A device the fit has never seen gets ``mu + s(stack)`` (``mu`` alone for a stack the
engine has no cells on) and the engine's KV reserve as a share of its memory; a model it
has never seen gets no model term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from infbench.analysis.predict import (
    FIT_METRICS,
    KV_RESERVES_GB,
    Efficiency,
    _capacity_binds,
    _column,
    below_floor,
    device_catalog_id,
    engine_family,
    limits_for_id,
    measured_points,
    predict_points,
)
from infbench.analysis.roofline import Limits
from infbench.data.errors import ConfigError
from infbench.data.models import ModelShape, resolve
from infbench.detect.devices import catalog

if TYPE_CHECKING:
    from infbench.contract.manager import PluginManager
    from infbench.data.stored import StoredCell



@dataclass(frozen=True)
class Param:
    """One fitted parameter of :class:`~infbench.analysis.predict.Efficiency`.

    Attributes:
        name: the :class:`Efficiency` field.
        lo, hi: its physical range (the value is ``lo + (hi - lo) sigmoid(u)``), in the
            field's unit (fraction, s).
        prior: the generic prior's value (used when no engine prior is given).
        device_sd: prior standard deviation of a device term in ``u``.
        why: what it is and where the range comes from.
    """

    name: str
    lo: float
    hi: float
    prior: float
    device_sd: float
    why: str


#: The fitted parameters, their physical ranges and generic priors. Efficiencies are
#: fractions of the roofline in (0, 1). Overheads have physical ceilings: a forward step's
#: fixed cost (kernel launches, Python scheduling, sampling) is at most tens of ms even in
#: an interpreted engine; one sequence's bookkeeping per step is well under a ms; a request's
#: admission (tokenisation, block allocation) a few ms; a batch's start-up at most a
#: couple of seconds; one collective's start-up at most half a millisecond (a PCIe
#: round trip through host memory is ~10 us).
PARAMS: tuple[Param, ...] = (
    Param("eff_compute", 0.0, 1.0, 0.55, 1.0, "fraction of peak FLOP/s (GenZ: 0.4 on A100, 0.55-0.75 on H100)"),
    Param("eff_memory", 0.0, 1.0, 0.75, 1.0, "fraction of peak bandwidth (GenZ's notebooks: 0.75)"),
    Param("eff_attention", 0.0, 1.0, 0.6, 0.7, "fraction of peak bandwidth reached by attention's KV traffic"),
    Param("kv_reread", 0.0, 1.0, 0.3, 0.7, "share of per-query-head KV re-reads (0 = once, 1 = per head)"),
    Param("overhead_s", 0.0, 0.05, 2e-3, 1.0, "fixed time per forward step, s (0-50 ms)"),
    Param("overhead_per_device_s", 0.0, 0.01, 2e-4, 1.0, "time per forward step per device beyond the first, s "
          "(0-10 ms)"),
    Param("overhead_per_seq_s", 0.0, 2e-3, 5e-5, 0.7, "time per step per running sequence, s (0-2 ms)"),
    Param("prefill_overhead_s", 0.0, 0.05, 1e-3, 0.7, "time per request at admission, s (0-50 ms)"),
    Param("batch_overhead_s", 0.0, 2.0, 0.05, 1.0, "time per batch (a generate call's start-up), s (0-2 s)"),
    Param("collective_latency_s", 0.0, 5e-4, 1e-5, 1.0, "start-up latency of one collective or p2p message, s "
          "(0-0.5 ms)"),
)
PARAM_NAMES = tuple(p.name for p in PARAMS)
K = len(PARAMS)
#: The parameters a model term moves: the kernel efficiencies (a model's shapes suit an
#: engine's GEMM, attention and MoE kernels better or worse, on every device).
MODEL_PARAMS = ("eff_compute", "eff_memory", "eff_attention")
_LO = np.array([p.lo for p in PARAMS])
_HI = np.array([p.hi for p in PARAMS])
_U_MAX = 20.0

#: Vendor (device catalog ``vendor``) -> software stack whose engine builds share kernels.
STACKS = {"nvidia": "cuda", "amd": "rocm", "intel": "oneapi", "habana": "synapseai", "sambanova": "sambaflow",
          "cerebras": "cerebras", "cpu": "cpu"}


def stack_of(vendor: str | None) -> str:
    """The software stack of a catalog vendor (``nvidia`` -> ``cuda``); the vendor itself
    when unknown, ``unknown`` for None."""
    v = (vendor or "unknown").lower()
    return STACKS.get(v, v)


def to_u(values: Any) -> np.ndarray:
    """Physical values (in :data:`PARAMS` order) -> unconstrained coordinates (the logit of
    the position in the range), clipped to [-20, 20]."""
    x = np.clip((np.asarray(values, dtype=float) - _LO) / (_HI - _LO), 1e-9, 1 - 1e-9)
    return np.clip(np.log(x / (1 - x)), -_U_MAX, _U_MAX)


def to_value(u: Any) -> np.ndarray:
    """Unconstrained coordinates -> physical values, each strictly inside its range."""
    return _LO + (_HI - _LO) / (1.0 + np.exp(-np.clip(np.asarray(u, dtype=float), -50, 50)))


def efficiency_of(u: Any, reserve_bytes: float | None, source: str) -> Efficiency:
    """The :class:`Efficiency` of a coordinate vector (the KV reserve is not in ``u``)."""
    v = to_value(u)
    values: dict[str, Any] = {n: float(x) for n, x in zip(PARAM_NAMES, v, strict=True)}
    return Efficiency(**values, kv_reserve_bytes=reserve_bytes, source=source)


def values_of(eff: Efficiency) -> np.ndarray:
    """The :data:`PARAMS` values of an :class:`Efficiency` (``eff_attention`` None: ``eff_memory``)."""
    d = dict(eff.__dict__)
    if d.get("eff_attention") is None:
        d["eff_attention"] = d["eff_memory"]
    return np.array([float(d[n]) for n in PARAM_NAMES])


@dataclass(frozen=True)
class Priors:
    """Hyper-parameters of the hierarchical fit (prior standard deviations in ``u``).

    Attributes:
        profile_sd: of the engine profile around its prior (weak: the cells decide).
        stack_sd: of a stack term around zero (times each :attr:`Param.device_sd`).
        device_scale: multiplies every :attr:`Param.device_sd` (the device terms).
        model_sd: of a model term around zero.
        device_model_sd: of a (device, model) term around zero (0: none fitted).
        noise: the log-error scale the prior terms are weighed against (a residual of
            ``noise`` costs as much as a term one prior sd away from its mean).
        f_scale: soft-L1 scale of the data residuals (log error beyond which a
            measurement counts linearly, not quadratically).
        robust_devices: the device terms' priors are soft-L1 too (Laplace-like tails
            beyond one sd): one device far from the others takes a large term of its
            own instead of pulling its stack's term (and every device of that stack)
            towards it.
        count_sd: of a device-count term around zero (log units, soft-L1 like the device
            terms; 0: none fitted): a campaign's own factor on every time at a device
            count beyond its smallest (:attr:`FleetFit.counts`).
    """

    profile_sd: float = 3.0
    stack_sd: float = 1.5
    device_scale: float = 0.5
    model_sd: float = 0.5
    device_model_sd: float = 0.3
    noise: float = 0.1
    f_scale: float = 0.05
    robust_devices: bool = True
    count_sd: float = 1.0

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass
class Group:
    """The cells of one (device, engine) for the fit.

    Attributes:
        key: a label unique in the fit (published device name, else catalog id).
        device_id: catalog id (its datasheet is ``limits``).
        engine: engine family (:func:`~infbench.analysis.predict.engine_family`).
        stack: software stack (:func:`stack_of`).
        limits: the device's limits.
        points: :func:`~infbench.analysis.predict.measured_points` of the group.
        shapes: model name -> shape.
        reserve_bytes: KV-cache reserve per device (B); None until the fit finds that the
            capacity binds somewhere.
    """

    key: str
    device_id: str
    engine: str
    stack: str
    limits: Limits
    points: list[dict[str, Any]]
    shapes: dict[str, ModelShape]
    reserve_bytes: float | None = None
    models: list[str] = field(default_factory=list, repr=False)
    _sub: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _meas: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.engine = engine_family(self.engine)
        self.models = sorted({p["model"] for p in self.points})
        self._sub = {m: [p for p in self.points if p["model"] == m] for m in self.models}
        self._meas = {m: {k: _column(sub, k) for k in FIT_METRICS} for m, sub in self._sub.items()}

    def residuals(self, model: str, eff: Efficiency) -> np.ndarray:
        """``log(predicted / measured)`` of every measurement of ``model``'s cells
        (metric-major), a non-finite prediction counting as 10."""
        pr = predict_points(self._sub[model], self.limits, eff, self.shapes)
        parts = []
        for k in FIT_METRICS:
            m = self._meas[model][k]
            ok = np.isfinite(m) & (m > 0)
            if ok.any():
                parts.append(np.log(pr[k][ok] / m[ok]))
        r = np.concatenate(parts) if parts else np.zeros(0)
        return np.where(np.isfinite(r), r, 10.0)

    def row_devices(self, model: str) -> np.ndarray:
        """The device count (``tp``) of the cell behind each row of :meth:`residuals`."""
        sub = self._sub[model]
        tp = np.array([float(p["tp"]) for p in sub])
        parts = [tp[np.isfinite(self._meas[model][k]) & (self._meas[model][k] > 0)] for k in FIT_METRICS]
        return np.concatenate(parts) if parts else np.zeros(0)

    def counts(self) -> list[int]:
        """The device counts of the group's cells above its smallest (each gets a
        device-count term in :func:`fit_fleet`)."""
        ns = sorted({int(p["tp"]) for p in self.points})
        return ns[1:]

    def n_obs(self, model: str) -> int:
        """Measurements of ``model`` in the group (a cell may have several)."""
        return int(sum((np.isfinite(m) & (m > 0)).sum() for m in self._meas[model].values()))

    def info(self) -> dict[str, Any]:
        """What a fit keeps of the group: ``device_id, engine, stack, cells, reserve_bytes,
        memory_bytes, models, max_len, min_len, max_batch``."""
        lens = [v for p in self.points for v in (p["n_in"], p["n_out"])]
        return {"device_id": self.device_id, "engine": self.engine, "stack": self.stack, "cells": len(self.points),
                "reserve_bytes": self.reserve_bytes, "memory_bytes": self.limits.memory_bytes,
                "models": list(self.models), "max_len": int(max(lens)), "min_len": int(min(lens)),
                "max_batch": int(max(p["batch"] for p in self.points))}


def _robust(r: np.ndarray, f: float) -> tuple[np.ndarray, np.ndarray]:
    """Soft-L1 residuals ``phi(r)`` with ``phi^2 = 2 f^2 (sqrt(1 + (r/f)^2) - 1)`` (so
    ``sum phi^2 / 2`` is scipy's soft-L1 cost) and ``dphi/dr``."""
    z = np.sqrt(1.0 + (r / f) ** 2)
    phi = np.sign(r) * np.sqrt(2.0 * f * f * (z - 1.0))
    safe = np.where(phi == 0, 1.0, phi)
    d = np.where(np.abs(r) > 1e-12, r / (safe * z), 1.0)
    return phi, d


def _block_params(kind: str) -> np.ndarray:
    """Indices into :data:`PARAMS` a block of ``kind`` moves."""
    if kind in ("model", "device_model"):
        return np.array([PARAM_NAMES.index(n) for n in MODEL_PARAMS])
    return np.arange(K)


@dataclass
class FleetFit:
    """The result of :func:`fit_fleet`: engine profiles and every term, with uncertainty.

    Attributes:
        engines: engine families fitted.
        terms: ``("mu", engine) | ("stack", engine, stack) | ("device", group key) |
            ("model", engine, model)`` -> the term's coordinates (``u``; a model term only
            on :data:`MODEL_PARAMS`).
        sd: the same keys -> the standard deviation of each coordinate of the term.
        cov_blocks: ``(key_a, key_b)`` -> covariance of two terms' coordinates, for the
            combinations a prediction sums (profile with stack, device and model).
        groups: group key -> :meth:`Group.info`.
        reserve_fraction: engine -> KV reserve as a share of device memory (median over
            its devices where the capacity binds; 0 where none does).
        cost, n_obs, dof, n_params: final cost, measurements, effective parameters (trace
            of the hat matrix of the data rows), coordinates fitted.
        priors: the hyper-parameters used.
        sigma: the data residuals' standard deviation per degree of freedom (log units).
        level_var: ``("mu", engine) | ("stack", engine, stack) | ("device", key)`` -> the
            variance of the summed coordinates at that level (what a stored profile keeps
            instead of ``cov_blocks``; used when those are absent).
        counts: ``(group key, devices) -> log factor``: the **device-count terms**, a
            campaign's own factor on every time at that many devices per model instance
            beyond its smallest count (llama.cpp on 2 and 4 Intel PVC GPUs decodes 5.5
            and 7.6 times slower than on one, which no datasheet figure or bounded
            overhead explains); applied to that group's predictions only
            (:attr:`~infbench.analysis.predict.Efficiency.device_count_log`), never to
            another device.
        counts_sd: their standard deviations (log units; NaN without a covariance).
    """

    engines: list[str]
    terms: dict[tuple, np.ndarray]
    sd: dict[tuple, np.ndarray]
    cov_blocks: dict[tuple, np.ndarray]
    groups: dict[str, dict[str, Any]]
    reserve_fraction: dict[str, float]
    cost: float
    n_obs: int
    dof: float
    n_params: int
    priors: Priors
    sigma: float = float("nan")
    level_var: dict[tuple, np.ndarray] = field(default_factory=dict)
    counts: dict[tuple[str, int], float] = field(default_factory=dict)
    counts_sd: dict[tuple[str, int], float] = field(default_factory=dict)

    def term_keys(self, engine: str, stack: str | None, key: str | None = None,
                  model: str | None = None) -> tuple[list[tuple], str]:
        """The terms a prediction for ``engine`` on a device of ``stack`` (fitted as group
        ``key``, if it was) for ``model`` sums, and the level they reach: ``device``
        (the device's own terms), ``stack`` (the profile and the stack term) or
        ``profile``.

        Raises:
            ConfigError: ``engine`` is not in the fit.
        """
        e = engine_family(engine)
        if ("mu", e) not in self.terms:
            raise ConfigError(f"the engine profile has no engine {e!r}",
                              hint=f"fitted: {', '.join(self.engines) or 'none'}")
        keys: list[tuple] = [("mu", e)]
        level = "profile"
        if key is not None and ("device", key) in self.terms and self.groups[key]["engine"] == e:
            stack = self.groups[key]["stack"]
        if stack and ("stack", e, stack) in self.terms:
            keys.append(("stack", e, stack))
            level = "stack"
        if key is not None and ("device", key) in self.terms and self.groups[key]["engine"] == e:
            keys.append(("device", key))
            level = "device"
        if model and ("model", e, model) in self.terms:
            keys.append(("model", e, model))
        if model and level == "device" and ("device_model", key, model) in self.terms:
            keys.append(("device_model", key, model))
        return keys, level

    def u_for(self, engine: str, stack: str | None, key: str | None = None,
              model: str | None = None) -> tuple[np.ndarray, np.ndarray, str]:
        """Coordinates, their standard deviations and the level (:meth:`term_keys`)."""
        keys, level = self.term_keys(engine, stack, key, model)
        u = np.zeros(K)
        for k in keys:
            u[_block_params(k[0])] += self.terms[k]
        if self.cov_blocks or not self.level_var:
            var = np.diag(self.u_cov(engine, stack, key, model))
        else:
            # A stored profile: the variance of its level (a model's own terms count as exact).
            last = [k for k in keys if k[0] in ("mu", "stack", "device")][-1]
            var = self.level_var.get(last, np.zeros(K))
        return u, np.sqrt(np.clip(var, 0, None)), level

    def u_cov(self, engine: str, stack: str | None, key: str | None = None, model: str | None = None) -> np.ndarray:
        """Covariance (``K x K``) of the coordinates :meth:`u_for` sums (zero where the
        fit kept no covariance)."""
        keys, _ = self.term_keys(engine, stack, key, model)
        cov = np.zeros((K, K))
        for a in keys:
            for b in keys:
                c = self.cov_blocks.get((a, b))
                if c is not None:
                    cov[np.ix_(_block_params(a[0]), _block_params(b[0]))] += c
        return cov

    def efficiency(self, engine: str, stack: str | None, limits: Limits, key: str | None = None,
                   model: str | None = None) -> tuple[Efficiency, str]:
        """The :class:`Efficiency` for ``engine`` on ``limits`` (a device of ``stack``;
        group ``key`` if it was fitted) for ``model``, and the level it came from."""
        u, _, level = self.u_for(engine, stack, key, model)
        e = engine_family(engine)
        reserve = self.groups[key]["reserve_bytes"] if level == "device" and key is not None else None
        if reserve is None:
            # A device whose cells never filled its KV cache (or a new one): the engine's
            # reserve as a share of memory, from the devices where the capacity binds.
            frac = self.reserve_fraction.get(e, 0.0)
            reserve = frac * limits.memory_bytes if (frac and limits.memory_bytes) else None
        src = {"device": f"engine profile {e} with the device terms of {key}",
               "stack": f"engine profile {e} ({stack} stack) and the datasheet of {limits.id}",
               "profile": f"engine profile {e} and the datasheet of {limits.id}"}[level]
        eff = efficiency_of(u, reserve, src)
        if level == "device" and key is not None:
            mine = {str(n): v for (k, n), v in self.counts.items() if k == key}
            eff.device_count_log = mine or None
        return eff, level

    def count_report(self, engine: str) -> dict[str, dict[str, dict[str, float]]]:
        """The device-count terms of ``engine``'s groups: ``{group key: {devices: {"log",
        "factor" (exp of log: the multiplier on every time), "sd"}}}``, groups without
        one left out."""
        e = engine_family(engine)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (k, n), v in sorted(self.counts.items()):
            if self.groups.get(k, {}).get("engine") == e:
                out.setdefault(k, {})[str(n)] = {"log": float(v), "factor": float(np.exp(v)),
                                                 "sd": float(self.counts_sd.get((k, n), float("nan")))}
        return out

    def parameters(self, engine: str, stack: str | None = None, key: str | None = None,
                   model: str | None = None) -> dict[str, dict[str, Any]]:
        """Fitted values with their 90 % range: ``{name: {"value", "lo", "hi", "bound"}}``
        (``bound``: the physical range; ``lo``/``hi`` None without a covariance)."""
        u, sd, _ = self.u_for(engine, stack, key, model)
        has = bool(self.cov_blocks) or bool(self.level_var)
        v, lo, hi = to_value(u), to_value(u - 1.645 * sd), to_value(u + 1.645 * sd)
        return {p.name: {"value": float(v[i]), "lo": float(lo[i]) if has else None,
                         "hi": float(hi[i]) if has else None, "bound": [p.lo, p.hi]}
                for i, p in enumerate(PARAMS)}

    def restrict(self, engine: str) -> FleetFit:
        """The part of the fit that belongs to one engine (what its stored profile keeps)."""
        e = engine_family(engine)

        def mine(k: tuple) -> bool:
            if k[0] in ("device", "device_model"):
                return self.groups[k[1]]["engine"] == e
            return k[1] == e

        return FleetFit(engines=[e], terms={k: v for k, v in self.terms.items() if mine(k)},
                        sd={k: v for k, v in self.sd.items() if mine(k)},
                        cov_blocks={k: v for k, v in self.cov_blocks.items() if mine(k[0]) and mine(k[1])},
                        groups={k: v for k, v in self.groups.items() if v["engine"] == e},
                        reserve_fraction={e: self.reserve_fraction.get(e, 0.0)}, cost=self.cost, n_obs=self.n_obs,
                        dof=self.dof, n_params=self.n_params, priors=self.priors, sigma=self.sigma,
                        level_var={k: v for k, v in self.level_var.items() if mine(k)},
                        counts={k: v for k, v in self.counts.items() if self.groups[k[0]]["engine"] == e},
                        counts_sd={k: v for k, v in self.counts_sd.items() if self.groups[k[0]]["engine"] == e})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (:meth:`from_dict` reads it back), numbers to 7 significant
        digits. Of the covariance only each level's variances are kept (``level_var``: what
        :meth:`parameters` reports for the profile, a stack or a device; a model's own terms
        then count as exact)."""
        def enc(k: tuple) -> str:
            return "|".join(k)

        def num(v: np.ndarray) -> list:
            return [float(f"{x:.7g}") for x in np.ravel(v)] if v.ndim == 1 else [num(r) for r in v]

        levels = dict(self.level_var)
        if self.cov_blocks:
            for k in self.terms:
                if k[0] in ("mu", "stack", "device"):
                    e = k[1] if k[0] != "device" else self.groups[k[1]]["engine"]
                    stack = k[2] if k[0] == "stack" else (self.groups[k[1]]["stack"] if k[0] == "device" else None)
                    levels[k] = np.diag(self.u_cov(e, stack, k[1] if k[0] == "device" else None))
        return {"engines": self.engines, "params": list(PARAM_NAMES), "model_params": list(MODEL_PARAMS),
                "terms": {enc(k): num(v) for k, v in self.terms.items()},
                "sd": {enc(k): num(v) for k, v in self.sd.items()},
                "level_var": {enc(k): num(v) for k, v in levels.items()},
                "counts": {f"{k}|{n}": float(f"{v:.7g}") for (k, n), v in self.counts.items()},
                "counts_sd": {f"{k}|{n}": float(f"{v:.7g}") for (k, n), v in self.counts_sd.items()},
                "groups": self.groups, "reserve_fraction": self.reserve_fraction, "cost": self.cost,
                "n_obs": self.n_obs, "dof": self.dof, "n_params": self.n_params, "priors": self.priors.to_dict(),
                "sigma": self.sigma}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FleetFit:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a profile written with another parameter list.
        """
        if tuple(d.get("params") or ()) != PARAM_NAMES or tuple(d.get("model_params") or ()) != MODEL_PARAMS:
            raise ConfigError("the stored engine profile was fitted with other parameters",
                              hint="fit it again: infbench predict --calibrate --engine ENGINE")

        def dec(s: str) -> tuple:
            return tuple(s.split("|"))

        cov = {}
        for k, v in (d.get("cov_blocks") or {}).items():
            a, b = k.split("#")
            cov[(dec(a), dec(b))] = np.array(v, dtype=float)
        levels = {dec(k): np.array(v, dtype=float) for k, v in (d.get("level_var") or {}).items()}

        def count_key(s: str) -> tuple[str, int]:
            k, _, n = s.rpartition("|")
            return k, int(n)

        counts = {count_key(k): float(v) for k, v in (d.get("counts") or {}).items()}
        counts_sd = {count_key(k): float(v) for k, v in (d.get("counts_sd") or {}).items()}
        return cls(engines=list(d["engines"]), terms={dec(k): np.array(v, dtype=float) for k, v in d["terms"].items()},
                   sd={dec(k): np.array(v, dtype=float) for k, v in (d.get("sd") or {}).items()}, cov_blocks=cov,
                   groups=d["groups"], reserve_fraction=d.get("reserve_fraction") or {}, cost=d.get("cost", 0.0),
                   n_obs=d.get("n_obs", 0), dof=d.get("dof", float("nan")), n_params=d.get("n_params", 0),
                   priors=Priors(**(d.get("priors") or {})), sigma=d.get("sigma", float("nan")), level_var=levels,
                   counts=counts, counts_sd=counts_sd)


def default_prior_u() -> np.ndarray:
    """The generic prior (:attr:`Param.prior`) in coordinates."""
    return to_u(np.array([p.prior for p in PARAMS]))


def fit_fleet(groups: list[Group], priors: Priors | None = None, prior_u: dict[str, np.ndarray] | None = None,
              fixed: dict[tuple, np.ndarray] | None = None, max_iter: int = 40,
              covariance: bool = True) -> FleetFit:
    """Fit engine profiles, stack, device and model terms to the groups' cells (module doc).

    Args:
        groups: one per (device, engine); groups without cells are ignored.
        priors: hyper-parameters (default :class:`Priors`).
        prior_u: engine -> prior profile coordinates (default :func:`default_prior_u`).
        fixed: terms held at given coordinates instead of fitted (e.g. ``("mu", engine)``
            and its stack and model terms when one device is calibrated against a stored
            profile); their uncertainty is taken as zero.
        max_iter: most Levenberg-Marquardt iterations.
        covariance: compute the coordinates' covariance (one more Jacobian).

    Returns:
        A :class:`FleetFit`.

    Raises:
        ConfigError: no group with cells.
    """
    pri = priors or Priors()
    groups = [g for g in groups if g.points]
    if not groups:
        raise ConfigError("no measured cells to fit an engine profile on",
                          hint="run a sweep, or import published results (`infbench import --format lib-csv`)")
    engines = sorted({g.engine for g in groups})
    fixed = dict(fixed or {})
    prior_u = {e: np.asarray((prior_u or {}).get(e, default_prior_u()), dtype=float) for e in engines}
    dev_sd = np.array([p.device_sd for p in PARAMS])

    # The blocks of coordinates: (key, first column, parameter indices, prior mean, prior sd).
    wanted: list[tuple[tuple, np.ndarray, np.ndarray]] = []
    for e in engines:
        wanted.append((("mu", e), prior_u[e], np.full(K, pri.profile_sd)))
    for e, s in sorted({(g.engine, g.stack) for g in groups}):
        wanted.append((("stack", e, s), np.zeros(K), pri.stack_sd * dev_sd))
    for g in groups:
        wanted.append((("device", g.key), np.zeros(K), pri.device_scale * dev_sd))
    midx = _block_params("model")
    for e, m in sorted({(g.engine, m) for g in groups for m in g.models}):
        wanted.append((("model", e, m), np.zeros(len(midx)), np.full(len(midx), pri.model_sd)))
    if pri.device_model_sd > 0:
        for g in groups:
            for m in g.models:
                wanted.append((("device_model", g.key, m), np.zeros(len(midx)),
                               np.full(len(midx), pri.device_model_sd)))
    blocks: dict[tuple, tuple[int, np.ndarray]] = {}
    n = 0
    means, sds = [], []
    for key, mean, prior_sd in wanted:
        if key in fixed:
            continue
        idx = _block_params(key[0])
        blocks[key] = (n, idx)
        n += len(idx)
        means.append(mean)
        sds.append(prior_sd)
    # The device-count terms: one coordinate per (group, device count above its smallest).
    count_idx: dict[tuple[str, int], int] = {}
    if pri.count_sd > 0:
        for g in groups:
            for c in g.counts():
                count_idx[(g.key, c)] = n
                n += 1
                means.append(np.zeros(1))
                sds.append(np.full(1, pri.count_sd))
    prior_mean = np.concatenate(means) if means else np.zeros(0)
    w_prior = pri.noise / np.concatenate(sds) if sds else np.zeros(0)
    # Model terms sum to zero over an engine's models, and a device's per-model terms over
    # its models: the profile and the device terms then describe the average model, which
    # is what a model the fit has never seen gets (a term of zero).
    constraints = []
    sums: dict[tuple, list[int]] = {}
    for key, (start, _idx) in blocks.items():
        if key[0] == "model":
            sums.setdefault(("model", key[1]), []).append(start)
        elif key[0] == "device_model":
            sums.setdefault(("device_model", key[1]), []).append(start)
    for starts in sums.values():
        if len(starts) < 2:
            continue
        for j in range(len(midx)):
            row = np.zeros(n)
            row[[st + j for st in starts]] = 1.0
            constraints.append(row)
    C = np.array(constraints) * (10 * pri.noise) if constraints else np.zeros((0, n))
    n_prior = n + len(C)
    robust_rows = np.zeros(n, dtype=bool)
    if pri.robust_devices:
        for key, (start, idx) in blocks.items():
            if key[0] == "device":
                robust_rows[start:start + len(idx)] = True
        for i in count_idx.values():
            robust_rows[i] = True

    cells = [(g, m) for g in groups for m in g.models]
    # Per (group, model): each residual row's device-count coordinate (-1: none).
    row_count = []
    for g, m in cells:
        devs = g.row_devices(m)
        row_count.append(np.array([count_idx.get((g.key, int(x)), -1) for x in devs], dtype=int))
    sizes = [g.n_obs(m) for g, m in cells]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    n_obs = int(offsets[-1])

    def keys_of(g: Group, m: str) -> list[tuple]:
        return [("mu", g.engine), ("stack", g.engine, g.stack), ("device", g.key), ("model", g.engine, m),
                ("device_model", g.key, m)]

    def u_of(z: np.ndarray, g: Group, m: str) -> np.ndarray:
        u = np.zeros(K)
        for k in keys_of(g, m):
            if k in fixed:
                u[_block_params(k[0])] += fixed[k]
            elif k in blocks:
                start, idx = blocks[k]
                u[idx] += z[start:start + len(idx)]
        return u

    for g in groups:
        if g.reserve_bytes is None and g.limits.memory_bytes and _capacity_binds(g.points, g.limits, g.shapes):
            g.reserve_bytes = 0.0

    def eff(g: Group, u: np.ndarray) -> Efficiency:
        return efficiency_of(u, g.reserve_bytes, "fit")

    h = 1e-4

    def evaluate(z: np.ndarray, with_jac: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Robust residuals (data rows, then prior rows) and, if asked, their Jacobian."""
        res = np.empty(n_obs + n_prior)
        J = np.zeros((n_obs + n_prior, n)) if with_jac else None
        for ci, (g, m) in enumerate(cells):
            u = u_of(z, g, m)
            r0 = g.residuals(m, eff(g, u))
            rc = row_count[ci]
            shift = np.where(rc >= 0, z[np.maximum(rc, 0)], 0.0) if len(rc) else 0.0
            phi, d = _robust(r0 + shift, pri.f_scale)
            a, b = offsets[ci], offsets[ci + 1]
            res[a:b] = phi
            if J is None:
                continue
            Jc = np.empty((len(r0), K))
            for k in range(K):
                uk = u.copy()
                uk[k] += h
                Jc[:, k] = (g.residuals(m, eff(g, uk)) - r0) / h
            Jc *= d[:, None]
            for key in keys_of(g, m):
                if key in blocks:
                    start, idx = blocks[key]
                    J[a:b, start:start + len(idx)] += Jc[:, idx]
            rows = np.nonzero(rc >= 0)[0]
            if len(rows):
                J[a + rows, rc[rows]] += d[rows]
        p = w_prior * (z - prior_mean)
        dp = np.ones(n)
        if robust_rows.any():
            p[robust_rows], dp[robust_rows] = _robust(p[robust_rows], pri.noise)
        res[n_obs:n_obs + n] = p
        res[n_obs + n:] = C @ z
        if J is not None:
            J[n_obs:n_obs + n, :] = np.diag(w_prior * dp)
            J[n_obs + n:, :] = C
        return res, J

    z, cost = _levenberg_marquardt(evaluate, prior_mean.copy(), max_iter)
    # The KV reserve per device: a discrete search where the capacity binds (waves are
    # steps, so no gradient), the other parameters held, then the fit again.
    changed = False
    for g in groups:
        if g.reserve_bytes is None:
            continue
        us = {m: u_of(z, g, m) for m in g.models}

        shifts = {}
        for ci, (gg, m) in enumerate(cells):
            if gg is g:
                rc = row_count[ci]
                shifts[m] = np.where(rc >= 0, z[np.maximum(rc, 0)], 0.0) if len(rc) else 0.0

        def cost_at(r: float, g: Group = g, us: dict = us, shifts: dict = shifts) -> float:
            return float(sum(np.sum(_robust(g.residuals(m, efficiency_of(us[m], r, "fit")) + shifts[m],
                                            pri.f_scale)[0] ** 2) for m in g.models))

        best = min(((cost_at(r * 1e9), r * 1e9) for r in KV_RESERVES_GB), key=lambda t: t[0])
        if best[1] != g.reserve_bytes:
            g.reserve_bytes, changed = best[1], True
    if changed:
        z, cost = _levenberg_marquardt(evaluate, z, max_iter)

    cov = None
    dof = float("nan")
    sigma = float("nan")
    if covariance and n:
        res, J = evaluate(z, True)
        assert J is not None
        inv = np.linalg.pinv(J.T @ J)
        Jd = J[:n_obs]
        dof = float(np.einsum("ij,jk,ik->", Jd, inv, Jd))
        s2 = float(np.sum(res[:n_obs] ** 2) / max(n_obs - dof, 1.0))
        sigma = float(np.sqrt(s2))
        cov = s2 * inv

    terms: dict[tuple, np.ndarray] = {k: np.asarray(v, dtype=float).copy() for k, v in fixed.items()}
    sd: dict[tuple, np.ndarray] = {k: np.zeros(len(v)) for k, v in fixed.items()}
    for k, (start, idx) in blocks.items():
        terms[k] = z[start:start + len(idx)].copy()
        sd[k] = np.sqrt(np.clip(np.diag(cov)[start:start + len(idx)], 0, None)) if cov is not None \
            else np.full(len(idx), np.nan)
    cov_blocks: dict[tuple, np.ndarray] = {}
    if cov is not None:
        # Keep the covariances a prediction needs: every pair of terms that one (device,
        # model) sums, and the pairs an unseen device or model sums (a subset of those).
        pairs: set[tuple[tuple, tuple]] = set()
        for g, m in cells:
            ks = [k for k in keys_of(g, m) if k in blocks]
            pairs.update((a, b) for a in ks for b in ks)
        for a, b in pairs:
            sa, ia = blocks[a]
            sb, ib = blocks[b]
            cov_blocks[(a, b)] = cov[sa:sa + len(ia), sb:sb + len(ib)].copy()
    counts = {k: float(z[i]) for k, i in count_idx.items()}
    counts_sd = {k: float(np.sqrt(max(cov[i, i], 0.0))) if cov is not None else float("nan")
                 for k, i in count_idx.items()}
    fracs: dict[str, list[float]] = {}
    for g in groups:
        if g.reserve_bytes is not None and g.limits.memory_bytes:
            fracs.setdefault(g.engine, []).append(g.reserve_bytes / g.limits.memory_bytes)
    return FleetFit(engines=engines, terms=terms, sd=sd, cov_blocks=cov_blocks,
                    groups={g.key: g.info() for g in groups},
                    reserve_fraction={e: float(np.median(fracs[e])) if e in fracs else 0.0 for e in engines},
                    cost=cost, n_obs=n_obs, dof=dof, n_params=n, priors=pri, sigma=sigma, counts=counts,
                    counts_sd=counts_sd)


def _levenberg_marquardt(evaluate: Any, z: np.ndarray, max_iter: int) -> tuple[np.ndarray, float]:
    """Minimise ``|r(z)|^2 / 2`` by Levenberg-Marquardt on the normal equations (the
    coordinates are a few hundred, the residuals thousands). ``evaluate(z, with_jac)``
    returns ``(r, J or None)``. Stops after two steps in a row that gain less than 0.05 %
    of the cost (the errors reported move in the fourth digit), or after ``max_iter``.
    Returns the solution and its cost."""
    r, J = evaluate(z, True)
    cost = 0.5 * float(r @ r)
    lam = 1e-3
    stalled = 0
    for _ in range(max_iter):
        g = J.T @ r
        A = J.T @ J
        scale = np.maximum(np.diag(A), 1e-12)
        step = None
        c_new = cost
        for _ in range(12):
            try:
                trial = -np.linalg.solve(A + lam * np.diag(scale), g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            r_new, _ = evaluate(z + trial, False)
            c_new = 0.5 * float(r_new @ r_new)
            if np.isfinite(c_new) and c_new < cost:
                step = trial
                break
            lam *= 4
        if step is None:
            break
        z = z + step
        gain = (cost - c_new) / max(cost, 1e-300)
        cost = c_new
        lam = max(lam / 3, 1e-9)
        stalled = stalled + 1 if gain < 5e-4 else 0
        if stalled >= 2 or float(np.max(np.abs(step))) < 1e-6:
            break
        r, J = evaluate(z, True)
    return z, cost


def predict_group(fit: FleetFit, g: Group, seen: bool = True) -> dict[str, np.ndarray]:
    """Predictions (``{metric: array}`` in the order of ``g.points``) for a group's cells
    from ``fit``: with the device's own terms when ``seen`` (and fitted), else from the
    profile, its stack term and the datasheet; each model with its model term if fitted."""
    out = {k: np.full(len(g.points), np.nan) for k in ("ttft_s", "tpot_s", "e2e_s", "duration_s", "output_tok_s")}
    pos = {id(p): i for i, p in enumerate(g.points)}
    for m in g.models:
        eff, _ = fit.efficiency(g.engine, g.stack, g.limits, g.key if seen else None, m)
        pr = predict_points(g._sub[m], g.limits, eff, g.shapes)
        idx = np.array([pos[id(p)] for p in g._sub[m]])
        for k in out:
            out[k][idx] = pr[k]
    return out


# -- groups from stored cells -------------------------------------------------------------

def vendor_of(pm: PluginManager, device_id: str) -> str | None:
    """The catalog vendor of a described device id (``cpu`` for ``cpu``), None if unknown."""
    if device_id.lower() == "cpu":
        return "cpu"
    for s in catalog(pm):
        if s.id.lower() == device_id.lower():
            return s.vendor
    return None


def build_groups(pm: PluginManager, rows: Sequence[StoredCell], engines: set[str] | None = None,
                 min_cells: int = 1) -> tuple[list[Group], list[dict[str, Any]]]:
    """:class:`Group` s of stored rows (``Store.results()`` items), one per (device,
    engine family): the device is the published hardware name of imported cells (two
    campaigns on one device stay apart), else the catalog id, or ``cpu`` for any CPU.

    Only usable cells (:func:`~infbench.analysis.predict.measured_points`) of zoo models
    count; published cells measured below their roofline floor are left out
    (:func:`~infbench.analysis.predict.below_floor`).

    Args:
        pm: plugin manager (device catalog).
        rows: stored cells.
        engines: engine families to keep (None: all).
        min_cells: groups with fewer usable cells are reported as skipped.

    Returns:
        ``(groups, skipped)``; each skipped entry ``{"device", "catalog_id", "engine",
        "cells", "why"}``; every group's ``excluded`` counts are in ``skipped`` too when
        nonzero (``why`` = ``below_floor``/``unknown_model``).
    """
    specs = catalog(pm)
    vendors = {s.id: s.vendor for s in specs}
    by: dict[tuple[str, str, str], list[StoredCell]] = {}
    for r in rows:
        d = r.device or {}
        if d.get("vendor") == "cpu":
            cid, label = "cpu", "cpu"
        else:
            found = device_catalog_id(pm, d, specs)
            if found is None:
                continue
            cid = found
            label = (d.get("properties") or {}).get("published_name") or cid
        eng = engine_family((r.spec or {}).get("engine") or "generic")
        if engines is not None and eng not in engines:
            continue
        by.setdefault((label, cid, eng), []).append(r)
    groups: list[Group] = []
    skipped: list[dict[str, Any]] = []
    limits_cache: dict[str, Any] = {}
    for (label, cid, eng), rs in sorted(by.items()):
        pts = measured_points(rs)
        shapes: dict[str, ModelShape] = {}
        known = []
        for p in pts:
            try:
                shapes.setdefault(p["model"], resolve(p["model"]))
                known.append(p)
            except ConfigError:
                continue
        base = {"device": label, "catalog_id": cid, "engine": eng, "cells": len(known)}
        if len(known) < len(pts):
            skipped.append({**base, "why": "unknown_model", "n": len(pts) - len(known)})
        try:
            lim = limits_cache.get(cid) or limits_for_id(pm, cid)
            limits_cache[cid] = lim
        except ConfigError as exc:
            skipped.append({**base, "why": exc.message})
            continue
        bad = below_floor(known, lim, shapes) & np.array([bool(p.get("published")) for p in known], dtype=bool)
        if bad.any():
            skipped.append({**base, "why": "below_floor", "n": int(bad.sum()),
                            "cell_ids": [p["cell_id"] for p, b in zip(known, bad, strict=True) if b]})
        known = [p for p, b in zip(known, bad, strict=True) if not b]
        if len(known) < min_cells:
            skipped.append({**base, "why": f"{len(known)} usable cells (< {min_cells})"})
            continue
        groups.append(Group(label, cid, eng, stack_of(vendors.get(cid, "cpu" if cid == "cpu" else None)), lim,
                            known, shapes))
    return groups, skipped


def subset(g: Group, keep: Any) -> Group:
    """A copy of ``g`` with only the points for which ``keep(point)`` is true."""
    return Group(g.key, g.device_id, g.engine, g.stack, g.limits, [p for p in g.points if keep(p)], g.shapes)
