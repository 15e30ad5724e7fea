"""Theoretical peaks of a CPU: FLOP/s from its ISA and clock, memory bandwidth from its DIMMs.

A peak is an upper bound that no measurement can exceed, so a CPU's MFU and MBU stay at
most 1 unless something is wrong (a cache-resident model, a prefix-cache hit, too few
tokens): :mod:`infbench.analysis.physics` marks such cells ``suspect``. The rates this host
reaches in a numpy benchmark (:func:`infbench.detect.platforms.cpu.measure_limits`) are kept
beside the peaks, named ``attainable``.

**FLOP/s** = physical cores x max clock x FLOP per cycle per core, per precision class
(:func:`flop_per_cycle`; one FMA is 2 FLOP, one integer multiply-add 2 ops):

======================  =======================================================  =====================
instructions            per core per cycle                                        source
======================  =======================================================  =====================
SSE (no FMA)            fp32 8: one 128-bit multiply + one add                    [Intel-OPT]
AVX (no FMA)            fp32 16: one 256-bit multiply + one add                   [Intel-OPT]
AVX2 + FMA              fp32 32: two 256-bit FMA units x 8 lanes x 2              [Intel-OPT] Haswell
AVX-512, u FMA units    fp32 32 u: u 512-bit FMA units x 16 lanes x 2             [Intel-OPT], [ARK]
                        (u = 1 or 2 by SKU; Zen 4 runs 512-bit ops on two         [AMD-19h], [AMD-1Ah]
                        256-bit pipes: u = 1; Zen 5 server/desktop: u = 2)
AVX512_FP16             fp16 = 2 x fp32 (32 half lanes per 512-bit FMA)           [Intel-FP16]
F16C only               fp16 = fp32 (converted to fp32, computed in fp32)         [Intel-ISE]
AVX512_BF16             bf16 = 2 x fp32 (VDPBF16PS: 2 products per fp32 lane)     [Intel-ISE]
AVX512_VNNI             int8 = u x 64 MACs x 2 (VPDPBUSD, 512-bit)                [Intel-ISE]
AVX-VNNI                int8 = 2 x 32 MACs x 2 (VPDPBUSD, 256-bit, 2 ports)       [Intel-ISE]
no VNNI                 int8 = u x width/8 (VPMADDUBSW + VPMADDWD per 2 ops)      [Intel-OPT]
AMX-BF16 / AMX-INT8     bf16 1024, int8 2048 per core                             [Intel-AMX]
NEON (Arm)              fp32 = p x 4 lanes x 2 (p 128-bit pipes, 4 assumed)       [Arm-N1], [Arm-V1/V2]
SVE (Arm)               bits per cycle = max(4 x 128, 2 x vector length)          [Arm-V1], [Arm-A64FX]
asimdhp / bf16 / i8mm   fp16 2x, bf16 4x (BFMMLA), int8 8x (SMMLA), 4x (SDOT)     [Arm-ARM]
======================  =======================================================  =====================

int4 runs at the int8 rate (llama.cpp unpacks 4-bit weights to int8 before the dot
product), fp8 has no CPU rate. Unknowns are resolved upwards, so the figure stays an upper
bound: two AVX-512 FMA units unless the SKU is known to have one, four 128-bit pipes on
Arm; a site can declare the truth in ``site.toml`` (``[cpu] avx512_fma_units``,
``simd_pipes``, ``max_clock_ghz``).

Sources:
[Intel-OPT] Intel 64 and IA-32 Architectures Optimization Reference Manual (order 248966):
Haswell (two FMA units, 32 single-precision FLOP/cycle), Skylake Server (AVX-512 on ports
0 and 5; one or two FMA units by SKU).
[ARK] Intel ARK, "# of AVX-512 FMA Units" of each Xeon Scalable SKU (1 on Bronze, Silver
and Gold 5100/5200 except 5122/5222; 2 elsewhere).
[Intel-ISE] Intel Architecture Instruction Set Extensions Programming Reference (order
319433): VDPBF16PS, VPDPBUSD (AVX512_VNNI, AVX-VNNI), F16C.
[Intel-FP16] Intel AVX512-FP16 Architecture Specification (order 347407).
[Intel-AMX] Intel, "Accelerate AI Workloads with Intel AMX" (4th Gen Xeon): 2048 INT8 and
1024 BF16 operations per cycle per core.
[AMD-19h] AMD Software Optimization Guide for AMD Family 19h Processors (pub. 56665):
512-bit instructions execute as two 256-bit halves (Zen 4).
[AMD-1Ah] AMD Software Optimization Guide for AMD Family 1Ah Processors (pub. 58455): a
full 512-bit data path with four FP pipes, two of them FMA (Zen 5).
[Arm-N1] Arm Neoverse N1 Software Optimization Guide: two 128-bit FP/ASIMD pipes.
[Arm-V1/V2] Arm Neoverse V1 / V2 Software Optimization Guides: four 128-bit FP/ASIMD
pipes (V1: or two 256-bit SVE).
[Arm-A64FX] Fujitsu A64FX Microarchitecture Manual: two 512-bit SVE FMA pipes.
[Arm-ARM] Arm Architecture Reference Manual for A-profile: FMLA, BFMMLA, SMMLA, SDOT.

**Memory bandwidth**, the first known of: the site's ``[cpu] memory_bandwidth_gb_s``
(channels x MT/s x 8 B from the datasheet); the sum over populated DIMMs of configured
speed (MT/s) x data width (SMBIOS type 17, DMTF DSP0134; :func:`dimm_bandwidth`), an upper
bound of the channels' peak (two DIMMs on one channel share it), readable by root only;
the socket's peak for a known server line (:data:`SERVER_PLATFORMS`: channels x fastest
supported MT/s x 8 B, from AMD's and Intel's product documents; in a VM holding a few
cores this is the whole socket's, and the attainable rate beside it says what the VM
reached). Without any, the roofline uses the measured attainable bandwidth and says so.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Short names of the documents cited in :func:`flop_per_cycle`'s results.
SOURCES = {
    "Intel-OPT": "Intel 64 and IA-32 Architectures Optimization Reference Manual (order 248966)",
    "ARK": "Intel ARK, '# of AVX-512 FMA Units' per Xeon SKU",
    "Intel-ISE": "Intel Architecture Instruction Set Extensions Programming Reference (order 319433)",
    "Intel-FP16": "Intel AVX512-FP16 Architecture Specification (order 347407)",
    "Intel-AMX": "Intel, 'Accelerate AI Workloads with Intel AMX': 2048 INT8 / 1024 BF16 ops per cycle per core",
    "AMD-19h": "AMD Software Optimization Guide for AMD Family 19h Processors (pub. 56665)",
    "AMD-1Ah": "AMD Software Optimization Guide for AMD Family 1Ah Processors (pub. 58455)",
    "Arm-SOG": "Arm Neoverse N1/V1/V2 Software Optimization Guides (FP/ASIMD pipes)",
    "Arm-ARM": "Arm Architecture Reference Manual for A-profile (FMLA, BFMMLA, SMMLA, SDOT)",
}


@dataclass(frozen=True)
class Rate:
    """One precision's peak per core per cycle.

    Attributes:
        flop_per_cycle: FLOP (or integer ops) per cycle per core.
        unit: the instructions that reach it (``AVX-512 FMA x2``).
        source: the :data:`SOURCES` keys it rests on.
    """

    flop_per_cycle: float
    unit: str
    source: str


def avx512_fma_units(brand: str, vendor_id: str | None, family: int | None) -> tuple[int, str]:
    """AVX-512 FMA units per core, and the basis.

    Intel SKUs with one unit ([ARK]): Xeon Bronze 3100/3200, Silver 4100/4200, Gold
    5100/5200 except 5122 and 5222, and the client Core parts with AVX-512 (Ice Lake,
    Tiger Lake, Rocket Lake). AMD Zen 4 (family 19h) splits 512-bit ops in two 256-bit halves
    ([AMD-19h]): counted as 1; Zen 5 (family 1Ah) has a 512-bit data path with two FMA
    pipes ([AMD-1Ah]), except its mobile parts (Ryzen AI), counted 1. Anything else: 2,
    the upper bound.
    """
    b = brand or ""
    if (vendor_id or "").startswith("AuthenticAMD") or "AMD" in b:
        if family == 0x19:
            return 1, "Zen 4 (family 19h): 512-bit ops on two 256-bit halves [AMD-19h]"
        if family == 0x1A:
            if "Ryzen AI" in b:
                return 1, "Zen 5 mobile (family 1Ah, Ryzen AI): 256-bit data path [AMD-1Ah]"
            return 2, "Zen 5 (family 1Ah): 512-bit data path, two FMA pipes [AMD-1Ah]"
        return 2, "assumed 2 (upper bound) for this AMD family"
    m = re.search(r"Xeon.*?\b(Bronze|Silver|Gold)\s+(\d{4})", b)
    if m:
        tier, sku = m.group(1), m.group(2)
        if tier in ("Bronze", "Silver") and sku[1] in "12":
            return 1, f"Xeon {tier} {sku}: one AVX-512 FMA unit [ARK]"
        if tier == "Gold" and sku[0] == "5" and sku[1] in "12" and sku not in ("5122", "5222"):
            return 1, f"Xeon Gold {sku}: one AVX-512 FMA unit [ARK]"
        return 2, f"Xeon {tier} {sku}: two AVX-512 FMA units [ARK]"
    if re.search(r"\bCore\b", b):
        return 1, "Intel Core client part with AVX-512: one FMA unit [Intel-OPT]"
    return 2, "assumed 2 (upper bound): declare [cpu] avx512_fma_units in site.toml if fewer"


def flop_per_cycle(flags: list[str] | set[str], arch: str = "X86_64", fma_units: int | None = None,
                   simd_pipes: int | None = None, sve_bits: int | None = None) -> dict[str, Rate]:
    """Peak FLOP (or ops) per cycle per core for each precision class, from ISA flags.

    Args:
        flags: ISA flags in py-cpuinfo's spelling (``avx512f``, ``avx512_bf16``, ``amx_bf16``,
            ``asimdhp``, ``i8mm``...).
        arch: ``X86_64`` or an Arm name (``ARM_8``, ``aarch64``).
        fma_units: AVX-512 FMA units per core (:func:`avx512_fma_units`); default 2.
        simd_pipes: Arm 128-bit FP/ASIMD pipes per core; default 4 (the upper bound).
        sve_bits: SVE vector length in bits, if the CPU has SVE.

    Returns:
        ``{precision: Rate}`` for fp32, fp16, bf16, int8, int4 (the table in the module doc).
    """
    f = {x.replace("avx512", "avx512_") if x.startswith("avx512") and "_" not in x else x for x in flags}
    if arch.upper().startswith(("ARM", "AARCH64")):
        return _arm(f, simd_pipes or 4, sve_bits)
    u = fma_units or 2
    if "avx512f" in f or "avx512_f" in f:
        width, units, unit = 512, u, f"AVX-512 FMA x{u}"
    elif "fma" in f and ("avx2" in f or "avx" in f):
        width, units, unit = 256, 2, "AVX2 FMA x2"
    elif "avx" in f:
        width, units, unit = 256, 1, "AVX multiply + add"
    else:
        width, units, unit = 128, 1, "SSE multiply + add"
    fp32 = units * (width / 32) * 2
    src = "Intel-OPT" if width < 512 else "Intel-OPT, ARK, AMD-19h, AMD-1Ah"
    out = {"fp32": Rate(fp32, unit, src)}
    out["fp16"] = (Rate(2 * fp32, f"AVX512-FP16 FMA x{units}", "Intel-FP16") if "avx512_fp16" in f
                   else Rate(fp32, f"{unit} (fp16 converted to fp32, F16C)", f"{src}, Intel-ISE"))
    if "amx_bf16" in f:
        out["bf16"] = Rate(1024.0, "AMX-BF16 (TDPBF16PS)", "Intel-AMX")
    elif "avx512_bf16" in f:
        out["bf16"] = Rate(2 * fp32, f"AVX512_BF16 VDPBF16PS x{units}", "Intel-ISE")
    else:
        out["bf16"] = Rate(fp32, f"{unit} (bf16 computed in fp32)", src)
    if "amx_int8" in f:
        out["int8"] = Rate(2048.0, "AMX-INT8 (TDPBUSD)", "Intel-AMX")
    else:
        vnni = 0.0
        if "avx512_vnni" in f and width == 512:
            vnni = units * (512 / 8) * 2
        if "avx_vnni" in f:
            vnni = max(vnni, 2 * (256 / 8) * 2)
        out["int8"] = (Rate(vnni, "VPDPBUSD (AVX512_VNNI / AVX-VNNI)", "Intel-ISE") if vnni
                       else Rate(units * width / 8, f"{unit} int8 (VPMADDUBSW + VPMADDWD)", "Intel-OPT"))
    out["int4"] = Rate(out["int8"].flop_per_cycle, out["int8"].unit + " (int4 unpacked to int8)", out["int8"].source)
    return out


def _arm(f: set[str], pipes: int, sve_bits: int | None) -> dict[str, Rate]:
    bits = pipes * 128
    unit = f"NEON {pipes}x128-bit"
    if "sve" in f and sve_bits:
        bits = max(bits, 2 * sve_bits)
        unit = f"NEON {pipes}x128-bit / SVE 2x{sve_bits}-bit"
    fp32 = bits / 32 * 2
    out = {"fp32": Rate(fp32, f"{unit} FMLA", "Arm-SOG, Arm-ARM")}
    out["fp16"] = Rate(2 * fp32 if {"asimdhp", "fphp"} & f else fp32, f"{unit} FMLA (half)", "Arm-SOG, Arm-ARM")
    out["bf16"] = Rate(4 * fp32 if "bf16" in f else fp32, f"{unit} BFMMLA" if "bf16" in f else f"{unit} (fp32)",
                       "Arm-SOG, Arm-ARM")
    if "i8mm" in f:
        out["int8"] = Rate(8 * fp32, f"{unit} SMMLA", "Arm-SOG, Arm-ARM")
    elif "asimddp" in f:
        out["int8"] = Rate(4 * fp32, f"{unit} SDOT", "Arm-SOG, Arm-ARM")
    else:
        out["int8"] = Rate(2 * fp32, f"{unit} SMLAL", "Arm-SOG, Arm-ARM")
    out["int4"] = Rate(out["int8"].flop_per_cycle, out["int8"].unit + " (int4 unpacked to int8)", out["int8"].source)
    return out


def physical_cores(sysfs: str | Path = "/sys/devices/system/cpu") -> int | None:
    """Physical cores among the CPUs this process may run on (distinct package and core
    ids of the affinity set: SMT siblings share their core's FMA units), or None."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    seen = set()
    for c in cpus:
        topo = Path(sysfs) / f"cpu{c}" / "topology"
        try:
            seen.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            return None
    return len(seen) or None


def max_clock_hz(sysfs: str | Path = "/sys/devices/system/cpu", cpuinfo_hz: float | None = None,
                 proc_cpuinfo: str | Path = "/proc/cpuinfo") -> tuple[float | None, str]:
    """The highest clock a core of this CPU may run at, and where it comes from.

    Order: cpufreq's ``cpuinfo_max_freq`` and ``amd_pstate_max_freq`` (kHz; the boost
    clock with intel_pstate/amd-pstate), the highest of them over all CPUs; without
    cpufreq (a virtual machine), the highest ``cpu MHz`` of ``/proc/cpuinfo`` or py-cpuinfo's
    figure, which a turbo may exceed (declare ``[cpu] max_clock_ghz`` then).
    """
    best = 0.0
    for name in ("cpuinfo_max_freq", "amd_pstate_max_freq"):
        for p in Path(sysfs).glob(f"cpu[0-9]*/cpufreq/{name}"):
            try:
                best = max(best, float(p.read_text().strip()) * 1e3)
            except (OSError, ValueError):
                continue
    if best:
        return best, "cpufreq maximum (cpuinfo_max_freq / amd_pstate_max_freq)"
    mhz = 0.0
    try:
        for m in re.finditer(r"^cpu MHz\s*:\s*([\d.]+)", Path(proc_cpuinfo).read_text(), re.M):
            mhz = max(mhz, float(m.group(1)))
    except OSError:
        pass
    hz = max(mhz * 1e6, cpuinfo_hz or 0.0)
    if hz:
        return hz, ("no cpufreq (a virtual machine?): the clock /proc/cpuinfo reports, which a turbo may exceed; "
                    "declare [cpu] max_clock_ghz in site.toml")
    return None, "clock unknown: declare [cpu] max_clock_ghz in site.toml"


def sve_vector_bits(path: str | Path = "/proc/sys/abi/sve_default_vector_length") -> int | None:
    """The SVE vector length in bits (the kernel's default for new processes), or None."""
    try:
        return int(Path(path).read_text().strip()) * 8
    except (OSError, ValueError):
        return None


def dimm_bandwidth(root: str | Path = "/sys/firmware/dmi/entries") -> tuple[float | None, str]:
    """Peak memory bandwidth (B/s) from the SMBIOS memory devices (type 17), and the basis.

    Sum over populated DIMMs of configured speed (MT/s; offset 0x20, else the speed at
    0x15; 0xFFFF means the extended field at 0x54 / 0x58) x data width (bits at 0x0A) / 8,
    per DMTF DSP0134. An upper bound of the channels' peak. ``(None, reason)`` when the
    tables are absent or unreadable (they are root-only).
    """
    entries = sorted(Path(root).glob("17-*/raw"))
    if not entries:
        return None, f"no SMBIOS memory devices under {root}"
    total, dimms = 0.0, 0
    try:
        for e in entries:
            b = _dimm_bytes_s(e.read_bytes())
            if b:
                total += b
                dimms += 1
    except PermissionError:
        return None, f"SMBIOS tables under {root} are readable by root only"
    except OSError as exc:
        return None, f"SMBIOS tables unreadable: {exc}"
    if not dimms:
        return None, "SMBIOS lists no populated DIMM with a known speed"
    return total, f"SMBIOS: {dimms} DIMMs, sum of configured speed x data width (upper bound of the channels' peak)"


@dataclass(frozen=True)
class ServerPlatform:
    """A server CPU line's memory system, per socket, from its vendor's product documents.

    Attributes:
        name: the line (``AMD EPYC 9005 (Turin)``).
        vendor_id: CPUID vendor (``AuthenticAMD``, ``GenuineIntel``).
        family: CPUID family; models: the CPUID model range (inclusive).
        brand: a word the brand string must hold (``EPYC``, ``Xeon``), so client parts of
            the same family never match.
        channels, mts: memory channels per socket and the fastest supported transfer rate
            (MT/s): channels x MT/s x 8 B is the socket's peak.
        source: the document.
    """

    name: str
    vendor_id: str
    family: int
    models: tuple[int, int]
    brand: str
    channels: int
    mts: int
    source: str

    @property
    def bytes_s(self) -> float:
        """Peak memory bandwidth per socket (B/s): channels x MT/s x 8 B."""
        return self.channels * self.mts * 1e6 * 8


#: Server CPU lines whose sockets' peak memory bandwidth is known from the vendor (fastest
#: supported memory; a slower population only lowers the true peak, so this stays a bound).
SERVER_PLATFORMS = (
    ServerPlatform("AMD EPYC 7001 (Naples)", "AuthenticAMD", 0x17, (0x00, 0x0F), "EPYC", 8, 2666,
                   "AMD EPYC 7001 Series datasheet: 8 channels DDR4-2666"),
    ServerPlatform("AMD EPYC 7002 (Rome)", "AuthenticAMD", 0x17, (0x30, 0x3F), "EPYC", 8, 3200,
                   "AMD EPYC 7002 Series product brief: 8 channels DDR4-3200"),
    ServerPlatform("AMD EPYC 7003 (Milan)", "AuthenticAMD", 0x19, (0x00, 0x0F), "EPYC", 8, 3200,
                   "AMD EPYC 7003 Series product brief: 8 channels DDR4-3200"),
    ServerPlatform("AMD EPYC 9004 (Genoa, Bergamo)", "AuthenticAMD", 0x19, (0x10, 0xAF), "EPYC", 12, 4800,
                   "AMD EPYC 9004 Series product brief: 12 channels DDR5-4800"),
    ServerPlatform("AMD EPYC 9005 (Turin)", "AuthenticAMD", 0x1A, (0x00, 0x1F), "EPYC", 12, 6400,
                   "AMD EPYC 9005 Series product brief: 12 channels DDR5-6400"),
    ServerPlatform("Intel Xeon Scalable 1st/2nd gen (Skylake-SP, Cascade Lake)", "GenuineIntel", 6, (0x55, 0x55),
                   "Xeon", 6, 2933, "Intel ARK, 2nd Gen Xeon Scalable: 6 channels DDR4-2933"),
    ServerPlatform("Intel Xeon Scalable 3rd gen (Ice Lake-SP)", "GenuineIntel", 6, (0x6A, 0x6A), "Xeon", 8, 3200,
                   "Intel ARK, 3rd Gen Xeon Scalable: 8 channels DDR4-3200"),
    ServerPlatform("Intel Xeon Scalable 4th gen (Sapphire Rapids)", "GenuineIntel", 6, (0x8F, 0x8F), "Xeon", 8, 4800,
                   "Intel ARK, 4th Gen Xeon Scalable: 8 channels DDR5-4800"),
    ServerPlatform("Intel Xeon Scalable 5th gen (Emerald Rapids)", "GenuineIntel", 6, (0xCF, 0xCF), "Xeon", 8, 5600,
                   "Intel ARK, 5th Gen Xeon Scalable: 8 channels DDR5-5600"),
    ServerPlatform("Intel Xeon 6 P-core (Granite Rapids)", "GenuineIntel", 6, (0xAD, 0xAD), "Xeon", 12, 8800,
                   "Intel ARK, Xeon 6900P: 12 channels, MRDIMM-8800"),
    ServerPlatform("Intel Xeon 6 E-core (Sierra Forest)", "GenuineIntel", 6, (0xAF, 0xAF), "Xeon", 12, 6400,
                   "Intel ARK, Xeon 6700E/6900E: up to 12 channels DDR5-6400"),
)


def platform_bandwidth(vendor_id: str | None, family: int | None, model: int | None, brand: str,
                       sockets: int = 1) -> tuple[float | None, str]:
    """Peak memory bandwidth (B/s) of ``sockets`` sockets of a known server line
    (:data:`SERVER_PLATFORMS`), and the basis; ``(None, reason)`` for other CPUs."""
    for p in SERVER_PLATFORMS:
        if (vendor_id or "").startswith(p.vendor_id) and family == p.family and model is not None \
                and p.models[0] <= model <= p.models[1] and p.brand in (brand or ""):
            return p.bytes_s * sockets, (f"{p.name}: {sockets} socket(s) x {p.channels} channels x {p.mts} MT/s x 8 B "
                                         f"({p.source}); the whole socket's, also when this host holds a few of its "
                                         "cores (a VM)")
    return None, "not a server CPU line infbench knows"


def _dimm_bytes_s(raw: bytes) -> float:
    """B/s of one SMBIOS type-17 structure (0 for an empty slot or an unknown speed)."""
    if len(raw) < 0x17 or raw[0] != 17:
        return 0.0
    if struct.unpack_from("<H", raw, 0x0C)[0] == 0:  # size 0: no DIMM in the slot
        return 0.0
    width = struct.unpack_from("<H", raw, 0x0A)[0]  # data width, bits
    if width in (0, 0xFFFF):
        return 0.0

    def speed(off: int, ext: int) -> int:
        if len(raw) < off + 2:
            return 0
        v = struct.unpack_from("<H", raw, off)[0]
        if v == 0xFFFF and len(raw) >= ext + 4:
            return struct.unpack_from("<I", raw, ext)[0]
        return 0 if v == 0xFFFF else v

    mts = speed(0x20, 0x58) or speed(0x15, 0x54)
    return mts * 1e6 * width / 8


def cpu_theoretical(device: Any, overrides: dict[str, Any] | None = None, attainable_fp32: float | None = None,
                    sysfs: str | Path = "/sys/devices/system/cpu") -> dict[str, Any]:
    """The theoretical peaks of the host CPU described by ``device``.

    Args:
        device: the CPU :class:`~infbench.data.schema.DeviceInfo` (properties ``isa_flags``,
            ``arch``, ``physical_cores``, ``usable_cpus``, ``vendor_id``, ``cpu_family``).
        overrides: the site's ``[cpu]`` table: ``max_clock_ghz``, ``avx512_fma_units``,
            ``simd_pipes``, ``cores``, ``memory_bandwidth_gb_s``.
        attainable_fp32: the measured fp32 rate (FLOP/s); if it exceeds the peak at the
            clock found, the clock is raised to the one it implies (the clock source was
            wrong: a turbo above the reported clock), so the peak stays an upper bound.
        sysfs: the sysfs CPU folder (tests pass a fake tree).

    Returns:
        ``{"peak_flops": {precision: FLOP/s}, "cores", "clock_hz", "clock_basis",
        "rates": {precision: {"flop_per_cycle", "unit", "source"}}, "fma_basis",
        "memory_bandwidth_bytes_s" (or None), "bandwidth_basis"}``.
    """
    o = overrides or {}
    props = device.properties
    flags = props.get("isa_flags") or []
    arch = str(props.get("arch") or "X86_64")
    if o.get("avx512_fma_units"):
        units, fma_basis = int(o["avx512_fma_units"]), "declared in site.toml [cpu] avx512_fma_units"
    else:
        units, fma_basis = avx512_fma_units(device.model, props.get("vendor_id"), props.get("cpu_family"))
    rates = flop_per_cycle(flags, arch, units, o.get("simd_pipes"), sve_vector_bits())
    cores = int(o.get("cores") or physical_cores(sysfs) or min(
        x for x in (props.get("usable_cpus"), props.get("physical_cores"), props.get("logical_cpus"), 1) if x))
    clock: float
    if o.get("max_clock_ghz"):
        clock, clock_basis = float(o["max_clock_ghz"]) * 1e9, "declared in site.toml [cpu] max_clock_ghz"
    else:
        found, clock_basis = max_clock_hz(sysfs, props.get("clock_hz"))
        clock = found or 0.0
    if attainable_fp32 and rates["fp32"].flop_per_cycle * cores * clock < attainable_fp32:
        clock = attainable_fp32 / (rates["fp32"].flop_per_cycle * cores)
        clock_basis = (f"raised to {clock / 1e9:.2f} GHz, the clock the measured fp32 GEMM implies (the reported "
                       "clock is below the one the cores ran at)")
    bw: float | None
    if o.get("memory_bandwidth_gb_s"):
        bw, bw_basis = float(o["memory_bandwidth_gb_s"]) * 1e9, "declared in site.toml [cpu] memory_bandwidth_gb_s"
    else:
        bw, bw_basis = dimm_bandwidth()
        if bw is None:
            bw, why = platform_bandwidth(props.get("vendor_id"), props.get("cpu_family"), props.get("cpu_model"),
                                         device.model, device.count)
            bw_basis = bw_basis if bw is None else why
    return {"peak_flops": {p: r.flop_per_cycle * cores * clock for p, r in rates.items()} if clock else {},
            "cores": cores, "clock_hz": clock or None, "clock_basis": clock_basis, "fma_basis": fma_basis,
            "rates": {p: {"flop_per_cycle": r.flop_per_cycle, "unit": r.unit, "source": r.source}
                      for p, r in rates.items()},
            "memory_bandwidth_bytes_s": bw, "bandwidth_basis": bw_basis}
