"""The default engine on an NVIDIA GPU for each installed set (issue 39): vLLM, else llama.cpp's
server built with CUDA (a configured binary that runs, libcuda loading), else transformers with
a static KV cache (compiled), else eager transformers where torch.compile cannot run; read from
the default sweep's JSON (``infbench run --dry-run --json`` prints it as ``default_sweep``), with
stand-in devices and probes (no GPU here)."""

from __future__ import annotations

import json
import stat

import pytest

from infbench import hookimpl
from infbench.data.schema import DeviceInfo
from infbench.engines import availability as av
from infbench.engines import llama_bundle as lb
from infbench.execution.default_sweep import default_sweep

H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", properties={"compute_capability": "9.0"})
CUDA_TORCH = {"version": "2.11.0+cu130", "cuda": "13.0", "hip": None, "cuda_devices": ["NVIDIA H100 80GB HBM3"],
              "xpu_devices": [], "hpu_devices": []}
CUDA_VLLM = {"version": "0.11.0", "distribution": "vllm", "platform": "cuda", "device_type": "cuda"}
CPU_GGML = {"version": "0.3.36", "gpu_offload": False, "backends": ["CPU"],
            "devices": [{"name": "CPU", "description": "AMD EPYC", "type": "cpu"}]}
CPU_XLLAMACPP = {"version": "0.2.0", "devices": [{"name": "CPU", "description": "AMD EPYC", "type": "cpu"}]}
COMPILER = {"compiler": "/usr/bin/cc", "triton": "3.5.0"}
NO_COMPILER = {"compiler": None, "triton": "3.5.0"}


class FakeDetect:
    """An H100 on this CPU-only host."""

    @hookimpl
    def infbench_detect(self):
        return [H100]


@pytest.fixture
def h100(pm, monkeypatch, tmp_path):
    """The plugin manager with a stand-in H100, no worker image, torch with CUDA, vLLM absent,
    the CPU builds of llama-cpp-python and xllamacpp, an empty site file."""
    import infbench.execution.default_sweep as ds

    pm.register(FakeDetect(), name="fakedetect")
    monkeypatch.setattr(ds, "image_support", lambda pm, device, engine, runtime="auto": None)
    monkeypatch.setattr(av, "torch_probe", lambda: CUDA_TORCH)

    def no_vllm():
        raise ImportError("No module named 'vllm'")

    monkeypatch.setattr(av, "vllm_probe", no_vllm)
    monkeypatch.setattr(av, "ggml_probe", lambda: CPU_GGML)
    monkeypatch.setattr(av, "xllamacpp_probe", lambda: CPU_XLLAMACPP)
    monkeypatch.setattr(av, "compile_probe", lambda: COMPILER)
    monkeypatch.setattr(lb, "libcuda_loads", lambda: (True, "libcuda.so.1"))
    site = tmp_path / "site.toml"
    site.write_text("")
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    return pm


def _with_binary(tmp_path, body='echo "version: 7 (abcdef0)"\n'):
    b = tmp_path / "bundle" / "llama-server"
    b.parent.mkdir()
    b.write_text("#!/bin/sh\n" + body)
    b.chmod(b.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "site.toml").write_text(f'[llama_server]\nbinary = "{b}"\n')
    return b


def _dry_run_json(pm):
    return json.loads(json.dumps(default_sweep(pm, H100).to_dict()))


def test_order_on_nvidia(h100):
    d = _dry_run_json(h100)
    assert [c["engine"] for c in d["candidates"]] == ["vllm", "llama.cpp-server", "transformers", "llama.cpp"]


def test_vllm_first_where_installed(h100, monkeypatch, tmp_path):
    monkeypatch.setattr(av, "vllm_probe", lambda: CUDA_VLLM)
    _with_binary(tmp_path)
    d = _dry_run_json(h100)
    assert d["chosen"]["engine"] == "vllm" and d["fields"]["engines"] == ["vllm"]
    assert "engine_args" not in d["fields"] and d["engine_args_note"] is None


def test_llama_cpp_cuda_where_built(h100, tmp_path):
    _with_binary(tmp_path)
    d = _dry_run_json(h100)
    assert d["chosen"]["engine"] == "llama.cpp-server" and d["fields"]["engines"] == ["llama.cpp-server"]
    assert "version: 7 (abcdef0)" in d["why"] and "number 2" in d["why"]
    assert [c["engine"] for c in d["better_missing"]] == ["vllm"]


def test_llama_cpp_cuda_refused_without_libcuda(h100, monkeypatch, tmp_path):
    _with_binary(tmp_path)
    monkeypatch.setattr(lb, "libcuda_loads", lambda: (False, "libcuda.so.1: cannot open shared object file"))
    d = _dry_run_json(h100)
    assert d["chosen"]["engine"] == "transformers"
    server = next(c for c in d["candidates"] if c["engine"] == "llama.cpp-server")
    assert server["status"] != av.USABLE and "libcuda" in server["reason"]


def test_torch_only_gets_the_static_cache(h100):
    d = _dry_run_json(h100)
    assert d["chosen"]["engine"] == "transformers"
    assert d["fields"]["engine_args"] == {"cache_implementation": "static"}
    assert "cache_implementation=static" in d["engine_args_note"] and "static" in d["why"]
    server = next(c for c in d["candidates"] if c["engine"] == "llama.cpp-server")
    assert "without CUDA" in server["reason"]  # the xllamacpp CPU wheel, no binary configured


def test_torch_without_a_compiler_stays_eager_and_says_why(h100, monkeypatch):
    monkeypatch.setattr(av, "compile_probe", lambda: NO_COMPILER)
    d = _dry_run_json(h100)
    assert d["chosen"]["engine"] == "transformers" and "engine_args" not in d["fields"]
    assert "eager" in d["engine_args_note"] and "C compiler" in d["engine_args_note"]
    assert "C compiler" in d["why"]


def test_compile_problem():
    assert av.compile_problem(COMPILER) is None
    assert av.compile_problem({"compiler": None, "triton": None}) == \
        "torch.compile needs a C compiler (cc/gcc) and triton"
