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
from infbench.engines.base import DTYPE_ALIASES

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
    "ttft_floor_ms": "TTFT roofline floor (ms)", "tpot_floor_ms": "TPOT roofline floor (ms)",
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
    row = {
        "cell_id": r["cell_id"], "spec_hash": r["spec_hash"], "run_id": r["run_id"], "status": r["status"],
        "error": r.get("error"), "model": s["model"], "engine": s["engine"], "dtype": s["dtype"],
        "precision": DTYPE_ALIASES.get(str(s["dtype"]).lower(), str(s["dtype"]).lower()),
        "device": device_label(dev), "device_vendor": dev.get("vendor"), "device_count": dev.get("count") or 1,
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
        "finished_at": r.get("finished_at"),
    }
    row["label"] = config_label(row)
    return row


def config_label(row: dict[str, Any]) -> str:
    """``"llama-3-8b vllm bf16 tp2 | H100 | b16 i1024 o128"``: a cell's configuration."""
    size = f"b{row['batch']}" if row["mode"] == "batch" else (
        f"c{row['batch']}" if row["mode"] == "concurrency" else f"r{row['request_rate']:g}")
    tp = f" tp{row['tp']}" if row["tp"] > 1 else ""
    return (f"{row['model']} {row['engine']} {row['dtype']}{tp} | {row['device']} | "
            f"{size} i{row['input_len']} o{row['output_len']}")


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
    then ``Input Length, Output Length, TTFT Latency, end_latency, avg_power``.
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
        out.append({
            "Hardware": f["device"].rsplit(" x", 1)[0] if f["device_count"] > 1 else f["device"],
            "Num of Hardware": f["tp"], "Framework": LIB_FRAMEWORK.get(f["engine"], f["engine"]),
            "Model": model, "Input Output Length": n_in if n_in == n_out else f"{n_in}/{n_out}",
            "Batch Size": f["batch"], "Latency": f["duration_s"], "Throughput": f["total_tok_s"],
            "Input Length": n_in, "Output Length": n_out,
            "TTFT Latency": f["ttft_ms_mean"] / 1e3 if f["ttft_ms_mean"] is not None else None,
            "end_latency": f["e2e_s_mean"],
            "avg_power": f["avg_power_w"] * 1e3 if f["avg_power_w"] is not None else None,
        })
    return out


#: The columns of LLM-Inference-Bench's CSV (``Plots/All_results.csv``), in its order.
LIB_COLUMNS = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency",
               "Throughput", "Input Length", "Output Length", "TTFT Latency", "end_latency", "avg_power"]


def lib_csv(rows: list[dict[str, Any]]) -> str:
    """The CSV text of ``export --format lib-csv``: a header of :data:`LIB_COLUMNS` and one
    line per ok batch-mode cell (:func:`lib_rows`)."""
    import csv
    import io

    from infbench.secrets import printable

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=LIB_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows({k: printable(v) if isinstance(v, str) else v for k, v in r.items()} for r in lib_rows(rows))
    return buf.getvalue()


def select_rows(rows: list[dict[str, Any]], models: list[str] | None = None, devices: list[str] | None = None,
                engines: list[str] | None = None) -> list[dict[str, Any]]:
    """Keep stored rows whose model and engine are listed (None: any) and whose device
    vendor or model name contains one of ``devices`` (case-insensitive)."""
    devs = [d.lower() for d in (devices or [])]
    return [r for r in rows
            if (not models or r["spec"]["model"] in models) and (not engines or r["spec"]["engine"] in engines)
            and (not devs or any(d in f"{r['device']['vendor']} {r['device']['model']}".lower() for d in devs))]
