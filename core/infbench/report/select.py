"""SLO-aware selection: the best configuration under a latency limit.

The Perplexity A100-vs-H100 study compared devices by the highest throughput per GPU
whose latency stayed within a limit (E2E <= 25.6 s for 512 output tokens). :func:`best`
does that over stored cells: keep the cells whose latency percentile meets every limit,
then per (model, device) the one with the highest ``output_tok_s_per_device``.
"""

from __future__ import annotations

from collections.abc import Sequence

from infbench.data import metrics as M
from infbench.data.stored import StoredCell

#: The metrics a limit may be put on (stored keys; their summaries, in s).
LIMIT_METRICS = (M.TTFT.key, M.TPOT.key, M.E2E.key)
#: The statistics a limit may judge (a latency summary's, but its count).
PERCENTILES = tuple(s for s in M.SUMMARY_STATS if s != "count")
#: What the best cell maximises.
RANKED = M.OUTPUT_TOK_S_PER_DEVICE


def meets(row: StoredCell, limits: dict[str, float], percentile: str = "p99") -> bool:
    """True if the cell is ok and its ``percentile`` of each limited metric is <= the limit (s)."""
    if row.status != "ok":
        return False
    m = row.metrics or {}
    for k, v in limits.items():
        got = M.metric(k).value(m, percentile)
        if got is None or got > v:
            return False
    return True


def best(rows: Sequence[StoredCell], limits: dict[str, float], percentile: str = "p99") -> list[StoredCell]:
    """Per (model, device vendor, device model): the cell meeting ``limits`` with the
    highest ``output_tok_s_per_device``.

    Args:
        rows: ``Store.results()`` items.
        limits: e.g. ``{"e2e_s": 25.6}``; keys from :data:`LIMIT_METRICS`.
        percentile: which summary statistic must meet the limit (``p50``, ``p90``,
            ``p99``, ``max`` or ``mean``).

    Raises:
        ValueError: no limit, or an unknown metric or percentile.
    """
    if not limits:
        raise ValueError("give at least one limit (--max-ttft, --max-tpot or --max-e2e)")
    bad = [k for k in limits if k not in LIMIT_METRICS]
    if bad or percentile not in PERCENTILES:
        raise ValueError(f"unknown limit {bad} or percentile {percentile!r}")
    winners: dict[tuple[str, str, str], StoredCell] = {}
    for r in rows:
        if not meets(r, limits, percentile):
            continue
        key = (r.spec["model"], r.device["vendor"], r.device["model"])
        tput = RANKED.value(r.metrics) or 0.0
        if key not in winners or tput > (RANKED.value(winners[key].metrics) or 0.0):
            winners[key] = r
    return sorted(winners.values(), key=lambda r: -(RANKED.value(r.metrics) or 0.0))
