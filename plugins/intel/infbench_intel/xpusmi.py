"""Intel XPU Manager's ``xpu-smi``: discovery JSON, dump CSV, version.

Sources: XPU Manager "XPU System Management Interface User Guide" (1.x: ``discovery -j``
with ``device_list``; ``dump -d 0 -m 0,1,2 -i 1`` printing ``Timestamp, DeviceId, GPU
Utilization (%), GPU Power (W), ...``; metric ids 1 = GPU Power (W), 8 = GPU Energy
Consumed (J); telemetry ids 0 = GPU Utilization (%) [2.x header: "Average % utilization
of all GPU Engines"], 2 = GPU Frequency (MHz), 3 = GPU Core Temperature (Celsius Degree),
5 = GPU Memory Utilization (%)) and the 2.0 reference (``dump --metrics`` with the
legacy numeric ids, ``--interval`` in seconds, ``-d`` taking comma-separated ids).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import defaultdict
from typing import Any

from infbench.plugin import ChannelReading, DeviceInfo, PowerReading

#: The dump metrics infbench reads: 1 = GPU Power (W), 8 = GPU Energy Consumed (J).
POWER_METRIC, ENERGY_METRIC = 1, 8
#: Telemetry metrics streamed with them (contract 1.5): 0 = utilisation, 2 = frequency,
#: 3 = core temperature, 5 = memory utilisation.
TELEMETRY_METRICS = (0, 2, 3, 5)
#: Dump column headers (lower case, unit included) -> channel name.
CHANNEL_COLUMNS = {"gpu utilization (%)": "util_pct", "average % utilization of all gpu engines": "util_pct",
                   "gpu frequency (mhz)": "clock_mhz", "gpu core temperature (celsius degree)": "temp_c",
                   "gpu memory temperature (celsius degree)": "mem_temp_c",
                   "gpu memory utilization (%)": "mem_util_pct"}


class XpuSmiUnavailable(Exception):
    """xpu-smi is missing or failed; the message says which."""


def run_xpusmi(args: list[str], exe: str = "xpu-smi", timeout_s: float = 30.0) -> str:
    """Run ``xpu-smi args`` and return its stdout.

    Raises:
        XpuSmiUnavailable: not installed, non-zero exit, or timeout.
    """
    if shutil.which(exe) is None:
        raise XpuSmiUnavailable("xpu-smi is not installed (Intel XPU Manager)")
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise XpuSmiUnavailable(f"xpu-smi {' '.join(args)} failed ({exc.returncode}): {exc.stderr.strip()[:200]}") \
            from exc
    except subprocess.TimeoutExpired as exc:
        raise XpuSmiUnavailable(f"xpu-smi {' '.join(args)} did not answer in {timeout_s} s") from exc


def parse_version(text: str) -> tuple[int, int]:
    """``(major, minor)`` of the CLI from ``xpu-smi -v`` ("CLI:\\n    Version: 1.2.39...").

    Raises:
        ValueError: no version line.
    """
    m = re.search(r"CLI:\s*\n\s*Version:\s*(\d+)\.(\d+)", text) or re.search(r"Version:\s*(\d+)\.(\d+)", text)
    if not m:
        raise ValueError(f"no version in xpu-smi -v output {text.strip()[:80]!r}")
    return int(m.group(1)), int(m.group(2))


def dump_argv(version: tuple[int, int], device_ids: list[int], interval_s: int = 1, exe: str = "xpu-smi") -> list[str]:
    """The ``xpu-smi dump`` command streaming power, energy and telemetry for ``device_ids``.

    1.x: ``-d ID -m 0,1,2,3,5,8 -i 1``; 2.x: ``-d ID[,ID] --metrics 0,1,2,3,5,8 --interval 1``.
    """
    ids = ",".join(str(i) for i in device_ids)
    metrics = ",".join(str(m) for m in sorted((POWER_METRIC, ENERGY_METRIC, *TELEMETRY_METRICS)))
    if version[0] >= 2:
        return [exe, "dump", "-d", ids, "--metrics", metrics, "--interval", str(interval_s)]
    return [exe, "dump", "-d", ids, "-m", metrics, "-i", str(interval_s)]


def _num(s: str) -> float | None:
    s = s.strip()
    try:
        return float(s)
    except ValueError:
        return None  # N/A


class DumpParser:
    """Parses ``xpu-smi dump`` CSV lines as they stream, by header names.

    The header (``Timestamp, DeviceId, GPU Power (W), GPU Energy Consumed (J)``) fixes
    the columns; rows with a ``TileId`` value are per-tile and skipped (the device row
    is the sum of tiles for energy and power). Telemetry columns
    (:data:`CHANNEL_COLUMNS`) give a :class:`~infbench.data.schema.ChannelReading` per row
    ("N/A" left out). Unknown columns are ignored.

    Args:
        device_ids: xpu-smi ids of the group, in device_index order.
    """

    def __init__(self, device_ids: list[int]):
        self.device_ids = device_ids
        self.columns: dict[str, int] | None = None

    def __call__(self, line: str, t_ns: int) -> list[PowerReading | ChannelReading]:
        """Readings of one line: power/energy and telemetry (``[]`` for the header, blank
        lines and tile rows).

        Raises:
            ValueError: a data row before any header, or a row without the device column.
        """
        cells = [c.strip() for c in line.strip().split(",")]
        if not line.strip():
            return []
        if cells[0].lower() == "timestamp":
            self.columns = {}
            for i, c in enumerate(cells):
                lc = c.lower()
                if lc == "deviceid":
                    self.columns["device"] = i
                elif lc == "tileid":
                    self.columns["tile"] = i
                elif "power" in lc and "(w)" in lc:
                    self.columns["power"] = i
                elif "energy" in lc and "(j)" in lc:
                    self.columns["energy"] = i
                elif lc in CHANNEL_COLUMNS:
                    self.columns["ch:" + CHANNEL_COLUMNS[lc]] = i
            if "device" not in self.columns:
                raise ValueError("xpu-smi dump header has no DeviceId column")
            return []
        if self.columns is None:
            if "dump" in line.lower() or "press" in line.lower():  # "Dump data to file ..." notices
                return []
            raise ValueError("xpu-smi dump row before its header")
        cols = self.columns
        if "tile" in cols and len(cells) > cols["tile"] and cells[cols["tile"]]:
            return []
        dev = int(cells[cols["device"]])
        if dev not in self.device_ids:
            return []
        idx = self.device_ids.index(dev)
        power = _num(cells[cols["power"]]) if "power" in cols and len(cells) > cols["power"] else None
        energy = _num(cells[cols["energy"]]) if "energy" in cols and len(cells) > cols["energy"] else None
        out: list[PowerReading | ChannelReading] = []
        if power is not None or energy is not None:
            out.append(PowerReading(t_ns=t_ns, device_index=idx, power_w=power, energy_j=energy))
        values = {k[3:]: v for k, i in cols.items() if k.startswith("ch:") and len(cells) > i
                  and (v := _num(cells[i])) is not None}
        if values:
            out.append(ChannelReading(t_ns=t_ns, device_index=idx, values=values))
        return out


def parse_discovery(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``device_list`` of ``xpu-smi discovery -j``.

    Raises:
        ValueError: no ``device_list``.
    """
    if "device_list" not in doc:
        raise ValueError("xpu-smi discovery -j output has no device_list")
    return list(doc["device_list"])


def groups_from_discovery(devices: list[dict[str, Any]], details: dict[int, dict[str, Any]]) -> list[DeviceInfo]:
    """Device groups (same name and memory) from discovery entries and per-device
    ``discovery -d N -j`` details (``memory_physical_size_byte``, ``driver_version``)."""
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    for d in devices:
        if str(d.get("device_type", "GPU")).upper() != "GPU":
            continue
        i = int(d["device_id"])
        det = details.get(i, {})
        mem = det.get("memory_physical_size_byte")
        mem = int(mem) if str(mem or "").isdigit() else None
        groups[(str(d.get("device_name")), mem)].append({
            "id": i, "bdf": d.get("pci_bdf_address"), "uuid": d.get("uuid"),
            "driver": det.get("driver_version"), "function": d.get("device_function_type")})
    return [DeviceInfo(vendor="intel", kind="gpu", model=name, count=len(gs), memory_bytes=mem, driver=gs[0]["driver"],
                       pci_ids=[g["bdf"] for g in gs if g["bdf"]],
                       properties={"indices": [g["id"] for g in gs], "uuids": [g["uuid"] for g in gs if g["uuid"]]})
            for (name, mem), gs in groups.items()]


def detect_groups(exe: str = "xpu-smi") -> list[DeviceInfo]:
    """Run discovery (list, then details per device) and group the GPUs.

    Raises:
        XpuSmiUnavailable: xpu-smi missing or failing.
        ValueError: unexpected JSON.
    """
    devices = parse_discovery(json.loads(run_xpusmi(["discovery", "-j"], exe)))
    details = {int(d["device_id"]): json.loads(run_xpusmi(["discovery", "-d", str(d["device_id"]), "-j"], exe))
               for d in devices}
    return groups_from_discovery(devices, details)
