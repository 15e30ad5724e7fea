"""Planning: grid expansion, grouping, stable ids, and every bad input's message."""

import pytest

from infbench.data.errors import ConfigError
from infbench.data.schema import Cell, DeviceInfo, Sweep
from infbench.plan import plan
from infbench.plan.sweeps import build_sweep


def sweep(**kw):
    base = dict(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1],
                input_len=[16], output_len=[4])
    base.update(kw)
    return Sweep(**base)


def test_grid_and_groups(pm, cpu):
    p = plan(sweep(dtypes=["f16", "q8_0"], batch=[4, 1], input_len=[16, 32], output_len=[4]), cpu, pm)
    assert len(p.groups) == 2                         # one loaded model per dtype
    assert [len(g.cells) for g in p.groups] == [4, 4]
    assert [c.batch for c in p.groups[0].cells] == [1, 1, 4, 4]  # smallest first


def test_dtype_aliases_resolve_per_engine(pm, cpu):
    p = plan(sweep(dtypes=["fp16"], engines=["llama.cpp", "transformers"]), cpu, pm)
    assert sorted({(g.engine, g.dtype) for g in p.groups}) == [("llama.cpp", "f16"), ("transformers", "float16")]


def test_cell_ids_stable_and_device_dependent(cpu):
    c = Cell(model="m", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2)
    same = Cell(model="m", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2, warmup=3)
    other_dev = cpu.model_copy(update={"model": "Other CPU"})
    assert c.cell_id(cpu) == same.cell_id(cpu)       # warm-up does not change the workload
    assert c.spec_hash() == same.spec_hash()
    assert c.cell_id(cpu) != c.cell_id(other_dev)
    assert c.spec_hash() != c.model_copy(update={"batch": 2}).spec_hash()


def test_unknown_engine(pm, cpu):
    with pytest.raises(ConfigError, match="unknown engine 'lama.cpp'") as e:
        plan(sweep(engines=["lama.cpp"]), cpu, pm)
    assert "llama.cpp" in e.value.hint


def test_unknown_dtype_lists_allowed(pm, cpu):
    with pytest.raises(ConfigError, match="dtype 'fp8' is not available") as e:
        plan(sweep(dtypes=["fp8"]), cpu, pm)
    assert "q8_0" in e.value.hint


def test_precision_unsupported_on_device(pm):
    old = DeviceInfo(vendor="cpu", kind="cpu", model="Old Xeon", properties={"isa_flags": ["avx", "avx2", "f16c"]})
    with pytest.raises(ConfigError, match="precision bf16") as e:
        plan(sweep(dtypes=["bf16"]), old, pm)
    assert "fp32, fp16" in e.value.hint


def test_tp_larger_than_device_count(pm, cpu):
    with pytest.raises(ConfigError, match="tensor_parallel_size 64"):
        plan(sweep(tensor_parallel_size=[64]), cpu, pm)


def test_engine_not_on_platform(pm):
    gpu = DeviceInfo(vendor="othergpu", kind="gpu", model="X")
    with pytest.raises(ConfigError, match="does not run on othergpu"):
        plan(sweep(), gpu, pm)


def test_lengths_beyond_the_context_are_refused(pm, cpu):
    """Issue 33: input + output past the model's context is refused when planned (it was a
    warning; llama.cpp then sized its context for it)."""
    with pytest.raises(ConfigError, match=r"2,000 input \+ 100 output tokens \(2,100 together\) exceeds the "
                                          r"model's context of 2,048"):
        plan(sweep(input_len=[2000], output_len=[100]), cpu, pm)
    assert plan(sweep(input_len=[2000], output_len=[48]), cpu, pm).cells  # exactly the context: fine


def test_build_sweep_layers(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("preset: paper\nmodels: [qwen2.5-0.5b]\nbatch: 2\n")
    s = build_sweep(None, f, batch=[8, 16], output_len=None)
    assert s.models == ["qwen2.5-0.5b"] and s.batch == [8, 16]   # flag beats file beats preset
    assert s.input_len == [128, 256, 512, 1024, 2048]             # from the paper preset


def test_build_sweep_errors(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("bach: [1]\n")
    with pytest.raises(ConfigError, match="unknown field 'bach'") as e:
        build_sweep(None, f)
    assert "batch" in e.value.hint and "did you mean: batch" in e.value.message
    f.write_text("models: [a\nb: c")
    with pytest.raises(ConfigError, match="not valid YAML at line 2"):
        build_sweep(None, f)
    f.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        build_sweep(None, f)
    f.write_text("batch: [0, 4]\n")
    with pytest.raises(ConfigError, match="'batch'.*positive"):
        build_sweep(None, f)
    with pytest.raises(ConfigError, match="unknown preset 'papr'"):
        build_sweep("papr", None)
    with pytest.raises(ConfigError, match="not found"):
        build_sweep(None, tmp_path / "nope.yaml")


def test_engine_args_parsed_as_yaml_scalars():
    from infbench.data.errors import ConfigError
    from infbench.engines.options import parse_engine_args

    got = parse_engine_args(["quantization=fp8", "gpu-memory-utilization=0.85", "enforce_eager=true",
                             "max_num_batched_tokens=8192", "kv_cache_dtype=", "x={a: 1}"])
    assert got == {"quantization": "fp8", "gpu_memory_utilization": 0.85, "enforce_eager": True,
                   "max_num_batched_tokens": 8192, "kv_cache_dtype": "", "x": "{a: 1}"}
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        parse_engine_args(["oops"])
