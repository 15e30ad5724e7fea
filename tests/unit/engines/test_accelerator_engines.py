"""DeepSpeed-MII, SGLang and optimum-habana adapters on this CPU host: option checking, the
command lines and API calls they build, the refusal of a stand-in GPU/Gaudi before anything
loads, their device proof from a server log, and their availability rows in `detect`.
Their calls are checked against the real packages in tests/integration/test_engine_signatures.py."""

from __future__ import annotations

import json
import types

import pytest

from infbench import hookimpl
from infbench.contract.registry import engine_specs
from infbench.data.errors import ConfigError, DeviceMismatch
from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.schema import Cell, DeviceInfo
from infbench.engines import availability as av
from infbench.engines.options import unknown_engine_args

H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=1, memory_bytes=80 * 2**30,
                  properties={"compute_capability": "9.0"})
V100 = H100.model_copy(update={"model": "Tesla V100-SXM2-32GB", "properties": {"compute_capability": "7.0"}})
MI300X = DeviceInfo(vendor="amd", kind="gpu", model="AMD Instinct MI300X", count=1, memory_bytes=192 * 2**30,
                    properties={"gfx_version": "gfx942"})
GAUDI2 = DeviceInfo(vendor="habana", kind="accelerator", model="HL-225", count=1, memory_bytes=96 * 2**30)
MII_FIX = "pip install deepspeed-mii requests uvicorn pydantic-settings"
CUDA_TORCH = {"version": "2.8.0+cu128", "cuda": "12.8", "hip": None, "cuda_devices": ["NVIDIA H100 80GB HBM3"],
              "xpu_devices": [], "hpu_devices": []}


class FakeDetect:
    def __init__(self, device):
        self.device = device

    @hookimpl
    def infbench_detect(self):
        return [self.device]


def group(engine: str, dtype: str, tp: int = 1, batch=(1, 8), model: str = "tiny-random-llama") -> Group:
    m = resolve(model)
    cells = [Cell(model=m.name, engine=engine, dtype=dtype, batch=b, input_len=200, output_len=100) for b in batch]
    return Group(m, engine, dtype, tp, cells)


def backends(pm, device):
    return av.device_backends(pm, device)


# --- options ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("engine", "good", "bad", "hint"), [
    ("sglang-server", "startup_timeout_s", "startup_timeout", "startup_timeout_s"),
    ("deepspeed-mii-server", "prompt_format", "prompt_fromat", "prompt_format"),
    ("deepspeed-mii", "n_threads", "n_thread", "n_threads"),
    ("optimum-habana", "trim_logits", "trim_logit", "trim_logits"),
])
def test_engine_args_outside_the_declared_options_are_refused(pm, engine, good, bad, hint):
    specs = engine_specs(pm)
    unknown_engine_args(specs, [engine], [good])             # accepted
    with pytest.raises(ConfigError) as e:
        unknown_engine_args(specs, [engine], [bad])
    assert e.value.message == f"--engine-arg {bad} (did you mean: {hint}?): not an option of {engine}"


def test_optimum_habana_declares_the_example_generation_flags(pm):
    from infbench.engines.optimum_habana_engine import GAUDI_GENERATION_OPTIONS

    spec = engine_specs(pm)["optimum-habana"]
    assert {"use_hpu_graphs", "lazy_mode", "n_threads"} | set(GAUDI_GENERATION_OPTIONS) == set(spec.options)


def test_platforms_and_dtypes_come_from_the_vendor_plugins(pm):
    specs = engine_specs(pm)
    assert specs["deepspeed-mii"].platforms == ["nvidia"] == specs["deepspeed-mii-server"].platforms
    assert specs["sglang-server"].platforms == ["amd", "nvidia"] and specs["sglang-server"].serving
    assert specs["optimum-habana"].platforms == ["habana"]
    assert list(specs["deepspeed-mii"].dtypes) == ["float16", "bfloat16"]
    assert specs["sglang-server"].resolve_dtype("bf16") == "bfloat16"
    assert specs["optimum-habana"].resolve_dtype("bf16") == "bfloat16" and list(specs["optimum-habana"].dtypes)[0] \
        == "bfloat16"


# --- what the adapters build --------------------------------------------------------------------

def test_sglang_arguments_and_command_line():
    from infbench.engines.sglang_server import sglang_args, sglang_argv

    g = group("sglang-server", "bfloat16", tp=2)
    args = sglang_args(g, H100, {"mem_fraction_static": 0.85, "startup_timeout_s": 60, "served_model": "x",
                                 "json_model_override_args": {"a": 1}})
    assert args["load_format"] == "dummy" and args["tp_size"] == 2 and args["max_running_requests"] == 8
    assert args["context_length"] == 512 and args["disable_radix_cache"] is True and args["enable_metrics"] is True
    assert "startup_timeout_s" not in args and "served_model" not in args and args["mem_fraction_static"] == 0.85
    assert json.load(open(f"{args['model_path']}/config.json"))["hidden_size"] == g.model.config["hidden_size"]
    argv = sglang_argv(args, 30123)
    assert argv[1:7] == ["-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", "30123"]
    assert argv[argv.index("--load-format") + 1] == "dummy" and argv[argv.index("--tp-size") + 1] == "2"
    assert "--enable-metrics" in argv and "--disable-radix-cache" in argv
    assert argv[argv.index("--json-model-override-args") + 1] == '{"a": 1}'
    # the prefix cache is measured only when asked for: the flag is left out
    assert "--disable-radix-cache" not in sglang_argv(sglang_args(g, H100, {"disable_radix_cache": False}), 1)


def test_sglang_refuses_gguf_and_unknown_models():
    from infbench.data.models import ModelShape
    from infbench.engines.sglang_server import sglang_args

    g = group("sglang-server", "bfloat16")
    with pytest.raises(ConfigError, match="llama.cpp-server"):
        sglang_args(Group(ModelShape(name="m", config={}, path="/x/m.gguf"), "sglang-server", "bfloat16", 1, g.cells),
                    H100, {})
    with pytest.raises(ConfigError, match="not a zoo model"):
        sglang_args(Group(ModelShape(name="org/m", config={}), "sglang-server", "bfloat16", 1, g.cells), H100, {})


def test_mii_pipeline_and_generation_arguments():
    from infbench.engines.mii_engine import generate_kwargs, max_length, pipeline_kwargs

    g = group("deepspeed-mii", "float16")
    assert pipeline_kwargs(g, {"n_threads": 2, "quantization_mode": "wf6af16", "max_length": 9}) == {
        "tensor_parallel": 1, "max_length": 512, "quantization_mode": "wf6af16"}
    assert max_length(g) == 512
    assert generate_kwargs(64) == {"max_new_tokens": 64, "min_new_tokens": 64, "ignore_eos": True, "do_sample": False,
                                   "stream": True, "return_full_text": False}
    with pytest.raises(ConfigError, match="deepspeed-mii-server"):
        pipeline_kwargs(group("deepspeed-mii", "float16", tp=2), {})


def test_mii_checkpoint_is_written_at_the_dtype_and_a_real_folder_must_match(tmp_path):
    from infbench.data.models import ModelShape
    from infbench.engines.mii_engine import model_folder

    g = group("deepspeed-mii", "bfloat16", batch=(1,))
    path, dummy = model_folder(g)
    cfg = json.load(open(f"{path}/config.json"))
    assert dummy and cfg["torch_dtype"] == "bfloat16"
    index = json.load(open(f"{path}/model.safetensors.index.json"))
    assert "model.embed_tokens.weight" in index["weight_map"]
    assert model_folder(g) == (path, True)                                      # cached
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    with pytest.raises(ConfigError, match="--dtype float16"):
        model_folder(Group(ModelShape(name="r", config={}, path=str(real)), "deepspeed-mii", "bfloat16", 1, g.cells))
    with pytest.raises(ConfigError, match="unknown"):
        model_folder(group("deepspeed-mii", "float32", batch=(1,)))


def test_mii_server_command_payload_and_text_prompts():
    from infbench.engines.mii_engine import MiiServerEngine, server_argv

    argv = server_argv("/ck", 28000, 2, 512, "infbench-x")
    assert argv[1:] == ["-m", "infbench.engines.mii_serve", "--model", "/ck", "--host", "127.0.0.1", "--port",
                        "28000", "--tensor-parallel", "2", "--max-length", "512", "--deployment-name", "infbench-x"]
    eng = MiiServerEngine(H100, {"served_model": "/ck"})
    cell = group("deepspeed-mii-server", "float16").cells[0]
    body = eng.payload(cell, "t5 t6")
    assert "temperature" not in body and body["min_tokens"] == 100 and body["prompt"] == "t5 t6"
    assert body["model"] == "/ck"
    eng._model = resolve("tiny-random-llama")                 # dummy vocabulary: one token per word
    assert len(eng.map_text("the cat sat on the mat").split()) == 6
    with pytest.raises(ConfigError, match="text prompts only"):
        MiiServerEngine(H100, {"prompt_format": "token_ids"}).start(group("deepspeed-mii-server", "float16"))


def test_optimum_habana_generation_settings_and_flags():
    from infbench.engines.optimum_habana_engine import generate_flags, generation_settings

    s = generation_settings({"trim_logits": True, "n_threads": 4, "use_hpu_graphs": False}, True, 32)
    assert s == {"max_new_tokens": 32, "min_new_tokens": 32, "use_cache": True, "static_shapes": True,
                 "bucket_size": -1, "ignore_eos": True, "do_sample": False, "num_beams": 1, "trim_logits": True}
    assert generation_settings({}, False, 8)["static_shapes"] is False
    assert generate_flags({}) == {"lazy_mode": True, "hpu_graphs": True, "ignore_eos": True}
    assert generate_flags({"use_hpu_graphs": False, "lazy_mode": False})["lazy_mode"] is False
    with pytest.raises(ConfigError, match="HPU graphs need lazy mode"):
        generate_flags({"lazy_mode": False})


# --- refusal on a stand-in accelerator (this host's torch is a CPU build) --------------------

@pytest.mark.parametrize(("device", "factory"), [
    (H100, "infbench.engines.mii_engine:MiiEngine"),
    (H100, "infbench.engines.mii_engine:MiiServerEngine"),
    (H100, "infbench.engines.sglang_server:SglangServerEngine"),
    (MI300X, "infbench.engines.sglang_server:SglangServerEngine"),
    (GAUDI2, "infbench.engines.optimum_habana_engine:OptimumHabanaEngine"),
])
def test_a_stand_in_accelerator_is_refused_before_anything_loads(pm, tmp_path, device, factory):
    import importlib

    from infbench.engines.device_proof import start_on_device

    mod, cls = factory.split(":")
    eng = getattr(importlib.import_module(mod), cls)(device, {})
    g = group(eng.name, "bfloat16" if eng.name != "deepspeed-mii-server" else "float16")
    with pytest.raises(DeviceMismatch) as e:
        start_on_device(eng, g, backends(pm, device))
    msg = e.value.cell_error()
    assert msg.startswith(f"device check failed: {eng.name} does not run on {device.vendor} {device.model}: ")
    want = {"nvidia": "has no CUDA", "amd": "has no ROCm", "habana": "has no HPU support"}[device.vendor]
    assert want in msg and "would have run on the CPU" in msg
    assert eng.device_proof is None and getattr(eng, "server", None) is None      # nothing started
    assert not (tmp_path / "home" / "cache" / "hf-weights").exists()


def test_mii_refuses_a_gpu_older_than_ampere_and_rocm(pm, monkeypatch):
    from infbench.engines.mii_engine import check_mii

    monkeypatch.setattr(av, "torch_probe", lambda: CUDA_TORCH)
    import infbench.engines.mii_engine as me

    monkeypatch.setattr(me, "torch_probe", lambda: CUDA_TORCH)
    monkeypatch.setattr(me, "mii_version", lambda: "0.3.3")
    assert check_mii(H100, backends(pm, H100)).usable
    old = check_mii(V100, backends(pm, V100))
    assert old.status == av.UNSUPPORTED and "compute capability 7.0" in old.reason
    amd = check_mii(MI300X, backends(pm, MI300X))
    assert amd.status == av.UNSUPPORTED and "NVIDIA GPUs (CUDA) only" in amd.reason


def test_checks_say_usable_when_the_library_has_the_backend(pm, monkeypatch):
    import infbench.engines.optimum_habana_engine as oh
    import infbench.engines.sglang_server as sg

    rocm = {**CUDA_TORCH, "cuda": None, "hip": "6.4", "cuda_devices": ["AMD Instinct MI300X"]}
    monkeypatch.setattr(sg, "torch_probe", lambda: rocm)
    monkeypatch.setattr(sg, "sglang_version", lambda: "0.5.23")
    s = sg.check_sglang(MI300X, backends(pm, MI300X))
    assert s.usable and "sglang 0.5.23" in s.reason and "(hip)" in s.reason
    hpu = {**CUDA_TORCH, "cuda": None, "cuda_devices": [], "hpu_devices": ["GAUDI2"]}
    monkeypatch.setattr(oh, "torch_probe", lambda: hpu)
    monkeypatch.setattr(oh, "torch_backend_problem", lambda t, k: None)
    monkeypatch.setattr(oh, "optimum_habana_version", lambda: None)
    assert oh.check_optimum_habana(GAUDI2, backends(pm, GAUDI2)).status == av.MISSING
    monkeypatch.setattr(oh, "optimum_habana_version", lambda: "1.19.1")
    assert oh.check_optimum_habana(GAUDI2, backends(pm, GAUDI2)).usable


# --- device proof from the servers' own logs ---------------------------------------------------

def _served(eng, tmp_path, text: str):
    log = tmp_path / "server.log"
    log.write_text(text)
    eng.server = types.SimpleNamespace(log_path=log)
    return eng


def test_sglang_proof_reads_the_device_its_log_names(tmp_path):
    from infbench.engines.sglang_server import SglangServerEngine

    g = group("sglang-server", "bfloat16")
    line = "[2026] server_args={'model_path': '/m', 'draft_device': 'cpu', 'attn_tp_size': 8, 'device': 'cuda', " \
           "'tp_size': 1}\n" \
           "[2026 TP0] Load weight end. elapsed=1.2 s, type=LlamaForCausalLM, avail mem=70.51 GB, mem usage=0.2 GB.\n"
    proof = _served(SglangServerEngine(H100, {}), tmp_path, line).verify_device(g)
    assert proof["device"] == "cuda" and proof["tp_size"] == 1 and proof["avail_mem_gb_after_load"] == [70.51]
    old = "server_args=ServerArgs(model_path='/m', tp_size=1, device='cuda', dtype='auto')"   # SGLang 0.4 spells it so
    assert _served(SglangServerEngine(H100, {}), tmp_path, old).verify_device(g)["device"] == "cuda"
    for bad, why in (("server_args={'device': 'cpu', 'tp_size': 1}", "runs on cpu"), ("nothing", "does not say"),
                     ("server_args={'device': 'cuda', 'tp_size': 4}", "tp_size=4")):
        with pytest.raises(DeviceMismatch, match=why):
            _served(SglangServerEngine(H100, {}), tmp_path, bad).verify_device(g)


def test_mii_server_proof_reads_the_wrapper_line_and_deepspeed_accelerators(tmp_path):
    from infbench.engines.mii_engine import MiiServerEngine

    g = group("deepspeed-mii-server", "float16")
    ok = ('infbench-mii-device: {"torch": "2.4.0", "cuda": "12.1", "devices": ["NVIDIA H100 80GB HBM3"], '
          '"ds_accelerator": "cuda"}\n[INFO] Setting ds_accelerator to cuda (auto detect)\n'
          "[INFO] Setting ds_accelerator to cuda (auto detect)\n")
    proof = _served(MiiServerEngine(H100, {}), tmp_path, ok).verify_device(g)
    assert proof["name"] == "NVIDIA H100 80GB HBM3" and proof["ds_accelerators"] == ["cuda"]
    for bad, why in ((ok.replace("to cuda (auto", "to cpu (auto", 1), "accelerators: cpu, cuda"),
                     (ok.replace("H100 80GB HBM3", "A100-SXM4-40GB"), "not the detected"),
                     ("[INFO] Setting ds_accelerator to cuda", "torch CUDA: None")):
        with pytest.raises(DeviceMismatch, match=why):
            _served(MiiServerEngine(H100, {}), tmp_path, bad).verify_device(g)


def test_mii_serve_wrapper_reports_this_hosts_torch(capsys, monkeypatch):
    from infbench.engines import mii_serve

    rep = mii_serve.device_report()
    assert rep["devices"] == [] and rep["torch"].startswith("2.")        # this host: no GPU, no DeepSpeed
    assert rep["ds_accelerator"].startswith("error: ModuleNotFoundError")
    ran = {}
    monkeypatch.setattr(mii_serve.runpy, "run_module", lambda m, **kw: ran.update(module=m, **kw))
    mii_serve.main(["--model", "/ck", "--port", "1"])
    assert capsys.readouterr().out.startswith("infbench-mii-device: {")
    assert ran["module"] == "mii.entrypoints.openai_api_server" and ran["run_name"] == "__main__"
    import sys

    assert sys.argv[1:] == ["--model", "/ck", "--port", "1"]


# --- availability rows (`infbench detect`) -----------------------------------------------------

@pytest.mark.parametrize(("device", "rows"), [
    (H100, {"deepspeed-mii": MII_FIX, "deepspeed-mii-server": MII_FIX,
            "sglang-server": "pip install sglang"}),
    (MI300X, {"sglang-server": "infbench containers build --vendor amd"}),
    (GAUDI2, {"optimum-habana": "pip install optimum-habana"}),
])
def test_detect_rows_name_status_and_install_command(pm, device, rows):
    pm.register(FakeDetect(device), name="fakedetect")
    table = {r.engine: r for r in av.engine_table(pm, device)}
    new = {"deepspeed-mii", "deepspeed-mii-server", "sglang-server", "optimum-habana"}
    assert set(table) & new == set(rows)
    for engine, fix in rows.items():
        assert table[engine].status == av.MISSING and table[engine].fix == fix, table[engine]


def test_cpu_detect_lists_none_of_them(pm):
    from infbench.detect.platforms.cpu import cpu_device

    names = {r.engine for r in av.engine_table(pm, cpu_device())}
    assert not names & {"deepspeed-mii", "deepspeed-mii-server", "sglang-server", "optimum-habana"}


def test_worker_images_are_declared_for_the_new_engines(pm):
    for device, engine, image in ((H100, "deepspeed-mii", "infbench/nvidia-mii"),
                                  (H100, "sglang-server", "infbench/nvidia-sglang"),
                                  (MI300X, "sglang-server", "infbench/amd-sglang"),
                                  (GAUDI2, "optimum-habana", "infbench/habana-optimum-habana")):
        spec = pm.hook.infbench_container_spec(device=device, engine=engine)
        assert spec.image.split(":")[0] == image, (engine, spec)
    from infbench.runtimes.images import find_recipes, source_root

    names = {(r.vendor, r.name) for r in find_recipes(source_root())}
    assert {("nvidia", "mii"), ("nvidia", "sglang"), ("amd", "sglang"), ("habana", "optimum-habana")} <= names
    assert pm.hook.infbench_container_spec(device=MI300X, engine="deepspeed-mii") is None
