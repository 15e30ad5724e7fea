"""NVIDIA AIPerf's profile export: ``profile_export_aiperf.json`` (one object per metric,
``{unit, avg, min, max, p1 ... p99, std, count}``, with the run's ``input_config``) and
``profile_export_aiperf.csv`` (the same metrics as rows ``Metric,avg,min,max,sum,p1,...``,
then a ``Metric,Value`` table of scalars); also its predecessor genai-perf's CSV, whose
headers are spelled in title case (``Time To First Token (ms)``).

AIPerf's definitions (``aiperf/metrics/types``): ``time_to_first_token`` and
``request_latency`` as infbench's TTFT and E2E; ``inter_token_latency`` = (request latency -
TTFT) / (output tokens - 1) per request, which is vLLM's and infbench's **TPOT** (AIPerf's
"ITL"); ``inter_chunk_latency`` = gaps between chunks (not infbench's per-token ITL);
``output_token_throughput`` = output tokens / ``benchmark_duration`` (first request to last
response); percentiles by numpy (linear interpolation) or, for long runs, a t-digest, and
"failure-inflated" for metrics flagged so (a failed request counts as +inf).

Mapping (docs/metrics.md): ``time_to_first_token``, ``inter_token_latency``,
``request_latency`` -> ``ttft_s``, ``tpot_s``, ``e2e_s`` (avg -> mean, p50, p90, p99, max;
converted from the metric's own ``unit``); ``output_token_throughput``,
``total_token_throughput``, ``request_throughput``, ``benchmark_duration`` ->
``output_tok_s``, ``total_tok_s``, ``request_s``, ``duration_s``; the totals and counts;
the load from ``input_config`` (the profiling phase's ``concurrency`` or ``request_rate``).
Every other metric is kept as it came, under its tag, in ``metrics.unmapped``.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.inputs import read_text, strict_json
from infbench.report.imports.common import ImportedRow, check_row, number, refuse, whole

MAX_BYTES = 256 << 20
#: AIPerf's per-request tags -> infbench's metrics.
LATENCIES = {"time_to_first_token": M.TTFT.key, "inter_token_latency": M.TPOT.key, "request_latency": M.E2E.key}
#: AIPerf's statistics -> infbench's.
STATS = {"avg": "mean", "p50": "p50", "p90": "p90", "p99": "p99", "max": "max"}
#: AIPerf's scalar tags -> infbench's.
SCALARS = {"output_token_throughput": M.OUTPUT_TOK_S.key, "total_token_throughput": M.TOTAL_TOK_S.key,
           "request_throughput": M.REQUEST_S.key, "benchmark_duration": M.DURATION.key}
#: Tags read for counts and lengths (kept under unmapped too: they are AIPerf's own figures).
COUNTS = ("completed_request_count", "request_count", "error_request_count", "total_osl", "total_isl",
          "total_output_tokens", "input_sequence_length", "output_sequence_length")
#: Time units -> seconds.
UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}
#: CSV headers (lower case, without the unit) -> AIPerf's tags; genai-perf's title-case
#: spellings match once lower-cased.
CSV_TAGS = {"time to first token": "time_to_first_token", "inter token latency": "inter_token_latency",
            "request latency": "request_latency", "output token throughput": "output_token_throughput",
            "total token throughput": "total_token_throughput", "request throughput": "request_throughput",
            "benchmark duration": "benchmark_duration", "request count": "request_count",
            "completed requests (success + error)": "completed_request_count",
            "error request count": "error_request_count", "total output sequence length": "total_osl",
            "total input sequence length": "total_isl", "input sequence length": "input_sequence_length",
            "output sequence length": "output_sequence_length"}
#: AIPerf's CSV prints two decimals: half a unit of the last digit.
CSV_PRINTED = 0.005
_HEADER = re.compile(r"^(.*?)\s*\(([^()]*)\)\s*$")


def read(path: str | Path) -> tuple[list[ImportedRow], dict[str, Any]]:
    """Parse and check an AIPerf profile export, JSON or CSV by its content (see the module doc).

    Returns:
        ``(rows, info)``: one row, ``{"tool_version": aiperf_version}`` (None for the CSV).

    Raises:
        ConfigError: neither layout, or figures that contradict themselves.
    """
    p = Path(path)
    text = read_text(p, "AIPerf export", MAX_BYTES, hint="pass profile_export_aiperf.json or .csv")
    if text.lstrip().startswith("{"):
        d = strict_json(text, str(p))
        if not isinstance(d, dict) or "time_to_first_token" not in d and "request_latency" not in d:
            raise refuse(str(p), "not AIPerf's profile_export_aiperf.json (no time_to_first_token, request_latency)")
        metrics = {k: v for k, v in d.items() if isinstance(v, dict) and "unit" in v}
        row = _row(metrics, d.get("input_config") or {}, str(p))
        version = d.get("aiperf_version")
        row.extra.update({k: d[k] for k in ("schema_version", "benchmark_id", "start_time", "end_time")
                          if d.get(k) is not None})
    else:
        row = _row(_csv_metrics(text, str(p)), {}, str(p))
        row.printed = CSV_PRINTED
        version = None
    check_row(row)
    return [row], {"tool_version": version}


def _csv_metrics(text: str, where: str) -> dict[str, dict[str, Any]]:
    """The CSV's metrics as the JSON holds them: ``{tag: {unit, avg, p50, ...}}``; unknown
    headers keep their text as the tag."""
    out: dict[str, dict[str, Any]] = {}
    header: list[str] | None = None
    for values in csv.reader(io.StringIO(text, newline="")):
        if not values or not any(v.strip() for v in values):
            header = None  # a blank line ends a table
            continue
        if values[0].strip().lower() == "metric":
            header = [v.strip().lower() for v in values]
            continue
        if header is None:
            continue
        name = values[0].strip()
        m = _HEADER.match(name)
        label, unit = (m.group(1), m.group(2)) if m else (name, "")
        tag = CSV_TAGS.get(label.strip().lower(), name)
        entry: dict[str, Any] = {"unit": unit}
        for col, v in zip(header[1:], values[1:]):
            if v.strip() == "":
                continue
            key = "avg" if col == "value" else col
            try:
                entry[key] = float(v)
            except ValueError:
                raise refuse(where, f"metric {name!r}, {col!r} is {v!r}, not a number") from None
        out[tag] = entry
    if "time_to_first_token" not in out and "request_latency" not in out:
        raise refuse(where, "not AIPerf's profile_export_aiperf.csv (no 'Time to First Token', 'Request Latency')")
    return out


def _seconds(unit: str, tag: str, where: str) -> float:
    u = unit.strip().lower()
    if u not in UNITS_S:
        raise refuse(where, f"{tag} has unit {unit!r}; expected ns, us, ms or sec")
    return UNITS_S[u]


def _row(metrics: dict[str, dict[str, Any]], config: dict[str, Any], where: str) -> ImportedRow:
    summaries: dict[str, dict[str, float]] = {}
    for tag, key in LATENCIES.items():
        m = metrics.get(tag)
        if not m:
            continue
        scale = _seconds(str(m.get("unit", "")), tag, where)
        s = {st: v * scale for a, st in STATS.items() if (v := number(m.get(a), f"{tag} {a}", where)) is not None}
        cnt = whole(m.get("count"), f"{tag} count", where)
        if cnt is not None:
            s["count"] = cnt
        summaries[key] = s
    if M.TTFT.key not in summaries and M.E2E.key not in summaries:
        raise refuse(where, "neither time_to_first_token nor request_latency: no latency to import")
    scalars: dict[str, float] = {}
    for tag, key in SCALARS.items():
        m = metrics.get(tag)
        if m and (v := number(m.get("avg"), f"{tag} avg", where)) is not None:
            scalars[key] = v * (_seconds(str(m.get("unit", "")), tag, where) if key == M.DURATION.key else 1.0)

    def avg(tag: str) -> float | None:
        m = metrics.get(tag)
        return number(m.get("avg"), f"{tag} avg", where) if m else None

    completed = avg("completed_request_count")
    if completed is None:
        completed = avg("request_count")
    failed = avg("error_request_count")
    n_out = avg("total_osl") if avg("total_osl") is not None else avg("total_output_tokens")
    n_in = avg("total_isl")
    isl, osl = metrics.get("input_sequence_length") or {}, metrics.get("output_sequence_length") or {}
    in_len = number(isl.get("avg"), "input_sequence_length avg", where)
    out_len = number(osl.get("avg"), "output_sequence_length avg", where)
    if in_len is None or out_len is None:
        raise refuse(where, "no input_sequence_length/output_sequence_length: the lengths cannot be known")
    fixed = isl.get("min") == isl.get("max") and osl.get("min") == osl.get("max") and isl.get("min") is not None
    load: dict[str, Any] = {"mode": "concurrency"}
    phases = [ph for ph in (config.get("phases") or []) if isinstance(ph, dict)]
    prof = next((ph for ph in phases if ph.get("kind") == "profiling" or ph.get("name") == "profiling"), None)
    if prof:
        if prof.get("concurrency"):
            load["concurrency"] = whole(prof["concurrency"], "input_config concurrency", where, lo=1)
        if prof.get("request_rate") or prof.get("rate"):
            load.update(mode="rate", request_rate=number(prof.get("request_rate") or prof.get("rate"),
                                                         "input_config request_rate", where))
        if prof.get("requests"):
            load["num_requests"] = whole(prof["requests"], "input_config requests", where, lo=1)
        warm = next((ph for ph in phases if ph.get("kind") == "warmup"), None)
        if warm and warm.get("requests"):
            load["warmup_requests"] = whole(warm["requests"], "input_config warmup requests", where)
    mapped = set(LATENCIES) | set(SCALARS)
    unmapped = {k: v for k, v in metrics.items() if k not in mapped}
    models = ((config.get("models") or {}).get("items") or [{}])
    model = str((models[0] or {}).get("name") or "unknown") if models else "unknown"
    endpoint = config.get("endpoint") or {}
    return ImportedRow(
        where=where, model=model, device="", devices=None, engine="openai", dtype="auto",
        input_len=max(1, round(in_len)), output_len=max(1, round(out_len)), load=load, summaries=summaries,
        scalars=scalars, unmapped=unmapped,
        definitions=["AIPerf's inter_token_latency is (E2E - TTFT) / (output - 1): infbench's TPOT",
                     "AIPerf's inter_chunk_latency (chunk gaps) kept unmapped",
                     "percentiles: numpy's linear interpolation (t-digest on long runs)",
                     "duration: AIPerf's benchmark_duration, first request to last response"],
        lengths="fixed" if fixed else "mean", n_in_total=n_in, n_out_total=n_out,
        completed=int(completed) if completed is not None else None,
        failed=int(failed) if failed is not None else None,
        extra={k: endpoint[k] for k in ("type", "streaming", "extra") if k in endpoint})
