"""Hook implementations of the Intel GPU plugin (contract: :mod:`infbench.contract.hookspecs`)."""

from __future__ import annotations

from infbench.plugin import (
    ContainerSpec,
    DefaultSweepAnswer,
    DeviceBackends,
    DeviceInfo,
    DeviceSpec,
    EngineSpec,
    NoPower,
    PowerSampler,
    StreamSampler,
    hookimpl,
    packaged_specs,
)
from infbench_intel import __version__
from infbench_intel.xpusmi import DumpParser, XpuSmiUnavailable, detect_groups, dump_argv, parse_version, run_xpusmi

VENDOR = "intel"
IMAGE = f"infbench/intel-vllm:{__version__}"


@hookimpl
def infbench_detect() -> list[DeviceInfo]:
    """Intel Data Center GPUs from ``xpu-smi discovery``; ``[]`` without xpu-smi."""
    try:
        return detect_groups()
    except (XpuSmiUnavailable, ValueError, KeyError):
        return []


@hookimpl
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """fp16 first (vLLM's preferred dtype on XPU), bf16, fp32, int8 (XMX int8)."""
    if device.vendor != VENDOR:
        return None
    return ["fp16", "bf16", "fp32", "int8"]


@hookimpl
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """A streaming ``xpu-smi dump`` of power (W) and energy (J), 1 s interval."""
    if device.vendor != VENDOR:
        return None
    try:
        version = parse_version(run_xpusmi(["-v"]))
    except (XpuSmiUnavailable, ValueError) as exc:
        return NoPower(f"power unavailable: {exc}")
    ids = device.properties.get("indices") or list(range(device.count))
    return StreamSampler(dump_argv(version, ids), DumpParser(ids), name="xpu-smi-dump", source="energy_counter",
                         start_timeout_s=15.0)


@hookimpl
def infbench_engines() -> list[EngineSpec]:
    """vLLM's XPU build (offline and server), transformers (XPU torch) and llama.cpp (SYCL
    build) run on Intel GPUs."""
    return [EngineSpec(e, None, [VENDOR]) for e in ("vllm", "vllm-server", "transformers", "llama.cpp",
                                                    "llama.cpp-server")]


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """Data Center GPU Max 1550 (``devices.yaml``)."""
    return list(packaged_specs("infbench_intel"))


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """The GPU's DRM nodes (``/dev/dri``) and group ``render``, host IPC (oneCCL)."""
    if device.vendor != VENDOR or engine not in ("vllm", "vllm-server"):
        return None
    return ContainerSpec(image=IMAGE, devices=["/dev/dri:/dev/dri:rwm"], group_add=["render"], ipc_mode="host",
                         shm_size="16g")

#: The builds of the engine libraries that run on Intel Data Center GPUs, and the commands
#: installing them (PyTorch's XPU wheels; vLLM's XPU build comes in this plugin's image, as
#: vLLM publishes no XPU wheel; llama-cpp-python with ggml's SYCL backend, in a oneAPI shell;
#: xllamacpp's Vulkan wheel).
BACKENDS = DeviceBackends(
    label="XPU", torch="xpu", vllm="xpu", ggml=["SYCL", "Vulkan"],
    install={"torch": "pip install torch --index-url https://download.pytorch.org/whl/xpu",
             "vllm": "infbench containers build --vendor intel",
             "llama_cpp": 'source /opt/intel/oneapi/setvars.sh && CMAKE_ARGS="-DGGML_SYCL=on '
                          '-DCMAKE_C_COMPILER=icx -DCMAKE_CXX_COMPILER=icpx" pip install --force-reinstall '
                          '--no-cache-dir llama-cpp-python',
             "xllamacpp": "pip install xllamacpp --force-reinstall --index-url "
                          "https://xorbitsai.github.io/xllamacpp/whl/vulkan"})


@hookimpl
def infbench_device_backends(device: DeviceInfo) -> DeviceBackends | None:
    """XPU: torch's XPU build, vLLM's ``xpu`` platform, ggml's SYCL (or Vulkan) backend."""
    return BACKENDS if device.vendor == VENDOR else None

@hookimpl
def infbench_default_sweep(device: DeviceInfo) -> DefaultSweepAnswer | None:
    """LLM-Inference-Bench's corner (``lib-corner``) on vLLM (XPU), else transformers on XPU
    torch, else llama.cpp's SYCL build; fp16, vLLM's preferred dtype on XPU."""
    if device.vendor != VENDOR:
        return None
    return DefaultSweepAnswer(preset="lib-corner", engines=["vllm", "transformers", "llama.cpp"], dtypes=["fp16"])
