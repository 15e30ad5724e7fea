"""guidellm's ``benchmarks.json`` (``guidellm run --output kind=json``): ``{"metadata",
"config", "benchmarks": [...]}``, one benchmark per strategy run (a sweep gives several).

guidellm's definitions (``guidellm/schemas/base/request_stats.py``): per request
``time_to_first_token_ms``; ``inter_token_latency_ms`` = (last token - first token) /
(output tokens - 1), which is vLLM's and infbench's **TPOT** (guidellm's "ITL");
``time_per_output_token_ms`` = (last token - request start) / output tokens, the first
token *included* (not infbench's TPOT: kept unmapped); ``request_latency`` in s. Its
distributions (``{successful, errored, incomplete, total}`` each ``{mean, median, ...,
percentiles}``) weight the per-token metrics by tokens (a request's ITL counts once per
token: equal to per request when every output has the same length), and take percentiles
as the nearest rank on the CDF (infbench interpolates). ``output_tokens_per_second`` and
``tokens_per_second`` are time series whose ``mean`` is tokens / the benchmark's
``duration``; its ``requests_per_second`` mean counts completions between the first and
the last (n - 1 over their span): infbench's ``request_s`` is taken as successful requests
/ ``duration`` instead, guidellm's figure kept unmapped.

Mapping (docs/metrics.md): the ``successful`` distributions of ``time_to_first_token_ms``,
``inter_token_latency_ms``, ``request_latency`` -> ``ttft_s``, ``tpot_s``, ``e2e_s`` (mean,
median -> p50, p90, p99, max); ``output_tokens_per_second``/``tokens_per_second`` means ->
``output_tok_s``/``total_tok_s``; ``request_totals`` -> counts; the strategy -> the load
(``concurrent`` streams, ``constant``/``poisson`` rate, ``synchronous`` = 1 in flight).
Every other metric's successful summary is kept under its name in ``metrics.unmapped``.
Older files (guidellm 0.3) keep the strategy under ``args`` instead of ``config``: read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.inputs import read_text, strict_json
from infbench.report.imports.common import ImportedRow, check_row, number, refuse, whole

MAX_BYTES = 1 << 30
LATENCIES = {"time_to_first_token_ms": (M.TTFT.key, 1e-3), "inter_token_latency_ms": (M.TPOT.key, 1e-3),
             "request_latency": (M.E2E.key, 1.0)}
#: What is kept of an unmapped distribution.
KEPT = ("mean", "median", "min", "max", "count", "total_sum")


def read(path: str | Path) -> tuple[list[ImportedRow], dict[str, Any]]:
    """Parse and check a guidellm ``benchmarks.json`` (see the module doc).

    Returns:
        ``(rows, info)``: one row per benchmark, ``{"tool_version": guidellm_version}``.

    Raises:
        ConfigError: not guidellm's report, or a benchmark that contradicts itself.
    """
    p = Path(path)
    d = strict_json(read_text(p, "guidellm benchmarks.json", MAX_BYTES), str(p), max_depth=64)
    if not isinstance(d, dict) or not isinstance(d.get("benchmarks"), list) or not d["benchmarks"]:
        raise refuse(str(p), "not guidellm's benchmarks.json (no 'benchmarks' list)")
    spec = ((d.get("config") or {}).get("spec") or {}) if isinstance(d.get("config"), dict) else {}
    rows = [_row(b, spec, f"{p}, benchmark {i}") for i, b in enumerate(d["benchmarks"], 1)]
    for r in rows:
        check_row(r)
    return rows, {"tool_version": (d.get("metadata") or {}).get("guidellm_version")}


def _dist(m: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    v = m.get(name)
    if v is None:
        return None
    s = v.get("successful") if isinstance(v, dict) else None
    if not isinstance(s, dict):
        raise refuse(where, f"metrics.{name} has no 'successful' distribution")
    return s


def _row(b: Any, spec: dict[str, Any], where: str) -> ImportedRow:
    if not isinstance(b, dict) or not isinstance(b.get("metrics"), dict):  # metrics-dict: guidellm's JSON
        raise refuse(where, "not a benchmark with 'metrics'")
    m = b["metrics"]  # metrics-dict: a guidellm benchmark's own "metrics" object (its names, ms)
    totals = m.get("request_totals") or {}
    completed = whole(totals.get("successful"), "request_totals.successful", where, required=True)
    failed = sum(whole(totals.get(k, 0), f"request_totals.{k}", where) or 0 for k in ("errored", "incomplete"))
    assert completed is not None
    if completed == 0:
        raise refuse(where, "no request succeeded; nothing was measured")
    summaries: dict[str, dict[str, float]] = {}
    for name, (key, scale) in LATENCIES.items():
        s = _dist(m, name, where)
        if s is None:
            continue
        pct = s.get("percentiles") or {}
        vals = {"mean": s.get("mean"), "p50": s.get("median"), "p90": pct.get("p90"), "p99": pct.get("p99"),
                "max": s.get("max")}
        summaries[key] = {st: x * scale for st, v in vals.items()
                          if (x := number(v, f"{name} {st}", where)) is not None}
        summaries[key]["count"] = completed
    if M.TTFT.key not in summaries and M.E2E.key not in summaries:
        raise refuse(where, "neither time_to_first_token_ms nor request_latency: no latency to import")
    dur = number(b.get("duration"), "duration", where)
    if dur is None:
        t0, t1 = number(b.get("start_time"), "start_time", where), number(b.get("end_time"), "end_time", where)
        dur = t1 - t0 if t0 is not None and t1 is not None else None
    scalars: dict[str, float] = {}
    if dur:
        scalars[M.DURATION.key] = dur
        scalars[M.REQUEST_S.key] = completed / dur
    for name, key in (("output_tokens_per_second", M.OUTPUT_TOK_S.key), ("tokens_per_second", M.TOTAL_TOK_S.key)):
        s = _dist(m, name, where)
        if s is not None and (v := number(s.get("mean"), f"{name} mean", where)) is not None:
            scalars[key] = v
    pin, pout = _dist(m, "prompt_token_count", where) or {}, _dist(m, "output_token_count", where) or {}
    in_len, out_len = number(pin.get("mean"), "prompt_token_count mean", where), number(
        pout.get("mean"), "output_token_count mean", where)
    if not in_len or not out_len:
        raise refuse(where, "no prompt_token_count/output_token_count: the lengths cannot be known")
    fixed = pin.get("min") == pin.get("max") and pout.get("min") == pout.get("max")
    strat = ((b.get("config") or {}).get("strategy") or (b.get("args") or {}).get("strategy") or {})
    kind = str(strat.get("type_") or strat.get("kind") or "")
    load: dict[str, Any] = {"num_requests": completed + failed}
    if kind == "concurrent":
        load.update(mode="concurrency", concurrency=whole(strat.get("streams"), "strategy.streams", where, lo=1))
    elif kind == "synchronous":
        load.update(mode="concurrency", concurrency=1)
    elif kind in ("constant", "poisson", "async"):
        load.update(mode="rate", request_rate=number(strat.get("rate"), "strategy.rate", where))
    else:
        load.update(mode="batch")
    unmapped: dict[str, Any] = {}
    for name, v in m.items():
        if name in LATENCIES or not isinstance(v, dict) or not isinstance(v.get("successful"), dict):
            continue
        s = v["successful"]
        kept = {k: s.get(k) for k in KEPT if k in s}
        pct = s.get("percentiles") or {}
        kept.update({k: pct[k] for k in ("p50", "p90", "p99") if k in pct})
        unmapped[name] = kept
    backend = spec.get("backend") or {}
    model = str(backend.get("model") or (b.get("config") or {}).get("model") or "unknown")
    return ImportedRow(
        where=where, model=model, device="", devices=None, engine="openai", dtype="auto",
        input_len=max(1, round(in_len)), output_len=max(1, round(out_len)), load=load, summaries=summaries,
        scalars=scalars, unmapped=unmapped,
        definitions=["guidellm's inter_token_latency_ms is (last - first token) / (output - 1): infbench's TPOT",
                     "guidellm's time_per_output_token_ms includes the first token: kept unmapped",
                     "percentiles: nearest rank on guidellm's CDF; per-token metrics weighted by tokens",
                     "request_s = successful requests / duration (guidellm's requests_per_second kept unmapped)"],
        lengths="fixed" if fixed else "mean", n_in_total=number(pin.get("total_sum"), "prompt tokens", where),
        n_out_total=number(pout.get("total_sum"), "output tokens", where), completed=completed, failed=failed,
        extra={"strategy": strat, "request_format": backend.get("request_format"), "target": backend.get("target")})
