"""An INFBENCH_HOME for tests that share the session's dummy GGUF cache, measured CPU limits,
py-cpuinfo answer, vLLM platform answer and torch answer."""

from __future__ import annotations

import os
from pathlib import Path


def make_home(home: Path, gguf_cache: Path, cpu_limits_file: Path) -> Path:
    """Create ``home`` (an INFBENCH_HOME) whose ``cache/gguf`` and ``cpu_limits.json`` are
    links to the session's ``gguf_cache`` folder and ``cpu_limits_file``, and whose
    ``cache/cpuinfo.json`` links to the ``cpuinfo.json`` beside ``cpu_limits_file`` (the
    session's py-cpuinfo answer, :func:`infbench.detect.platforms.cpu.cached_cpuinfo`; where it
    is missing or stale, infbench asks py-cpuinfo and writes the home's own file in place of the
    link), and ``cache/vllm_platform.json`` and ``cache/torch_probe.json`` to the session's
    (kept under ``probe-home`` beside ``cpu_limits_file`` by
    :func:`infbench.engines.availability.vllm_probe` and
    :func:`~infbench.engines.availability.torch_probe`, the same way) where the session kept
    them; returns ``home``."""
    (home / "cache").mkdir(parents=True, exist_ok=True)
    os.symlink(gguf_cache, home / "cache" / "gguf")
    os.symlink(Path(cpu_limits_file).with_name("cpuinfo.json"), home / "cache" / "cpuinfo.json")
    os.symlink(cpu_limits_file, home / "cpu_limits.json")
    for name in ("vllm_platform.json", "torch_probe.json"):
        kept = Path(cpu_limits_file).with_name("probe-home") / "cache" / name
        if kept.is_file():
            os.symlink(kept, home / "cache" / name)
    return home


def session_dir(tmp_path_factory) -> Path:
    """The temporary folder the whole test session shares: ``$INFBENCH_TEST_SESSION_DIR`` where
    it is set (scripts/test.sh sets it for both of its stages, so the second pytest run reuses
    what the first made: about 20 s of its serial stage), else under pytest-xdist the parent of
    every worker's own base folder (``/tmp/pytest-of-$USER/pytest-N``), without xdist the
    session's base folder. What is made once per session (dummy GGUF files, the measured CPU
    limits, the worker image) lives here, under a lock where two workers could make it at once."""
    shared = os.environ.get("INFBENCH_TEST_SESSION_DIR")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
