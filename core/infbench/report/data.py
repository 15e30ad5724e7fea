"""Flat, plot-ready rows of stored cells, shared by the HTML report, the static
figures, ``export --format lib-csv`` and ``compare``.

Each stored cell (``Store.results()`` item) becomes one dict of scalars in the units
people read: latencies in ms, throughputs in tokens/s, power in W, energy efficiency in
tokens/J, utilisations as fractions. Cells stored before the roofline existed get it
computed here from the current device descriptions (marked ``roofline_backfilled``).
"""

from __future__ import annotations

from typing import Any

from infbench.analysis.roofline import effective_batch
from infbench.data.engine import precision_of
from infbench.outputs import OutputKind, starts_with
from infbench.registry import PERPLEXITY_TWIN

#: Dimensions a report can filter on, with their labels.
DIMENSIONS = {
    "device": "Device", "engine": "Engine", "model": "Model", "dtype": "Precision",
    "batch": "Batch / concurrency", "input_len": "Input length", "output_len": "Output length",
    "tp": "Tensor parallel", "run_id": "Run",
}
#: Metrics a report can plot, with their labels and units.
METRICS = {
    "output_tok_s": "Output throughput (tokens/s)",
    "total_tok_s": "Total throughput (tokens/s)",
    "output_tok_s_per_device": "Output throughput per device (tokens/s)",
    "ttft_ms_p50": "TTFT p50 (ms)", "ttft_ms_p99": "TTFT p99 (ms)",
    "tpot_ms_p50": "TPOT p50 (ms)", "tpot_ms_p99": "TPOT p99 (ms)",
    "itl_ms_p50": "ITL p50 (ms)", "itl_ms_p99": "ITL p99 (ms)",
    "e2e_s_p50": "E2E p50 (s)", "e2e_s_p99": "E2E p99 (s)",
    "avg_power_w": "Average power (W)", "tokens_per_j": "Tokens per joule (tokens/J)",
    "mbu": "MBU (decode bandwidth utilisation)", "mfu": "MFU (prefill FLOP utilisation)",
    "mbu_attainable": "MBU against the measured attainable bandwidth (CPU)",
    "mfu_attainable_fp32": "MFU against the measured attainable fp32 rate (CPU)",
    "ttft_floor_ms": "TTFT roofline floor (ms)", "tpot_floor_ms": "TPOT roofline floor (ms)",
    "server_ttft_ms_p50": "Server's own TTFT p50 (ms, its /metrics)",
    "server_prefix_cache_hit_rate": "Server prefix-cache hit rate",
    "util_pct_mean": "Device utilisation (%, mean)", "usd_per_mtok": "USD per million output tokens",
    "perplexity": "Perplexity (llama-perplexity method)",
}

#: Engine names as LLM-Inference-Bench spells its frameworks.
LIB_FRAMEWORK = {"vllm": "vLLM", "vllm-server": "vLLM", "trtllm-serve": "TensorRT-LLM", "llama.cpp": "llama.cpp",
                 "llama.cpp-server": "llama.cpp", "transformers": "transformers", "openai": "OpenAI-compatible"}


def _q(m: dict[str, Any], key: str, stat: str, scale: float = 1.0) -> float | None:
    v = (m.get(key) or {}).get(stat)
    return None if v is None else v * scale


def device_label(dev: dict[str, Any]) -> str:
    """``"NVIDIA H100 80GB HBM3 x8"``-style label of a stored device (vendor added
    for the CPU and remote platforms, whose model names do not say it)."""
    name = dev.get("model") or dev.get("vendor") or "?"
    if dev.get("kind") in ("cpu", "remote") and dev.get("vendor", "").lower() not in name.lower():
        name = f"{dev['vendor']}: {name}"
    return name + (f" x{dev['count']}" if (dev.get("count") or 1) > 1 else "")


def flat_row(r: dict[str, Any], limits_for: Any = None) -> dict[str, Any]:
    """One stored cell as plot-ready scalars (see the module doc for units).

    Args:
        r: a ``Store.results()`` item.
        limits_for: optional callable ``device dict -> Limits | None`` used to compute
            the roofline of cells stored without one.
    """
    s, m, dev = r["spec"], r.get("metrics") or {}, r["device"]
    ld = s.get("load") or {}
    mode = ld.get("mode") or "batch"
    b = effective_batch(s, m)
    roof = m.get("roofline")
    backfilled = False
    if roof is None and limits_for is not None and r["status"] == "ok":
        from infbench.analysis.roofline import RooflineError, roofline_for

        lim = limits_for(dev)
        if lim is not None:
            try:
                roof = roofline_for(s, m, lim)
                backfilled = roof is not None
            except RooflineError:
                roof = None
    size = s["batch"] if mode == "batch" else (ld.get("concurrency") if mode == "concurrency" else None)
    eng = r.get("engine") or {}
    published = bool(eng.get("published") or m.get("published"))
    device = device_label(dev)
    if published:
        # Published cells never pass for local measurements: their device says where they come from.
        device = f"{device} ({eng.get('source') or 'published'})"
    row = {
        "cell_id": r["cell_id"], "spec_hash": r["spec_hash"], "run_id": r["run_id"], "status": r["status"],
        "error": r.get("error"), "model": s["model"], "engine": s["engine"], "dtype": s["dtype"],
        "precision": precision_of(str(s["dtype"])),
        "device": device, "device_vendor": dev.get("vendor"), "device_count": dev.get("count") or 1,
        "published": published,
        "mode": mode, "batch": size if size is not None else (round(b, 2) if b else None),
        "request_rate": ld.get("request_rate"), "input_len": s["input_len"], "output_len": s["output_len"],
        "tp": s.get("tensor_parallel_size") or 1,
        "ttft_ms_p50": _q(m, "ttft_s", "p50", 1e3), "ttft_ms_p99": _q(m, "ttft_s", "p99", 1e3),
        "ttft_ms_mean": _q(m, "ttft_s", "mean", 1e3),
        "tpot_ms_p50": _q(m, "tpot_s", "p50", 1e3), "tpot_ms_p99": _q(m, "tpot_s", "p99", 1e3),
        "tpot_ms_mean": _q(m, "tpot_s", "mean", 1e3),
        "itl_ms_p50": _q(m, "itl_s", "p50", 1e3), "itl_ms_p99": _q(m, "itl_s", "p99", 1e3),
        "e2e_s_p50": _q(m, "e2e_s", "p50"), "e2e_s_p99": _q(m, "e2e_s", "p99"), "e2e_s_mean": _q(m, "e2e_s", "mean"),
        "duration_s": m.get("duration_s"),
        "output_tok_s": m.get("output_tok_s"), "total_tok_s": m.get("total_tok_s"),
        "output_tok_s_per_device": m.get("output_tok_s_per_device"),
        "avg_power_w": m.get("avg_power_w"), "energy_j": m.get("energy_j"), "tokens_per_j": m.get("tokens_per_j"),
        "energy_source": m.get("energy_source"),
        "mbu": roof.get("mbu") if roof else None, "mfu": roof.get("mfu") if roof else None,
        "ttft_floor_ms": roof["ttft_floor_s"] * 1e3 if roof else None,
        "tpot_floor_ms": roof["tpot_floor_s"] * 1e3 if roof else None,
        "roofline_device": roof.get("device_id") if roof else None,
        "roofline_backfilled": backfilled,
        "mbu_attainable": ((roof or {}).get("attainable") or {}).get("mbu"),
        "mfu_attainable_fp32": ((roof or {}).get("attainable") or {}).get("mfu_fp32"),
        "suspect": m.get("suspect"),
        "finished_at": r.get("finished_at"),
        "repeat": s.get("repeat"),
        # the server's own view (its Prometheus /metrics) and the device's telemetry
        "server_name": m.get("server_name"),
        "server_ttft_ms_p50": _q(m, "server_ttft_s", "p50", 1e3),
        "server_ttft_ms_mean": _q(m, "server_ttft_s", "mean", 1e3),
        "server_tpot_ms_p50": _q(m, "server_tpot_s", "p50", 1e3),
        "server_waiting_max": _q(m, "server_waiting", "max"),
        "server_kv_cache_usage_max": _q(m, "server_kv_cache_usage", "max"),
        "server_prefix_cache_hit_rate": m.get("server_prefix_cache_hit_rate"),
        "server_preemptions": m.get("server_preemptions"),
        "util_pct_mean": _q(m.get("telemetry") or {}, "util_pct", "mean"),
        "clock_mhz_mean": _q(m.get("telemetry") or {}, "clock_mhz", "mean"),
        "temp_c_max": _q(m.get("telemetry") or {}, "temp_c", "max"),
        "throttled": m.get("throttled"),
        "throttle_reasons": ", ".join(m.get("throttle_reasons") or []) or None,
        "usd_per_mtok": m.get("usd_per_mtok"),
        "weights_real": ((r.get("engine") or {}).get("weights") or {}).get("real"),
        "weights_sha256": ((r.get("engine") or {}).get("weights") or {}).get("sha256"),
    }
    row["label"] = config_label(row)
    return row


def config_label(row: dict[str, Any]) -> str:
    """``"llama-3-8b vllm bf16 tp2 | H100 | b16 i1024 o128"``: a cell's configuration."""
    size = f"b{row['batch']}" if row["mode"] == "batch" else (
        f"c{row['batch']}" if row["mode"] == "concurrency" else
        f"r{row['request_rate']:g}" if row["mode"] == "rate" else str(row["mode"]))
    tp = f" tp{row['tp']}" if row["tp"] > 1 else ""
    rep = f" #{row['repeat']}" if row.get("repeat") else ""
    return (f"{row['model']} {row['engine']} {row['dtype']}{tp} | {row['device']} | "
            f"{size} i{row['input_len']} o{row['output_len']}{rep}")


def limits_resolver(pm: Any) -> Any:
    """A cached ``device dict -> Limits | None`` for :func:`flat_row`'s backfill."""
    from infbench.analysis.floor import device_roofline_limits
    from infbench.schema import DeviceInfo

    cache: dict[str, Any] = {}

    def resolve(dev: dict[str, Any]) -> Any:
        key = f"{dev.get('vendor')}|{dev.get('model')}"
        if key not in cache:
            try:
                cache[key] = device_roofline_limits(pm, DeviceInfo(**dev))[0]
            except Exception:  # noqa: BLE001 - a bad stored device only loses its backfill
                cache[key] = None
        return cache[key]

    return resolve


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: lower latency (x) and higher
    throughput (y) both count as better; ordered by latency."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best_y = [], float("-inf")
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return front


def lib_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LLM-Inference-Bench's CSV layout (``Plots/All_results.csv`` plus the TTFT and power
    columns of its other tables) for ok batch-mode cells.

    Columns: ``Hardware, Num of Hardware, Framework, Model, Input Output Length,
    Batch Size, Latency, Throughput`` (their dashboard's Throughput/config.json filters),
    then ``Input Length, Output Length, TTFT Latency, end_latency, avg_power``, and infbench's
    ``suspect`` (why a cell breaks physics, empty when sound: :mod:`infbench.analysis.physics`).
    ``Latency`` is the batch's E2E (s, the cell's duration), ``Throughput`` is
    (input + output) tokens over it (their eq. 2, our ``total_tok_s``), ``avg_power`` is
    in mW as in their ``power_results.csv``. ``Input Output Length`` holds the common
    length when input = output (their grid) and ``"IN/OUT"`` otherwise. ``Model`` is the
    HF id where the zoo knows it.
    """
    from infbench.errors import ConfigError
    from infbench.models import resolve

    out = []
    for r in rows:
        f = r if "label" in r else flat_row(r)
        if f["status"] != "ok" or f["mode"] != "batch":
            continue
        try:
            model = resolve(f["model"]).hf_id or f["model"]
        except ConfigError:
            model = f["model"]
        n_in, n_out = f["input_len"], f["output_len"]
        hardware = f["device"].rsplit(" (", 1)[0] if f.get("published") else f["device"]
        hardware = hardware.rsplit(" x", 1)[0] if f["device_count"] > 1 else hardware
        if "label" not in r:  # a stored cell: an imported one goes back under its published name
            hardware = ((r.get("device") or {}).get("properties") or {}).get("published_name") or hardware
        out.append({
            "Hardware": hardware,
            "Num of Hardware": f["tp"], "Framework": LIB_FRAMEWORK.get(f["engine"], f["engine"]),
            "Model": model, "Input Output Length": n_in if n_in == n_out else f"{n_in}/{n_out}",
            "Batch Size": f["batch"], "Latency": f["duration_s"], "Throughput": f["total_tok_s"],
            "Input Length": n_in, "Output Length": n_out,
            "TTFT Latency": f["ttft_ms_mean"] / 1e3 if f["ttft_ms_mean"] is not None else None,
            "end_latency": f["e2e_s_mean"],
            "avg_power": f["avg_power_w"] * 1e3 if f["avg_power_w"] is not None else None,
            "suspect": f.get("suspect"),
        })
    return out


#: ``export --format lib-csv --out``: how an earlier export is recognised (its first columns).
LIB_CSV = OutputKind("export --format lib-csv", "--out", starts_with(b"Hardware,Num of Hardware,Framework,Model,"))
#: The columns of LLM-Inference-Bench's CSV (``Plots/All_results.csv``), in its order.
LIB_COLUMNS = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency",
               "Throughput", "Input Length", "Output Length", "TTFT Latency", "end_latency", "avg_power", "suspect"]


def lib_csv(rows: list[dict[str, Any]]) -> str:
    """The CSV text of ``export --format lib-csv``: a header of :data:`LIB_COLUMNS` and one
    line per ok batch-mode cell (:func:`lib_rows`), text cells through
    :func:`infbench.outputs.csv_cell` (a model name ``=HYPERLINK(...)`` is written
    ``'=HYPERLINK(...)``; ``infbench import`` reads it back without the quote)."""
    from infbench.outputs import csv_text

    return csv_text(lib_rows(rows), LIB_COLUMNS, lineterminator="\n")


def select_rows(rows: list[dict[str, Any]], models: list[str] | None = None, devices: list[str] | None = None,
                engines: list[str] | None = None) -> list[dict[str, Any]]:
    """Keep stored rows whose model and engine are listed (None: any) and whose device
    vendor or model name contains one of ``devices`` (case-insensitive)."""
    devs = [d.lower() for d in (devices or [])]
    return [r for r in rows
            if (not models or r["spec"]["model"] in models) and (not engines or r["spec"]["engine"] in engines)
            and (not devs or any(d in f"{r['device']['vendor']} {r['device']['model']}".lower() for d in devs))]


#: Server engines whose perplexity is their in-process twin's (same weights, same kernels).


def attach_perplexity(flat: list[dict[str, Any]], quality: list[dict[str, Any]]) -> int:
    """Put the stored perplexity of each cell's precision into its flat row (in place):
    ``perplexity``, ``perplexity_stderr``, ``ppl_dtype_baseline``, ``ppl_increase``,
    ``beyond_gate`` (None where nothing matches).

    A measurement matches a cell with the same weights (their SHA-256 where the cell
    recorded it, else the model name), engine (a server engine takes its in-process
    twin's, :data:`PERPLEXITY_TWIN`) and dtype. Of several matches (other texts or ``n_ctx``), the
    one scoring the most tokens, then the newest, is used.

    Args:
        flat: :func:`flat_row` rows.
        quality: ok measurements (:func:`infbench.store.quality.quality_results`, with
            :func:`infbench.quality.gate.with_gate`'s fields where present).

    Returns:
        How many cells got a perplexity.
    """
    best: dict[tuple, dict[str, Any]] = {}
    for q in quality:
        if q.get("status") != "ok" or q.get("value") is None:
            continue
        for k in ((q["weights_sha256"], q["engine"], q["dtype"]), (q["model"], q["engine"], q["dtype"])):
            cur = best.get(k)
            if cur is None or (q.get("n_tokens") or 0, q["id"]) > (cur.get("n_tokens") or 0, cur["id"]):
                best[k] = q
    n = 0
    for f in flat:
        engine = PERPLEXITY_TWIN.get(f["engine"], f["engine"])
        # By the weights' hash where the cell recorded it (any spelling of the path), else by name.
        q = best.get((f.get("weights_sha256") or f["model"], engine, f["dtype"]))
        f["perplexity"] = q["value"] if q else None
        f["perplexity_stderr"] = q["stderr"] if q else None
        f["ppl_baseline_dtype"] = q.get("baseline_dtype") if q else None
        f["ppl_increase"] = q.get("ppl_increase") if q else None
        f["beyond_gate"] = q.get("beyond_gate") if q else None
        n += q is not None
    return n


def quality_points(flat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points of the perplexity-vs-throughput figure (LLM-Inference-Bench Figs. 10/29):
    one per model, engine, device and dtype with a perplexity, at the highest
    ``output_tok_s`` of its ok cells (filter the cells to choose the workload), with
    ``label``, ``series`` (model engine device) and the gate fields."""
    pts: dict[tuple, dict[str, Any]] = {}
    for f in flat:
        if f["status"] != "ok" or f.get("perplexity") is None or f.get("output_tok_s") is None:
            continue
        k = (f["model"], f["engine"], f["device"], f["dtype"])
        if k not in pts or f["output_tok_s"] > pts[k]["output_tok_s"]:
            pts[k] = {"series": f"{f['model'].rsplit('/', 1)[-1]} {f['engine']} | {f['device']}",
                      "dtype": f["dtype"], "precision": f["precision"], "output_tok_s": f["output_tok_s"],
                      "perplexity": f["perplexity"], "perplexity_stderr": f.get("perplexity_stderr"),
                      "ppl_increase": f.get("ppl_increase"), "beyond_gate": f.get("beyond_gate"),
                      "label": f["label"]}
    return sorted(pts.values(), key=lambda p: (p["series"], p["perplexity"]))
