"""Issue 34: a model predicted from its config alone (MoE experts touched, KV bytes, the LM
head), what an engine does when the KV cache does not fit (refusal, waves, vLLM's
preemption and recompute), and the per-device-count term of a campaign that scales badly."""

import math
from dataclasses import replace

import numpy as np
import pytest

from infbench.analysis.predict import (
    Efficiency,
    capacity_notes,
    check_parallelism,
    kv_capacity_tokens,
    paged_schedule,
    predict,
    predict_grid,
    predict_points,
    serving_for,
)
from infbench.analysis.profile import FleetFit, Group, Priors, fit_fleet, predict_group
from infbench.analysis.roofline import Limits, config_terms, expected_experts, operators
from infbench.data.errors import ConfigError
from infbench.data.models import resolve

A100 = Limits("a100-40gb", 1.555e12, {"fp16": 312e12, "bf16": 312e12}, link_bytes_s=300e9, memory_bytes=40 * 2**30)
H100 = Limits("h100-sxm", 3.35e12, {"fp16": 989e12, "bf16": 989e12}, link_bytes_s=450e9, memory_bytes=80 * 2**30)
IDEAL = Efficiency(1.0, 1.0, 1.0, link_efficiency=1.0, collective_latency_s=0.0, source="test")


# -- the config alone --------------------------------------------------------------------

def test_expected_experts_matches_a_monte_carlo_draw():
    # Each token picks top-k of E distinct experts uniformly: E (1 - (1 - k/E)^M) distinct
    # experts for M tokens. Drawn: 20,000 batches per size, at most 2 million scores per size
    # (488 batches of 64 tokens x 64 experts: the mean's standard error there is about 0.02
    # experts of 63.8, against a tolerance of 0.64; 20,000 such batches were a 650 MB array).
    rng = np.random.default_rng(7)
    for experts, k in ((8, 2), (16, 2), (64, 6)):
        for tokens in (1, 2, 4, 8, 16, 64):
            draws = min(20_000, 2_000_000 // (tokens * experts))
            scores = rng.random((draws, tokens, experts))
            picked = np.argsort(scores, axis=2)[:, :, :k]  # k distinct experts per token
            touched = np.zeros((draws, experts), dtype=bool)
            np.put_along_axis(touched, picked.reshape(draws, -1), True, axis=1)
            mc = touched.sum(axis=1).mean()
            assert float(expected_experts(experts, k, tokens)) == pytest.approx(mc, rel=0.01, abs=0.02), \
                (experts, k, tokens)
    assert float(expected_experts(8, 2, 1)) == 2.0 and float(expected_experts(1, 1, 64)) == 1.0


def test_mixtral_decode_reads_more_weights_as_the_batch_grows_a_dense_model_does_not():
    mix, dense = resolve("mixtral-8x7b"), resolve("mistral-7b")
    for b in (1, 4, 16, 64):
        d = config_terms(dense, "bf16", b)
        assert d["weight_bytes_per_step"] == pytest.approx(config_terms(dense, "bf16", 1)["weight_bytes_per_step"])
    w = [float(config_terms(mix, "bf16", b)["weight_bytes_per_step"]) for b in (1, 4, 16, 64)]
    assert w == sorted(w) and w[-1] / w[0] > 3  # 2 of 8 experts at batch 1, all 8 by 64
    # Attention and the LM head are shared; per layer the experts read 3 H I bytes each.
    ffn_one = 32 * 2 * 3 * 4096 * 14336
    assert w[0] == pytest.approx(w[-1] - ffn_one * (float(expected_experts(8, 2, 64)) - 2), rel=1e-9)
    # The operator table's decode pass reads those weights plus activations and KV.
    ops = operators(mix, "bf16", "bf16", 16, 1, 1, 1)
    total = sum(n * float(b) for _f, b, n in ops.values())
    assert 1 < total / float(config_terms(mix, "bf16", 16)["weight_bytes_per_step"]) < 1.01


def test_kv_bytes_lm_head_and_tied_embeddings_come_from_the_config():
    l3 = config_terms(resolve("llama-3-8b"), "bf16")
    assert l3["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # GQA: 8 KV heads of 128
    assert config_terms(resolve("llama-2-7b"), "fp16")["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2
    # Llama-3's 128k vocabulary: its LM head is 1.05 GB of the 15 GB read per step.
    assert l3["lm_head_share"] == pytest.approx(4096 * 128256 / (7.5e9), rel=0.02)
    tied = config_terms(resolve("qwen2.5-0.5b"), "bf16")
    assert tied["tied_embeddings"] and tied["lm_head_share"] > 0.25  # the head is read even when tied
    assert resolve("qwen2.5-0.5b").param_counts()["total"] < 0.5e9 + 151936 * 896  # counted once


def test_a_config_only_moe_model_is_predicted_without_any_fitted_term():
    m = resolve("mixtral-8x22b")
    assert m.param_counts()["total"] == pytest.approx(140.6e9, rel=0.005)
    assert m.param_counts()["active"] == pytest.approx(39.2e9, rel=0.005)
    rows = predict_grid([m], {"h100-sxm": H100}, [1, 64], [512], [128], [8], "bf16", {"h100-sxm": Efficiency()},
                        engine="vllm")
    one, many = rows
    assert one["fits_memory"] and one["tpot_s"] > 0
    # The batch-64 step touches all 8 experts where batch 1 touches 2: more weights per step.
    assert many["config"]["experts_touched"] > 7.9 and one["config"]["experts_touched"] == 2.0
    assert many["tpot_s"] > one["tpot_s"]


# -- parallelism that the model's shape allows ----------------------------------------------

def test_parallelism_must_divide_heads_kv_heads_layers_and_experts():
    m = resolve("llama-3-8b")  # 32 heads, 8 KV heads, 32 layers
    with pytest.raises(ConfigError, match="does not divide llama-3-8b's 32 attention heads"):
        check_parallelism(m, 3)
    with pytest.raises(ConfigError, match="attention heads"):
        check_parallelism(m, 7, 5)
    with pytest.raises(ConfigError, match="layers"):
        check_parallelism(m, 2, 5)
    assert "replicated" in check_parallelism(m, 16)[0]  # 16 > 8 KV heads: vLLM replicates them
    assert check_parallelism(m, 4, 2) == []
    with pytest.raises(ConfigError, match="experts"):
        check_parallelism(resolve("mixtral-8x7b"), 1, 1, 3)
    # DeepSpeed's AutoTP (optimum-habana) shards heads unevenly: Qwen2-7B's 28 heads on 8
    # Gaudi2s ran in LLM-Inference-Bench.
    assert "unevenly" in check_parallelism(resolve("qwen-2-7b"), 8, 1, 1, "tensor", uneven_heads=True)[0]
    with pytest.raises(ConfigError, match="28 attention heads"):
        check_parallelism(resolve("qwen-2-7b"), 8)  # vLLM and TensorRT-LLM cannot
    # llama.cpp's layer split needs no divisibility, only a layer per device.
    assert "unevenly" in check_parallelism(resolve("qwen-2-7b"), 8, 1, 1, "layer")[0]
    with pytest.raises(ConfigError, match="at most 2 devices"):
        check_parallelism(resolve("tiny-random-llama"), 4, 1, 1, "layer")  # 2 layers
    with pytest.raises(ConfigError):
        predict_grid([m], {"h100-sxm": H100}, [1], [128], [128], [3], "bf16", {"h100-sxm": Efficiency()})


def test_llama_cpp_tp_is_reported_as_a_layer_split_with_a_note():
    [row] = predict_grid([resolve("llama-2-7b")], {"a100-40gb": A100}, [1], [128], [128], [4], "fp16",
                         {"a100-40gb": Efficiency()}, engine="llama.cpp")
    assert (row["tp"], row["pp"], row["split"]) == (1, 4, "layer")
    assert any("splits layers, not tensors" in n and "--tp 4" in n for n in row["notes"])


# -- capacity ------------------------------------------------------------------------------

def test_weights_that_do_not_fit_are_refused_with_the_reason():
    m = resolve("llama-3-70b")
    pr = predict(m, H100, 1, 128, 128, 1, "bf16", IDEAL, serving=serving_for("vllm"))
    assert math.isnan(float(pr["tpot_s"])) and float(pr["fits_memory"]) == 0.0
    [row] = predict_grid([m], {"h100-sxm": H100}, [1], [128], [128], [1], "bf16", {"h100-sxm": IDEAL}, engine="vllm")
    assert row["tpot_s"] is None and row["duration_s"] is None and row["fits_memory"] is False
    assert any(n.startswith("refused: llama-3-70b's weights take 141.1 GB per device, more than the 77.3 GB vllm "
                            "may use on h100-sxm") for n in row["notes"]), row["notes"]
    # On two H100s it fits and is predicted.
    [ok] = predict_grid([m], {"h100-sxm": H100}, [1], [128], [128], [2], "bf16", {"h100-sxm": IDEAL}, engine="vllm")
    assert ok["tpot_s"] > 0 and ok["fits_memory"] is True and not any("refused" in n for n in ok["notes"])


def test_a_static_engine_refuses_a_batch_whose_context_does_not_fit():
    m = resolve("llama-2-7b")
    sv = serving_for("llama.cpp")
    cap = float(kv_capacity_tokens(m, A100, "fp16", 1, 1, sv.memory_fraction, 0.0))
    assert 40_000 < cap < 60_000  # (40 GiB - 13.5 GB) / 512 KiB per token
    fits = predict(m, A100, 8, 2048, 2048, 1, "fp16", IDEAL, serving=sv)
    assert float(fits["duration_s"]) > 0
    too_many = predict(m, A100, 16, 2048, 2048, 1, "fp16", IDEAL, serving=sv)  # 65,536 tokens
    assert math.isnan(float(too_many["duration_s"])) and float(too_many["fits_memory"]) == 0.0
    pr = {k: float(v) for k, v in too_many.items()}
    assert "allocates the whole batch's context up front" in capacity_notes(m, A100, "fp16", sv, pr, 16, 2048, 2048,
                                                                            1)[0]


def test_paged_engine_preempts_and_recomputes_when_the_cache_binds():
    # 16 sequences of 2048 + 2048 tokens in a 14,200-token cache: at most three grow to the
    # end together; vLLM admits six prompts, then preempts the newest as they grow.
    run = paged_schedule(16, 2048, 2048, 14_200)
    assert run.preemptions > 0 and run.recompute_tokens > 0
    assert run.prefill_tokens == 16 * 2048 + run.recompute_tokens
    assert 14_200 // 4096 <= run.mean_running <= 14_200 // 2048  # between the final and the admitted footprint
    assert run.decode_steps * run.mean_running == pytest.approx(16 * 2047, rel=0.01)
    # A cache that holds the batch: no preemption, every sequence at once.
    free = paged_schedule(16, 2048, 2048, 16 * 4096)
    assert free.preemptions == 0 and free.mean_running == 16 and free.decode_steps == 2047
    # max_num_seqs caps the running batch.
    assert paged_schedule(64, 128, 128, 10**9, 16).mean_running == pytest.approx(16)
    with pytest.raises(ConfigError, match="does not fit"):
        paged_schedule(1, 4096, 4096, 5000)
    # In the prediction: recomputing costs time, beyond the smaller running batch alone.
    m = resolve("llama-2-7b")
    sv = serving_for("vllm")
    pr = predict(m, A100, 64, 2048, 2048, 1, "fp16", IDEAL, serving=sv)
    assert float(pr["preemptions"]) > 0 and float(pr["recompute_tokens"]) > 0
    assert float(pr["concurrency"]) < 64 and float(pr["duration_s"]) > 0
    [row] = predict_grid([m], {"a100-40gb": A100}, [64], [2048], [2048], [1], "fp16", {"a100-40gb": IDEAL},
                         engine="vllm")
    assert any("preempting" in n and "recomputing" in n for n in row["notes"])


def test_one_sequence_that_does_not_fit_alone_is_refused():
    m = resolve("llama-2-70b")
    tight = replace(Efficiency(), kv_reserve_bytes=3.9e9)  # 70B on 4 x 40 GB: ~1,800 tokens left
    pr = predict(m, A100, 1, 2048, 2048, 4, "fp16", tight, serving=serving_for("vllm"))
    assert math.isnan(float(pr["e2e_s"])) and float(pr["kv_capacity_tokens"]) < 4096


# -- a campaign that scales badly with its device count ------------------------------------------

def test_device_count_term_absorbs_a_campaign_that_slows_with_more_devices():
    """Cells generated by the model, then the 2- and 4-device ones made 5.5x and 7.6x
    slower (as llama.cpp on the Intel PVC campaign): the fit gives that group count terms
    of log 5.5 and log 7.6, keeps the efficiencies, and predicts those cells again."""
    limits = Limits("pvc", 3.2e12, {"fp16": 419e12}, link_bytes_s=32e9, memory_bytes=128 * 2**30)
    truth = Efficiency(0.5, 0.3, 0.2, 0.5, 5e-3, 1e-4, 1e-3, 1e-3, 0.05, collective_latency_s=1e-4, source="truth")
    pts = []
    for m in ("llama-2-7b", "mistral-7b"):
        for tp in (1, 2, 4):
            for n in (128, 512, 1024):
                for nb in (16, 64):
                    pts.append({"cell_id": f"{m}-{tp}-{n}-{nb}", "model": m, "dtype": "fp16", "engine": "llama.cpp",
                                "options": {"n_batch": nb}, "batch": 1, "n_in": n, "n_out": n, "tp": tp,
                                "published": True})
    shapes = {m: resolve(m) for m in ("llama-2-7b", "mistral-7b")}
    pr = predict_points(pts, limits, truth, shapes)
    slow = {1: 1.0, 2: 5.5, 4: 7.6}
    for k in ("ttft_s", "tpot_s", "e2e_s", "duration_s"):
        for p, v in zip(pts, pr[k], strict=True):
            p[k] = float(v) * slow[p["tp"]] if k == "duration_s" else None
    g = Group("Intel PVC GPU", "max-1550", "llama.cpp", "oneapi", limits, pts, shapes)
    fit = fit_fleet([g], Priors())
    rep = fit.count_report("llama.cpp")["Intel PVC GPU"]
    assert rep["2"]["factor"] == pytest.approx(5.5, rel=0.1) and rep["4"]["factor"] == pytest.approx(7.6, rel=0.1)
    got = predict_group(fit, g)["duration_s"]
    meas = np.array([p["duration_s"] for p in pts])
    assert float(np.exp(np.mean(np.abs(np.log(got / meas)))) - 1) < 0.05
    # Without the terms the fit cannot follow it.
    flat = fit_fleet([g], Priors(count_sd=0))
    bad = predict_group(flat, g)["duration_s"]
    assert float(np.exp(np.mean(np.abs(np.log(bad / meas)))) - 1) > 0.3
    # The terms survive the profile's JSON and apply only to that group.
    back = FleetFit.from_dict(fit.to_dict())
    assert back.counts == pytest.approx(fit.counts)
    eff, level = back.efficiency("llama.cpp", "oneapi", limits, "Intel PVC GPU", "llama-2-7b")
    assert level == "device" and set(eff.device_count_log) == {"2", "4"}
    other, _ = back.efficiency("llama.cpp", "oneapi", limits, None, "llama-2-7b")
    assert not other.device_count_log
