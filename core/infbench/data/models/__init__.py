"""The model zoo: Hugging Face config.json shapes addressable by short name or HF id.

``resolve("smollm2-135m")``, ``resolve("HuggingFaceTB/SmolLM2-135M")`` and
``resolve("/path/to/hf-folder")`` all give a :class:`ModelShape`. Engines build dummy
weights from ``ModelShape.config``; the derived numbers (parameters, KV-cache bytes per
token) feed ``infbench models`` and, later, the roofline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import BaseModel, Field

from infbench.data.errors import ConfigError, suggest
from infbench.data.paths import cache_dir, keep, read_kept

#: Bytes per element of the KV cache by precision class (``infbench models`` shows fp16).
KV_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


class ModelShape(BaseModel):
    """A model's architecture, from its HF ``config.json`` fields.

    Attributes:
        name: zoo key (``llama-3-8b``) or the path it was loaded from.
        hf_id: Hugging Face model id, if known.
        config: the config.json fields (``hidden_size``, ``num_hidden_layers``...).
        path: local folder or ``.gguf`` file with real weights, or None for dummy weights.
    """

    name: str
    hf_id: str | None = None
    aliases: list[str] = Field(default_factory=list)
    config: dict[str, Any]
    path: str | None = None

    # -- config accessors --------------------------------------------------------
    @property
    def hidden(self) -> int:
        """``hidden_size`` (d_model)."""
        return int(self.config["hidden_size"])

    @property
    def layers(self) -> int:
        """``num_hidden_layers``."""
        return int(self.config["num_hidden_layers"])

    @property
    def heads(self) -> int:
        """``num_attention_heads``."""
        return int(self.config["num_attention_heads"])

    @property
    def kv_heads(self) -> int:
        """``num_key_value_heads`` (defaults to ``num_attention_heads``)."""
        return int(self.config.get("num_key_value_heads") or self.heads)

    @property
    def head_dim(self) -> int:
        """``head_dim`` if given, else ``hidden_size / num_attention_heads``."""
        return int(self.config.get("head_dim") or self.hidden // self.heads)

    @property
    def vocab(self) -> int:
        """``vocab_size``."""
        return int(self.config["vocab_size"])

    @property
    def intermediate(self) -> int:
        """``intermediate_size`` (FFN width of one expert)."""
        return int(self.config["intermediate_size"])

    @property
    def experts(self) -> int:
        """``num_local_experts`` (1 for dense models)."""
        return int(self.config.get("num_local_experts") or 1)

    @property
    def experts_per_token(self) -> int:
        """``num_experts_per_tok`` (1 for dense models)."""
        return int(self.config.get("num_experts_per_tok") or 1)

    @property
    def model_type(self) -> str:
        """``model_type`` (``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``mixtral``)."""
        return str(self.config.get("model_type", "llama"))

    @property
    def attention(self) -> str:
        """``MHSA`` (kv heads = heads), ``MQA`` (1 kv head) or ``GQA``."""
        if self.kv_heads == self.heads:
            return "MHSA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    # -- derived numbers ---------------------------------------------------------
    def param_counts(self) -> dict[str, int]:
        """Parameter counts: ``total`` and ``active`` per token (MoE), in parameters.

        Per layer: attention q/o ``H x (heads x head_dim)``, k/v ``H x (kv_heads x
        head_dim)`` (+ q/k/v biases for qwen2), two RMSNorm vectors (+ q/k norms of
        head_dim for qwen3), SwiGLU MLP ``3 x H x I`` per expert (+ router ``H x E``).
        Plus embeddings ``V x H``, final norm ``H`` and an untied LM head ``V x H``.
        Matches the HF checkpoints (e.g. Llama-2-7B 6.74e9, SmolLM2-135M 1.35e8).
        """
        h, hd = self.hidden, self.head_dim
        q = self.heads * hd
        kv = self.kv_heads * hd
        attn = h * q + 2 * h * kv + q * h
        if self.model_type == "qwen2":
            attn += q + 2 * kv
        norms = 2 * h + (2 * hd if self.model_type == "qwen3" else 0)
        mlp_one = 3 * h * self.intermediate
        router = h * self.experts if self.experts > 1 else 0
        per_layer_total = attn + norms + mlp_one * self.experts + router
        per_layer_active = attn + norms + mlp_one * self.experts_per_token + router
        emb = self.vocab * h
        head = 0 if self.config.get("tie_word_embeddings") else self.vocab * h
        base = emb + head + h
        return {"total": base + self.layers * per_layer_total, "active": base + self.layers * per_layer_active}

    def kv_bytes_per_token(self, precision: str = "fp16") -> int:
        """KV-cache bytes per token: ``2 x layers x kv_heads x head_dim x bytes``."""
        return 2 * self.layers * self.kv_heads * self.head_dim * KV_BYTES.get(precision, 2)

    def summary(self) -> dict[str, Any]:
        """One row of ``infbench models``."""
        p = self.param_counts()
        return {
            "name": self.name, "hf_id": self.hf_id, "model_type": self.model_type,
            "params": p["total"], "active_params": p["active"], "layers": self.layers,
            "hidden_size": self.hidden, "heads": self.heads, "kv_heads": self.kv_heads,
            "attention": self.attention, "vocab_size": self.vocab,
            "max_position_embeddings": self.config.get("max_position_embeddings"),
            "kv_bytes_per_token_fp16": self.kv_bytes_per_token("fp16"),
        }


@lru_cache(maxsize=1)
def zoo() -> dict[str, ModelShape]:
    """All zoo models by key (loaded once from ``zoo.yaml``)."""
    text = resources.files("infbench.data.models").joinpath("zoo.yaml").read_text()
    raw = yaml.safe_load(text)
    return {k: ModelShape(name=k, **v) for k, v in raw.items()}


def _index() -> dict[str, str]:
    idx = {}
    for key, m in zoo().items():
        for n in [key, m.hf_id, *m.aliases]:
            if n:
                idx[n.lower()] = key
        if m.hf_id:
            idx[m.hf_id.split("/")[-1].lower()] = key
    return idx


def resolve(name: str) -> ModelShape:
    """Find a model by zoo key, alias, HF id (case-insensitive) or local path.

    A local path may be an HF folder with ``config.json`` (its real weights are used)
    or a ``.gguf`` file (llama.cpp only; its shape is read from the GGUF header).

    Raises:
        ConfigError: unknown name; the message suggests the closest zoo names.
    """
    key = _index().get(name.lower())
    if key:
        return zoo()[key]
    p = Path(name).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        cfg = json.loads((p / "config.json").read_text())
        return ModelShape(name=str(p), config=cfg, path=str(p))
    if p.is_file() and p.suffix == ".gguf":
        return ModelShape(name=str(p), config=gguf_config(p), path=str(p))
    hint = suggest(name, list(zoo()) + [m.hf_id for m in zoo().values() if m.hf_id])
    raise ConfigError(
        f"unknown model {name!r}: not in the model zoo and not a local HF folder or .gguf file",
        hint=(hint + " " if hint else "") + "run `infbench models` to list the zoo",
    )


@dataclass(frozen=True)
class GGUFMetadata:
    """A GGUF file's metadata, read once (:func:`gguf_metadata`).

    Attributes:
        values: each scalar or string field by key (``general.architecture`` -> ``"llama"``,
            ``llama.block_count`` -> ``30``), as ``gguf``'s ``ReaderField.contents()`` gives it.
        array_lengths: each array field's element count by key (``tokenizer.ggml.tokens`` -> the
            vocabulary size); the arrays themselves are not kept.
    """

    values: Mapping[str, Any]
    array_lengths: Mapping[str, int]


def gguf_metadata(path: str | Path) -> GGUFMetadata:
    """A GGUF file's metadata (``gguf``'s ``GGUFReader``), read once for a given version of the
    file: kept by resolved path, size and ``st_mtime_ns`` in this process and under
    ``$INFBENCH_HOME/cache/gguf-metadata/`` (as :func:`infbench.quality.weights.file_sha256`
    keeps hashes), so the engine's process and later commands do not read it again, and a file
    written anew is read anew. ``GGUFReader`` parses every field, the tokenizer's arrays
    included: 1.9-2.3 s for the 98 MB SmolLM2-135M Q4_1 (a 49,152-token vocabulary) on one
    core of the 2-core CI machine, which one ``infbench perplexity`` paid five times (model
    shape and weights check, twice each, then the engine's process) before this cache.

    Raises:
        ConfigError: the file cannot be read, is not a GGUF file, or ``gguf`` is not installed.
    """
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as exc:
        raise ConfigError(f"{path} is not a readable GGUF file: {exc}") from exc
    return _gguf_metadata_of(str(p), st.st_size, st.st_mtime_ns, str(cache_dir() / "gguf-metadata"))


@lru_cache(maxsize=16)
def _gguf_metadata_of(path: str, size: int, mtime_ns: int, cache: str) -> GGUFMetadata:
    """:func:`gguf_metadata` for one version of one file (``size`` and ``mtime_ns`` identify it),
    from the ``cache`` folder when it holds that version, else read and written there (a
    read-only or full disk only loses the cache). Raises ConfigError as it does (not cached)."""
    key = f"{path}|{size}|{mtime_ns}"
    entry = Path(cache) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    kept = read_kept(entry, key)
    if isinstance(kept, dict) and isinstance(kept.get("values"), dict) and isinstance(kept.get("array_lengths"), dict):
        return GGUFMetadata(values=MappingProxyType(kept["values"]),
                            array_lengths=MappingProxyType(kept["array_lengths"]))
    meta = _read_gguf_metadata(path)
    keep(entry, key, {"values": dict(meta.values), "array_lengths": dict(meta.array_lengths)})
    return meta


def _read_gguf_metadata(path: str) -> GGUFMetadata:
    """Read a GGUF file's metadata with ``gguf``'s ``GGUFReader``.

    Raises:
        ConfigError: not a readable GGUF file, or ``gguf`` is not installed.
    """
    try:
        from gguf import GGUFReader, GGUFValueType
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ConfigError("reading a .gguf file needs the gguf package",
                          hint="pip install gguf (an infbench dependency: reinstall infbench)") from exc
    try:
        r = GGUFReader(path)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{path} is not a readable GGUF file: {exc}") from exc
    values: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for key, f in r.fields.items():
        if f.types and f.types[0] == GGUFValueType.ARRAY:
            lengths[key] = len(f.data)
        else:
            values[key] = f.contents()
    return GGUFMetadata(values=MappingProxyType(values), array_lengths=MappingProxyType(lengths))


def gguf_config(path: Path) -> dict[str, Any]:
    """HF-style config fields read from a GGUF file's metadata (:func:`gguf_metadata`).

    Raises:
        ConfigError: the file is not a readable GGUF or ``gguf`` is not installed.
    """
    meta = gguf_metadata(path)
    arch = meta.values.get("general.architecture")

    def g(k: str) -> Any:
        return meta.values.get(f"{arch}.{k}")

    heads = g("attention.head_count")
    return {
        "model_type": arch, "hidden_size": g("embedding_length"), "intermediate_size": g("feed_forward_length"),
        "num_hidden_layers": g("block_count"), "num_attention_heads": heads,
        "num_key_value_heads": g("attention.head_count_kv") or heads,
        "vocab_size": meta.array_lengths.get("tokenizer.ggml.tokens"),
        "max_position_embeddings": g("context_length"),
        "num_local_experts": g("expert_count"), "num_experts_per_tok": g("expert_used_count"),
    }
