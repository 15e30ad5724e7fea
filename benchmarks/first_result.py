"""Benchmark: the README's first command from nothing, to a stored default sweep.

In a fresh venv, with no pip cache (``PIP_NO_CACHE_DIR=1``) and a fresh ``INFBENCH_HOME``, runs
the README's first command as three timed steps, from the repository root as a newcomer would:

    pip install . && infbench detect && infbench run

and records each step's wall time, the first result's time (all three), the stored cells
(status, engine, the build that ran them) and the run's own provenance. The target
(issue 25): the first result in at most 120 s on a 2-core machine. PyPI must be reachable
(the machine's pip configuration is used as it is: its index, no cache).

    python benchmarks/first_result.py [--out benchmarks/results/first_result.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "first_result.json"
sys.path.insert(0, str(ROOT))
from tests.support.clone import clone_like_copy  # noqa: E402 - shared with the test of the same path

TARGET_S = 120.0


def step(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 1800) -> tuple[float, str]:
    """Run one step; (wall s, its combined output). Raises SystemExit on failure."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-4000:]}")
    return wall, p.stdout


def stored_cells(db: Path) -> list[dict[str, Any]]:
    """The stored cells: status, engine, batch/in/out, the build of the engine description."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT status, spec, engine FROM cells").fetchall()
    finally:
        con.close()
    out = []
    for status, spec, engine in rows:
        s, e = json.loads(spec), json.loads(engine or "{}")
        out.append({"status": status, "engine": s["engine"], "batch": s["batch"], "input_len": s["input_len"],
                    "output_len": s["output_len"], "build": (e.get("build") or {}).get("kind"),
                    "build_version": (e.get("build") or {}).get("version")})
    return out


def measure() -> dict[str, Any]:
    """The three steps in a fresh venv and home, from a copy of the repository as a clone has
    it (see the module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        venv, home, src = Path(tmp) / "venv", Path(tmp) / "home", Path(tmp) / "infbench"
        clone_like_copy(ROOT, src)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CMAKE_ARGS", "VIRTUAL_ENV")}
        env.update(PIP_NO_CACHE_DIR="1", INFBENCH_HOME=str(home), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
                   VIRTUAL_ENV=str(venv), COLUMNS="200")
        install_s, _ = step(["pip", "install", "."], env, src)
        detect_s, detect_out = step(["infbench", "detect"], env, Path(tmp))
        run_s, run_out = step(["infbench", "run"], env, Path(tmp))
        cells = stored_cells(home / "results.db")
        con = sqlite3.connect(home / "results.db")
        prov = json.loads(con.execute("SELECT provenance FROM runs").fetchone()[0])
        con.close()
        freeze = subprocess.run(["pip", "freeze"], env=env, capture_output=True, text=True).stdout.split()
    return {"install_s": install_s, "detect_s": detect_s, "run_s": run_s,
            "first_result_s": install_s + detect_s + run_s, "target_s": TARGET_S,
            "met": install_s + detect_s + run_s <= TARGET_S, "cells": cells,
            "engines": sorted({c["engine"] for c in cells}), "default_sweep": prov.get("default_sweep"),
            "installed": [f for f in freeze if f.split("==")[0].lower() in ("xllamacpp", "gguf", "llama_cpp_python",
                                                                              "llama-cpp-python", "numpy", "infbench")],
            "detect_out": detect_out.rstrip().splitlines(), "run_out": run_out.rstrip().splitlines()}


def render(data: dict, variant: str | None = None) -> str:
    """Markdown for docs/benchmarks.md and the guide: the three steps' times and the target;
    ``front``: the README's example (the time to the first result and the run's line per cell);
    ``transcript``: what ``infbench detect`` (its CPU engine table and the lines after it) and
    ``infbench run`` printed on that fresh install, as a code block."""
    d = data
    if variant == "front":  # the README: what the run printed per cell, and the time to it
        cells = [line for line in d.get("run_out") or [] if re.match(r"\[\d+/\d+\] ", line)]
        return (f"From a fresh venv on a {d.get('cores', 2)}-core CPU, the first result took "
                f"{d['first_result_s']:.0f} s (install, detect, run); `infbench run` printed a line per cell:\n\n"
                "```\n$ infbench run\n...\n" + "\n".join(cells) + "\n```\n")
    if variant == "transcript":
        det = d.get("detect_out") or d.get("detect_tail") or []
        start = next((i for i, line in enumerate(det) if "Engines on cpu" in line), 0)
        return ("```\n$ infbench detect\n...\n" + "\n".join(det[start:]) + "\n$ infbench run\n"
                + "\n".join(d.get("run_out") or []) + "\n```\n")
    met = "met" if d["met"] else f"missed by {d['first_result_s'] - d['target_s']:.0f} s"
    ok = sum(1 for c in d["cells"] if c["status"] == "ok")
    builds = ", ".join(sorted({f"{c['engine']} ({c['build']})" for c in d["cells"]}))
    return ("| step | wall s |\n|---|---:|\n"
            f"| `pip install .` (fresh venv, no pip cache) | {d['install_s']:.0f} |\n"
            f"| `infbench detect` | {d['detect_s']:.0f} |\n"
            f"| `infbench run` (the default sweep: {ok}/{len(d['cells'])} cells ok on {builds}) | {d['run_s']:.0f} |\n"
            f"| **first result** | **{d['first_result_s']:.0f}** (target {d['target_s']:.0f}: {met}) |\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    load_before = os.getloadavg()
    data = measure()
    data.update(date=datetime.date.today().isoformat(), cores=os.cpu_count(), python=sys.version.split()[0],
                load_avg_before=load_before, load_avg_after=os.getloadavg(),
                command="python benchmarks/first_result.py")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=2) + "\n")
    print(render(data))


if __name__ == "__main__":
    main()
