"""The host's state with every run, and the states known to spoil a measurement
(docs/metrics.md, "Steady state"; docs/reliability.md).

Read from Linux's ``/proc`` and ``/sys`` (a ``root`` other than ``/`` reads a fixture tree):

* the CPU frequency governor of each CPU (``/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor``);
* transparent huge pages: ``enabled`` and ``defrag`` (``/sys/kernel/mm/transparent_hugepage``,
  the bracketed choice);
* compaction stalls (``/proc/vmstat`` ``compact_stall``), counted over each cell
  (:class:`CompactionStalls`);
* NUMA nodes (``/sys/devices/system/node/node*``) and the CPUs and nodes a process may run on
  (:func:`process_binding`);
* swap in use (``/proc/meminfo`` ``SwapTotal - SwapFree``).

The accelerator's side (persistence mode, locked clocks, power limit against its default,
ECC, MIG) comes from the device's plugin (hook ``infbench_device_state``, plugin contract 1.9).
:func:`state_warnings` names the states known to spoil a run, each with why.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel.lstrip("/")).read_text()
    except OSError:
        return None


def _bracketed(text: str | None) -> str | None:
    """``always [madvise] never`` -> ``madvise``; a file with one plain word -> that word."""
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else (text.strip() or None)


def _cpu_list(text: str) -> list[int]:
    """``0-3,8,10-11`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (the kernel's cpulist format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def vmstat(root: Path | str = "/", key: str = "compact_stall") -> int | None:
    """The counter ``key`` of ``/proc/vmstat`` (None where it is not read)."""
    text = _read(Path(root), "proc/vmstat")
    if text is None:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def numa_nodes(root: Path | str = "/") -> dict[int, list[int]]:
    """NUMA node -> its CPUs (``{}`` where ``/sys`` has no node folder)."""
    base = Path(root) / "sys/devices/system/node"
    out: dict[int, list[int]] = {}
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return out
    for d in entries:
        m = re.fullmatch(r"node(\d+)", d.name)
        if m:
            cpus = _read(Path(root), f"sys/devices/system/node/{d.name}/cpulist")
            out[int(m.group(1))] = _cpu_list(cpus) if cpus else []
    return out


def process_binding(pid: int | None = None, root: Path | str = "/") -> dict[str, Any]:
    """The CPUs a process may run on (``os.sched_getaffinity``) and the NUMA nodes they lie in.

    Returns:
        ``{"pid", "cpus": [ints], "numa_nodes": [ints]}`` (``cpus`` None where it cannot be read).
    """
    try:
        cpus = sorted(os.sched_getaffinity(pid or 0))
    except (OSError, AttributeError):
        return {"pid": pid, "cpus": None, "numa_nodes": None}
    nodes = numa_nodes(root)
    on = sorted(n for n, cs in nodes.items() if set(cs) & set(cpus))
    return {"pid": pid or os.getpid(), "cpus": cpus, "numa_nodes": on}


def host_state(root: Path | str = "/") -> dict[str, Any]:
    """What the host's kernel says about speed-relevant settings (module doc).

    Returns:
        ``{"governor": name (every CPU the same) or {name: CPUs}, "thp_enabled", "thp_defrag",
        "compact_stall" (the counter now), "numa_nodes" (count), "swap_used_bytes",
        "binding" (this process's CPUs and nodes)}``; a value None where the file is absent
        (not Linux, a container without ``/sys``).
    """
    r = Path(root)
    govs: Counter[str] = Counter()
    base = r / "sys/devices/system/cpu"
    try:
        cpus = sorted(p.name for p in base.iterdir() if re.fullmatch(r"cpu\d+", p.name))
    except OSError:
        cpus = []
    for c in cpus:
        g = _read(r, f"sys/devices/system/cpu/{c}/cpufreq/scaling_governor")
        if g:
            govs[g.strip()] += 1
    governor: Any = None
    if len(govs) == 1:
        governor = next(iter(govs))
    elif govs:
        governor = dict(govs)
    swap = None
    mem = _read(r, "proc/meminfo")
    if mem:
        vals = {k: int(v.split()[0]) for k, _, v in (ln.partition(":") for ln in mem.splitlines()) if v.strip()
                and v.split()[0].isdigit()}
        if "SwapTotal" in vals and "SwapFree" in vals:
            swap = (vals["SwapTotal"] - vals["SwapFree"]) * 1024
    nodes = numa_nodes(r)
    return {"governor": governor,
            "thp_enabled": _bracketed(_read(r, "sys/kernel/mm/transparent_hugepage/enabled")),
            "thp_defrag": _bracketed(_read(r, "sys/kernel/mm/transparent_hugepage/defrag")),
            "compact_stall": vmstat(r), "numa_nodes": len(nodes) or None, "swap_used_bytes": swap,
            "binding": process_binding(root=r) if str(root) == "/" else None}


def state_warnings(host: dict[str, Any] | None, devices: list[dict[str, Any]] | None = None) -> list[str]:
    """The known-bad states in a run's host and device state, each with why it matters.

    Host: a governor other than ``performance`` (the clock ramps with load, so short cells and
    the first steps of each run slower); transparent huge pages ``always`` with defrag
    ``always`` (synchronous compaction stalls the engine after large allocations:
    halogen-flash-server #10); swap in use (a page of the model or the KV cache may be on disk);
    an engine bound to CPUs of several NUMA nodes (remote memory on part of its threads).
    Device (``infbench_device_state``): persistence mode off (the driver re-initialises the GPU
    between processes: the first seconds of each engine run at idle clocks); a power limit
    below the device's default (a capped device measures its cap); MIG enabled (a slice, not the
    device).

    Args:
        host: :func:`host_state` (None: nothing).
        devices: each device's state (``{"index", "persistence_mode", "power_limit_w",
            "default_power_limit_w", "mig", "applications_clocks_locked", "ecc"}``).
    """
    out: list[str] = []
    h = host or {}
    gov = h.get("governor")
    if isinstance(gov, str) and gov != "performance":
        out.append(f"CPU frequency governor {gov!r}, not 'performance': the clock ramps with load, so short cells "
                   "and each cell's first steps run slower (set it with `cpupower frequency-set -g performance`)")
    elif isinstance(gov, dict) and set(gov) != {"performance"}:
        out.append(f"CPU frequency governors differ across CPUs ({', '.join(f'{k} x{v}' for k, v in gov.items())}): "
                   "cores run at different clocks")
    if h.get("thp_enabled") == "always" and h.get("thp_defrag") == "always":
        out.append("transparent huge pages 'always' with defrag 'always': the kernel compacts memory synchronously "
                   "after large allocations and stalls the engine (halogen-flash-server #10); set defrag to "
                   "'madvise' or 'defer'")
    swap = h.get("swap_used_bytes")
    if isinstance(swap, int) and swap > 0:
        out.append(f"{swap / 2**20:.0f} MiB of swap in use: part of the model or the KV cache may be paged out")
    b = h.get("binding") or {}
    if isinstance(b.get("numa_nodes"), list) and len(b["numa_nodes"]) > 1:
        out.append(f"infbench may run on CPUs of {len(b['numa_nodes'])} NUMA nodes: an engine's threads then read "
                   "memory across nodes (bind it with numactl --cpunodebind N --membind N)")
    for d in devices or []:
        name = f"device {d.get('index', '?')}"
        if d.get("persistence_mode") is False:
            out.append(f"{name}: persistence mode is off: the driver re-initialises the GPU for each process, so the "
                       "first seconds of an engine run at idle clocks (nvidia-smi -pm 1)")
        lim, default = d.get("power_limit_w"), d.get("default_power_limit_w")
        if isinstance(lim, (int, float)) and isinstance(default, (int, float)) and lim < 0.99 * default:
            out.append(f"{name}: power limit {lim:.0f} W, below its default {default:.0f} W: the results describe the "
                       "capped device")
        if d.get("mig") is True:
            out.append(f"{name}: MIG is enabled: the engine sees a slice of the device")
    return out


class CompactionStalls:
    """Counts ``/proc/vmstat`` ``compact_stall`` over an interval (a cell's timed part):
    ``start()``, then ``stop()`` returns the delta (None where the counter is not read)."""

    def __init__(self, root: Path | str = "/"):
        self.root = root
        self._start: int | None = None

    def start(self) -> None:
        """Read the counter."""
        self._start = vmstat(self.root)

    def stop(self) -> int | None:
        """The stalls since :meth:`start`."""
        end = vmstat(self.root)
        return end - self._start if end is not None and self._start is not None else None
