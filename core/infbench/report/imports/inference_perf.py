"""inference-perf's request-lifecycle report JSON (kubernetes-sigs/inference-perf:
``summary_lifecycle_metrics.json`` for the whole run, ``stage_N_lifecycle_metrics.json`` per
load stage): ``{benchmark_time_seconds, load_summary, successes, failures}``.

inference-perf's definitions (``inference_perf/reportgen/base.py``): per request, in s,
``time_to_first_token`` = first token - start; ``time_per_output_token`` = (last token -
first token) / (output tokens - 1), infbench's TPOT; ``inter_token_latency`` = the pooled
gaps between streamed chunks (not per token); ``normalized_time_per_output_token`` =
latency / output tokens; percentiles by ``np.percentile`` (linear, as infbench);
``output_tokens_per_sec`` counts the *client's* re-tokenized output (``output_len``) unless
the run set ``use_server_output_tokens``, while ``output_tokens`` holds the server's usage.

Mapping (docs/metrics.md): ``time_to_first_token``, ``time_per_output_token``,
``request_latency`` -> ``ttft_s``, ``tpot_s``, ``e2e_s`` (mean, median -> p50, p90, p99,
max); ``output_tok_s`` = the server's ``output_tokens.total`` / ``benchmark_time_seconds``
(infbench counts the server's tokens; inference-perf's own ``output_tokens_per_sec`` kept
unmapped), ``total_tok_s`` likewise with ``prompt_tokens.total``; ``request_s`` =
``requests_per_sec``; ``duration_s`` = ``benchmark_time_seconds``; a stage file's
``load_summary`` gives the load (``concurrency``, else ``requested_rate``). Kept as they
came: ``inter_token_latency``, ``normalized_time_per_output_token``, the schedule delay,
request sizes and the other throughputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.inputs import read_text, strict_json
from infbench.report.imports.common import ImportedRow, check_row, number, refuse, whole

MAX_BYTES = 256 << 20
LATENCIES = {"time_to_first_token": M.TTFT.key, "time_per_output_token": M.TPOT.key, "request_latency": M.E2E.key}
STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99", "max": "max"}


def read(path: str | Path) -> tuple[list[ImportedRow], dict[str, Any]]:
    """Parse and check an inference-perf lifecycle report (see the module doc).

    Returns:
        ``(rows, info)``: one row, ``{"tool_version": None}`` (the report names none).

    Raises:
        ConfigError: not this report, or figures that contradict themselves.
    """
    p = Path(path)
    d = strict_json(read_text(p, "inference-perf report", MAX_BYTES), str(p))
    if not isinstance(d, dict) or not isinstance(d.get("successes"), dict):
        raise refuse(str(p), "not an inference-perf lifecycle report (no 'successes')")
    r = _row(d, str(p))
    check_row(r)
    return [r], {"tool_version": None}


def _row(d: dict[str, Any], where: str) -> ImportedRow:
    s = d["successes"]
    completed = whole(s.get("count"), "successes.count", where, required=True)
    assert completed is not None
    if completed == 0:
        raise refuse(where, "no request succeeded; nothing was measured")
    failed = whole((d.get("failures") or {}).get("count", 0), "failures.count", where) or 0
    lat = s.get("latency") or {}
    summaries: dict[str, dict[str, float]] = {}
    for name, key in LATENCIES.items():
        v = lat.get(name)
        if not isinstance(v, dict):
            continue
        summaries[key] = {st: x for a, st in STATS.items() if (x := number(v.get(a), f"{name} {a}", where)) is not None}
        summaries[key]["count"] = completed
    if not summaries:
        raise refuse(where, "successes.latency holds no request_latency or time_to_first_token")
    dur = number(d.get("benchmark_time_seconds"), "benchmark_time_seconds", where)
    thr = s.get("throughput") or {}
    out_tok, in_tok = s.get("output_tokens") or {}, s.get("prompt_tokens") or {}
    n_out = number(out_tok.get("total"), "output_tokens.total", where)
    n_in = number(in_tok.get("total"), "prompt_tokens.total", where)
    scalars: dict[str, float] = {}
    if dur:
        scalars[M.DURATION.key] = dur
        if n_out is not None:
            scalars[M.OUTPUT_TOK_S.key] = n_out / dur
            if n_in is not None:
                scalars[M.TOTAL_TOK_S.key] = (n_in + n_out) / dur
    rps = number(thr.get("requests_per_sec"), "requests_per_sec", where)
    if rps is not None:
        scalars[M.REQUEST_S.key] = rps
    in_len, out_len = number(in_tok.get("mean"), "prompt_tokens.mean", where), number(
        out_tok.get("mean"), "output_tokens.mean", where)
    if not in_len or not out_len:
        raise refuse(where, "no prompt_tokens/output_tokens means: the lengths cannot be known")
    fixed = in_tok.get("min") == in_tok.get("max") and out_tok.get("min") == out_tok.get("max")
    ls = d.get("load_summary") or {}
    load: dict[str, Any] = {"num_requests": completed + failed}
    if ls.get("concurrency"):
        load.update(mode="concurrency", concurrency=whole(ls["concurrency"], "load_summary.concurrency", where, lo=1))
    elif ls.get("requested_rate"):
        load.update(mode="rate", request_rate=number(ls["requested_rate"], "load_summary.requested_rate", where))
    else:
        load["mode"] = "concurrency"  # the summary file names no load: the stage files do
    unmapped: dict[str, Any] = {k: v for k, v in lat.items() if k not in LATENCIES}
    unmapped.update({f"throughput.{k}": v for k, v in thr.items() if k != "requests_per_sec"})
    unmapped["output_len"] = s.get("output_len")
    unmapped["load_summary"] = ls
    return ImportedRow(
        where=where, model="unknown", device="", devices=None, engine="openai", dtype="auto",
        input_len=max(1, round(in_len)), output_len=max(1, round(out_len)), load=load, summaries=summaries,
        scalars=scalars, unmapped=unmapped,
        definitions=["inference-perf's time_per_output_token is (last - first token) / (output - 1): infbench's TPOT",
                     "inference-perf's inter_token_latency pools chunk gaps: kept unmapped",
                     "output_tok_s from the server's output_tokens over benchmark_time_seconds; inference-perf's "
                     "output_tokens_per_sec (client re-tokenized) kept unmapped"],
        lengths="fixed" if fixed else "mean", n_in_total=n_in, n_out_total=n_out, completed=completed, failed=failed)
