"""The throughput-interactivity frontier (issue 31; docs/report.md).

Each ok serving cell is a point: x = interactivity, ``tok_s_per_user`` = 1 / TPOT p50
(tok/s per user; InferenceX's x axis, 1000 / median TPOT in ms); y = one of

* ``tok_s_per_device``: total (input + output) tok/s per device (InferenceX's default);
* ``output_tok_s_per_device``: output tok/s per device;
* ``j_per_token``: J per token (lower is better);
* ``usd_per_mtok``: USD per million output tokens (lower is better).

One front per (device, engine), pooled over every configuration of the engine (its
engine arguments, tensor parallel size, concurrency); an imported publication's cells
(``infbench import``) form fronts of their own per source, model, precision and shape
(:func:`series`): the points no other point beats on
both axes (:func:`pareto`). Between two front points the front is the straight line
joining them (:func:`interpolate`), as InferenceX's plots draw it; outside the range of
interactivities a front covers it is undefined, never extrapolated. :func:`compare` gives
B's y over A's at equal interactivity where both fronts are defined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infbench.data import metrics as M
from infbench.data.stored import StoredCell

#: The y axes a front can be drawn on: key -> (label, whether higher is better).
AXES: dict[str, tuple[str, bool]] = {
    M.TOK_S_PER_DEVICE.key: ("tok/s/device (input + output)", True),
    M.OUTPUT_TOK_S_PER_DEVICE.key: ("output tok/s/device", True),
    M.J_PER_TOKEN.key: ("J/token", False),
    M.USD_PER_MTOK.key: ("USD per million output tokens", False),
}
#: The interactivities (tok/s/user) at which fronts are read by default (issue 31).
DEFAULT_INTERACTIVITIES = (20.0, 50.0, 100.0)


@dataclass
class Point:
    """One cell on the frontier's axes.

    Attributes:
        x: interactivity, tok/s/user (1 / TPOT p50).
        y: the chosen axis (see :data:`AXES`).
        cell_id: the stored cell.
        config: what distinguishes it within its (device, engine): ``concurrency=8``,
            ``tp=2``, engine arguments.
        predicted: True for a predicted (not measured) cell.
        interval: the y's 90 % interval of a predicted point (low, high), or None.
        dominated_by: the ``cell_id`` of a front point that beats it (None: on the front).
        load: its concurrency, rate or batch (None: not known).
        series: its configuration without the load (``tp1, parallel=4, 128/64``): the cells
            one engine configuration measured along the load axis.
    """

    x: float
    y: float
    cell_id: str
    config: str
    predicted: bool = False
    interval: tuple[float, float] | None = None
    dominated_by: str | None = None
    load: float | None = None
    series: str | None = None


@dataclass
class Front:
    """The frontier of one (device, engine).

    Attributes:
        device: the device's label.
        engine: the engine.
        axis: the y axis key (:data:`AXES`).
        points: every point, front and dominated.
        front: the Pareto-optimal points, by increasing interactivity.
    """

    device: str
    engine: str
    axis: str
    points: list[Point] = field(default_factory=list)
    front: list[Point] = field(default_factory=list)

    def interpolate(self, x: float) -> float | None:
        """The front's y at interactivity ``x``: :func:`interpolate`."""
        return interpolate(self.front, x)

    def area(self) -> float | None:
        """:func:`area` of the front."""
        return area(self.front)

    def certainty(self) -> dict[str, Any]:
        """How sure the shown front is (issue 43): ``peak_predicted`` (its best point, the highest
        or on a lower-is-better axis the lowest, is a prediction, not a measured cell),
        ``peak_cell``, ``largest_interval`` (the largest relative 90 % interval of its predicted
        points: ``(high - low) / 2 / y``; None when every point is measured) and ``notes``, one
        sentence per doubt."""
        if not self.front:
            return {"peak_predicted": False, "peak_cell": None, "largest_interval": None, "notes": []}
        higher = AXES.get(self.axis, ("", True))[1]  # the best point: the lowest on J/token or cost
        peak = max(self.front, key=lambda p: p.y) if higher else min(self.front, key=lambda p: p.y)
        rel = [(p.interval[1] - p.interval[0]) / 2 / p.y for p in self.front
               if p.predicted and p.interval and p.y > 0]
        largest = max(rel) if rel else None
        notes = []
        if peak.predicted:
            notes.append(f"the front's {'highest' if higher else 'lowest'} point ({peak.y:,.4g} at "
                         f"{peak.x:,.1f} tok/s/user, {peak.config}) is predicted, not measured: measure that "
                         "cell before quoting the peak")
        if largest is not None:
            notes.append(f"its predicted points carry 90 % intervals of up to +/-{100 * largest:.0f} %")
        for p in self.front:
            far = self._far(p)
            if far:
                notes.append(f"front point {p.config} rests on a prediction with {far} (more than two doublings)")
        return {"peak_predicted": peak.predicted, "peak_cell": peak.cell_id, "largest_interval": largest,
                "notes": notes}

    def _far(self, p: Point) -> str | None:
        """For a predicted point more than two doublings of load from every measured cell of its
        series, how far it is; else None."""
        if not p.predicted or p.load is None or p.load <= 0:
            return None
        near = [abs(math.log2(p.load / q.load)) for q in self.points
                if not q.predicted and q.series == p.series and q.load]
        if near and min(near) <= 2:
            return None
        return "no measured cell of its series" if not near else \
            f"{min(near):.1f} doublings from the nearest measured cell of its series"

    def doubt(self, p: Point, interval_tol: float) -> str | None:
        """Why the predicted point ``p`` is not to be trusted, or None (measured, or trusted): its
        90 % interval is wider than +/-``interval_tol`` (relative), or it rests more than two
        doublings from a measured cell of its series (the rule of :meth:`certainty`)."""
        if not p.predicted:
            return None
        if p.interval and p.y > 0 and (p.interval[1] - p.interval[0]) / 2 / p.y > interval_tol:
            return f"interval +/-{100 * (p.interval[1] - p.interval[0]) / 2 / p.y:.0f} %"
        return "more than two doublings from a measured cell" if self._far(p) else None

    def as_dict(self, at: tuple[float, ...] = DEFAULT_INTERACTIVITIES) -> dict[str, Any]:
        """JSON form: device, engine, axis, the front's points (x, y, cell, configuration), the
        dominated points with what dominates each, the y at ``at`` and the area."""
        def pt(p: Point) -> dict[str, Any]:
            d: dict[str, Any] = {"tok_s_per_user": p.x, self.axis: p.y, "cell_id": p.cell_id, "config": p.config}
            if p.predicted:
                d["predicted"] = True
                d["interval"] = list(p.interval) if p.interval else None
            if p.dominated_by:
                d["dominated_by"] = p.dominated_by
            return d

        return {"device": self.device, "engine": self.engine, "axis": self.axis,
                "front": [pt(p) for p in self.front],
                "dominated": [pt(p) for p in self.points if p.dominated_by is not None],
                "at": {f"{x:g}": self.interpolate(x) for x in at},
                "covers": [self.front[0].x, self.front[-1].x] if self.front else None,
                "area": self.area(), "certainty": self.certainty()}


def pareto(points: list[Point], higher_is_better: bool = True) -> list[Point]:
    """The points no other point beats on both axes (higher x; higher y, or lower y when
    ``higher_is_better`` is False), by increasing x; sets ``dominated_by`` on the others.

    A point beats another when it is at least as good on both axes and better on one;
    points equal on both axes are all kept (ties). Predicted points are placed on the front
    like measured ones (the report draws them hollow).

    Args:
        points: the points (x, y finite).
        higher_is_better: the y axis's direction.

    Returns:
        The front, sorted by x.
    """
    sign = 1.0 if higher_is_better else -1.0
    # by x descending: a point is on the front if its y beats every point with a larger x
    order = sorted(points, key=lambda p: (-p.x, -sign * p.y))
    front: list[Point] = []
    best: Point | None = None
    for p in order:
        p.dominated_by = None
        if best is None or sign * p.y > sign * best.y or (p.y == best.y and p.x == best.x):
            front.append(p)
            if best is None or sign * p.y > sign * best.y:
                best = p
        else:
            p.dominated_by = best.cell_id
    return sorted(front, key=lambda p: (p.x, -sign * p.y))


def interpolate(front: list[Point], x: float) -> float | None:
    """The front's y at interactivity ``x`` (tok/s/user): linear between the two front points
    around ``x``; the point's y at a front point; None outside ``[front[0].x, front[-1].x]``.

    Args:
        front: a front sorted by x (:func:`pareto`).
        x: the interactivity.
    """
    if not front or x < front[0].x or x > front[-1].x:
        return None
    for a, b in zip(front, front[1:]):
        if a.x <= x <= b.x:
            if b.x == a.x:
                return max(a.y, b.y)
            return a.y + (b.y - a.y) * (x - a.x) / (b.x - a.x)
    return front[-1].y if x == front[-1].x else None


def area(front: list[Point]) -> float | None:
    """The area under the front over the interactivities it covers (trapezoids), in
    tok/s/user x the y axis's unit; None for fewer than two points. Comparable between
    fronts only over the same interactivity range (docs/report.md)."""
    if len(front) < 2:
        return None
    return sum((b.x - a.x) * (a.y + b.y) / 2 for a, b in zip(front, front[1:]))


def _config(spec: dict[str, Any]) -> str:
    """``c8, tp1, parallel=4``: what tells a cell apart within its (device, engine)."""
    load = spec.get("load") or {}
    parts = []
    if load.get("concurrency"):
        parts.append(f"c{load['concurrency']}")
    elif load.get("request_rate"):
        parts.append(f"r{load['request_rate']:g}")
    else:
        parts.append(f"b{spec.get('batch')}")
    parts.append(f"tp{spec.get('tensor_parallel_size', 1)}")
    parts += [f"{k}={v}" for k, v in sorted((spec.get("engine_args") or {}).items())]
    parts.append(f"{spec.get('input_len')}/{spec.get('output_len')}")
    return " ".join(parts)


def fronts(rows: Sequence[StoredCell], axis: str = M.TOK_S_PER_DEVICE.key,
           device_label: Any = None) -> list[Front]:
    """One :class:`Front` per (device, engine) from stored rows (``Store.results()`` items).

    Rows count when their status is ``ok`` (or ``predicted``) and both axes are finite:
    ``tok_s_per_user`` and ``axis`` in their metrics (a row stored before these metrics
    existed has them computed from ``tpot_s`` p50 and ``total_tok_s / devices_used``).

    Args:
        rows: stored cells.
        axis: the y axis (:data:`AXES`).
        device_label: ``f(device dict) -> str`` (default: its model and count).

    Raises:
        ValueError: an axis not in :data:`AXES`.
    """
    if axis not in AXES:
        raise ValueError(f"unknown frontier axis {axis!r} (axes: {', '.join(AXES)})")
    label = device_label or (lambda d: f"{d.get('model') or d.get('vendor')}" + (
        f" x{d['count']}" if (d.get("count") or 1) > 1 else ""))
    groups: dict[tuple[str, str], Front] = {}
    for r in rows:
        if r.status not in ("ok", "predicted"):
            continue
        m, spec = r.metrics or {}, r.spec or {}
        x = axis_value(m, M.TOK_S_PER_USER.key)
        y = axis_value(m, axis)
        if x is None or y is None:
            continue
        key = (label(r.device or {}), series(r))
        f = groups.setdefault(key, Front(key[0], key[1], axis))
        ld = spec.get("load") or {}
        level = ld.get("concurrency") or ld.get("request_rate") or spec.get("batch")
        cfg = _config(spec)
        f.points.append(Point(x, y, r.cell_id, cfg, predicted=r.status == "predicted",
                              interval=axis_interval(m, axis),
                              load=float(level) if isinstance(level, (int, float)) else None,
                              series=cfg.split(", ", 1)[1] if ", " in cfg else ""))
    higher = AXES[axis][1]
    for f in groups.values():
        f.front = pareto(f.points, higher)
    return sorted(groups.values(), key=lambda f: (f.device, f.engine))


def series(r: StoredCell) -> str:
    """The second half of a front's key: the engine of a measured cell; for an imported or
    published one (``infbench import``) also its source and workload (``sglang-server
    (InferenceX: deepseek-ai/DeepSeek-R1 fp8 1024/1024)``), since a publication's fronts
    are drawn per model, precision and shape, and never pooled with a site's own cells."""
    spec, eng = r.spec or {}, r.engine or {}
    name = str(spec.get("engine", "?"))
    if r.published:
        name += (f" ({eng.get('source') or 'published'}: {spec.get('model')} {spec.get('dtype')} "
                 f"{spec.get('input_len')}/{spec.get('output_len')})")
    return name


def axis_interval(m: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    """A predicted cell's 90 % interval on frontier axis ``key`` (low, high), or None: its own
    ``interval[key]``, else derived as :func:`axis_value` derives the axis (``tok_s_per_device``
    from ``total_tok_s``'s interval / ``devices_used``, ``output_tok_s_per_device`` from
    ``output_tok_s``'s). The adaptive planner's predictions carry the intervals of the
    quantities it predicts (:meth:`infbench.analysis.adaptive.AdaptivePlanner.predicted_results`),
    not of the per-device axes; without this, a shown front's predicted points had none."""
    iv = M.field(m, "interval") or {}
    own = iv.get(key)
    per_device = {M.TOK_S_PER_DEVICE.key: M.TOTAL_TOK_S.key, M.OUTPUT_TOK_S_PER_DEVICE.key: M.OUTPUT_TOK_S.key}
    if own is None and key in per_device:
        base = iv.get(per_device[key])
        d = M.DEVICES_USED.value(m) or 1
        own = [v / d if isinstance(v, (int, float)) else None for v in base] if isinstance(base, (list, tuple)) \
            else None
    if not isinstance(own, (list, tuple)) or len(own) != 2:
        return None
    lo, hi = own
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi)):
        return None
    return float(lo), float(hi)


def axis_value(m: Mapping[str, Any], key: str) -> float | None:
    """A frontier quantity from a cell's metrics ``m``, finite and above 0, or None; computed for
    rows stored before it existed (``tok_s_per_user`` from ``tpot_s`` p50, ``tok_s_per_device``
    from ``total_tok_s / devices_used``, ``j_per_token`` from ``tokens_per_j``).

    Args:
        m: a cell's stored metrics.
        key: the quantity's metric key (:data:`AXES`, or ``tok_s_per_user``).

    Raises:
        KeyError: ``key`` is not a metric (:func:`infbench.data.metrics.metric`).
    """
    v = M.metric(key).value(m)
    if v is None:
        if key == M.TOK_S_PER_USER.key:
            t = M.TPOT.value(m, "p50")
            v = 1.0 / t if t else None
        elif key == M.TOK_S_PER_DEVICE.key and (tot := M.TOTAL_TOK_S.value(m)) is not None:
            v = tot / (M.DEVICES_USED.value(m) or 1)
        elif key == M.J_PER_TOKEN.key and (per_j := M.TOKENS_PER_J.value(m)):
            v = 1.0 / per_j
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def compare(a: Front, b: Front, at: tuple[float, ...] | None = None, n: int = 5) -> dict[str, Any]:
    """B's y over A's at equal interactivity.

    Args:
        a, b: the two fronts (the same axis).
        at: the interactivities to read (default: ``n`` evenly spaced over the range both
            cover, plus :data:`DEFAULT_INTERACTIVITIES` inside it).
        n: points of the default grid.

    Returns:
        ``{"axis", "overlap": [lo, hi] | None, "points": [{"tok_s_per_user", "a", "b",
        "ratio"}], "geomean_ratio"}``; ratios are B / A (above 1: B better on a higher-is-
        better axis); no points when the fronts share no interactivity.
    """
    out: dict[str, Any] = {"axis": a.axis, "a": f"{a.device} {a.engine}", "b": f"{b.device} {b.engine}",
                           "overlap": None, "points": [], "geomean_ratio": None}
    if not a.front or not b.front:
        return out
    lo, hi = max(a.front[0].x, b.front[0].x), min(a.front[-1].x, b.front[-1].x)
    if lo > hi:
        return out
    out["overlap"] = [lo, hi]
    xs = sorted(set(at)) if at is not None else sorted(
        {lo + (hi - lo) * i / max(n - 1, 1) for i in range(n)} | {x for x in DEFAULT_INTERACTIVITIES if lo <= x <= hi})
    ratios = []
    for x in xs:
        ya, yb = a.interpolate(x), b.interpolate(x)
        r = yb / ya if ya and yb is not None else None
        out["points"].append({"tok_s_per_user": x, "a": ya, "b": yb, "ratio": r})
        if r:
            ratios.append(r)
    if ratios:
        out["geomean_ratio"] = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return out
