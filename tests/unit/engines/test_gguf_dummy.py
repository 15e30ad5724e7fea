"""Dummy GGUF writer: read the file back with gguf's reader and check shapes and types."""

import gguf
import pytest

from infbench.data.errors import ConfigError
from infbench.data.models import ModelShape, gguf_config, resolve
from infbench.engines.gguf_dummy import dummy_gguf_size, write_dummy_gguf


@pytest.mark.parametrize("dtype,qtype", [("f16", "F16"), ("q8_0", "Q8_0"), ("q4_0", "Q4_0"), ("bf16", "BF16")])
def test_tiny_llama_round_trip(tmp_path, dtype, qtype):
    m = resolve("tiny-random-llama")
    p = write_dummy_gguf(m, dtype, tmp_path / "t.gguf")
    r = gguf.GGUFReader(str(p))
    t = {x.name: x for x in r.tensors}
    assert len(t) == 3 + 9 * m.layers
    assert t["blk.0.attn_q.weight"].tensor_type.name == qtype
    assert t["blk.0.attn_norm.weight"].tensor_type.name == "F32"
    assert list(t["blk.1.attn_k.weight"].shape) == [256, 128]      # gguf lists ne0 (cols) first
    assert list(t["token_embd.weight"].shape) == [256, 512]
    cfg = gguf_config(p)
    assert cfg["vocab_size"] == 512 and cfg["num_key_value_heads"] == 2 and cfg["num_hidden_layers"] == 2
    assert abs(p.stat().st_size - dummy_gguf_size(m, dtype)) < 64 * 1024


def test_qwen_variants_have_their_extra_tensors(tmp_path):
    base = resolve("tiny-random-llama").config
    q2 = ModelShape(name="q2", config={**base, "model_type": "qwen2"})
    q3 = ModelShape(name="q3", config={**base, "model_type": "qwen3", "head_dim": 32})
    moe = ModelShape(name="moe", config={**base, "num_local_experts": 4, "num_experts_per_tok": 2})
    names = lambda p: {x.name for x in gguf.GGUFReader(str(p)).tensors}  # noqa: E731
    assert "blk.0.attn_q.bias" in names(write_dummy_gguf(q2, "f16", tmp_path / "q2.gguf"))
    n3 = names(write_dummy_gguf(q3, "f16", tmp_path / "q3.gguf"))
    assert "blk.0.attn_k_norm.weight" in n3
    assert "blk.0.ffn_gate_exps.weight" in names(write_dummy_gguf(moe, "f16", tmp_path / "m.gguf"))


def test_unsupported_arch_and_dtype(tmp_path):
    m = ModelShape(name="x", config={**resolve("tiny-random-llama").config, "model_type": "gpt2"})
    with pytest.raises(ConfigError, match="gpt2"):
        write_dummy_gguf(m, "f16", tmp_path / "x.gguf")
    with pytest.raises(ConfigError, match="q5_k"):
        write_dummy_gguf(resolve("tiny"), "q5_k", tmp_path / "x.gguf")
    assert not list(tmp_path.glob("x.*"))   # no partial file left behind
