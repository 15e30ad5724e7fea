"""A llama.cpp server binary of infbench's own build (``scripts/build_llama_cuda.sh``), used by
the ``llama.cpp-server`` engine in place of the ``xllamacpp`` wheel.

Where the binary comes from, first found wins:

1. the engine argument ``--engine-arg server_binary=PATH`` (one run; e.g. the CPU build in the
   integration test);
2. the site setting ``binary`` of ``[llama_server]`` in the site file
   (:func:`infbench.contract.site.site_config_path`), which ``infbench detect`` and the default
   sweep also read: detect has no engine arguments, and a GPU host has one build for every run.

The bundle folder holds ``llama-server``, ``llama-bench``, ``run.sh`` and ``manifest.json``
(:func:`read_manifest`). The binary links cudart/cublas dynamically; they are found in the
CUDA wheels of the Python that runs infbench (torch's ``nvidia/cu13/lib``, or
``nvidia/cuda_runtime/lib`` + ``nvidia/cublas/lib``: :func:`cuda_library_dirs`), and
``libcuda`` comes from the driver.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from infbench.contract.site import site_location, site_section
from infbench.data.errors import ConfigError

#: The site table the core reads for the server binary.
SITE_TABLE = "llama_server"
#: Largest bundle carried to a GPU host (the tar.xz; 64 MiB carry limit less room for infbench).
MAX_BUNDLE_BYTES = 60 * 1024 * 1024
#: Sub-folders of the ``nvidia`` namespace package that hold CUDA 13 / 12 runtime libraries.
CUDA_LIB_SUBDIRS = ("cu13/lib", "cuda_runtime/lib", "cublas/lib")


def configured_binary(option: str | None) -> tuple[Path, str] | None:
    """The server binary to run and where it was named, or None (use the xllamacpp wheel).

    Args:
        option: the ``server_binary`` engine argument (None: not given).

    Returns:
        ``(path, source)``, source ``"engine argument"`` or ``"site [llama_server] binary"``.

    Raises:
        ConfigError: the named file does not exist or is not executable, or the site's
            ``binary`` is not a string.
    """
    if option:
        path, source = Path(option).expanduser(), "engine argument server_binary"
    else:
        sec = site_section(SITE_TABLE) or {}
        value = sec.get("binary")
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{site_location(SITE_TABLE, 'binary')}: [llama_server] binary must be a path string")
        path, source = Path(value).expanduser(), f"site {site_location(SITE_TABLE, 'binary')}"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigError(f"llama.cpp server binary {path} ({source}) is not an executable file",
                          hint="build it with scripts/build_llama_cuda.sh (bundle/llama-server)")
    return path, source


def read_manifest(binary: Path, verify: bool = True) -> dict[str, Any] | None:
    """The build manifest beside ``binary`` (``manifest.json`` of the bundle), or None when
    there is none (a llama-server built elsewhere).

    Args:
        binary: the server binary.
        verify: recompute each listed file's sha256 and compare.

    Returns:
        The manifest dict: ``llama_cpp_python``, ``llama_cpp_version``, ``cmake_flags``,
        ``cuda_architectures``, ``files`` ({name: {sha256, bytes}}), ``bundle_bytes``,
        ``tar_xz_bytes``, ``build_s``...

    Raises:
        ConfigError: the manifest is not JSON, lacks ``files``/``tar_xz_bytes``, does not list
            ``binary``, a listed file that is present (``binary`` must be) differs in sha256 or
            size (a changed or truncated binary), or the bundle was over :data:`MAX_BUNDLE_BYTES`.
    """
    p = binary.parent / "manifest.json"
    if not p.is_file():
        return None
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"bundle manifest {p} is unreadable: {exc}") from None
    if not isinstance(m, dict) or not isinstance(m.get("files"), dict) or not isinstance(m.get("tar_xz_bytes"), int):
        raise ConfigError(f"bundle manifest {p} lacks files/tar_xz_bytes", hint="rebuild: scripts/build_llama_cuda.sh")
    if m["tar_xz_bytes"] > MAX_BUNDLE_BYTES:
        raise ConfigError(f"bundle {p.parent} is {m['tar_xz_bytes'] / 2**20:.1f} MiB packed, over "
                          f"{MAX_BUNDLE_BYTES // 2**20} MiB")
    if binary.name not in m["files"]:
        raise ConfigError(f"bundle manifest {p} does not list {binary.name}",
                          hint="rebuild: scripts/build_llama_cuda.sh")
    if verify:
        for name, want in m["files"].items():
            f = binary.parent / name
            if not f.is_file() and name != binary.name:
                continue  # llama-bench may travel in a carry of its own (llama-bench-cuda.tar.xz)
            size = f.stat().st_size
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            if size != want.get("bytes") or h.hexdigest() != want.get("sha256"):
                raise ConfigError(f"{f} differs from its manifest (sha256 {h.hexdigest()[:12]}..., {size} bytes; "
                                  f"manifest {str(want.get('sha256'))[:12]}..., {want.get('bytes')} bytes)",
                                  hint="carry the bundle again, or rebuild it")
    return m


def cuda_library_dirs() -> list[str]:
    """Folders of the CUDA runtime libraries installed as Python wheels (torch's
    dependencies) in this interpreter: each existing ``<nvidia>/{cu13/lib, cuda_runtime/lib,
    cublas/lib}``; empty when there is no ``nvidia`` package."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [os.path.join(r, s) for r in roots for s in CUDA_LIB_SUBDIRS if os.path.isdir(os.path.join(r, s))]


def server_env(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to run ``binary`` in: ``base`` (default ``os.environ``) with the
    binary's folder and :func:`cuda_library_dirs` put before ``LD_LIBRARY_PATH``."""
    env = dict(os.environ if base is None else base)
    dirs = [str(binary.parent), *cuda_library_dirs()]
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(dirs)
    return env


def libcuda_loads() -> tuple[bool, str]:
    """Whether the driver's ``libcuda.so.1`` loads in this process, and why not."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return False, str(exc)
    return True, "libcuda.so.1"


def binary_version(binary: Path, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Run ``binary --version`` in :func:`server_env`.

    Returns:
        ``(True, "version: N (commit)")`` when it exits 0, else ``(False, the last line of
        its output)`` (a missing library: ``error while loading shared libraries: ...``).
    """
    try:
        r = subprocess.run([str(binary), "--version"], env=server_env(binary), capture_output=True, text=True,
                           timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    out = (r.stdout + r.stderr).strip().splitlines()
    version = next((ln.strip() for ln in out if ln.strip().startswith("version:")), out[-1] if out else "")
    return r.returncode == 0, version


def server_argv(binary: Path, model: str, port: int, parallel: int, ctx: int, n_threads: int | None,
                gpu: bool, n_ubatch: int | None = None) -> list[str]:
    """llama-server's command line, the same settings as
    :mod:`infbench.engines.xllamacpp_serve`: ``parallel`` slots sharing ``ctx`` tokens of
    context, continuous batching (llama-server's default), ``/metrics``, a logical batch of
    max(2048, parallel, n_ubatch), the physical batch ``n_ubatch`` (None: llama.cpp's 512),
    every layer on the GPU for an accelerator, and log verbosity 4 (the loader's device and
    offload lines that the device proof reads)."""
    argv = [str(binary), "--model", model, "--host", "127.0.0.1", "--port", str(port), "--parallel", str(parallel),
            "--ctx-size", str(ctx), "--batch-size", str(max(2048, parallel, n_ubatch or 0)), "--metrics",
            "--n-gpu-layers", "999" if gpu else "0", "--log-verbosity", "4"]
    if n_ubatch:
        argv += ["--ubatch-size", str(n_ubatch)]
    if n_threads:
        argv += ["--threads", str(n_threads)]
    return argv
