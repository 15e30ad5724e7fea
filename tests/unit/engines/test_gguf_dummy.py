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


def test_gguf_metadata_is_read_once_per_file_version(tmp_path, monkeypatch):
    """The model shape and the weights check read a GGUF's metadata through one cache
    (``gguf_metadata``): the file is parsed once however often it is asked for, in this process
    or a later one (the engine's) with the same home, and again once it is written anew (its
    size or mtime changed) or its cache entry is unreadable; the values are ``gguf``'s own."""
    import os

    from infbench.data.models import _gguf_metadata_of, gguf_metadata
    from infbench.data.paths import cache_dir
    from infbench.quality.weights import gguf_fields

    _gguf_metadata_of.cache_clear()
    reads: list[str] = []
    real_reader = gguf.GGUFReader

    class CountingReader(real_reader):  # type: ignore[misc, valid-type]
        def __init__(self, path, *a, **k):
            reads.append(str(path))
            super().__init__(path, *a, **k)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    m = resolve("tiny-random-llama")
    p = write_dummy_gguf(m, "f16", tmp_path / "t.gguf")
    cfg = gguf_config(p)
    meta = gguf_fields(p, ("general.name", "general.file_type", "no.such.key"))
    assert resolve(str(p)).config == cfg and len(reads) == 1
    r = real_reader(str(p))
    assert meta == {k: r.fields[k].contents() for k in ("general.name", "general.file_type")}
    assert gguf_metadata(p).array_lengths["tokenizer.ggml.tokens"] == len(r.fields["tokenizer.ggml.tokens"].data)
    assert cfg["model_type"] == r.fields["general.architecture"].contents() == "llama"
    _gguf_metadata_of.cache_clear()                                        # as a new process would start
    assert gguf_config(p) == cfg and gguf_fields(p, ("general.name",)) == {"general.name": meta["general.name"]}
    assert len(reads) == 1                                                 # from the home's cache
    (entry,) = (cache_dir() / "gguf-metadata").iterdir()
    entry.write_text("{not json")
    _gguf_metadata_of.cache_clear()
    assert gguf_config(p) == cfg and len(reads) == 2                       # a broken entry is read again
    st = p.stat()
    write_dummy_gguf(ModelShape(name="t2", config={**m.config, "num_hidden_layers": 3}), "f16", p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))       # a new version, whatever the clock
    assert gguf_config(p)["num_hidden_layers"] == 3 and len(reads) == 3
    _gguf_metadata_of.cache_clear()
    assert gguf_config(p)["num_hidden_layers"] == 3 and len(reads) == 3
