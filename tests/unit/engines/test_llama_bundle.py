"""The llama.cpp CUDA bundle (scripts/build_llama_cuda.sh) as infbench uses it: the device proof
from a llama-server log (every layer offloaded, some, none), the bundle manifest, where the
binary is named (engine argument, site setting) and the availability check with a fixture
binary (no GPU here)."""

from __future__ import annotations

import hashlib
import json
import stat
import types
from pathlib import Path

import pytest

from infbench.data.errors import ConfigError, DeviceMismatch
from infbench.data.schema import DeviceBackends, DeviceInfo
from infbench.engines import llama_bundle as lb
from infbench.engines.device_proof import check_ggml_placement, ggml_placement
from infbench.engines.llama_server import check_llama_server, check_server_binary

H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", properties={"compute_capability": "9.0"})
NV = DeviceBackends(label="CUDA", torch="cuda", vllm="cuda", ggml=["CUDA"])
CPUB = DeviceBackends(label="CPU", torch="cpu", vllm="cpu", ggml=["CPU"])

# Recorded from llama-server (llama.cpp b-series, CUDA build), Llama-3-8B f16: the INFO lines the
# proof reads (device choice, offload count, buffers), with a few neighbours.
_HEAD = """\
ggml_cuda_init: found 1 CUDA devices (Total VRAM: 81079 MiB):
  Device 0: NVIDIA H100 80GB HBM3, compute capability 9.0, VMM: no, VRAM: 81079 MiB
main: setting n_parallel = 1 and kv_unified = true (n_parallel == 1)
build: 1 (abcdef0) with GNU 12.2.0 for Linux x86_64
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H100 80GB HBM3) (0000:19:00.0) - 80622 MiB free
llama_model_loader: loaded meta data with 24 key-value pairs and 291 tensors from /root/.infbench/cache/gguf/x.gguf
load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = false)
"""
LOG_ALL = _HEAD + """\
load_tensors: offloading output layer to GPU
load_tensors: offloading 31 repeating layers to GPU
load_tensors: offloaded 33/33 layers to GPU
load_tensors:   CPU_Mapped model buffer size =  1002.00 MiB
load_tensors:        CUDA0 model buffer size = 14315.02 MiB
"""
LOG_SOME = _HEAD + """\
load_tensors: offloading 20 repeating layers to GPU
load_tensors: offloaded 20/33 layers to GPU
load_tensors:   CPU_Mapped model buffer size =  6200.00 MiB
load_tensors:        CUDA0 model buffer size =  8930.00 MiB
"""
LOG_NONE = _HEAD + """\
load_tensors: offloaded 0/33 layers to GPU
load_tensors:   CPU_Mapped model buffer size = 15317.02 MiB
"""
# a CPU-only llama-server (no CUDA backend in the build): no device line, no offload line
LOG_CPU_BUILD = """\
build: 1 (abcdef0) with GNU 12.2.0 for Linux x86_64
load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = false)
load_tensors:   CPU_Mapped model buffer size = 15317.02 MiB
"""


def _proof(log: str, device: DeviceInfo = H100, backends: DeviceBackends = NV) -> dict:
    p = ggml_placement(log)
    return check_ggml_placement("llama.cpp-server", device, backends, p, p["devices"], "fix")


def test_all_layers_offloaded_is_the_proof():
    p = ggml_placement(LOG_ALL)
    assert p["offloaded"] == (33, 33)
    assert p["devices"] == {"CUDA0": "NVIDIA H100 80GB HBM3"}
    proof = _proof(LOG_ALL)
    assert proof["layers_on_device"] == "33/33"
    assert proof["devices"] == ["CUDA0"]
    assert proof["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("log,why", [(LOG_SOME, "only 20/33 layers"), (LOG_NONE, "only 0/33 layers"),
                                     (LOG_CPU_BUILD, "did not report")])
def test_fewer_than_all_layers_is_a_device_mismatch(log, why):
    with pytest.raises(DeviceMismatch, match=why):
        _proof(log)


def test_another_gpu_model_is_refused():
    other = LOG_ALL.replace("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
    with pytest.raises(DeviceMismatch, match="A100"):
        _proof(other)


def test_cpu_device_accepts_the_cpu_build_and_refuses_offload():
    cpu = DeviceInfo(vendor="cpu", kind="cpu", model="AMD EPYC")
    assert _proof(LOG_CPU_BUILD, cpu, CPUB)["devices"] == ["CPU"]
    with pytest.raises(DeviceMismatch):
        _proof(LOG_ALL, cpu, CPUB)


# --- the bundle manifest ------------------------------------------------------------------------

def _bundle(tmp_path: Path, tar_bytes: int = 30 << 20) -> Path:
    b = tmp_path / "bundle"
    b.mkdir()
    server = b / "llama-server"
    server.write_bytes(b"\x7fELF fake server")
    (b / "run.sh").write_text("#!/bin/sh\n")
    files = {n: {"sha256": hashlib.sha256((b / n).read_bytes()).hexdigest(), "bytes": (b / n).stat().st_size}
             for n in ("llama-server", "run.sh")}
    (b / "manifest.json").write_text(json.dumps({
        "schema": 1, "llama_cpp_python": "0.3.36", "llama_cpp_version": "version: 1 (abcdef0)",
        "cmake_flags": "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=80-real;90-real", "files": files,
        "bundle_bytes": sum(f["bytes"] for f in files.values()), "tar_xz_bytes": tar_bytes, "build_s": 3600}))
    return server


def test_manifest_read_and_verified(tmp_path):
    server = _bundle(tmp_path)
    m = lb.read_manifest(server)
    assert m is not None
    assert m["files"]["llama-server"]["sha256"] == hashlib.sha256(b"\x7fELF fake server").hexdigest()
    assert "GGML_CUDA=ON" in m["cmake_flags"]
    assert m["tar_xz_bytes"] <= lb.MAX_BUNDLE_BYTES


def test_manifest_absent_is_none(tmp_path):
    f = tmp_path / "llama-server"
    f.write_bytes(b"x")
    assert lb.read_manifest(f) is None


def test_manifest_refuses_a_changed_binary(tmp_path):
    server = _bundle(tmp_path)
    server.write_bytes(b"\x7fELF fake server, truncated?")
    with pytest.raises(ConfigError, match="differs from its manifest"):
        lb.read_manifest(server)
    assert lb.read_manifest(server, verify=False) is not None


def test_manifest_allows_an_absent_bench_but_not_an_unlisted_binary(tmp_path):
    server = _bundle(tmp_path)
    (server.parent / "run.sh").unlink()  # a listed file that did not travel: not checked
    assert lb.read_manifest(server) is not None
    other = server.parent / "llama-cli"
    other.write_bytes(b"x")
    with pytest.raises(ConfigError, match="does not list llama-cli"):
        lb.read_manifest(other)


def test_manifest_refuses_an_oversized_bundle(tmp_path):
    server = _bundle(tmp_path, tar_bytes=61 << 20)
    with pytest.raises(ConfigError, match="over 60 MiB"):
        lb.read_manifest(server)


def test_manifest_refuses_garbage(tmp_path):
    server = _bundle(tmp_path)
    (server.parent / "manifest.json").write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        lb.read_manifest(server)


# --- where the binary is named; the availability check with a fixture binary --------------------

def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_binary_from_engine_argument_then_site(tmp_path, monkeypatch):
    a = _script(tmp_path / "a-server", "exit 0\n")
    b = _script(tmp_path / "b-server", "exit 0\n")
    site = tmp_path / "site.toml"
    site.write_text(f'[llama_server]\nbinary = "{b}"\n')
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    assert lb.configured_binary(str(a)) == (a, "engine argument server_binary")
    path, source = lb.configured_binary(None)
    assert path == b and source.startswith("site ") and "site.toml:2" in source
    site.write_text("")
    assert lb.configured_binary(None) is None
    with pytest.raises(ConfigError, match="not an executable"):
        lb.configured_binary(str(tmp_path / "missing"))


def test_server_binary_usable_where_it_runs_and_libcuda_loads(tmp_path, monkeypatch):
    ok = _script(tmp_path / "llama-server", 'echo "version: 7 (abcdef0)" >&2\necho "built with GNU" >&2\n')
    monkeypatch.setattr(lb, "libcuda_loads", lambda: (True, "libcuda.so.1"))
    s = check_server_binary(ok, NV)
    assert s.usable and s.version == "version: 7 (abcdef0)"
    monkeypatch.setattr(lb, "libcuda_loads", lambda: (False, "libcuda.so.1: cannot open shared object file"))
    s = check_server_binary(ok, NV)
    assert not s.usable and "libcuda" in s.reason
    assert check_server_binary(ok, CPUB).usable  # no driver needed for the CPU backend
    broken = _script(tmp_path / "broken", 'echo "error while loading shared libraries: libcublas.so.13" >&2\n'
                                         "exit 127\n")
    s = check_server_binary(broken, NV)
    assert not s.usable and "libcublas.so.13" in s.reason


def test_check_llama_server_takes_the_engine_argument(tmp_path, monkeypatch):
    ok = _script(tmp_path / "llama-server", 'echo "version: 7 (abcdef0)"\n')
    monkeypatch.setattr(lb, "libcuda_loads", lambda: (True, "libcuda.so.1"))
    assert check_llama_server(H100, NV, str(ok)).usable
    s = check_llama_server(H100, NV, str(tmp_path / "missing"))
    assert not s.usable and "not an executable" in s.reason


def test_server_argv_and_env(tmp_path, monkeypatch):
    binary = tmp_path / "bundle" / "llama-server"
    argv = lb.server_argv(binary, "m.gguf", 8080, 4, 4096, 8, gpu=True)
    assert argv[0] == str(binary)
    assert argv[argv.index("--n-gpu-layers") + 1] == "999"
    assert argv[argv.index("--log-verbosity") + 1] == "4"  # the device lines of the proof
    assert argv[argv.index("--threads") + 1] == "8"
    assert lb.server_argv(binary, "m.gguf", 8080, 1, 512, None, gpu=False)[-3:] == ["0", "--log-verbosity", "4"]
    nv = tmp_path / "site-packages" / "nvidia"
    (nv / "cu13" / "lib").mkdir(parents=True)
    monkeypatch.setattr(lb.importlib.util, "find_spec",
                        lambda name: types.SimpleNamespace(submodule_search_locations=[str(nv)]))
    env = lb.server_env(binary, {"LD_LIBRARY_PATH": "/old"})
    assert env["LD_LIBRARY_PATH"].split(":") == [str(binary.parent), str(nv / "cu13" / "lib"), "/old"]


def test_server_argv_physical_batch(tmp_path):
    """``n_ubatch`` (LIB's llama.cpp "batch") reaches llama-server as --ubatch-size, the logical
    batch never below it; absent, llama.cpp's own default stands (no flag)."""
    binary = tmp_path / "llama-server"
    argv = lb.server_argv(binary, "m.gguf", 8080, 1, 512, None, gpu=True, n_ubatch=16)
    assert argv[argv.index("--ubatch-size") + 1] == "16" and argv[argv.index("--batch-size") + 1] == "2048"
    big = lb.server_argv(binary, "m.gguf", 8080, 1, 8192, None, gpu=True, n_ubatch=4096)
    assert big[big.index("--batch-size") + 1] == "4096"
    assert "--ubatch-size" not in lb.server_argv(binary, "m.gguf", 8080, 1, 512, None, gpu=True)


def test_n_ubatch_is_a_checked_llama_server_option_and_keeps_old_cell_ids():
    from pydantic import ValidationError

    from infbench.data.engine_options import LlamaServerOptions
    from infbench.data.schema import Cell

    assert LlamaServerOptions(n_ubatch=16).n_ubatch == 16
    with pytest.raises(ValidationError):
        LlamaServerOptions(n_ubatch=0)
    plain = Cell(model="tiny", engine="llama.cpp-server", dtype="f16", batch=1, input_len=16, output_len=16)
    assert "n_ubatch" not in json.dumps(plain.spec())  # a field with a default adds nothing to old ids
