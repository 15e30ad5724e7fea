"""An INFBENCH_HOME for tests that share the session's dummy GGUF cache and measured CPU limits."""

from __future__ import annotations

import os
from pathlib import Path


def make_home(home: Path, gguf_cache: Path, cpu_limits_file: Path) -> Path:
    """Create ``home`` (an INFBENCH_HOME) whose ``cache/gguf`` and ``cpu_limits.json`` are
    links to the session's ``gguf_cache`` folder and ``cpu_limits_file``; returns ``home``."""
    (home / "cache").mkdir(parents=True, exist_ok=True)
    os.symlink(gguf_cache, home / "cache" / "gguf")
    os.symlink(cpu_limits_file, home / "cpu_limits.json")
    return home
