"""The roofline floor of a cell: the bytes that must move and the FLOPs that must be
done, per operator, for the prefill and for each decode step; from them the lowest
possible TTFT and TPOT, and the utilisations ``mbu`` (decode) and ``mfu`` (prefill).

Operator model (per transformer layer, GenZ's per-operator roofline: Bambhaniya et
al., "Demystifying Platform Requirements for Diverse LLM Inference Use Cases", 2024,
github.com/abhibambhaniya/GenZ-LLM-Analyzer). A forward pass processes ``T`` new
tokens for each of ``B`` sequences (``M = B x T`` tokens) that attend to ``c`` context
positions on average. With ``H`` = hidden_size, ``q`` = heads x head_dim,
``k`` = kv_heads x head_dim, ``I`` = intermediate_size, ``E``/``e`` = experts in total /
per token, ``V`` = vocab_size, ``b_w``/``b_kv``/``b_a`` bytes per weight / KV / activation
element:

============  =====================  ======================================================
operator      FLOPs                  bytes
============  =====================  ======================================================
qkv_proj      2 M H (q + 2k)         b_w H (q + 2k) + b_a M (H + q + 2k)
attention     4 M c q                b_kv B c_read 2k + b_kv M 2k (write) + b_a 2 M q
o_proj        2 M q H                b_w q H + b_a M (q + H)
ffn (SwiGLU)  6 M H I e              b_w 3 H I E_touched(M) + b_a M (2H + 3I e)
lm_head       2 B H V (once)         b_w H V + b_a B (H + V)
============  =====================  ======================================================

Without flash attention (``flash=False``: llama.cpp's default ``-fa 0``, transformers'
eager attention) the score matrix ``S = Q K^T`` of ``heads x T x c_read`` elements per
sequence is materialised in fp32: written by the QK^T matmul, read and written by the
softmax, read by the AV matmul, :data:`SCORE_BYTES` = 4 accesses x 4 B = 16 B per element,
and the masked half of a causal prefill is computed too (``c = c_read``). Flash attention
(Dao et al. 2022, FlashAttention-2 2023) keeps S on chip and skips the masked blocks, so
its attention row of the table holds. Either way attention grows with the context: in the
prefill as ``n_in^2`` (FLOPs, and bytes without flash), in decode as ``c`` (KV bytes).

``E_touched(M) = E (1 - (1 - e/E)^M)`` is the expected number of distinct experts M
tokens route to (uniform routing); 1 for dense models. Only the last position of each
sequence goes through the LM head (vLLM, llama.cpp). The embedding lookup reads ``B x T``
rows and is left out. Prefill: ``T = n_in``, ``c = (n_in + 1) / 2`` (causal), ``c_read =
n_in``. Decode step: ``T = 1``, ``c = c_read`` = the context at that step; since every
decode operator's cost is linear in ``c`` and decode attention is always memory-bound,
the mean step is the step at the mean context ``n_in + n_out / 2``.

A floor is ``sum_ops max(FLOPs / peak, bytes / bandwidth)`` over ``tp`` devices (work
and weights split evenly), with no communication and no overhead: no engine can be
faster. The utilisations are the usual aggregate ones (Databricks' MBU; PaLM's MFU):

* ``mbu = decode bytes per step / (measured TPOT x bandwidth x tp)``
* ``mfu = prefill FLOPs / (measured TTFT x peak x tp)``

Relation to the energy study ("Beyond Throughput", Eq. for memory and compute per
decode step): ``Mem = P (N + B n_layer n_ctx d_model)`` and ``FLOPs = 2B (N + n_layer
n_ctx d_model)``. With ``P = b_w = b_kv``, multi-head attention (``k = q = d_model``)
and no activation traffic, the table gives ``Mem = P (N + 2 B n_layer n_ctx d_model)``
and ``FLOPs = 2B (N + 2 n_layer n_ctx d_model)``: the same form, counting both K and V
(the study counts one of them) and both attention matmuls (QK^T and AV; Kaplan et al.
2020 count the first). Grouped-query attention shrinks the KV term by heads/kv_heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from infbench.data import metrics as M
from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError
from infbench.data.models import ModelShape, resolve

#: Bytes per weight element by engine dtype (GGUF block formats carry their scales:
#: q8_0 = 34 B per 32 weights, q4_0 = 18 B per 32; ggml's block_q8_0 / block_q4_0).
DTYPE_WEIGHT_BYTES = {"q8_0": 34 / 32, "q4_0": 18 / 32, "q4_k_m": 4.85 / 8, "q5_k_m": 5.69 / 8,
                      # ggml blocks: q4_1 20 B / 32, q5_0 22 / 32, q5_1 24 / 32, q6_K 210 / 256, q2_K 84 / 256
                      # (llama.cpp's q2_K mix keeps some tensors wider: a lower bound).
                      "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32, "q6_k": 210 / 256, "q2_k": 84 / 256}
#: Bytes per weight element by precision class.
PRECISION_WEIGHT_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
#: Which peak rate each precision's matmuls run at, in order of preference: weight-only
#: quantised formats dequantise to 16 bit where the device has no int8/fp8 rate.
PEAK_FALLBACK = {"fp32": ["fp32"], "fp16": ["fp16", "bf16", "fp32"], "bf16": ["bf16", "fp16", "fp32"],
                 "fp8": ["fp8", "bf16", "fp16", "fp32"], "int8": ["int8", "fp16", "bf16", "fp32"],
                 "int4": ["int4", "int8", "fp16", "bf16", "fp32"]}


#: Bytes moved per element of a materialised attention score matrix (no flash
#: attention): fp32 scores written by QK^T, read and written by the softmax, read by AV
#: = 4 accesses x 4 B (ggml's KQ product and soft_max are f32; transformers' eager
#: attention up-casts the softmax to fp32).
SCORE_BYTES = 16.0


class RooflineError(ValueError):
    """The device description lacks the figure a floor needs (bandwidth or peak)."""


@dataclass(frozen=True)
class Limits:
    """One device's limits, in base units.

    Attributes:
        id: device description id (``h100-sxm``) or ``cpu``.
        bandwidth_bytes_s: peak memory bandwidth (B/s).
        peak_flops: precision class -> dense peak (FLOP/s).
        link_bytes_s: device-to-device bandwidth, one direction (B/s), for the
            tensor-parallel all-reduce; None if unknown.
        source: where the numbers come from.
        memory_bytes: device memory (B), None if unknown.
    """

    id: str
    bandwidth_bytes_s: float
    peak_flops: dict[str, float]
    link_bytes_s: float | None = None
    source: str = ""
    memory_bytes: float | None = None

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> Limits:
        """From an ``infbench_device_info`` dict (:meth:`DeviceSpec.per_device`).

        Raises:
            RooflineError: no bandwidth or no peak rate in ``info``.
        """
        bw = info.get("memory_bandwidth_bytes_s")
        peaks = {k: float(v) for k, v in (info.get("peak_flops") or {}).items() if v}
        if not bw or not peaks:
            raise RooflineError(f"device {info.get('id', '?')} has no memory bandwidth or peak FLOP/s "
                                "in its description")
        return cls(id=str(info.get("id") or "?"), bandwidth_bytes_s=float(bw), peak_flops=peaks,
                   link_bytes_s=info.get("link_bytes_s"), source=str(info.get("source") or ""),
                   memory_bytes=info.get("memory_bytes"))

    def peak(self, precision: str) -> tuple[float, str]:
        """The peak rate (FLOP/s) a ``precision`` runs at, and the class it was taken from.

        Raises:
            RooflineError: none of the fallbacks (:data:`PEAK_FALLBACK`) is described.
        """
        for p in PEAK_FALLBACK.get(precision, [precision]):
            if p in self.peak_flops:
                return self.peak_flops[p], p
        raise RooflineError(f"device {self.id} has no peak FLOP/s for {precision}")


def weight_bytes(dtype: str, precision: str) -> float:
    """Bytes per weight element: the GGUF block size for GGUF types, else the class's."""
    return DTYPE_WEIGHT_BYTES.get(dtype.lower(), PRECISION_WEIGHT_BYTES.get(precision, 2.0))


def act_bytes(precision: str) -> float:
    """Bytes per activation and KV-cache element: 4 for fp32, else 2 (16-bit)."""
    return 4.0 if precision == "fp32" else 2.0


def expected_experts(experts: int, top_k: int, tokens: Any) -> np.ndarray:
    """Expected distinct experts that ``tokens`` tokens route to in one MoE layer, each
    token choosing ``top_k`` of ``experts`` uniformly (no expert twice for one token):
    ``E (1 - (1 - k / E)^M)``. An expert is missed by one token with probability ``1 -
    k / E`` (``C(E-1, k) / C(E, k)``), by ``M`` independent tokens with that to the
    ``M``-th power. Mixtral (E = 8, k = 2): 2 at one token, 3.5 at two, 7.2 at 8, all 8
    by 32: why its decode step reads more weights as the batch grows, where a dense
    model's does not. Tokens may be an array (and fractional: a mean)."""
    t = np.asarray(tokens, dtype=float)
    if experts <= 1:
        return np.ones_like(t)
    return experts * (1.0 - (1.0 - min(top_k, experts) / experts) ** t)


def config_terms(m: ModelShape, dtype: str, batch: Any = 1) -> dict[str, Any]:
    """What a model's config implies for one decode step, with no fitted term: the
    weight bytes read (attention, the experts a batch of ``batch`` sequences touches,
    the LM head), the experts touched per MoE layer, the KV bytes per token
    (``2 x layers x num_key_value_heads x head_dim x bytes``), the LM head's share of
    the weight bytes (``vocab_size x hidden_size``: one matrix whether or not the
    embeddings are tied) and whether they are tied (then the weights in memory hold it
    once). Bytes in B; ``batch`` may be an array."""
    precision = precision_of(dtype.lower())
    bw, bkv = weight_bytes(dtype, precision), act_bytes(precision)
    b = np.asarray(batch, dtype=float)
    H, I, V, L = float(m.hidden), float(m.intermediate), float(m.vocab), float(m.layers)  # noqa: E741
    q, k = float(m.heads * m.head_dim), float(m.kv_heads * m.head_dim)
    touched = expected_experts(m.experts, m.experts_per_token, b)
    attn = L * bw * (H * (q + 2 * k) + q * H)
    ffn = L * bw * 3 * H * I * touched
    head = bw * H * V
    total = attn + ffn + head
    return {"weight_bytes_per_step": total, "experts_touched": touched if m.experts > 1 else None,
            "experts": m.experts, "experts_per_token": m.experts_per_token,
            "kv_bytes_per_token": 2 * L * m.kv_heads * m.head_dim * bkv, "lm_head_share": head / total,
            "tied_embeddings": bool(m.config.get("tie_word_embeddings"))}


def operators(m: ModelShape, precision: str, dtype: str, batch: Any, tokens: Any, ctx: Any,
              ctx_read: Any, flash: bool = True,
              kv_reread: float = 0.0) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """FLOPs and bytes of each operator of one forward pass (table in the module doc).

    Args:
        m: model shape.
        precision: precision class (``bf16``).
        dtype: the engine's dtype spelling (GGUF types set the weight bytes).
        batch: sequences B (scalar or array; arrays broadcast).
        tokens: new tokens per sequence T.
        ctx: mean attended positions per new token c.
        ctx_read: KV-cache positions read per sequence.
        flash: fused (flash) attention; False adds the ``attention_scores`` operator
            (the materialised ``heads x T x c_read`` score matrix, :data:`SCORE_BYTES`
            per element) and computes the full, unmasked ``T x c_read`` product.
        kv_reread: share of the ``heads / kv_heads - 1`` extra reads of each KV head that
            reach memory when an attention kernel walks the cache once per query head
            (0: read once, as the table; 1: once per query head).

    Returns:
        ``{name: (flops, bytes, times)}``: FLOPs and bytes of one instance (arrays,
        broadcast shape) and how many times it runs per pass (layers, or 1).
    """
    B = np.asarray(batch, dtype=float)
    T = np.asarray(tokens, dtype=float)
    c = np.asarray(ctx, dtype=float)
    cr = np.asarray(ctx_read, dtype=float)
    H, I, V = float(m.hidden), float(m.intermediate), float(m.vocab)  # noqa: E741 - the paper's symbols
    q = float(m.heads * m.head_dim)
    k = float(m.kv_heads * m.head_dim)
    E, e = float(m.experts), float(m.experts_per_token)
    bw, bkv = weight_bytes(dtype, precision), act_bytes(precision)
    ba = bkv
    M = B * T
    touched = expected_experts(m.experts, m.experts_per_token, M) if E > 1 else np.ones_like(M)
    L = float(m.layers)
    ops = {
        "qkv_proj": (2 * M * H * (q + 2 * k), bw * H * (q + 2 * k) + ba * M * (H + q + 2 * k), L),
        "attention": (4 * M * (c if flash else cr) * q,
                      bkv * B * cr * 2 * k * (1 + kv_reread * (q / k - 1)) + bkv * M * 2 * k + ba * 2 * M * q, L),
        "o_proj": (2 * M * q * H, bw * q * H + ba * M * (q + H), L),
        "ffn": (6 * M * H * I * e, bw * 3 * H * I * touched + ba * M * (2 * H + 3 * I * e), L),
        "lm_head": (2 * B * H * V, bw * H * V + ba * B * (H + V), 1.0),
    }
    if not flash:
        # The score matrix: heads x T x c_read per sequence; the softmax costs ~5 FLOPs an element
        # (max, subtract, exp, sum, divide).
        scores = M * float(m.heads) * cr
        ops["attention_scores"] = (5 * scores, SCORE_BYTES * scores, L)
    return ops


def pass_totals(ops: dict[str, tuple[np.ndarray, np.ndarray, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Total FLOPs and bytes of a forward pass (all operators x their repeat count)."""
    flops = sum(f * n for f, _, n in ops.values())
    nbytes = sum(b * n for _, b, n in ops.values())
    return np.asarray(flops), np.asarray(nbytes)


def pass_time(ops: dict[str, tuple[np.ndarray, np.ndarray, float]], peak: float, bandwidth: float,
              tp: Any = 1, eff_compute: float = 1.0, eff_memory: float = 1.0) -> np.ndarray:
    """GenZ's operator roofline: ``sum_ops n x max(F / (peak tp eff_c), B / (bw tp eff_m))`` in s."""
    tp = np.asarray(tp, dtype=float)
    total = 0.0
    for f, b, n in ops.values():
        total = total + n * np.maximum(f / (peak * tp * eff_compute), b / (bandwidth * tp * eff_memory))
    return np.asarray(total)


def prefill_ops(m: ModelShape, precision: str, dtype: str, batch: Any, n_in: Any, flash: bool = True):
    """:func:`operators` of the prefill of ``batch`` prompts of ``n_in`` tokens."""
    n = np.asarray(n_in, dtype=float)
    return operators(m, precision, dtype, batch, n, (n + 1) / 2, n, flash)


def decode_ops(m: ModelShape, precision: str, dtype: str, batch: Any, n_in: Any, n_out: Any, flash: bool = True):
    """:func:`operators` of the mean decode step (context ``n_in + n_out / 2``)."""
    c = np.asarray(n_in, dtype=float) + np.asarray(n_out, dtype=float) / 2
    return operators(m, precision, dtype, batch, 1.0, c, c, flash)


def effective_batch(spec: dict[str, Any], metrics: dict[str, Any] | None = None) -> float | None:
    """The number of sequences a cell ran together: the batch (batch mode), the
    concurrency (concurrency mode), else the mean requests in flight by Little's law
    (sum of E2E / duration) from ``metrics``; None if unknown."""
    ld = spec.get("load")
    if not ld or ld.get("mode") == "batch":
        return float(spec["batch"])
    if ld.get("mode") == "concurrency" and ld.get("concurrency"):
        return float(ld["concurrency"])
    m = metrics or {}
    mean, count, dur = M.E2E.value(m, "mean"), M.E2E.value(m, "count"), M.DURATION.value(m)
    if mean and count and dur:
        return max(1.0, mean * count / dur)
    return None


def cell_roofline(m: ModelShape, precision: str, dtype: str, batch: float, n_in: int, n_out: int, tp: int,
                  limits: Limits, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """The floor of one cell and, given its metrics, its utilisations.

    Args:
        m: model shape; precision/dtype: the cell's precision class and engine dtype.
        batch: sequences run together (:func:`effective_batch`).
        n_in, n_out: tokens in and out per request.
        tp: devices per model instance (tensor_parallel_size).
        limits: the device's limits.
        measured: the cell's metrics (``ttft_s``/``tpot_s`` summaries, s); optional.

    Returns:
        ``{"device_id", "peak_precision", "prefill_flops", "prefill_bytes",
        "decode_flops_per_step", "decode_bytes_per_step" (FLOP, B), "ttft_floor_s",
        "tpot_floor_s", "e2e_floor_s" (s), "mbu", "mfu" (0..1, None without a
        measurement), "source"}``.

    Raises:
        RooflineError: the device lacks a figure.
    """
    peak, peak_p = limits.peak(precision)
    bw = limits.bandwidth_bytes_s
    pre = prefill_ops(m, precision, dtype, batch, n_in)
    dec = decode_ops(m, precision, dtype, batch, n_in, n_out)
    pf, pb = pass_totals(pre)
    df, db = pass_totals(dec)
    ttft_floor = float(pass_time(pre, peak, bw, tp))
    tpot_floor = float(pass_time(dec, peak, bw, tp))
    out: dict[str, Any] = {
        "device_id": limits.id, "peak_precision": peak_p, "batch": batch,
        "prefill_flops": float(pf), "prefill_bytes": float(pb),
        "decode_flops_per_step": float(df), "decode_bytes_per_step": float(db),
        "ttft_floor_s": ttft_floor, "tpot_floor_s": tpot_floor,
        "e2e_floor_s": ttft_floor + max(n_out - 1, 0) * tpot_floor,
        "mbu": None, "mfu": None, "source": limits.source,
    }
    ms = measured or {}
    tpot, ttft = M.TPOT.value(ms, "mean"), M.TTFT.value(ms, "mean")
    if tpot and tpot > 0 and n_out >= 2:
        out["mbu"] = float(db) / (tpot * bw * tp)
    if ttft and ttft > 0:
        out["mfu"] = float(pf) / (ttft * peak * tp)
    return out


def roofline_for(spec: dict[str, Any], metrics: dict[str, Any] | None, limits: Limits,
                 shape: ModelShape | None = None) -> dict[str, Any] | None:
    """:func:`cell_roofline` of a stored cell (``spec`` = ``Cell.model_dump()``), or None
    when the model or its effective batch is unknown or the cell used a dataset or a
    trace (variable lengths).

    Raises:
        RooflineError: the device lacks a figure.
    """
    if spec.get("dataset") or spec.get("trace"):
        return None
    try:
        m = shape or resolve(spec["model"])
        m.param_counts()
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    b = effective_batch(spec, metrics)
    if b is None:
        return None
    dtype = str(spec["dtype"])
    precision = precision_of(dtype.lower())
    r = cell_roofline(m, precision, dtype, b, int(spec["input_len"]), int(spec["output_len"]),
                      int(spec.get("tensor_parallel_size") or 1), limits, metrics)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
