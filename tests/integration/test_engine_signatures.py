"""The accelerator-only engines' adapters against the real engine packages.

DeepSpeed-MII, SGLang and optimum-habana cannot run on this CPU-only host, but their Python
packages install (scripts/engine_venvs.sh, one venv each: their pins conflict with each other
and with infbench's). What each adapter builds here (the ``mii.pipeline`` keywords and
``GenerateParamsConfig`` fields, MII's and SGLang's server command lines and request bodies,
the ``GaudiGenerationConfig`` settings and ``generate`` flags, the random-weight checkpoint) is
handed to a probe script run inside that venv (tests/signatures/probe_*.py), which checks it
with the package's own code: signatures, pydantic models, argument parsers, the checkpoint
loader, the metric names. Nothing of a GPU path runs; what does not install or import here is
listed in docs/plugins.md.

The venvs live in ``.venvs/`` (``$INFBENCH_ENGINE_VENVS`` elsewhere); missing ones fail under CI
(scripts/setup.sh builds them) and skip elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.schema import Cell, DeviceInfo
from infbench.engines.hf_checkpoint import dummy_checkpoint

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "tests" / "signatures"
H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=1, memory_bytes=80 * 2**30,
                  properties={"compute_capability": "9.0"})


def venv_python(name: str) -> Path:
    """The interpreter of the engine venv ``name`` (fails under CI when missing, else skips)."""
    base = Path(os.environ.get("INFBENCH_ENGINE_VENVS") or ROOT / ".venvs")
    py = base / name / "bin" / "python"
    if not py.exists():
        msg = f"no {name} venv at {base} (bash scripts/engine_venvs.sh builds it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return py


def probe(name: str, script: str, spec: dict) -> dict:
    """Run ``tests/signatures/<script>`` in venv ``name`` with ``spec`` on stdin; its JSON answer."""
    p = subprocess.run([str(venv_python(name)), str(PROBES / script)], input=json.dumps(spec), capture_output=True,
                       text=True, timeout=300, cwd=str(PROBES))
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def group(engine: str, dtype: str, tp: int = 1, batch=(1, 8)) -> Group:
    m = resolve("tiny-random-llama")
    cells = [Cell(model=m.name, engine=engine, dtype=dtype, batch=b, input_len=200, output_len=100) for b in batch]
    return Group(m, engine, dtype, tp, cells)


def test_sglang_command_line_request_log_and_metrics_against_sglang():
    from infbench.engines.sglang_server import SglangServerEngine, sglang_args, sglang_argv, sglang_log_device
    from infbench.measure.server_metrics import SERVERS

    g = group("sglang-server", "bfloat16", tp=2)
    args = sglang_args(g, H100, {"mem_fraction_static": 0.8, "startup_timeout_s": 60, "chunked_prefill_size": 4096})
    argv = sglang_argv(args, 31234)
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    eng = SglangServerEngine(H100, {"served_model": "tiny-random-llama"})
    body = eng.payload(g.cells[0], list(range(5, 205)))
    fields = ["model_path", "tokenizer_path", "load_format", "dtype", "tp_size", "max_running_requests",
              "context_length", "random_seed", "served_model_name", "disable_radix_cache", "enable_metrics",
              "log_level", "host", "port", "mem_fraction_static", "chunked_prefill_size"]
    out = probe("sglang", "probe_sglang.py", {"argv": argv[3:], "fields": fields, "payload": body, "tp_size": 2})
    parsed = out["parsed"]
    assert parsed["model_path"] == parsed["tokenizer_path"] == args["model_path"]
    assert parsed["load_format"] == "dummy" and parsed["dtype"] == "bfloat16" and parsed["tp_size"] == 2
    assert parsed["max_running_requests"] == 8 and parsed["context_length"] == 512 and parsed["random_seed"] == 0
    assert parsed["disable_radix_cache"] is True and parsed["enable_metrics"] is True
    assert parsed["host"] == "127.0.0.1" and parsed["port"] == 31234 and parsed["log_level"] == "info"
    assert parsed["served_model_name"] == "tiny-random-llama"
    assert parsed["mem_fraction_static"] == 0.8 and parsed["chunked_prefill_size"] == 4096     # passed through
    assert out["request"] == {"prompt": list(range(5, 205)), "ignore_eos": True, "min_tokens": 100, "max_tokens": 100}
    # the device proof reads the line SGLang logs
    assert out["logs_server_args"] is True
    seen = sglang_log_device(out["log_line"])
    assert seen["device"] == "cuda" and seen["tp_size"] == 2
    # every name infbench's SGLang metrics profile reads is one SGLang's collector registers
    sg = next(p for p in SERVERS if p.name == "sglang")
    wanted = {n for attr in ("running", "waiting", "kv_usage", "preemptions", "prefix_hits", "prefix_queries",
                             "prefix_hit_rate", "spec_rate", "ttft", "queue_time") for n in getattr(sg, attr)}
    wanted |= {sg.tpot[0]}
    assert wanted <= set(out["metric_names"]), wanted - set(out["metric_names"])


def test_sglang_native_options_are_serverargs_fields():
    py = venv_python("sglang")
    code = ("from sglang.srt.arg_groups.arg_utils import record_fields;from sglang.srt.server_args import ServerArgs;"
            "print(' '.join(f.name for f in record_fields(ServerArgs)))")
    names = set(subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120,
                               check=True).stdout.split())
    from infbench.engines.sglang_server import ADAPTER_OPTIONS, sglang_args

    set_by_adapter = set(sglang_args(group("sglang-server", "bfloat16"), H100, {}))
    assert set_by_adapter <= names, set_by_adapter - names
    assert not set(ADAPTER_OPTIONS) & names          # no adapter option shadows a ServerArgs field


def test_mii_pipeline_stream_loop_checkpoint_and_server_against_mii(tmp_path):
    from infbench.engines.mii_engine import (
        MiiServerEngine,
        generate_kwargs,
        max_length,
        pipeline_kwargs,
        server_argv,
    )

    g = group("deepspeed-mii", "bfloat16")
    ckpt = dummy_checkpoint(g.model, "bfloat16", tmp_path)
    kw = pipeline_kwargs(g, {"sync_debug": False, "n_threads": 4})
    argv = server_argv(str(ckpt), 28080, 2, max_length(g), "infbench-tiny-28080")
    assert argv[1:3] == ["-m", "infbench.engines.mii_serve"]
    eng = MiiServerEngine(H100, {"served_model": str(ckpt)})
    body = eng.payload(g.cells[0], "t5 t6 t7")
    out = probe("mii", "probe_mii.py", {"checkpoint": str(ckpt), "pipeline_kwargs": kw,
                                        "generate_kwargs": generate_kwargs(100), "prompt": [5, 6, 7],
                                        "server_argv": argv[3:], "payload": body})
    assert out["pipeline_bound"] and out["leftover"] == []
    assert out["model_config"] == {"model_name_or_path": str(ckpt), "tensor_parallel": 1, "max_length": 512}
    # a streamed request puts its token on the queue at once, as the adapter's loop expects
    ((uid, tokens, n_in, _n_gen, finish, stream),) = out["stream_outputs"]
    assert (uid, tokens, n_in, finish, stream) == (7, [42], 3, "none", True)
    assert out["generate_params"] == {"max_new_tokens": 100, "min_new_tokens": 100, "ignore_eos": True,
                                      "do_sample": False, "stream": True}
    assert out["pipeline_members"]["make_request"] == ["self", "tid", "uid", "input_tokens", "kwargs"]
    assert out["pipeline_members"]["_queue_flush_request"] == ["self", "uid"]
    assert out["pipeline_members"]["_bcast_requests"] == ["self", "force"]
    assert set(out["pipeline_members"]) >= {"generate", "flush", "destroy"}
    assert out["pipeline_state"] == ["self.request_queue", "self.result_queues", "self.scheduled_requests"]
    # DeepSpeed's checkpoint loader reads every tensor the writer put in the folder
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    assert out["checkpoint_params"] == sorted(index["weight_map"])
    s = out["server_args"]
    assert (s["model"], s["host"], s["port"], s["tensor_parallel"], s["max_length"], s["deployment_name"]) == (
        str(ckpt), "127.0.0.1", 28080, 2, 512, "infbench-tiny-28080")
    # the completions handler turns the body into generation arguments MII's GenerateParamsConfig accepts (the
    # probe validates them): no temperature sent (MII requires > 0), so its request default applies
    gen = out["server_generate"]["kwargs"]
    assert out["server_generate"]["prompts"] == ["t5 t6 t7"] and "temperature" not in body
    assert gen["max_new_tokens"] == 100 and gen["min_new_tokens"] == 100 and gen["temperature"] > 0


def test_optimum_habana_generation_config_and_generate_against_optimum_habana():
    from infbench.engines.optimum_habana_engine import generate_flags, generation_settings

    settings = generation_settings({"trim_logits": True, "attn_softmax_bf16": True, "use_flash_attention": True,
                                    "bucket_size": 128, "bucket_internal": True, "reuse_cache": False}, True, 100)
    flags = generate_flags({})
    out = probe("optimum-habana", "probe_optimum_habana.py", {"settings": settings, "flags": flags,
                                                              "model_type": "llama"})
    assert out["unknown_settings"] == []
    assert out["generate_named"] == ["lazy_mode", "hpu_graphs"] and out["ignore_eos_read"] is True
    assert out["adapt_params"] == [] and out["optimized"] is True
