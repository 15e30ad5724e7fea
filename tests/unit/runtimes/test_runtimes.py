"""Runtime choice, image recipes, Apptainer translation and the launcher's cells.jsonl tail
(no Docker engine needed; tests/integration/test_containers.py runs the real one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench import __version__
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo
from infbench.execution.executors import choose_executor
from infbench.execution.executors.follow import JsonlTail
from infbench.runtimes.apptainer import ApptainerRuntime, apptainer_args, sif_name
from infbench.runtimes.images import find_recipes, source_root

ROOT = Path(__file__).resolve().parents[3]


def dev(vendor: str, kind: str = "gpu") -> DeviceInfo:
    return DeviceInfo(vendor=vendor, kind=kind, model=f"{vendor}-model")


def _spec(pm, device, engine):
    """The plugin's container spec as the runtimes take it (a dict), or None."""
    from infbench.contract.registry import container_spec

    spec = container_spec(pm, device, engine)
    return spec.as_dict() if spec is not None else None


def test_recipes_match_the_images_the_plugins_name(pm):
    """Every image a container spec names is built by exactly one recipe, and vice versa."""
    recipes = {r.tags()[0]: r for r in find_recipes(source_root(ROOT))}
    assert {f"{r.vendor}/{r.name}" for r in recipes.values()} == {
        "cpu/llamacpp", "nvidia/vllm", "nvidia/trtllm", "nvidia/mii", "nvidia/sglang", "amd/vllm", "amd/sglang",
        "intel/vllm", "habana/vllm", "habana/optimum-habana"}
    named = set()
    for vendor, engines in {"cpu": ["llama.cpp", "llama.cpp-server"],
                            "nvidia": ["vllm", "vllm-server", "trtllm-serve", "deepspeed-mii", "deepspeed-mii-server",
                                       "sglang-server"],
                            "amd": ["vllm", "vllm-server", "sglang-server"], "intel": ["vllm"],
                            "habana": ["vllm-server", "optimum-habana"]}.items():
        for e in engines:
            spec = _spec(pm, dev(vendor, "cpu" if vendor == "cpu" else "gpu"), e)
            assert spec and spec["image"].endswith(f":{__version__}"), (vendor, e)
            named.add(spec["image"])
    assert named == set(recipes)
    nv = recipes[f"infbench/nvidia-vllm:{__version__}"]
    assert nv.args["ENGINE_VERSION"] == "0.11.0" and nv.tags()[1] == f"infbench/nvidia-vllm:{__version__}-vllm0.11.0"
    # a build arg overrides the Dockerfile's default in tags and labels; odd characters are made tag-safe
    assert nv.tags({"ENGINE_VERSION": "0.12.0+cu129"})[1].endswith("-vllm0.12.0_cu129")
    assert nv.labels({"ENGINE_VERSION": "0.12.0"})["org.infbench.engine.version"] == "0.12.0"


def test_no_image_for_cpu_transformers(pm):
    assert _spec(pm, dev("cpu", "cpu"), "transformers") is None


def test_source_root_refuses_other_folders(tmp_path):
    with pytest.raises(ConfigError, match="not an infbench source tree"):
        source_root(tmp_path)


NO_NET = ["--net", "--network", "none"]


def choose(name, device, engines, pm, notes=None, runtime=None):
    return choose_executor(name, device, engines, pm, {}, notes, runtime).name


def test_choose_executor(pm, monkeypatch):
    assert choose("inprocess", dev("nvidia"), ["vllm"], pm) == "inprocess"
    assert choose("auto", dev("cpu", "cpu"), ["llama.cpp"], pm) == "inprocess"        # in-process on the CPU
    assert choose("auto", dev("remote", "remote"), ["openai"], pm) == "inprocess"
    with pytest.raises(ConfigError, match="unknown executor 'podman'"):
        choose("podman", dev("cpu", "cpu"), [], pm)
    with pytest.raises(ConfigError, match="unknown container runtime 'podman'"):
        choose("container", dev("cpu", "cpu"), [], pm, runtime="podman")
    # vendor hardware, but no container runtime here: in-process
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert choose("auto", dev("nvidia"), ["vllm"], pm) == "inprocess"
    with pytest.raises(ConfigError, match="no Docker engine reachable"):
        choose("container", dev("cpu", "cpu"), ["llama.cpp"], pm, runtime="docker")
    with pytest.raises(ConfigError, match="apptainer"):
        choose("container", dev("cpu", "cpu"), ["llama.cpp"], pm, runtime="apptainer")
    with pytest.raises(ConfigError, match="no container runtime here"):
        choose("container", dev("cpu", "cpu"), ["llama.cpp"], pm)


def test_apptainer_translation_per_vendor(pm):
    nv, notes = apptainer_args(_spec(pm, dev("nvidia"), "trtllm-serve"))
    assert nv[0] == "--nv" and "--rocm" not in nv and "NVIDIA_VISIBLE_DEVICES=all" in nv
    assert any("ulimits" in n for n in notes)                     # TensorRT-LLM's memlock/stack
    amd, _ = apptainer_args(_spec(pm, dev("amd"), "vllm"))
    assert amd == ["--rocm", *NO_NET]                             # /dev/kfd + /dev/dri: --rocm covers both
    intel, _ = apptainer_args(_spec(pm, dev("intel"), "vllm"))
    assert intel == ["--bind", "/dev/dri", *NO_NET]
    gaudi, notes = apptainer_args(_spec(pm, dev("habana"), "vllm"))
    assert gaudi[:2] == ["--bind", "/dev/accel"] and "HABANA_VISIBLE_DEVICES=all" in gaudi
    assert any("privileges" in n for n in notes)                  # cap_add SYS_NICE is not granted
    cpu, notes = apptainer_args(_spec(pm, dev("cpu", "cpu"), "llama.cpp"))
    assert cpu == NO_NET and notes == []                          # no network, as the Docker worker
    host, notes = apptainer_args({"image": "x", "network_mode": "host"})
    assert "--net" not in host and "network mode host" in notes[0]


def test_apptainer_command_line(pm, tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "apptainer"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(binary.parent))
    monkeypatch.setenv("INFBENCH_SIF_DIR", str(tmp_path / "sif"))
    rt = ApptainerRuntime()
    spec = _spec(pm, dev("nvidia"), "vllm")
    with pytest.raises(ConfigError, match="apptainer build .*docker-daemon://infbench/nvidia-vllm"):
        rt.check_image(spec["image"])
    sif = tmp_path / "sif" / sif_name(spec["image"])
    sif.parent.mkdir()
    sif.write_bytes(b"")
    cmd, _ = rt.command(spec, tmp_path / "job", tmp_path / "home", tmp_path / "cache", [str(tmp_path)])
    assert cmd[:6] == [str(binary), "exec", "--cleanenv", "--contain", "--no-home", "--nv"]
    assert f"{tmp_path / 'job' / 'spec.json'}:/job/spec.json:ro" in cmd
    assert f"{tmp_path / 'job' / 'out'}:/job/out" in cmd
    assert f"{tmp_path / 'cache'}:/job/home/cache" in cmd and "--net" in cmd
    assert f"{tmp_path}:{tmp_path}:ro" in cmd and "INFBENCH_HOME=/job/home" in cmd
    assert cmd[cmd.index(str(sif)) + 1:] == ["infbench", "worker", "--spec", "/job/spec.json", "--out", "/job/out"]


def test_cells_tail_waits_for_complete_lines(tmp_path):
    from infbench.data.schema import Cell, CellResult

    c = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2)
    d = dev("cpu", "cpu")
    r = CellResult(cell_id=c.cell_id(d), spec_hash=c.spec_hash(), cell=c, device=d, status="ok",
                   started_at=1.0, finished_at=2.0)
    path = tmp_path / "cells.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == []                                      # no file yet
    line = r.model_dump_json()
    path.write_text(line[:40])                                    # being written
    assert tail.read() == []
    path.write_text(line + "\n" + line[:10])
    got = tail.read()
    assert [x.spec_hash for x in got] == [c.spec_hash()]
    assert tail.read() == []                                      # consumed once; the partial line waits


def test_follow_worker_keeps_each_result_after_its_start(tmp_path):
    """The worker's log is read late, by a thread: when ``done A`` is handled, ``cells.jsonl``
    may already hold B's result while ``cell B`` is still queued. B's result must still come
    after B's start (CI caught the Ray executor's events out of order: finished before started)."""
    from infbench.data.schema import Cell, CellResult
    from infbench.execution.executors.follow import PREFIX, follow_worker

    d = dev("cpu", "cpu")
    cells = [Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=b, input_len=8, output_len=2) for b in (1, 2)]
    results = [CellResult(cell_id=c.cell_id(d), spec_hash=c.spec_hash(), cell=c, device=d, status="ok",
                          started_at=1.0, finished_at=2.0) for c in cells]
    out = tmp_path / "out"
    out.mkdir()

    class Worker:
        def lines(self):
            a, b = cells
            yield PREFIX + f"cell {a.spec_hash()} {a.model_dump_json()}"
            # both results are stored before the follower reads ``done A``
            (out / "cells.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
            yield PREFIX + f"done {a.spec_hash()} {results[0].cell_id} ok"
            yield PREFIX + f"cell {b.spec_hash()} {b.model_dump_json()}"
            yield PREFIX + f"done {b.spec_hash()} {results[1].cell_id} ok"

        def wait(self):
            return 0

        def kill(self):
            pass

        def cleanup(self):
            pass

    seen = [(k, p[0] if k == "cell" else p.spec_hash) for k, p in follow_worker(Worker(), tmp_path, 60.0)
            if k in ("cell", "result")]
    a, b = (c.spec_hash() for c in cells)
    assert seen == [("cell", a), ("result", a), ("cell", b), ("result", b)]


def test_follow_worker_yields_unannounced_results_at_exit(tmp_path):
    """A result stored without its ``done`` line (the worker died between the two) still
    comes back once the worker has exited, exactly once."""
    from infbench.data.schema import Cell, CellResult
    from infbench.execution.executors.follow import follow_worker

    d = dev("cpu", "cpu")
    c = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2)
    r = CellResult(cell_id=c.cell_id(d), spec_hash=c.spec_hash(), cell=c, device=d, status="ok",
                   started_at=1.0, finished_at=2.0)
    (tmp_path / "out").mkdir()

    class Worker:
        def lines(self):
            (tmp_path / "out" / "cells.jsonl").write_text(r.model_dump_json() + "\n")
            yield "plain log line"

        def wait(self):
            return 1

        def kill(self):
            pass

        def cleanup(self):
            pass

    got = [p.spec_hash for k, p in follow_worker(Worker(), tmp_path, 60.0) if k == "result"]
    assert got == [c.spec_hash()]
