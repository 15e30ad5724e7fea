"""Device descriptions (:class:`~infbench.data.schema.DeviceSpec`): loading a plugin's
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
from importlib.resources import files
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infbench.contract.manager import PluginManager
from infbench.data.contract import DeviceLimits, as_model
from infbench.data.errors import ConfigError, suggest
from infbench.data.inputs import integer, node_line, number, read_text, strict_yaml_nodes
from infbench.data.schema import DeviceInfo, DeviceSpec

#: Largest device file read (the catalog's files are a few KB).
MAX_DEVICE_FILE_BYTES = 1 << 20
#: What no device can exceed (per package): 1 PiB of memory, 100,000 TB/s of memory
#: bandwidth (a wafer-scale chip's SRAM gives 21,000), 10^7 TFLOP/s, 1 MW, 100 TB/s between
#: devices, 64 devices per package. Every figure is positive: a negative or zero bandwidth
#: is a typo.
PHYSICAL_LIMITS = {"memory_gib": 1e6, "bandwidth_tb_s": 1e5, "tdp_w": 1e6, "link_bandwidth_gb_s": 1e5}
MAX_PEAK_TFLOPS = 1e7
MAX_DEVICES_PER_PACKAGE = 64
#: What every device that runs an LLM exceeds (per package), with why: a figure below its
#: minimum is a typo or a unit slip (``1e-300``, TB/s written as B/s), and predicting from
#: it gives latencies of 10^300 s. The same bounds hold for ``infbench predict --set``.
PHYSICAL_MINIMA: dict[str, tuple[float, str]] = {
    "memory_gib": (1 / 1024, "1 MiB: the smallest zoo model's weights alone (tiny-random-llama) take 2.6 MB"),
    "bandwidth_tb_s": (1e-3, "1 GB/s: one channel of 1999's PC133 SDRAM moved 1.07 GB/s; no memory an LLM runs "
                             "from is slower"),
    "tdp_w": (0.1, "0.1 W: a microcontroller's budget; an accelerator or a CPU package draws more"),
    "link_bandwidth_gb_s": (0.1, "0.1 GB/s: Gigabit Ethernet moves 0.125 GB/s; no device-to-device link is "
                                 "slower"),
}
#: Smallest peak rate of any precision (TFLOP/s): 1 GFLOP/s, one core at 1 GHz doing one
#: FLOP a cycle (a 1990s Pentium's rate); an LLM on less takes minutes per token.
MIN_PEAK_TFLOPS = 1e-3
MIN_PEAK_WHY = "1 GFLOP/s: one core at 1 GHz doing one FLOP a cycle (a 1990s Pentium)"


def load_device_specs(path: str | Path) -> list[DeviceSpec]:
    """Read a ``devices.yaml`` (a list of :class:`DeviceSpec` mappings) as
    :mod:`infbench.data.inputs` reads every file: at most :data:`MAX_DEVICE_FILE_BYTES` of UTF-8
    YAML (no duplicate keys, bounded depth and aliases), every figure a finite positive
    number within :data:`PHYSICAL_LIMITS` and above :data:`PHYSICAL_MINIMA` (peaks within
    :data:`MIN_PEAK_TFLOPS` .. :data:`MAX_PEAK_TFLOPS`).

    Raises:
        ConfigError: an unreadable, binary or malformed file, a file that is not a list,
            or an entry that fails validation (``FILE:LINE: device ID: ...``).
    """
    p = Path(path)
    hint = "a device file is a YAML list of devices (id, name, vendor, bandwidth_tb_s, peak_tflops...); see " \
           "`infbench devices` and docs/roofline.md"
    raw, node = strict_yaml_nodes(read_text(p, "device file", MAX_DEVICE_FILE_BYTES, hint), str(p), hint)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{p}:{node_line(node)}: a device file holds a list of devices, got "
                          f"{type(raw).__name__}", hint=hint)
    out = []
    for i, entry in enumerate(raw):
        item = node.value[i]
        where = f"{p}:{node_line(item)}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: device {i + 1} is a {type(entry).__name__}, not a mapping", hint=hint)
        ident = str(entry.get("id", f"entry {i + 1}"))[:60]
        _check_figures(entry, item, p, ident)
        try:
            out.append(DeviceSpec(**entry))
        except (TypeError, ValidationError) as exc:
            e = exc.errors()[0] if isinstance(exc, ValidationError) else None
            field = str(e["loc"][0]) if e and e["loc"] else None
            why = f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e else str(exc)
            raise ConfigError(f"{p}:{node_line(item, field)}: device {ident}: {why[:300]}", hint=hint) from None
    return out


def _check_figures(entry: dict[str, Any], item: Any, p: Path, ident: str) -> None:
    """Every figure of a device entry finite, positive and within :data:`PHYSICAL_MINIMA` ..
    :data:`PHYSICAL_LIMITS` (peaks within :data:`MIN_PEAK_TFLOPS` .. :data:`MAX_PEAK_TFLOPS`)."""
    for key, hi in PHYSICAL_LIMITS.items():
        if entry.get(key) is not None:
            where = f"{p}:{node_line(item, key)}: device {ident}"
            v = number(entry[key], key, where, 0.0, hi, lo_open=True)
            lo, why = PHYSICAL_MINIMA[key]
            if v < lo:
                raise ConfigError(f"{where}: {key} {v:g} is below {lo:g}, the least any device has ({why})",
                                  hint="check the unit: bandwidth_tb_s is in TB/s, memory_gib in GiB, "
                                       "link_bandwidth_gb_s in GB/s, tdp_w in W")
    peaks = entry.get("peak_tflops")
    if peaks is not None:
        where = f"{p}:{node_line(item, 'peak_tflops')}: device {ident}"
        if not isinstance(peaks, dict):
            raise ConfigError(f"{where}: peak_tflops is a mapping of precision -> TFLOP/s, got "
                              f"{type(peaks).__name__}")
        for prec, v in peaks.items():
            x = number(v, f"peak_tflops.{prec}", where, 0.0, MAX_PEAK_TFLOPS, lo_open=True)
            if x < MIN_PEAK_TFLOPS:
                raise ConfigError(f"{where}: peak_tflops.{prec} {x:g} is below {MIN_PEAK_TFLOPS:g} TFLOP/s, the "
                                  f"least any device has ({MIN_PEAK_WHY})", hint="peak_tflops is in TFLOP/s (int8: "
                                                                                 "TOPS)")
    if "devices_per_package" in entry:
        integer(entry["devices_per_package"], "devices_per_package", f"{p}:{node_line(item, 'devices_per_package')}"
                f": device {ident}", 1, MAX_DEVICES_PER_PACKAGE)


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
    matching its model name (:mod:`infbench.detect.platforms.defaults`), else None.

    Raises:
        ConfigError: a plugin's answer that is not a valid :class:`~infbench.data.contract.DeviceLimits`.
    """
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
    return tuple(load_device_specs(Path(str(files(package) / filename))))
