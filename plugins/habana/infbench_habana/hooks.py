"""Hook implementations of the Intel Gaudi plugin (contract: :mod:`infbench.contract.hookspecs`)."""

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
from infbench_habana import __version__
from infbench_habana.hl import (
    HlmlSampler,
    HlUnavailable,
    PowerLineParser,
    groups_from_hlml,
    groups_from_query,
    load_hlml,
    power_argv,
    query_cli,
)

VENDOR = "habana"
IMAGE = f"infbench/habana-vllm:{__version__}"
#: Engine -> worker image (`infbench containers build --vendor habana`).
ENGINE_IMAGE = {"vllm": IMAGE, "vllm-server": IMAGE,
                "optimum-habana": f"infbench/habana-optimum-habana:{__version__}"}


@hookimpl
def infbench_detect() -> list[DeviceInfo]:
    """Gaudi devices through pyhlml, else hl-smi; ``[]`` when neither works."""
    try:
        hlml = load_hlml()
    except HlUnavailable:
        try:
            return groups_from_query(query_cli())
        except (HlUnavailable, ValueError):
            return []
    try:
        return groups_from_hlml(hlml)
    finally:
        hlml.hlmlShutdown()


@hookimpl
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """bf16 first (Gaudi's native training/inference type), fp8 on Gaudi2 and Gaudi3
    (HL-2xx / HL-3xx), fp32, fp16."""
    if device.vendor != VENDOR:
        return None
    name = device.model.lower()
    fp8 = any(k in name for k in ("gaudi2", "gaudi3", "hl-2", "hl-3"))
    return ["bf16", *(["fp8"] if fp8 else []), "fp32", "fp16"]


@hookimpl
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """HLML energy counters, else a streaming ``hl-smi`` power query, else :class:`NoPower`."""
    if device.vendor != VENDOR:
        return None
    indices = device.properties.get("indices") or list(range(device.count))
    try:
        return HlmlSampler(load_hlml(), indices)
    except HlUnavailable as exc:
        reason = str(exc)
    try:
        query_cli()
    except HlUnavailable as exc:
        return NoPower(f"power unavailable: {reason}; {exc}")
    return StreamSampler(power_argv(), PowerLineParser(indices), name="hl-smi-power", source="power")


@hookimpl
def infbench_engines() -> list[EngineSpec]:
    """vLLM for Gaudi (HabanaAI's vllm-fork / vllm-gaudi plugin), offline and server, transformers on Gaudi's
    PyTorch, and optimum-habana (Gaudi-adapted transformers: lazy mode, HPU graphs)."""
    return [EngineSpec("vllm", None, [VENDOR]), EngineSpec("vllm-server", None, [VENDOR]),
            EngineSpec("transformers", None, [VENDOR]), EngineSpec("optimum-habana", None, [VENDOR])]


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """Gaudi2 and Gaudi3 (``devices.yaml``)."""
    return list(packaged_specs("infbench_habana"))


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """The Gaudi container runtime (``runtime="habana"``, all devices), SYS_NICE and host
    IPC, as the Gaudi docker guide runs its images."""
    if device.vendor != VENDOR or engine not in ENGINE_IMAGE:
        return None
    # --runtime apptainer: the Gaudi device nodes (habanalabs driver: /dev/accel/accel*)
    return ContainerSpec(image=ENGINE_IMAGE[engine], runtime="habana", cap_add=["SYS_NICE"], ipc_mode="host",
                         shm_size="16g", environment={"HABANA_VISIBLE_DEVICES": "all",
                                                      "OMPI_MCA_btl_vader_single_copy_mechanism": "none"},
                         apptainer_options=["--bind", "/dev/accel"])


#: The builds of the engine libraries that run on Gaudi, and the commands installing them
#: (the Intel Gaudi software installer's PyTorch; vLLM for Gaudi comes in this plugin's
#: image). ggml has no Gaudi backend, so llama.cpp does not run on it.
BACKENDS = DeviceBackends(
    label="HPU", torch="hpu", vllm="hpu", ggml=[],
    install={"torch": "./habanalabs-installer.sh install --type pytorch --venv",
             "vllm": "infbench containers build --vendor habana",
             "optimum_habana": "pip install optimum-habana"})


@hookimpl
def infbench_device_backends(device: DeviceInfo) -> DeviceBackends | None:
    """HPU: Gaudi's PyTorch (habana_frameworks), vLLM's ``hpu`` platform; no ggml backend."""
    return BACKENDS if device.vendor == VENDOR else None

@hookimpl
def infbench_default_sweep(device: DeviceInfo) -> DefaultSweepAnswer | None:
    """LLM-Inference-Bench's corner (``lib-corner``) on vLLM for Gaudi, else transformers on
    Gaudi's PyTorch; bf16, Gaudi's native type."""
    if device.vendor != VENDOR:
        return None
    return DefaultSweepAnswer(preset="lib-corner", engines=["vllm", "transformers"], dtypes=["bf16"])
