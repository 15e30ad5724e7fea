"""``infbench export --format inferencex`` and ``--format vllm-bench`` (issue 42): stored cells
in the layouts those tools' users read, each the inverse of its importer
(:mod:`infbench.report.imports.inferencex`, :mod:`infbench.report.imports.vllm_bench`), so
an import of an export gives back the same figures.

* **inferencex**: a JSON list of InferenceX result rows (what its ``/api/v1/benchmarks``
  serves and its app reads), one per ok cell with a concurrency (a serving cell at a fixed
  concurrency, or a batch cell: its batch is its concurrency): ``hardware`` (InferenceX's
  key where the catalog device is one it knows, else the device's model), ``framework``,
  ``model`` (the zoo name), ``precision``, the v2 parallelism fields (aggregated: tp GPUs
  serve prefill and decode), ``isl``/``osl``/``conc``, ``metrics`` in InferenceX's
  definitions (latencies in s; ``tput_per_gpu`` = (input + output) tok/s / devices;
  ``*_intvty`` = 1 / the TPOT statistic; ``avg_power_w`` per GPU), ``date`` and ``run_url``
  null. A disaggregated imported row goes back disaggregated.
* **vllm-bench**: one JSON file per ok serving cell, the keys ``vllm bench serve
  --save-result`` writes (``completed``, ``duration``, ``output_throughput``,
  ``{mean,median,p90,p99}_{ttft,tpot,itl,e2el}_ms``...), plus ``infbench_cell_id``. infbench's
  ITL (per token) is written as vLLM's ``*_itl_ms``, which is the same where the server streams
  one token per chunk.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from infbench.data import metrics as M
from infbench.data.outputs import OutputKind, starts_with
from infbench.data.stored import StoredCell
from infbench.report.imports.common import HARDWARE

#: ``export --format inferencex --out``: an earlier export is a JSON list of rows.
INFERENCEX_JSON = OutputKind("export --format inferencex", "--out", starts_with(b'[{"hardware"', b"[]"))
#: ``export --format vllm-bench --out DIR``: each file is one vLLM result.
VLLM_BENCH_JSON = OutputKind("export --format vllm-bench", "--out", starts_with(b'{"date"'))
#: infbench engines -> InferenceX's framework names.
FRAMEWORKS = {"vllm-server": "vllm", "vllm": "vllm", "sglang-server": "sglang", "trtllm-serve": "trt"}
#: catalog ids -> InferenceX's hardware keys.
CATALOG_TO_IX = {cid: key for key, (cid, *_rest) in HARDWARE.items() if cid}
#: infbench's statistics -> InferenceX's and vLLM's prefixes.
STATS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}


def _conc(r: StoredCell) -> int | None:
    ld = r.spec.get("load") or {}
    if ld.get("mode") == "concurrency" and ld.get("concurrency"):
        return int(ld["concurrency"])
    if not ld or ld.get("mode") == "batch":
        return int(r.spec["batch"])
    return None


def inferencex_rows(rows: Sequence[StoredCell]) -> list[dict[str, Any]]:
    """InferenceX result rows of ok cells with a concurrency and a TPOT (see the module doc).

    Args:
        rows: ``Store.results()`` items.
    """
    out = []
    for r in rows:
        m = r.metrics or {}
        conc = _conc(r)
        if r.status != "ok" or conc is None or M.TOTAL_TOK_S.key not in m:
            continue
        s, dev = r.spec, r.device or {}
        props = dev.get("properties") or {}
        eng = r.engine or {}
        devs = int(M.DEVICES_USED.value(m) or s.get("tensor_parallel_size") or 1)
        pre, dec = props.get("prefill_gpus"), props.get("decode_gpus")
        disagg = bool(pre and dec)
        tp = int(s.get("tensor_parallel_size") or 1) if not disagg else 1
        hw = CATALOG_TO_IX.get(props.get("catalog_id") or "") or props.get("published_name") or (
            f"cpu: {dev.get('model')}" if dev.get("kind") == "cpu" else dev.get("model"))
        total, outp = M.TOTAL_TOK_S.value(m), M.OUTPUT_TOK_S.value(m)
        met: dict[str, Any] = {"tput_per_gpu": total / devs}
        if outp is not None:
            met["output_tput_per_gpu"] = outp / (dec if disagg else devs)
            met["input_tput_per_gpu"] = (total - outp) / (pre if disagg else devs)
        for metric, stem in ((M.TTFT, "ttft"), (M.TPOT, "tpot"), (M.E2E, "e2el")):
            for st, name in STATS.items():
                v = metric.value(m, st)
                if v is not None:
                    met[f"{name}_{stem}"] = v
                    if stem == "tpot" and v > 0:
                        met[f"{name}_intvty"] = 1.0 / v
        power, j_per_token = M.AVG_POWER.value(m), M.J_PER_TOKEN.value(m)
        if power is not None:
            met["avg_power_w"] = power / devs
            if j_per_token is not None:
                met["joules_per_total_token"] = j_per_token
            else:
                met["joules_per_total_token"] = met["avg_power_w"] / met["tput_per_gpu"]
        extra = eng.get("extra") or {}
        finished = r.finished_at or time.time()
        out.append({
            "hardware": hw, "framework": FRAMEWORKS.get(s["engine"], s["engine"]),
            "model": extra.get("inferencex_model") or s["model"], "precision": s["dtype"],
            "spec_method": extra.get("spec_method", "none"), "disagg": disagg, "is_multinode": disagg,
            "prefill_tp": extra.get("prefill_tp", tp), "prefill_ep": extra.get("prefill_ep", 1),
            "prefill_dp_attention": extra.get("prefill_dp_attention", False),
            "prefill_num_workers": extra.get("prefill_num_workers", 0),
            "decode_tp": extra.get("decode_tp", tp), "decode_ep": extra.get("decode_ep", 1),
            "decode_dp_attention": extra.get("decode_dp_attention", False),
            "decode_num_workers": extra.get("decode_num_workers", 0),
            "num_prefill_gpu": pre if disagg else devs, "num_decode_gpu": dec if disagg else devs,
            "isl": s["input_len"], "osl": s["output_len"], "conc": conc, "image": extra.get("image"), "metrics": met,
            "date": extra.get("date") or time.strftime("%Y-%m-%d", time.gmtime(finished)),
            "run_url": extra.get("run_url"), "infbench_cell_id": r.cell_id})
    return out


def vllm_bench_results(rows: Sequence[StoredCell]) -> list[tuple[str, dict[str, Any]]]:
    """``(file name, vLLM result)`` of every ok serving cell (see the module doc).

    Args:
        rows: ``Store.results()`` items.
    """
    out = []
    for r in rows:
        m, s = r.metrics or {}, r.spec
        if r.status != "ok" or M.OUTPUT_TOK_S.key not in m or M.DURATION.key not in m:
            continue
        ld = s.get("load") or {}
        outp, dur = M.OUTPUT_TOK_S.value(m), M.DURATION.value(m)
        completed = M.N_COMPLETED.value(m) or (M.TTFT.value(m) or M.E2E.value(m) or {}).get("count")
        if not completed:
            continue
        failed = int(M.N_FAILED.value(m) or 0)
        n_out = M.N_OUT_TOTAL.value(m) or outp * dur
        n_in = M.N_IN_TOTAL.value(m) or ((M.TOTAL_TOK_S.value(m) or outp) * dur - n_out)
        finished = r.finished_at or time.time()
        d: dict[str, Any] = {
            "date": time.strftime("%Y%m%d-%H%M%S", time.gmtime(finished)), "endpoint_type": "openai",
            "backend": "openai", "label": "infbench", "model_id": s["model"], "tokenizer_id": None,
            "num_prompts": int(completed) + failed,
            "request_rate": ld.get("request_rate") if ld.get("mode") == "rate" else "inf",
            "burstiness": ld.get("burstiness", 1.0),
            "max_concurrency": _conc(r) if ld.get("mode") != "rate" else ld.get("concurrency"),
            "duration": dur, "completed": int(completed), "failed": failed,
            "total_input_tokens": round(n_in), "total_output_tokens": round(n_out),
            "request_throughput": m.get(M.REQUEST_S.key, completed / dur), "request_goodput": None,
            "output_throughput": outp,
            "total_token_throughput": m.get(M.TOTAL_TOK_S.key, (n_in + n_out) / dur)}
        for metric, stem in ((M.TTFT, "ttft"), (M.TPOT, "tpot"), (M.ITL, "itl"), (M.E2E, "e2el")):
            for st, name in STATS.items():
                v = metric.value(m, st)
                if v is not None:
                    d[f"{name}_{stem}_ms"] = v * 1e3
        d["infbench_cell_id"] = r.cell_id
        out.append((f"{r.cell_id[:16]}.json", d))
    return out
