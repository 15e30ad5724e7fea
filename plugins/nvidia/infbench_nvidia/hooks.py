"""Hook implementations of the NVIDIA plugin (contract: :mod:`infbench.contract.hookspecs`)."""

from __future__ import annotations

from infbench.plugin import (
    ContainerSpec,
    DefaultSweepAnswer,
    DeviceBackends,
    DeviceInfo,
    DeviceSpec,
    DeviceState,
    Engine,
    EngineSpec,
    NoPower,
    PowerSampler,
    ServerOptions,
    hookimpl,
    packaged_specs,
)
from infbench_nvidia import __version__
from infbench_nvidia.nvml import (
    NvmlSampler,
    NvmlUnavailable,
    device_groups,
    device_states,
    load_nvml,
    precisions_for_cc,
)
from infbench_nvidia.trtllm import TRTLLM_DTYPES

VENDOR = "nvidia"
#: Images built from this plugin's Dockerfiles (`infbench containers build --vendor nvidia`).
IMAGES = {"vllm": f"infbench/nvidia-vllm:{__version__}", "trtllm": f"infbench/nvidia-trtllm:{__version__}",
          "mii": f"infbench/nvidia-mii:{__version__}", "sglang": f"infbench/nvidia-sglang:{__version__}"}
#: Engine -> image it runs in.
ENGINE_IMAGE = {"vllm": "vllm", "vllm-server": "vllm", "transformers": "vllm", "trtllm-serve": "trtllm",
                "deepspeed-mii": "mii", "deepspeed-mii-server": "mii", "sglang-server": "sglang"}


@hookimpl
def infbench_detect() -> list[DeviceInfo]:
    """NVIDIA GPUs through NVML, grouped by model; ``[]`` without NVML or GPUs."""
    try:
        nvml = load_nvml()
    except NvmlUnavailable:
        return []
    try:
        return device_groups(nvml)
    finally:
        nvml.nvmlShutdown()


@hookimpl
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """Precisions from the group's CUDA compute capability (:func:`precisions_for_cc`)."""
    if device.vendor != VENDOR:
        return None
    cc = str(device.properties.get("compute_capability", "0.0"))
    major, _, minor = cc.partition(".")
    return precisions_for_cc(int(major), int(minor or 0))


@hookimpl
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """:class:`NvmlSampler` over the group's GPUs, or :class:`NoPower` with NVML's reason."""
    if device.vendor != VENDOR:
        return None
    try:
        nvml = load_nvml()
    except NvmlUnavailable as exc:
        return NoPower(str(exc))
    indices = device.properties.get("indices") or list(range(device.count))
    try:
        return NvmlSampler(nvml, indices, module_scope=bool(device.properties.get("grace_hopper")))
    except ValueError as exc:
        return NoPower(f"NVML: {exc}")


@hookimpl
def infbench_device_state(device: DeviceInfo) -> list[DeviceState] | None:
    """Each GPU's persistence mode, clocks, power limit, ECC and MIG (:func:`device_states`);
    None for another vendor's device or without NVML."""
    if device.vendor != VENDOR:
        return None
    try:
        nvml = load_nvml()
    except NvmlUnavailable:
        return None
    try:
        return device_states(nvml, device.properties.get("indices") or list(range(device.count)))
    finally:
        nvml.nvmlShutdown()


def _trtllm(device: DeviceInfo, options: ServerOptions) -> Engine:
    from infbench_nvidia.trtllm import TrtllmServeEngine

    return TrtllmServeEngine(device, options)


@hookimpl
def infbench_engines() -> list[EngineSpec]:
    """vLLM (offline and server), transformers, llama.cpp (CUDA build), DeepSpeed-MII (batch and server) and
    the SGLang server from the core run on NVIDIA GPUs, and TensorRT-LLM's ``trtllm-serve`` comes with this plugin."""
    return [
        EngineSpec("vllm", None, [VENDOR]),
        EngineSpec("vllm-server", None, [VENDOR]),
        EngineSpec("transformers", None, [VENDOR]),
        EngineSpec("llama.cpp", None, [VENDOR]),
        EngineSpec("llama.cpp-server", None, [VENDOR]),
        EngineSpec("deepspeed-mii", None, [VENDOR]),
        EngineSpec("deepspeed-mii-server", None, [VENDOR]),
        EngineSpec("sglang-server", None, [VENDOR]),
        EngineSpec("trtllm-serve", _trtllm, [VENDOR], dict(TRTLLM_DTYPES), modules=["aiohttp", "httpx", "yaml"],
                   commands=["trtllm-serve"],
                   install="run in the TensorRT-LLM image (plugins/nvidia/docker/Dockerfile.trtllm)", serving=True,
                   description="TensorRT-LLM's OpenAI server (trtllm-serve, PyTorch backend), serving mode"),
    ]


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """A100 40/80 GB, H100 SXM, H200, GH200 (``devices.yaml``, datasheet figures)."""
    return list(packaged_specs("infbench_nvidia"))


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """All GPUs through the NVIDIA container toolkit, host IPC (NCCL shared memory) and
    the ulimits TensorRT-LLM's container guide asks for (memlock unlimited, 64 MiB stack)."""
    if device.vendor != VENDOR or engine not in ENGINE_IMAGE:
        return None
    try:
        from docker.types import DeviceRequest, Ulimit

        gpus = DeviceRequest(count=-1, capabilities=[["gpu"]])
        ulimits = [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)]
    except ImportError:  # same wire format as the docker SDK's dict subclasses
        gpus = {"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}
        ulimits = [{"Name": "memlock", "Soft": -1, "Hard": -1}, {"Name": "stack", "Soft": 67108864, "Hard": 67108864}]
    return ContainerSpec(image=IMAGES[ENGINE_IMAGE[engine]], device_requests=[gpus], ipc_mode="host", shm_size="16g",
                         ulimits=ulimits,
                         environment={"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})

#: The builds of the engine libraries that run on NVIDIA GPUs, and the commands installing
#: them (PyTorch's CUDA 12.8 wheels; vLLM's, DeepSpeed-MII's and SGLang's PyPI wheels are CUDA
#: builds; llama-cpp-python's
#: README for GGML_CUDA; xllamacpp's README for its CUDA wheel index). Vulkan builds of
#: ggml run on NVIDIA GPUs too.
BACKENDS = DeviceBackends(
    label="CUDA", torch="cuda", vllm="cuda", ggml=["CUDA", "Vulkan"],
    install={"torch": "pip install torch --index-url https://download.pytorch.org/whl/cu128",
             "vllm": "pip install vllm",
             "deepspeed_mii": "pip install deepspeed-mii requests uvicorn pydantic-settings",
             "sglang": "pip install sglang",
             "llama_cpp": 'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python',
             "xllamacpp": "pip install xllamacpp --force-reinstall --index-url "
                          "https://xorbitsai.github.io/xllamacpp/whl/cu128"})


@hookimpl
def infbench_device_backends(device: DeviceInfo) -> DeviceBackends | None:
    """CUDA: torch's CUDA build, vLLM's ``cuda`` platform, ggml's CUDA (or Vulkan) backend."""
    return BACKENDS if device.vendor == VENDOR else None

@hookimpl
def infbench_default_sweep(device: DeviceInfo) -> DefaultSweepAnswer | None:
    """LLM-Inference-Bench's corner (``lib-corner``) on the fastest engine present: vLLM, else
    llama.cpp's server built with CUDA (``llama.cpp-server`` with a configured binary: issue 39),
    else transformers on CUDA (the core adds the static KV cache where torch.compile runs), else
    llama-cpp-python's CUDA build; bf16 from compute capability 8.0 (A100) on, fp16 before."""
    if device.vendor != VENDOR:
        return None
    bf16 = "bf16" in (infbench_supported_precisions(device) or [])
    return DefaultSweepAnswer(preset="lib-corner", engines=["vllm", "llama.cpp-server", "transformers", "llama.cpp"],
                              dtypes=["bf16" if bf16 else "fp16"])
