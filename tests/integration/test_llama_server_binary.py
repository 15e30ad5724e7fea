"""The llama.cpp-server engine running a llama-server binary of scripts/build_llama_cuda.sh, on
this CPU: the CPU build of the same script (``LLAMA_BACKEND=cpu``) through the same engine
option (``server_binary``) as the CUDA bundle on a GPU host, one cell end to end. Skipped until
the CPU bundle is built (``LLAMA_BACKEND=cpu nice -n 19 bash scripts/build_llama_cuda.sh``,
about 15 minutes on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("INFBENCH_LLAMA_SERVER_CPU", ROOT / "artifacts" / "llama-cpu" / "bundle" / "llama-server"))

pytestmark = pytest.mark.skipif(not BINARY.is_file(), reason=f"no CPU llama-server bundle at {BINARY}")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)


def test_the_bundle_manifest_matches_the_build():
    from infbench.engines.llama_bundle import MAX_BUNDLE_BYTES, binary_version, read_manifest

    m = read_manifest(BINARY)  # verifies every listed file's sha256 and size
    assert m is not None and m["backend"] == "cpu" and "GGML_CUDA" not in m["cmake_flags"]
    assert {"llama-server", "llama-bench", "run.sh"} <= set(m["files"])
    assert 0 < m["tar_xz_bytes"] <= MAX_BUNDLE_BYTES and m["llama_cpp_python"]
    ok, version = binary_version(BINARY)
    assert ok and version.startswith("version:") and version == m["llama_cpp_version"]


def test_a_cell_through_the_built_binary(tmp_path):
    store = tmp_path / "s.db"
    p = cli("run", "--engine", "llama.cpp-server", "--engine-arg", f"server_binary={BINARY}", "--model", "tiny",
            "--input-len", "64", "--output-len", "16", "--batch", "2", "--store", str(store), "--json")
    assert p.returncode == 0, p.stderr
    (c,) = json.loads(p.stdout)["cells"]
    assert c["status"] == "ok" and c["metrics"]["n_completed"] == 2, c
    assert c["metrics"]["n_out_total"] == 32
    e = c["engine"]
    assert e["server_binary"]["path"] == str(BINARY) and e["server_binary"]["source"].startswith("engine argument")
    assert e["build"]["backend"] == "cpu" and e["build"]["sha256"]  # the bundle's manifest
    assert e["device_proof"]["source"] == "server log" and e["device_proof"]["devices"] == ["CPU"]
    # the same binary through the site setting, planned without the engine argument
    site = tmp_path / "site.toml"
    site.write_text(f'[llama_server]\nbinary = "{BINARY}"\n')
    dry = subprocess.run([sys.executable, "-m", "infbench.cli", "detect", "--json"], capture_output=True, text=True,
                         env={**os.environ, "INFBENCH_SITE_CONFIG": str(site)}, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert str(BINARY.name) in dry.stdout
