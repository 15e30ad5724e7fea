"""The price of a cell's tokens (``--price-per-hour``), docs/metrics.md ``usd_per_mtok``."""

from __future__ import annotations

from typing import Any

from infbench.data import metrics as M


def usd_per_mtok(price_per_hour: float, duration_s: float | None, n_out_total: int) -> float | None:
    """US dollars per million output tokens: ``price_per_hour / 3600 x duration_s /
    (sum n_out / 1e6)`` (docs/metrics.md; inference-perf #139).

    Args:
        price_per_hour: what the machine (or its share) costs per hour, USD.
        duration_s: the cell's ``duration_s`` (first send to last token), s.
        n_out_total: output tokens of the completed requests.

    Returns:
        USD per 1e6 output tokens, or None when nothing was generated.

    Raises:
        ValueError: a negative price.
    """
    if price_per_hour < 0:
        raise ValueError(f"price per hour must be >= 0 USD, got {price_per_hour}")
    if not duration_s or n_out_total <= 0:
        return None
    return price_per_hour / 3600.0 * duration_s / (n_out_total / 1e6)


def cost_metrics(metrics: dict[str, Any], price_per_hour: float) -> dict[str, Any]:
    """``{"price_per_hour_usd", "usd_per_mtok"}`` for a cell's metrics (``duration_s``,
    ``n_out_total``)."""
    return {"price_per_hour_usd": price_per_hour,
            M.USD_PER_MTOK.key: usd_per_mtok(price_per_hour, M.DURATION.value(metrics),
                                             M.N_OUT_TOTAL.value(metrics) or 0)}
