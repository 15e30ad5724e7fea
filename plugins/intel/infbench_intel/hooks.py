"""Hook implementations of the Intel GPU plugin (contract: :mod:`infbench.hookspecs`)."""

from __future__ import annotations

from typing import Any

from infbench.devices import packaged_specs
from infbench.engines.base import EngineSpec
from infbench.hookspecs import hookimpl
from infbench.measure.power import NoPower, PowerSampler, StreamSampler
from infbench.schema import DeviceInfo, DeviceSpec
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
    """vLLM's XPU build runs on Intel GPUs (offline and server)."""
    return [EngineSpec("vllm", None, [VENDOR]), EngineSpec("vllm-server", None, [VENDOR])]


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """Data Center GPU Max 1550 (``devices.yaml``)."""
    return list(packaged_specs("infbench_intel"))


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> dict[str, Any] | None:
    """The GPU's DRM nodes (``/dev/dri``) and group ``render``, host IPC (oneCCL)."""
    if device.vendor != VENDOR or engine not in ("vllm", "vllm-server"):
        return None
    return {"image": IMAGE, "devices": ["/dev/dri:/dev/dri:rwm"], "group_add": ["render"], "ipc_mode": "host",
            "shm_size": "16g"}
