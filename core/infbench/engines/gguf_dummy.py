"""Write a GGUF file with random ("dummy") weights from a zoo config, for llama.cpp.

llama.cpp has no ``load_format="dummy"``; instead infbench writes a GGUF whose tensors
have the model's exact shapes and ggml types and random values (normal, std 0.02),
with a synthetic SentencePiece-style vocabulary of ``vocab_size`` pieces. Speed does
not depend on the values when the output length is forced, so this measures the
real model's cost. Tensors of one shape share one random array (writing is I/O bound).

Supported architectures: ``llama`` and ``mistral`` (GGUF arch ``llama``), ``mixtral``
(``llama`` with experts), ``qwen2`` (q/k/v biases), ``qwen3`` (q/k RMSNorm).
Tensor names follow llama.cpp's ``gguf-py/gguf/constants.py`` (``blk.N.attn_q`` ...).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from infbench.data.errors import ConfigError
from infbench.data.models import ModelShape
from infbench.data.schema import short_hash
from infbench.engines.hf_dummy import CHAT_TEMPLATE

#: llama.cpp dtype names this writer produces -> precision class.
GGUF_DTYPES = {"f16": "fp16", "f32": "fp32", "bf16": "bf16", "q8_0": "int8", "q4_0": "int4"}
ARCHES = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


def _tensors(m: ModelShape) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape, is_matrix) of every tensor, in file order."""
    h, hd, v = m.hidden, m.head_dim, m.vocab
    q, kv, ff, e = m.heads * hd, m.kv_heads * hd, m.intermediate, m.experts
    t: list[tuple[str, tuple[int, ...], bool]] = [("token_embd.weight", (v, h), True),
                                                  ("output_norm.weight", (h,), False)]
    if not m.config.get("tie_word_embeddings"):
        t.append(("output.weight", (v, h), True))
    for i in range(m.layers):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (h,), False), (p + "attn_q.weight", (q, h), True),
              (p + "attn_k.weight", (kv, h), True), (p + "attn_v.weight", (kv, h), True),
              (p + "attn_output.weight", (h, q), True), (p + "ffn_norm.weight", (h,), False)]
        if m.model_type == "qwen2":
            t += [(p + "attn_q.bias", (q,), False), (p + "attn_k.bias", (kv,), False),
                  (p + "attn_v.bias", (kv,), False)]
        if m.model_type == "qwen3":
            t += [(p + "attn_q_norm.weight", (hd,), False), (p + "attn_k_norm.weight", (hd,), False)]
        if e > 1:
            t += [(p + "ffn_gate_inp.weight", (e, h), False), (p + "ffn_gate_exps.weight", (e, ff, h), True),
                  (p + "ffn_up_exps.weight", (e, ff, h), True), (p + "ffn_down_exps.weight", (e, h, ff), True)]
        else:
            t += [(p + "ffn_gate.weight", (ff, h), True), (p + "ffn_up.weight", (ff, h), True),
                  (p + "ffn_down.weight", (h, ff), True)]
    return t


#: Bumped whenever the files this module writes change, so cached GGUFs are rewritten.
WRITER_VERSION = 4


#: Printable ASCII characters held as single pieces, so any ASCII text tokenizes
#: without byte fallback (llama.cpp's SPM tokenizer needs a piece or a byte token for
#: every character it sees).
ASCII_PIECES = [chr(c) for c in range(33, 127)]


def _vocab(n: int) -> tuple[list[bytes], list[float], list[int]]:
    """A synthetic SPM vocabulary: ``<unk> <s> </s>``, the newline byte piece ``<0x0A>``
    (llama.cpp looks it up at load), ``▁``, the printable ASCII characters, ``▁t``, then
    word pieces ``▁t0 ▁t1 ...`` up to ``n``.

    Every prefix of a word piece is a piece (``▁t``, ``▁t1``, ``▁t17``), so SPM's bigram
    merges turn the word ``t17`` into one token (:func:`dummy_text` maps text to such
    words). No other byte pieces: a random model would emit them in sequences that are
    not valid UTF-8, which llama.cpp's server holds back as empty text, hiding those
    tokens' times. Non-ASCII text therefore cannot be tokenized: map it first.
    """
    import gguf

    head = [b"<unk>", b"<s>", b"</s>", b"<0x0A>", "\u2581".encode()] + [c.encode() for c in ASCII_PIECES]
    head.append("\u2581t".encode())
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.BYTE]
    types += [gguf.TokenType.NORMAL] * (len(head) - len(types))
    if n < len(head) + 16:
        raise ConfigError(f"vocab_size {n} is too small for the dummy GGUF vocabulary (at least {len(head) + 16})")
    toks = head + [f"\u2581t{i}".encode() for i in range(n - len(head))]
    types += [gguf.TokenType.NORMAL] * (n - len(types))
    return toks, [-float(i) for i in range(n)], [int(t) for t in types]


def dummy_words(vocab_size: int) -> int:
    """How many ``▁t{i}`` word pieces the dummy vocabulary of ``vocab_size`` holds."""
    return vocab_size - 6 - len(ASCII_PIECES)


def dummy_text(text: str, vocab_size: int) -> str:
    """``text`` with each whitespace-separated word replaced by a dummy word ``t{i}``
    (same word, same ``i``; CRC32 of the word), so it is one token per word for the dummy
    GGUF and the dummy HF tokenizer alike. Line breaks become spaces (a word at the start
    of a line would lose SPM's ``▁`` prefix and cost three tokens)."""
    k = dummy_words(vocab_size)
    return " ".join(f"t{zlib.crc32(w.encode()) % k}" for w in text.split())


def dummy_gguf_size(m: ModelShape, dtype: str) -> int:
    """Approximate file size in bytes (weights only) of :func:`write_dummy_gguf`'s output."""
    import gguf

    qt = _qtype(dtype)
    block, size = gguf.GGML_QUANT_SIZES[qt]
    total = 0
    for _, shape, is_mat in _tensors(m):
        n = int(np.prod(shape))
        total += n * size // block if is_mat else 4 * n
    return total


def _qtype(dtype: str) -> Any:
    import gguf

    Q = gguf.GGMLQuantizationType
    return {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}[dtype]


def write_dummy_gguf(m: ModelShape, dtype: str, out: Path, seed: int = 0) -> Path:
    """Write ``m`` with random weights at ``dtype`` to ``out`` (atomically, via a temp file).

    Args:
        m: model shape (HF config fields).
        dtype: one of :data:`GGUF_DTYPES` (``f16``, ``f32``, ``bf16``, ``q8_0``, ``q4_0``).
        out: destination path.
        seed: seed of the random values.

    Raises:
        ConfigError: unsupported architecture or dtype, or a model whose ``hidden_size``
            is not a multiple of the quantisation block (32).
    """
    import gguf

    arch = ARCHES.get(m.model_type)
    if arch is None:
        raise ConfigError(f"cannot write dummy GGUF weights for model_type {m.model_type!r}",
                          hint=f"supported: {', '.join(ARCHES)}; or pass a real .gguf file as --model")
    if dtype not in GGUF_DTYPES:
        raise ConfigError(f"llama.cpp dtype {dtype!r} is not supported for dummy weights",
                          hint=f"use one of: {', '.join(GGUF_DTYPES)}")
    qt = _qtype(dtype)
    block = gguf.GGML_QUANT_SIZES[qt][0]
    if m.hidden % block or m.intermediate % block:
        raise ConfigError(f"{m.name}: hidden/intermediate size not a multiple of {block}, needed by {dtype}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    w = gguf.GGUFWriter(str(tmp), arch)
    c = m.config
    w.add_name(f"infbench-dummy-{m.name}")
    w.add_context_length(int(c.get("max_position_embeddings") or 4096))
    w.add_embedding_length(m.hidden)
    w.add_block_count(m.layers)
    w.add_feed_forward_length(m.intermediate)
    w.add_head_count(m.heads)
    w.add_head_count_kv(m.kv_heads)
    w.add_key_length(m.head_dim)
    w.add_value_length(m.head_dim)
    w.add_rope_dimension_count(m.head_dim)
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    if m.experts > 1:
        w.add_expert_count(m.experts)
        w.add_expert_used_count(m.experts_per_token)
    w.add_file_type({"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}[dtype])
    toks, scores, types = _vocab(m.vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    # The same minimal template as the dummy HF folder, so /v1/chat/completions works.
    w.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(seed)
    cache: dict[tuple, np.ndarray] = {}

    def data(shape: tuple[int, ...], is_mat: bool, name: str) -> np.ndarray:
        key = (shape, is_mat, name.endswith("norm.weight"))
        if key not in cache:
            if not is_mat:
                arr = (np.ones(shape, np.float32) if key[2]
                       else (rng.standard_normal(shape, dtype=np.float32) * 0.02))
            else:
                arr = gguf.quants.quantize(rng.standard_normal(shape, dtype=np.float32) * 0.02, qt)
            cache[key] = arr
        return cache[key]

    tensors = _tensors(m)
    for name, shape, is_mat in tensors:
        arr = data(shape, is_mat, name)
        if is_mat and qt not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor_info(name, arr.shape, np.dtype(np.uint8), arr.nbytes, raw_dtype=qt)
        else:
            w.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, shape, is_mat in tensors:
            w.write_tensor_data(data(shape, is_mat, name))
        w.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def dummy_gguf_path(m: ModelShape, dtype: str, cache_dir: Path) -> Path:
    """Cached dummy GGUF for ``m`` at ``dtype`` under ``cache_dir``, written if missing.

    The file name carries a hash of the config so a changed shape is rewritten.
    """
    key = short_hash({"config": m.config, "writer": WRITER_VERSION}, 10)
    path = cache_dir / f"{m.name.replace('/', '_')}-{dtype}-{key}.gguf"
    if not path.exists():
        write_dummy_gguf(m, dtype, path)
    return path
