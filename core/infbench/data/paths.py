"""Where infbench keeps its files: ``$INFBENCH_HOME`` (default ``~/.infbench``) holds the
results store, caches (dummy GGUF and Hugging Face folders, derived precisions), job
folders of worker containers and logs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def default_home() -> Path:
    """``$INFBENCH_HOME`` or ``~/.infbench``: the store, caches (dummy GGUFs) and logs."""
    return Path(os.environ.get("INFBENCH_HOME") or Path.home() / ".infbench").expanduser()


def default_store_path() -> Path:
    """``$INFBENCH_HOME/results.db``."""
    return default_home() / "results.db"


def cache_dir() -> Path:
    """``$INFBENCH_HOME/cache``: dummy-weight models, derived precisions, tokenizers."""
    return default_home() / "cache"


def read_kept(path: Path | str, key: str) -> Any | None:
    """The value :func:`keep` wrote to the JSON file ``path`` under ``key``; None when the file
    is missing or unreadable, or holds another key (another version of what was kept)."""
    try:
        kept = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return kept.get("value") if isinstance(kept, dict) and kept.get("key") == key else None


def keep(path: Path | str, key: str, value: Any) -> None:
    """Keep ``value`` (JSON-serialisable) under ``key`` in the file ``path``, replacing it
    atomically (a temporary file renamed over it, so a reader sees the old file or the new one,
    and a link at ``path`` is replaced, not followed). A cache: a folder that cannot be written
    or a value JSON cannot hold only loses it."""
    p = Path(path)
    tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"key": key, "value": value}))
        os.replace(tmp, p)
    except (OSError, TypeError, ValueError):
        try:
            tmp.unlink()
        except OSError:
            pass
