"""A random-weight Hugging Face checkpoint written from a zoo config, for engines that
load real weight files and have no dummy load format (DeepSpeed-MII's FastGen loads a
folder's ``*.safetensors`` through ``HuggingFaceCheckpointEngine``).

:func:`dummy_checkpoint` writes, into the cache (``$INFBENCH_HOME/cache/hf-weights/``):

* the weight-less folder of :mod:`infbench.engines.hf_dummy` (``config.json`` with
  ``torch_dtype`` set to the requested dtype, the dummy tokenizer);
* the tensors of ``transformers.AutoModelForCausalLM.from_config(config)`` (names and
  shapes read from a model built on the ``meta`` device, so nothing of model size is
  allocated for it), filled shard by shard with :func:`infbench.engines.dummy_weights.fill_block`:
  2-D and larger weights from one seeded block of N(0, 0.02) values repeated along them (the
  ``initializer_range`` of Llama-family configs; a copy at memory speed instead of a normal
  draw per value), 1-D ``*norm*`` weights 1, other 1-D tensors (biases) 0; an output head tied
  to the embeddings is left out, as ``save_pretrained`` does;
* ``model-0000i-of-0000n.safetensors`` shards of at most ``shard_bytes`` and the
  ``model.safetensors.index.json`` weight map (the layout ``save_pretrained`` writes).

Speed does not depend on weight values and output lengths are forced, so the random
weights are valid for timing. The folder name carries a hash of the config and the dtype.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from infbench.data.models import ModelShape
from infbench.data.schema import short_hash
from infbench.engines.dummy_weights import INIT_STD as DUMMY_STD
from infbench.engines.dummy_weights import fill_block, random_block
from infbench.engines.hf_dummy import write_dummy_hf_dir

#: Bump when the written files change, so cached checkpoints are rewritten (2: the block fill).
WRITER_VERSION = 2
#: Largest shard written (bytes).
SHARD_BYTES = 2 * 2**30
#: Standard deviation of the random weights (Llama's ``initializer_range``).
INIT_STD = DUMMY_STD


def tensor_specs(m: ModelShape) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of every tensor a Hugging Face checkpoint of ``m`` holds, in the
    model's order (a model built on the ``meta`` device; a tied output head left out).

    Raises:
        ValueError: the shape has no ``model_type``/``vocab_size`` (not a zoo shape).
    """
    import torch
    import transformers

    if "vocab_size" not in m.config or "model_type" not in m.config:
        raise ValueError(f"{m.name} has no zoo config: cannot write a random checkpoint")
    cfg = dict(m.config)
    cfg.pop("architectures", None)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = []
    seen: set[int] = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen or (tied and name == "lm_head.weight"):
            continue
        seen.add(id(t))
        out.append((name, tuple(t.shape)))
    return out


def _fill(name: str, shape: tuple[int, ...], dtype: Any, block: Any) -> Any:
    import torch

    t = torch.empty(shape, dtype=dtype)
    fill_block(t, name, block)
    return t


def write_checkpoint(m: ModelShape, dtype: str, out: Path, shard_bytes: int = SHARD_BYTES, seed: int = 0) -> Path:
    """Write a random-weight checkpoint of ``m`` at ``dtype`` (``bfloat16``, ``float16``,
    ``float32``) into ``out`` (see the module doc).

    Returns:
        ``out``.

    Raises:
        ValueError: not a zoo shape, or an unknown dtype.
    """
    import torch
    from safetensors.torch import save_file


    tdtype = getattr(torch, dtype, None)
    if not isinstance(tdtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    specs = tensor_specs(m)
    write_dummy_hf_dir(m, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["torch_dtype"] = dtype
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    itemsize = torch.empty((), dtype=tdtype).element_size()
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in specs:
        n = itemsize
        for d in shape:
            n *= d
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    block = random_block(torch, "cpu", tdtype, seed)
    weight_map: dict[str, str] = {}
    total = 0
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        tensors = {name: _fill(name, shape, tdtype, block) for name, shape in shard}
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        weight_map.update({name: fname for name in tensors})
        del tensors
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return out


def dummy_checkpoint(m: ModelShape, dtype: str, cache_dir: Path) -> Path:
    """The cached random-weight checkpoint of ``m`` at ``dtype`` under ``cache_dir``,
    written if missing (atomically: a reader never sees half a folder).

    Raises:
        ValueError: not a zoo shape, or an unknown dtype.
    """
    key = short_hash({"config": m.config, "dtype": dtype, "writer": WRITER_VERSION}, 10)
    path = cache_dir / f"{m.name.replace('/', '_')}-{dtype}-{key}"
    if not (path / "model.safetensors.index.json").exists():
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_checkpoint(m, dtype, tmp)
        try:
            tmp.replace(path)
        except OSError:                         # another process wrote it first
            shutil.rmtree(tmp, ignore_errors=True)
    return path
