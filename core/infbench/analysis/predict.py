"""Analytical prediction of TTFT, TPOT, E2E, batch duration and throughput, and its
calibration against measured cells (local or published).

Method (GenZ, Bambhaniya et al., "Demystifying Platform Requirements for Diverse LLM
Inference Use Cases", arXiv 2406.01698, code github.com/abhibambhaniya/GenZ-LLM-Analyzer):
each operator of :mod:`infbench.analysis.roofline` takes ``max(FLOPs / (peak x eff_c),
bytes / (bandwidth x eff_m))`` on its share of the devices; around that roofline this
module adds what decides a real engine's time (docs/roofline.md gives each term with its
source and a worked example):

* **KV-cache capacity** (:func:`kv_capacity_tokens`): the tokens that fit beside the
  weights, ``(memory x fraction - reserve - weights per device) x devices / KV bytes per
  token``. A batch beyond it runs in waves (:func:`waves`): whole waves with TensorRT-LLM's
  guaranteed-no-evict scheduler (it reserves ``n_in + n_out`` per sequence), a fractional
  number with vLLM's paged cache, which refills freed blocks and preempts (recompute).
* **Scheduler overhead** per forward step ``a + a_d (devices - 1) + b x B`` (``overhead_s``,
  ``overhead_per_device_s``: the ranks of a multi-device engine synchronise every step;
  ``overhead_per_seq_s``), a per-request prefill overhead ``c`` and a per-batch one ``d``.
* **Attention** that grows with the context, with or without flash attention
  (:func:`infbench.analysis.roofline.operators`, ``flash``), prefill and decode.
* **Tensor parallelism**: two ring all-reduces per layer (Megatron-LM, Shoeybi et al. 2019),
  ``2 (tp - 1) / tp x bytes / (link x link_efficiency) + latency`` (:func:`allreduce_time`).
* **Pipeline parallelism** (:func:`pipeline_time`): ``(m + pp - 1)`` stage times for ``m``
  micro-batches (GPipe's bubble, Huang et al. 2019), each stage sending its activations to
  the next (:func:`p2p_time`, GenZ ``get_message_pass_time``). llama.cpp's default layer
  split is this with ``m = 1`` in decode and ``m`` = prompt chunks in the prefill.
* **Expert parallelism** (:func:`all_to_all_bytes`, :func:`expert_load`): two all-to-alls
  per MoE layer (dispatch and combine), and the busiest device's experts and tokens between
  GenZ's best and worst case (``GenZ/Models/ffn.py``), set by ``moe_imbalance`` (0..1).
* **Chunked prefill** (:func:`chunked_prefill_steps`): a token budget per step that prompt
  chunks fill beside the running decodes (Sarathi-Serve, Agrawal et al. 2024; vLLM
  ``enable_chunked_prefill``; DeepSpeed-FastGen's Dynamic SplitFuse, 768 tokens), or
  prompt-only chunks (llama.cpp's ``n_ubatch``).
* **Speculative decoding** (:class:`Speculative`): a draft model proposes ``k`` tokens,
  the target verifies ``k + 1`` in one pass; :func:`expected_tokens` per step.
* **Link efficiency**: collectives reach ``link_efficiency`` (GenZ measured 75 % of
  NVLink's bandwidth) of the described link.

Per wave of ``b`` sequences::

    prefill(b) = pipeline_time(stage = unit pass / pp, units, pp) + a' x units + c x b
    step(b)    = pipeline_time(stage = decode pass / pp, micro-batches, pp) + a' + b_seq x b
    a'         = a + a_d x (devices - 1)
    wave(b)    = prefill(b) + (n_out - 1) / tokens_per_step x step(b)
    duration   = waves of the batch (whole or fractional) + d

and TTFT, TPOT and E2E are the means over the requests of their wave. Throughputs are
``B n_out / duration`` (output) and ``B (n_in + n_out) / duration`` (total,
LLM-Inference-Bench eq. 2). Every quantity is a numpy array over the grid, so a whole
LLM-Inference-Bench grid is one call per (model, device, engine).

The efficiency factors and overheads are fitted hierarchically
(:mod:`infbench.analysis.profile`: an engine profile over every device, with stack, device
and model terms); :func:`calibrate` fits one (device, engine) against its engine's profile
on a deterministic 70 % of its cells and reports the geometric-mean error per metric on the
held-out rest (:mod:`infbench.analysis.calibration`); :mod:`infbench.analysis.intervals`
gives every prediction a 90 % interval.

The ``genz-llm`` package implements GenZ with a richer operator set but pins its own
hardware table and pulls in pandas and a web UI; infbench needs the model on its own
device descriptions, vectorised over a grid, per engine, and fitted to its own cells.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infbench.analysis.floor import device_roofline_limits
from infbench.analysis.roofline import (
    Limits,
    RooflineError,
    act_bytes,
    config_terms,
    effective_batch,
    operators,
    weight_bytes,
)
from infbench.data import metrics as M
from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError
from infbench.data.models import ModelShape, resolve
from infbench.data.schema import DeviceInfo
from infbench.data.stored import StoredCell
from infbench.detect.devices import catalog, find_spec, match_device
from infbench.detect.platforms.cpu import cpu_device

if TYPE_CHECKING:
    from infbench.contract.manager import PluginManager


#: Link bandwidth assumed for collectives when a device description gives none (B/s):
#: PCIe 4.0 x16, one direction. Said in the prediction's ``notes``.
DEFAULT_LINK_BYTES_S = 32e9
#: Start-up latency of one collective or point-to-point message (s): GenZ's 5 us start
#: latency (``GenZ/collective_times.py``) plus NCCL-like launch cost.
ALLREDUCE_LATENCY_S = 10e-6
#: Fraction of a link's bandwidth collectives reach: GenZ measured 75 % on NVLink.
LINK_EFFICIENCY = 0.75

#: Published efficiency figures the uncalibrated defaults start from, by device id
#: prefix: GenZ's validation (arXiv 2406.01698) found matmul efficiencies of about 0.4
#: on A100 and 0.55 to 0.75 on H100 (midpoint here); GenZ's own notebooks run H100 at a
#: system efficiency of 0.75 (``notebook/Chunked_prefill.ipynb``), taken as the memory
#: efficiency. Other devices get the middle of that range.
PUBLISHED_EFFICIENCY: dict[str, tuple[float, float]] = {
    "a100": (0.40, 0.75), "h100": (0.65, 0.75), "gh200": (0.65, 0.75), "h200": (0.65, 0.75),
}
DEFAULT_EFFICIENCY = (0.55, 0.75)


@dataclass
class Efficiency:
    """Efficiency factors and overheads of the analytical model (fitted by :func:`calibrate`).

    Attributes:
        eff_compute: fraction of peak FLOP/s reached by matmuls (0..1].
        eff_memory: fraction of peak bandwidth reached by weight reads (0..1].
        eff_attention: fraction of peak bandwidth reached by the attention operators'
            KV-cache (and score-matrix) traffic; None: ``eff_memory``. Paged attention
            gathers the KV cache in blocks and reaches less than a weight GEMM does.
        kv_reread: share of the extra reads of each KV head by the query heads that share
            it (grouped-query attention): 0 = read once, 1 = once per query head
            (:func:`infbench.analysis.roofline.operators`).
        overhead_s: ``a``, fixed time per forward step (kernel launches, scheduling,
            sampling), s.
        overhead_per_device_s: ``a_d``, time per forward step per device beyond the first
            (the engine's ranks exchange the step's metadata and synchronise), s.
        overhead_per_seq_s: ``b``, time per step per running sequence (the scheduler's
            and sampler's per-sequence work), s.
        prefill_overhead_s: ``c``, time per request when it is admitted (tokenisation,
            block allocation, input preparation), s.
        batch_overhead_s: ``d``, time per batch (a ``generate`` call's own start-up), s.
        link_efficiency: fraction of the link bandwidth collectives reach (0..1].
        collective_latency_s: start-up latency of one collective or p2p message, s.
        kv_memory_fraction: fraction of device memory the engine may use for weights and
            KV cache; None takes the engine's default (:class:`Serving`).
        kv_reserve_bytes: memory per device kept out of the KV cache beside the weights
            (activations, CUDA graphs, communication buffers), B; None takes the engine's
            default (:class:`Serving`).
        device_count_log: ``{devices: log factor}``, a fitted campaign's own slow-down at
            that number of devices per model instance beyond what its smallest count and
            the model explain (:class:`~infbench.analysis.profile.FleetFit` ``counts``;
            e.g. llama.cpp on 2 and 4 Intel PVC GPUs, 5.5 and 7.6 times its time on one).
            Every time is multiplied by ``exp(factor)``; absent counts by 1. Keys are
            device counts as text (JSON keys).
        source: ``default ...`` or what they were fitted on.
    """

    eff_compute: float = DEFAULT_EFFICIENCY[0]
    eff_memory: float = DEFAULT_EFFICIENCY[1]
    eff_attention: float | None = None
    kv_reread: float = 0.0
    overhead_s: float = 0.0
    overhead_per_device_s: float = 0.0
    overhead_per_seq_s: float = 0.0
    prefill_overhead_s: float = 0.0
    batch_overhead_s: float = 0.0
    link_efficiency: float = LINK_EFFICIENCY
    collective_latency_s: float = ALLREDUCE_LATENCY_S
    kv_memory_fraction: float | None = None
    kv_reserve_bytes: float | None = None
    device_count_log: dict[str, float] | None = None
    source: str = "default (published efficiency figures, not fitted)"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Efficiency:
        """From :func:`dataclasses.asdict` output; unknown keys are ignored and missing
        ones take their defaults (calibrations saved by older versions load)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def default_efficiency(device_id: str) -> Efficiency:
    """The uncalibrated factors for a device id: :data:`PUBLISHED_EFFICIENCY` by prefix
    (``a100-40gb`` -> A100's), else :data:`DEFAULT_EFFICIENCY`."""
    for prefix, (c, m) in PUBLISHED_EFFICIENCY.items():
        if device_id.lower().startswith(prefix):
            return Efficiency(c, m, source=f"default for {prefix} (published figures: GenZ arXiv 2406.01698)")
    return Efficiency()


@dataclass(frozen=True)
class Serving:
    """How an engine schedules a batch: the engine's side of the model.

    Attributes:
        engine: the engine name it describes.
        kv_policy: ``paged`` (blocks allocated as sequences grow, preemption when full:
            vLLM, DeepSpeed-FastGen; a batch beyond capacity runs in fractional waves),
            ``reserve`` (``n_in + n_out`` reserved per sequence at admission: TensorRT-LLM's
            guaranteed-no-evict; whole waves) or ``static`` (one static batch allocated up
            front: transformers, optimum-habana; beyond capacity it does not fit).
        memory_fraction: share of device memory for weights + KV (vLLM
            ``gpu_memory_utilization``, TensorRT-LLM ``free_gpu_memory_fraction``).
        reserve_bytes: memory per device kept out of the KV cache (activations, graphs), B.
        max_num_seqs: most sequences in one step (vLLM ``max_num_seqs``), None: no limit.
        prefill_chunk: token budget per step for prompts (chunked prefill, DeepSpeed's
            ``max_ragged_batch_size``, llama.cpp's ``n_ubatch``); None: whole prompts.
        mixed_chunks: decode tokens share the budget with prompt chunks (Sarathi-Serve,
            vLLM chunked prefill, Dynamic SplitFuse) rather than prompts running alone.
        flash_attention: fused attention (no materialised score matrix).
        split: how the cell's devices hold one model: ``tensor`` (tensor parallel) or
            ``layer`` (llama.cpp's default ``--split-mode layer``: a pipeline, ``pp`` = devices).
        kv_per_query_head: the attention reads each KV head once per query head, so the
            KV traffic is that of multi-head attention whatever the grouping: llama.cpp's
            ``-fa 0`` path (``ggml_mul_mat`` broadcasts a KV head to its query heads, and
            the CUDA/HIP kernels read it for each), transformers' ``repeat_kv`` (the KV
            heads copied per query head before SDPA). The fitted ``kv_reread`` does not
            apply there (it is 1).
        uneven_heads: tensor parallelism may give ranks unequal numbers of attention heads
            (DeepSpeed's AutoTP shards heads unevenly: Qwen2-7B's 28 heads on 8 Gaudi2s ran in
            LLM-Inference-Bench); vLLM and TensorRT-LLM need ``heads % tp == 0``.
        source: where these defaults come from.
    """

    engine: str = "generic"
    kv_policy: str = "paged"
    memory_fraction: float = 0.9
    reserve_bytes: float = 0.0
    max_num_seqs: int | None = None
    prefill_chunk: int | None = None
    mixed_chunks: bool = False
    flash_attention: bool = True
    split: str = "tensor"
    kv_per_query_head: bool = False
    uneven_heads: bool = False
    source: str = "generic continuous-batching engine"

    def with_options(self, options: dict[str, Any] | None) -> Serving:
        """This profile with an engine's own options applied: ``gpu_memory_utilization``,
        the most sequences in one step (:data:`SLOT_OPTIONS`: vLLM's ``max_num_seqs``,
        SGLang's ``max_running_requests``, TensorRT-LLM's ``max_batch_size``, llama.cpp
        server's ``parallel`` slots), ``max_num_batched_tokens`` with
        ``enable_chunked_prefill`` (vLLM), ``n_batch``/``n_ubatch`` (llama.cpp: chunk = min
        of the two), ``flash_attn``, ``split_mode``. Unknown options are ignored."""
        o = options or {}
        kw: dict[str, Any] = {}
        if o.get("gpu_memory_utilization"):
            kw["memory_fraction"] = float(o["gpu_memory_utilization"])
        slots = [n for n in (_count(o.get(k)) for k in SLOT_OPTIONS) if n]
        if slots:
            kw["max_num_seqs"] = min(slots)
        if o.get("enable_chunked_prefill") and o.get("max_num_batched_tokens"):
            kw.update(prefill_chunk=int(o["max_num_batched_tokens"]), mixed_chunks=True)
        chunks = [int(o[k]) for k in ("n_batch", "n_ubatch") if o.get(k)]
        if chunks:
            kw["prefill_chunk"] = min(chunks + ([self.prefill_chunk] if self.prefill_chunk and "n_ubatch" not in o
                                                 else []))
        if "flash_attn" in o and o["flash_attn"] is not None:
            kw["flash_attention"] = bool(o["flash_attn"])
            if self.engine == "llama.cpp":  # llama.cpp's flash-attention kernel reads a KV head once per group
                kw["kv_per_query_head"] = not kw["flash_attention"]
        if o.get("split_mode") in ("layer", "row", "tensor"):
            kw["split"] = "layer" if o["split_mode"] == "layer" else "tensor"
        return replace(self, **kw) if kw else self


#: Engine options that cap the sequences one step runs (a server's slots): a concurrency
#: above the cap queues (its requests wait, TTFT grows) and the step runs the cap. vLLM
#: ``max_num_seqs``, SGLang ``max_running_requests``, TensorRT-LLM ``max_batch_size``,
#: llama.cpp server ``--parallel`` (``n_parallel`` in its library).
SLOT_OPTIONS = ("max_num_seqs", "max_running_requests", "max_batch_size", "parallel", "n_parallel")


def _count(v: Any) -> int | None:
    """A positive whole number from an engine option's value (``4``, ``4.0``, ``"4"``), else None."""
    if v is None or isinstance(v, bool):
        return None
    try:
        n = int(float(v))
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n > 0 else None


#: Engine profiles by engine name (family): defaults of each engine as it shipped when
#: LLM-Inference-Bench measured it (2024).
ENGINE_PROFILES: dict[str, Serving] = {
    "vllm": Serving("vllm", "paged", 0.9, max_num_seqs=256, flash_attention=True,
                    source="vLLM EngineArgs: gpu_memory_utilization 0.9, max_num_seqs 256, paged KV blocks with "
                           "recompute preemption, FlashAttention backend"),
    "trtllm-serve": Serving("trtllm-serve", "reserve", 0.9, flash_attention=True,
                            source="TensorRT-LLM KvCacheConfig free_gpu_memory_fraction 0.9, "
                                   "CapacitySchedulerPolicy GUARANTEED_NO_EVICT, fused MHA"),
    "llama.cpp": Serving("llama.cpp", "static", 1.0, prefill_chunk=512, flash_attention=False, split="layer",
                         kv_per_query_head=True,
                         source="llama.cpp: n_ubatch 512, flash attention off (-fa 0: KV heads broadcast to every "
                                "query head in ggml_mul_mat), --split-mode layer, context allocated up front"),
    "transformers": Serving("transformers", "static", 1.0, flash_attention=True, kv_per_query_head=True,
                            source="transformers generate(): static batch, SDPA attention after repeat_kv"),
    "deepspeed-mii": Serving("deepspeed-mii", "paged", 1.0, reserve_bytes=1e9, max_num_seqs=512, prefill_chunk=768,
                             mixed_chunks=True, flash_attention=True,
                             source="DeepSpeed-FastGen DSStateManagerConfig: max_ragged_batch_size 768 (Dynamic "
                                    "SplitFuse), max_ragged_sequence_count 512, MemoryConfig reserve 1 GB"),
    "optimum-habana": Serving("optimum-habana", "static", 1.0, flash_attention=False, uneven_heads=True,
                              source="optimum-habana run_generation.py (with DeepSpeed for several HPUs: "
                                     "LLM-Inference-Bench's 'Deepspeed' on Gaudi2): static shapes, HPU graphs"),
    "sglang-server": Serving("sglang-server", "paged", 1.0, reserve_bytes=13e9, prefill_chunk=8192,
                             mixed_chunks=False, flash_attention=True,
                             source="SGLang ServerArgs (0.5): KV pool = memory minus ~13 GB reserved on an 80 GB GPU "
                                    "(512 MB + 1.5 MB per chunked-prefill token + CUDA graphs), chunked_prefill_size "
                                    "8192, enable_mixed_chunk off, FlashInfer/FlashAttention"),
}
#: Engine names that share a profile (same engine, another front end). LLM-Inference-Bench's
#: "Deepspeed" on Gaudi2 is optimum-habana's generation script under DeepSpeed.
ENGINE_FAMILY = {"vllm-server": "vllm", "llama.cpp-server": "llama.cpp", "trtllm": "trtllm-serve",
                 "tensorrt-llm": "trtllm-serve", "mii": "deepspeed-mii", "deepspeed-mii-server": "deepspeed-mii",
                 "deepspeed": "optimum-habana",
                 "sglang": "sglang-server"}


def engine_family(engine: str) -> str:
    """The profile name of an engine (``vllm-server`` -> ``vllm``)."""
    e = (engine or "generic").lower()
    return ENGINE_FAMILY.get(e, e)


def serving_for(engine: str, options: dict[str, Any] | None = None) -> Serving:
    """The :class:`Serving` profile of an engine (generic when unknown) with its options."""
    fam = engine_family(engine)
    base = ENGINE_PROFILES.get(fam) or Serving(fam)
    return base.with_options(options)


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding (Leviathan et al. 2023; GenZ ``llm_spec_decode.py``).

    Attributes:
        draft: the draft model's shape (runs on the same devices and parallelism).
        k: tokens the draft proposes per step.
        acceptance: probability that the target accepts a draft token (0..1).
    """

    draft: ModelShape
    k: int = 4
    acceptance: float = 0.7


def expected_tokens(k: int, acceptance: float) -> float:
    """Expected tokens a speculative step yields: ``(1 - a^(k+1)) / (1 - a)`` (Leviathan
    et al. 2023, eq. 1): the accepted prefix of the ``k`` draft tokens plus the target's
    own token; ``k + 1`` at ``a = 1``.

    GenZ's ``expected_tokens`` sums the same series term by term, ``1 + sum_{i<k} i a^i
    (1 - a) + k a^k`` (equal to ``sum_{i=0..k} a^i``), but caps it at ``k``; the two agree
    below that cap (``k = 4, a = 0.7``: ``(1 - 0.7^5) / 0.3 = 2.7731``).

    Raises:
        ConfigError: ``k < 1`` or ``acceptance`` outside [0, 1].
    """
    if k < 1 or not 0.0 <= acceptance <= 1.0:
        raise ConfigError(f"speculative decoding needs k >= 1 and 0 <= acceptance <= 1 (got k={k}, "
                          f"acceptance={acceptance})")
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def _precision(dtype: str) -> str:
    return precision_of(dtype.lower())


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=float)


# -- the terms ---------------------------------------------------------------------------

def allreduce_time(m: ModelShape, precision: str, batch: Any, tokens: Any, tp: Any, link_bytes_s: float,
                   latency_s: float = ALLREDUCE_LATENCY_S) -> np.ndarray:
    """Two ring all-reduces per layer of ``B x T x hidden`` activations (s); 0 at tp = 1.

    Each: ``2 (tp - 1) / tp x bytes / link + latency`` (ring all-reduce; GenZ
    ``get_AR_time``). ``link_bytes_s`` is the usable rate (already times the link efficiency).
    """
    tp = _arr(tp)
    size = _arr(batch) * _arr(tokens) * m.hidden * act_bytes(precision)
    one = 2 * (tp - 1) / tp * size / link_bytes_s + latency_s
    return np.where(tp > 1, 2 * m.layers * one, 0.0)


def p2p_time(m: ModelShape, precision: str, tokens: Any, link_bytes_s: float,
             latency_s: float = ALLREDUCE_LATENCY_S) -> np.ndarray:
    """One pipeline stage's send of ``tokens x hidden`` activations to the next (s):
    ``bytes / link + latency`` (GenZ ``get_message_pass_time``)."""
    return _arr(tokens) * m.hidden * act_bytes(precision) / link_bytes_s + latency_s


def pipeline_time(stage_s: Any, microbatches: Any, pp: Any, p2p_s: Any = 0.0) -> np.ndarray:
    """Time for ``m`` micro-batches through ``pp`` stages of ``stage_s`` each (s):
    ``(m + pp - 1) x (stage + p2p)`` (GPipe, Huang et al. 2019; the bubble is the
    ``pp - 1`` extra stage times, a fraction ``(pp - 1) / (m + pp - 1)`` of the total).
    No transfer at ``pp = 1``."""
    pp = _arr(pp)
    return (_arr(microbatches) + pp - 1) * (_arr(stage_s) + np.where(pp > 1, _arr(p2p_s), 0.0))


def chunked_prefill_steps(batch: Any, n_in: Any, budget: Any, mixed: bool = True) -> np.ndarray:
    """Steps that prefill ``batch`` prompts of ``n_in`` tokens under a token budget per step.

    Prompt-only chunks (llama.cpp ``n_ubatch``): ``ceil(B n_in / N)``. Mixed (Sarathi-Serve,
    vLLM chunked prefill, Dynamic SplitFuse): the decode tokens of the sequences already
    prefilled go first and prompt chunks fill the rest; with all prompts arriving at once
    the decoding sequences ramp from 0 to ``B - 1``, ``(B - 1) / 2`` on average, so
    ``ceil(B n_in / (N - (B - 1) / 2))``. ``budget`` NaN or 0: whole prompts in one step.
    """
    b, n, N = np.broadcast_arrays(_arr(batch), _arr(n_in), _arr(budget))
    room = np.maximum(N - ((b - 1) / 2 if mixed else 0.0), 1.0)
    steps = np.ceil(b * n / np.where(np.isfinite(N) & (N > 0), room, np.inf))
    return np.where(np.isfinite(N) & (N > 0), np.maximum(steps, 1.0), 1.0)


def kv_capacity_tokens(m: ModelShape, limits: Limits, dtype: str, devices: Any = 1, ep: int = 1,
                       memory_fraction: float = 0.9, reserve_bytes: float = 0.0) -> np.ndarray:
    """Tokens of KV cache that fit beside the weights on ``devices`` (tp x pp) x ``ep`` devices.

    ``(memory x fraction - reserve - weights per device) x devices / KV bytes per token``,
    the weights split evenly over ``devices`` (expert weights also over ``ep``), the KV
    bytes per token ``2 x layers x kv_heads x head_dim x bytes`` (:meth:`ModelShape.kv_bytes_per_token`).
    Infinite when the device memory is unknown; <= 0 when the weights alone do not fit.
    """
    d = _arr(devices)
    if not limits.memory_bytes:
        return np.full(d.shape, np.inf)
    precision = _precision(dtype)
    wb = weight_bytes(dtype, precision)
    total = m.param_counts()["total"]
    expert = (m.experts * 3 * m.hidden * m.intermediate * m.layers) if m.experts > 1 else 0
    w_dev = ((total - expert) / d + expert / (d * ep)) * wb
    kv = 2 * m.layers * m.kv_heads * m.head_dim * act_bytes(precision)
    free = limits.memory_bytes * memory_fraction - reserve_bytes - w_dev
    return free * d * ep / kv


def concurrency(batch: Any, capacity_tokens: Any, n_in: Any, n_out: Any, policy: str = "paged",
                max_num_seqs: int | None = None) -> np.ndarray:
    """Sequences that run together: ``min(B, max_num_seqs, floor(capacity / footprint))``,
    the footprint ``n_in + n_out`` for ``reserve``/``static`` and the mean ``n_in + n_out / 2``
    for ``paged`` (blocks are taken as sequences grow; the ones short of blocks are
    preempted and recomputed). At least 1 (a single sequence that does not fit is
    reported by ``fits_memory``, not here)."""
    b = _arr(batch)
    foot = _arr(n_in) + _arr(n_out) * (0.5 if policy == "paged" else 1.0)
    c = np.floor(_arr(capacity_tokens) / foot)
    c = np.minimum(b, np.where(np.isfinite(c), c, b))
    if max_num_seqs:
        c = np.minimum(c, max_num_seqs)
    return np.maximum(c, 1.0)


#: KV-cache block size of a paged engine (tokens): vLLM's default ``block_size`` 16.
KV_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class PagedRun:
    """What a paged engine does with a batch whose KV cache does not fit at once
    (:func:`paged_schedule`).

    Attributes:
        decode_steps: decode steps until the last sequence finishes.
        mean_running: sequences per decode step on average (the effective concurrency).
        prefill_tokens: tokens prefilled, the recomputed ones of preempted sequences
            included.
        recompute_tokens: of those, the ones prefilled again after a preemption (a
            preempted sequence's prompt and the tokens it had generated).
        preemptions: sequences preempted (each one recomputes its prompt and the tokens
            it had generated when it is admitted again).
    """

    decode_steps: int
    mean_running: float
    prefill_tokens: int
    recompute_tokens: int
    preemptions: int


@functools.lru_cache(maxsize=65536)
def paged_schedule(batch: int, n_in: int, n_out: int, capacity: int, max_num_seqs: int | None = None) -> PagedRun:
    """Simulate vLLM's scheduler (v0.4-0.6 ``Scheduler._schedule_default`` with recompute
    preemption, the default for single-sequence requests) on ``batch`` requests of
    ``n_in`` prompt and ``n_out`` output tokens submitted at once, with a KV cache of
    ``capacity`` tokens (rounded down to :data:`KV_BLOCK_TOKENS` blocks).

    Each step, waiting requests are admitted first-come first-served while the cache holds
    their whole current length (prompt plus the tokens they had generated, for a preempted
    one) and fewer than ``max_num_seqs`` run; admitted ones are prefilled (a step of their
    own, which also samples their next token). Otherwise the running sequences decode one
    token each; when the cache cannot take one more token for every running sequence, the
    most recently admitted are preempted (their blocks freed, back to the front of the
    queue) until it can. Sequences admitted together move together (cohorts), and the
    steps between two events (a cohort finishing, the cache filling) are taken at once,
    so a batch of 256 x 4096 tokens takes a few hundred iterations.

    Args:
        batch, n_in, n_out: the requests (tokens); capacity: KV-cache tokens of the
            engine's instance; max_num_seqs: most running sequences (None: no limit).

    Returns:
        A :class:`PagedRun`.

    Raises:
        ConfigError: one sequence does not fit (``n_in + n_out > capacity``).
    """
    cap = (int(capacity) // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    if n_in + n_out > cap:
        raise ConfigError(f"one sequence of {n_in} + {n_out} tokens does not fit in a KV cache of {cap} tokens")
    limit = max_num_seqs or batch
    waiting: list[list[int]] = [[batch, n_in, 0]]  # [count, tokens to prefill (context), generated]
    running: list[list[int]] = []  # [count, context, generated], oldest first
    free = cap
    steps = run_sum = 0
    prefill = recompute = preempted = 0
    for _ in range(1_000_000):
        if not waiting and not running:
            break
        n_run = sum(c[0] for c in running)
        admitted = False
        while waiting and n_run < limit:
            cnt, ctx, gen = waiting[0]
            k = min(cnt, free // (ctx + 1), limit - n_run)
            if k <= 0:
                break
            admitted = True
            prefill += k * ctx
            recompute += k * ctx if gen else 0
            free -= k * (ctx + 1)
            running.append([k, ctx + 1, gen + 1])
            n_run += k
            if k == cnt:
                waiting.pop(0)
            else:
                waiting[0][0] -= k
        if admitted:
            done = [c for c in running if c[2] >= n_out]
            for c in done:
                free += c[0] * c[1]
            running = [c for c in running if c[2] < n_out]
            continue
        if not running:  # nothing runs and nothing fits: cannot happen while one sequence fits
            raise ConfigError(f"the KV cache of {cap} tokens cannot admit a sequence of {waiting[0][1]} tokens")
        # Preempt the newest sequences until every running one can take a token.
        while free < n_run and running:
            cnt, ctx, gen = running[-1]
            need = n_run - free
            k = min(cnt, -(-need // (ctx + 1)))
            free += k * ctx
            preempted += k
            n_run -= k
            waiting.insert(0, [k, ctx, gen])
            if k == cnt:
                running.pop()
            else:
                running[-1][0] -= k
        if not running:
            continue
        # Decode until a cohort finishes or the cache is full.
        k = min(min(n_out - c[2] for c in running), max(free // n_run, 1))
        steps += k
        run_sum += n_run * k
        free -= n_run * k
        for c in running:
            c[1] += k
            c[2] += k
        for c in [c for c in running if c[2] >= n_out]:
            free += c[0] * c[1]
        running = [c for c in running if c[2] < n_out]
    return PagedRun(steps, run_sum / steps if steps else float(batch), prefill, recompute, preempted)


def waves(batch: Any, conc: Any, policy: str = "paged") -> tuple[np.ndarray, np.ndarray]:
    """How a batch of ``B`` runs at concurrency ``C``: ``(full waves, sequences in the
    last partial wave)``. ``reserve``/``static``: ``floor(B / C)`` whole waves of ``C`` and
    one of ``B mod C``. ``paged``: continuous batching refills freed slots at once, so the
    batch takes ``B / C`` waves of ``C`` (fractional), no partial wave."""
    b, c = np.broadcast_arrays(_arr(batch), _arr(conc))
    if policy == "paged":
        return b / c, np.zeros_like(b)
    full = np.floor(b / c)
    return full, b - full * c


def expert_load(tokens: Any, experts: int, top_k: int, ep: int, imbalance: float = 0.0) -> tuple[Any, Any]:
    """The busiest expert-parallel device's ``(experts touched, tokens x experts routed)``
    in one MoE layer for ``tokens`` tokens (GenZ ``GenZ/Models/ffn.py``'s bounds).

    Activated experts ``A = min(K x tokens, E)``. Best case (even routing): ``max(1,
    ceil(A / ep))`` experts and ``tokens x K / ep`` routed tokens per device. Worst case
    (all activated experts on one device): ``min(A, ceil(E / ep))`` experts and ``tokens x
    min(K, ceil(E / ep))`` routed tokens. ``imbalance`` in [0, 1] interpolates.
    """
    t = _arr(tokens)
    a = np.minimum(top_k * t, experts)
    per = math.ceil(experts / ep)
    best_e, worst_e = np.maximum(1.0, np.ceil(a / ep)), np.minimum(a, per)
    best_t, worst_t = t * top_k / ep, t * min(top_k, per)
    return best_e + imbalance * (worst_e - best_e), best_t + imbalance * (worst_t - best_t)


def all_to_all_bytes(m: ModelShape, precision: str, tokens: Any, ep: int) -> np.ndarray:
    """Bytes one device sends in one all-to-all of a MoE layer (dispatch or combine): its
    ``tokens / ep`` tokens x ``K`` routed copies x ``hidden`` x activation bytes, of which
    ``(ep - 1) / ep`` leave the device (GenZ ``get_A2A_time``'s message size)."""
    if ep <= 1:
        return np.zeros_like(_arr(tokens))
    return _arr(tokens) / ep * m.experts_per_token * m.hidden * act_bytes(precision) * (ep - 1) / ep


def _model_ops(m: ModelShape, precision: str, dtype: str, seqs: Any, toks: Any, ctx: Any, ctx_read: Any,
               flash: bool, ep: int, imbalance: float,
               kv_reread: float = 0.0) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """Operators of one expert-parallel device's share (all of it at ep = 1): with ep > 1
    the attention runs data-parallel on ``seqs / ep`` sequences and the experts of the
    busiest device (:func:`expert_load`) replace the FFN."""
    if ep <= 1:
        return operators(m, precision, dtype, seqs, toks, ctx, ctx_read, flash, kv_reread)
    ops = operators(m, precision, dtype, _arr(seqs) / ep, toks, ctx, ctx_read, flash, kv_reread)
    M = _arr(seqs) * _arr(toks)
    n_exp, routed = expert_load(M, m.experts, m.experts_per_token, ep, imbalance)
    H, I = float(m.hidden), float(m.intermediate)  # noqa: E741 - the paper's symbols
    bw, ba = weight_bytes(dtype, precision), act_bytes(precision)
    ops["ffn"] = (6 * H * I * routed, bw * 3 * H * I * n_exp + ba * routed * (2 * H + 3 * I), float(m.layers))
    return ops


def _ops_time(ops: dict[str, tuple[np.ndarray, np.ndarray, float]], peak: float, bandwidth: float, tp: Any,
              eff: Efficiency) -> np.ndarray:
    """GenZ's operator roofline on ``tp`` devices, attention at its own bandwidth efficiency (s)."""
    tp = _arr(tp)
    total = 0.0
    eff_attn = eff.eff_attention or eff.eff_memory
    for name, (f, b, n) in ops.items():
        em = eff_attn if name.startswith("attention") else eff.eff_memory
        total = total + n * np.maximum(f / (peak * tp * eff.eff_compute), b / (bandwidth * tp * em))
    return np.asarray(total)


# -- the prediction ----------------------------------------------------------------------

def predict(m: ModelShape, limits: Limits, batch: Any, n_in: Any, n_out: Any, tp: Any = 1,
            dtype: str = "bf16", eff: Efficiency | None = None, *, pp: Any = 1, ep: int = 1,
            serving: Serving | None = None, prefill_chunk: Any = None, speculative: Speculative | None = None,
            moe_imbalance: float = 0.0) -> dict[str, np.ndarray]:
    """Predicted latencies and throughputs over a grid (arrays broadcast together).

    Args:
        m: model shape.
        limits: device limits (per device).
        batch: sequences submitted together (batch mode) or kept in flight.
        n_in, n_out: tokens in and out per request.
        tp, pp: tensor- and pipeline-parallel degrees (devices = tp x pp x ep). With
            ``serving.split == "layer"`` (llama.cpp) ``tp`` devices hold a layer pipeline.
        dtype: engine dtype or precision class.
        eff: efficiency factors (default :func:`default_efficiency` of the device).
        ep: expert-parallel degree (MoE models only).
        serving: the engine's profile (default: a generic paged engine).
        prefill_chunk: per-point token budget per step (overrides the profile's; NaN: the profile's).
        speculative: speculative decoding, or None.
        moe_imbalance: 0 (even routing) .. 1 (GenZ's worst case) for expert parallelism.

    Returns:
        Arrays of the broadcast shape: ``ttft_s``, ``tpot_s``, ``e2e_s`` (means over the
        requests, s), ``duration_s`` (the whole batch, s), ``output_tok_s``,
        ``total_tok_s``, ``output_tok_s_per_device`` (tokens/s), ``memory_bytes`` (B per
        device: weights + KV of the sequences running together), ``kv_capacity_tokens``,
        ``concurrency`` (sequences per wave; for a paged engine whose cache binds, the
        mean running sequences of :func:`paged_schedule`), ``waves`` (waves of the batch),
        ``preemptions`` and ``recompute_tokens`` (a paged engine's preempted sequences
        and the tokens it prefills again for them), ``fits_memory`` (1.0 / 0.0; NaN when
        the device memory is unknown). Where the engine cannot run the cell (the weights
        or one sequence's KV cache do not fit; a static engine's whole batch does not
        fit) the latencies and throughputs are NaN and ``fits_memory`` is 0: nothing is
        extrapolated that cannot happen.

    Raises:
        RooflineError: the device lacks a figure.
        ConfigError: expert parallelism on a dense model.
    """
    sv = serving or Serving()
    eff = eff or default_efficiency(limits.id)
    if ep > 1 and m.experts <= 1:
        raise ConfigError(f"expert parallelism (ep={ep}) needs a mixture-of-experts model; {m.name} is dense")
    precision = _precision(dtype)
    peak, _ = limits.peak(precision)
    bw = limits.bandwidth_bytes_s
    link = (limits.link_bytes_s or DEFAULT_LINK_BYTES_S) * eff.link_efficiency
    lat = eff.collective_latency_s
    chunk_default = float(sv.prefill_chunk) if sv.prefill_chunk else np.nan
    chunk = _arr(chunk_default if prefill_chunk is None else prefill_chunk)
    chunk = np.where(np.isfinite(chunk) & (chunk > 0), chunk, chunk_default)
    B, I, O, D, P, N = np.broadcast_arrays(*(_arr(x) for x in (batch, n_in, n_out, tp, pp, chunk)))  # noqa: E741
    if sv.split == "layer":
        T, P = np.ones_like(D), D * P
    else:
        T = D
    devices = T * P * ep
    flash = sv.flash_attention
    if sv.kv_per_query_head:
        # The engine's attention reads each KV head once per query head (Serving).
        eff = replace(eff, kv_reread=1.0)
    step_overhead = eff.overhead_s + eff.overhead_per_device_s * (devices - 1)

    frac = eff.kv_memory_fraction or sv.memory_fraction
    reserve = sv.reserve_bytes if eff.kv_reserve_bytes is None else eff.kv_reserve_bytes
    cap = kv_capacity_tokens(m, limits, dtype, T * P, ep, frac, reserve)
    conc = np.array(concurrency(B, cap, I, O, sv.kv_policy, sv.max_num_seqs), dtype=float)
    # What the engine does when the batch's KV cache does not fit beside the weights:
    # a paged engine preempts and recomputes (simulated: paged_schedule), a reserving one
    # runs smaller waves, a static one cannot run the batch; a sequence that does not fit
    # alone, or weights that do not fit at all, cannot run anywhere (refused: NaN).
    finite_cap = np.isfinite(cap)
    refused = finite_cap & (cap < I + O)
    if sv.kv_policy == "static":
        # a static engine allocates its running sequences up front: the batch, or the server's
        # slots where they cap it (llama.cpp's --parallel: its context is slots x per-slot)
        held = np.minimum(B, sv.max_num_seqs) if sv.max_num_seqs else B
        refused |= finite_cap & (cap < held * (I + O))
    recompute_share = np.zeros(B.shape)
    preemptions = np.zeros(B.shape)
    if sv.kv_policy == "paged":
        bind = finite_cap & ~refused & (cap < B * (I + O))
        for idx in map(tuple, np.argwhere(bind)):
            b, i, o = int(B[idx]), int(I[idx]), int(O[idx])
            run = paged_schedule(b, i, o, int(cap[idx]), sv.max_num_seqs)
            conc[idx] = min(run.mean_running, b)
            recompute_share[idx] = run.recompute_tokens / max(b * i, 1)
            preemptions[idx] = run.preemptions
    n_full, rest = waves(B, conc, sv.kv_policy)

    def wave(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prefill s, decode step s, wave s) of ``b`` sequences running together."""
        steps = chunked_prefill_steps(b, I, N, sv.mixed_chunks)
        chunked = steps > 1
        units = np.where(chunked, steps, np.minimum(b, P))
        tok_unit = b * I / units
        seqs = np.maximum(tok_unit / I, 1.0)
        toks = tok_unit / seqs
        ctx_read = np.where(chunked, np.minimum(I, (I + toks) / 2), I)
        ops = _model_ops(m, precision, dtype, seqs, toks, (I + 1) / 2, ctx_read, flash, ep, moe_imbalance,
                         eff.kv_reread)
        unit = _ops_time(ops, peak, bw, T, eff) + allreduce_time(m, precision, seqs, toks, T, link, lat)
        unit = unit + _a2a(m, precision, seqs * toks, ep, link, lat)
        prefill = (pipeline_time(unit / P, units, P, p2p_time(m, precision, tok_unit / T, link, lat))
                   + step_overhead * units + eff.prefill_overhead_s * b)
        mb = np.minimum(b, P)
        step = _decode_step(m, precision, dtype, b / mb, I, O, T, peak, bw, eff, flash, ep, moe_imbalance,
                            link, lat, 1.0)
        tokens_per_step = 1.0
        if speculative is not None:
            draft = _decode_step(speculative.draft, precision, dtype, b / mb, I, O, T, peak, bw, eff, flash, 1,
                                 0.0, link, lat, 1.0)
            verify = _decode_step(m, precision, dtype, b / mb, I, O, T, peak, bw, eff, flash, ep, moe_imbalance,
                                  link, lat, speculative.k + 1.0)
            step = speculative.k * (draft + eff.overhead_s) + verify
            tokens_per_step = expected_tokens(speculative.k, speculative.acceptance)
        hop = p2p_time(m, precision, b / mb / T, link, lat)
        dec = np.maximum(mb, P) * (step / P + np.where(P > 1, hop, 0.0)) + step_overhead + eff.overhead_per_seq_s * b
        tpot = dec / tokens_per_step
        return prefill, tpot, prefill + np.maximum(O - 1, 0) * tpot

    pre_c, tpot_c, w_c = wave(conc)
    pre_r, tpot_r, w_r = wave(np.maximum(rest, 1.0))
    has_rest = rest > 0
    w_r = np.where(has_rest, w_r, 0.0)
    d = eff.batch_overhead_s
    # Recomputing preempted sequences: their prompt and generated tokens prefilled again,
    # a share of the batch's prompt tokens (0 unless the cache binds).
    redo = n_full * pre_c * recompute_share
    duration = n_full * w_c + w_r + d + redo
    if sv.kv_policy == "paged":
        k = np.maximum(n_full, 1.0)
        e2e = np.where(n_full > 1, w_c * (k + 1) / 2, w_c) + d + redo / 2
        ttft = np.where(n_full > 1, w_c * (k - 1) / 2 + pre_c, pre_c) + d
        tpot = tpot_c
    else:
        c, k = conc, n_full
        e2e = (c * w_c * k * (k + 1) / 2 + rest * (k * w_c + w_r)) / B + d
        ttft = (c * (w_c * k * (k - 1) / 2 + k * pre_c) + rest * (k * w_c + np.where(has_rest, pre_r, 0.0))) / B + d
        tpot = (c * k * tpot_c + rest * np.where(has_rest, tpot_r, 0.0)) / B
    if eff.device_count_log:
        # A campaign's own slow-down at this device count (fitted; 1 where none).
        f = np.ones_like(devices)
        for n, v in eff.device_count_log.items():
            f = np.where(devices == float(n), math.exp(float(v)), f)
        ttft, tpot, e2e, duration = ttft * f, tpot * f, e2e * f, duration * f
    out_tps = B * O / duration
    wb = weight_bytes(dtype, precision)
    kv_tok = 2 * m.layers * m.kv_heads * m.head_dim * act_bytes(precision)
    total = m.param_counts()["total"]
    expert = (m.experts * 3 * m.hidden * m.intermediate * m.layers) if m.experts > 1 else 0
    w_dev = ((total - expert) / (T * P) + expert / (T * P * ep)) * wb
    foot = I + O * (0.5 if sv.kv_policy == "paged" else 1.0)
    mem = w_dev + np.minimum(conc, B) * foot * kv_tok / (T * P * ep)
    if limits.memory_bytes:
        fits = (~refused).astype(float)
    else:
        fits = np.full(B.shape, np.nan)
    nan = np.where(refused, np.nan, 1.0)
    return {M.TTFT.key: ttft * nan, M.TPOT.key: tpot * nan, M.E2E.key: e2e * nan, "duration_s": duration * nan,
            M.OUTPUT_TOK_S.key: out_tps * nan, "total_tok_s": B * (I + O) / duration * nan,
            "output_tok_s_per_device": out_tps / devices * nan,
            "memory_bytes": mem, "kv_capacity_tokens": cap, "concurrency": conc,
            "waves": n_full + has_rest, "preemptions": preemptions, "recompute_tokens": recompute_share * B * I,
            "fits_memory": fits}


def _a2a(m: ModelShape, precision: str, tokens: Any, ep: int, link: float, lat: float) -> np.ndarray:
    """Two all-to-alls (dispatch, combine) per MoE layer (s)."""
    if ep <= 1:
        return np.zeros_like(_arr(tokens))
    return 2 * m.layers * (all_to_all_bytes(m, precision, tokens, ep) / link + lat)


def _decode_step(m: ModelShape, precision: str, dtype: str, seqs: Any, n_in: Any, n_out: Any, tp: Any, peak: float,
                 bw: float, eff: Efficiency, flash: bool, ep: int, imbalance: float, link: float, lat: float,
                 tokens: float) -> np.ndarray:
    """One decode (or verify, ``tokens`` > 1) pass of ``seqs`` sequences at the mean context."""
    c = _arr(n_in) + _arr(n_out) / 2
    ops = _model_ops(m, precision, dtype, seqs, tokens, c, c, flash, ep, imbalance, eff.kv_reread)
    return (_ops_time(ops, peak, bw, tp, eff) + allreduce_time(m, precision, seqs, tokens, tp, link, lat)
            + _a2a(m, precision, _arr(seqs) * tokens, ep, link, lat))


# -- measured points and calibration -------------------------------------------------------

#: The measurements a prediction is compared with (each cell has some of them).
METRICS = (M.TTFT.key, M.TPOT.key, M.E2E.key, "duration_s", M.OUTPUT_TOK_S.key)
#: The ones the fit minimises (throughput follows from the duration).
FIT_METRICS = (M.TTFT.key, M.TPOT.key, M.E2E.key, "duration_s")


def cell_options(r: StoredCell) -> dict[str, Any]:
    """The engine options a stored cell ran with: the cell's own ``engine_args`` (its spec),
    overlaid with its engine description's ``options`` (published cells: e.g. llama-bench's
    ``n_batch``) or ``engine_args`` (vLLM), and the slots a llama.cpp server ran with (its
    description's ``parallel``) where no slot option says otherwise
    (:data:`SLOT_OPTIONS`)."""
    eng = r.engine or {}
    spec = r.spec or {}
    opts: dict[str, Any] = dict(spec.get("engine_args") or {}) if isinstance(spec.get("engine_args"), dict) else {}
    desc = eng.get("options") or eng.get("engine_args") or {}
    if isinstance(desc, dict):
        opts.update(desc)
    if _count(eng.get("parallel")) and not any(k in opts for k in SLOT_OPTIONS):
        opts["parallel"] = eng["parallel"]
    return opts


def measured_points(rows: Sequence[StoredCell]) -> list[dict[str, Any]]:
    """The usable cells among stored cells (``Store.results()`` items, local or published): ok, fixed
    lengths, a known effective batch and at least one of TTFT/TPOT/E2E means or the
    batch duration.

    Each point: ``cell_id, model, dtype, engine, options, batch, n_in, n_out, tp`` and the
    measurements of :data:`METRICS` (s, tokens/s; None where not measured), plus
    ``published`` (True for imported cells). Batch duration counts only in batch mode.
    """
    pts = []
    for r in rows:
        s, m = r.spec, r.metrics
        if not r.ok or s.get("dataset"):
            continue
        b = effective_batch(s, m)
        mode = (s.get("load") or {}).get("mode") or "batch"
        vals = {d.key: d.value(m, "mean") for d in (M.TTFT, M.TPOT, M.E2E)}
        vals[M.DURATION.key] = M.DURATION.value(m) if mode == "batch" else None
        vals[M.OUTPUT_TOK_S.key] = M.OUTPUT_TOK_S.value(m)
        if b is None or not any(vals[k] for k in FIT_METRICS):
            continue
        pts.append({"cell_id": r.cell_id, "model": s["model"], "dtype": s["dtype"],
                    "engine": s.get("engine") or "generic", "options": cell_options(r), "batch": b,
                    "n_in": s["input_len"], "n_out": s["output_len"], "tp": s.get("tensor_parallel_size") or 1,
                    "published": bool((r.engine or {}).get("published")), **vals})
    return pts


def held_out(cell_id: str, fraction: float = 0.3) -> bool:
    """Deterministic split: True for about ``fraction`` of cell ids (by their SHA-256):
    a random split that every run and site reproduces."""
    return int(hashlib.sha256(cell_id.encode()).hexdigest()[:8], 16) / 2**32 < fraction


def _column(points: list[dict[str, Any]], k: str) -> np.ndarray:
    return np.array([np.nan if p.get(k) is None else p[k] for p in points], dtype=float)


def predict_points(pts: list[dict[str, Any]], limits: Limits, eff: Efficiency,
                   shapes: dict[str, ModelShape] | None = None) -> dict[str, np.ndarray]:
    """:func:`predict` at each measured point (grouped by model, dtype, engine and
    options so each group is one vectorised call). Returns ``{metric: array}`` for
    :data:`METRICS` in the order of ``pts``."""
    out = {k: np.empty(len(pts)) for k in METRICS}
    for shape, dtype, sv, idx, arr in _point_groups(pts, shapes):
        pr = predict(shape, limits, arr["batch"], arr["n_in"], arr["n_out"], arr["tp"], dtype, eff, serving=sv)
        for k in METRICS:
            out[k][idx] = pr[k]
    return out


def _point_groups(pts: list[dict[str, Any]], shapes: dict[str, ModelShape] | None) -> list[tuple]:
    """Points grouped by (model, dtype, engine, options): ``(shape, dtype, serving,
    indices, {"batch", "n_in", "n_out", "tp": arrays})`` each; cached per list of points
    (a fit predicts the same points hundreds of times)."""
    key = (id(pts), len(pts))
    hit = _GROUP_CACHE.get(key)
    if hit is not None and hit[0] is pts:
        return hit[1]
    shapes = shapes or {}
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for j, p in enumerate(pts):
        k = (p["model"], p["dtype"], engine_family(p.get("engine", "generic")),
             json.dumps(p.get("options") or {}, sort_keys=True, default=str))
        groups.setdefault(k, []).append(j)
    out = []
    for (model, dtype, engine, opts), idx in groups.items():
        arr = {k: np.array([pts[j][k] for j in idx], dtype=float) for k in ("batch", "n_in", "n_out", "tp")}
        out.append((shapes.get(model) or resolve(model), dtype, serving_for(engine, json.loads(opts)),
                    np.array(idx), arr))
    if len(_GROUP_CACHE) > 4096:
        _GROUP_CACHE.clear()
    _GROUP_CACHE[key] = (pts, out)
    return out


_GROUP_CACHE: dict[tuple[int, int], tuple[list[dict[str, Any]], list[tuple]]] = {}


def floor_points(pts: list[dict[str, Any]], limits: Limits,
                 shapes: dict[str, ModelShape] | None = None) -> dict[str, np.ndarray]:
    """The roofline floor of each point's measurements: :func:`predict_points` at full
    efficiency (1.0), no overheads, free communication, unlimited memory, whole prompts
    and flash attention, every device sharing the work. No engine can measure below it;
    a cell that does is impossible for the described device (a mislabelled or broken
    measurement) and :func:`calibrate` leaves it out."""
    lim = replace(limits, memory_bytes=None, link_bytes_s=float("inf"))
    eff = Efficiency(1.0, 1.0, 1.0, link_efficiency=1.0, collective_latency_s=0.0, source="floor")
    generic = [{**p, "engine": "floor", "options": {}} for p in pts]
    return predict_points(generic, lim, eff, shapes)


def below_floor(pts: list[dict[str, Any]], limits: Limits, shapes: dict[str, ModelShape] | None = None) -> np.ndarray:
    """Mask of the points with a measurement below its roofline floor (:func:`floor_points`)."""
    floor = floor_points(pts, limits, shapes)
    bad = np.zeros(len(pts), dtype=bool)
    for k in FIT_METRICS:
        meas = _column(pts, k)
        bad |= np.isfinite(meas) & (meas < floor[k])
    return bad


def geomean_error(pred: np.ndarray, meas: np.ndarray) -> float:
    """Geometric-mean relative error: ``exp(mean |ln(pred / meas)|) - 1`` (0.2 = 20 %)."""
    pred, meas = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    ok = (pred > 0) & (meas > 0) & np.isfinite(pred) & np.isfinite(meas)
    if not ok.any():
        return float("nan")
    return float(np.exp(np.mean(np.abs(np.log(pred[ok] / meas[ok])))) - 1)


def point_errors(pts: list[dict[str, Any]], pred: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per metric: ``{"error": geometric-mean error, "n": cells with that measurement}``."""
    out = {}
    for k in METRICS:
        meas = _column(pts, k)
        ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred[k]) & (pred[k] > 0)
        out[k] = {"error": geomean_error(pred[k][ok], meas[ok]) if ok.any() else float("nan"), "n": int(ok.sum())}
    return out


@dataclass
class Calibration:
    """The result of :func:`calibrate` for one (device, engine).

    Attributes:
        device_id: the device the factors belong to.
        engine: the engine (family) they belong to; ``*`` for any.
        efficiency: the fitted factors.
        n_train, n_test: cells fitted on / held out.
        error_test: held-out error per metric of :data:`METRICS`: ``{"error": fraction
            (0.2 = 20 %) or NaN, "n": cells}``.
        error_train: the same on the fitted cells.
        error_default: held-out error of the uncalibrated defaults, for comparison.
        sources: ``{"published": n, "local": n}`` cells fitted on, by origin.
        excluded: cells left out and why: ``{"below_floor": [cell ids]}`` (measured faster
            than the device's roofline allows, :func:`below_floor`).
        fit: the fitted terms (:meth:`infbench.analysis.profile.FleetFit.to_dict`), with the
            device's per-model terms; None in calibrations saved by older versions.
        intervals: interval quantiles (:meth:`infbench.analysis.intervals.IntervalTable.to_dict`).
        parameters: fitted values with their 90 % ranges and bounds.
        prior: the engine profile the device was calibrated against.
        campaign: the campaign its cells came from when several map to the device
            (``--device-label``: a published hardware name), else empty.
    """

    device_id: str
    engine: str
    efficiency: Efficiency
    n_train: int
    n_test: int
    error_test: dict[str, dict[str, Any]]
    error_train: dict[str, dict[str, Any]]
    error_default: dict[str, dict[str, Any]]
    sources: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    fit: dict[str, Any] | None = None
    intervals: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None
    prior: str = ""
    campaign: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        """Inverse of :meth:`to_dict` (also reads calibrations saved per device only)."""
        d = dict(d)
        d.setdefault("engine", "*")
        for k in ("error_test", "error_train", "error_default"):
            d[k] = {m: (v if isinstance(v, dict) else {"error": v, "n": None}) for m, v in (d.get(k) or {}).items()}
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in names}
        return cls(**{**kept, "efficiency": Efficiency.from_dict(d["efficiency"])})


#: Memory per device kept out of the KV cache tried by the fit, GB (a discrete search:
#: waves are steps): vLLM's profiled activations, CUDA graphs and NCCL buffers take
#: a few GB beside the weights. Half-GB steps up to 4 GB: where a 70B model fills a
#: 40 GB A100 to its last few GB, 3 and 4 GB of reserve are 14,000 and 1,800 tokens of KV.
KV_RESERVES_GB = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0)


def _capacity_binds(pts: list[dict[str, Any]], limits: Limits, shapes: dict[str, ModelShape]) -> bool:
    """Whether the KV capacity with the largest tried reserve limits any point's batch."""
    for p in pts:
        sv = serving_for(p.get("engine", "generic"), p.get("options"))
        tp = float(p["tp"])
        devices = (1.0, tp) if sv.split == "layer" else (tp, 1.0)
        cap = kv_capacity_tokens(shapes[p["model"]], limits, p["dtype"], devices[0] * devices[1], 1,
                                 sv.memory_fraction, max(KV_RESERVES_GB) * 1e9)
        if float(cap) < p["batch"] * (p["n_in"] + p["n_out"]):
            return True
    return False


def calibration_path(home: Path, device_id: str, engine: str = "*") -> Path:
    """Where fitted factors are kept: ``$INFBENCH_HOME/calibration/<device>__<engine>.json``
    (``<device>.json`` for a calibration over any engine)."""
    name = device_id if engine in ("*", "", None) else f"{device_id}__{engine_family(engine)}"
    return home / "calibration" / f"{name.replace('/', '_')}.json"


def save_calibration(home: Path, cal: Calibration) -> Path:
    """Write ``cal`` to :func:`calibration_path`; returns the path."""
    p = calibration_path(home, cal.device_id, cal.engine)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(cal.to_dict(), indent=2))
    return p


def load_calibration(home: Path, device_id: str, engine: str = "*") -> Calibration | None:
    """The saved factors of (``device_id``, ``engine``), else those of the device over any
    engine, else None (unreadable files count as none)."""
    for p in dict.fromkeys([calibration_path(home, device_id, engine), calibration_path(home, device_id)]):
        try:
            return Calibration.from_dict(json.loads(p.read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return None


def finite(x: float | None) -> float | None:
    """``x`` if it is a finite number, else None (for JSON output)."""
    return x if x is not None and math.isfinite(x) else None


# -- devices -------------------------------------------------------------------------------

def limits_for_id(pm: PluginManager, ident: str) -> Limits:
    """The :class:`Limits` of a described device id (``h100-sxm``; ``infbench devices``),
    or of this host's CPU for ``cpu``.

    Raises:
        ConfigError: an unknown id, or a description without bandwidth or peak rate.
    """
    try:
        if ident.lower() == "cpu":
            lim, why = device_roofline_limits(pm, cpu_device())
            if lim is None:
                raise ConfigError(f"no limits for this CPU: {why}")
            return lim
        return Limits.from_info(find_spec(catalog(pm), ident).per_device())
    except RooflineError as exc:
        raise ConfigError(f"cannot predict on {ident}: {exc}", hint="see `infbench devices --json`") from exc


def device_catalog_id(pm: PluginManager, device: dict[str, Any], specs: list[Any] | None = None) -> str | None:
    """The catalog id a stored device maps to: ``properties.catalog_id`` (set by
    ``infbench import``), else the description whose ``match`` fits its model name; None
    for CPUs and undescribed devices."""
    ident = (device.get("properties") or {}).get("catalog_id")
    if ident:
        return str(ident)
    s = match_device(specs if specs is not None else catalog(pm), DeviceInfo(**device))
    return s.id if s is not None else None


def rows_of_device(pm: PluginManager, rows: Sequence[StoredCell], ident: str) -> list[StoredCell]:
    """The stored rows measured on the described device ``ident`` (``cpu``: any CPU),
    matched through the catalog as the roofline matches them (published cells through
    the catalog id their import recorded)."""
    specs = catalog(pm)
    keep = []
    for r in rows:
        d = r.device
        if ident.lower() == "cpu":
            if d.get("vendor") == "cpu":
                keep.append(r)
        else:
            cid = device_catalog_id(pm, d, specs)
            if cid is not None and cid.lower() == ident.lower():
                keep.append(r)
    return keep


def capacity_notes(m: ModelShape, limits: Limits, dtype: str, sv: Serving, pr: dict[str, float], batch: int,
                   n_in: int, n_out: int, devices: int, ep: int = 1) -> list[str]:
    """What the KV-cache capacity does to one predicted cell, in words (empty when the
    batch fits): why it is refused (weights, one sequence or a static batch that do not
    fit), or how the engine runs it (waves, preemption and recompute).

    Args:
        m, limits, dtype, sv: the model, device, dtype and engine profile predicted.
        pr: the cell's values of :func:`predict` (floats).
        batch, n_in, n_out: the cell (tokens); devices: devices holding one instance
            (tp x pp); ep: expert-parallel degree.
    """
    cap = pr.get("kv_capacity_tokens", float("inf"))
    if not math.isfinite(cap) or cap >= batch * (n_in + n_out):
        return []
    gb = 1e9
    mem = float(limits.memory_bytes or 0.0)
    if cap <= 0:
        wb = weight_bytes(dtype, _precision(dtype))
        weights = m.param_counts()["total"] * wb / (devices * ep)
        return [f"refused: {m.name}'s weights take {weights / gb:.1f} GB per device, more than the "
                f"{mem / gb * sv.memory_fraction:.1f} GB {sv.engine} may use on {limits.id} "
                f"({sv.memory_fraction:g} of {mem / gb:.1f} GB) with {devices * ep} device(s); "
                "use more devices (--tp) or a smaller dtype"]
    if cap < n_in + n_out:
        return [f"refused: one sequence of {n_in} + {n_out} tokens needs more KV cache than the {cap:,.0f} tokens "
                f"left beside the weights on {devices * ep} x {limits.id}"]
    if sv.kv_policy == "static":
        return [f"refused: {sv.engine} allocates the whole batch's context up front, and {batch} x ({n_in} + {n_out}) "
                f"tokens do not fit in the {cap:,.0f} tokens of KV cache beside the weights"]
    if sv.kv_policy == "paged":
        return [f"the KV cache holds {cap:,.0f} tokens, less than the batch's {batch * (n_in + n_out):,}: {sv.engine} "
                f"runs {pr.get('concurrency', 0):.1f} sequences at a time on average, preempting "
                f"{pr.get('preemptions', 0):.0f} and recomputing {pr.get('recompute_tokens', 0):,.0f} tokens"]
    return [f"the KV cache holds {cap:,.0f} tokens: {sv.engine} reserves {n_in + n_out} per sequence and runs the "
            f"batch in {pr.get('waves', 0):.0f} waves of at most {pr.get('concurrency', 0):.0f}"]


def check_parallelism(m: ModelShape, tp: int, pp: int = 1, ep: int = 1, split: str = "tensor",
                      uneven_heads: bool = False) -> list[str]:
    """Refuse a parallel layout the engines cannot run the model with; return notes on
    the ones they run differently from how they are asked.

    Tensor parallelism shards attention by heads: ``num_attention_heads`` must be a
    multiple of ``tp`` (vLLM's ``ColumnParallelLinear`` of the QKV projection, TensorRT-LLM's
    ``tp_size``), and the KV heads either split evenly (``num_key_value_heads % tp == 0``)
    or are replicated (``tp % num_key_value_heads == 0``: vLLM's ``QKVParallelLinear``
    gives each rank one copy). Pipeline stages hold whole layers: ``pp`` must divide
    ``num_hidden_layers`` (TensorRT-LLM requires it; the model takes equal stages). Expert
    parallelism shards the experts: ``ep`` must divide ``num_local_experts``. llama.cpp's
    layer split (``split == "layer"``) hands each of its ``tp x pp`` devices a run of
    layers in proportion (``--tensor-split``), so it needs no divisibility, only no more
    devices than layers. An engine that shards heads unevenly (``uneven_heads``: DeepSpeed's
    AutoTP) takes any ``tp`` up to the number of KV heads' multiples, with a note.

    Args:
        m: the model; tp, pp, ep: the degrees (devices); split: ``tensor`` or ``layer``;
        uneven_heads: the engine gives ranks unequal numbers of heads (:class:`Serving`).

    Returns:
        Notes (replicated KV heads, an uneven layer split).

    Raises:
        ConfigError: a degree that does not divide what it shards, with the ones that do.
    """
    def divisors(n: int) -> str:
        return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)

    notes: list[str] = []
    if split == "layer":
        stages = tp * pp
        if stages > m.layers:
            raise ConfigError(f"{m.name} has {m.layers} layers: llama.cpp's layer split cannot use {stages} devices "
                              f"(tp {tp} x pp {pp}); each needs at least one layer",
                              hint=f"use at most {m.layers} devices")
        if m.layers % stages:
            notes.append(f"llama.cpp splits {m.name}'s {m.layers} layers over {stages} devices unevenly "
                         f"(up to {-(-m.layers // stages)} on one); predicted as equal stages")
    else:
        if uneven_heads and (m.heads % tp or (m.kv_heads % tp and tp % m.kv_heads)):
            if tp > m.heads:
                raise ConfigError(f"--tp {tp} is more than {m.name}'s {m.heads} attention heads",
                                  hint=f"use at most {m.heads} devices")
            notes.append(f"{m.name}'s {m.heads} heads ({m.kv_heads} KV heads) split unevenly over {tp} devices (up "
                         f"to {-(-m.heads // tp)} on one); predicted as an even split")
        elif m.heads % tp:
            raise ConfigError(f"--tp {tp} does not divide {m.name}'s {m.heads} attention heads: tensor parallelism "
                              "shards attention by heads", hint=f"tp that divide {m.heads}: {divisors(m.heads)}")
        elif m.kv_heads % tp and tp % m.kv_heads:
            raise ConfigError(f"--tp {tp} neither divides {m.name}'s {m.kv_heads} KV heads nor is a multiple of them "
                              "(engines split KV heads evenly or replicate each on tp / kv_heads ranks)",
                              hint=f"tp that divide {m.kv_heads}: {divisors(m.kv_heads)}; or multiples of "
                                   f"{m.kv_heads} that divide {m.heads}")
        elif tp > m.kv_heads:
            notes.append(f"tp {tp} > {m.kv_heads} KV heads: each KV head is replicated on {tp // m.kv_heads} ranks "
                         "(vLLM); the KV cache per device is predicted as if split")
        if m.layers % pp:
            raise ConfigError(f"--pp {pp} does not divide {m.name}'s {m.layers} layers: pipeline stages hold whole "
                              "layers, equal stages", hint=f"pp that divide {m.layers}: {divisors(m.layers)}")
    if ep > 1 and m.experts % ep:
        raise ConfigError(f"--ep {ep} does not divide {m.name}'s {m.experts} experts",
                          hint=f"ep that divide {m.experts}: {divisors(m.experts)}")
    return notes


def predict_grid(models: list[ModelShape], limits: dict[str, Limits], batch: list[int], n_in: list[int],
                 n_out: list[int], tp: list[int], dtype: str,
                 efficiency: dict[str, Efficiency] | Callable[[str, str], Efficiency],
                 engine: str = "generic", pp: list[int] | None = None, ep: int = 1,
                 options: dict[str, Any] | None = None, speculative: Speculative | None = None,
                 moe_imbalance: float = 0.0) -> list[dict[str, Any]]:
    """Predictions for every (device, model, batch, input, output, tp, pp) of a grid, one
    flat dict each (the rows of ``infbench predict``).

    Args:
        models: resolved model shapes.
        limits: device id -> its limits.
        batch, n_in, n_out, tp, pp: the grid's axes (tokens; tp and pp in devices).
        dtype: precision class or engine dtype.
        efficiency: device id -> the efficiency factors to use, or ``(device id, model
            name) -> factors`` (a calibration with per-model terms).
        engine: engine whose scheduling is modelled (:data:`ENGINE_PROFILES`).
        ep, options, speculative, moe_imbalance: see :func:`predict`.

    Returns:
        Dicts with ``model``, ``device``, ``engine``, ``dtype``, ``batch``, ``input_len``,
        ``output_len``, ``tp``, ``pp``, ``ep`` (as the engine uses the devices: llama.cpp's
        layer split turns ``tp`` devices into pipeline stages), ``devices``, ``split``
        (``tensor`` or ``layer``), every key of :func:`predict` (s, tokens/s, B)
        as finite floats or None, ``fits_memory`` (None when the memory is unknown),
        ``efficiency``, ``config`` (what the model's config implies for a decode step at
        that batch: :func:`~infbench.analysis.roofline.config_terms`) and ``notes`` (how
        the engine runs what was asked, in words: a layer split, replicated KV heads
        (:func:`check_parallelism`), waves, preemption or a refusal (:func:`capacity_notes`)).

    Raises:
        ConfigError: a model that cannot be predicted on a device (e.g. no shape), or a
            parallel layout that does not divide its heads, KV heads, layers or experts
            (:func:`check_parallelism`).
    """
    sv = serving_for(engine, options)
    notes: dict[tuple[str, int, int], list[str]] = {}
    for m in models:
        for t in tp:
            for p in pp or [1]:
                notes[(m.name, int(t), int(p))] = check_parallelism(m, int(t), int(p), ep, sv.split, sv.uneven_heads)
    axes = (batch, n_in, n_out, tp, pp or [1])
    gb, gi, go, gt, gp = np.meshgrid(*(np.asarray(v, dtype=float) for v in axes), indexing="ij")
    rows: list[dict[str, Any]] = []
    for d, lim in limits.items():
        for m in models:
            eff = efficiency(d, m.name) if callable(efficiency) else efficiency[d]
            try:
                pr = predict(m, lim, gb, gi, go, gt, dtype, eff, pp=gp, ep=ep, serving=sv, speculative=speculative,
                             moe_imbalance=moe_imbalance)
            except RooflineError as exc:
                raise ConfigError(f"cannot predict {m.name} on {d}: {exc}") from exc
            for idx in np.ndindex(gb.shape):
                fits = pr["fits_memory"][idx]
                asked_tp, asked_pp = int(gt[idx]), int(gp[idx])
                t, p = (1, asked_tp * asked_pp) if sv.split == "layer" else (asked_tp, asked_pp)
                row_notes = list(notes[(m.name, asked_tp, asked_pp)])
                row_notes += capacity_notes(m, lim, dtype, sv, {k: float(v[idx]) for k, v in pr.items()},
                                            int(gb[idx]), int(gi[idx]), int(go[idx]), t * p, ep)
                if sv.split == "layer" and asked_tp > 1:
                    row_notes.append(f"{sv.engine} splits layers, not tensors (--split-mode layer): --tp {asked_tp} "
                                     f"runs as a pipeline of {t * p} stages, reported as tp 1, pp {p}")
                rows.append({
                    "model": m.name, "device": d, "engine": sv.engine, "dtype": dtype, "batch": int(gb[idx]),
                    "input_len": int(gi[idx]), "output_len": int(go[idx]), "tp": t, "pp": p, "ep": ep,
                    "devices": t * p * ep, "split": sv.split,
                    **{k: finite(float(v[idx])) for k, v in pr.items() if k != "fits_memory"},
                    "fits_memory": None if not np.isfinite(fits) else bool(fits), "efficiency": asdict(eff),
                    "config": {k: (float(v) if isinstance(v, np.ndarray) else v)
                               for k, v in config_terms(m, dtype, gb[idx]).items()},
                    "notes": row_notes})
    return rows
