"""Plugin discovery through a real entry point: the test plugin distribution is
pip-installed (built by setuptools, no network) into a folder that the infbench
subprocesses put on their path.

The folder is made by the interpreter running the tests, so this works the same on the
system Python and inside a (fresh) virtual environment: an earlier version built the
plugin in a `--system-site-packages` venv of the running interpreter, which in a venv sees
the *base* interpreter's packages, not the venv's (no infbench there, and a setuptools
without `bdist_wheel`).
"""

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
    """A folder holding the installed plugin distribution (its code and .dist-info with the
    entry point), built with this interpreter's setuptools (>= 70.1 has bdist_wheel)."""
    d = tmp_path_factory.mktemp("plugin-site")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(d), str(PLUGIN)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert list(d.glob("infbench_testplugin-0.0.1.dist-info/entry_points.txt"))
    return d


def run(site, *args, **env):
    path = os.pathsep.join(x for x in (str(site), os.environ.get("PYTHONPATH", "")) if x)
    p = subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": path, **env})
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


def test_a_new_plugin_from_the_template_installs_lists_conforms_and_tests(tmp_path):
    """`infbench plugins new acme`, then pip-installed (built by setuptools from its own
    pyproject, into a folder on the path as above), listed by `infbench plugins`, passing
    `infbench plugins check acme` and its own pytest suite."""
    subprocess.run([sys.executable, "-m", "infbench.cli", "plugins", "new", "acme", "--out", str(tmp_path)],
                   check=True, capture_output=True, text=True)
    root, site = tmp_path / "infbench-acme", tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(root)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    plugins = {q["name"]: q for q in json.loads(run(site, "plugins", "--json"))["plugins"]}
    assert plugins["acme"]["distribution"] == "infbench-acme" and plugins["acme"]["error"] is None
    assert set(plugins["acme"]["hooks"]) == {"infbench_detect", "infbench_supported_precisions",  # contract 2.0: the
                                             "infbench_power_sampler", "infbench_device_catalog",  # typed-options
                                             "infbench_engines"}                                   # engine hook
    check = json.loads(run(site, "plugins", "check", "acme", "--json"))
    assert check["conforming"] and check["failed"] == []
    path = os.pathsep.join(x for x in (str(site), os.environ.get("PYTHONPATH", "")) if x)
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}, timeout=600)
    assert t.returncode == 0 and "1 passed" in t.stdout, t.stdout[-2000:]
