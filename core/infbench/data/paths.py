"""Where infbench keeps its files: ``$INFBENCH_HOME`` (default ``~/.infbench``) holds the
results store, caches (dummy GGUF and Hugging Face folders, derived precisions), job
folders of worker containers and logs."""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """``$INFBENCH_HOME`` or ``~/.infbench``: the store, caches (dummy GGUFs) and logs."""
    return Path(os.environ.get("INFBENCH_HOME") or Path.home() / ".infbench").expanduser()


def default_store_path() -> Path:
    """``$INFBENCH_HOME/results.db``."""
    return default_home() / "results.db"


def cache_dir() -> Path:
    """``$INFBENCH_HOME/cache``: dummy-weight models, derived precisions, tokenizers."""
    return default_home() / "cache"
