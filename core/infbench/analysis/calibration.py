"""Which calibration a prediction uses, and the two ways to make one: a device calibrated
against its engine's profile (``infbench predict --calibrate -d DEVICE``) and an engine's
profile fitted over every device with its cells (``infbench predict --calibrate --engine
ENGINE``), with their interval quantiles (step "analysis").

Order of preference for a prediction on device D under engine E (:func:`resolve_basis`):

1. **device**: D's own calibration, ``$INFBENCH_HOME/calibration/<D>__<E>.json``;
2. **engine profile**: E's stored profile, ``$INFBENCH_HOME/calibration/profile__<E>.json``,
   with D's own terms if D was among its devices, else the profile, its stack term and
   D's datasheet;
3. **defaults**: the built-in profile of E (:data:`BUILTIN_PROFILES`, fitted on
   LLM-Inference-Bench's published cells; engines without published cells borrow one:
   :data:`BORROWED_PROFILES`), else the generic published efficiency figures
   (:func:`~infbench.analysis.predict.default_efficiency`).

What a home holds shadows the built-in profile (issue 34): a stored profile or device
calibration is used alone, never completed with the built-in one's per-model or
per-device terms; a device calibrated without a stored profile starts from the built-in
profile's engine-wide and stack terms only, and says so. The interval of a prediction
comes from the tables fitted with what it uses; a kind of extrapolation they lack is taken
from the built-in table only when the built-in profile is allowed, and each interval
names the residuals of every kind it rests on. ``builtin=False`` (``--no-builtin``)
ignores the built-in profile and its table entirely.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infbench.analysis.intervals import KINDS, IntervalTable, collect_residuals, novelty
from infbench.analysis.predict import (
    FIT_METRICS,
    Calibration,
    Efficiency,
    _column,
    below_floor,
    calibration_path,
    default_efficiency,
    engine_family,
    held_out,
    load_calibration,
    point_errors,
    predict_points,
)
from infbench.analysis.profile import PARAM_NAMES, FleetFit, Group, Priors, fit_fleet, predict_group
from infbench.analysis.roofline import Limits
from infbench.data.errors import ConfigError
from infbench.data.models import resolve

# -- stored profiles and which calibration a prediction uses --------------------------------

#: The built-in engine profiles: fitted on LLM-Inference-Bench's published cells by
#: ``benchmarks/lib_validation.py --write-profiles`` (with their interval quantiles).
BUILTIN_PROFILES = Path(__file__).with_name("engine_profiles.json")
#: Engines with no published cells whose built-in profile is another engine's, and why.
BORROWED_PROFILES = {
    "sglang-server": ("vllm", "SGLang has no cells in LLM-Inference-Bench; it is the same class of engine as "
                              "vLLM (paged KV cache, continuous batching, CUDA graphs, FlashInfer/FlashAttention "
                              "kernels), so vLLM's profile stands in until `infbench predict --calibrate --engine "
                              "sglang-server` fits its own"),
}


def profile_path(home: Path, engine: str) -> Path:
    """Where an engine profile is kept: ``$INFBENCH_HOME/calibration/profile__<engine>.json``,
    beside the per-device calibrations (:func:`~infbench.analysis.predict.calibration_path`)."""
    return home / "calibration" / f"profile__{engine_family(engine)}.json"


def renamed(fit: FleetFit, old: str, new: str) -> FleetFit:
    """``fit`` with engine ``old``'s terms filed under ``new`` (a borrowed profile)."""
    def key(k: tuple) -> tuple:
        return (k[0], new, *k[2:]) if k[0] in ("mu", "stack", "model") and k[1] == old else k

    groups = {k: ({**v, "engine": new} if v["engine"] == old else v) for k, v in fit.groups.items()}
    return FleetFit(engines=[new if e == old else e for e in fit.engines],
                    terms={key(k): v for k, v in fit.terms.items()}, sd={key(k): v for k, v in fit.sd.items()},
                    cov_blocks={(key(a), key(b)): v for (a, b), v in fit.cov_blocks.items()}, groups=groups,
                    reserve_fraction={(new if e == old else e): v for e, v in fit.reserve_fraction.items()},
                    cost=fit.cost, n_obs=fit.n_obs, dof=fit.dof, n_params=fit.n_params, priors=fit.priors,
                    sigma=fit.sigma, level_var={key(k): v for k, v in fit.level_var.items()})


_BUILTIN: dict[str, Any] | None = None


def builtin_profiles() -> dict[str, Any]:
    """The parsed :data:`BUILTIN_PROFILES` (``{}`` when the file is missing or unreadable)."""
    global _BUILTIN
    if _BUILTIN is None:
        try:
            _BUILTIN = json.loads(BUILTIN_PROFILES.read_text())
        except (OSError, ValueError):
            _BUILTIN = {}
    return _BUILTIN


def builtin_profile(engine: str) -> tuple[FleetFit, Any, str] | None:
    """The built-in profile of ``engine`` (its own, or the one it borrows), its interval
    table and where it comes from; None when there is none."""
    e = engine_family(engine)
    data = builtin_profiles()
    src_engine, why = BORROWED_PROFILES.get(e, (e, ""))
    entry = (data.get("engines") or {}).get(src_engine)
    if not entry:
        return None
    try:
        fit = FleetFit.from_dict(entry["fit"])
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    if src_engine != e:
        fit = renamed(fit, src_engine, e)
    table = IntervalTable.from_dict(entry.get("intervals") or data.get("intervals"))
    if table is not None and src_engine != e:
        table.q[e] = table.q.get(src_engine, {})
        table.n[e] = table.n.get(src_engine, {})
    src = (f"built-in profile of {src_engine} fitted on {data.get('source', 'published cells')}"
           + (f" ({why})" if why else ""))
    return fit, table, src


def load_profile(home: Path, engine: str) -> tuple[FleetFit, Any, dict[str, Any]] | None:
    """The stored profile of ``engine`` (:func:`profile_path`): ``(fit, interval table,
    the file's other keys)``; None when there is none or it cannot be read."""
    p = profile_path(home, engine)
    try:
        d = json.loads(p.read_text())
        fit = FleetFit.from_dict(d["fit"])
    except (OSError, ValueError, KeyError, TypeError, ConfigError):
        return None
    return fit, IntervalTable.from_dict(d.get("intervals")), {k: v for k, v in d.items() if k not in ("fit",
                                                                                                       "intervals")}


@dataclass
class Basis:
    """What a prediction for one (device, engine) rests on.

    Attributes:
        used: ``device`` (a calibration fitted on this device's own cells),
            ``engine profile`` (a profile fitted by ``--calibrate --engine`` on stored
            cells, with this device's terms if it was among them) or ``defaults`` (the
            built-in profile fitted on published cells, or the generic figures).
        detail: in words: which fit, which level, where from.
        path: the file it was read from, if any.
        fit: the fitted terms (None: ``efficiency`` holds for every model).
        efficiency: the factors when there is no ``fit``.
        key: this device's group in ``fit`` (None: predicted from the profile and the
            datasheet).
        stack: the device's software stack.
        table: the interval quantiles (None: no interval can be given).
    """

    used: str
    detail: str
    path: str | None
    fit: FleetFit | None
    efficiency: Efficiency | None
    key: str | None
    stack: str | None
    table: Any

    def efficiency_for(self, engine: str, limits: Limits, model: str | None) -> Efficiency:
        """The factors for ``model`` on ``limits`` under ``engine``."""
        if self.fit is None:
            return self.efficiency or Efficiency()
        eff, _ = self.fit.efficiency(engine, self.stack, limits, self.key, model)
        eff.source = self.detail
        return eff

    def kinds(self, engine: str, model: str, n_in: int, n_out: int) -> set[str]:
        """The kinds of extrapolation (:func:`~infbench.analysis.intervals.novelty`) of a
        prediction; ``defaults`` from the generic figures for an engine without profile."""
        if self.fit is None:
            return {"defaults"}
        return novelty(self.fit.groups, engine_family(engine), self.key, model, n_in, n_out)

    def quantile(self, engine: str, kinds: set[str], metric: str) -> float:
        """Interval half-width (log units) for ``metric`` (``inf``: none known)."""
        return self.explain(engine, kinds, metric)[0]

    def explain(self, engine: str, kinds: set[str], metric: str) -> tuple[float, dict[str, str | None]]:
        """:meth:`quantile` and the source of each kind's residuals it combines (None: the
        tables hold no residuals of that kind, so there is no interval)."""
        if self.table is None:
            return float("inf"), {k: None for k in sorted(kinds | {"random"})}
        if kinds == {"defaults"}:
            got = self.table._one_src("*", "defaults", metric)
            return (got[0], {"defaults": got[1]}) if got is not None else (float("inf"), {"defaults": None})
        return self.table.explain(engine_family(engine), kinds, metric, self.stack, self.key)

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary (the ``calibration`` of a prediction row)."""
        return {"used": self.used, "detail": self.detail, "path": self.path, "device_terms": self.key is not None}


def key_for(fit: FleetFit, engine: str, device_id: str, label: str | None = None) -> str | None:
    """The group of ``fit`` holding ``engine``'s cells on catalog device ``device_id``: the
    campaign ``label`` (a published hardware name) when given, else the one named like the
    device, else the one with the most cells; None if none (or no group is ``label``)."""
    e = engine_family(engine)
    cands = [(k, v) for k, v in fit.groups.items() if v["engine"] == e and v["device_id"].lower() == device_id.lower()]
    if label is not None:
        return next((k for k, _ in cands if k.lower() == label.lower()), None)
    if not cands:
        return None
    for k, _ in cands:
        if k.lower() == device_id.lower():
            return k
    return max(cands, key=lambda kv: kv[1]["cells"])[0]


def resolve_basis(home: Path, device_id: str, engine: str, stack: str | None, what_if: bool = False,
                  builtin: bool = True, label: str | None = None) -> Basis:
    """Which calibration a prediction for ``engine`` on ``device_id`` uses, in order: the
    device's own calibration (``--calibrate -d``), the stored engine profile (``--calibrate
    --engine``), the built-in profile, the generic defaults (:class:`Basis`).

    A stored calibration or profile is used alone (module doc): its own interval table,
    completed by the stored profile's for a device calibration, and by the built-in table
    only when ``builtin`` (each kind keeps its source).

    Args:
        home: ``$INFBENCH_HOME``.
        device_id: catalog id (for a what-if device, the id it was derived from).
        engine: engine name.
        stack: the device's software stack (None: unknown).
        what_if: the device is a modified or file-described one: its own calibration and
            device terms do not apply (the profile and the datasheet do).
        builtin: the built-in profile and its interval table may be used (``--no-builtin``:
            not at all; the generic defaults without intervals when the home has nothing).
        label: the campaign whose device terms to use when several map to ``device_id``
            (``--device-label``; a published hardware name); none of that name: the
            profile and the datasheet.
    """
    e = engine_family(engine)
    builtin_ = builtin_profile(e) if builtin else None
    builtin_table = (builtin_[1] if builtin_ else _defaults_table()) if builtin else None
    stored = load_profile(home, e) if e != "generic" else None
    stored_table = None
    if stored is not None and stored[1] is not None:
        stored_table = stored[1]
        if not stored_table.source:
            stored_table.source = f"stored engine profile {profile_path(home, e)}"

    def completed(table: Any, *fallbacks: Any) -> Any:
        for fb in fallbacks:
            if fb is not None:
                table = table.merged(fb) if table is not None else fb
        return table

    if not what_if and e != "generic":
        cal = load_calibration(home, device_id, e)
        other_campaign = (cal is not None and label is not None and bool(cal.campaign)
                          and cal.campaign.lower() != label.lower())
        if cal is not None and cal.engine in (e, "*") and not other_campaign:
            fit = FleetFit.from_dict(cal.fit) if cal.fit else None
            table = IntervalTable.from_dict(cal.intervals)
            if table is not None and not table.source:
                table.source = f"held-out cells of the calibration of {device_id}"
            table = completed(table, stored_table, builtin_table)
            key = key_for(fit, e, device_id, label) if fit is not None else None
            path = calibration_path(home, device_id, cal.engine)
            return Basis("device", f"fitted on {cal.n_train} cells of {device_id}"
                         + (f" / {cal.engine}" if cal.engine != "*" else "")
                         + (f" against the {cal.prior}" if cal.prior else ""), str(path), fit,
                         None if fit is not None else cal.efficiency, key, stack, table)
    if stored is not None:
        fit, _table, meta = stored
        key = None if what_if else key_for(fit, e, device_id, label)
        table = completed(stored_table, builtin_table)
        devs = ", ".join(sorted({v["device_id"] for v in fit.groups.values()}))
        detail = (f"engine profile of {e} fitted on {meta.get('cells', '?')} cells of {devs}"
                  + (f"; device terms of {key}" if key else f"; {device_id} from its datasheet"))
        return Basis("engine profile", detail, str(profile_path(home, e)), fit, None, key, stack, table)
    if builtin_ is not None:
        fit, table, src = builtin_
        key = None if what_if else key_for(fit, e, device_id, label)
        return Basis("defaults", src + (f"; device terms of {key}" if key else f"; {device_id} from its datasheet"),
                     str(BUILTIN_PROFILES), fit, None, key, stack, table or _defaults_table())
    eff = default_efficiency(device_id)
    if not builtin:
        eff.source += "; --no-builtin: no built-in profile, and no interval"
    return Basis("defaults", eff.source, None, None, eff, None, stack, builtin_table)


def _defaults_table() -> Any:
    """The built-in interval table (with the generic defaults' ``defaults`` kind), or None."""
    return IntervalTable.from_dict(builtin_profiles().get("intervals"))


# -- calibrating one device, or an engine's profile ----------------------------------------

def prior_terms(engine: str, stack: str | None, home: Path | None = None,
                builtin: bool = True) -> tuple[dict[tuple, np.ndarray], str]:
    """The terms a single device is calibrated against, held fixed: the stored profile of
    ``engine`` (its profile, its stack term for ``stack`` and its model terms), else the
    built-in one's profile and stack term only (never its per-model terms: a model the
    home has not fitted gets none, as in a leave-one-model-out check). ``({}, why)`` when
    there is none or ``builtin`` is False without a stored profile (the generic priors
    apply). The second item says which profile it is, for the calibration's ``prior``."""
    e = engine_family(engine)
    got = load_profile(home, e) if home is not None else None
    fit = got[0] if got is not None else None
    src = f"stored engine profile {profile_path(home, e)}" if got is not None and home is not None else ""
    models = fit is not None
    if fit is None and builtin:
        b = builtin_profile(e)
        if b is not None:
            fit, src = b[0], b[2] + " (its engine-wide and stack terms; no per-model terms)"
    if fit is None or ("mu", e) not in fit.terms:
        return {}, "generic priors (no engine profile" + ("" if builtin else "; --no-builtin") + ")"
    fixed: dict[tuple, np.ndarray] = {("mu", e): fit.terms[("mu", e)]}
    if stack and ("stack", e, stack) in fit.terms:
        fixed[("stack", e, stack)] = fit.terms[("stack", e, stack)]
    if models:
        for k, v in fit.terms.items():
            if k[0] == "model" and k[1] == e:
                fixed[k] = v
    return fixed, src


def calibrate_device(pts: list[dict[str, Any]], limits: Limits, engine: str, stack: str | None = None,
                     key: str | None = None, home: Path | None = None, test_fraction: float = 0.3,
                     priors: Priors | None = None, builtin: bool = True) -> Any:
    """Fit one (device, engine) against its engine's profile and report the held-out error
    (what ``infbench predict --calibrate -d DEVICE`` does).

    The profile (stored, else built in: :func:`prior_terms`) is held fixed and the device's
    own terms (and its per-model terms) are fitted with the hierarchical priors on a
    deterministic ``1 - test_fraction`` of the cells (:func:`~infbench.analysis.predict.held_out`);
    the held-out rest gives the error per metric (and the uncalibrated error: the profile
    alone) and, as split-conformal residuals, the ``random`` intervals; one more fit
    without the longest length gives the ``length`` ones.

    Args:
        pts: measured points of the device (one engine), published ones above their floor.
        limits: the device's limits.
        engine: its engine.
        stack: its software stack.
        key: the group name (default the device id).
        home: ``$INFBENCH_HOME`` (for a stored profile).
        test_fraction: share of cells held out.
        priors: hyper-parameters.
        builtin: without a stored profile, start from the built-in one (False: the
            generic priors).

    Returns:
        A :class:`~infbench.analysis.predict.Calibration` with ``fit`` and ``intervals``.

    Raises:
        ConfigError: fewer than 4 cells.
    """
    if len(pts) < 4:
        raise ConfigError(f"calibration needs at least 4 measured ok cells with fixed lengths; found {len(pts)}",
                          hint="run a sweep on this device first (e.g. `infbench run --preset quick`), or import "
                               "published cells (`infbench import --format lib-csv FILE`)")
    e = engine_family(engine)
    key = key or limits.id
    shapes = {p["model"]: resolve(p["model"]) for p in pts}
    test = [p for p in pts if held_out(p["cell_id"], test_fraction)] or [pts[-1]]
    test_ids = {p["cell_id"] for p in test}
    train = [p for p in pts if p["cell_id"] not in test_ids]
    fixed, prior_src = prior_terms(e, stack, home, builtin)
    st = stack or "unknown"
    g = Group(key, limits.id, e, st, limits, train, shapes)
    t = Group(key, limits.id, e, st, limits, test, shapes)

    def fit_fn(gs: list[Group]) -> FleetFit:
        return fit_fleet(gs, priors, fixed=fixed, covariance=False)

    fit = fit_fleet([g], priors, fixed=fixed)
    pred_test = predict_group(fit, t)
    pred_train = predict_group(fit, Group(key, limits.id, e, st, limits, train, shapes))
    # "Uncalibrated": the profile and the datasheet, no device terms.
    base = fit_fleet([Group(key, limits.id, e, st, limits, train[:1], shapes)], priors, fixed=fixed,
                     covariance=False, max_iter=0) if fixed else None
    pred_default = predict_group(base, t, seen=False) if base is not None else None
    res = collect_residuals([Group(key, limits.id, e, st, limits, pts, shapes)], fit_fn, kinds=("length",))
    rnd: dict[str, list[float]] = {}
    for m in FIT_METRICS:
        meas = _column(test, m)
        ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred_test[m]) & (pred_test[m] > 0)
        if ok.any():
            rnd[m] = np.abs(np.log(pred_test[m][ok] / meas[ok])).tolist()
    res.setdefault(e, {})["random"] = rnd
    table = IntervalTable.from_residuals(res, source=f"held-out cells of {key} / {e}")
    eff, _ = fit.efficiency(e, st, limits, key)
    eff.source = f"fitted on {len(train)} cells of {limits.id} / {e} against the {prior_src}"
    published = sum(1 for p in train if p.get("published"))
    err_default = (point_errors(test, pred_default) if pred_default is not None
                   else point_errors(test, predict_points(test, limits, default_efficiency(limits.id), shapes)))
    return Calibration(
        device_id=limits.id, engine=e, efficiency=eff, n_train=len(train), n_test=len(test),
        error_test=point_errors(test, pred_test), error_train=point_errors(train, pred_train),
        error_default=err_default, sources={"published": published, "local": len(train) - published},
        fit=fit.restrict(e).to_dict(), intervals=table.to_dict(),
        parameters=fit.parameters(e, st, key), prior=prior_src)


#: Fewest usable cells an engine profile is fitted on: one per free parameter of the
#: profile (:data:`~infbench.analysis.profile.PARAMS`; the stack, device and model terms
#: are shrunk towards it by their priors and cost less than one each).
MIN_PROFILE_CELLS = len(PARAM_NAMES)
#: Fewest usable cells a device needs to take part in an engine profile (as many as a
#: device calibration needs: :func:`calibrate_device`).
MIN_DEVICE_CELLS = 4


def fit_engine_profile(groups: list[Group], engine: str, home: Path | None = None, priors: Priors | None = None,
                       kinds: tuple[str, ...] | None = None, builtin: bool = True) -> tuple[FleetFit, Any]:
    """Fit ``engine``'s profile over every group of it (what ``infbench predict --calibrate
    --engine E`` does) and its interval quantiles from inner folds
    (:func:`~infbench.analysis.intervals.collect_residuals`); where ``builtin``, the
    built-in table fills the kinds the cells cannot produce (one device: no ``device``
    residuals), each such kind labelled with its source.

    The prior of the profile is the built-in one where there is one and ``builtin``
    (weak: ``profile_sd``), else the generic :data:`~infbench.analysis.profile.PARAMS` priors.

    Raises:
        ConfigError: no group of ``engine``, or fewer usable cells than the profile has free
            parameters (:data:`MIN_PROFILE_CELLS`) on devices with at least
            :data:`MIN_DEVICE_CELLS` each; the message gives the counts.
    """
    e = engine_family(engine)
    gs = [g for g in groups if g.engine == e and g.points]
    if not gs:
        raise ConfigError(f"no stored cells of engine {e} on a described device",
                          hint="import published results (`infbench import --format lib-csv FILE`) or run a sweep")
    few = [g for g in gs if len(g.points) < MIN_DEVICE_CELLS]
    gs = [g for g in gs if len(g.points) >= MIN_DEVICE_CELLS]
    cells = sum(len(g.points) for g in gs)
    if cells < MIN_PROFILE_CELLS:
        also = (f"; left out {', '.join(f'{g.key} ({len(g.points)})' for g in few)}, under {MIN_DEVICE_CELLS} cells "
                "each" if few else "")
        raise ConfigError(f"an engine profile has {MIN_PROFILE_CELLS} free parameters ({', '.join(PARAM_NAMES)}); "
                          f"the store has {cells} usable cells of {e} on {len(gs)} device(s) with at least "
                          f"{MIN_DEVICE_CELLS} cells{also}: it needs at least {MIN_PROFILE_CELLS}",
                          hint=f"measure more cells of {e} (e.g. `infbench run --preset quick --engine {e}`), or "
                               f"calibrate one device (`infbench predict --calibrate -d DEVICE -e {e}`, "
                               f"{MIN_DEVICE_CELLS} cells) against the built-in profile")
    b = builtin_profile(e) if builtin else None
    prior_u = {e: b[0].terms[("mu", e)]} if b is not None and ("mu", e) in b[0].terms else None
    fit = fit_fleet(gs, priors, prior_u=prior_u)

    def fit_fn(sub: list[Group]) -> FleetFit:
        return fit_fleet(sub, priors, prior_u=prior_u, covariance=False)

    res = collect_residuals(gs, fit_fn, kinds or KINDS)
    table = IntervalTable.from_residuals(res, source=f"inner folds of the {cells} stored cells of {e}")
    if not builtin:
        return fit, table
    fallback = b[1] if b is not None else _defaults_table()
    if fallback is not None and not fallback.source:
        fallback.source = "built-in interval table"
    return fit, table.merged(fallback)


def _write(path: Path, text: str, what: str) -> Path:
    """Write ``text`` to ``path`` (folders made), or a clear error when the home cannot be
    written (a read-only ``$INFBENCH_HOME``).

    Raises:
        ConfigError: the folder or file cannot be written (with the path and the fix).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot save the {what} to {path}: {exc.strerror or exc}",
                          hint="make that folder writable, or point INFBENCH_HOME at a writable folder "
                               "(e.g. INFBENCH_HOME=~/.infbench)") from None
    return path


def save_profile(home: Path, engine: str, fit: FleetFit, table: Any, groups: list[Group]) -> Path:
    """Store an engine profile at :func:`profile_path` (fit, intervals, what it was fitted on).

    Raises:
        ConfigError: the home cannot be written (:func:`_write`).
    """
    e = engine_family(engine)
    mine = [g for g in groups if g.engine == e]
    published = sum(1 for g in mine for p in g.points if p.get("published"))
    cells = sum(len(g.points) for g in mine)
    text = json.dumps({"engine": e, "cells": cells, "sources": {"published": published, "local": cells - published},
                       "devices": sorted({g.device_id for g in mine}), "fit": fit.restrict(e).to_dict(),
                       "intervals": table.to_dict() if table is not None else None,
                       "parameters": fit.parameters(e)}, indent=1, default=str)
    return _write(profile_path(home, e), text, f"engine profile of {e}")


def save_device_calibration(home: Path, cal: Calibration) -> Path:
    """:func:`~infbench.analysis.predict.save_calibration` with a clear error for a home
    that cannot be written.

    Raises:
        ConfigError: the home cannot be written (:func:`_write`).
    """
    return _write(calibration_path(home, cal.device_id, cal.engine), json.dumps(cal.to_dict(), indent=2),
                  f"calibration of {cal.device_id} / {cal.engine}")


def calibrate(pts: list[dict[str, Any]], limits: Limits, test_fraction: float = 0.3, engine: str = "*",
              stack: str | None = None, home: Path | None = None, builtin: bool = True) -> Calibration:
    """Fit the efficiency factors and overheads of one (device, engine) to measured cells.

    Cells of models outside the zoo (no shape to predict from) are left out and counted
    (``excluded.unknown_model``), as the engine-profile fit does. Published cells measured
    below their roofline floor (:func:`below_floor`) are left out too (and listed in
    ``excluded``). The rest is fitted against the engine's profile
    (stored, else built in: :func:`prior_terms`) by :func:`calibrate_device`: the
    profile held, the device's own terms (every parameter of
    :data:`infbench.analysis.profile.PARAMS`, bounded, with priors that pull them to the
    profile) and its per-model terms fitted on a deterministic ``1 - test_fraction`` of the
    cells (:func:`held_out`), ``kv_reserve_bytes`` by a search over :data:`KV_RESERVES_GB`
    where the KV capacity limits some cell; the held-out rest gives the reported error, next
    to the profile's error on them without the device's terms, and the 90 % intervals.

    Args:
        pts: :func:`measured_points` of one device (and engine).
        limits: that device's limits.
        test_fraction: share of cells held out (chosen by :func:`held_out`; at least one).
        engine: the engine the calibration is for (``*``: any; fitted as a generic engine).
        stack: the device's software stack (``cuda``, ``rocm``...; :data:`infbench.analysis.profile.STACKS`).
        home: ``$INFBENCH_HOME`` (a stored engine profile there is preferred to the built-in one).
        builtin: without a stored profile, start from the built-in one (False: generic priors).

    Raises:
        ConfigError: fewer than 4 usable cells.
    """
    unknown: list[str] = []
    known = []
    for p in pts:
        try:
            resolve(p["model"])
            known.append(p)
        except ConfigError:
            unknown.append(p["cell_id"])
    pts = known
    if len(pts) < 4:
        why = f" ({len(unknown)} more of models outside the zoo, left out)" if unknown else ""
        raise ConfigError(f"calibration needs at least 4 measured ok cells with fixed lengths of zoo models; found "
                          f"{len(pts)}{why}",
                          hint="run a sweep on this device first (e.g. `infbench run --preset quick`), or import "
                               "published cells (`infbench import --format lib-csv FILE`)")
    shapes = {p["model"]: resolve(p["model"]) for p in pts}
    # Only published cells are screened: infbench's own cells come with their raw token
    # times, and a CPU's limits are measured attainable rates, not bounds.
    bad = below_floor(pts, limits, shapes) & np.array([bool(p.get("published")) for p in pts], dtype=bool)
    excluded = {"below_floor": [p["cell_id"] for p, b in zip(pts, bad, strict=True) if b]}
    if unknown:
        excluded["unknown_model"] = unknown
    pts = [p for p, b in zip(pts, bad, strict=True) if not b]
    if len(pts) < 4:
        raise ConfigError(f"calibration needs at least 4 measured cells above the roofline floor; found {len(pts)} "
                          f"({len(excluded['below_floor'])} below it)")
    cal = calibrate_device(pts, limits, "generic" if engine in ("*", "", None) else engine, stack, None, home,
                           test_fraction, builtin=builtin)
    cal.engine = engine if engine in ("*", "", None) else cal.engine
    cal.excluded = excluded
    return cal
