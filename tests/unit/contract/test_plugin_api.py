"""The public plugin API (infbench.plugin), the deprecation path of infbench 0.1's module
paths (infbench._moved), and the commands around plugins: `plugins check` (the conformance
kit on installed plugins) and `plugins new` (a skeleton that already conforms)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import tomllib
import warnings

import pytest

import infbench.plugin as api
from infbench import _moved
from tests.support.hostile import cli


def test_every_public_name_resolves_and_is_documented():
    assert len(api.__all__) == len(set(api.__all__)) >= 30
    for name in api.__all__:
        obj = getattr(api, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), f"infbench.plugin.{name} has no docstring"


@pytest.mark.parametrize("old, new", [
    ("infbench.schema", "infbench.data.schema"),
    ("infbench.hookspecs", "infbench.contract.hookspecs"),
    ("infbench.engines.base", "infbench.data.engine"),
    ("infbench.executors.ray", "infbench.execution.executors.ray"),
    ("infbench.scenarios.base", "infbench.execution.scenarios.scenario"),
])
def test_an_old_module_path_imports_the_same_module_with_a_warning(old, new):
    """In a fresh interpreter (the alias is made once per process): the same object as the
    new path, and a DeprecationWarning naming both paths and infbench.plugin."""
    code = (f"import warnings, importlib\nwarnings.simplefilter('always')\n"
            f"with warnings.catch_warnings(record=True) as w:\n    old = importlib.import_module({old!r})\n"
            f"new = importlib.import_module({new!r})\nassert old is new, (old, new)\n"
            f"msgs = [str(x.message) for x in w if x.category is DeprecationWarning]\n"
            f"assert any({old!r} in m and {new!r} in m and 'infbench.plugin' in m for m in msgs), msgs\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_every_moved_path_points_at_a_module_that_imports():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for old, new in _moved.MOVED.items():
            assert importlib.import_module(new).__name__ == new, old
    assert _moved.new_path("infbench.executors.container") == "infbench.execution.executors.container"
    assert _moved.new_path("infbench.detect") is None and _moved.new_path("infbench.data.schema") is None


def test_an_old_style_plugin_still_loads_and_conforms(tmp_path, monkeypatch):
    """A 0.1 plugin importing from the old paths works (with warnings) until they go."""
    (tmp_path / "old_style_plugin.py").write_text(
        "from infbench import hookimpl\nfrom infbench.schema import DeviceInfo\n"
        "from infbench.measure.power import NoPower\n\n"
        "@hookimpl\ndef infbench_detect():\n"
        "    return [DeviceInfo(vendor='oldco', kind='gpu', model='Old 1', count=1)]\n\n"
        "@hookimpl\ndef infbench_power_sampler(device):\n"
        "    return NoPower('no meter') if device.vendor == 'oldco' else None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from infbench.testing.conformance import assert_conforms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mod = importlib.import_module("old_style_plugin")
    assert {f.hook for f in assert_conforms(mod)} >= {"infbench_detect", "infbench_power_sampler"}


def test_plugins_check_passes_the_installed_plugins():
    r = cli("plugins", "check", "--sample-s", "0", "--json", code=0)
    doc = json.loads(r.output)
    assert doc["conforming"] and not doc["failed"]
    assert "cpu" in doc["plugins"] and all(f["ok"] for f in doc["plugins"]["cpu"])


def test_plugins_check_of_an_unknown_name_is_a_clear_error():
    r = cli("plugins", "check", "acme")
    assert "no plugin named 'acme'" in r.output and "installed:" in r.output


def test_plugins_new_writes_a_plugin_that_conforms(tmp_path):
    r = cli("plugins", "new", "acme", "--out", tmp_path, code=0)
    root = tmp_path / "infbench-acme"
    assert "pip install -e" in r.output and (root / "docker" / "Dockerfile").is_file()
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["infbench"] == {"acme": "infbench_acme.hooks"}
    hooks_src = (root / "infbench_acme" / "hooks.py").read_text()
    assert "from infbench.plugin import" in hooks_src and "from infbench." not in hooks_src.replace(
        "from infbench.plugin", "")
    sys.path.insert(0, str(root))
    try:
        from infbench.testing.conformance import assert_conforms

        hooks = importlib.import_module("infbench_acme.hooks")
        assert_conforms(hooks, devices=[api.DeviceInfo(vendor="acme", kind="accelerator", model="Acme X1", count=1)])
        # its own test passes too
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
                           capture_output=True, text=True, timeout=300, cwd=root,
                           env={**__import__("os").environ, "PYTHONPATH": f"{root}:{':'.join(sys.path)}"})
        assert p.returncode == 0, p.stdout[-2000:]
    finally:
        sys.path.remove(str(root))
        for m in [m for m in sys.modules if m.startswith("infbench_acme")]:
            del sys.modules[m]
    assert "already exists" in cli("plugins", "new", "acme", "--out", tmp_path).output
    assert "not a short lower-case name" in cli("plugins", "new", "Acme Corp", "--out", tmp_path).output
