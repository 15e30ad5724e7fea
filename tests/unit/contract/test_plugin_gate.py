"""The plugin gate checks what it claims (issue 41, items 3 and 5): a hung hook is named and the
command goes on, a hook that exits or prints is caught, `plugins check` exercises the stand-ins,
`plugins new` refuses the names infbench ships, and a plugin named like another is not loaded."""

from __future__ import annotations

import threading

import pytest

from tests.support.hostile import cli

#: What the hung hooks wait for (at most 30 s): set when this module's tests end, so their
#: threads do not outlive them as threads beside a later test's in-process engine.
RELEASE = threading.Event()


@pytest.fixture(autouse=True, scope="module")
def _release_hung_hooks():
    RELEASE.clear()
    yield
    RELEASE.set()


# -- item 3: every wait has a bound and says what it waits for ------------------------------------
class _Hung:
    @staticmethod
    def infbench_detect():
        RELEASE.wait(30)
        return []


def _plugin(**hooks):
    """A plugin object whose hooks are the given functions (marked @hookimpl)."""
    from infbench.plugin import hookimpl

    ns = {name: staticmethod(hookimpl(fn)) for name, fn in hooks.items()}
    return type("P", (), ns)()


def test_a_hung_hook_is_named_and_the_command_goes_on(monkeypatch):
    """A plugin whose detect never returns: detection ends after the limit, names the plugin
    and the hook, finds the other devices, and does not call the hung plugin again."""

    from infbench.contract.manager import build_plugin_manager
    from infbench.detect import detect

    monkeypatch.setenv("INFBENCH_PLUGIN_TIMEOUT_S", "0.3")
    pm = build_plugin_manager()
    calls = []

    def slow():
        calls.append(1)
        RELEASE.wait(30)
        return []

    pm.register(_plugin(infbench_detect=slow), name="hangco")
    det = detect(pm)
    assert any(p == "hangco" and "infbench_detect did not return within 0.3 s" in e for p, e in det.errors)
    assert any(d.vendor == "cpu" for d in det.devices)
    det2 = detect(pm)
    assert len(calls) == 1 and any(p == "hangco" for p, _ in det2.errors)


def test_a_hook_that_exits_or_prints_is_caught(monkeypatch, capsys):
    """sys.exit, os._exit and print inside a hook: each is that plugin's error or its
    captured output (cleaned, redacted), never the end of infbench or raw terminal bytes."""
    import os
    import sys

    from infbench.contract.manager import build_plugin_manager
    from infbench.detect import detect

    def exits():
        sys.exit(0)

    def hard_exits():
        os._exit(0)

    def prints():
        print("\x1b]0;pwned\x07\x1b[2Jhello TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789")
        return []

    def dicts():
        return [{"vendor": "acme", "model": "X"}]

    def impossible():
        from infbench.plugin import DeviceInfo

        return [DeviceInfo(vendor="acme", kind="gpu", model="A", count=10**12, memory_bytes=-1)]

    pm = build_plugin_manager()
    for name, fn in (("exitco", exits), ("hardexitco", hard_exits), ("printco", prints), ("dictco", dicts),
                     ("bigco", impossible)):
        pm.register(_plugin(infbench_detect=fn), name=name)
    det = detect(pm)
    errs = dict(det.errors)
    assert "sys.exit(0)" in errs["exitco"] and "os._exit(0)" in errs["hardexitco"]
    assert "DeviceInfo" in errs["dictco"] and "impossible" in errs["bigco"]
    said = capsys.readouterr()
    assert "\x1b" not in said.out + said.err and "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in said.err
    assert "hello" in pm.log.output[("printco", "infbench_detect")]
    assert os._exit.__module__ == "posix" or os._exit.__name__ == "_exit"  # restored after the calls


def test_plugins_check_exercises_stand_ins_and_fails_what_it_should(monkeypatch):
    """On a host without its hardware, the per-device hooks are still called, on a stand-in
    device per catalog entry; negative watts there fail the gate; exits, prints and
    impossible devices fail with the reason; the findings say what was exercised on what."""
    from infbench.plugin import DeviceSpec, PowerReading, PowerSampler, hookimpl, now_ns
    from infbench.testing.conformance import check_conformance

    class Negative(PowerSampler):
        name = "acme-smi"

        def read(self):
            return [PowerReading(t_ns=now_ns(), device_index=0, power_w=-5.0)]

    class NoHardware:
        @hookimpl
        def infbench_detect(self):
            return []

        @hookimpl
        def infbench_device_catalog(self):
            return [DeviceSpec(id="acme-x1", name="Acme X1", vendor="acme", memory_gib=64, bandwidth_tb_s=2.0,
                               sources=["datasheet"])]

        @hookimpl
        def infbench_power_sampler(self, device):
            return Negative() if device.vendor == "acme" else None

    found = check_conformance(NoHardware(), sample_s=0.01, name="acme")
    bad = {f.hook: f.message for f in found if not f.ok}
    assert "power_w=-5.0" in bad["infbench_power_sampler"] and "(stand-in)" in bad["infbench_power_sampler"]
    [ex] = [f for f in found if f.hook == "exercised"]
    assert "power_sampler on Acme X1 x1 (stand-in)" in ex.message

    monkeypatch.setenv("INFBENCH_PLUGIN_TIMEOUT_S", "0.3")
    import os
    import sys

    from infbench.plugin import DeviceInfo

    cases = {
        "exit": (lambda: sys.exit(0), "sys.exit(0)"),
        "hard exit": (lambda: os._exit(0), "os._exit(0)"),
        "hang": (_Hung.infbench_detect, "did not return within 0.3 s"),
        "print": (lambda: print("\x1b[2Jhi") or [], "printed to the terminal"),
        "impossible": (lambda: [DeviceInfo(vendor="a", kind="gpu", model="A", count=10**12, memory_bytes=-1)],
                       "impossible device"),
    }
    for what, (fn, says) in cases.items():
        found = check_conformance(_plugin(infbench_detect=fn), sample_s=0.01, name="x")
        msgs = " ".join(f.message for f in found if not f.ok)
        assert says in msgs, (what, msgs)


def test_plugins_new_refuses_the_names_infbench_ships(tmp_path):
    for name in ("nvidia", "core", "cpu", "engines", "amd"):
        r = cli("plugins", "new", name, "--out", tmp_path)
        assert "a plugin infbench ships" in r.output and not (tmp_path / f"infbench-{name}").exists()


def test_a_plugin_named_like_another_is_not_loaded_and_is_reported(monkeypatch):
    """Two entry points of one name (a `plugins new nvidia` package beside the bundled one,
    or one named `core`): the second is not loaded, keeps the first one's row, and is listed
    as shadowing it."""
    import importlib.metadata as md

    from infbench.contract import manager

    class EP:
        def __init__(self, name, value, dist):
            self.name, self.value = name, value
            self.dist = type("D", (), {"name": dist, "version": "0.1"})()

        def load(self):
            return _plugin(infbench_detect=lambda: [])

    eps = [EP("core", "evil.hooks", "infbench-core"), EP("acme", "acme.hooks", "infbench-acme"),
           EP("acme", "acme2.hooks", "infbench-acme2")]
    monkeypatch.setattr(md, "entry_points", lambda group: eps)
    pm = manager.build_plugin_manager()
    assert pm.infos["core"].module == manager.CORE_DEFAULTS  # the core's row is the core's
    shadow = pm.infos["core (infbench-core)"]
    assert shadow.shadows == "core" and "shadow" in shadow.error
    assert pm.infos["acme (infbench-acme2)"].shadows == "acme"
    assert pm.get_plugin("acme") is not None

