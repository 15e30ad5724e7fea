"""Was a cell measured at steady state? The checks after the measurement, and their flags
(docs/metrics.md, "Steady state").

Each check stores its figures under ``metrics["steady"]`` and, when it fails, a flag in
``metrics["steady"]["flags"]`` (name -> the sentence with the figures) and the same sentence
among the cell's ``suspect`` reasons, as a noisy neighbour is (:mod:`infbench.analysis.physics`):

* ``not-warm``: the warm-up did not settle within its ceiling (:func:`warmup_flag`);
* ``unsteady``: the first and last thirds of the timed part differ by more than
  :data:`~infbench.data.warmup.DRIFT_TOL` beyond what the growing KV cache explains
  (:func:`timed_drift`: decode steps in batch mode, per-request TPOT in serving mode), or the
  ``--repeat`` measurements of one workload vary with a coefficient of variation above
  :data:`~infbench.data.warmup.REPEAT_CV_TOL` (:func:`repeat_cv`);
* ``drift``: at the end of its group, a block of the cell measured again differs from the
  same steps in its timed part by more than :data:`~infbench.data.warmup.DRIFT_TOL`
  (:func:`sentinel_check`): the host changed state while the group ran, which a slow stretch
  that is steady in itself shows no other way.

``unexpected`` (:func:`unexpected_note`) is a note, not a flag: a calibrated prediction's 90 %
interval for this device and engine does not hold the cell's TPOT or throughput.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from infbench.analysis.roofline import config_terms
from infbench.data import metrics as M
from infbench.data.schema import Cell, CellResult, RequestRecord
from infbench.data.warmup import BLOCK_OUTPUT_TOKENS, DRIFT_TOL, REPEAT_CV_TOL
from infbench.measure.derive import completed, tpot_s
from infbench.measure.steady import first_steps_tpot_ms, step_times_s

#: Fewest decode steps (batch) or requests (serving) a timed part needs for its thirds to be
#: compared (three per third).
MIN_THIRDS = 9


def add_flag(metrics: dict[str, Any], name: str, text: str) -> None:
    """Flag a cell: ``metrics["steady"]["flags"][name] = text`` and ``text`` added to its
    ``suspect`` reasons (``; ``-joined, as :func:`infbench.analysis.physics.mark_suspect`
    writes them, so no flag's text holds ``; ``: a reader splitting the reasons would cut it
    in two); a reason already there is not repeated."""
    steady = metrics.setdefault("steady", {})
    steady.setdefault("flags", {})[name] = text
    old = M.field(metrics, "suspect")
    reasons = old.split("; ") if isinstance(old, str) and old else []
    if text not in reasons:
        reasons.append(text)
    metrics["suspect"] = "; ".join(reasons)


def flags(metrics: dict[str, Any] | None) -> dict[str, str]:
    """The steady-state flags of a stored cell's metrics (``{}`` when none)."""
    steady = M.field(metrics, "steady")
    f = steady.get("flags") if isinstance(steady, dict) else None
    return dict(f) if isinstance(f, dict) else {}


def warmup_flag(record: dict[str, Any] | None) -> str | None:
    """The ``not-warm`` sentence of a warm-up record (:func:`infbench.measure.steady.warm_up`)
    that did not settle, with its figures; None when it settled or could not be judged."""
    if not record or record.get("converged") is not False:
        return None
    tp = [b["tpot_ms"] for b in record.get("blocks", []) if b.get("tpot_ms") is not None][-3:]
    figs = f", the last blocks' TPOT {', '.join(f'{t:.2f}' for t in tp)} ms" if tp else ""
    spread = record.get("spread")
    apart = f", {100 * spread:.1f} % apart (tolerance {100 * record.get('tol', 0):g} %)" if spread is not None else ""
    if record.get("mode") == "fixed":
        return (f"not-warm: the {len(record.get('blocks', []))} warm-up blocks of --warmup did not agree{figs}{apart}: "
                "drop --warmup to warm up until stable")
    return (f"not-warm: the warm-up did not settle within {record.get('max_s', 0):g} s "
            f"({len(record.get('blocks', []))} blocks{figs}{apart}): a longer --warmup-max-s or a quieter host")


def kv_growth(cell: Cell, shape: Any) -> float:
    """How much slower the last third of a batch cell's decode steps may be than the first
    third only because the KV cache grew: the ratio of a step's bytes at the two thirds'
    mean contexts, ``(W + B kv c_last) / (W + B kv c_first)``, with ``W`` the weight bytes
    per step, ``kv`` the KV bytes per token (:func:`~infbench.analysis.roofline.config_terms`),
    ``B`` the batch and ``c = n_in + n_out / 6`` and ``n_in + 5 n_out / 6``. 1 when the model's
    shape is unknown."""
    if shape is None:
        return 1.0
    try:
        t = config_terms(shape, cell.dtype, cell.batch)
        w, kv = float(t["weight_bytes_per_step"]), float(t["kv_bytes_per_token"])
    except Exception:  # noqa: BLE001 - an odd shape: no correction
        return 1.0
    c1, c3 = cell.input_len + cell.output_len / 6, cell.input_len + 5 * cell.output_len / 6
    b = cell.batch
    return (w + b * kv * c3) / (w + b * kv * c1) if w > 0 else 1.0


def _thirds(values: Sequence[float]) -> tuple[float, float]:
    k = len(values) // 3
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def timed_drift(cell: Cell, records: Sequence[RequestRecord], shape: Any = None,
                window: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """Compare the first and the last thirds of a timed part (module doc).

    * batch mode (in-process, or a server's batch): the decode-step times
      (:func:`~infbench.measure.steady.step_times_s`), thirds' means; the expected ratio is
      :func:`kv_growth`;
    * serving mode: the TPOT of each completed request, in the order they were sent, only
      those whose decode lies inside the steady ``window`` when there is one (ramp-up and
      drain requests see fewer neighbours); thirds' medians; expected ratio 1.

    Returns:
        ``{"basis": "steps"|"requests", "first_ms", "last_ms", "ratio", "expected", "drift"
        (ratio / expected - 1), "n"}``, or None with fewer than :data:`MIN_THIRDS` steps or
        requests.
    """
    serving = cell.load is not None and cell.load.mode != "batch"
    if not serving:
        steps = step_times_s(records)
        if len(steps) < MIN_THIRDS:
            return None
        a, b = _thirds(steps)
        expected, basis, n = kv_growth(cell, shape), "steps", len(steps)
    else:
        done = sorted(completed(records), key=lambda r: r.t_send_ns)
        if window is not None:
            inside = [r for r in done if window[0] <= r.t_tokens_ns[0] and r.t_tokens_ns[-1] <= window[1]]
            done = inside if len(inside) >= MIN_THIRDS else done
        vals = [v for r in done if (v := tpot_s(r)) is not None]
        if len(vals) < MIN_THIRDS:
            return None
        k = len(vals) // 3
        a, b = statistics.median(vals[:k]), statistics.median(vals[-k:])
        expected, basis, n = 1.0, "requests", len(vals)
    if a <= 0:
        return None
    ratio = b / a
    return {"basis": basis, "first_ms": round(a * 1e3, 4), "last_ms": round(b * 1e3, 4), "ratio": round(ratio, 4),
            "expected": round(expected, 4), "drift": round(ratio / expected - 1, 4), "n": n}


def drift_flag(d: dict[str, Any] | None, tol: float = DRIFT_TOL) -> str | None:
    """The ``unsteady`` sentence of a :func:`timed_drift` beyond ``tol``, or None."""
    if not d or abs(d["drift"]) <= tol:
        return None
    what = "decode steps" if d["basis"] == "steps" else "requests' TPOT"
    exp = f" (the KV cache's growth explains x{d['expected']:.2f})" if d["expected"] != 1 else ""
    return (f"unsteady: the timed part's first third of {what} took {d['first_ms']:.2f} ms and its last third "
            f"{d['last_ms']:.2f} ms, x{d['ratio']:.2f}{exp}: {100 * d['drift']:+.0f} %, beyond {100 * tol:g} %: "
            "the engine or the host changed speed while the cell ran")


def check_timed(result: CellResult, shape: Any = None) -> None:
    """Store :func:`timed_drift` of an ok cell under ``metrics["steady"]["timed_drift"]`` and
    its flag; also the ``not-warm`` flag of its warm-up record. Never raises."""
    if result.status != "ok":
        return
    m = result.metrics
    try:
        win = (M.field(m, "steady_window") or {})
        window = (win["t0_ns"], win["t1_ns"]) if "t0_ns" in win else None
        d = timed_drift(result.cell, result.records, shape, window)
    except Exception as exc:  # noqa: BLE001 - a check must not lose the cell
        m.setdefault("steady", {})["timed_drift_error"] = f"{type(exc).__name__}: {exc}"
        return
    if d is not None:
        m.setdefault("steady", {})["timed_drift"] = d
        text = drift_flag(d)
        if text:
            add_flag(m, "unsteady", text)
    text = warmup_flag(M.field(m, "warmup"))
    if text:
        add_flag(m, "not-warm", text)


def reference_tpot_ms(result: CellResult) -> float | None:
    """What a sentinel block of ``result``'s cell is compared with (:func:`sentinel_check`),
    in ms: a batch cell's mean time of its first ``BLOCK_OUTPUT_TOKENS - 1`` decode steps
    (the steps a block measures); a serving cell's TPOT p50 over its steady window, else over
    the cell."""
    cell = result.cell
    if cell.load is None or cell.load.mode == "batch":
        return first_steps_tpot_ms(result.records, min(cell.output_len, BLOCK_OUTPUT_TOKENS) - 1)
    win = M.field(result.metrics, "steady_window") or {}
    p50 = ((win.get("tpot_s") or {}).get("p50") if win.get("tpot_s", {}).get("count") else None) \
        or M.TPOT.value(result.metrics, "p50")
    return p50 * 1e3 if p50 else None


def sentinel_check(reference_ms: float | None, now_ms: float | None, tol: float = DRIFT_TOL) -> dict[str, Any] | None:
    """Compare a cell's reference (:func:`reference_tpot_ms`, measured with the cell) with a
    block of the same cell measured again at the end of its group.

    Returns:
        ``{"reference_ms", "now_ms", "ratio" (now / reference), "drift" (bool: beyond
        ``tol``), "faster_now" (bool)}``, or None when either figure is missing.
    """
    if not reference_ms or not now_ms or reference_ms <= 0 or now_ms <= 0:
        return None
    ratio = now_ms / reference_ms
    return {"reference_ms": round(reference_ms, 4), "now_ms": round(now_ms, 4), "ratio": round(ratio, 4),
            "drift": abs(ratio - 1) > tol, "faster_now": ratio < 1}


def confirmed(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """A drift seen by one sentinel block, checked by a second block of the same cell run at once
    (a one-block difference may be a scheduler hiccup; a changed host state persists): drift
    only when both blocks differ from the reference beyond the tolerance on the same side. The
    figures kept are those of the block nearer the reference (the smaller claim), with
    ``blocks_ms`` both blocks' TPOT.

    Returns:
        The combined check (:func:`sentinel_check`'s keys plus ``blocks_ms``), ``first`` when
        ``second`` is missing (the engine gave no records: nothing to confirm with), or None
        when ``first`` is None.
    """
    if first is None or second is None:
        return first
    near = min((first, second), key=lambda c: abs(c["ratio"] - 1))
    return {**near, "drift": first["drift"] and second["drift"] and first["faster_now"] == second["faster_now"],
            "blocks_ms": [first["now_ms"], second["now_ms"]]}


def sentinel_flag(check: dict[str, Any], first_label: str, tol: float = DRIFT_TOL) -> str:
    """The ``drift`` sentence of a :func:`sentinel_check` beyond ``tol``."""
    now = "faster" if check["faster_now"] else "slower"
    return (f"drift: at the end of its group this cell's first decode steps took {check['now_ms']:.2f} ms, "
            f"against {check['reference_ms']:.2f} ms when it was measured (x{check['ratio']:.2f}, beyond "
            f"{100 * tol:g} %, the host is {now} now, and the group's sentinel, {first_label}, moved too): the host "
            "changed state while the group ran")


def repeat_cv(results: Sequence[CellResult]) -> dict[str, Any] | None:
    """The coefficient of variation of one workload's ``--repeat`` measurements: of their TPOT
    p50 (E2E p50 where a cell has no TPOT), sample standard deviation / mean.

    Returns:
        ``{"metric", "values", "cv", "unsteady"}`` (``unsteady``: above
        :data:`~infbench.data.warmup.REPEAT_CV_TOL`), or None with fewer than two values.
    """
    for d in (M.TPOT, M.E2E):
        vals = [v for r in results if r.status == "ok" and (v := d.value(r.metrics, "p50"))]
        if len(vals) >= 2 and len(vals) == sum(1 for r in results if r.status == "ok"):
            mean = statistics.fmean(vals)
            cv = statistics.stdev(vals) / mean if mean > 0 else math.inf
            return {"metric": d.key, "values": [round(v, 6) for v in vals], "cv": round(cv, 4),
                    "unsteady": cv > REPEAT_CV_TOL}
    return None


def repeat_flag(cv: dict[str, Any]) -> str:
    """The ``unsteady`` sentence of a :func:`repeat_cv` above its tolerance."""
    name = "TPOT" if cv["metric"] == "tpot_s" else "E2E"
    vals = ", ".join(f"{1e3 * v:.2f}" for v in cv["values"])
    return (f"unsteady: the {len(cv['values'])} --repeat measurements of this workload vary (CV {100 * cv['cv']:.1f} % "
            f"of {name} p50, beyond {100 * REPEAT_CV_TOL:g} %: {vals} ms)")
