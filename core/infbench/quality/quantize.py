"""Precisions from one checkpoint: a GGUF dequantized to f16, re-quantized by llama.cpp.

``infbench quantize --model X.gguf --to q8_0,q4_0,q4_K_M,q2_K`` (and ``--dtype`` on a
llama.cpp sweep or ``infbench perplexity`` over a real GGUF) goes through :func:`derive`:

1. **f16 base.** Every tensor the parent stores quantized (``Q4_1``, ``Q8_0``...) is
   dequantized with the ``gguf`` package (``gguf.quants.dequantize``, the reference
   implementation of ggml's block formats) and written as F16; F32 tensors (norms) stay
   F32, as ``convert_hf_to_gguf.py`` writes them. Every metadata key is copied (after
   gguf-py's ``gguf_new_metadata.py``), ``general.file_type`` becomes 1 (MOSTLY_F16), and
   ``infbench.parent.sha256`` / ``infbench.parent.name`` record the parent. A parent that
   is already f16 is its own base.
2. **Quantize.** llama.cpp's ``llama_model_quantize`` (what the ``llama-quantize`` tool
   calls; llama-cpp-python's binding) turns the f16 base into the target type with
   llama.cpp's own per-tensor choices (a k-quant mix such as ``q4_K_M`` keeps some
   tensors at higher precision; a row length that is not a multiple of 256 falls back to a
   legacy type). The metadata, parent keys included, is copied into the output.

Derived files live in ``$INFBENCH_HOME/cache/quantized/<parent sha256[:16]>/`` with a
``<file>.json`` beside each one: parent path and SHA-256, target dtype, the file's own
SHA-256, the method and the library versions. Derivation is deterministic for a given
parent and llama.cpp version, so a cached file is reused.

Note on the values: the f16 base of an already-quantized parent holds the parent's
dequantized values (here SmolLM2's Q4_1), not the original bf16 training weights, so the
family measures re-quantization on top of the parent's error.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infbench.data.errors import ConfigError, EngineUnavailable
from infbench.data.paths import default_home
from infbench.libs.llama import backend, default_threads
from infbench.quality.weights import PARENT_NAME_KEY, PARENT_SHA_KEY, file_sha256, gguf_dtype

#: Target dtypes (infbench's lower-case spelling) -> (llama.cpp ``LLAMA_FTYPE_*`` name, precision class).
#: Sub-4-bit k-quants count as ``int4`` for the device check (they run on the same integer
#: kernels; the schema has no narrower class).
QUANT_TYPES: dict[str, tuple[str, str]] = {
    "f32": ("ALL_F32", "fp32"), "f16": ("MOSTLY_F16", "fp16"), "bf16": ("MOSTLY_BF16", "bf16"),
    "q8_0": ("MOSTLY_Q8_0", "int8"), "q6_k": ("MOSTLY_Q6_K", "int8"),
    "q5_k_m": ("MOSTLY_Q5_K_M", "int8"), "q5_0": ("MOSTLY_Q5_0", "int8"), "q5_1": ("MOSTLY_Q5_1", "int8"),
    "q4_k_m": ("MOSTLY_Q4_K_M", "int4"), "q4_k_s": ("MOSTLY_Q4_K_S", "int4"), "q4_0": ("MOSTLY_Q4_0", "int4"),
    "q4_1": ("MOSTLY_Q4_1", "int4"), "q3_k_m": ("MOSTLY_Q3_K_M", "int4"), "q2_k": ("MOSTLY_Q2_K", "int4"),
}
#: Types that need no quantization step from an f16 base (the base itself or a float copy).
FLOAT_TYPES = ("f32", "f16", "bf16")
#: Bump when the files :func:`derive` writes change, so cached files are rebuilt.
DERIVE_VERSION = 2


def normalize_dtype(name: str) -> str:
    """``q4_K_M`` -> ``q4_k_m`` (infbench spells dtypes in lower case).

    Raises:
        ConfigError: not a type :func:`derive` can make.
    """
    n = name.strip().lower()
    if n not in QUANT_TYPES:
        raise ConfigError(f"cannot quantize to {name!r}", hint=f"targets: {', '.join(QUANT_TYPES)}")
    return n


@dataclass
class Derived:
    """One precision of a checkpoint.

    Attributes:
        dtype: its dtype (``q4_k_m``).
        path: the GGUF file (the parent itself when ``dtype`` is the parent's own type).
        provenance: the sidecar record (None for the parent itself).
        created: True if this call wrote the file.
        seconds: time spent writing it (s).
    """

    dtype: str
    path: Path
    provenance: dict[str, Any] | None
    created: bool = False
    seconds: float = 0.0


def cache_dir() -> Path:
    """``$INFBENCH_HOME/cache/quantized``."""
    return default_home() / "cache" / "quantized"


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for d in ("gguf", "llama_cpp_python"):
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            out[d] = None
    return out


def provenance_of(path: str | Path) -> dict[str, Any] | None:
    """The sidecar record of a derived file (``<file>.json``), or None for any other file."""
    side = Path(str(path) + ".json")
    try:
        return json.loads(side.read_text())
    except (OSError, ValueError):
        return None


def dequantize_to_f16(src: Path, dst: Path, parent_sha256: str, out_dtype: str = "f16") -> Path:
    """Write ``src`` with every quantized or 16-bit matrix as ``out_dtype`` (f16 or f32)
    and 1-D tensors as F32 (module docstring, step 1). Atomic (temp file, then rename).

    Raises:
        ConfigError: ``src`` is not a GGUF, or holds a type ``gguf`` cannot dequantize.
    """
    import gguf

    try:
        r = gguf.GGUFReader(str(src))
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{src} is not a readable GGUF file: {exc}") from exc
    arch = r.fields["general.architecture"].contents()
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    w = gguf.GGUFWriter(str(tmp), arch, endianess=r.endianess)
    skip = {"general.architecture", "general.file_type", PARENT_SHA_KEY, PARENT_NAME_KEY}
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name in skip:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16 if out_dtype == "f16" else gguf.LlamaFileType.ALL_F32))
    w.add_string(PARENT_SHA_KEY, parent_sha256)
    w.add_string(PARENT_NAME_KEY, Path(src).name)
    Q = gguf.GGMLQuantizationType
    target = np.float16 if out_dtype == "f16" else np.float32

    def values(t: Any) -> np.ndarray:
        if t.tensor_type == Q.F32:
            arr = np.asarray(t.data, dtype=np.float32)
        elif t.tensor_type == Q.F16:
            arr = np.asarray(t.data, dtype=np.float16)
        else:
            try:
                arr = gguf.quants.dequantize(t.data, t.tensor_type)
            except NotImplementedError as exc:
                raise ConfigError(f"gguf {gguf.__name__} cannot dequantize {t.name} ({t.tensor_type.name})",
                                  hint="upgrade the gguf package") from exc
        return arr.astype(np.float32 if arr.ndim == 1 else target, copy=False)

    try:
        for t in r.tensors:
            # The reader's numpy shape (rows, cols) is what the writer expects back.
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            dt = np.dtype(np.float32) if len(shape) == 1 else np.dtype(target)
            w.add_tensor_info(t.name, shape, dt, int(np.prod(shape)) * dt.itemsize)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in r.tensors:
            arr = values(t)
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            w.write_tensor_data(np.ascontiguousarray(arr.reshape(shape)))
        w.close()
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def quantize_gguf(src: Path, dst: Path, dtype: str, threads: int | None = None) -> Path:
    """``llama_model_quantize(src, dst, ftype)`` (llama-cpp-python's binding of llama.cpp's
    quantizer; ``allow_requantize`` off, so ``src`` should be a float file). Atomic.

    Raises:
        ConfigError: an unknown target or a failed quantization (the return code is given).
        EngineUnavailable: llama-cpp-python is missing.
    """
    dtype = normalize_dtype(dtype)
    try:
        import llama_cpp as L
    except ImportError as exc:
        raise EngineUnavailable("quantizing needs llama-cpp-python", hint="pip install 'infbench[llamacpp]'") from exc

    backend(L)  # llama.cpp's log to Python logging, as the engine sets it up
    params = L.llama_model_quantize_default_params()
    params.ftype = getattr(L, "LLAMA_FTYPE_" + QUANT_TYPES[dtype][0])
    params.nthread = int(threads or default_threads())
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    try:
        rc = L.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise ConfigError(f"llama_model_quantize({src.name} -> {dtype}) returned {rc}",
                              hint="run with -v to see llama.cpp's log")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each ggml type a GGUF holds (``{"Q4_0": 180, "F32": 61, ...}``):
    llama.cpp falls back to other types where a row length does not fit a k-quant block."""
    import gguf

    return dict(Counter(t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors).most_common())


def _write_provenance(path: Path, record: dict[str, Any]) -> None:
    side = Path(str(path) + ".json")
    tmp = side.with_name(side.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, side)


def derive(parent: str | Path, dtype: str, cache: Path | None = None, threads: int | None = None) -> Derived:
    """``parent`` at ``dtype``: the parent itself if that is its own type, else the cached
    derived file, written if missing (module docstring).

    Args:
        parent: a real GGUF file.
        dtype: a :data:`QUANT_TYPES` key (any case: ``q4_K_M``).
        cache: the cache folder (default :func:`cache_dir`).
        threads: llama.cpp quantization threads (default: the physical cores).

    Raises:
        ConfigError: unknown dtype, unreadable parent, failed quantization.
    """
    dtype = normalize_dtype(dtype)
    parent = Path(parent).resolve()
    own = gguf_dtype(parent)
    if own == dtype:
        return Derived(dtype, parent, provenance_of(parent))
    parent_sha = file_sha256(parent)
    folder = (cache or cache_dir()) / parent_sha[:16]
    stem = parent.stem

    def out_path(d: str) -> Path:
        return folder / f"{stem}-{d}.gguf"

    def made(path: Path) -> bool:
        prov = provenance_of(path)
        return path.is_file() and prov is not None and prov.get("derive_version") == DERIVE_VERSION

    dst = out_path(dtype)
    if made(dst):
        return Derived(dtype, dst, provenance_of(dst))
    t0 = time.perf_counter()
    if dtype in ("f16", "f32"):
        dequantize_to_f16(parent, dst, parent_sha, out_dtype=dtype)
        method = f"gguf.quants.dequantize -> {dtype.upper()} (1-D tensors F32)"
        base_sha = None
    else:
        base = parent if own in ("f16", "f32") else derive(parent, "f16", cache, threads).path
        quantize_gguf(base, dst, dtype, threads)
        method = f"llama_model_quantize(ftype=LLAMA_FTYPE_{QUANT_TYPES[dtype][0]}) from {base.name}"
        base_sha = file_sha256(base)
    seconds = time.perf_counter() - t0
    record = {"parent": str(parent), "parent_sha256": parent_sha, "parent_dtype": own, "dtype": dtype,
              "base_sha256": base_sha, "sha256": file_sha256(dst), "size_bytes": dst.stat().st_size,
              "tensor_types": tensor_types(dst), "method": method, "versions": _versions(),
              "derive_version": DERIVE_VERSION, "created_at": time.time(), "seconds": round(seconds, 3)}
    _write_provenance(dst, record)
    return Derived(dtype, dst, record, created=True, seconds=seconds)


#: File holding the provenance of a Hugging Face folder written by :func:`hf_folder`.
HF_PROVENANCE = "infbench-derived.json"


def hf_folder(parent: str | Path, cache: Path | None = None, dtype: str = "float16") -> Derived:
    """A Hugging Face folder with the GGUF's weights, for engines that load folders (vLLM,
    transformers): transformers dequantizes the GGUF (``from_pretrained(dir, gguf_file=...)``)
    and the weights are written as ``model.safetensors`` (``safetensors.torch.save_file``; tied
    embeddings kept once, as ``model.embed_tokens.weight``) beside ``config.json`` (without
    the GGUF quantization entry), the tokenizer (converted from the GGUF vocabulary, chat template included) and
    :data:`HF_PROVENANCE`. Cached like :func:`derive`, as ``<stem>-hf-<dtype>/``.

    Args:
        parent: a GGUF file. cache: the cache folder (default :func:`cache_dir`).
        dtype: torch dtype of the written weights (float16 holds an f16 GGUF exactly).

    Raises:
        ConfigError: transformers (with accelerate) is missing, or cannot read the GGUF.
    """
    parent = Path(parent).resolve()
    parent_sha = file_sha256(parent)
    out = (cache or cache_dir()) / parent_sha[:16] / f"{parent.stem}-hf-{dtype}"
    side = out / HF_PROVENANCE
    if (out / "model.safetensors").is_file() and side.is_file():
        record = json.loads(side.read_text())
        if record.get("derive_version") == DERIVE_VERSION:
            return Derived(f"hf-{dtype}", out, record)
    try:
        import torch
        import transformers
        from safetensors.torch import save_file
    except ImportError as exc:
        raise ConfigError("writing a Hugging Face folder needs transformers, torch and safetensors",
                          hint="pip install 'infbench[transformers]'") from exc
    t0 = time.perf_counter()
    src = {"pretrained_model_name_or_path": str(parent.parent), "gguf_file": parent.name}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(**src, dtype=getattr(torch, dtype))
        tok = transformers.AutoTokenizer.from_pretrained(**src)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"transformers cannot load {parent.name}: {exc}",
                          hint="pip install 'infbench[transformers]' (accelerate and gguf are needed)") from exc
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg["torch_dtype"] = cfg["dtype"] = dtype
        cfg["architectures"] = [type(model).__name__]
        (tmp / "config.json").write_text(json.dumps(cfg, indent=1, default=str))
        model.generation_config.save_pretrained(tmp)
        state = model.state_dict()
        if cfg.get("tie_word_embeddings") and "lm_head.weight" in state:
            # Tied: keep the embedding under its own name (vLLM then skips lm_head and ties it).
            state.pop("lm_head.weight")
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        tok.save_pretrained(tmp)
        record = {"parent": str(parent), "parent_sha256": parent_sha, "parent_dtype": gguf_dtype(parent),
                  "dtype": f"hf-{dtype}", "sha256": file_sha256(tmp / "model.safetensors"),
                  "method": f"transformers from_pretrained(gguf_file) -> {dtype} -> safetensors.torch.save_file",
                  "versions": {**_versions(), "transformers": transformers.__version__, "torch": torch.__version__},
                  "derive_version": DERIVE_VERSION, "created_at": time.time(),
                  "seconds": round(time.perf_counter() - t0, 3)}
        (tmp / HF_PROVENANCE).write_text(json.dumps(record, indent=1))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record["sha256"] = file_sha256(out / "model.safetensors")   # cached under the final path
    return Derived(f"hf-{dtype}", out, record, created=True, seconds=time.perf_counter() - t0)
