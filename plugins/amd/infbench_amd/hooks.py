"""Hook implementations of the AMD plugin (contract: :mod:`infbench.contract.hookspecs`)."""

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
    hookimpl,
    packaged_specs,
)
from infbench_amd import __version__
from infbench_amd.smi import (
    AmdSmiCliSampler,
    AmdSmiSampler,
    SmiUnavailable,
    cli_static,
    groups_from_amdsmi,
    groups_from_static,
    load_amdsmi,
    precisions_for_gfx,
)

VENDOR = "amd"
IMAGE = f"infbench/amd-vllm:{__version__}"
#: Engine -> worker image (`infbench containers build --vendor amd`).
ENGINE_IMAGE = {"vllm": IMAGE, "vllm-server": IMAGE, "sglang-server": f"infbench/amd-sglang:{__version__}"}


@hookimpl
def infbench_detect() -> list[DeviceInfo]:
    """AMD GPUs from amdsmi, else from ``amd-smi static --json``; ``[]`` when neither works."""
    try:
        amdsmi = load_amdsmi()
    except SmiUnavailable:
        try:
            return groups_from_static(cli_static())
        except (SmiUnavailable, ValueError):
            return []
    try:
        return groups_from_amdsmi(amdsmi)
    finally:
        amdsmi.amdsmi_shut_down()


@hookimpl
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """Precisions by the group's gfx target (:func:`precisions_for_gfx`)."""
    if device.vendor != VENDOR:
        return None
    return precisions_for_gfx(device.properties.get("gfx_version"))


@hookimpl
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """amdsmi energy counters (with socket power for the core's cross-check), else the
    amd-smi CLI, else :class:`NoPower` with both reasons."""
    if device.vendor != VENDOR:
        return None
    indices = device.properties.get("indices") or list(range(device.count))
    try:
        return AmdSmiSampler(load_amdsmi(), indices)
    except SmiUnavailable as exc:
        lib_reason = str(exc)
    try:
        cli_static()
        return AmdSmiCliSampler(indices)
    except SmiUnavailable as exc:
        return NoPower(f"{lib_reason}; {exc}")


@hookimpl
def infbench_engines() -> list[EngineSpec]:
    """vLLM (ROCm build) offline and server, transformers (ROCm torch), llama.cpp (HIP build) and the
    SGLang server (ROCm build, in this plugin's image) run on AMD GPUs. DeepSpeed-MII does not: it documents
    NVIDIA GPUs only."""
    return [EngineSpec(e, None, [VENDOR]) for e in ("vllm", "vllm-server", "transformers", "llama.cpp",
                                                    "llama.cpp-server", "sglang-server")]


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """MI250 (per GCD: 2 per package) and MI300X (``devices.yaml``)."""
    return list(packaged_specs("infbench_amd"))


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """ROCm's documented docker flags: /dev/kfd and /dev/dri, group video, host IPC,
    seccomp unconfined (ROCm docs, "Running ROCm Docker containers")."""
    if device.vendor != VENDOR or engine not in ENGINE_IMAGE:
        return None
    return ContainerSpec(image=ENGINE_IMAGE[engine], devices=["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
                         group_add=["video"], ipc_mode="host", shm_size="16g", security_opt=["seccomp=unconfined"])

#: The builds of the engine libraries that run on AMD GPUs, and the commands installing them
#: (PyTorch's ROCm 6.4 wheels; vLLM's and SGLang's ROCm builds come in this plugin's images, as
#: their docs recommend Docker on ROCm; llama-cpp-python's README for GGML_HIP; xllamacpp's README
#: for its ROCm wheel index). A HIP build of ggml names its backend ``ROCm``.
BACKENDS = DeviceBackends(
    label="ROCm", torch="hip", vllm="rocm", ggml=["ROCm", "Vulkan"],
    install={"torch": "pip install torch --index-url https://download.pytorch.org/whl/rocm6.4",
             "vllm": "infbench containers build --vendor amd",
             "sglang": "infbench containers build --vendor amd",
             "llama_cpp": 'CMAKE_ARGS="-DGGML_HIP=on" pip install --force-reinstall --no-cache-dir llama-cpp-python',
             "xllamacpp": "pip install xllamacpp --force-reinstall --index-url "
                          "https://xorbitsai.github.io/xllamacpp/whl/rocm-6.4.1"})


@hookimpl
def infbench_device_backends(device: DeviceInfo) -> DeviceBackends | None:
    """ROCm: torch's ROCm (HIP) build, vLLM's ``rocm`` platform, ggml's ROCm (or Vulkan) backend."""
    return BACKENDS if device.vendor == VENDOR else None

@hookimpl
def infbench_default_sweep(device: DeviceInfo) -> DefaultSweepAnswer | None:
    """LLM-Inference-Bench's corner (``lib-corner``) on vLLM (ROCm), else transformers on
    ROCm torch, else llama.cpp's HIP build; bf16 where the gfx target has it (MI100 on)."""
    if device.vendor != VENDOR:
        return None
    bf16 = "bf16" in precisions_for_gfx(device.properties.get("gfx_version"))
    return DefaultSweepAnswer(preset="lib-corner", engines=["vllm", "transformers", "llama.cpp"],
                              dtypes=["bf16" if bf16 else "fp16"])
