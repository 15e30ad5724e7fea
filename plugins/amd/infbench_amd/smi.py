"""AMD GPU access through the ``amdsmi`` Python binding, or the ``amd-smi`` CLI's JSON.

Sources: ROCm AMD SMI Python API reference (``amdsmi_get_gpu_asic_info``,
``amdsmi_get_gpu_vram_info`` [vram_size in MB], ``amdsmi_get_gpu_driver_info``,
``amdsmi_get_energy_count`` [accumulator x counter_resolution = uJ],
``amdsmi_get_power_info`` [socket_power in W]; telemetry: ``amdsmi_get_gpu_activity``
[gfx_activity, umc_activity in %], ``amdsmi_get_clock_info`` [``clk`` in MHz, ``cur_clk``
before ROCm 6.1], ``amdsmi_get_temp_metric`` [C], ``amdsmi_get_gpu_metrics_info``
[``throttle_status``]) and the amd-smi CLI reference (``amd-smi static --json``,
``amd-smi metric --power --energy --usage --json``; values are ``{"value": v, "unit": u}``
objects, ROCm 6.x prints a list of GPUs, ROCm 7 wraps it in ``{"gpu_data": [...]}``).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from collections import defaultdict
from typing import Any

from infbench.plugin import ChannelReading, DeviceInfo, PowerReading, PowerSampler, now_ns

#: Energy units amd-smi prints -> J.
ENERGY_UNITS = {"j": 1.0, "mj": 1e-3, "uj": 1e-6, "µj": 1e-6, "kj": 1e3}
#: MB/MiB/GB in amd-smi memory fields -> bytes (amd-smi's "MB" are MiB).
MEMORY_UNITS = {"mb": 2**20, "mib": 2**20, "gb": 2**30, "gib": 2**30, "b": 1, "kb": 2**10}


class SmiUnavailable(Exception):
    """Neither the amdsmi library nor the amd-smi CLI can be used; the message says why."""


def load_amdsmi() -> Any:
    """Import ``amdsmi`` and ``amdsmi_init()`` (GPUs only).

    The binding prints to stdout and raises KeyError when libamd_smi.so is missing; both
    are contained here.

    Raises:
        SmiUnavailable: the binding or its library is missing, or init failed.
    """
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            import amdsmi
    except Exception as exc:  # noqa: BLE001 - ImportError, or KeyError('libamd_smi.so')
        raise SmiUnavailable(f"amdsmi not usable: {type(exc).__name__}: {exc} {buf.getvalue().strip()}") from exc
    try:
        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception as exc:  # noqa: BLE001 - AmdSmiLibraryException (driver not loaded)
        raise SmiUnavailable(f"amdsmi_init failed: {exc}") from exc
    return amdsmi


def value_of(v: Any) -> tuple[float | None, str | None]:
    """``(number, unit)`` from an amd-smi field: ``{"value": 90, "unit": "W"}``, a bare
    number, or ``"N/A"`` (-> ``(None, None)``)."""
    if isinstance(v, dict):
        num, unit = v.get("value"), v.get("unit")
    else:
        num, unit = v, None
    try:
        return float(num), unit
    except (TypeError, ValueError):
        return None, None


def gpu_list(doc: Any) -> list[dict[str, Any]]:
    """The per-GPU entries of an amd-smi JSON document (list, or ``{"gpu_data": [...]}``)."""
    if isinstance(doc, dict):
        doc = doc.get("gpu_data", [])
    if not isinstance(doc, list):
        raise ValueError("amd-smi JSON is neither a list of GPUs nor {'gpu_data': [...]}")
    return [g for g in doc if isinstance(g, dict)]


def parse_json_output(text: str) -> Any:
    """amd-smi's JSON, skipping warning lines it may print before it (e.g. "WARNING: User is
    missing the following required groups: render, video").

    Raises:
        ValueError: no JSON document in ``text``.
    """
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        raise ValueError(f"no JSON in amd-smi output: {text.strip()[:80]!r}")
    return json.loads(text[min(starts):])


def groups_from_static(doc: Any, driver_hint: str | None = None) -> list[DeviceInfo]:
    """Device groups from ``amd-smi static --json`` (grouped by market name and VRAM).

    Raises:
        ValueError: the document has no GPU entries.
    """
    gpus = gpu_list(doc)
    if not gpus:
        raise ValueError("amd-smi static --json lists no GPU")
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    for g in gpus:
        asic = g.get("asic", {})
        name = str(asic.get("market_name") or "AMD GPU")
        size, unit = value_of(g.get("vram", {}).get("size"))
        mem = int(size * MEMORY_UNITS.get((unit or "MB").lower(), 2**20)) if size else None
        drv = g.get("driver", {})
        groups[(name, mem)].append({
            "index": int(g.get("gpu", len(groups))), "bdf": g.get("bus", {}).get("bdf"),
            "gfx": asic.get("target_graphics_version"), "driver": drv.get("version") or driver_hint,
            "uuid": g.get("uuid") or asic.get("asic_serial"),
        })
    return [_group(name, mem, gs) for (name, mem), gs in groups.items()]


def _group(name: str, mem: int | None, gs: list[dict[str, Any]]) -> DeviceInfo:
    return DeviceInfo(vendor="amd", kind="gpu", model=name, count=len(gs), memory_bytes=mem, driver=gs[0]["driver"],
                      pci_ids=[g["bdf"] for g in gs if g["bdf"]],
                      properties={"indices": [g["index"] for g in gs], "gfx_version": gs[0]["gfx"],
                                  "uuids": [g["uuid"] for g in gs if g["uuid"]]})


def groups_from_amdsmi(amdsmi: Any) -> list[DeviceInfo]:
    """Device groups from the amdsmi library (same grouping as :func:`groups_from_static`)."""
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
        asic = amdsmi.amdsmi_get_gpu_asic_info(h)
        vram = amdsmi.amdsmi_get_gpu_vram_info(h)
        mem = int(vram["vram_size"]) * 2**20 if str(vram.get("vram_size", "N/A")).isdigit() else None
        drv = amdsmi.amdsmi_get_gpu_driver_info(h)
        groups[(str(asic.get("market_name")), mem)].append({
            "index": i, "bdf": amdsmi.amdsmi_get_gpu_device_bdf(h), "gfx": asic.get("target_graphics_version"),
            "driver": drv.get("driver_version"), "uuid": amdsmi.amdsmi_get_gpu_device_uuid(h)})
    return [_group(name, mem, gs) for (name, mem), gs in groups.items()]


def readings_from_metric(doc: Any, t_ns: int, indices: list[int] | None = None) -> list[PowerReading]:
    """Power (W) and cumulative energy (J) per GPU from ``amd-smi metric --power --energy --json``.

    ``power.socket_power`` is preferred, then ``current_socket_power`` and
    ``average_socket_power``; ``energy.total_energy_consumption`` is converted by its unit.
    ``device_index`` is the position in ``indices`` (the group's GPUs), others skipped.
    """
    out = []
    for g in gpu_list(doc):
        idx = int(g.get("gpu", 0))
        if indices is not None and idx not in indices:
            continue
        pw = g.get("power", {}) if isinstance(g.get("power"), dict) else {}
        power = None
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            power, _ = value_of(pw.get(key))
            if power is not None:
                break
        en = g.get("energy", {}) if isinstance(g.get("energy"), dict) else {}
        e, unit = value_of(en.get("total_energy_consumption"))
        energy = e * ENERGY_UNITS.get((unit or "J").lower(), 1.0) if e is not None else None
        out.append(PowerReading(t_ns=t_ns, device_index=indices.index(idx) if indices is not None else idx,
                                power_w=power, energy_j=energy))
    return out


def channels_from_metric(doc: Any, t_ns: int, indices: list[int] | None = None) -> list[ChannelReading]:
    """Telemetry per GPU from ``amd-smi metric --usage --power --json``: ``util_pct``
    (``usage.gfx_activity``), ``mem_util_pct`` (``usage.umc_activity``), and throttle
    reason ``throttled`` when ``power.throttle_status`` says so (``THROTTLED``; the CLI
    names no cause). ``device_index`` as in :func:`readings_from_metric`."""
    out = []
    for g in gpu_list(doc):
        idx = int(g.get("gpu", 0))
        if indices is not None and idx not in indices:
            continue
        usage = g.get("usage") if isinstance(g.get("usage"), dict) else {}
        values = {}
        for key, name in (("gfx_activity", "util_pct"), ("umc_activity", "mem_util_pct")):
            v, _ = value_of(usage.get(key))
            if v is not None:
                values[name] = v
        pw = g.get("power") if isinstance(g.get("power"), dict) else {}
        status = str(pw.get("throttle_status", "")).strip().upper()
        throttle = ["throttled"] if status in ("THROTTLED", "TRUE", "1") else []
        out.append(ChannelReading(t_ns=t_ns, device_index=indices.index(idx) if indices is not None else idx,
                                  values=values, throttle=throttle))
    return out


def channels_from_amdsmi(amdsmi: Any, handle: Any, t_ns: int, device_index: int) -> ChannelReading:
    """One GPU's telemetry through the amdsmi library (see the module doc for the calls);
    a query the GPU does not support, or that answers ``N/A``, is left out."""
    values: dict[str, float] = {}
    throttle: list[str] = []

    def put(name: str, v: Any) -> None:
        num, _ = value_of(v)
        if num is not None:
            values[name] = num

    with contextlib.suppress(Exception):
        act = amdsmi.amdsmi_get_gpu_activity(handle)
        put("util_pct", act.get("gfx_activity"))
        put("mem_util_pct", act.get("umc_activity"))
    for name, kind in (("clock_mhz", "GFX"), ("mem_clock_mhz", "MEM")):
        with contextlib.suppress(Exception):
            clk = amdsmi.amdsmi_get_clock_info(handle, getattr(amdsmi.AmdSmiClkType, kind))
            put(name, clk.get("clk", clk.get("cur_clk")))
    with contextlib.suppress(Exception):
        put("temp_c", amdsmi.amdsmi_get_temp_metric(handle, amdsmi.AmdSmiTemperatureType.HOTSPOT,
                                                    amdsmi.AmdSmiTemperatureMetric.CURRENT))
    with contextlib.suppress(Exception):
        if amdsmi.amdsmi_get_gpu_metrics_info(handle).get("throttle_status") in (True, 1):
            throttle = ["throttled"]
    return ChannelReading(t_ns=t_ns, device_index=device_index, values=values, throttle=throttle)


def energy_j_from_count(count: dict[str, Any]) -> float:
    """J from ``amdsmi_get_energy_count``: accumulator (``energy_accumulator``; ``power``
    before ROCm 6.1) x ``counter_resolution`` (uJ per tick) / 1e6."""
    acc = count.get("energy_accumulator", count.get("power"))
    return float(acc) * float(count["counter_resolution"]) / 1e6


def power_w_from_info(info: dict[str, Any]) -> float | None:
    """W from ``amdsmi_get_power_info``: ``socket_power`` (ROCm 7), else
    ``current_socket_power`` (MI300), else ``average_socket_power``; "N/A" skipped."""
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        v, _ = value_of(info.get(key))
        if v is not None and v < 0xFFFF:  # amdsmi reports unsupported as max uint16/N/A
            return v
    return None


class AmdSmiSampler(PowerSampler):
    """Energy counter and socket power per GPU through the amdsmi library.

    Args:
        amdsmi: the initialised binding.
        indices: processor indices of the group's GPUs.
    """

    name = "amdsmi-energy"
    source = "energy_counter"

    def __init__(self, amdsmi: Any, indices: list[int]):
        self.amdsmi = amdsmi
        handles = amdsmi.amdsmi_get_processor_handles()
        self.handles = [handles[i] for i in indices]

    def read(self) -> list[PowerReading]:
        """One reading per GPU: counter energy in J and socket power in W."""
        out = []
        for i, h in enumerate(self.handles):
            t = now_ns()
            e = energy_j_from_count(self.amdsmi.amdsmi_get_energy_count(h))
            p = power_w_from_info(self.amdsmi.amdsmi_get_power_info(h))
            out.append(PowerReading(t_ns=t, device_index=i, energy_j=e, power_w=p))
        return out

    def read_channels(self) -> list[ChannelReading]:
        """One telemetry reading per GPU (:func:`channels_from_amdsmi`; contract 1.5)."""
        return [channels_from_amdsmi(self.amdsmi, h, now_ns(), i) for i, h in enumerate(self.handles)]

    def close(self) -> None:
        """``amdsmi_shut_down``."""
        with contextlib.suppress(Exception):
            self.amdsmi.amdsmi_shut_down()


class AmdSmiCliSampler(PowerSampler):
    """The same readings from ``amd-smi metric --power --energy --json`` (one call per
    sample; the CLI takes hundreds of ms, so the effective rate is below 10 Hz and the
    energy counter carries the accuracy).

    Args:
        indices: GPU indices of the group.
        exe: the amd-smi executable.
    """

    name = "amd-smi-cli"
    source = "energy_counter"

    def __init__(self, indices: list[int], exe: str = "amd-smi"):
        self.indices = indices
        self.exe = exe
        self._channels: list[ChannelReading] = []

    def read(self) -> list[PowerReading]:
        """Run amd-smi once (power, energy and usage); readings stamped halfway through the
        call. The same answer's telemetry waits for :meth:`read_channels`.

        Raises:
            subprocess.CalledProcessError, ValueError: amd-smi failed or printed no JSON.
        """
        t0 = now_ns()
        out = subprocess.run([self.exe, "metric", "--power", "--energy", "--usage", "--json"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        t1 = now_ns()
        doc = parse_json_output(out)
        self._channels = channels_from_metric(doc, (t0 + t1) // 2, self.indices)
        return readings_from_metric(doc, (t0 + t1) // 2, self.indices)

    def read_channels(self) -> list[ChannelReading]:
        """The telemetry of the last :meth:`read` (one amd-smi call gives both)."""
        out, self._channels = self._channels, []
        return out


def cli_static(exe: str = "amd-smi") -> Any:
    """``amd-smi static --json`` parsed.

    Raises:
        SmiUnavailable: amd-smi is not on PATH or failed.
    """
    if shutil.which(exe) is None:
        raise SmiUnavailable("neither amdsmi nor the amd-smi CLI is available (install ROCm's amd-smi-lib)")
    try:
        r = subprocess.run([exe, "static", "--json"], capture_output=True, text=True, timeout=30, check=True)
        return parse_json_output(r.stdout)
    except (subprocess.SubprocessError, ValueError) as exc:
        raise SmiUnavailable(f"amd-smi static failed: {exc}") from exc


def precisions_for_gfx(gfx: str | None) -> list[str]:
    """Precision classes by gfx target (CDNA ISA guides; ROCm "Data types and precision support").

    * gfx908 (MI100): fp32, fp16, bf16, int8.
    * gfx90a (MI210/MI250/MI250X): same, no fp8.
    * gfx940/941/942 (MI300A/MI300X/MI325X) and gfx950 (MI350/MI355X): add fp8.
    * unknown: fp32, fp16.
    """
    g = (gfx or "").lower()
    if g.startswith(("gfx94", "gfx95")):
        return ["fp32", "fp16", "bf16", "fp8", "int8", "int4"]
    if g.startswith(("gfx90a", "gfx908")):
        return ["fp32", "fp16", "bf16", "int8", "int4"]
    return ["fp32", "fp16"]
