"""Plugin discovery through a real entry point: the test plugin distribution is
pip-installed into a fresh virtual environment that sees this infbench."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
PLUGIN = Path(__file__).parents[1] / "fixtures" / "infbench-testplugin"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = tmp_path_factory.mktemp("venv")
    # No pip of its own: the venv's bundled setuptools would shadow the host's. The host's
    # pip installs into it (--python) and builds with the host's setuptools.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(d)], check=True)
    py = d / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                    "--no-build-isolation", str(PLUGIN)], check=True, capture_output=True)
    return py


def run(py, *args, **env):
    p = subprocess.run([str(py), "-m", "infbench.cli", *args], capture_output=True, text=True, check=True,
                       env={**os.environ, **env})
    return p.stdout


def test_listed_with_distribution_and_hooks(venv):
    plugins = {p["name"]: p for p in json.loads(run(venv, "plugins", "--json"))["plugins"]}
    tp = plugins["testplugin"]
    assert tp["distribution"] == "infbench-testplugin" and tp["version"] == "0.0.1"
    assert tp["hooks"] == ["infbench_detect", "infbench_supported_precisions"] and tp["error"] is None
    assert "testplugin" in run(venv, "plugins")


def test_device_detected_and_disable(venv):
    det = json.loads(run(venv, "detect", "--json", INFBENCH_TESTPLUGIN_DEVICE="1"))
    [dev] = [d for d in det["devices"] if d["vendor"] == "testvendor"]
    assert dev["plugin"] == "testplugin" and dev["count"] == 2
    assert "testvendor: precisions fp16, bf16" in run(venv, "detect", INFBENCH_TESTPLUGIN_DEVICE="1")
    # Without its hardware the plugin detects nothing, without error.
    det = json.loads(run(venv, "detect", "--json"))
    assert [d["vendor"] for d in det["devices"]] == ["cpu"] and det["errors"] == []
    off = json.loads(run(venv, "plugins", "--json", INFBENCH_DISABLE_PLUGINS="testplugin"))
    assert {p["name"]: p["disabled"] for p in off["plugins"]}["testplugin"] is True
    det = json.loads(run(venv, "detect", "--json", INFBENCH_TESTPLUGIN_DEVICE="1",
                         INFBENCH_DISABLE_PLUGINS="testplugin"))
    assert "testvendor" not in [d["vendor"] for d in det["devices"]]
