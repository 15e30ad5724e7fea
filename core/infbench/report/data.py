"""Flat, plot-ready rows of stored cells, shared by the HTML report, the static
figures, ``export --format lib-csv`` and ``compare``.

Each stored cell (``Store.results()`` item) becomes one dict of scalars in the units
people read: latencies in ms, throughputs in tokens/s, power in W, energy efficiency in
tokens/J, utilisations as fractions. The metric columns, their keys (the unit in the name:
``ttft_ms_p50``), scales and headings come from the one table of metric definitions,
:mod:`infbench.data.metrics` (:data:`FLAT_COLUMNS`). Cells stored before the roofline existed get it
computed here from the current device descriptions (marked ``roofline_backfilled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from infbench.analysis.floor import device_roofline_limits
from infbench.analysis.frontier import axis_value, series
from infbench.analysis.roofline import RooflineError, effective_batch, roofline_for
from infbench.contract.registry import PERPLEXITY_TWIN
from infbench.data import metrics as M
from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError
from infbench.data.metrics import Column
from infbench.data.models import resolve
from infbench.data.outputs import OutputKind, csv_text, starts_with
from infbench.data.schema import DeviceInfo, engine_args_label
from infbench.data.stored import StoredCell

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager

#: Dimensions a report can filter on, with their labels.
DIMENSIONS = {
    "device": "Device", "engine": "Engine", "model": "Model", "dtype": "Precision",
    "batch": "Batch / concurrency", "input_len": "Input length", "output_len": "Output length",
    "tp": "Tensor parallel", "run_id": "Run",
}
#: The metric columns of a flat row (:func:`flat_row`), as :mod:`infbench.data.metrics` names them.
FLAT_COLUMNS: tuple[Column, ...] = (
    *(M.TTFT.col(s) for s in ("p50", "p99", "mean")), *(M.TPOT.col(s) for s in ("p50", "p99", "mean")),
    M.ITL.col("p50"), M.ITL.col("p99"), *(M.E2E.col(s) for s in ("p50", "p99", "mean")),
    M.DURATION.col(), M.OUTPUT_TOK_S.col(), M.TOTAL_TOK_S.col(), M.OUTPUT_TOK_S_PER_DEVICE.col(),
    M.AVG_POWER.col(), M.ENERGY.col(), M.TOKENS_PER_J.col(),
    M.MBU.col(), M.MFU.col(), M.TTFT_FLOOR.col(), M.TPOT_FLOOR.col(), M.MBU_ATTAINABLE.col(),
    M.MFU_ATTAINABLE_FP32.col(),
    # the server's own view (its Prometheus /metrics) and the device's telemetry
    M.SERVER_TTFT.col("p50"), M.SERVER_TTFT.col("mean"), M.SERVER_TPOT.col("p50"), M.SERVER_WAITING.col("max"),
    M.SERVER_KV_CACHE_USAGE.col("max"), M.SERVER_PREFIX_CACHE_HIT_RATE.col(), M.SERVER_PREEMPTIONS.col(),
    M.UTIL_PCT.col("mean"), M.CLOCK_MHZ.col("mean"), M.TEMP_C.col("max"),
    M.USD_PER_MTOK.col(),
)
#: Metrics a report can plot: flat-row key -> heading (label and unit from the metric table).
METRICS: dict[str, str] = {c.key: c.label for c in (
    M.OUTPUT_TOK_S.col(), M.TOTAL_TOK_S.col(), M.OUTPUT_TOK_S_PER_DEVICE.col(),
    M.TTFT.col("p50"), M.TTFT.col("p99"), M.TPOT.col("p50"), M.TPOT.col("p99"), M.ITL.col("p50"), M.ITL.col("p99"),
    M.E2E.col("p50"), M.E2E.col("p99"), M.AVG_POWER.col(), M.TOKENS_PER_J.col(), M.MBU.col(), M.MFU.col(),
    M.MBU_ATTAINABLE.col(), M.MFU_ATTAINABLE_FP32.col(), M.TTFT_FLOOR.col(), M.TPOT_FLOOR.col(),
    M.SERVER_TTFT.col("p50"), M.SERVER_PREFIX_CACHE_HIT_RATE.col(), M.UTIL_PCT.col("mean"), M.USD_PER_MTOK.col(),
    M.PERPLEXITY.col(), M.TOK_S_PER_USER.col(), M.TOK_S_PER_DEVICE.col(), M.J_PER_TOKEN.col())}

#: TTFT's mean as flat rows hold it (ms): LLM-Inference-Bench's ``TTFT Latency`` is in s.
_TTFT_MEAN = M.TTFT.col("mean")

#: Engine names as LLM-Inference-Bench spells its frameworks.
LIB_FRAMEWORK = {"vllm": "vLLM", "vllm-server": "vLLM", "trtllm-serve": "TensorRT-LLM", "llama.cpp": "llama.cpp",
                 "llama.cpp-server": "llama.cpp", "transformers": "transformers", "openai": "OpenAI-compatible"}


def device_label(dev: dict[str, Any]) -> str:
    """``"NVIDIA H100 80GB HBM3 x8"``-style label of a stored device (vendor added
    for the CPU and remote platforms, whose model names do not say it)."""
    name = dev.get("model") or dev.get("vendor") or "?"
    if dev.get("kind") in ("cpu", "remote") and dev.get("vendor", "").lower() not in name.lower():
        name = f"{dev['vendor']}: {name}"
    return name + (f" x{dev['count']}" if (dev.get("count") or 1) > 1 else "")


def flat_row(r: StoredCell, limits_for: Any = None) -> dict[str, Any]:
    """One stored cell as plot-ready scalars (see the module doc for units).

    Args:
        r: a ``Store.results()`` item.
        limits_for: optional callable ``device dict -> Limits | None`` used to compute
            the roofline of cells stored without one.
    """
    s, m, dev = r.spec, r.metrics or {}, r.device
    ld = s.get("load") or {}
    mode = ld.get("mode") or "batch"
    b = effective_batch(s, m)
    roof = r.field("roofline")
    backfilled = False
    if roof is None and limits_for is not None and r.status == "ok":
        lim = limits_for(dev)
        if lim is not None:
            try:
                roof = roofline_for(s, m, lim)
                backfilled = roof is not None
            except RooflineError:
                roof = None
    size = s["batch"] if mode == "batch" else (ld.get("concurrency") if mode == "concurrency" else None)
    # the stored metrics with the roofline used here (stored, backfilled or none)
    view = {**m, "roofline": roof, M.MBU.key: (roof or {}).get("mbu"), M.MFU.key: (roof or {}).get("mfu")}
    eng = r.engine or {}
    published = bool(eng.get("published") or r.field("published"))
    device = device_label(dev)
    if published:
        # Published cells never pass for local measurements: their device says where they come from.
        device = f"{device} ({eng.get('source') or 'published'})"
    row = {
        "cell_id": r.cell_id, "spec_hash": r.spec_hash, "run_id": r.run_id, "status": r.status,
        "error": r.error, "model": s["model"], "engine": s["engine"], "dtype": s["dtype"],
        "precision": precision_of(str(s["dtype"])),
        "device": device, "device_vendor": dev.get("vendor"), "device_count": dev.get("count") or 1,
        "published": published, "predicted": r.status == "predicted",
        "mode": mode, "batch": size if size is not None else (round(b, 2) if b else None),
        "request_rate": ld.get("request_rate"), "input_len": s["input_len"], "output_len": s["output_len"],
        "tp": s.get("tensor_parallel_size") or 1,
        "engine_args": args_text(s.get("engine_args")),
        # the metrics, in the units their keys name (:data:`FLAT_COLUMNS`)
        **{c.key: c.flat(view) for c in FLAT_COLUMNS},
        "energy_source": r.field("energy_source"),
        "roofline_device": roof.get("device_id") if roof else None,
        "roofline_backfilled": backfilled,
        "suspect": r.field("suspect"),
        "finished_at": r.finished_at,
        "repeat": s.get("repeat"),
        "server_name": r.field("server_name"),
        "throttled": r.field("throttled"),
        "throttle_reasons": ", ".join(r.field("throttle_reasons") or []) or None,
        "weights_real": (eng.get("weights") or {}).get("real"),
        "weights_sha256": (eng.get("weights") or {}).get("sha256"),
    }
    # A predicted cell (an adaptive sweep's unmeasured cell) carries its 90 % intervals.
    iv_raw = r.field("interval")
    iv: dict[str, Any] = iv_raw if isinstance(iv_raw, dict) else {}
    for k, scale, name in ((M.OUTPUT_TOK_S.key, 1, M.OUTPUT_TOK_S.key), (M.TOTAL_TOK_S.key, 1, M.TOTAL_TOK_S.key),
                           (M.E2E.key, 1, "e2e_s_p50"), (M.TTFT.key, 1e3, "ttft_ms_p50"),
                           (M.TPOT.key, 1e3, "tpot_ms_p50")):
        lo, hi = (iv.get(k) or [None, None])[:2] if isinstance(iv.get(k), list) else (None, None)
        row[f"{name}_lo"] = lo * scale if lo is not None else None
        row[f"{name}_hi"] = hi * scale if hi is not None else None
    # The frontier's axes (docs/report.md), computed for cells stored before they existed.
    for k in (M.TOK_S_PER_USER.key, M.TOK_S_PER_DEVICE.key, M.J_PER_TOKEN.key):
        row[k] = axis_value(m, k)
    devs = M.DEVICES_USED.value(m) or row["tp"] or 1
    for end in ("lo", "hi"):  # a predicted cell's intervals on the frontier's axes
        t = row.get(f"{M.TOTAL_TOK_S.key}_{end}")
        row[f"{M.TOK_S_PER_DEVICE.key}_{end}"] = t / devs if t is not None else None
        tp = row.get(f"tpot_ms_p50_{'hi' if end == 'lo' else 'lo'}")
        row[f"{M.TOK_S_PER_USER.key}_{end}"] = 1e3 / tp if tp else None
    # The front a cell belongs to in the frontier figure: device | engine, and for an imported
    # publication also its source and workload (infbench.analysis.frontier.series).
    row["front_series"] = f"{device_label(dev)} | {series(r)}"
    row["label"] = config_label(row) + (" (predicted)" if row["predicted"] else "")
    return row


def config_label(row: dict[str, Any]) -> str:
    """``"llama-3-8b vllm bf16 tp2 [max_num_seqs=64] | H100 | b16 i1024 o128"``: a cell's
    configuration (its engine arguments in brackets when it has any)."""
    size = f"b{row['batch']}" if row["mode"] == "batch" else (
        f"c{row['batch']}" if row["mode"] == "concurrency" else
        f"r{row['request_rate']:g}" if row["mode"] == "rate" else str(row["mode"]))
    tp = f" tp{row['tp']}" if row["tp"] > 1 else ""
    rep = f" #{row['repeat']}" if row.get("repeat") else ""
    args = f" [{row['engine_args']}]" if row.get("engine_args") else ""
    return (f"{row['model']} {row['engine']} {row['dtype']}{tp}{args} | {row['device']} | "
            f"{size} i{row['input_len']} o{row['output_len']}{rep}")


def args_text(args: Any) -> str | None:
    """A stored cell's engine arguments (``spec.engine_args``) as ``n_ubatch=4 ...``
    (:meth:`infbench.data.schema.Cell.args_label`), None when it has none."""
    return engine_args_label(args) or None


def limits_resolver(pm: PluginManager) -> Any:
    """A cached ``device dict -> Limits | None`` for :func:`flat_row`'s backfill."""
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


def lib_rows(rows: Sequence[StoredCell | dict[str, Any]]) -> list[dict[str, Any]]:
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

    Args:
        rows: stored cells (``Store.results()`` items; an imported one goes back under its
            published hardware name), or :func:`flat_row` rows already made.
    """
    out = []
    for r in rows:
        f = flat_row(r) if isinstance(r, StoredCell) else r
        if f["status"] != "ok" or f["mode"] != "batch":
            continue
        try:
            model = resolve(f["model"]).hf_id or f["model"]
        except ConfigError:
            model = f["model"]
        n_in, n_out = f["input_len"], f["output_len"]
        hardware = f["device"].rsplit(" (", 1)[0] if f.get("published") else f["device"]
        hardware = hardware.rsplit(" x", 1)[0] if f["device_count"] > 1 else hardware
        if isinstance(r, StoredCell):  # a stored cell: an imported one goes back under its published name
            hardware = ((r.device or {}).get("properties") or {}).get("published_name") or hardware
        ttft, power = f[_TTFT_MEAN.key], f[M.AVG_POWER.col().key]
        out.append({
            "Hardware": hardware,
            "Num of Hardware": f["tp"], "Framework": LIB_FRAMEWORK.get(f["engine"], f["engine"]),
            "Model": model, "Input Output Length": n_in if n_in == n_out else f"{n_in}/{n_out}",
            "Batch Size": f["batch"], "Latency": f[M.DURATION.col().key], "Throughput": f[M.TOTAL_TOK_S.col().key],
            "Input Length": n_in, "Output Length": n_out,
            "TTFT Latency": ttft / _TTFT_MEAN.flat_scale if ttft is not None else None,  # s
            "end_latency": f[M.E2E.col("mean").key],
            "avg_power": power * 1e3 if power is not None else None,  # mW
            "suspect": f.get("suspect"),
        })
    return out


#: ``export --format lib-csv --out``: how an earlier export is recognised (its first columns).
LIB_CSV = OutputKind("export --format lib-csv", "--out", starts_with(b"Hardware,Num of Hardware,Framework,Model,"))
#: The columns of LLM-Inference-Bench's CSV (``Plots/All_results.csv``), in its order.
LIB_COLUMNS = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency",
               "Throughput", "Input Length", "Output Length", "TTFT Latency", "end_latency", "avg_power", "suspect"]


def lib_csv(rows: Sequence[StoredCell | dict[str, Any]]) -> str:
    """The CSV text of ``export --format lib-csv``: a header of :data:`LIB_COLUMNS` and one
    line per ok batch-mode cell of ``rows`` (:func:`lib_rows`), text cells through
    :func:`infbench.data.outputs.csv_cell` (a model name ``=HYPERLINK(...)`` is written
    ``'=HYPERLINK(...)``; ``infbench import`` reads it back without the quote)."""
    return csv_text(lib_rows(rows), LIB_COLUMNS, lineterminator="\n")


def select_rows(rows: Sequence[StoredCell], models: list[str] | None = None, devices: list[str] | None = None,
                engines: list[str] | None = None) -> list[StoredCell]:
    """Keep stored rows whose model and engine are listed (None: any) and whose device
    vendor or model name contains one of ``devices`` (case-insensitive)."""
    devs = [d.lower() for d in (devices or [])]
    return [r for r in rows
            if (not models or r.spec["model"] in models) and (not engines or r.spec["engine"] in engines)
            and (not devs or any(d in f"{r.device['vendor']} {r.device['model']}".lower() for d in devs))]


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
        qr = best.get((f.get("weights_sha256") or f["model"], engine, f["dtype"]))
        f["perplexity"] = qr["value"] if qr else None
        f["perplexity_stderr"] = qr["stderr"] if qr else None
        f["ppl_baseline_dtype"] = qr.get("baseline_dtype") if qr else None
        f["ppl_increase"] = qr.get("ppl_increase") if qr else None
        f["beyond_gate"] = qr.get("beyond_gate") if qr else None
        n += qr is not None
    return n


def quality_points(flat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points of the perplexity-vs-throughput figure (LLM-Inference-Bench Figs. 10/29):
    one per model, engine, device and dtype with a perplexity, at the highest
    ``output_tok_s`` of its ok cells (filter the cells to choose the workload), with
    ``label``, ``series`` (model engine device) and the gate fields."""
    pts: dict[tuple, dict[str, Any]] = {}
    for f in flat:
        if f["status"] != "ok" or f.get("perplexity") is None or f.get(M.OUTPUT_TOK_S.key) is None:
            continue
        k = (f["model"], f["engine"], f["device"], f["dtype"])
        if k not in pts or f[M.OUTPUT_TOK_S.key] > pts[k][M.OUTPUT_TOK_S.key]:
            pts[k] = {"series": f"{f['model'].rsplit('/', 1)[-1]} {f['engine']} | {f['device']}",
                      "dtype": f["dtype"], "precision": f["precision"], M.OUTPUT_TOK_S.key: f[M.OUTPUT_TOK_S.key],
                      "perplexity": f["perplexity"], "perplexity_stderr": f.get("perplexity_stderr"),
                      "ppl_increase": f.get("ppl_increase"), "beyond_gate": f.get("beyond_gate"),
                      "label": f["label"]}
    return sorted(pts.values(), key=lambda p: (p["series"], p["perplexity"]))
