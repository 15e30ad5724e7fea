"""Accelerator-first, on this CPU-only host: a plugin that reports an NVIDIA H100 (and one
that reports an AMD MI300X) makes every local engine refuse with a message naming the
device, what would have run instead and the fix, and store no ok cell; `run --dry-run`
names the default sweep's engines and install commands; `detect` shows the engine table.

The stand-in plugin only fakes detection (an entry point found through a dist-info folder
on PYTHONPATH, as pip would install it); everything else (engines, backends, default sweep,
device catalog) comes from the real vendor plugins, and the engines are the real ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infbench import hookimpl
from infbench.data.schema import DeviceInfo, Sweep
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.plan import plan
from infbench.store import Store

pytestmark = pytest.mark.integration

DEVICES = {
    "nvidia": DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=1,
                         memory_bytes=80 * 2**30, properties={"compute_capability": "9.0"}),
    "amd": DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI300X", count=1, memory_bytes=192 * 2**30,
                      properties={"gfx_version": "gfx942"}),
}

PLUGIN = '''"""Reports the device named by INFBENCH_FAKE_GPU (nvidia or amd) on a host without it."""
import os

from infbench import hookimpl
from infbench.data.schema import DeviceInfo

DEVICES = {DEVICES}


@hookimpl
def infbench_detect():
    d = DEVICES.get(os.environ.get("INFBENCH_FAKE_GPU", ""))
    return [DeviceInfo(**d)] if d else []
'''


@pytest.fixture(scope="module")
def fake_plugin_path(tmp_path_factory):
    """A folder holding the stand-in plugin and its dist-info (entry point ``fakegpu``)."""
    root = tmp_path_factory.mktemp("fakegpu")
    devices = {k: d.model_dump() for k, d in DEVICES.items()}
    (root / "infbench_fakegpu.py").write_text(PLUGIN.replace("{DEVICES}", repr(devices)))
    info = root / "infbench_fakegpu-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: infbench-fakegpu\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[infbench]\nfakegpu = infbench_fakegpu\n")
    return str(root)


def cli(vendor: str, path: str, *args: str, store: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "INFBENCH_FAKE_GPU": vendor,
           "PYTHONPATH": path + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args, *(["--store", store] if store else [])],
                          capture_output=True, text=True, env=env, timeout=600)


class FakeDetect:
    def __init__(self, device: DeviceInfo):
        self.device = device

    @hookimpl
    def infbench_detect(self):
        return [self.device]


FIX = {("nvidia", "llama.cpp"): '-DGGML_CUDA=on', ("amd", "llama.cpp"): '-DGGML_HIP=on',
       ("nvidia", "transformers"): "whl/cu128", ("amd", "transformers"): "whl/rocm6.4",
       ("nvidia", "llama.cpp-server"): "xllamacpp/whl/cu128", ("amd", "llama.cpp-server"): "xllamacpp/whl/rocm",
       ("nvidia", "vllm"): "pip install vllm", ("amd", "vllm"): "infbench containers build --vendor amd",
       ("nvidia", "vllm-server"): "pip install vllm", ("amd", "vllm-server"): "infbench containers build --vendor amd"}
VLLM = pytest.mark.vllm


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
@pytest.mark.parametrize("engine", ["llama.cpp", "transformers", "llama.cpp-server",
                                    pytest.param("vllm", marks=VLLM), pytest.param("vllm-server", marks=VLLM)])
def test_every_local_engine_refuses_a_gpu_it_cannot_use(pm, tmp_path, vendor, engine):
    dev = DEVICES[vendor]
    pm.register(FakeDetect(dev), name="fakedetect")
    p = plan(Sweep(models=["tiny-random-llama"], engines=[engine], dtypes=["fp16"], batch=[1, 2], input_len=[16],
                   output_len=[8]), dev, pm)
    store = Store(tmp_path / "s.db")
    s = InProcessExecutor(pm, {}).run(p, store)
    assert not s.ok and len(s.failed) == 2 and store.finished_cell_ids() == set()
    for r in s.failed:
        assert r.error.startswith(f"device check failed: {engine} does not run on {vendor} {dev.model}: "), r.error
        assert "its cells would have run on the CPU. Fix: " in r.error and FIX[(vendor, engine)] in r.error
    assert {r["status"] for r in store.results()} == {"failed"}


def test_the_issue_example_stores_a_failed_cell_with_exit_3(fake_plugin_path, tmp_path):
    """`infbench run --device nvidia --runtime none --engine llama.cpp ...` (the issue's command) stored an ok cell
    labelled H100 before this issue; now the cell is failed with the fix, exit status 3."""
    store = str(tmp_path / "s.db")
    p = cli("nvidia", fake_plugin_path, "run", "--device", "nvidia", "--executor", "inprocess", "--engine", "llama.cpp",
            "--model", "tiny-random-llama", "--batch", "1", "--input-len", "16", "--output-len", "8", "--json",
            store=store)
    assert p.returncode == 3, p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] == 0 and out["failed"] == 1
    (cell,) = out["cells"]
    assert cell["device"]["model"] == "NVIDIA H100 80GB HBM3" and cell["status"] == "failed"
    assert "built without GPU offload" in cell["error"] and 'CMAKE_ARGS="-DGGML_CUDA=on"' in cell["error"]
    assert "llama.cpp cannot run on nvidia here" in p.stderr          # warned before running


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_dry_run_of_the_default_sweep_names_engines_and_install_commands(fake_plugin_path, vendor):
    p = cli(vendor, fake_plugin_path, "run", "--dry-run", "--json")
    assert p.returncode == 2, p.stderr                                  # nothing runs here: refused
    d = json.loads(p.stdout)["default_sweep"]
    assert d["device"] == vendor and d["source"] == vendor and d["chosen"] is None
    assert d["fields"]["models"] == ["llama-3-8b"] and d["fields"]["batch"] == [1, 16, 64]
    engines = [(c["engine"], c["where"].split()[0] if c["where"] != "in-process" else "in-process")
               for c in d["candidates"]]
    # issue 39: on NVIDIA a llama.cpp server built for CUDA comes before transformers
    middle = [("llama.cpp-server", "in-process")] if vendor == "nvidia" else []
    assert engines[1:] == [("vllm", "in-process"), *middle, ("transformers", "in-process"),
                           ("llama.cpp", "in-process")]
    assert engines[0][0] == "vllm" and "image" in d["candidates"][0]["where"]
    fixes = [c["fix"] for c in d["better_missing"]]
    assert f"infbench containers build --vendor {vendor}" in fixes[0]
    assert any(FIX[(vendor, "transformers")] in f for f in fixes) and any(FIX[(vendor, "llama.cpp")] in f
                                                                          for f in fixes)
    by = {c["engine"]: c for c in d["candidates"][1:]}
    gpu = {"nvidia": "CUDA", "amd": "ROCm"}[vendor]
    assert f"has no {gpu}" in by["transformers"]["reason"] and "selected the cpu platform" in by["vllm"]["reason"]
    assert "built without GPU offload" in by["llama.cpp"]["reason"]
    assert "error: no engine of the" in p.stderr and "hint: install one:" in p.stderr
    if vendor == "nvidia":                                              # the text form, once
        text = cli(vendor, fake_plugin_path, "run", "--dry-run")
        assert "engines, best first:" in text.stdout and "install: " in text.stdout and "6 cell(s) on" in text.stdout


def test_bare_run_is_refused_and_stores_nothing(fake_plugin_path, tmp_path):
    store = tmp_path / "s.db"
    p = cli("nvidia", fake_plugin_path, "run", store=str(store))
    assert p.returncode == 2 and "hint: install one:" in p.stderr, p.stderr
    assert not store.exists() or Store(store).results() == []


def test_detect_shows_the_engine_table(fake_plugin_path):
    p = cli("nvidia", fake_plugin_path, "detect")
    assert p.returncode == 0, p.stderr
    assert "Engines on nvidia (NVIDIA H100 80GB HBM3)" in p.stdout and "Engines on cpu" in p.stdout
    assert "installed, no support" in p.stdout and "usable" in p.stdout
    j = json.loads(cli("nvidia", fake_plugin_path, "detect", "--json").stdout)
    nv = {e["engine"]: e for e in j["engines"]["nvidia"]}
    assert nv["transformers"]["status"] == "unsupported" and "has no CUDA" in nv["transformers"]["reason"]
    assert "built without GPU offload" in nv["llama.cpp"]["reason"] and nv["vllm"]["fix"] == "pip install vllm"
    assert nv["trtllm-serve"]["status"] == "not installed"
    assert nv["deepspeed-mii"]["status"] == "not installed" and "deepspeed-mii" in nv["deepspeed-mii"]["fix"]
    assert nv["sglang-server"]["status"] == "not installed" and nv["sglang-server"]["fix"] == "pip install sglang"
    assert "optimum-habana" not in nv
    cpu = {e["engine"]: e for e in j["engines"]["cpu"]}
    assert cpu["llama.cpp"]["status"] == "usable" and cpu["transformers"]["status"] == "usable"
    assert {i["where"].split()[-1] for i in j["images"]["nvidia"]} >= {"infbench/nvidia-vllm:0.1.0"}


def test_find_max_and_perplexity_refuse_a_gpu_they_cannot_use(fake_plugin_path, tmp_path):
    """The scenarios added after the device proof go through the same engine session: a search
    on llama.cpp's server and perplexity on llama.cpp, planned on a stand-in H100, refuse before
    the first request and store nothing ok under the H100 (exit 3, the fix in the error)."""
    from tests.integration.test_real_weights import _smollm2, _text

    store = str(tmp_path / "s.db")
    p = cli("nvidia", fake_plugin_path, "run", "--device", "nvidia", "--engine", "llama.cpp-server", "--model",
            "tiny-random-llama", "--input-len", "16", "--output-len", "4", "--concurrency", "1", "--num-requests", "2",
            "--find-max", "concurrency", "--slo-ttft-ms", "60000", "--json", store=store)
    assert p.returncode == 3, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["find_max"]["knee"] is None and "nvidia NVIDIA H100" in out["find_max"]["stopped"]
    q = cli("nvidia", fake_plugin_path, "perplexity", "--device", "nvidia", "--model", str(_smollm2()), "--text",
            str(_text()), "--n-ctx", "64", "--chunks", "1", "--json", store=store)
    assert q.returncode == 3, q.stdout + q.stderr
    (row,) = json.loads(q.stdout)
    assert row["status"] == "failed" and "nvidia NVIDIA H100" in row["error"] and "-DGGML_CUDA=on" in row["error"]
    s = Store(store, readonly=True)
    cells = s.results(all_attempts=True)
    assert cells and all(c["status"] == "failed" and c["device"]["vendor"] == "nvidia" for c in cells)
    from infbench.store.quality import quality_results

    assert [r["status"] for r in quality_results(s, all_attempts=True)] == ["failed"]
