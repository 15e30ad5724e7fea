"""Each modelling term of the prediction against a hand calculation (numbers worked out in
the comments; docs/roofline.md gives the same examples)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from infbench.analysis.predict import (
    Efficiency,
    Serving,
    Speculative,
    all_to_all_bytes,
    allreduce_time,
    chunked_prefill_steps,
    concurrency,
    expected_tokens,
    expert_load,
    kv_capacity_tokens,
    p2p_time,
    pipeline_time,
    predict,
    serving_for,
    waves,
)
from infbench.analysis.roofline import SCORE_BYTES, Limits, operators, pass_time, pass_totals
from infbench.data.errors import ConfigError
from infbench.data.models import resolve

#: NVIDIA A100-SXM4-40GB: 40 GiB, 1.555 TB/s, 312 TFLOP/s fp16, NVLink 300 GB/s each way.
A100 = Limits("a100-40gb", 1.555e12, {"fp16": 312e12, "bf16": 312e12}, link_bytes_s=300e9, memory_bytes=40 * 2**30)
#: NVIDIA H100 SXM: 3.35 TB/s, 989 TFLOP/s bf16, NVLink 450 GB/s each way, 80 GiB.
H100 = Limits("h100-sxm", 3.35e12, {"bf16": 989.4e12}, link_bytes_s=450e9, memory_bytes=80 * 2**30)
IDEAL = Efficiency(1.0, 1.0, 1.0, link_efficiency=1.0, collective_latency_s=0.0, source="test")


def test_kv_capacity_waves_llama2_7b_a100_40gb_batch64_4096_tokens():
    m = resolve("llama-2-7b")
    # 40 GiB = 42,949,672,960 B; 90 % (vLLM gpu_memory_utilization, TensorRT-LLM's free fraction)
    # = 38,654,705,664 B; weights 6,738,415,616 x 2 B = 13,476,831,232 B; the rest holds the KV
    # cache at 2 (K, V) x 32 layers x 32 heads x 128 x 2 B = 524,288 B per token.
    free = 0.9 * 40 * 2**30 - 6_738_415_616 * 2
    assert free == pytest.approx(25_177_874_432)
    cap = float(kv_capacity_tokens(m, A100, "fp16", 1, 1, 0.9))
    assert cap == pytest.approx(free / 524_288) == pytest.approx(48_022.98, abs=0.01)
    # TensorRT-LLM (guaranteed no evict) reserves 2048 + 2048 tokens per sequence: 11 fit, so
    # 64 sequences run as 5 waves of 11 and one of 9.
    c = float(concurrency(64, cap, 2048, 2048, "reserve"))
    assert c == 11
    full, rest = waves(64, c, "reserve")
    assert (float(full), float(rest)) == (5, 9)
    # vLLM's paged cache holds the mean footprint 2048 + 1024: 15 at a time, 64 / 15 = 4.27 waves.
    assert float(concurrency(64, cap, 2048, 2048, "paged")) == 15
    assert float(waves(64, 15, "paged")[0]) == pytest.approx(64 / 15)
    # The whole batch: 5 waves of 11 sequences + one of 9, each predicted on its own.
    trt = serving_for("trtllm-serve")
    eff = Efficiency(0.5, 0.8)
    whole = predict(m, A100, 64, 2048, 2048, 1, "fp16", eff, serving=trt)
    w11 = predict(m, A100, 11, 2048, 2048, 1, "fp16", eff, serving=trt)["duration_s"]
    w9 = predict(m, A100, 9, 2048, 2048, 1, "fp16", eff, serving=trt)["duration_s"]
    assert float(whole["duration_s"]) == pytest.approx(5 * float(w11) + float(w9))
    assert float(whole["waves"]) == 6 and float(whole["concurrency"]) == 11
    # A batch that fits runs in one wave, and batch 64 x 256 tokens fits easily.
    assert float(predict(m, A100, 64, 128, 128, 1, "fp16", eff, serving=trt)["waves"]) == 1
    # Without a known memory size nothing limits the batch.
    no_mem = Limits("x", 1.555e12, {"fp16": 312e12})
    assert float(predict(m, no_mem, 64, 2048, 2048, 1, "fp16", eff, serving=trt)["waves"]) == 1


def test_pipeline_bubble_pp2():
    # GPipe: m micro-batches through pp stages take (m + pp - 1) stage times. Two micro-batches
    # of 10 ms stages on 2 stages: 3 x 10 ms = 30 ms where 2 would be ideal: the bubble is 1/3.
    assert float(pipeline_time(0.010, 2, 2)) == pytest.approx(0.030)
    assert (float(pipeline_time(0.010, 2, 2)) - 0.020) / float(pipeline_time(0.010, 2, 2)) == pytest.approx(1 / 3)
    # With the activations sent to the next stage: + p2p per stage time; nothing at pp = 1.
    assert float(pipeline_time(0.010, 2, 2, 0.001)) == pytest.approx(3 * 0.011)
    assert float(pipeline_time(0.010, 1, 1, 0.001)) == pytest.approx(0.010)
    # One stage's send: 512 tokens x 4096 x 2 B = 4,194,304 B over 300 GB/s + 10 us.
    assert float(p2p_time(resolve("llama-2-7b"), "fp16", 512, 300e9, 10e-6)) == pytest.approx(4_194_304 / 300e9 + 1e-5)
    # Through predict: llama.cpp splits the layers of a batch-1 decode over 2 devices (m = 1):
    # 2 x (step / 2 + hop) = the 1-device step + 2 hops, so no speed-up; a 512-token prompt in
    # 8 chunks of 64 pipelines: (8 + 2 - 1) x (chunk / 2 + hop) instead of 8 x chunk.
    m = resolve("llama-2-7b")
    llama = serving_for("llama.cpp", {"n_batch": 64})
    one = predict(m, A100, 1, 512, 128, 1, "fp16", IDEAL, serving=llama)
    two = predict(m, A100, 1, 512, 128, 2, "fp16", IDEAL, serving=llama)
    hop = float(p2p_time(m, "fp16", 1, 300e9, 0.0))
    assert float(two["tpot_s"]) == pytest.approx(float(one["tpot_s"]) + 2 * hop)
    chunk_hop = float(p2p_time(m, "fp16", 64, 300e9, 0.0))
    chunk = float(one["ttft_s"]) / 8
    assert float(two["ttft_s"]) == pytest.approx(9 * (chunk / 2 + chunk_hop))


def test_expert_parallel_all_to_all_volume_mixtral():
    m = resolve("mixtral-8x7b")  # hidden 4096, 8 experts, 2 per token, 32 layers
    # A decode step of 64 sequences on 8 devices: each holds 64 / 8 = 8 tokens and sends each
    # to its 2 experts: 8 x 2 x 4096 x 2 B = 131,072 B, of which 7/8 leave the device.
    assert float(all_to_all_bytes(m, "bf16", 64, 8)) == pytest.approx(131_072 * 7 / 8) == 114_688
    assert float(all_to_all_bytes(m, "bf16", 64, 1)) == 0
    # Dispatch + combine per layer: 2 x 32 = 64 all-to-alls per step; at 450 GB/s x 0.75 and
    # 10 us each: 64 x (114,688 / 337.5e9 + 1e-5) = 0.662 ms on top of the ep = 1 step.
    eff = Efficiency(1.0, 1.0, 1.0, link_efficiency=0.75, collective_latency_s=1e-5)
    # GenZ's bounds for 64 tokens: A = min(2 x 64, 8) = 8 experts active; even routing gives
    # max(1, ceil(8 / 8)) = 1 expert and 64 x 2 / 8 = 16 routed tokens per device; the worst
    # case min(8, ceil(8 / 8)) = 1 expert with 64 x min(2, 1) = 64 tokens.
    assert [float(v) for v in expert_load(64, 8, 2, 8, 0.0)] == [1.0, 16.0]
    assert [float(v) for v in expert_load(64, 8, 2, 8, 1.0)] == [1.0, 64.0]
    # One token (batch 1 decode) on 2 devices: 2 experts active, best 1 per device with 1
    # routed token, worst both on one device (min(2, ceil(8/2)) = 2) with 2 routed tokens.
    assert [float(v) for v in expert_load(1, 8, 2, 2, 0.0)] == [1.0, 1.0]
    assert [float(v) for v in expert_load(1, 8, 2, 2, 1.0)] == [2.0, 2.0]
    a2a = 64 * (114_688 / (450e9 * 0.75) + 1e-5)
    bal = predict(m, H100, 64, 1024, 128, 1, "bf16", eff, ep=8)
    worst = predict(m, H100, 64, 1024, 128, 1, "bf16", eff, ep=8, moe_imbalance=1.0)
    assert float(worst["tpot_s"]) > float(bal["tpot_s"])  # the busiest device routes 4x the tokens
    # The all-to-all time is what separates the ep = 8 step from the same per-device work
    # without communication.
    no_link = Limits("h100", 3.35e12, {"bf16": 989.4e12}, link_bytes_s=float("inf"), memory_bytes=80 * 2**30)
    free = predict(m, no_link, 64, 1024, 128, 1, "bf16", Efficiency(1.0, 1.0, 1.0, collective_latency_s=0.0), ep=8)
    assert float(bal["tpot_s"]) - float(free["tpot_s"]) == pytest.approx(a2a, rel=1e-9)
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        predict(resolve("llama-2-7b"), H100, 8, 128, 128, 1, "bf16", ep=2)


def test_chunked_prefill_step_count():
    # Prompt-only chunks (llama.cpp n_ubatch): ceil(B n_in / N).
    assert float(chunked_prefill_steps(1, 128, 16, mixed=False)) == 8
    assert float(chunked_prefill_steps(1, 2048, 64, mixed=False)) == 32
    assert float(chunked_prefill_steps(1, 100, 64, mixed=False)) == 2
    # Mixed (Sarathi-Serve): 64 prompts of 2048 under 8192 tokens per step, decodes of the
    # prefilled sequences first, (64 - 1) / 2 = 31.5 of them on average:
    # ceil(131,072 / (8192 - 31.5)) = ceil(16.06) = 17 steps (16 without the decodes).
    assert float(chunked_prefill_steps(64, 2048, 8192)) == 17
    # No budget: one step for the whole batch.
    assert float(chunked_prefill_steps(64, 2048, np.nan)) == 1
    # The same count as a step-by-step simulation of a decode-first scheduler.
    for b, n, budget in [(64, 2048, 8192), (16, 512, 512), (8, 1024, 768), (64, 128, 768), (32, 2048, 2048)]:
        assert float(chunked_prefill_steps(b, n, budget)) == _simulate(b, n, budget)
    # In predict: llama.cpp with n_batch 16 prefills 128 tokens in 8 passes of 16 tokens, each
    # reading all the weights, so at batch 1 its TTFT is ~8 decode-like steps.
    m = resolve("llama-2-7b")
    p16 = predict(m, A100, 1, 128, 128, 1, "fp16", IDEAL, serving=serving_for("llama.cpp", {"n_batch": 16}))
    p512 = predict(m, A100, 1, 128, 128, 1, "fp16", IDEAL, serving=serving_for("llama.cpp"))
    assert float(p16["ttft_s"]) > 7 * float(p512["ttft_s"])
    assert serving_for("llama.cpp", {"n_batch": 16}).prefill_chunk == 16
    assert serving_for("vllm", {"enable_chunked_prefill": True, "max_num_batched_tokens": 2048}).mixed_chunks


def _simulate(batch: int, n_in: int, budget: int) -> int:
    """Decode-first chunked prefill: each step's budget goes to the running decodes, the rest
    to the prompts in order; steps until every prompt is in."""
    left, decoding, steps = [n_in] * batch, 0, 0
    while any(left):
        steps += 1
        room, done = budget - decoding, 0
        for i, n in enumerate(left):
            if n and room > 0:
                take = min(n, room)
                left[i] -= take
                room -= take
                done += left[i] == 0
        decoding += done
    return steps


def test_speculative_decoding_expected_tokens_per_step():
    # k = 4 drafts accepted with probability 0.7: 1 + 0.7 + 0.49 + 0.343 + 0.2401 = 2.7731
    # tokens per step (Leviathan et al.: (1 - 0.7^5) / (1 - 0.7)).
    assert expected_tokens(4, 0.7) == pytest.approx(2.7731)
    assert expected_tokens(4, 0.7) == pytest.approx(sum(0.7**i for i in range(5)))
    assert expected_tokens(1, 0.0) == 1.0 and expected_tokens(3, 1.0) == 4.0
    with pytest.raises(ConfigError):
        expected_tokens(0, 0.5)
    # TPOT = (k draft steps + one verify pass over k + 1 tokens) / expected tokens.
    target, draft = resolve("llama-3-70b"), resolve("llama-3-8b")
    spec = Speculative(draft, 4, 0.7)
    # 70B in bf16 (141 GB) does not fit on one 80 GB H100 (the prediction refuses it:
    # test_capacity_*); the arithmetic is checked on a device without a memory size.
    no_mem = replace(H100, memory_bytes=None)
    p = predict(target, no_mem, 1, 1024, 129, 1, "bf16", IDEAL, speculative=spec)
    c = 1024 + 129 / 2
    verify = float(pass_time(operators(target, "bf16", "bf16", 1, 5, c, c), 989.4e12, 3.35e12))
    step_draft = float(pass_time(operators(draft, "bf16", "bf16", 1, 1, c, c), 989.4e12, 3.35e12))
    assert float(p["tpot_s"]) == pytest.approx((4 * step_draft + verify) / 2.7731, rel=1e-4)
    plain = predict(target, no_mem, 1, 1024, 129, 1, "bf16", IDEAL)
    assert float(p["tpot_s"]) < float(plain["tpot_s"])  # memory-bound: 5 tokens verified for ~1 read


def test_attention_with_and_without_flash_grows_with_context():
    m = resolve("llama-2-7b")
    flash = operators(m, "fp16", "f16", 1, 2048, 1024.5, 2048, flash=True)
    naive = operators(m, "fp16", "f16", 1, 2048, 1024.5, 2048, flash=False)
    # The materialised score matrix: 2048 x 2048 positions x 32 heads, 16 B each (fp32 written,
    # read and written by softmax, read): 2,147,483,648 B per layer.
    assert float(naive["attention_scores"][1]) == SCORE_BYTES * 2048 * 2048 * 32 == 2_147_483_648
    # Without flash the masked half of QK^T and AV is computed too: c = c_read = 2048.
    assert float(naive["attention"][0]) == pytest.approx(4 * 2048 * 2048 * 4096)
    assert float(flash["attention"][0]) == pytest.approx(4 * 2048 * 1024.5 * 4096)
    # Prefill attention FLOPs grow as n^2, decode KV bytes as the context.
    f1, _ = pass_totals({"a": operators(m, "fp16", "f16", 1, 1024, 512.5, 1024)["attention"]})
    f2, _ = pass_totals({"a": operators(m, "fp16", "f16", 1, 2048, 1024.5, 2048)["attention"]})
    assert float(f2 / f1) == pytest.approx(4.0, rel=1e-3)
    # kv_reread: a kernel walking the cache per query head reads GQA KV heads/kv_heads times.
    g = resolve("llama-3-8b")  # 32 heads, 8 kv heads
    once = operators(g, "bf16", "bf16", 1, 1, 3000, 3000)["attention"][1]
    per_head = operators(g, "bf16", "bf16", 1, 1, 3000, 3000, kv_reread=1.0)["attention"][1]
    kv_read = 2 * 3000 * 2 * 1024  # B x c x 2k x 2 B
    assert float(per_head - once) == pytest.approx(kv_read * 3)


def test_link_efficiency_and_tp_allreduce():
    m = resolve("llama-2-7b")
    # Ring all-reduce of 16 x 4096 x 2 B = 131,072 B over tp = 4: 2 x 3/4 x 131,072 B at
    # 300 GB/s x 0.75 (GenZ's measured NVLink efficiency) + 10 us, twice per layer x 32.
    one = 2 * 3 / 4 * 131_072 / (300e9 * 0.75) + 1e-5
    assert float(allreduce_time(m, "fp16", 16, 1, 4, 300e9 * 0.75, 1e-5)) == pytest.approx(64 * one)
    assert float(allreduce_time(m, "fp16", 16, 1, 1, 300e9, 1e-5)) == 0.0
    slow = predict(m, A100, 16, 1024, 128, 4, "fp16", Efficiency(link_efficiency=0.5))
    fast = predict(m, A100, 16, 1024, 128, 4, "fp16", Efficiency(link_efficiency=1.0))
    assert float(slow["tpot_s"]) > float(fast["tpot_s"])


def test_scheduler_overheads():
    m = resolve("llama-2-7b")
    base = predict(m, A100, 16, 512, 65, 1, "fp16", IDEAL)
    with_ab = predict(m, A100, 16, 512, 65, 1, "fp16",
                      Efficiency(1.0, 1.0, 1.0, overhead_s=0.002, overhead_per_seq_s=1e-4, prefill_overhead_s=0.003,
                                 batch_overhead_s=0.5, link_efficiency=1.0, collective_latency_s=0.0))
    # a + b B per decode step = 2 ms + 16 x 0.1 ms; the prefill pays a once and c per request.
    assert float(with_ab["tpot_s"] - base["tpot_s"]) == pytest.approx(0.002 + 16e-4)
    assert float(with_ab["ttft_s"] - base["ttft_s"]) == pytest.approx(0.002 + 16 * 0.003 + 0.5)
    assert float(with_ab["duration_s"] - base["duration_s"]) == pytest.approx(
        0.002 + 16 * 0.003 + 64 * (0.002 + 16e-4) + 0.5)
    assert math.isclose(float(with_ab["duration_s"]), float(with_ab["e2e_s"]))


def test_engine_profiles():
    assert serving_for("vllm-server").engine == "vllm"
    assert serving_for("llama.cpp").split == "layer" and not serving_for("llama.cpp").flash_attention
    assert serving_for("unknown-engine") == Serving("unknown-engine")
    assert serving_for("vllm", {"gpu_memory_utilization": 0.5}).memory_fraction == 0.5
