"""Gaudi access through ``pyhlml`` (libhlml.so) or the ``hl-smi`` CLI.

Sources: pyhlml (PyPI ``pyhlml``; ``hlmlDeviceGetPowerUsage`` in mW,
``hlmlDeviceGetTotalEnergyConsumption`` in mJ since the driver loaded) and the Intel
Gaudi documentation, "System Management Tools Reference: hl-smi Utility" (``-Q`` query
fields, ``-f csv[,noheader][,nounits]``, ``-l`` loop in seconds; telemetry fields
``utilization.aip``, ``temperature.aip``, ``clocks.current.soc``), and pyhlml's
``hlmlDeviceGetUtilizationRates`` (%; an int, or a struct with ``aip`` in newer
releases), ``hlmlDeviceGetClockInfo`` (clock type 0 = SOC, MHz),
``hlmlDeviceGetTemperature`` (sensor 0 = on the AIP, C) and
``hlmlDeviceGetCurrentClocksThrottleReasons`` (a reason code).
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import shutil
import subprocess
from collections import defaultdict
from typing import Any

from infbench.plugin import ChannelReading, DeviceInfo, PowerReading, PowerSampler, now_ns

#: hl-smi fields read for detection, in this order.
QUERY_FIELDS = ("index", "name", "bus_id", "driver_version", "memory.total", "uuid")


class HlUnavailable(Exception):
    """Neither libhlml nor hl-smi can be used; the message says why."""


def load_hlml() -> Any:
    """Import ``pyhlml`` and ``hlmlInit()`` (its "Failed to load libhlml" print is contained).

    Raises:
        HlUnavailable: not installed, libhlml.so missing, or init failed.
    """
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            import pyhlml

            pyhlml.hlmlInit()
    except Exception as exc:  # noqa: BLE001 - ImportError or HLMLError
        raise HlUnavailable(f"pyhlml: {type(exc).__name__}: {exc} {buf.getvalue().strip()}".strip()) from exc
    return pyhlml


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def groups_from_hlml(hlml: Any) -> list[DeviceInfo]:
    """Device groups (same name and memory) through pyhlml."""
    driver = _s(hlml.hlmlGetDriverVersion())
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for i in range(hlml.hlmlDeviceGetCount()):
        h = hlml.hlmlDeviceGetHandleByIndex(i)
        name = _s(hlml.hlmlDeviceGetName(h))
        mem = int(hlml.hlmlDeviceGetMemoryInfo(h).total)
        try:
            bus = _s(hlml.hlmlDeviceGetPCIInfo(h).bus_id)
        except Exception:  # noqa: BLE001
            bus = None
        groups[(name, mem)].append({"index": i, "bus": bus, "uuid": _s(hlml.hlmlDeviceGetUUID(h))})
    return [_group(name, mem, driver, gs) for (name, mem), gs in groups.items()]


def _group(name: str, mem: int | None, driver: str | None, gs: list[dict[str, Any]]) -> DeviceInfo:
    return DeviceInfo(vendor="habana", kind="accelerator", model=name, count=len(gs), memory_bytes=mem,
                      driver=driver, pci_ids=[g["bus"] for g in gs if g["bus"]],
                      properties={"indices": [g["index"] for g in gs], "uuids": [g["uuid"] for g in gs if g["uuid"]]})


_UNIT = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)\s*$")
_MEM = {"": 2**20, "mib": 2**20, "mb": 2**20, "gib": 2**30, "gb": 2**30, "kib": 2**10, "b": 1}


def number(field: str) -> tuple[float | None, str]:
    """``(value, unit)`` of an hl-smi CSV field (``"98304 MiB"``, ``"101 W"``, ``"101"``,
    ``"N/A"`` -> ``(None, "")``)."""
    m = _UNIT.match(field)
    return (float(m.group(1)), m.group(2)) if m else (None, "")


def groups_from_query(text: str) -> list[DeviceInfo]:
    """Device groups from ``hl-smi -Q index,name,bus_id,driver_version,memory.total,uuid
    -f csv,noheader[,nounits]`` (memory in MiB with or without its unit).

    Raises:
        ValueError: a row with the wrong number of fields, or no rows.
    """
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    driver = None
    for row in csv.reader(io.StringIO(text)):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(QUERY_FIELDS):
            raise ValueError(f"hl-smi row has {len(row)} fields, expected {len(QUERY_FIELDS)}: {row}")
        idx, name, bus, drv, mem, uuid = (c.strip() for c in row)
        v, unit = number(mem)
        mem_b = int(v * _MEM.get(unit.lower(), 2**20)) if v is not None else None
        driver = drv or driver
        groups[(name, mem_b)].append({"index": int(idx), "bus": bus or None, "uuid": uuid or None})
    if not groups:
        raise ValueError("hl-smi listed no device")
    return [_group(name, mem, driver, gs) for (name, mem), gs in groups.items()]


def query_cli(exe: str = "hl-smi") -> str:
    """Run the detection query.

    Raises:
        HlUnavailable: hl-smi missing or failing.
    """
    if shutil.which(exe) is None:
        raise HlUnavailable("hl-smi is not installed (Intel Gaudi software)")
    try:
        return subprocess.run([exe, "-Q", ",".join(QUERY_FIELDS), "-f", "csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=30, check=True).stdout
    except subprocess.SubprocessError as exc:
        raise HlUnavailable(f"hl-smi failed: {exc}") from exc


#: The streaming query's fields after ``index, power.draw``: telemetry channels (contract 1.5).
TELEMETRY_FIELDS = (("utilization.aip", "util_pct"), ("temperature.aip", "temp_c"), ("clocks.current.soc", "clock_mhz"))


def power_argv(exe: str = "hl-smi", interval_s: int = 1) -> list[str]:
    """The streaming power and telemetry query: ``hl-smi -Q index,power.draw,utilization.aip,
    temperature.aip,clocks.current.soc -f csv,noheader,nounits -l 1``."""
    fields = ",".join(["index", "power.draw", *(f for f, _ in TELEMETRY_FIELDS)])
    return [exe, "-Q", fields, "-f", "csv,noheader,nounits", "-l", str(interval_s)]


class PowerLineParser:
    """Parses ``index, power.draw[, utilization.aip, temperature.aip, clocks.current.soc]``
    lines (numbers with or without units) of the group's devices; the telemetry fields,
    when present, give a :class:`~infbench.data.schema.ChannelReading`.

    Raises (per line):
        ValueError: a line that is not ``index, number[, ...]`` with 2 or 5 fields.
    """

    def __init__(self, indices: list[int]):
        self.indices = indices

    def __call__(self, line: str, t_ns: int) -> list[PowerReading | ChannelReading]:
        """The readings of a device of the group, ``[]`` for others and blank lines."""
        if not line.strip():
            return []
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (2, 2 + len(TELEMETRY_FIELDS)) or not parts[0].isdigit():
            raise ValueError(f"expected 'index, power.draw[, utilization.aip, temperature.aip, "
                             f"clocks.current.soc]', got {line.strip()!r}")
        idx = int(parts[0])
        if idx not in self.indices:
            return []
        i = self.indices.index(idx)
        w, _ = number(parts[1])
        out: list[PowerReading | ChannelReading] = []
        if w is not None:
            out.append(PowerReading(t_ns=t_ns, device_index=i, power_w=w))
        values = {name: v for (_, name), f in zip(TELEMETRY_FIELDS, parts[2:]) if (v := number(f)[0]) is not None}
        if values:
            out.append(ChannelReading(t_ns=t_ns, device_index=i, values=values))
        return out


def hlml_channels(hlml: Any, handle: Any, t_ns: int, device_index: int) -> ChannelReading:
    """One Gaudi's telemetry through pyhlml (see the module doc); a query that fails is
    left out. A non-zero throttle reason code is kept as ``hlml_reason_0x..`` (HLML's code,
    not decoded here)."""
    values: dict[str, float] = {}
    throttle: list[str] = []
    with contextlib.suppress(Exception):
        u = hlml.hlmlDeviceGetUtilizationRates(handle)
        values["util_pct"] = float(getattr(u, "aip", u))
    with contextlib.suppress(Exception):
        values["clock_mhz"] = float(hlml.hlmlDeviceGetClockInfo(handle, 0))
    with contextlib.suppress(Exception):
        values["temp_c"] = float(hlml.hlmlDeviceGetTemperature(handle, getattr(hlml, "HLML_TEMPERATURE_ON_AIP", 0)))
    with contextlib.suppress(Exception):
        code = int(hlml.hlmlDeviceGetCurrentClocksThrottleReasons(handle))
        if code:
            throttle = [f"hlml_reason_0x{code:x}"]
    return ChannelReading(t_ns=t_ns, device_index=device_index, values=values, throttle=throttle)


class HlmlSampler(PowerSampler):
    """Energy (mJ -> J) and power (mW -> W) per Gaudi through pyhlml.

    Args:
        hlml: the initialised ``pyhlml`` module.
        indices: device indices of the group.
    """

    name = "hlml-energy"
    source = "energy_counter"

    def __init__(self, hlml: Any, indices: list[int]):
        self.hlml = hlml
        self.handles = [hlml.hlmlDeviceGetHandleByIndex(i) for i in indices]

    def read(self) -> list[PowerReading]:
        """One reading per device."""
        out = []
        for i, h in enumerate(self.handles):
            t = now_ns()
            out.append(PowerReading(t_ns=t, device_index=i,
                                    energy_j=self.hlml.hlmlDeviceGetTotalEnergyConsumption(h) / 1000.0,
                                    power_w=self.hlml.hlmlDeviceGetPowerUsage(h) / 1000.0))
        return out

    def read_channels(self) -> list[ChannelReading]:
        """One telemetry reading per device (:func:`hlml_channels`; contract 1.5)."""
        return [hlml_channels(self.hlml, h, now_ns(), i) for i, h in enumerate(self.handles)]

    def close(self) -> None:
        """``hlmlShutdown``."""
        with contextlib.suppress(Exception):
            self.hlml.hlmlShutdown()
