"""MLPerf Inference's ``summary.csv`` (the table every ``mlcommons/inference_results_vX.Y``
repository carries at its root: one row per system, benchmark and scenario).

What a row says, and what it does not (MLPerf Inference rules, ``inference_policies``):

* ``Result`` in ``Units``: for the LLM benchmarks ``Tokens/s`` is the whole system's
  *generated* tokens per second (LoadGen's "completed tokens per second"), Offline at its
  peak, Server and Interactive at the highest Poisson arrival rate whose TTFT and TPOT p99
  meet the benchmark's limits (llama2-70b Server: TTFT 2 s, TPOT 200 ms; Interactive 450 ms
  and 40 ms); ``Samples/s`` and ``Queries/s`` count requests;
* percentiles are LoadGen's, taken by nearest rank (vLLM and infbench interpolate): no
  latency figure is in ``summary.csv`` at all, only the system throughput;
* no input or output lengths and no concurrency: the dataset is fixed per benchmark (Open
  Orca for llama2-70b, 24,576 samples, up to 1,024 tokens in and out); the mean output
  length is the ``TOKENS_PER_SAMPLE`` (or ``GEN_LEN``) of the ``Accuracy`` column.

Mapping (docs/metrics.md): ``Tokens/s`` -> ``output_tok_s`` of the system and
``output_tok_s_per_device`` = ``Result / total_accelerators``; ``Samples/s``/``Queries/s``
-> ``request_s``. ``Offline`` is stored as a batch-mode cell (every sample issued at once),
``Server`` and ``Interactive`` as rate-mode cells, the scenario, its latency limits, the
system and the accuracy in the engine's ``extra``. The output length is the accuracy run's
mean (``lengths: unpublished``); the input length is not published: ``input_len`` 1 stands
for "unknown" and no figure is derived from it. Rows of non-LLM benchmarks (DLRM,
Whisper, vision, video) are not imported; the summary counts them.

Refused (nothing stored): a ``Result`` that is missing, not a number, NaN or not above 0;
``total_accelerators`` that is not ``accelerators_per_node`` x ``number_of_nodes`` (a GPU
count that does not divide); a system with accelerators whose count is 0. Older layouts
without ``total_accelerators`` get it from the two others. A system of unlike
accelerators (``NVIDIA H200-SXM-141GB + AMD Instinct MI350X``) is imported marked
``mixed`` with no catalog device, its per-device figure an average over unlike devices.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.inputs import read_text
from infbench.report.imports.common import ImportedRow, check_row, number, refuse, whole

MAX_BYTES = 64 << 20
#: MLPerf's LLM benchmarks (``MlperfModel`` without its accuracy suffix) -> the model.
MODELS = {"llama2-70b": "llama-2-70b", "llama3.1-8b": "llama-3.1-8b", "llama3_1-8b": "llama-3.1-8b",
          "llama3.1-8b-edge": "llama-3.1-8b", "llama3.1-405b": "meta-llama/Llama-3.1-405B-Instruct",
          "mixtral-8x7b": "mixtral-8x7b", "deepseek-r1": "deepseek-ai/DeepSeek-R1",
          "gpt-oss-120b": "openai/gpt-oss-120b", "gptj": "EleutherAI/gpt-j-6b", "gpt-j": "EleutherAI/gpt-j-6b"}
#: Latency limits (TTFT p99 s, TPOT p99 s) per benchmark and scenario (MLPerf Inference rules;
#: the reference implementation's README for llama2-70b Interactive).
LIMITS = {("llama2-70b", "Server"): (2.0, 0.2), ("llama2-70b", "Interactive"): (0.45, 0.04)}
#: Columns every layout has (under one of its names).
REQUIRED = ("Organization", "SystemName", "MlperfModel", "Scenario", "Result", "Units")
#: Column names of other versions -> this layout's.
ALIASES = {"Model MLC": "MlperfModel", "Accelerator": "accelerator_model_name",
           "# of Accelerators": "total_accelerators", "# of Nodes": "number_of_nodes", "System Name": "SystemName",
           "Performance Result": "Result"}
_TOKENS = re.compile(r"(TOKENS_PER_SAMPLE|GEN_LEN):\s*([0-9.]+)")


def _benchmark(name: str) -> str:
    """``llama2-70b-99.9`` -> ``llama2-70b`` (the accuracy target is not the workload)."""
    return re.sub(r"-(99(\.9)?)$", "", name.strip().lower())


def _engine(framework: str) -> str:
    """The engine of a row's ``framework`` text (``TensorRT 10.14, CUDA 13.1`` -> ``trtllm``)."""
    f = framework.lower()
    for key, name in (("tensorrt", "trtllm"), ("vllm", "vllm"), ("sglang", "sglang"), ("pytorch", "pytorch")):
        if key in f:
            return name
    return (f.split(",")[0].split()[0] if f.strip() else "mlperf")[:40]


def read(path: str | Path) -> tuple[list[ImportedRow], dict[str, Any]]:
    """Parse and check a ``summary.csv`` (see the module doc).

    Returns:
        ``(rows, info)``: the LLM rows, and ``{"tool_version": the MLPerf round, "skipped":
        {benchmark: rows}}`` for the rows of other benchmarks.

    Raises:
        ConfigError: not this layout, or a row that contradicts itself (``FILE, line N:
            reason``).
    """
    p = Path(path)
    text = read_text(p, "MLPerf summary.csv", MAX_BYTES, hint="pass the summary.csv of an inference_results_vX.Y "
                                                             "repository")
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[ImportedRow] = []
    skipped: dict[str, int] = {}
    versions: set[str] = set()
    for values in reader:
        if not values or not any(v.strip() for v in values):
            continue
        where = f"{p}, line {reader.line_num}"
        if header is None:
            header = [ALIASES.get(h.strip(), h.strip()) for h in values]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise refuse(where, f"the header lacks {', '.join(missing)}: not MLPerf Inference's summary.csv")
            continue
        if len(values) != len(header):
            raise refuse(where, f"{len(values)} values for {len(header)} columns")
        r = dict(zip(header, (v.strip() for v in values), strict=True))
        bench = _benchmark(r["MlperfModel"] or r.get("Model", ""))
        if bench not in MODELS:
            skipped[bench] = skipped.get(bench, 0) + 1
            continue
        if r.get("version"):
            versions.add(r["version"])
        rows.append(_row(r, bench, where))
    if header is None:
        raise refuse(str(p), "empty: no header and no rows")
    for row in rows:
        check_row(row)
    return rows, {"tool_version": ", ".join(sorted(versions)) or None, "skipped": skipped}


def _row(r: dict[str, str], bench: str, where: str) -> ImportedRow:
    result = number(r["Result"] or None, "Result", where, required=True, lo=None)
    assert result is not None
    if result <= 0:
        raise refuse(where, f"'Result' is {r['Result']}; a throughput is above 0")
    nodes = whole(r.get("number_of_nodes") or 1, "number_of_nodes", where, lo=1) or 1
    per_node = whole(r.get("accelerators_per_node") or 0, "accelerators_per_node", where) or 0
    total = whole(r.get("total_accelerators"), "total_accelerators", where) if r.get("total_accelerators") else None
    if total is None:
        total = per_node * nodes
    elif total != per_node * nodes:
        raise refuse(where, f"total_accelerators {total} is not accelerators_per_node {per_node} x number_of_nodes "
                            f"{nodes}: the accelerator count does not divide over the nodes")
    accel = r.get("accelerator_model_name", "").strip()
    props: dict[str, Any] = {"system": r["SystemName"], "organization": r["Organization"]}
    if total == 0:
        if accel and accel.upper() not in ("N/A", "NONE", ""):
            raise refuse(where, f"accelerator {accel!r} with total_accelerators 0")
        sockets = whole(r.get("host_processors_per_node") or 1, "host_processors_per_node", where, lo=1) or 1
        devices, device = sockets * nodes, f"CPU: {r.get('host_processor_model_name') or 'CPU'}"
    else:
        devices, device = total, accel
        if " + " in accel:
            props["mixed"] = [a.strip() for a in accel.split(" + ")]
    units = r["Units"].strip()
    scalars: dict[str, float] = {}
    unmapped: dict[str, Any] = {}
    definitions = [f"MLPerf {r['Scenario']}: LoadGen's figure for the whole system ({devices} devices)"]
    u = units.lower()
    if u == "tokens/s":
        scalars[M.OUTPUT_TOK_S.key] = result
        definitions.append("Tokens/s: generated (output) tokens per second of the system -> output_tok_s; "
                           "per device = Result / total_accelerators")
    elif u in ("samples/s", "queries/s"):
        scalars[M.REQUEST_S.key] = result
        definitions.append(f"{units}: completed requests per second -> request_s")
    else:
        unmapped[f"Result ({units})"] = result
    m = _TOKENS.search(r.get("Accuracy", ""))
    out_len = max(1, round(float(m.group(2)))) if m and m.group(1) == "TOKENS_PER_SAMPLE" else 1
    if m and m.group(1) == "GEN_LEN":
        unmapped["GEN_LEN"] = float(m.group(2))
    scen = r["Scenario"].strip()
    load: dict[str, Any] = {"mode": "batch"} if scen.lower() == "offline" else {"mode": "rate"}
    if load["mode"] == "rate" and out_len > 1 and u == "tokens/s":
        load["request_rate"] = result / out_len
    limits = LIMITS.get((bench, scen))
    extra: dict[str, Any] = {
             "scenario": scen, "benchmark": r["MlperfModel"], "units": units, "accuracy": r.get("Accuracy"),
             "framework": r.get("framework"), "division": r.get("Division"), "availability": r.get("Availability"),
             "version": r.get("version"), "location": r.get("Location"), "nodes": nodes}
    if limits:
        extra["latency_limits_p99_s"] = {"ttft": limits[0], "tpot": limits[1]}
    definitions.append("lengths: not in summary.csv; output_len = the accuracy run's TOKENS_PER_SAMPLE, "
                       "input_len 1 = unknown")
    return ImportedRow(
        where=where, model=MODELS[bench], device=device, devices=devices, engine=_engine(r.get("framework") or ""),
        dtype=(r.get("weight_data_types") or "auto").replace(" ", ""),
        input_len=1, output_len=out_len, load=load, scalars=scalars, unmapped=unmapped, definitions=definitions,
        extra=extra, lengths="unpublished", device_props=props)
