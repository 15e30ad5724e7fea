"""The roofline floor against hand calculations (numbers worked out in the comments)."""

import pytest

from infbench.analysis.roofline import Limits, RooflineError, cell_roofline, effective_batch, roofline_for
from infbench.data.models import resolve

#: NVIDIA A100-SXM4-40GB datasheet: 1.555 TB/s, 312 TFLOP/s fp16 dense.
A100 = Limits(id="a100-40gb", bandwidth_bytes_s=1.555e12, peak_flops={"fp16": 312e12, "bf16": 312e12, "fp32": 19.5e12})


def test_llama2_7b_decode_and_prefill_by_hand():
    # Llama-2-7B: H = 4096, I = 11008, 32 layers, 32 heads = 32 kv heads x 128, V = 32000, untied head.
    r = cell_roofline(resolve("llama-2-7b"), "fp16", "float16", batch=1, n_in=128, n_out=128, tp=1, limits=A100)
    # Weights read per step: per layer 4 x 4096^2 (q, k, v, o) + 3 x 4096 x 11008 (SwiGLU)
    # = 67,108,864 + 135,266,304 = 202,375,168; x 32 = 6,476,005,376; + LM head 32000 x 4096
    # = 131,072,000 -> 6,607,077,376 weights x 2 B = 13,214,154,752 B.
    weights = 13_214_154_752
    # KV read at the mean context 128 + 128/2 = 192: 2 B x 192 x (K and V: 2 x 4096) x 32 layers.
    kv_read = 2 * 192 * 2 * 4096 * 32  # 100,663,296
    kv_write = 2 * 2 * 4096 * 32  # 524,288
    # Activations in/out, 2 B each: per layer qkv (4096 + 3 x 4096) + attention (2 x 4096)
    # + o_proj (2 x 4096) + ffn (2 x 4096 + 3 x 11008) = 73,984 elements; x 32; + LM head 4096 + 32000.
    acts = 2 * (73_984 * 32 + 36_096)  # 4,807,168
    assert r["decode_bytes_per_step"] == pytest.approx(weights + kv_read + kv_write + acts, rel=1e-12)
    # Batch 1 decode is memory-bound in every operator: floor = bytes / bandwidth = 8.566 ms.
    assert r["tpot_floor_s"] == pytest.approx(13_320_149_504 / 1.555e12, rel=1e-9)
    # Prefill FLOPs: 2 x 128 tokens x 6,476,005,376 layer weights + attention 4 x 128 x 64.5 (causal
    # mean context) x 4096 x 32 + LM head on the last token 2 x 4096 x 32000.
    flops = 2 * 128 * 6_476_005_376 + 4 * 128 * 64.5 * 4096 * 32 + 2 * 4096 * 32000
    assert r["prefill_flops"] == pytest.approx(flops, rel=1e-12)  # 1.662e12
    # The energy study's per-token estimate 2N (N = 6.74e9 parameters) is 3.8 % above it: it
    # counts the embedding table and the LM head for every token, where only the last needs it.
    assert r["prefill_flops"] / 128 == pytest.approx(2 * 6.74e9, rel=0.05)
    # TTFT floor >= compute time 1.662e12 / 312e12 = 5.33 ms.
    assert r["ttft_floor_s"] >= flops / 312e12
    assert r["e2e_floor_s"] == pytest.approx(r["ttft_floor_s"] + 127 * r["tpot_floor_s"])
    # Without a measurement there is no utilisation.
    assert r["mbu"] is None and r["mfu"] is None


def test_mixtral_moe_reads_only_routed_experts_by_hand():
    # Mixtral-8x7B: H = 4096, I = 14336, 32 layers, 32 heads x 128, 8 kv heads, 8 experts, 2 per token.
    m = resolve("mixtral-8x7b")
    r = cell_roofline(m, "bf16", "bfloat16", batch=1, n_in=128, n_out=128, tp=1, limits=A100)
    # One token routes to 2 experts: per layer q, o 4096^2 each + k, v 4096 x 1024 each = 41,943,040,
    # + 2 experts x 3 x 4096 x 14336 = 352,321,536 -> 394,264,576; x 32 + LM head 131,072,000
    # = 12,747,538,432 weights x 2 B.
    weights = 2 * 12_747_538_432
    kv = 2 * 192 * 2 * 1024 * 32 + 2 * 2 * 1024 * 32  # GQA: 8 kv heads x 128 = 1024 per K and V
    acts = 2 * (32 * (4096 + 4096 + 2048 + 2 * 4096 + 2 * 4096 + 2 * 4096 + 3 * 14336 * 2) + 4096 + 32000)
    assert r["decode_bytes_per_step"] == pytest.approx(weights + kv + acts, rel=1e-12)
    # At batch 64 nearly all 8 experts are touched: 8 (1 - 0.75^64) = 7.99999...
    big = cell_roofline(m, "bf16", "bfloat16", batch=64, n_in=128, n_out=128, tp=1, limits=A100)
    all_experts = 2 * (32 * (41_943_040 + 8 * 3 * 4096 * 14336) + 131_072_000)
    assert big["decode_bytes_per_step"] > all_experts * 0.999


def test_utilisations_and_tp():
    m = resolve("llama-2-7b")
    measured = {"tpot_s": {"mean": 0.0171}, "ttft_s": {"mean": 0.05}}
    r = cell_roofline(m, "fp16", "float16", 1, 128, 128, 1, A100, measured)
    assert r["mbu"] == pytest.approx(r["decode_bytes_per_step"] / (0.0171 * 1.555e12))
    assert r["mfu"] == pytest.approx(r["prefill_flops"] / (0.05 * 312e12))
    r2 = cell_roofline(m, "fp16", "float16", 1, 128, 128, 2, A100, measured)
    assert r2["tpot_floor_s"] == pytest.approx(r["tpot_floor_s"] / 2)  # weights split over 2 devices
    assert r2["mbu"] == pytest.approx(r["mbu"] / 2)


def test_gguf_block_sizes_and_missing_peak():
    m = resolve("llama-2-7b")
    q8 = cell_roofline(m, "int8", "q8_0", 1, 128, 128, 1, A100)
    f16 = cell_roofline(m, "fp16", "f16", 1, 128, 128, 1, A100)
    # q8_0 stores 34 B per 32 weights: 1.0625 B per weight against 2 for f16.
    assert q8["decode_bytes_per_step"] < 0.55 * f16["decode_bytes_per_step"]
    assert q8["peak_precision"] == "fp16"  # no int8 rate described -> dequantised to 16 bit
    with pytest.raises(RooflineError, match="no peak"):
        Limits(id="x", bandwidth_bytes_s=1e12, peak_flops={"fp8": 1e15}).peak("fp32")
    with pytest.raises(RooflineError, match="bandwidth"):
        Limits.from_info({"id": "y", "peak_flops": {"fp16": 1e12}})


def test_effective_batch_and_stored_spec():
    assert effective_batch({"batch": 8}) == 8
    assert effective_batch({"batch": 1, "load": {"mode": "concurrency", "concurrency": 16}}) == 16
    # Rate mode: Little's law, mean requests in flight = sum of E2E / duration = 20 x 0.5 / 2.5.
    rate = {"batch": 1, "load": {"mode": "rate", "request_rate": 8.0}}
    assert effective_batch(rate, {"e2e_s": {"mean": 0.5, "count": 20}, "duration_s": 2.5}) == pytest.approx(4.0)
    assert effective_batch(rate, {}) is None
    spec = {"model": "llama-2-7b", "dtype": "float16", "batch": 4, "input_len": 64, "output_len": 32,
            "tensor_parallel_size": 1}
    assert roofline_for(spec, {}, A100)["batch"] == 4
    assert roofline_for({**spec, "model": "no-such-model"}, {}, A100) is None
    assert roofline_for({**spec, "dataset": {"path": "x.jsonl"}}, {}, A100) is None
