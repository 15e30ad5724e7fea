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
