"""The two builds of llama.cpp a CPU runs the default sweep with, and what the faster one gives.

* **compiled**: the ``llama.cpp`` engine, llama-cpp-python in this process. PyPI has its
  source only, so ``pip install 'infbench[llamacpp]'`` compiles llama.cpp here, for this CPU
  (ggml's ``GGML_NATIVE``: every ISA extension the compiler sees, AVX-512 and VNNI included).
* **prebuilt**: the ``llama.cpp-server`` engine, llama.cpp's server from the ``xllamacpp``
  wheel (a manylinux build for a baseline CPU), an infbench dependency: no compiler, seconds
  to install. The first result comes from it on a plain ``pip install infbench``.

What each build is, in its own words (the wheel's tag, ggml's ``system_info`` CPU features),
goes into every cell's engine description (``Engine.describe()["build"]``) and the run's
provenance. How much faster the compiled build is, and how long it takes to compile, are
read at run time from ``engine_builds.json`` shipped with the package, which
``benchmarks/engine_builds.py`` writes (the same file as
``benchmarks/results/engine_builds.json``); no figure is typed here.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from infbench.engines.availability import MISSING
from infbench.libs.llama import LLAMA_CPP_INSTALL

#: ggml ``system_info`` entries every x86-64 build of interest has, left out of the feature lists.
_BASELINE = {"SSE3", "SSSE3", "AVX", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP", "REPACK"}
#: The package file ``benchmarks/engine_builds.py`` writes (a copy of its results JSON).
MEASURED_FILE = "engine_builds.json"


def cpu_features(system_info: str) -> list[str]:
    """The CPU features a ggml build was compiled with, from its ``system_info`` line
    (``CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | ...``), baseline ones (SSE3, AVX, FMA,
    F16C, ...) left out: ``["AVX2", "AVX512", ...]``."""
    cpu = system_info.split("CPU :", 1)[-1].split("\n", 1)[0]
    return [k for k, v in re.findall(r"([A-Z][A-Z0-9_]*) = (\d+)", cpu) if v != "0" and k not in _BASELINE]


def _wheel(distribution: str) -> dict[str, Any]:
    """The installed wheel's generator and tags, and whether it was built here: a wheel pip
    builds from source is tagged ``linux_x86_64``; a published prebuilt one ``manylinux_*``,
    ``musllinux_*``, ``macosx_*`` or ``win_*``."""
    try:
        text = md.distribution(distribution).read_text("WHEEL") or ""
    except md.PackageNotFoundError:
        return {}
    tags = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]
    gen = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Generator:")), None)
    prebuilt = any(re.search(r"(manylinux|musllinux|macosx|win)", t) for t in tags)
    return {"generator": gen, "tags": tags, "origin": "prebuilt wheel" if prebuilt else "built from source"}


@lru_cache(maxsize=1)
def llama_cpp_build() -> dict[str, Any]:
    """The compiled build's description (``llama.cpp`` engine): ``{"engine", "kind":
    "compiled", "distribution", "version", "origin", "wheel_tags", "cpu_features"}``.

    Raises:
        ImportError: llama-cpp-python is not installed.
    """
    import llama_cpp

    w = _wheel("llama_cpp_python")
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    return {"engine": "llama.cpp", "kind": "compiled", "distribution": "llama-cpp-python",
            "version": llama_cpp.__version__, "origin": w.get("origin"), "wheel_tags": w.get("tags"),
            "cpu_features": cpu_features(info)}


@lru_cache(maxsize=1)
def xllamacpp_build() -> dict[str, Any]:
    """The prebuilt build's description (``llama.cpp-server`` engine): ``{"engine", "kind":
    "prebuilt", "distribution", "version", "origin", "wheel_tags", "cpu_features",
    "build_info"}`` (``build_info``: xllamacpp's compiler and target).

    Raises:
        ImportError: xllamacpp is not installed.
    """
    import xllamacpp

    w = _wheel("xllamacpp")
    info = dict(getattr(xllamacpp, "BUILD_INFO", {}) or {})
    return {"engine": "llama.cpp-server", "kind": "prebuilt", "distribution": "xllamacpp",
            "version": xllamacpp.__version__, "origin": w.get("origin"), "wheel_tags": w.get("tags"),
            "cpu_features": cpu_features(xllamacpp.get_system_info()),
            "build_info": {k: str(v) for k, v in info.items()}}


def build_label(b: dict[str, Any]) -> str:
    """``xllamacpp 2026.10.11549, prebuilt wheel (CPU features: AVX2)``: one build in words."""
    feats = ", ".join(b.get("cpu_features") or []) or "baseline"
    return f"{b['distribution']} {b['version']}, {b.get('origin') or b['kind']} (CPU features: {feats})"


def measured() -> dict[str, Any] | None:
    """The package's copy of ``benchmarks/results/engine_builds.json`` (see the module doc),
    or None when it is missing or unreadable."""
    try:
        return json.loads((resources.files("infbench") / "data" / MEASURED_FILE).read_text())
    except (OSError, ValueError):
        return None


def speedup_text(data: dict[str, Any] | None) -> str | None:
    """``measured 1.3-2.0x faster than the prebuilt server (E2E p50, the 6 cells of the quick
    sweep) on a 2-core AMD EPYC (docs/benchmarks.md)``, from :func:`measured`'s data (the
    geometric mean and the per-cell range when some cell was not faster); None without it."""
    s = (data or {}).get("speedup") or {}
    if not s.get("min"):
        return None
    m = (data or {}).get("machine") or {}
    where = f" on a {m['cores']}-core {m['cpu']}" if m.get("cores") and m.get("cpu") else ""
    cells = f"the {s.get('cells', '?')} cells of the quick sweep"
    if s["min"] < 1:  # not faster everywhere: say so, with the geometric mean
        return (f"measured {s['geomean']:.1f}x as fast as the prebuilt server on the geometric mean (E2E p50 ratio "
                f"{s['min']:.2f}-{s['max']:.2f} over {cells}){where} (docs/benchmarks.md)")
    span = f"{s['min']:.1f}x" if round(s["min"], 1) == round(s["max"], 1) else f"{s['min']:.1f}-{s['max']:.1f}x"
    return f"measured {span} faster than the prebuilt server (E2E p50, {cells}){where} (docs/benchmarks.md)"


def compile_text(data: dict[str, Any] | None) -> str | None:
    """``compiles in about 4 min (2 cores)``: the measured compile time of the install command
    (:data:`LLAMA_CPP_INSTALL`), from :func:`measured`'s data; None without it."""
    c = ((data or {}).get("compile") or {}).get("after") or {}
    if not c.get("s"):
        return None
    cores = ((data or {}).get("machine") or {}).get("cores")
    return f"compiles in about {max(1, round(c['s'] / 60))} min" + (f" ({cores} cores)" if cores else "")


def upgrade_note(data: dict[str, Any] | None = None) -> str:
    """What the compiled build would add and how to get it, one line:
    ``llama.cpp compiled for this CPU: measured 1.3-2.0x faster ... ; install: CMAKE_ARGS=...
    pip install 'infbench[llamacpp]' (compiles in about 4 min, 2 cores)``. ``data``: the
    measured figures (default: :func:`measured`); without them the line has no figure."""
    data = measured() if data is None else data
    speed = speedup_text(data)
    comp = compile_text(data)
    return ("llama.cpp compiled for this CPU" + (f": {speed}" if speed else "") + f"; install: {LLAMA_CPP_INSTALL}"
            + (f" ({comp})" if comp else ""))


def annotate(device: Any, supports: list[Any]) -> None:
    """Say which llama.cpp build each CPU candidate is, in place: a usable ``llama.cpp`` or
    ``llama.cpp-server`` gets its build (:func:`build_label`) as its reason; a ``llama.cpp``
    that is not installed gets the measured speed-up as its reason and the compile command
    with its measured time as its fix (:func:`upgrade_note`). Other devices and engines are
    left as they are. ``supports``: :class:`~infbench.engines.availability.EngineSupport`
    items. Never raises."""
    if getattr(device, "vendor", None) != "cpu":
        return
    for s in supports:
        if s.where != "in-process":
            continue
        try:
            if s.engine == "llama.cpp" and s.usable:
                s.reason = build_label(llama_cpp_build())
            elif s.engine == "llama.cpp-server" and s.usable and s.reason.startswith("xllamacpp"):
                s.reason = build_label(xllamacpp_build())  # not a configured llama-server binary's own reason
            elif s.engine == "llama.cpp" and s.status == MISSING:
                data = measured()
                speed = speedup_text(data)
                comp = compile_text(data)
                s.reason = f"{s.reason}: llama.cpp compiled for this CPU" + (f", {speed}" if speed else "")
                s.fix = LLAMA_CPP_INSTALL + (f" ({comp})" if comp else "")
        except Exception:  # noqa: BLE001 - a description must never break detection
            continue
