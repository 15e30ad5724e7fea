"""torch's answer kept in ``$INFBENCH_HOME/cache/torch_probe.json``
(:func:`infbench.engines.availability.torch_probe`, what the engines' availability reads): read
back while what it depends on is unchanged, asked again when the boot, a package, a
device-hiding variable, a device node or the kept file changed, never kept where torch is
missing or the boot cannot be read; an engine about to load weights on a device asks torch
itself (:func:`~infbench.engines.availability.live_torch_probe`)."""

from __future__ import annotations

import pytest

from infbench.engines import availability as av

CPU_TORCH = {"version": "2.13.0+cpu", "cuda": None, "hip": None, "cuda_devices": [], "xpu_devices": [],
             "hpu_devices": []}


@pytest.fixture
def host(tmp_path, monkeypatch, infbench_home):
    """A stand-in boot id, /dev and package install times, and a home without the session's
    answer (tests/support/home.py links it in); returns ``(boot, dev, installed, calls)``:
    ``installed`` maps a package to its stamp, ``calls`` counts the live probes."""
    (infbench_home / "cache" / "torch_probe.json").unlink(missing_ok=True)
    boot, dev = tmp_path / "boot_id", tmp_path / "dev"
    boot.write_text("b-1\n")
    dev.mkdir()
    (dev / "null").touch()
    installed = {m: f"{m} /site-packages/{m}/__init__.py 1" for m in av.TORCH_PROBE_PACKAGES}
    monkeypatch.setattr(av, "package_stamp", lambda m: installed[m])
    real_key = av.torch_probe_key
    monkeypatch.setattr(av, "torch_probe_key", lambda: real_key(boot, dev))
    calls: list[int] = []

    def live():
        calls.append(1)
        return {**CPU_TORCH, "n": len(calls)}

    monkeypatch.setattr(av, "live_torch_probe", live)
    for k in av.TORCH_PROBE_ENV:
        monkeypatch.delenv(k, raising=False)
    memo = av.torch_probe
    memo.cache_clear()
    yield boot, dev, installed, calls
    memo.cache_clear()


def probe() -> dict:
    """A new process's answer (the per-process memo forgotten)."""
    av.torch_probe.cache_clear()
    return av.torch_probe()


def test_the_answer_is_kept_and_read_back_while_nothing_changed(host, infbench_home):
    _, _, _, calls = host
    first = probe()
    assert first["n"] == 1 and probe() == first and len(calls) == 1
    assert (infbench_home / "cache" / "torch_probe.json").is_file()


@pytest.mark.parametrize("change", ["reboot", "package", "variable", "device node", "broken file"])
def test_a_change_it_depends_on_asks_torch_again(host, infbench_home, monkeypatch, change):
    boot, dev, installed, calls = host
    assert probe()["n"] == 1
    if change == "reboot":
        boot.write_text("b-2\n")
    elif change == "package":                 # e.g. a CUDA build of torch installed over the CPU one
        installed["torch"] = "torch /site-packages/torch/__init__.py 2"
    elif change == "variable":
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    elif change == "device node":
        (dev / "nvidia0").touch()
    else:
        (infbench_home / "cache" / "torch_probe.json").write_text("{broken")
    assert probe()["n"] == 2 and len(calls) == 2
    assert probe()["n"] == 2 and len(calls) == 2       # and the new answer is kept


def test_variables_that_hide_no_device_keep_the_answer(host, monkeypatch):
    _, _, _, calls = host
    probe()
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cuda")     # vLLM's, not torch's
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert probe()["n"] == 1 and len(calls) == 1


def test_nothing_is_kept_without_a_boot_id_or_without_torch(host, infbench_home):
    boot, _, installed, calls = host
    boot.unlink()                                       # not Linux
    assert av.torch_probe_key() is None
    assert probe()["n"] == 1 and probe()["n"] == 2
    assert not (infbench_home / "cache" / "torch_probe.json").exists()
    boot.write_text("b-1\n")
    assert av.torch_probe_key() is not None
    installed["torch"] = "torch -"
    assert av.torch_probe_key() is None


def test_a_kept_answer_missing_a_field_is_asked_again(host, infbench_home):
    _, _, _, calls = host
    probe()
    from infbench.data.paths import keep

    keep(infbench_home / "cache" / "torch_probe.json", av.torch_probe_key(), {"version": "2.13.0+cpu"})
    assert probe()["cuda"] is None and len(calls) == 2


def test_the_torch_and_vllm_keys_differ_on_one_host(tmp_path):
    """Two answers on one host: neither file's key can stand for the other's."""
    boot = tmp_path / "boot_id"
    boot.write_text("b-1\n")
    t, v = av.torch_probe_key(boot, tmp_path), av.vllm_probe_key(boot, tmp_path)
    assert t is not None and t != v


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
