"""Issue 25: the clean-machine check. A fresh venv (no system packages, no pip cache), the
project installed with the README's first command as typed (no extras: nothing compiles), then
`infbench detect && infbench run` with a fresh INFBENCH_HOME: the default sweep is stored, on
the prebuilt llama.cpp server, each cell saying which build ran it; detect and the run say what
the compiled build would add and how to get it; the first-run note names the store and the
commands; every `run --help` example of a plain install works as typed (`--dry-run`).

Needs PyPI (the machine's pip index) and minutes: the install, then the 6-cell sweep on the
prebuilt engine. Slow benchmarks of the same path: benchmarks/first_result.py.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from infbench.libs.llama import default_threads
from tests.support.clone import clone_like_copy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def readme_first_command() -> str:
    """The first command of the README (its first ```bash block)."""
    m = re.search(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)
    assert m, "README.md has no ```bash block"
    return m.group(1).strip()


def plain_install_examples() -> list[list[str]]:
    """The `infbench run --help` examples listed for a plain install, as argument lists."""
    from infbench.cli.run_cmd import RUN_HELP

    block = RUN_HELP.split("**Examples** on a plain install", 1)[1].split("**More examples**", 1)[0]
    lines = [ln.split("#", 1)[0].split() for ln in block.splitlines() if ln.strip().startswith("infbench run")]
    assert len(lines) >= 4
    return lines


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A clone-like copy of the repository, a fresh venv and home, and the README's command run
    there: ``(env, home, output)``."""
    tmp = tmp_path_factory.mktemp("fresh")
    src, venv, home = tmp / "infbench", tmp / "venv", tmp / "home"
    clone_like_copy(ROOT, src)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CMAKE_ARGS", "VIRTUAL_ENV")}
    env.update(PIP_NO_CACHE_DIR="1", INFBENCH_HOME=str(home), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
               VIRTUAL_ENV=str(venv), COLUMNS="200")
    cmd = readme_first_command()
    p = subprocess.run(["bash", "-c", cmd], cwd=src, env=env, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return env, home, p.stdout + p.stderr


def test_readme_command_has_no_extra_and_no_source_build(fresh):
    env, _, _ = fresh
    assert readme_first_command() == "pip install . && infbench detect && infbench run"
    installed = subprocess.run(["pip", "list", "--format", "json"], env=env, capture_output=True, text=True,
                               check=True).stdout
    names = {d["name"].lower().replace("_", "-") for d in json.loads(installed)}
    assert {"infbench", "xllamacpp", "gguf"} <= names
    assert "llama-cpp-python" not in names            # nothing compiled: the prebuilt server only


def test_default_sweep_stored_on_the_prebuilt_server(fresh):
    _, home, output = fresh
    con = sqlite3.connect(home / "results.db")
    rows = con.execute("SELECT status, spec, engine, metrics, cell_id FROM cells ORDER BY id").fetchall()
    prov = json.loads(con.execute("SELECT provenance FROM runs").fetchone()[0])
    con.close()
    # the newest attempt of each cell (the group's sentinel measures a cell again when the host
    # changed state during the group: issue 38; the earlier attempt stays, flagged drift)
    cells = list({c[4]: c[:4] for c in rows}.values())
    again = [r for r in rows if r[4] in {c[4] for c in rows[:rows.index(r)]}]
    assert all("remeasured" in json.loads(r[3])["steady"] for r in again)
    assert len(cells) == 6 and {c[0] for c in cells} == {"ok"}
    specs = [json.loads(c[1]) for c in cells]
    assert {s["engine"] for s in specs} == {"llama.cpp-server"}
    # the quick preset's grid: the same workloads as on the compiled build
    assert sorted((s["batch"], s["input_len"], s["output_len"]) for s in specs) == [
        (b, i, 64) for b in (1, 4, 8) for i in (128, 512)]
    for c in cells:
        spec, m = json.loads(c[1]), json.loads(c[3])
        assert m["n_completed"] == spec["batch"] and m["e2e_s"]["p50"] > 0 and m["output_tok_s"] > 0
        # nothing suspect in the physics (below a floor, utilisation above 1); a shared CI machine's
        # neighbours, a client starved by them and a host that changed speed during the cell
        # (the steady-state flags, issue 38) are flagged, and that is what the flags are for
        steady = " ".join((m.get("steady") or {}).get("flags", {}).values())
        assert not [r for r in (m.get("suspect") or "").split("; ") if r and r not in steady
                    and not r.startswith(("other processes", "client-bound"))], m.get("suspect")
        build = json.loads(c[2])["build"]
        assert build["kind"] == "prebuilt" and build["distribution"] == "xllamacpp"
        assert json.loads(c[2])["n_threads"] == default_threads()   # the CPUs it may use, not the host's
        assert build["origin"] == "prebuilt wheel"
    d = prov["default_sweep"]
    assert d["engine"] == "llama.cpp-server" and "prebuilt wheel" in d["build"]
    # the run said what the compiled build would add, and where the results went
    assert "better engine not available: llama.cpp (in-process)" in " ".join(output.split())
    assert "first run stored: 6 cell(s)" in output
    for cmd in ("infbench results", "infbench report", "infbench compare"):
        assert cmd in output


def test_detect_says_which_build_runs_and_what_compiling_adds(fresh):
    env, _, output = fresh
    from infbench.engines.builds import measured
    from infbench.libs.llama import LLAMA_CPP_INSTALL

    flat = " ".join(output.split())
    assert "cpu: `infbench run` measures the quick preset" in flat
    assert "on llama.cpp-server (in-process): xllamacpp" in flat and "prebuilt wheel" in flat
    assert "cpu: faster: llama.cpp (in-process), not installed: needs llama_cpp: llama.cpp compiled for this " \
           "CPU" in flat
    assert " ".join(LLAMA_CPP_INSTALL.split()) in flat
    data = measured()
    if data and data.get("speedup"):                  # the figures come from the packaged JSON
        s = data["speedup"]
        assert f"measured {s['min']:.1f}-{s['max']:.1f}x faster" in flat


def test_plain_install_help_examples_work_as_typed(fresh):
    env, _, _ = fresh
    for args in plain_install_examples():
        cmd = args + ([] if "--dry-run" in args else ["--dry-run"])
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{' '.join(cmd)}:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}"
    results = subprocess.run(["infbench", "results", "--format", "json"], env=env, capture_output=True, text=True,
                             check=True)
    rows = json.loads(results.stdout)
    run = rows[0]["run_id"]
    cmp = subprocess.run(["infbench", "compare", run, run, "--json"], env=env, capture_output=True, text=True)
    assert cmp.returncode == 0 and len(json.loads(cmp.stdout)["pairs"]) == 6
