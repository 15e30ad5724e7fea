"""Device descriptions (:class:`~infbench.schema.DeviceSpec`): loading a plugin's
``devices.yaml``, the catalog of every plugin, and matching a detected device to its
description.

A ``devices.yaml`` is a list of DeviceSpec fields::

    - id: h100-sxm
      name: NVIDIA H100 SXM5 80GB
      vendor: nvidia
      match: ["h100 80gb hbm3", "h100 sxm"]
      memory_gib: 80
      bandwidth_tb_s: 3.35
      peak_tflops: {fp32: 66.9, fp16: 989.4, bf16: 989.4, fp8: 1978.9, int8: 1978.9}
      tdp_w: 700
      sources: ["https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"]
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from infbench.errors import ConfigError, suggest
from infbench.plugins import PluginManager
from infbench.schema import DeviceInfo, DeviceSpec


def load_device_specs(path: str | Path) -> list[DeviceSpec]:
    """Read a ``devices.yaml`` (a list of :class:`DeviceSpec` mappings).

    Raises:
        ConfigError: unreadable YAML or an entry that fails validation (its id named).
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text()) or []
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read device descriptions {p}: {exc}") from exc
    out = []
    for i, entry in enumerate(raw):
        try:
            out.append(DeviceSpec(**entry))
        except (TypeError, ValidationError) as exc:
            ident = entry.get("id", f"entry {i}") if isinstance(entry, dict) else f"entry {i}"
            raise ConfigError(f"{p}: device {ident}: {exc}") from exc
    return out


def catalog(pm: PluginManager) -> list[DeviceSpec]:
    """Every plugin's device descriptions (``infbench_device_catalog``), ids unique.

    Raises:
        ConfigError: two plugins describe the same id.
    """
    seen: dict[str, DeviceSpec] = {}
    for specs in pm.hook.infbench_device_catalog():
        for s in specs or []:
            if s.id in seen and seen[s.id] != s:
                raise ConfigError(f"device id {s.id!r} is described twice ({seen[s.id].vendor}, {s.vendor})")
            seen[s.id] = s
    return list(seen.values())


def find_spec(specs: list[DeviceSpec], ident: str) -> DeviceSpec:
    """The description with id ``ident`` (case-insensitive).

    Raises:
        ConfigError: no such id (with the closest ids as a hint).
    """
    by_id = {s.id.lower(): s for s in specs}
    s = by_id.get(ident.lower())
    if s is None:
        raise ConfigError(f"unknown device {ident!r}; described devices: {', '.join(sorted(by_id))}",
                          hint=suggest(ident, by_id) or "see `infbench devices`")
    return s


def match_device(specs: list[DeviceSpec], device: DeviceInfo) -> DeviceSpec | None:
    """The description whose ``match`` substring is the longest one found in the
    device's model name (same vendor only), or None."""
    name = device.model.lower()
    best: tuple[int, DeviceSpec] | None = None
    for s in specs:
        if s.vendor != device.vendor:
            continue
        for m in s.match:
            if m.lower() in name and (best is None or len(m) > best[0]):
                best = (len(m), s)
    return best[1] if best else None


def device_limits(pm: PluginManager, device: DeviceInfo) -> dict | None:
    """Per-device limits of ``device`` as a dict (:meth:`~infbench.data.contract.DeviceLimits.as_info`):
    a plugin's ``infbench_device_info`` answer, else the core's default, the catalog entry
    matching its model name (:mod:`infbench.platforms.defaults`), else None.

    Raises:
        ConfigError: a plugin's answer that is not a valid :class:`~infbench.data.contract.DeviceLimits`.
    """
    from infbench.data.contract import DeviceLimits, as_model

    info = as_model(DeviceLimits, pm.hook.infbench_device_info(device=device), "infbench_device_info")
    return info.as_info() if info is not None else None


@cache
def packaged_specs(package: str, filename: str = "devices.yaml") -> tuple[DeviceSpec, ...]:
    """The device descriptions a plugin package ships as ``filename`` (read once).

    A plugin's ``infbench_device_catalog`` is then one line:
    ``return list(packaged_specs("infbench_nvidia"))``.

    Raises:
        ConfigError: see :func:`load_device_specs`.
    """
    from importlib.resources import files

    return tuple(load_device_specs(Path(str(files(package) / filename))))
