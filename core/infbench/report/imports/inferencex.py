"""SemiAnalysis InferenceX's result rows: the JSON list its public API serves
(``/api/v1/benchmarks``; a copy in ``SemiAnalysisAI/InferenceX-app``
``packages/app/cypress/fixtures/api/benchmarks.json``), one object per (hardware,
framework, model, precision, parallelism, ISL, OSL, concurrency).

How InferenceX computes its figures (``utils/process_result.py`` of
SemiAnalysisAI/InferenceX, from ``vllm bench serve``'s result JSON):

* ``tput_per_gpu`` = total (input + output) tok/s / GPUs; aggregated: / tp; disaggregated
  (multi-node): / (prefill GPUs + decode GPUs);
* ``output_tput_per_gpu`` = output tok/s / tp, or / decode GPUs when disaggregated;
  ``input_tput_per_gpu`` = input tok/s / tp, or / prefill GPUs;
* every ``*_ms`` figure of vLLM divided by 1000 (seconds); ``*_intvty`` = 1000 / the same
  statistic of TPOT in ms (so ``median_intvty`` = 1 / median TPOT, InferenceX's x axis, and
  ``std_intvty`` = 1 / std TPOT, which is no statistic of interactivity);
* TPOT and ITL as vLLM defines them: TPOT (E2E - TTFT) / (output - 1) per request; ITL the
  gaps between *chunks* as they arrive (a server streaming 10 tokens per chunk gives ITLs
  10x its TPOT); percentiles linearly interpolated (numpy).

Mapping (docs/metrics.md): TTFT, TPOT, E2E (``e2el``) to infbench's ``ttft_s``,
``tpot_s``, ``e2e_s`` (mean, p50 = median, p90, p99); total and output tok/s = the per-GPU
figures times their own denominators; ``tok_s_per_user`` = ``median_intvty`` (checked
against 1 / median TPOT); power (``avg_power_w`` per GPU) times GPUs; ``j_per_token`` =
``joules_per_total_token``. Kept under their own names: ITL (chunk gaps, not infbench's
per-token ITL), ``std_*``, ``p99.9_*``, ``*_intvty`` other than the median, the per-GPU
figures of disaggregated rows (their denominators differ), ``input_tput_per_gpu``, and
any figure not listed here. InferenceX's ``conc`` is the client's max concurrency; its
ISL/OSL are the configured lengths, each request drawn in ``[0.8 L, L]``
(``--random-range-ratio 0.8``), so lengths are stored as ``mean`` with that range.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.inputs import read_text, strict_json
from infbench.report.imports.common import ImportedRow, check_row, number, refuse, whole

#: Largest file read (the API's full answer is a few MB).
MAX_BYTES = 256 << 20
#: InferenceX's model keys -> the model (a zoo name where the zoo has it, else the HF id).
MODELS = {"llama70b": "llama-3.3-70b", "dsr1": "deepseek-ai/DeepSeek-R1", "gptoss": "openai/gpt-oss-120b",
          "gptoss120b": "openai/gpt-oss-120b", "dsv4": "deepseek-ai/DeepSeek-V4", "qwen3.5": "Qwen/Qwen3.5",
          "kimik2.5": "moonshotai/Kimi-K2.5", "minimaxm2.5": "MiniMaxAI/MiniMax-M2.5"}
#: InferenceX's frameworks -> infbench's engine names (others kept, lower case).
ENGINES = {"vllm": "vllm-server", "sglang": "sglang-server", "trt": "trtllm-serve", "trtllm": "trtllm-serve"}
#: The statistics InferenceX names, as infbench names them.
STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}
#: InferenceX's metric stems -> infbench's per-request metrics.
LATENCIES = {"ttft": M.TTFT.key, "tpot": M.TPOT.key, "e2el": M.E2E.key}
#: The identity fields of a row (everything else but ``metrics`` is kept in ``extra``).
IDENTITY = ("hardware", "framework", "model", "precision", "isl", "osl", "conc")
#: InferenceX's ``--random-range-ratio``: each request's lengths in [0.8 L, L].
RANGE_RATIO = 0.8


def read(path: str | Path) -> tuple[list[ImportedRow], dict[str, Any]]:
    """Parse and check an InferenceX result file (see the module doc).

    Returns:
        ``(rows, info)``: the checked rows and ``{"tool_version": None}`` (the API gives
        none; each row's ``date`` and ``run_url`` are kept).

    Raises:
        ConfigError: not JSON, not a list of rows, a row missing its identity or its
            throughput, or a row that contradicts itself (``FILE, row N: reason``).
    """
    p = Path(path)
    data = strict_json(read_text(p, "InferenceX file", MAX_BYTES), str(p))
    if isinstance(data, dict):  # the API's envelope, where present
        data = data.get("data", data.get("benchmarks", data))
    if not isinstance(data, list) or not data:
        raise refuse(str(p), "not a list of InferenceX result rows (the JSON /api/v1/benchmarks serves)")
    rows = [_row(r, f"{p}, row {i}") for i, r in enumerate(data, 1)]
    for r in rows:
        check_row(r)
    return rows, {"tool_version": None}


def _row(r: Any, where: str) -> ImportedRow:
    if not isinstance(r, dict):
        raise refuse(where, "not a result object")
    missing = [k for k in IDENTITY if r.get(k) in (None, "")]
    if missing:
        raise refuse(where, f"lacks {', '.join(missing)} (every InferenceX row names its hardware, framework, model, "
                            "precision, ISL, OSL and concurrency)")
    m = r.get("metrics")  # metrics-dict: an InferenceX result row's own "metrics" object (its names)
    if not isinstance(m, dict):
        raise refuse(where, "has no 'metrics' object")
    isl, osl, conc = (whole(r[k], k, where, lo=1) for k in ("isl", "osl", "conc"))
    assert isl is not None and osl is not None and conc is not None
    disagg = bool(r.get("disagg"))
    if "prefill_tp" in r or "decode_tp" in r:  # the v2 layout (2025-12-19 on)
        ptp = whole(r.get("prefill_tp", 1), "prefill_tp", where, lo=1) or 1
        dtp = whole(r.get("decode_tp", 1), "decode_tp", where, lo=1) or 1
        npg = whole(r.get("num_prefill_gpu", ptp), "num_prefill_gpu", where, lo=1) or ptp
        ndg = whole(r.get("num_decode_gpu", dtp), "num_decode_gpu", where, lo=1) or dtp
        for n, tp, side in ((npg, ptp, "prefill"), (ndg, dtp, "decode")):
            if n % tp:
                raise refuse(where, f"num_{side}_gpu {n} is not a multiple of {side}_tp {tp}: the GPU count does "
                                    "not divide into whole workers")
            workers = whole(r.get(f"{side}_num_workers") or 0, f"{side}_num_workers", where)
            if workers and n != tp * workers:
                raise refuse(where, f"num_{side}_gpu {n} is not {side}_tp {tp} x {side}_num_workers {workers}")
    else:  # v1: one tp for both
        tp = whole(r.get("tp", 1), "tp", where, lo=1) or 1
        ptp = dtp = npg = ndg = tp
    if not disagg and npg != ndg:
        raise refuse(where, f"an aggregated row (disagg false) with {npg} prefill and {ndg} decode GPUs; the same GPUs "
                            "serve both")
    gpus = npg + ndg if disagg else ndg
    vals = {k: number(v, k, where) for k, v in m.items() if not isinstance(v, (dict, list))}
    tput = vals.get("tput_per_gpu")
    if tput is None:
        raise refuse(where, "metrics lack tput_per_gpu (InferenceX's y axis)")
    out_g, in_g = vals.get("output_tput_per_gpu"), vals.get("input_tput_per_gpu")
    definitions = [
        "TTFT, TPOT, E2E: vLLM's definitions, in s (InferenceX divided vLLM's ms by 1000); median -> p50",
        f"tok/s per device: InferenceX's tput_per_gpu counts input and output tokens over "
        f"{'prefill + decode GPUs' if disagg else 'tp GPUs'} ({gpus})",
        "tok/s/user: InferenceX's median_intvty = 1 / median TPOT",
        "ITL kept as itl_* under unmapped: vLLM's ITL is the gap between chunks, not per token"]
    total = tput * gpus
    scalars: dict[str, float] = {M.TOTAL_TOK_S.key: total, M.TOK_S_PER_DEVICE.key: tput}
    unmapped: dict[str, Any] = {}
    if out_g is not None and in_g is not None:
        # tput_per_gpu x GPUs = input_tput_per_gpu x prefill GPUs + output_tput_per_gpu x decode GPUs
        parts = in_g * (npg if disagg else gpus) + out_g * (ndg if disagg else gpus)
        if abs(parts - total) > 0.02 * max(total, 1e-9):
            raise refuse(where, f"tput_per_gpu {tput:g} x {gpus} GPUs = {total:g} tok/s, but input_tput_per_gpu "
                                f"{in_g:g} and output_tput_per_gpu {out_g:g} add up to {parts:g} tok/s")
        out_total = out_g * (ndg if disagg else gpus)
        scalars[M.OUTPUT_TOK_S.key] = out_total
        scalars[M.OUTPUT_TOK_S_PER_DEVICE.key] = out_total / gpus
        if disagg:
            unmapped["output_tput_per_gpu"] = out_g  # per decode GPU: another denominator
            definitions.append(f"disaggregated: output tok/s = output_tput_per_gpu x {ndg} decode GPUs, "
                               f"per device over all {gpus}; InferenceX's per-decode-GPU figure kept as it came")
        unmapped["input_tput_per_gpu"] = in_g
    summaries: dict[str, dict[str, float]] = {}
    for stem, key in LATENCIES.items():
        s = {STATS[st]: v for st in STATS if (v := vals.get(f"{st}_{stem}")) is not None}
        if s:
            summaries[key] = s
    med_tpot = summaries.get(M.TPOT.key, {}).get("p50")
    iv = vals.get("median_intvty")
    if iv is not None and med_tpot:
        if abs(iv * med_tpot - 1) > 0.02:
            raise refuse(where, f"median_intvty {iv:g} tok/s/user is not 1 / median_tpot {med_tpot:g} s "
                                f"= {1 / med_tpot:g}")
        scalars[M.TOK_S_PER_USER.key] = iv
    power = vals.get("avg_power_w")
    if power is not None:
        scalars[M.AVG_POWER.key] = power * gpus
        jpt = vals.get("joules_per_total_token")
        if jpt is not None:
            if abs(jpt * tput - power) > 0.02 * power:
                raise refuse(where, f"joules_per_total_token {jpt:g} J x tput_per_gpu {tput:g} tok/s = "
                                    f"{jpt * tput:g} W, but avg_power_w (per GPU) is {power:g} W")
            scalars[M.J_PER_TOKEN.key] = jpt
        definitions.append(f"power: InferenceX's avg_power_w is per GPU; average power = x {gpus} GPUs")
    mapped = {f"{st}_{stem}" for stem in LATENCIES for st in STATS} | {
        "tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu", "median_intvty", "avg_power_w",
        "joules_per_total_token"}
    for k, v in m.items():
        if k not in mapped:
            unmapped[k] = v
    extra = {k: v for k, v in r.items() if k not in (*IDENTITY, "metrics")}
    model = str(r["model"])
    return ImportedRow(
        where=where, model=MODELS.get(model, model), device=str(r["hardware"]), devices=gpus,
        engine=ENGINES.get(str(r["framework"]).lower(), str(r["framework"]).lower()), dtype=str(r["precision"]),
        input_len=isl, output_len=osl, load={"mode": "concurrency", "concurrency": conc}, summaries=summaries,
        scalars=scalars, unmapped=unmapped, definitions=definitions,
        extra={**extra, "inferencex_model": model}, lengths="mean", len_range=RANGE_RATIO,
        device_props={"prefill_gpus": npg, "decode_gpus": ndg} if disagg else {})
