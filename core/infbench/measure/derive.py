"""Metrics derived from raw per-request records, exactly as docs/metrics.md names them.

Every name carries its unit (``_s``, ``_w``, ``_j``, ``_tok_s``); the names, labels, units
and statistics are the one table :mod:`infbench.data.metrics`, whose keys this module
writes. Latency metrics are summarised as mean, p50, p90, p99 and max with the count behind
them (:func:`summarize`). Percentiles use linear interpolation (``numpy.percentile``
default, the same as vLLM's ``benchmarks/serve.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from infbench.data import metrics as M
from infbench.data.metrics import SUMMARY_STATS
from infbench.data.schema import RequestRecord

NS = 1e-9
#: The statistics of a summary (:data:`infbench.data.metrics.SUMMARY_STATS`).
SUMMARY_KEYS = SUMMARY_STATS


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, p50, p90, p99, max and count of ``values`` (same unit as the input).

    An empty input gives ``count = 0`` and None for the statistics.
    """
    if len(values) == 0:
        return {**dict.fromkeys(SUMMARY_STATS), "count": 0}
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(a.max()), "count": int(a.size)}


def ttft_s(r: RequestRecord) -> float:
    """Time to first token in s: ``t_tokens[0] - t_send`` (all tools)."""
    return (r.t_tokens_ns[0] - r.t_send_ns) * NS


def e2e_s(r: RequestRecord) -> float:
    """End-to-end latency in s: ``t_tokens[-1] - t_send`` (all tools)."""
    return (r.t_tokens_ns[-1] - r.t_send_ns) * NS


def tpot_s(r: RequestRecord) -> float | None:
    """Time per output token in s: ``(e2e - ttft) / (n_out - 1)`` for ``n_out >= 2``.

    Source: vLLM ``benchmarks/serve.py`` (aiperf calls this ITL). None for n_out < 2.
    """
    if r.n_out < 2:
        return None
    return (e2e_s(r) - ttft_s(r)) / (r.n_out - 1)


def itl_samples_s(r: RequestRecord) -> list[float]:
    """Inter-token latencies in s: ``t_tokens[i] - t_tokens[i-1]`` for i >= 1 (vLLM ITL)."""
    t = r.t_tokens_ns
    return [(t[i] - t[i - 1]) * NS for i in range(1, len(t))]


def completed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Requests without error that produced at least one token."""
    return [r for r in records if r.error is None and r.t_tokens_ns]


def release_lags_s(records: Sequence[RequestRecord]) -> list[float]:
    """``release_lag_s`` samples (s): ``t_send - t_sched`` of every request that was sent
    (a request that timed out before it was sent carries ``t_send = t_sched`` and is left out)."""
    return [(r.t_send_ns - r.t_sched_ns) * NS for r in records
            if r.t_sched_ns is not None and not (r.error and r.t_send_ns == r.t_sched_ns)]


def ttfat_s(r: RequestRecord) -> float | None:
    """Time to first answer (non-reasoning) token in s: ``t_first_answer - t_send``
    (guidellm's time to first output token, aiperf's reasoning metrics); None without one."""
    return (r.t_first_answer_ns - r.t_send_ns) * NS if r.t_first_answer_ns is not None else None


def ttfrt_s(r: RequestRecord) -> float | None:
    """Time to first reasoning token in s: ``t_first_reasoning - t_send``; None without one."""
    return (r.t_first_reasoning_ns - r.t_send_ns) * NS if r.t_first_reasoning_ns is not None else None


def failure_causes(records: Sequence[RequestRecord], top: int = 3) -> str:
    """The most common errors among ``records`` with their counts, most common first:
    ``HTTP 500: internal boom (3); timeout after 600 s (1)`` (a single cause has no count)."""
    counts = Counter(r.error for r in records if r.error)
    parts = [f"{e} ({n})" if len(counts) > 1 else e for e, n in counts.most_common(top)]
    if len(counts) > top:
        parts.append(f"{sum(n for _, n in counts.most_common()[top:])} with {len(counts) - top} other cause(s)")
    return "; ".join(parts)


def failure_summary(records: Sequence[RequestRecord]) -> str:
    """The error of a cell in which no request completed: ``4/4 failed: HTTP 500: internal
    boom``, the most common causes with their counts (``no request was sent`` for none)."""
    if not records:
        return "no request completed (no request was sent)"
    failed = [r for r in records if r.error]
    if not failed:
        return f"no request completed: {len(records)} request(s) produced no token"
    return f"{len(failed)}/{len(records)} failed: {failure_causes(failed)}"


def cell_metrics(
    records: Sequence[RequestRecord],
    devices_used: int = 1,
    energy_j: float | None = None,
    slo: dict[str, float] | None = None,
) -> dict[str, Any]:
    """All per-cell metrics of docs/metrics.md from the cell's raw records (keys and their
    definitions: :data:`infbench.data.metrics.METRICS`; other fields: ``FIELDS``).

    Args:
        records: one :class:`RequestRecord` per request of the timed part.
        devices_used: devices the model instance ran on (for ``output_tok_s_per_device``).
        energy_j: energy of the devices over the timed part in J, if measured.
        slo: optional limits ``{"ttft_s": .., "tpot_s": .., "e2e_s": ..}`` for goodput.

    Returns:
        A dict with the per-request summaries ``ttft_s``, ``tpot_s``, ``e2e_s``,
        ``itl_s`` (each :func:`summarize`), the scalars ``duration_s``, ``output_tok_s``,
        ``total_tok_s``, ``output_tok_s_per_device``, ``tok_s_per_device`` (total / devices),
        ``tok_s_per_user`` (1 / TPOT p50; None without streamed TPOT), ``request_s``, ``lib_itl_s``,
        counts (``n_requests``, ``n_completed``, ``n_failed``, ``n_in_total``,
        ``n_out_total``), ``token_counts_estimated`` (True if any count came from a
        client-side estimate), ``queue_wait_s`` (summary of ``t_send - t_sched``, the time a
        request waited in the client's own queue, when the load generator set it), and when
        ``energy_j`` is given ``energy_j``,
        ``avg_power_w``, ``tokens_per_j``, ``output_tokens_per_j``, ``j_per_token``,
        ``j_per_output_token``; with ``slo``,
        ``goodput_req_s``. Throughputs are None when nothing completed.

    ``lib_itl_s`` is LLM-Inference-Bench eq. 1, (E2E - TTFT) / (batch x (n_out - 1)),
    with E2E, TTFT and n_out the means over the cell's requests and batch the number
    of completed requests.

    Serving-mode additions (present when the records carry what they need):
    ``release_lag_s`` (summary of ``t_send - t_sched`` over every sent request),
    ``ttfat_s`` and ``ttfrt_s`` (time to first answer / reasoning token), ``reasoning_tokens``
    and ``answer_tokens`` (per-request summaries), ``ttft_s_by_turn`` (``{"1": summary,
    ...}`` for multi-turn sessions). Non-streamed requests (``streamed=False``) count in
    E2E and the throughputs only: TTFT, TPOT, ITL and ``lib_itl_s`` are absent from a
    cell that streamed nothing, never estimated.
    """
    done = completed(records)
    streamed = [r for r in done if r.streamed]
    ttfts = [ttft_s(r) for r in streamed]
    e2es = [e2e_s(r) for r in done]
    tpots = [v for v in (tpot_s(r) for r in streamed) if v is not None]
    itls = [v for r in streamed for v in itl_samples_s(r)]
    n_in = sum(r.n_in for r in done)
    n_out = sum(r.n_out for r in done)
    m: dict[str, Any] = {
        M.TTFT.key: summarize(ttfts),
        M.TPOT.key: summarize(tpots),
        M.E2E.key: summarize(e2es),
        M.ITL.key: summarize(itls),
        M.N_REQUESTS.key: len(records),
        M.N_COMPLETED.key: len(done),
        M.N_FAILED.key: len(records) - len(done),
        M.N_IN_TOTAL.key: n_in,
        M.N_OUT_TOTAL.key: n_out,
        "token_counts_estimated": any(r.n_out_source in ("client_tokenizer", "chunks") for r in done),
        M.DEVICES_USED.key: devices_used,
    }
    duration = None
    if done:
        duration = (max(r.t_tokens_ns[-1] for r in done) - min(r.t_send_ns for r in done)) * NS
    waits = [(r.t_send_ns - r.t_sched_ns) * NS for r in done if r.t_sched_ns is not None]
    if waits:
        m[M.QUEUE_WAIT.key] = summarize(waits)
    lags = release_lags_s(records)
    if lags:
        m[M.RELEASE_LAG.key] = summarize(lags)
    _serving_extras(m, done)
    m[M.DURATION.key] = duration
    span = duration if duration is not None and duration > 0 else None   # the denominators of the rates
    out_tps = n_out / span if span else None
    m[M.OUTPUT_TOK_S.key] = out_tps
    m[M.TOTAL_TOK_S.key] = (n_in + n_out) / span if span else None
    m[M.OUTPUT_TOK_S_PER_DEVICE.key] = out_tps / devices_used if out_tps is not None else None
    m[M.TOK_S_PER_DEVICE.key] = (n_in + n_out) / span / devices_used if span else None
    m[M.REQUEST_S.key] = len(done) / span if span else None
    mean_out = n_out / len(done) if done else 0
    if done and not streamed:
        for d in (M.TTFT, M.TPOT, M.ITL):
            del m[d.key]
        m[M.LIB_ITL.key] = None
        m["streamed"] = False
    elif done and mean_out > 1:
        m[M.LIB_ITL.key] = (float(np.mean(e2es)) - float(np.mean(ttfts))) / (len(done) * (mean_out - 1))
    else:
        m[M.LIB_ITL.key] = None
    tpot_p50 = (m.get(M.TPOT.key) or {}).get("p50")
    m[M.TOK_S_PER_USER.key] = 1.0 / tpot_p50 if tpot_p50 else None
    if slo:
        good = sum(1 for r in done if meets_slo(r, slo))
        m[M.GOODPUT.key] = good / span if span else None
        m["slo"] = dict(slo)
    if energy_j is not None and energy_j > 0:
        m[M.ENERGY.key] = energy_j
        m[M.AVG_POWER.key] = energy_j / span if span else None
        m[M.TOKENS_PER_J.key] = (n_in + n_out) / energy_j
        m[M.OUTPUT_TOKENS_PER_J.key] = n_out / energy_j
        m[M.J_PER_TOKEN.key] = energy_j / (n_in + n_out) if n_in + n_out else None
        m[M.J_PER_OUTPUT_TOKEN.key] = energy_j / n_out if n_out else None
    return m


#: Shortest time from a request's send to its first token on any hardware (s): a function
#: call into an engine, one kernel launch, or a loopback round trip each take longer.
MIN_TTFT_S = 1e-6
#: Most tokens one sequence can gain per second between its first and last token: one
#: decode step of any transformer on any device takes longer than 0.1 us.
MAX_SEQUENCE_TOKENS_PER_S = 1e7


def impossible_timing(records: Sequence[RequestRecord]) -> list[str]:
    """Reasons the completed requests of a cell cannot be a measurement on any hardware
    (issue 41: a forged worker cell with 8 tokens within 8 ns, a journal file with TTFT
    -5 s and 1e15 tok/s): a first token sooner than :data:`MIN_TTFT_S` after the send, or
    a sequence gaining more than :data:`MAX_SEQUENCE_TOKENS_PER_S` tokens per second.
    Device-free floors, so they hold where the device's limits are unknown (an ingest, a
    journal replay); a cell failing them is stored ``suspect``, never plain ok."""
    fast, rate = [], []
    for r in completed(records):
        t0 = r.t_tokens_ns[0] - r.t_send_ns
        if t0 < MIN_TTFT_S / NS:
            fast.append(t0)
        span = r.t_tokens_ns[-1] - r.t_tokens_ns[0]
        if r.n_out > 1 and span > 0 and (r.n_out - 1) / (span * NS) > MAX_SEQUENCE_TOKENS_PER_S:
            rate.append((r.n_out - 1) / (span * NS))
    out = []
    if fast:
        out.append(f"faster than any hardware: {len(fast)} request(s) got a first token {min(fast)} ns after the "
                   f"send (no engine answers within {MIN_TTFT_S * 1e6:g} us)")
    if rate:
        out.append(f"faster than any hardware: {len(rate)} request(s) gained tokens at up to {max(rate):.3g} tok/s "
                   f"within one sequence (above {MAX_SEQUENCE_TOKENS_PER_S:.0e})")
    return out


def meets_slo(r: RequestRecord, slo: dict[str, float]) -> bool:
    """True if the completed request ``r`` meets every limit of ``slo`` (s; keys
    ``ttft_s``, ``tpot_s``, ``e2e_s``, each optional). TPOT is not judged for n_out < 2."""
    t = tpot_s(r)
    if M.TTFT.key in slo and ttft_s(r) > slo[M.TTFT.key]:
        return False
    if M.E2E.key in slo and e2e_s(r) > slo[M.E2E.key]:
        return False
    return not (M.TPOT.key in slo and t is not None and t > slo[M.TPOT.key])


def _serving_extras(m: dict[str, Any], done: Sequence[RequestRecord]) -> None:
    """Reasoning and multi-turn summaries of the completed requests into ``m``."""
    answer = [v for v in (ttfat_s(r) for r in done) if v is not None]
    reasoning = [v for v in (ttfrt_s(r) for r in done) if v is not None]
    if reasoning:
        m[M.TTFRT.key] = summarize(reasoning)
        m[M.TTFAT.key] = summarize(answer)
    counted = [r for r in done if r.n_reasoning is not None]
    if counted:
        m[M.REASONING_TOKENS.key] = summarize([r.n_reasoning or 0 for r in counted])
        m[M.ANSWER_TOKENS.key] = summarize([r.n_out - (r.n_reasoning or 0) for r in counted])
        m["reasoning_tokens_estimated"] = any(r.n_reasoning_source == "chunks" for r in counted)
    turns: dict[int, list[float]] = {}
    for r in done:
        if r.turn is not None and r.streamed:
            turns.setdefault(r.turn, []).append(ttft_s(r))
    if turns:
        m[M.TTFT_BY_TURN.key] = {str(k): summarize(v) for k, v in sorted(turns.items())}


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten summaries: ``{"ttft_s": {"p50": x}}`` -> ``{"ttft_s_p50": x}`` (for CSV)."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out
