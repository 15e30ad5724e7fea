"""CPU theoretical peaks (infbench.detect.platforms.cpu_isa) against hand calculations:
cores x max clock x FLOP per cycle per core, for real CPUs' published figures."""

from __future__ import annotations

import struct

import pytest

from infbench.data.schema import DeviceInfo
from infbench.detect.platforms.cpu import cpu_limits
from infbench.detect.platforms.cpu_isa import (
    avx512_fma_units,
    cpu_theoretical,
    dimm_bandwidth,
    flop_per_cycle,
    max_clock_hz,
    platform_bandwidth,
)


def cpu(model: str, flags: list[str], cores: int, vendor: str = "GenuineIntel", family: int = 6,
        arch: str = "X86_64", cpu_model: int | None = None) -> DeviceInfo:
    return DeviceInfo(vendor="cpu", kind="cpu", model=model,
                      properties={"isa_flags": flags, "arch": arch, "physical_cores": cores, "usable_cpus": cores,
                                  "vendor_id": vendor, "cpu_family": family, "cpu_model": cpu_model})


def peaks(device: DeviceInfo, ghz: float) -> dict[str, float]:
    """Peaks with the clock declared (hosts' own sysfs must not leak into the hand calculation)."""
    return cpu_theoretical(device, {"max_clock_ghz": ghz, "cores": device.properties["physical_cores"],
                                    "memory_bandwidth_gb_s": 1})["peak_flops"]


def test_avx512_with_two_fma_units_xeon_gold_6248():
    """Xeon Gold 6248 (Cascade Lake): 20 cores, 3.9 GHz max turbo, two AVX-512 FMA units
    (ARK), AVX512_VNNI, no AVX512_BF16."""
    d = cpu("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", ["avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni"], 20)
    assert avx512_fma_units(d.model, "GenuineIntel", 6)[0] == 2
    p = peaks(d, 3.9)
    # fp32: 20 cores x 3.9e9 x (2 units x 16 lanes x 2 FLOP) = 4.992 TFLOP/s
    assert p["fp32"] == pytest.approx(20 * 3.9e9 * 64) == pytest.approx(4.992e12)
    # fp16 via F16C is converted and computed in fp32; bf16 without AVX512_BF16 likewise.
    assert p["fp16"] == p["bf16"] == p["fp32"]
    # int8 VPDPBUSD: 2 units x 64 u8*s8 products x 2 ops = 256 per cycle -> 19.968 TOPS
    assert p["int8"] == pytest.approx(20 * 3.9e9 * 256) == pytest.approx(19.968e12)
    assert p["int4"] == p["int8"]


def test_avx512_with_one_fma_unit_xeon_gold_5218():
    d = cpu("Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz", ["avx2", "fma", "avx512f", "avx512_vnni"], 16)
    units, basis = avx512_fma_units(d.model, "GenuineIntel", 6)
    assert units == 1 and "ARK" in basis
    # 16 cores x 3.9 GHz x (1 unit x 16 lanes x 2) = 1.9968 TFLOP/s
    assert peaks(d, 3.9)["fp32"] == pytest.approx(16 * 3.9e9 * 32)
    assert avx512_fma_units("Intel(R) Xeon(R) Gold 5222 CPU @ 3.80GHz", "GenuineIntel", 6)[0] == 2
    assert avx512_fma_units("Intel(R) Xeon(R) Silver 4214 CPU", "GenuineIntel", 6)[0] == 1


def test_avx2_epyc_7742():
    """AMD EPYC 7742 (Zen 2): 64 cores, 3.4 GHz boost, two 256-bit FMA units, no AVX-512."""
    d = cpu("AMD EPYC 7742 64-Core Processor", ["avx", "avx2", "fma", "f16c"], 64, "AuthenticAMD", 0x17)
    p = peaks(d, 3.4)
    # fp32: 64 x 3.4e9 x (2 units x 8 lanes x 2) = 6.9632 TFLOP/s
    assert p["fp32"] == pytest.approx(64 * 3.4e9 * 32) == pytest.approx(6.9632e12)
    assert p["fp16"] == p["bf16"] == p["fp32"]
    # int8 without VNNI: VPMADDUBSW + VPMADDWD, 2 units x 32 bytes = 64 ops per cycle -> 13.93 TOPS
    assert p["int8"] == pytest.approx(64 * 3.4e9 * 64)


def test_amx_and_avx512_fp16_sapphire_rapids():
    """Xeon Platinum 8480+: 56 cores, 3.8 GHz; AMX: 1024 BF16 / 2048 INT8 ops per cycle per core."""
    flags = ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_int8"]
    p = peaks(cpu("Intel(R) Xeon(R) Platinum 8480+", flags, 56), 3.8)
    assert p["bf16"] == pytest.approx(56 * 3.8e9 * 1024) == pytest.approx(217.9e12, rel=1e-3)
    assert p["int8"] == pytest.approx(56 * 3.8e9 * 2048)
    assert p["fp16"] == pytest.approx(2 * p["fp32"])            # AVX512-FP16: 32 half lanes per FMA


def test_zen4_and_zen5_avx512_units():
    assert avx512_fma_units("AMD EPYC 9654 96-Core Processor", "AuthenticAMD", 0x19)[0] == 1
    assert avx512_fma_units("AMD EPYC", "AuthenticAMD", 0x1A)[0] == 2
    assert avx512_fma_units("AMD Ryzen AI 9 HX 370", "AuthenticAMD", 0x1A)[0] == 1
    r = flop_per_cycle(["avx512f", "avx512_bf16", "avx_vnni", "avx512_vnni", "fma"], fma_units=2)
    assert r["fp32"].flop_per_cycle == 64 and r["bf16"].flop_per_cycle == 128 and r["int8"].flop_per_cycle == 256


def test_arm_neoverse_v1():
    """Graviton3 (Neoverse V1): 4 x 128-bit NEON or 2 x 256-bit SVE = 512 bits of FMA per cycle."""
    r = flop_per_cycle(["asimd", "asimdhp", "bf16", "i8mm", "sve"], "ARM_8", sve_bits=256)
    assert r["fp32"].flop_per_cycle == 32       # 512 bits / 32 x 2
    assert r["fp16"].flop_per_cycle == 64 and r["bf16"].flop_per_cycle == 128 and r["int8"].flop_per_cycle == 256
    assert flop_per_cycle(["asimd"], "aarch64", simd_pipes=2)["fp32"].flop_per_cycle == 16   # Neoverse N1
    assert flop_per_cycle(["asimd", "sve"], "ARM_8", sve_bits=512)["fp32"].flop_per_cycle == 64  # A64FX


def test_older_x86():
    assert flop_per_cycle(["avx"])["fp32"].flop_per_cycle == 16      # Sandy Bridge: mul + add, 256-bit
    assert flop_per_cycle([])["fp32"].flop_per_cycle == 8            # SSE


def test_clock_from_cpufreq_and_the_attainable_guard(tmp_path):
    for c, khz in ((0, 3_500_000), (1, 3_700_000)):
        f = tmp_path / f"cpu{c}" / "cpufreq"
        f.mkdir(parents=True)
        (f / "cpuinfo_max_freq").write_text(f"{khz}\n")
    hz, basis = max_clock_hz(tmp_path)
    assert hz == 3.7e9 and "cpufreq" in basis
    # no cpufreq: /proc/cpuinfo's clock, said to be possibly below the turbo
    proc = tmp_path / "cpuinfo"
    proc.write_text("cpu MHz\t\t: 2596.122\ncpu MHz\t\t: 2596.122\n")
    hz, basis = max_clock_hz(tmp_path / "none", proc_cpuinfo=proc)
    assert hz == pytest.approx(2.596122e9) and "max_clock_ghz" in basis
    # a measured fp32 rate above ISA x clock x cores means the clock was too low: it is raised
    d = cpu("AMD EPYC", ["avx2", "fma"], 2, "AuthenticAMD", 0x17)
    th = cpu_theoretical(d, {"max_clock_ghz": 1.0, "cores": 2, "memory_bandwidth_gb_s": 1}, attainable_fp32=100e9)
    assert th["peak_flops"]["fp32"] == pytest.approx(100e9) and "raised" in th["clock_basis"]


def smbios_17(size_mb: int, width: int, speed: int, configured: int) -> bytes:
    """A type-17 structure (DSP0134 3.3 layout, 0x5C bytes) with the fields infbench reads."""
    raw = bytearray(0x5C)
    raw[0], raw[1] = 17, 0x5C
    struct.pack_into("<H", raw, 0x08, width + 8)       # total width (ECC)
    struct.pack_into("<H", raw, 0x0A, width)           # data width
    struct.pack_into("<H", raw, 0x0C, size_mb)
    struct.pack_into("<H", raw, 0x15, speed)
    struct.pack_into("<H", raw, 0x20, configured)
    return bytes(raw)


def test_dimm_bandwidth_from_smbios(tmp_path):
    for i, raw in enumerate([smbios_17(32768, 64, 5600, 4800), smbios_17(32768, 64, 5600, 4800),
                             smbios_17(0, 64, 0, 0)]):                      # an empty slot
        (tmp_path / f"17-{i}").mkdir()
        (tmp_path / f"17-{i}" / "raw").write_bytes(raw)
    bw, basis = dimm_bandwidth(tmp_path)
    assert bw == pytest.approx(2 * 4800e6 * 8) and "2 DIMMs" in basis      # configured speed, not the rated one
    assert dimm_bandwidth(tmp_path / "missing")[0] is None


def test_server_platform_bandwidth():
    bw, basis = platform_bandwidth("AuthenticAMD", 0x1A, 0x02, "AMD EPYC", sockets=2)
    assert bw == pytest.approx(2 * 12 * 6400e6 * 8) and "Turin" in basis
    assert platform_bandwidth("AuthenticAMD", 0x1A, 0x44, "AMD Ryzen 9 9950X")[0] is None   # a desktop part
    assert platform_bandwidth("GenuineIntel", 6, 0x8F, "Intel(R) Xeon(R) Platinum 8480+")[0] == pytest.approx(307.2e9)


def test_cpu_limits_keep_attainable_beside_the_peaks(monkeypatch):
    from infbench.detect.platforms import cpu_isa

    monkeypatch.setattr(cpu_isa, "dimm_bandwidth", lambda: (None, "no SMBIOS memory devices"))
    d = cpu("Intel(R) Xeon(R) Gold 6248 CPU", ["avx2", "fma", "avx512f"], 20)
    att = {"attainable_bandwidth_bytes_s": 90e9, "attainable_flops": {"fp32": 2.1e12}, "source": "measured"}
    lim = cpu_limits(d, {"max_clock_ghz": 3.9, "cores": 20}, att)
    assert lim["peak_flops"]["fp32"] == pytest.approx(4.992e12)
    assert lim["attainable"]["flops"]["fp32"] == 2.1e12 and lim["attainable"]["memory_bandwidth_bytes_s"] == 90e9
    # no DIMM table, no known server line, no declared figure: the bandwidth is the attainable one, named so
    assert lim["bandwidth_kind"] == "attainable" and lim["memory_bandwidth_bytes_s"] == 90e9
    assert "memory_bandwidth_gb_s" in lim["bandwidth_basis"]
    declared = cpu_limits(d, {"max_clock_ghz": 3.9, "cores": 20, "memory_bandwidth_gb_s": 140.8}, att)
    assert declared["bandwidth_kind"] == "theoretical"
    assert declared["memory_bandwidth_bytes_s"] == pytest.approx(140.8e9)
