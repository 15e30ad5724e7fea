"""A Hugging Face model folder without weights, for engines that load dummy weights.

vLLM (``load_format="dummy"``) and TensorRT-LLM build random weights from a model folder's
``config.json`` but still need a tokenizer. :func:`dummy_hf_dir` writes, from a zoo
:class:`~infbench.data.models.ModelShape`:

* ``config.json``: the zoo's config fields, with ``bos_token_id``/``eos_token_id`` set to
  the dummy vocabulary's ``<s>``/``</s>`` (1, 2);
* a word-level ``tokenizer.json`` (built with the ``tokenizers`` library) of exactly
  ``vocab_size`` tokens ``<unk> <s> </s> ▁t3 ▁t4 ...``, so every id the model can emit
  decodes to visible text and a streamed response has one text event per token;
* ``tokenizer_config.json`` with a minimal chat template, so ``/v1/chat/completions`` works.

Speed does not depend on weight values; output lengths are forced (``ignore_eos``), so the
random weights are valid for timing. The folder is cached under
``$INFBENCH_HOME/cache/hf/`` keyed by a hash of the config.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from infbench.data.models import ModelShape
from infbench.data.schema import short_hash

#: Bump when the written files change, so cached folders are rewritten.
WRITER_VERSION = 1

#: Special tokens of the dummy vocabulary (ids 0, 1, 2).
SPECIALS = ("<unk>", "<s>", "</s>")

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def dummy_vocab(n: int) -> dict[str, int]:
    """``n`` tokens: the three specials, then ``▁t3 .. ▁t{n-1}`` (SentencePiece-style word
    pieces; token ``▁t{i}`` has id i and decodes to `` t{i}``)."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({f"\u2581t{i}": i for i in range(len(SPECIALS), n)})
    return vocab


def write_dummy_hf_dir(m: ModelShape, out: Path) -> Path:
    """Write config.json and the tokenizer files for ``m`` into ``out`` (no weights).

    Raises:
        ValueError: the shape has no ``vocab_size`` (a remote model id, not a zoo shape).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if "vocab_size" not in m.config:
        raise ValueError(f"{m.name} has no vocab_size: cannot write a dummy model folder")
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(m.config)
    cfg.update(bos_token_id=1, eos_token_id=2, pad_token_id=None)
    cfg.setdefault("torch_dtype", "bfloat16")
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    tok = Tokenizer(models.WordLevel(dummy_vocab(m.vocab), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": int(m.config.get("max_position_embeddings") or 4096),
        "add_bos_token": False, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False}, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return out


def dummy_hf_dir(m: ModelShape, cache_dir: Path) -> Path:
    """Cached dummy folder for ``m`` under ``cache_dir``, written if missing; the folder
    name carries a hash of the config so a changed shape gets a new folder."""
    key = short_hash({"config": m.config, "writer": WRITER_VERSION}, 10)
    path = cache_dir / f"{m.name.replace('/', '_')}-{key}"
    if not (path / "tokenizer_config.json").exists():
        tmp = path.with_name(path.name + ".tmp")
        write_dummy_hf_dir(m, tmp)
        try:
            tmp.replace(path)                   # atomic: a reader never sees half a folder
        except OSError:                         # another process wrote it first
            shutil.rmtree(tmp, ignore_errors=True)
    return path
