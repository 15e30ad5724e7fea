"""`infbench predict` at the boundary (issue 22): figures no hardware or model can have, the help's
spelling of the peak key, device files read strictly."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli


@pytest.mark.parametrize("flags, message", [
    (["-b", "0"], "--batch"), (["-b", "-4"], "--batch"), (["--input", "-5"], "--input"),
    (["--output", "0"], "--output"), (["--tp", "0"], "--tp"), (["--pp", "-1"], "--pp"),
    (["--set", "memory_bandwidth_tb_s=inf"], "finite"), (["--set", "memory_bandwidth_tb_s=-3"], "above 0"),
    (["--set", "memory_bandwidth_tb_s=nan"], "finite"), (["--set", "peak__tflops=5"], "unknown key 'peak__tflops'"),
    (["--set", "peak_fp64_tflops=5"], "unknown key"), (["--set", "memory_gib=1e300"], "at most"),
    (["--eff-compute", "2"], "--eff-compute"), (["--eff-memory", "0"], "--eff-memory"),
    (["--acceptance", "nan"], "--acceptance"), (["--moe-imbalance", "-1"], "--moe-imbalance"),
    (["--overhead-ms", "inf"], "--overhead-ms"), (["--spec-k", "0"], "--spec-k"), (["--ep", "0"], "--ep"),
    (["--slo-ttft", "-1"], "--slo-ttft"),
])
def test_predict_refuses_what_no_hardware_or_model_can_be(flags, message):
    """``predict`` accepted a negative input length, a batch of -4, ``--set
    memory_bandwidth_tb_s=inf`` and printed negative throughput; ``-b 0`` was an internal
    error; ``peak__tflops`` (as ``--help`` spelt it) was silently ignored."""
    r = cli("predict", "-m", "llama-3-8b", "-d", "h100-sxm", *flags)
    assert message in r.output, r.output


def test_predict_help_spells_the_peak_key():
    r = cli("predict", "--help", code=0)
    assert "peak_PRECISION_tflops" in r.output and "peak__tflops" not in r.output


@pytest.mark.parametrize("content, message", [
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: -3\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     ":4: device x: bandwidth_tb_s -3 is outside"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 1.0e+308\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     ":4: device x: bandwidth_tb_s 1e+308 is outside"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: .nan\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     "finite"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 2\n  peak_tflops: {bf16: -1}\n  sources: [a]\n",
     "peak_tflops.bf16"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 2\n  peak_tflops: {bf16: 1}\n  tdp_w: true\n"
     b"  sources: [a]\n", "tdp_w must be a finite number"),
    (b"42\n", "holds a list of devices, got int"),
    (b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe binary", "not UTF-8"),
    (b"- id: x\n  id: y\n", "duplicate key"),
    (b"[" * 100 + b"]" * 100, "nesting deeper"),
    (b"- [1, 2]\n", "not a mapping"),
])
def test_device_files_are_read_strictly(tmp_path, content, message):
    """``--device-file`` with 1e308, a scalar or binary content was an internal error, and a
    negative bandwidth gave negative throughput."""
    f = tmp_path / "dev.yaml"
    f.write_bytes(content)
    r = cli("predict", "-m", "llama-3-8b", "--device-file", f)
    assert str(f) in r.output and message in " ".join(r.output.split()), r.output

