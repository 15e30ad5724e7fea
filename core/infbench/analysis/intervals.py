"""90 % prediction intervals from held-out residuals (split-conformal), per engine and per
kind of extrapolation.

A prediction is only as good as the situation it was validated in: a cell like the fitted
ones (another batch, length or tp of a device and model the fit saw) misses by a few per
cent; a longer sequence than any fitted, a model or a device the fit never saw, by more.
So :func:`collect_residuals` refits an engine's cells in folds that reproduce each
situation (:data:`KINDS`) and keeps ``|log(predicted / measured)|`` of the held-out cells:

* ``random``: a deterministic quarter of the cells held out (:func:`~infbench.analysis.predict.held_out`),
  or, under 200 cells, each of four folds in turn;
* ``length``: the cells at the longest length held out, the rest fitted;
* ``model``: the models split in up to four folds, each fold's models held out everywhere;
* ``device``: the devices split in up to four folds, each predicted from the others'
  profile and its own datasheet.

Each residual is also kept per software stack (``device@cuda``) and, but for ``device``,
per fitted device (``random@<device>``), and a prediction takes the narrowest category with
enough residuals (Mondrian conformal prediction, Vovk et al. 2005, ch. 4): a CUDA device is
not given the interval a broken campaign on another stack needs.

The interval of a prediction ``y`` is ``[y e^-q, y e^q]`` with ``q`` the split-conformal
quantile of the matching residuals (:func:`conformal_quantile`: the ``ceil((n + 1) 0.9)``-th
smallest of ``n``, which covers a new exchangeable residual with probability >= 90 %;
Vovk et al. 2005, Lei et al. 2018). When a prediction extrapolates in several ways at once,
the excess of each kind over ``random`` adds in quadrature (:meth:`IntervalTable.quantile`).
An engine with too few residuals of a kind borrows the pooled quantile of every engine.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infbench.analysis.predict import FIT_METRICS, _column, held_out
from infbench.analysis.profile import Group, predict_group

#: Kinds of extrapolation an interval is calibrated for, from the mildest.
KINDS = ("random", "length", "model", "device")
#: Miscoverage: 90 % intervals.
ALPHA = 0.1
#: Metrics an interval is given for; a throughput's log residual is the duration's negated.
INTERVAL_METRICS = ("ttft_s", "tpot_s", "e2e_s", "duration_s", "output_tok_s", "total_tok_s")
#: Which measured metric's residuals calibrate each predicted one.
RESIDUAL_OF = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "e2e_s": "e2e_s", "duration_s": "duration_s",
               "output_tok_s": "duration_s", "total_tok_s": "duration_s"}
#: Longest length (tokens) a group was fitted on times this: beyond it a prediction counts
#: as a length extrapolation.
LENGTH_SLACK = 1.25


def conformal_quantile(scores: Any, alpha: float = ALPHA) -> float:
    """The split-conformal quantile of nonconformity ``scores``: the ``ceil((n + 1)(1 -
    alpha))``-th smallest (``inf`` when ``n`` is too small for it, i.e. ``n < 1/alpha - 1``).
    NaNs are ignored."""
    s = np.sort(np.asarray([x for x in np.ravel(scores) if np.isfinite(x)], dtype=float))
    n = len(s)
    k = math.ceil((n + 1) * (1 - alpha))
    return float(s[k - 1]) if 0 < k <= n else float("inf")


@dataclass
class IntervalTable:
    """Conformal quantiles (log units) per engine, kind and metric.

    Attributes:
        q: ``{engine or "*": {kind: {metric: q}}}``; ``*`` pools every engine.
        n: the number of residuals behind each quantile, same keys.
        source: what the residuals came from.
        origin: ``{engine: {kind: source}}`` for the kinds taken from another table by
            :meth:`merged` (the others come from :attr:`source`): every interval can say
            which residuals it rests on (:meth:`explain`).
    """

    q: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    n: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    source: str = ""
    origin: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_residuals(cls, res: dict[str, dict[str, dict[str, list[float]]]], source: str = "",
                       alpha: float = ALPHA) -> IntervalTable:
        """From :func:`collect_residuals` output (``*`` is added: every engine pooled)."""
        pooled: dict[str, dict[str, list[float]]] = {}
        for by_kind in res.values():
            for kind, by_metric in by_kind.items():
                for m, v in by_metric.items():
                    pooled.setdefault(kind, {}).setdefault(m, []).extend(v)
        t = cls(source=source)
        for e, by_kind in {**res, "*": pooled}.items():
            for kind, by_metric in by_kind.items():
                for m, v in by_metric.items():
                    t.q.setdefault(e, {}).setdefault(kind, {})[m] = conformal_quantile(v, alpha)
                    t.n.setdefault(e, {}).setdefault(kind, {})[m] = len(v)
        return t

    def merged(self, fallback: IntervalTable | None) -> IntervalTable:
        """This table with ``fallback``'s quantiles where it has none (or only infinite
        ones); each kind taken from ``fallback`` keeps its source in :attr:`origin`."""
        if fallback is None:
            return self
        out = IntervalTable({e: {k: dict(m) for k, m in v.items()} for e, v in self.q.items()},
                            {e: {k: dict(m) for k, m in v.items()} for e, v in self.n.items()},
                            self.source + (f"; else {fallback.source}" if fallback.source else ""),
                            {e: dict(v) for e, v in self.origin.items()})
        out.source = self.source
        for e, by_kind in fallback.q.items():
            for kind, by_metric in by_kind.items():
                for m, q in by_metric.items():
                    cur = out.q.get(e, {}).get(kind, {}).get(m)
                    if cur is None or not math.isfinite(cur):
                        out.q.setdefault(e, {}).setdefault(kind, {})[m] = q
                        out.n.setdefault(e, {}).setdefault(kind, {})[m] = fallback.n.get(e, {}).get(kind, {}).get(m, 0)
                        if math.isfinite(q):
                            out.origin.setdefault(e, {})[kind] = fallback.origin.get(e, {}).get(kind, fallback.source)
        return out

    def _one_src(self, engine: str, kind: str, metric: str) -> tuple[float, str] | None:
        """:meth:`_one` with the source of the quantile found."""
        src = RESIDUAL_OF.get(metric, metric)
        for e in (engine, "*"):
            by_metric = self.q.get(e, {}).get(kind, {})
            q = by_metric.get(src)
            origin = self.origin.get(e, {}).get(kind, self.source)
            if q is not None and math.isfinite(q):
                return q, origin
            finite = [v for v in by_metric.values() if math.isfinite(v)]
            if finite:
                return max(finite), origin
        return None

    def _one(self, engine: str, kind: str, metric: str) -> float | None:
        """The quantile of one kind for one metric: the engine's own, else its pooled over
        metrics, else every engine's (``*``); None if none is finite."""
        got = self._one_src(engine, kind, metric)
        return None if got is None else got[0]

    def _kind(self, engine: str, kind: str, metric: str, stack: str | None, key: str | None) -> float | None:
        """:meth:`_one` of the narrowest category with enough residuals (Mondrian conformal
        prediction): the device's own (``random@<device>``; not for ``device``, which is a
        device never seen), else its stack's (``device@cuda``), else the engine's."""
        got = self._kind_src(engine, kind, metric, stack, key)
        return None if got is None else got[0]

    def _kind_src(self, engine: str, kind: str, metric: str, stack: str | None,
                  key: str | None) -> tuple[float, str] | None:
        scopes = [f"{kind}@{key}"] if key and kind != "device" else []
        scopes += [f"{kind}@{stack}"] if stack else []
        for s in scopes:
            got = self._one_src(engine, s, metric)
            if got is not None:
                return got
        return self._one_src(engine, kind, metric)

    def explain(self, engine: str, kinds: set[str] | frozenset[str], metric: str, stack: str | None = None,
                key: str | None = None) -> tuple[float, dict[str, str | None]]:
        """:meth:`quantile` and, per kind it combines (``random`` and each of ``kinds``),
        the source of that kind's residuals (None: the table has none of that kind, and
        the interval is infinite)."""
        base = self._kind_src(engine, "random", metric, stack, key)
        novel = sorted(k for k in kinds if k != "random")
        found = {k: self._kind_src(engine, k, metric, stack, key) for k in novel}
        sources: dict[str, str | None] = {"random": base[1] if base else None}
        sources.update({k: (v[1] if v else None) for k, v in found.items()})
        qs = [v[0] for v in found.values() if v is not None]
        if len(qs) < len(found):
            return float("inf"), sources
        if base is None:
            # No interpolation residuals (a split that only made novel cells): the novel
            # kinds' quantiles alone.
            sources.pop("random")
            return (math.sqrt(sum(q * q for q in qs)) if qs else float("inf")), sources
        b = base[0]
        return math.sqrt(b * b + sum(max(q * q - b * b, 0.0) for q in qs)), sources

    def quantile(self, engine: str, kinds: set[str] | frozenset[str], metric: str,
                 stack: str | None = None, key: str | None = None) -> float:
        """The interval half-width (log units) for a prediction of ``metric`` that
        extrapolates in ``kinds`` (empty: like the fitted cells): ``sqrt(q_random^2 +
        sum over kinds of max(q_kind^2 - q_random^2, 0))``; ``inf`` (no interval) when a
        needed kind has no quantile in this table or its fallback. Each kind's quantile is
        the narrowest category's with enough residuals: the fitted device ``key``'s own, else
        its ``stack``'s, else the engine's (:meth:`_kind`): CUDA devices are predicted far
        better than a stack with a broken campaign, and one table should not widen them."""
        return self.explain(engine, kinds, metric, stack, key)[0]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (infinite quantiles as None)."""
        return {"alpha": ALPHA, "source": self.source, "n": self.n, "origin": self.origin,
                "q": {e: {k: {m: (v if math.isfinite(v) else None) for m, v in bm.items()} for k, bm in bk.items()}
                      for e, bk in self.q.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> IntervalTable | None:
        """Inverse of :meth:`to_dict`; None for None."""
        if not d:
            return None
        q = {e: {k: {m: (float("inf") if v is None else float(v)) for m, v in bm.items()} for k, bm in bk.items()}
             for e, bk in (d.get("q") or {}).items()}
        origin = {e: {k: str(v) for k, v in by.items()} for e, by in (d.get("origin") or {}).items()
                  if isinstance(by, dict)}
        return cls(q=q, n=d.get("n") or {}, source=d.get("source", ""), origin=origin)


def interval(value: float | None, q: float) -> list[float | None]:
    """``[value e^-q, value e^q]`` (None bounds for a missing value or an infinite ``q``)."""
    if value is None or not math.isfinite(q) or not math.isfinite(value):
        return [None, None]
    return [value * math.exp(-q), value * math.exp(q)]


def novelty(groups_info: dict[str, dict[str, Any]], engine: str, device_key: str | None, model: str,
            n_in: int, n_out: int) -> set[str]:
    """The kinds of extrapolation a prediction makes against a fit that saw ``groups_info``
    (:attr:`~infbench.analysis.profile.FleetFit.groups`): ``device`` (no cells of this
    device under ``engine``), ``model`` (the model was not fitted on this device), ``length``
    (longer than :data:`LENGTH_SLACK` times the longest length fitted there)."""
    mine = {k: v for k, v in groups_info.items() if v["engine"] == engine}
    out: set[str] = set()
    g = mine.get(device_key) if device_key is not None else None
    if g is None:
        out.add("device")
        models = {m for v in mine.values() for m in v["models"]}
        longest = max((v["max_len"] for v in mine.values()), default=0)
    else:
        models = set(g["models"])
        longest = g["max_len"]
    if model not in models:
        out.add("model")
    if max(n_in, n_out) > LENGTH_SLACK * longest:
        out.add("length")
    return out


def scoped_kinds(kind: str, stack: str | None, key: str | None) -> list[str]:
    """The categories a held-out residual of ``kind`` counts in: the kind, its stack's
    (``random@cuda``) and, but for ``device``, its device's (``random@<device>``)."""
    out = [kind]
    if stack:
        out.append(f"{kind}@{stack}")
    if key and kind != "device":
        out.append(f"{kind}@{key}")
    return out


def _salted(name: str, salt: str, folds: int) -> int:
    return int(hashlib.sha256(f"{salt}|{name}".encode()).hexdigest()[:8], 16) % folds


def collect_residuals(groups: list[Any], fit: Any, kinds: tuple[str, ...] = KINDS, salt: str = "inner",
                      max_folds: int = 4) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Held-out ``|log(predicted / measured)|`` per engine, kind and metric (module doc).

    Args:
        groups: :class:`~infbench.analysis.profile.Group` s (any engines).
        fit: ``fit(groups) -> FleetFit`` (how the caller fits: priors, fixed terms).
        kinds: the kinds to collect (each costs one to ``max_folds`` fits).
        salt: varies the random split and the fold assignment (so an inner split differs
            from an outer one made with :func:`held_out`'s default).
        max_folds: most folds for ``model`` and ``device``.

    Returns:
        ``{engine: {kind: {metric: [scores]}}}``; a kind an engine's cells cannot produce
        (one device, one model, one length) is absent.
    """
    out: dict[str, dict[str, dict[str, list[float]]]] = {}

    def sub(g: Group, keep: Any) -> Group:
        return Group(g.key, g.device_id, g.engine, g.stack, g.limits, [p for p in g.points if keep(p)], g.shapes)

    def score(fitted: Any, tests: list[Any], kind: str, seen: bool) -> None:
        for t in tests:
            if not t.points or (seen and t.key not in fitted.groups):
                continue
            pr = predict_group(fitted, t, seen=seen)
            for m in FIT_METRICS:
                meas = _column(t.points, m)
                ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pr[m]) & (pr[m] > 0)
                if ok.any():
                    s = np.abs(np.log(pr[m][ok] / meas[ok])).tolist()
                    for k in scoped_kinds(kind, t.stack, t.key):
                        out.setdefault(t.engine, {}).setdefault(k, {}).setdefault(m, []).extend(s)

    def run(train: list[Any], tests: list[Any], kind: str, seen: bool) -> None:
        train = [g for g in train if g.points]
        tests = [g for g in tests if g.points]
        if not train or not tests:
            return
        score(fit(train), tests, kind, seen)

    by_engine: dict[str, list[Any]] = {}
    for g in groups:
        by_engine.setdefault(g.engine, []).append(g)
    for _e, gs in sorted(by_engine.items()):
        if "random" in kinds:
            # One fold of a quarter of the cells when that gives plenty of residuals; with
            # few cells, four folds so that every cell is held out once (cross-conformal).
            n_cells = sum(len(g.points) for g in gs)
            folds = 1 if n_cells >= 200 else 4
            for f in range(folds):
                def test(p: dict[str, Any], f: int = f, folds: int = folds) -> bool:
                    if folds == 1:
                        return held_out(p["cell_id"] + f"{salt}|random", 0.25)
                    return _salted(p["cell_id"], salt, folds) == f

                run([sub(g, lambda p, t=test: not t(p)) for g in gs], [sub(g, test) for g in gs], "random", True)
        if "length" in kinds:
            lens = sorted({max(p["n_in"], p["n_out"]) for g in gs for p in g.points})
            if len(lens) >= 3:
                top = lens[-1]
                run([sub(g, lambda p, t=top: max(p["n_in"], p["n_out"]) < t) for g in gs],
                    [sub(g, lambda p, t=top: max(p["n_in"], p["n_out"]) == t) for g in gs], "length", True)
        if "model" in kinds:
            models = sorted({p["model"] for g in gs for p in g.points})
            if len(models) >= 2:
                folds = min(max_folds, len(models))
                assign = {m: _salted(m, salt, folds) for m in models}
                if len(set(assign.values())) < 2:
                    assign = {m: i % folds for i, m in enumerate(models)}
                for f in sorted(set(assign.values())):
                    run([sub(g, lambda p, f=f, a=assign: a[p["model"]] != f) for g in gs],
                        [sub(g, lambda p, f=f, a=assign: a[p["model"]] == f) for g in gs], "model", True)
        if "device" in kinds:
            devices = sorted({g.device_id for g in gs})
            if len(devices) >= 2:
                folds = min(max_folds, len(devices))
                assign = {d: _salted(d, salt, folds) for d in devices}
                if len(set(assign.values())) < 2:
                    assign = {d: i % folds for i, d in enumerate(devices)}
                for f in sorted(set(assign.values())):
                    run([g for g in gs if assign[g.device_id] != f], [g for g in gs if assign[g.device_id] == f],
                        "device", False)
    return out
