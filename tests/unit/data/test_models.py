"""Model zoo: lookup, suggestions, parameter counts against published checkpoints."""

import json

import pytest

from infbench.data.errors import ConfigError
from infbench.data.models import resolve, zoo

# Parameter counts of the HF checkpoints (safetensors metadata / model cards).
PUBLISHED = {"llama-2-7b": 6.738e9, "llama-3-8b": 8.030e9, "mistral-7b": 7.242e9, "qwen-2-7b": 7.616e9,
             "llama-2-70b": 68.977e9, "llama-3-70b": 70.554e9, "qwen-2-72b": 72.706e9,
             "mixtral-8x7b": 46.703e9, "qwen3-8b": 8.191e9, "qwen3-14b": 14.768e9, "qwen3-32b": 32.762e9,
             "mistral-small-24b": 23.572e9, "smollm2-135m": 134.5e6, "qwen2.5-0.5b": 494.0e6,
             "tinyllama-1.1b": 1.100e9}


@pytest.mark.parametrize("name,params", sorted(PUBLISHED.items()))
def test_param_counts_match_checkpoints(name, params):
    assert resolve(name).param_counts()["total"] == pytest.approx(params, rel=2e-3)


def test_required_models_present():
    need = {"llama-2-7b", "llama-3-8b", "mistral-7b", "qwen-2-7b", "llama-2-70b", "llama-3-70b", "qwen-2-72b",
            "mixtral-8x7b", "llama-3.1-8b", "llama-3.3-70b", "qwen3-8b", "qwen3-14b", "qwen3-32b",
            "mistral-small-24b", "smollm2-135m", "qwen2.5-0.5b", "tinyllama-1.1b"}
    assert need <= set(zoo())


def test_moe_active_params_and_attention_types():
    mix = resolve("mixtral-8x7b")
    assert mix.param_counts()["active"] == pytest.approx(12.88e9, rel=3e-3)
    assert resolve("llama-2-7b").attention == "MHSA"
    assert resolve("llama-3-8b").attention == "GQA"


def test_kv_bytes_per_token_by_hand():
    # Llama-3-8B: 2 (K,V) x 32 layers x 8 kv heads x 128 head_dim x 2 bytes
    assert resolve("llama-3-8b").kv_bytes_per_token("fp16") == 2 * 32 * 8 * 128 * 2 == 131072
    # Qwen3-8B has an explicit head_dim of 128
    assert resolve("qwen3-8b").kv_bytes_per_token("fp8") == 2 * 36 * 8 * 128


def test_lookup_by_hf_id_alias_and_case():
    assert resolve("meta-llama/Meta-Llama-3-8B").name == "llama-3-8b"
    assert resolve("Meta-Llama-3-8B").name == "llama-3-8b"
    assert resolve("LLAMA3-8B").name == "llama-3-8b"


def test_unknown_model_suggests():
    with pytest.raises(ConfigError) as e:
        resolve("lama-3-8b")
    assert "unknown model" in e.value.message and "llama-3-8b" in e.value.hint


def test_local_hf_folder(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = resolve(str(tmp_path))
    assert m.path == str(tmp_path) and m.kv_heads == 4 and m.attention == "MHSA"
