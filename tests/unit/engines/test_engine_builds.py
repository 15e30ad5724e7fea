"""Issue 25: the CPU's default sweep from a plain install (compiled llama.cpp, then the prebuilt
server, then the CPU image), the same workload grid whichever runs it, the build of each in
words, and the upgrade note with the measured figures read from the packaged JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from infbench.engines import availability as av
from infbench.engines import builds
from infbench.execution.default_sweep import default_sweep
from infbench.libs import llama as llama_lib
from infbench.plan import PRESETS, plan
from infbench.plan.sweeps import build_sweep

ROOT = Path(__file__).resolve().parents[3]
#: A stand-in of benchmarks/results/engine_builds.json (the figures are made up for the test).
DATA = {"machine": {"cpu": "Test CPU 9000", "cores": 2},
        "speedup": {"min": 1.314, "max": 2.046, "geomean": 1.6, "cells": 6},
        "compile": {"before": {"s": 331.0}, "after": {"s": 250.0}}}


def without(monkeypatch, *modules):
    """Make ``modules`` look not installed to the engine registry (EngineSpec.missing)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a))


@pytest.fixture
def data(monkeypatch):
    monkeypatch.setattr(builds, "measured", lambda: DATA)


@pytest.fixture
def cpu_image(monkeypatch):
    """The CPU worker image as built and answering (no Docker engine needed)."""
    import infbench.execution.default_sweep as ds

    def image(pm, device, engine, runtime=None):
        return av.EngineSupport(engine, av.USABLE, "built", where="docker image infbench/cpu-llamacpp:x")

    monkeypatch.setattr(ds, "image_support", image)


def test_cpu_features_from_system_info():
    info = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
            "AVX512 = 1 | AVX512_VBMI = 0 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
    assert builds.cpu_features(info) == ["AVX_VNNI", "AVX2", "AVX512"]
    assert builds.cpu_features("CPU : NEON = 1 | ARM_FMA = 1 | SVE = 0 |") == ["NEON", "ARM_FMA"]


def test_builds_describe_themselves():
    x = builds.xllamacpp_build()
    assert x["kind"] == "prebuilt" and x["distribution"] == "xllamacpp" and x["version"]
    assert x["origin"] == "prebuilt wheel" and any("manylinux" in t for t in x["wheel_tags"])
    assert "AVX2" in x["cpu_features"] or "NEON" in x["cpu_features"]
    c = builds.llama_cpp_build()
    assert c["kind"] == "compiled" and c["distribution"] == "llama-cpp-python"
    assert builds.build_label(x).startswith(f"xllamacpp {x['version']}, prebuilt wheel (CPU features: ")


def test_upgrade_note_reads_the_measured_figures():
    note = builds.upgrade_note(DATA)
    assert "measured 1.3-2.0x faster than the prebuilt server (E2E p50, the 6 cells of the quick sweep) on a " \
           "2-core Test CPU 9000 (docs/benchmarks.md)" in note
    assert note.endswith(f"install: {builds.LLAMA_CPP_INSTALL} (compiles in about 4 min (2 cores))")
    assert "-DLLAVA_BUILD=OFF" in builds.LLAMA_CPP_INSTALL and "infbench[llamacpp]" in builds.LLAMA_CPP_INSTALL
    mixed = builds.speedup_text({"speedup": {"min": 0.8, "max": 2.5, "geomean": 1.4, "cells": 6}})
    assert mixed == ("measured 1.4x as fast as the prebuilt server on the geometric mean (E2E p50 ratio 0.80-2.50 "
                     "over the 6 cells of the quick sweep) (docs/benchmarks.md)")
    # no figures: the command alone, no number typed anywhere
    bare = builds.upgrade_note({})
    assert "measured" not in bare and "min" not in bare and builds.LLAMA_CPP_INSTALL in bare


def test_cpu_prefers_compiled_then_prebuilt_then_image(pm, cpu, cpu_image, data):
    d = default_sweep(pm, cpu)
    assert [(c.engine, c.where.split()[0]) for c in d.candidates] == [
        ("llama.cpp", "in-process"), ("llama.cpp-server", "in-process"), ("llama.cpp", "docker")]
    assert d.chosen is d.candidates[0] and d.fields["engines"] == ["llama.cpp"] and d.executor("auto") == "auto"
    assert d.chosen.reason.startswith("llama-cpp-python ") and "compiled" not in d.chosen.reason.split(",")[0]
    assert d.better_missing() == [] and d.provenance()["engine"] == "llama.cpp"


def test_plain_install_runs_the_prebuilt_server_and_says_what_compiling_adds(pm, cpu, cpu_image, data,
                                                                             monkeypatch):
    compiled = plan(build_sweep(None, None, base={**PRESETS["quick"]}), cpu, pm).cells
    without(monkeypatch, "llama_cpp")
    d = default_sweep(pm, cpu)
    assert d.chosen.engine == "llama.cpp-server" and d.fields["engines"] == ["llama.cpp-server"]
    assert d.chosen.reason.startswith("xllamacpp ") and "prebuilt wheel" in d.chosen.reason
    assert "number 2 in the cpu plugin's order" in d.why() and d.executor("auto") == "auto"
    [missing] = d.better_missing()
    assert missing.engine == "llama.cpp" and missing.status == av.MISSING
    assert missing.reason == ("needs llama_cpp: llama.cpp compiled for this CPU, measured 1.3-2.0x faster than the "
                              "prebuilt server (E2E p50, the 6 cells of the quick sweep) on a 2-core Test CPU 9000 "
                              "(docs/benchmarks.md)")
    assert missing.fix == f"{builds.LLAMA_CPP_INSTALL} (compiles in about 4 min (2 cores))"
    prov = d.provenance()
    assert prov["engine"] == "llama.cpp-server" and prov["build"] == d.chosen.reason
    # the same workload grid as the compiled build's: only the engine (and its serving-mode batch load) differ
    server = plan(build_sweep(None, None, base=d.fields), cpu, pm).cells
    assert len(server) == len(compiled) == 6

    def grid(cells):
        return sorted((c.model, c.dtype, c.batch, c.input_len, c.output_len, c.seed, c.warmup) for c in cells)

    assert grid(server) == grid(compiled)
    assert {c.engine for c in server} == {"llama.cpp-server"} and all(c.load.mode == "batch" for c in server)


def test_neither_build_installed_falls_back_to_the_cpu_image(pm, cpu, cpu_image, data, monkeypatch):
    without(monkeypatch, "llama_cpp", "xllamacpp")
    d = default_sweep(pm, cpu)
    assert d.chosen.where.startswith("docker image") and d.chosen.engine == "llama.cpp"
    assert d.executor("auto") == "container" and d.executor("inprocess") == "inprocess"
    assert [c.engine for c in d.better_missing()] == ["llama.cpp", "llama.cpp-server"]
    # the image runs the compiled llama.cpp: the same cells (ids) as in this process
    assert d.fields["engines"] == ["llama.cpp"] == PRESETS["quick"]["engines"]


def test_existing_quick_cell_ids_are_unchanged(pm, cpu):
    """The quick preset still plans llama.cpp cells with the same spec (ids of existing stores)."""
    cells = plan(build_sweep("quick", None), cpu, pm).cells
    assert [c.spec() for c in cells][0] == {"model": "smollm2-135m", "engine": "llama.cpp", "dtype": "f16",
                                            "batch": 1, "input_len": 128, "output_len": 64,
                                            "tensor_parallel_size": 1, "seed": 0}


def test_packaged_figures_are_the_benchmark_results():
    """The JSON shipped with the package is benchmarks/results/engine_builds.json, unedited."""
    shipped = ROOT / "core" / "infbench" / "data" / builds.MEASURED_FILE
    bench = ROOT / "benchmarks" / "results" / builds.MEASURED_FILE
    assert json.loads(shipped.read_text()) == json.loads(bench.read_text())
    assert builds.measured() == json.loads(bench.read_text())


def test_compare_pairs_the_two_builds_of_the_default_sweep():
    """`infbench compare PREBUILT_RUN COMPILED_RUN` pairs the same workload on the two builds
    (llama.cpp-server's batch-mode load and llama.cpp's in-process batch), never two loads."""
    from infbench.report.compare import compare_rows
    from tests.unit.report.test_report_data import stored

    def cell(engine, load, tput, h):
        r = stored(h, tput=tput, spec_hash=h)
        return r.replace(spec={**r.spec, "engine": engine, "load": load, "model": "smollm2-135m", "dtype": "f16"})

    batch = {"mode": "batch", "burstiness": 1.0}
    a = [cell("llama.cpp-server", batch, 50.0, "s1"), cell("llama.cpp-server", {"mode": "concurrency",
                                                                                  "concurrency": 4}, 40.0, "s2")]
    b = [cell("llama.cpp", None, 100.0, "c1")]
    res = compare_rows(a, b)
    [p] = res["pairs"]
    assert p["ratio"]["output_tok_s"] == 2.0 and " vs llama.cpp" in p["label"]
    assert res["only_a"] == 1 and res["only_b"] == 0


def test_setup_pyproject_and_readme_build_llama_cpp_with_infbench_flags():
    def flat(text):
        return " ".join(text.replace("\\\n", "").split())

    want = f'CMAKE_ARGS="{llama_lib.LLAMA_CPP_CMAKE_ARGS}"'
    assert want in flat((ROOT / "scripts" / "llama_cpp_python.sh").read_text())  # setup.sh runs it
    assert want in flat((ROOT / "docs" / "guide.md").read_text())  # the README links the guide
    py = flat((ROOT / "pyproject.toml").read_text().replace("#", ""))
    assert all(f in py for f in llama_lib.LLAMA_CPP_CMAKE_ARGS.split())
