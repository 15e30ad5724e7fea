"""Physics as a check on every cell.

A measurement cannot beat the hardware. Every ok cell is checked when it is stored
(:func:`mark_suspect`, called where :func:`infbench.analysis.floor.add_roofline` stores MBU and MFU),
and one that breaks a physical bound keeps its numbers but is stored with
``metrics["suspect"]``, the reasons joined by ``; ``:

* **too few tokens**: a request produced fewer output tokens than the cell forces, or its
  prompt was more than 5 % shorter than asked (the cell measured a smaller workload);
* **too many tokens**: a server streamed more tokens than a request's ``max_tokens`` (the
  extra ones are left out of the counts and the throughput);
* **prefix cache hit**: the engine says more than 10 % of a prompt came from its cache
  (llama.cpp's ``timings.cache_n``, OpenAI ``usage.prompt_tokens_details.cached_tokens``,
  vLLM's ``num_cached_tokens``), so TTFT skipped part of the prefill. Not for a workload
  that reuses prefixes by design (:func:`reuses_prefixes`: ``--prefix-len``, a Mooncake
  trace's repeated ``hash_ids``, ``--multi-turn`` sessions), whose prefill checks (TTFT
  floor, MFU) are skipped too: there the hit is what is measured;
* **utilisation above 1**: ``mbu`` or ``mfu`` > 1 against the device's peaks; the reason
  says the likely cause (a model that fits in the CPU's last-level cache, a bandwidth that
  is only a measured attainable rate, a prefill chunked across steps, a wrong device);
* **faster than the floor**: in batch mode, the slowest request's TTFT or E2E below the
  cell's prefill or end-to-end floor (every prompt of the batch must be prefilled before
  the last first token), or the mean TPOT below the decode floor; in serving mode, any
  request's TTFT or TPOT below the floor of a batch of one;
* **faster than any hardware** (:func:`infbench.measure.derive.impossible_timing`): a first
  token within 1 us of the send, or a sequence gaining tokens faster than 10^7 tok/s;
  device-free floors, applied also where a cell is ingested or replayed from the journal;
* **noisy neighbours**: other processes used the cell's CPUs or its accelerator while it
  ran (:mod:`infbench.measure.contention`: "other processes used 1.70 cores during the
  cell"); the numbers are real but measured on a shared machine.

Peaks are upper bounds (datasheets; ISA x clock x cores for CPUs:
:mod:`infbench.detect.platforms.cpu_isa`), so a sound cell is never suspect. Measured attainable
rates, where the device description has them, give the utilisations against them beside
(``roofline.attainable``), clearly named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from infbench.analysis.roofline import Limits, roofline_for
from infbench.data import metrics as M
from infbench.measure.contention import contention_reasons
from infbench.measure.derive import impossible_timing
from infbench.measure.harness import harness_reasons

#: A prompt this much shorter than asked makes the cell a smaller workload.
PROMPT_SHORTFALL = 0.05
#: A request that took more than this share of its prompt from a prefix cache skipped a
#: real part of its prefill (a shared first token, e.g. BOS, does not count).
PREFIX_CACHE_SHARE = 0.1


@dataclass(frozen=True)
class PhysicalLimits(Limits):
    """:class:`~infbench.analysis.roofline.Limits` with what the physics check needs beside.

    Attributes:
        bandwidth_kind: ``theoretical`` (datasheet, DIMMs, declared) or ``attainable`` (the
            bandwidth is a measured rate: a cell may beat it without breaking physics).
        attainable_bandwidth_bytes_s: measured attainable bandwidth (B/s), if known.
        attainable_flops: measured attainable rates (precision -> FLOP/s), if known.
        cache_bytes: the last-level cache (B), for the cache-residency reason.
    """

    bandwidth_kind: str = "theoretical"
    attainable_bandwidth_bytes_s: float | None = None
    attainable_flops: dict[str, float] = field(default_factory=dict)
    cache_bytes: float | None = None


def limits_from_info(info: dict[str, Any]) -> Limits:
    """:meth:`Limits.from_info` plus the ``bandwidth_kind``, ``attainable`` and
    ``cache_bytes`` keys of a device description (the CPU plugin's), as :class:`PhysicalLimits`.

    Raises:
        RooflineError: no bandwidth or peak rate in ``info``.
    """
    base = Limits.from_info(info)
    att = info.get("attainable") or {}
    return PhysicalLimits(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                          bandwidth_kind=str(info.get("bandwidth_kind") or "theoretical"),
                          attainable_bandwidth_bytes_s=att.get("memory_bandwidth_bytes_s"),
                          attainable_flops={k: float(v) for k, v in (att.get("flops") or {}).items() if v},
                          cache_bytes=info.get("cache_bytes"))


def _ms(x: float) -> str:
    return f"{x * 1e3:.3g} ms"


def reuses_prefixes(cell: Any) -> bool:
    """True for a workload whose prompts share prefixes by design, so that a server's
    prefix cache is part of what is measured: shared-prefix synthetic prompts
    (``prefix_len``), a Mooncake trace (repeated ``hash_ids``), multi-turn sessions (each
    turn extends the last)."""
    trace, data = getattr(cell, "trace", None), getattr(cell, "dataset", None)
    return bool(getattr(cell, "prefix_len", None) or (trace is not None and trace.format == "mooncake")
                or (data is not None and data.multi_turn))


def token_reasons(cell: Any, records: list[Any]) -> list[str]:
    """Reasons about token counts and prefix caching (no device limits needed).

    Args:
        cell: the :class:`~infbench.data.schema.Cell`.
        records: its :class:`~infbench.data.schema.RequestRecord` list.
    """
    out: list[str] = []
    done = [r for r in records if r.error is None and r.t_tokens_ns]
    if not done:
        return out
    if cell.dataset is None and getattr(cell, "trace", None) is None:  # else lengths vary per request
        # --len-range: each request's own length lies in the cell's bounds (the client checks each
        # against its own max_tokens); the lower bounds are what every request must reach
        (in_low, _), (out_low, _) = cell.length_bounds() if hasattr(cell, "length_bounds") else \
            ((cell.input_len, cell.input_len), (cell.output_len, cell.output_len))
        asked = f"{out_low} or more" if getattr(cell, "len_range", None) else f"{cell.output_len}"
        short = [r.n_out for r in done if r.n_out < out_low]
        if short:
            out.append(f"too few tokens: {len(short)} of {len(done)} requests produced fewer output tokens than the "
                       f"{asked} asked (as few as {min(short)})")
        prompts = [r.n_in for r in done if r.n_in and r.n_in < (1 - PROMPT_SHORTFALL) * in_low]
        if prompts:
            asked_in = f"{in_low} or more" if getattr(cell, "len_range", None) else f"{cell.input_len}"
            out.append(f"too few tokens: {len(prompts)} of {len(done)} prompts were shorter than the {asked_in} "
                       f"tokens asked (as few as {min(prompts)})")
    elif any(r.n_out == 0 for r in done):
        out.append("too few tokens: a completed request produced no output token")
    extra = [r.n_out_extra for r in done if getattr(r, "n_out_extra", None)]
    if extra:
        out.append(f"too many tokens: {len(extra)} of {len(done)} requests got more tokens than their max_tokens "
                   f"(up to {max(extra)} extra, not counted): the server does not honour max_tokens")
    if reuses_prefixes(cell):
        return out
    cached = []
    for r in done:
        s = r.server or {}
        n = int((s.get("timings") or {}).get("cache_n") or s.get("cached_tokens") or 0)
        if n and n > PREFIX_CACHE_SHARE * max(r.n_in, 1):
            cached.append(n)
    if cached:
        out.append(f"prefix cache hit: {len(cached)} of {len(done)} requests took up to {max(cached)} prompt tokens "
                   "from the engine's cache (TTFT skipped part of the prefill)")
    return out


def _request_times(records: list[Any]) -> tuple[list[float], list[float], list[float]]:
    """TTFT, TPOT and E2E (s) of each completed request (docs/metrics.md formulas)."""
    ttft, tpot, e2e = [], [], []
    for r in records:
        if r.error is not None or not r.t_tokens_ns:
            continue
        a = (r.t_tokens_ns[0] - r.t_send_ns) / 1e9
        b = (r.t_tokens_ns[-1] - r.t_send_ns) / 1e9
        ttft.append(a)
        e2e.append(b)
        if len(r.t_tokens_ns) >= 2:
            tpot.append((b - a) / (len(r.t_tokens_ns) - 1))
    return ttft, tpot, e2e


def utilisation_reasons(cell: Any, roof: dict[str, Any], limits: Limits) -> list[str]:
    """Reasons for an ``mbu`` or ``mfu`` above 1 (``roof`` is the cell's stored roofline)."""
    out = []
    kind = getattr(limits, "bandwidth_kind", "theoretical")
    mbu, mfu = roof.get("mbu"), roof.get("mfu")
    if mbu is not None and mbu > 1:
        step = roof.get("decode_bytes_per_step") or 0
        cache = getattr(limits, "cache_bytes", None)
        if cache and step <= cache:
            why = (f"the weights and KV cache read per step ({step / 2**20:.3g} MiB) fit in the {cache / 2**20:.3g} "
                   "MiB last-level cache: cache, not memory, bandwidth")
        elif kind == "attainable":
            why = ("the bandwidth is only the measured attainable rate (no theoretical peak known: declare "
                   "[cpu] memory_bandwidth_gb_s in site.toml)")
        else:
            why = "too few tokens, a cache hit, or a device other than the one labelled"
        out.append(f"MBU {mbu:.2f} > 1: decode read faster than {limits.id}'s {kind} bandwidth "
                   f"({limits.bandwidth_bytes_s / 1e9:.4g} GB/s): {why}")
    if mfu is not None and mfu > 1 and not reuses_prefixes(cell):
        why = ("a prefix-cache hit, a prefill split over several steps (the mean TTFT then counts early first "
               "tokens), or a device other than the one labelled")
        out.append(f"MFU {mfu:.2f} > 1: prefill ran faster than {limits.id}'s peak "
                   f"({roof.get('peak_precision')}): {why}")
    return out


def floor_reasons(cell: Any, records: list[Any], roof: dict[str, Any], limits: Limits, shape: Any = None) -> list[str]:
    """Reasons for a measurement below its roofline floor (see the module doc)."""
    ttft, tpot, e2e = _request_times(records)
    if not ttft:
        return []
    out = []
    serving = cell.load is not None and cell.load.mode != "batch"
    if not serving:
        if max(ttft) < roof["ttft_floor_s"]:
            out.append(f"TTFT below its floor: the batch's last first token came {_ms(max(ttft))} after sending, the "
                       f"prefill floor is {_ms(roof['ttft_floor_s'])}")
        if tpot and sum(tpot) / len(tpot) < roof["tpot_floor_s"]:
            out.append(f"TPOT below its floor: mean {_ms(sum(tpot) / len(tpot))}, decode floor "
                       f"{_ms(roof['tpot_floor_s'])}")
        if max(e2e) < roof["e2e_floor_s"]:
            out.append(f"E2E below its floor: {_ms(max(e2e))} for the batch, floor {_ms(roof['e2e_floor_s'])}")
        return out
    one = _floor_at_batch_one(cell, limits, shape)
    if one is None:
        return out
    if min(ttft) < one["ttft_floor_s"] and not reuses_prefixes(cell):
        out.append(f"TTFT below its floor: a request's first token came after {_ms(min(ttft))}, below the prefill "
                   f"floor of one prompt ({_ms(one['ttft_floor_s'])})")
    if tpot and min(tpot) < one["tpot_floor_s"]:
        out.append(f"TPOT below its floor: {_ms(min(tpot))}, below the decode floor of one sequence "
                   f"({_ms(one['tpot_floor_s'])})")
    return out


def _floor_at_batch_one(cell: Any, limits: Limits, shape: Any) -> dict[str, Any] | None:
    spec = cell.model_dump()
    spec["load"] = None
    spec["batch"] = 1
    try:
        return roofline_for(spec, None, limits, shape=shape)
    except Exception:  # noqa: BLE001 - no floor, no check
        return None


def attainable_utilisations(roof: dict[str, Any], metrics: dict[str, Any], limits: Limits,
                            tp: int = 1) -> dict[str, Any] | None:
    """MBU and MFU against the measured attainable rates, where the limits carry them:
    ``{"bandwidth_bytes_s", "mbu", "fp32_flops", "mfu_fp32"}`` (the fp32 GEMM rate is the
    only attainable FLOP rate measured); None otherwise."""
    bw = getattr(limits, "attainable_bandwidth_bytes_s", None)
    flops = (getattr(limits, "attainable_flops", None) or {}).get("fp32")
    if not bw and not flops:
        return None
    tpot, ttft = M.TPOT.value(metrics, "mean"), M.TTFT.value(metrics, "mean")
    out: dict[str, Any] = {"bandwidth_bytes_s": bw, "fp32_flops": flops, "mbu": None, "mfu_fp32": None}
    if bw and tpot and roof.get("decode_bytes_per_step"):
        out["mbu"] = roof["decode_bytes_per_step"] / (tpot * bw * tp)
    if flops and ttft and roof.get("prefill_flops"):
        out["mfu_fp32"] = roof["prefill_flops"] / (ttft * flops * tp)
    return out


#: A server whose prefix-cache hit rate over a cell exceeds this, on a workload that shares no
#: prefix by design, reused cached prompt blocks (issue 31; vLLM #52884 saw results inflated
#: by up to 86 % this way).
PREFIX_CACHE_RATE = 0.05


def prefix_rate_reasons(cell: Any, metrics: dict[str, Any]) -> list[str]:
    """A reason when the server's own prefix-cache hit rate over the cell
    (``server_prefix_cache_hit_rate``, scraped from ``/metrics``) is above
    :data:`PREFIX_CACHE_RATE` while the workload shares no prefix (:func:`reuses_prefixes`)."""
    rate = M.SERVER_PREFIX_CACHE_HIT_RATE.value(metrics)
    if rate is None or rate <= PREFIX_CACHE_RATE or reuses_prefixes(cell):
        return []
    return [f"prefix cache hit: the server's prefix-cache hit rate over the cell was {100 * rate:.1f} % "
            f"(above {100 * PREFIX_CACHE_RATE:g} %) though no prefix was shared by design (TTFT skipped part of "
            "the prefill)"]


def check_cell(result: Any, limits: Limits | None, shape: Any = None) -> list[str]:
    """Every reason the ok cell ``result`` (a :class:`~infbench.data.schema.CellResult` with its
    metrics and, if computed, ``metrics["roofline"]``) breaks physics; ``[]`` when sound.

    Args:
        result: the cell result.
        limits: the device's limits (None: only the token checks run).
        shape: the model shape (for the batch-of-one floors of serving cells).
    """
    reasons = impossible_timing(result.records)
    reasons += token_reasons(result.cell, result.records)
    reasons += prefix_rate_reasons(result.cell, result.metrics)
    reasons += contention_reasons(M.field(result.metrics, "contention"), getattr(result.device, "kind", "cpu"))
    reasons += harness_reasons(result.metrics, getattr(result.device, "kind", "cpu"))
    roof = M.field(result.metrics, "roofline")
    if roof and limits is not None:
        reasons += utilisation_reasons(result.cell, roof, limits)
        reasons += floor_reasons(result.cell, result.records, roof, limits, shape)
    return reasons


def mark_suspect(result: Any, limits: Limits | None, shape: Any = None) -> None:
    """Store the physics check of an ok cell: ``metrics["suspect"]`` (reasons joined by
    ``; ``) when it fails, and ``roofline["attainable"]`` and ``roofline["bandwidth_kind"]``
    where known. Never raises: a failing check is itself stored as the reason."""
    if result.status != "ok":
        return
    try:
        roof = M.field(result.metrics, "roofline")
        if roof and limits is not None:
            roof["bandwidth_kind"] = getattr(limits, "bandwidth_kind", "theoretical")
            att = attainable_utilisations(roof, result.metrics, limits, result.cell.tensor_parallel_size)
            if att is not None:
                roof["attainable"] = att
        reasons = check_cell(result, limits, shape)
    except Exception as exc:  # noqa: BLE001
        reasons = [f"physics check failed: {type(exc).__name__}: {exc}"]
    if reasons:
        result.metrics["suspect"] = "; ".join(reasons)


#: LLM-Inference-Bench's published H100 cell for Llama-3-8B on vLLM at batch 1, input =
#: output = 128 tokens: 0.994 s end to end (Chitty-Venkata et al., "LLM-Inference-Bench:
#: Inference Benchmarking of Large Language Models on AI Accelerators", SC'24 workshops,
#: arXiv:2411.00136; their Plots/All_results.csv). The comparison of docs/hardware-runs.md.
LIB_H100_LLAMA3_8B = {"model": "llama-3-8b", "engine": "vllm", "dtype": "bfloat16", "batch": 1, "input_len": 128,
                      "output_len": 128, "e2e_s": 0.994,
                      "source": "LLM-Inference-Bench (arXiv:2411.00136), H100, vLLM, Llama-3-8B, batch 1, "
                                "in = out = 128"}


def published_utilisation(spec: dict[str, Any], e2e_s: float, limits: Limits, shape: Any = None) -> dict[str, Any]:
    """The utilisations a published end-to-end latency implies on a described device.

    A paper that gives only E2E leaves TTFT open; with TTFT at its floor the decode steps get
    all the rest, ``TPOT = (E2E - TTFT_floor) / (n_out - 1)``, the largest TPOT the figure
    allows, so ``MBU = decode bytes per step / (TPOT x bandwidth)`` is the lowest MBU it
    allows (a real TTFT above the floor only raises it). An implied MBU above 1 means the
    figure cannot come from that device.

    Args:
        spec: the cell (``Cell.model_dump()`` fields: model, dtype, batch, input_len, output_len).
        e2e_s: the published end-to-end latency (s).
        limits: the device's limits.
        shape: the model shape (default: the zoo's).

    Returns:
        ``{"e2e_s", "e2e_floor_s", "e2e_utilisation" (floor / E2E), "tpot_s_at_most",
        "mbu_at_least", "device_id", "bandwidth_bytes_s"}``.

    Raises:
        RooflineError: the device lacks a figure; ValueError: the model is unknown.
    """
    r = roofline_for({**spec, "load": None}, None, limits, shape=shape)
    if r is None:
        raise ValueError(f"no roofline for {spec.get('model')!r}")
    n_out = int(spec["output_len"])
    tpot = (e2e_s - r["ttft_floor_s"]) / max(n_out - 1, 1)
    return {"e2e_s": e2e_s, "e2e_floor_s": r["e2e_floor_s"], "e2e_utilisation": r["e2e_floor_s"] / e2e_s,
            "tpot_s_at_most": tpot, "mbu_at_least": r["decode_bytes_per_step"] / (tpot * limits.bandwidth_bytes_s),
            "decode_bytes_per_step": r["decode_bytes_per_step"], "device_id": limits.id,
            "bandwidth_bytes_s": limits.bandwidth_bytes_s}
