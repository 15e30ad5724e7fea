"""CPU plugin: precisions from ISA flags, device info of this host."""

from infbench.detect.platforms.cpu import isa_flags, precisions_from_flags


def test_precisions_from_flags():
    assert precisions_from_flags([], "X86_64") == ["fp32"]
    assert precisions_from_flags(["avx2", "f16c"]) == ["fp32", "fp16", "int8", "int4"]
    assert precisions_from_flags(["avx2", "f16c", "avx512_bf16"]) == ["fp32", "fp16", "bf16", "int8", "int4"]
    assert "bf16" in precisions_from_flags(["amx_bf16"])
    assert precisions_from_flags(["asimd", "asimdhp", "bf16"], "ARM_8") == ["fp32", "fp16", "bf16", "int8", "int4"]


def test_isa_flag_spellings():
    assert isa_flags({"avx512bf16", "avx2"}) == ["avx2", "avx512_bf16"]


def test_this_host(cpu, pm):
    assert cpu.vendor == "cpu" and cpu.kind == "cpu" and cpu.count >= 1
    assert cpu.memory_bytes > 2**28 and cpu.properties["logical_cpus"] >= 1
    [dev] = [d for ds in pm.hook.infbench_detect() for d in ds if d.vendor == "cpu"]
    assert dev.model == cpu.model
    sampler = pm.hook.infbench_power_sampler(device=cpu)
    assert sampler is not None and (sampler.available or "power unavailable" in sampler.reason)


def test_cpuinfo_is_kept_for_this_boot_and_cpu_only(tmp_path, monkeypatch):
    """py-cpuinfo's answer (a process of its own, about 1 s) is kept in a file and read back
    while the boot and the CPU are the same; another boot, another CPU (a VM moved), another
    py-cpuinfo version or an unreadable file ask py-cpuinfo again; without /proc nothing is kept."""
    import cpuinfo

    from infbench.detect.platforms import cpu as cpu_mod

    calls: list[int] = []

    def fake_info():
        calls.append(1)
        return {"brand_raw": f"Fake CPU {len(calls)}", "flags": ["avx2"], "hz_advertised": [2.0e9, 0]}

    monkeypatch.setattr(cpuinfo, "get_cpu_info", fake_info)
    boot, proc = tmp_path / "boot_id", tmp_path / "cpuinfo"
    boot.write_text("b-1\n")
    proc.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Fake\ncpu MHz\t\t: 2000.1\n"
                    "flags\t\t: avx2\n\nprocessor\t: 1\n")
    real_key = cpu_mod.cpuinfo_key
    monkeypatch.setattr(cpu_mod, "cpuinfo_key", lambda: real_key(proc, boot))
    kept = tmp_path / "home" / "cpuinfo.json"
    first = cpu_mod.cached_cpuinfo(kept)
    assert first["brand_raw"] == "Fake CPU 1" and cpu_mod.cached_cpuinfo(kept) == first
    assert len(calls) == 1 and kept.is_file()
    proc.write_text(proc.read_text().replace("2000.1", "3100.0"))          # the clock of the moment: same CPU
    assert cpu_mod.cached_cpuinfo(kept) == first and len(calls) == 1
    proc.write_text(proc.read_text().replace("flags\t\t: avx2", "flags\t\t: avx2 avx512f"))   # another CPU
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 2" and len(calls) == 2
    boot.write_text("b-2\n")                                                # a reboot
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 3" and len(calls) == 3
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 3" and len(calls) == 3
    monkeypatch.setattr(cpuinfo, "CPUINFO_VERSION_STRING", "99.0.0")         # another py-cpuinfo
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 4" and len(calls) == 4
    kept.write_text("{broken")
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 5" and len(calls) == 5
    boot.unlink()                                                           # not Linux: nothing kept
    assert cpu_mod.cpuinfo_key() is None
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 6"
    assert cpu_mod.cached_cpuinfo(kept)["brand_raw"] == "Fake CPU 7" and len(calls) == 7
