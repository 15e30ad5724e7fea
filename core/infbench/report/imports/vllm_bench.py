"""``vllm bench serve --save-result``: one JSON object per run (``vllm/benchmarks/serve.py``).

vLLM's definitions (its ``calculate_metrics``): TTFT, E2E (``e2el``) and TPOT per request,
TPOT = (latency - TTFT) / (output tokens - 1), as infbench's; ITL = the gaps between
*chunks* as they arrive, pooled (a chunk of k tokens is one gap; infbench counts k
entries, k - 1 of them 0); percentiles linearly interpolated (``np.percentile``), as
infbench's; ``output_throughput`` = output tokens / ``duration``, ``total_token_throughput``
= (input + output) / ``duration``, where ``duration`` runs from the benchmark's start to
the last response (infbench: first send to last token); ``request_throughput`` = completed /
duration. All times in ms (``*_ms``); infbench stores s.

Mapping (docs/metrics.md): ``{mean,median,p90,p99}_{ttft,tpot,e2el}_ms`` -> ``ttft_s``,
``tpot_s``, ``e2e_s`` (mean, p50, p90, p99); ``output_throughput``, ``total_token_throughput``,
``request_throughput``, ``duration`` -> ``output_tok_s``, ``total_tok_s``, ``request_s``,
``duration_s``; the token totals and counts; the load (``max_concurrency``,
``request_rate``, ``burstiness``). Kept as they came: ITL (chunk gaps), ``std_*``, other
percentiles, ``request_goodput``, ``max_output_tokens_per_s``, ``max_concurrent_requests``
and anything else numeric. The per-request arrays (``ttfts``, ``itls``, ``input_lens``...)
are read for the lengths and checks, not stored.

Older versions (``benchmarks/benchmark_serving.py``, before ``vllm bench``) wrote
``model_id``/``tokenizer_id`` and no ``endpoint_type``, and named the P99 figures the same
way; versions before 0.6 lack ``median_*``. Both read.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.inputs import read_text, strict_json
from infbench.report.imports.common import ImportedRow, check_row, number, refuse, whole

MAX_BYTES = 512 << 20
#: vLLM's statistics -> infbench's.
STATS = {"mean": "mean", "median": "p50", "p50": "p50", "p90": "p90", "p99": "p99"}
LATENCIES = {"ttft": M.TTFT.key, "tpot": M.TPOT.key, "e2el": M.E2E.key}
#: Per-request arrays: read, not stored.
ARRAYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times", "latencies",
          "queue_times")
#: Scalars mapped (their vLLM names).
SCALARS = {"duration": M.DURATION.key, "output_throughput": M.OUTPUT_TOK_S.key,
           "total_token_throughput": M.TOTAL_TOK_S.key, "request_throughput": M.REQUEST_S.key}


def read(path: str | Path) -> tuple[list[ImportedRow], dict[str, Any]]:
    """Parse and check one ``vllm bench serve`` result (see the module doc).

    Returns:
        ``(rows, info)``: one row, ``{"tool_version": None}`` (vLLM writes no version;
        its ``date`` is kept).

    Raises:
        ConfigError: not vLLM's result JSON, or figures that contradict themselves.
    """
    p = Path(path)
    d = strict_json(read_text(p, "vllm bench serve result", MAX_BYTES), str(p))
    where = f"{p}"
    if not isinstance(d, dict) or ("completed" not in d and "output_throughput" not in d):
        raise refuse(where, "not the JSON `vllm bench serve --save-result` writes (no 'completed', "
                            "'output_throughput')")
    r = _row(d, where)
    check_row(r)
    return [r], {"tool_version": d.get("vllm_version")}


def _row(d: dict[str, Any], where: str) -> ImportedRow:
    completed = whole(d.get("completed"), "completed", where, required=True)
    failed = whole(d.get("failed", 0), "failed", where) or 0
    assert completed is not None
    if completed == 0:
        raise refuse(where, "no request completed; nothing was measured")
    scalars = {k: v for name, k in SCALARS.items() if (v := number(d.get(name), name, where)) is not None}
    if M.OUTPUT_TOK_S.key not in scalars:
        raise refuse(where, "'output_throughput' is missing")
    summaries: dict[str, dict[str, float]] = {}
    for stem, key in LATENCIES.items():
        s = {}
        for vs, st in STATS.items():
            v = number(d.get(f"{vs}_{stem}_ms"), f"{vs}_{stem}_ms", where)
            if v is not None:
                s[st] = v / 1e3
        if s:
            s["count"] = completed
            summaries[key] = s
    n_in = number(d.get("total_input_tokens"), "total_input_tokens", where)
    n_out = number(d.get("total_output_tokens"), "total_output_tokens", where)
    ins = [x for x in d.get("input_lens") or [] if isinstance(x, (int, float))]
    outs = [x for x in d.get("output_lens") or [] if isinstance(x, (int, float)) and x > 0]
    if any(x < 0 for x in ins + [y for y in d.get("output_lens") or [] if isinstance(y, (int, float))]):
        raise refuse(where, "a negative length in input_lens/output_lens")
    fixed = bool(ins and outs and len(set(ins)) == 1 and len(set(outs)) == 1)
    in_len = round(statistics.fmean(ins)) if ins else round((n_in or 0) / completed)
    out_len = round(statistics.fmean(outs)) if outs else round((n_out or 0) / completed)
    if in_len < 1 or out_len < 1:
        raise refuse(where, "no input or output tokens: the lengths cannot be known")
    load: dict[str, Any] = {"num_requests": completed + failed}
    conc = d.get("max_concurrency")
    rate = d.get("request_rate")
    if conc is not None:
        load.update(mode="concurrency", concurrency=whole(conc, "max_concurrency", where, lo=1))
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate not in (float("inf"),) and rate > 0:
        load.update(mode="rate", request_rate=float(rate))
        if d.get("burstiness") is not None:
            load["burstiness"] = number(d["burstiness"], "burstiness", where) or 1.0
    elif conc is None:
        load.update(mode="batch")  # every request at once (request rate inf, no cap)
    unmapped: dict[str, Any] = {}
    mapped = {f"{vs}_{stem}_ms" for vs in STATS for stem in LATENCIES} | set(SCALARS) | {
        "completed", "failed", "total_input_tokens", "total_output_tokens", "max_concurrency", "request_rate",
        "burstiness", "num_prompts"}
    for k, v in d.items():
        if k in mapped or k in ARRAYS:
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            unmapped[k] = number(v, k, where, lo=None)
    definitions = ["TTFT, TPOT, E2E: vLLM's definitions are infbench's; ms -> s; median -> p50",
                   "ITL kept as *_itl_ms under unmapped: vLLM's ITL is the gap between chunks, not per token",
                   "duration: vLLM's runs from the benchmark's start to the last response"]
    model = str(d.get("model_id") or d.get("model") or "unknown")
    return ImportedRow(
        where=where, model=model, device="", devices=None, engine=str(d.get("backend") or "openai"), dtype="auto",
        input_len=in_len, output_len=out_len, load=load, summaries=summaries, scalars=scalars, unmapped=unmapped,
        definitions=definitions, lengths="fixed" if fixed else "mean", n_in_total=n_in, n_out_total=n_out,
        completed=completed, failed=failed,
        extra={k: d[k] for k in ("date", "endpoint_type", "backend", "label", "tokenizer_id", "num_prompts")
               if d.get(k) is not None})
