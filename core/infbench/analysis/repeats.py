"""Repeats of one cell (``infbench run --repeat N``): mean and 95 % t-interval across them.

A repeated cell is stored N times: the first measurement with the cell's usual id, the
k-th (k = 2..N) with ``repeat = k`` in its spec, hence its own id. Each repeat draws fresh
prompts of the same lengths (its seed is the cell's plus ``(k - 1) x`` :data:`SEED_STRIDE`):
re-sending the first repeat's prompts would let a server's prefix cache serve the later
repeats from memory (vLLM, SGLang and llama.cpp cache by default), which is not a repeat of
the measurement. :func:`base_cell_id` maps every repeat back to the first one's id, and
:func:`repeat_groups` summarises each group of two or more ok repeats: for each headline
metric the mean, the half-width of the 95 % Student t confidence interval
(``t_{0.975, n-1} x s / sqrt(n)``, s the sample standard deviation; aiperf's multi-run
confidence reporting), the standard deviation, the coefficient of variation, and the
spread (min, max).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from infbench.data import metrics as M
from infbench.data.metrics import Column
from infbench.data.schema import Cell, DeviceInfo
from infbench.data.stored import StoredCell

#: Seed offset between repeats (a prime, so repeats of nearby user seeds do not collide).
SEED_STRIDE = 7919


def repeat_cell(cell: Cell, k: int) -> Cell:
    """The k-th measurement (k >= 2) of ``cell``: ``repeat = k``, seed moved by
    ``(k - 1) x SEED_STRIDE`` (fresh prompts of the same lengths)."""
    return cell.model_copy(update={"repeat": k, "seed": cell.seed + (k - 1) * SEED_STRIDE})


#: The metrics summarised across repeats: flat-row key -> column (header, unit and scale from
#: :mod:`infbench.data.metrics`; values in the units the key names, e.g. ``ttft_ms_p50`` in ms).
HEADLINE: dict[str, Column] = {c.key: c for c in (
    M.OUTPUT_TOK_S.col(), M.TOTAL_TOK_S.col(), M.REQUEST_S.col(), M.TTFT.col("p50"), M.TTFT.col("p99"),
    M.TPOT.col("p50"), M.ITL.col("p99"), M.E2E.col("p50"), M.GOODPUT.col(), M.TOKENS_PER_J.col(),
    M.USD_PER_MTOK.col())}
#: The headline metrics the repeats tables show (terminal and report), in order.
SHOWN = (M.OUTPUT_TOK_S.col(), M.TTFT.col("p50"), M.TPOT.col("p50"), M.E2E.col("p50"), M.TOKENS_PER_J.col(),
         M.USD_PER_MTOK.col())


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, float | int | None]:
    """Mean and Student-t confidence interval of ``values``.

    Returns:
        ``{"mean", "ci95" (half-width, same unit; None for n < 2), "std" (sample, ddof=1),
        "cv" (std / mean), "min", "max", "n"}``; all None (n = 0) for no values.

    Source: the t-interval of a mean, ``scipy.stats.t.ppf((1 + confidence) / 2, n - 1)
    x s / sqrt(n)`` (aiperf's multi-run confidence statistics).

    Raises:
        ImportError: scipy is missing (``pip install 'infbench[report]'``).
    """
    vs = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(vs)
    if n == 0:
        return {"mean": None, "ci95": None, "std": None, "cv": None, "min": None, "max": None, "n": 0}
    mean = sum(vs) / n
    if n < 2:
        return {"mean": mean, "ci95": None, "std": None, "cv": None, "min": vs[0], "max": vs[0], "n": 1}
    from scipy import stats

    std = math.sqrt(sum((v - mean) ** 2 for v in vs) / (n - 1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
    return {"mean": mean, "ci95": half, "std": std, "cv": std / mean if mean else None, "min": min(vs),
            "max": max(vs), "n": n}


def base_cell_id(row: StoredCell) -> str:
    """The id of the first measurement of a stored cell's workload (``repeat`` dropped):
    the same for every repeat, and the cell's own id when it is not a repeat."""
    spec = dict(row.spec)
    if not spec.get("repeat"):
        return row.cell_id
    k = spec.pop("repeat")
    spec["seed"] = spec.get("seed", 0) - (k - 1) * SEED_STRIDE
    return Cell(**spec).cell_id(DeviceInfo(**row.device))


def repeat_groups(rows: Sequence[StoredCell], min_n: int = 2) -> list[dict[str, Any]]:
    """Summaries of the repeated cells among ``Store.results()`` rows (ok attempts only).

    Args:
        rows: stored cells (any mix of repeated and single ones).
        min_n: groups with fewer ok repeats are left out.

    Returns:
        One dict per group, in first-seen order: ``{"cell_id" (base id), "label",
        "n", "cell_ids", "metrics": {key: t_interval(...) + {"label", "values"}}}``.
    """
    groups: dict[str, list[StoredCell]] = {}
    for r in rows:
        if not r.ok:
            continue
        groups.setdefault(base_cell_id(r), []).append(r)
    out = []
    for bid, rs in groups.items():
        if len(rs) < min_n:
            continue
        rs.sort(key=lambda r: r.spec.get("repeat") or 1)
        label = Cell(**{k: v for k, v in rs[0].spec.items() if k != "repeat"}).label()
        metrics = {}
        for key, col in HEADLINE.items():
            vals = [col.flat(r.metrics) for r in rs]
            if all(v is None for v in vals):
                continue
            metrics[key] = {**t_interval([v for v in vals if v is not None]), "label": col.header, "values": vals}
        out.append({"cell_id": bid, "label": label, "device": rs[0].device["model"], "n": len(rs),
                    "cell_ids": [r.cell_id for r in rs], "metrics": metrics})
    return out


def fmt_ci(d: dict[str, Any], digits: int = 2) -> str:
    """``"123.45 ± 1.20"`` (or just the mean when there is no interval)."""
    if d.get("mean") is None:
        return "-"
    if d.get("ci95") is None:
        return f"{d['mean']:,.{digits}f}"
    return f"{d['mean']:,.{digits}f} ± {d['ci95']:,.{digits}f}"
