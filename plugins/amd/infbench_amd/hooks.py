"""Hook implementations of the AMD plugin (contract: :mod:`infbench.hookspecs`)."""

from __future__ import annotations

from typing import Any

from infbench.devices import packaged_specs
from infbench.engines.base import EngineSpec
from infbench.hookspecs import hookimpl
from infbench.measure.power import NoPower, PowerSampler
from infbench.schema import DeviceInfo, DeviceSpec
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
    """vLLM (ROCm build) offline and server, and llama.cpp (HIP build) run on AMD GPUs."""
    return [EngineSpec(e, None, [VENDOR]) for e in ("vllm", "vllm-server", "llama.cpp", "llama.cpp-server")]


@hookimpl
def infbench_device_catalog() -> list[DeviceSpec]:
    """MI250 (per GCD: 2 per package) and MI300X (``devices.yaml``)."""
    return list(packaged_specs("infbench_amd"))


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> dict[str, Any] | None:
    """ROCm's documented docker flags: /dev/kfd and /dev/dri, group video, host IPC,
    seccomp unconfined (ROCm docs, "Running ROCm Docker containers")."""
    if device.vendor != VENDOR or engine not in ("vllm", "vllm-server"):
        return None
    return {
        "image": IMAGE,
        "devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
        "group_add": ["video"],
        "ipc_mode": "host",
        "shm_size": "16g",
        "security_opt": ["seccomp=unconfined"],
    }
