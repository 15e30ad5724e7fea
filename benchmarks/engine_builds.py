"""Benchmark: the two llama.cpp builds of the CPU's default sweep, and what compiling costs.

Part 1 (engines): the CPU's default sweep (the ``quick`` preset, 6 cells of the SmolLM2-135M
shape, f16 dummy weights, batch 1/4/8, input 128/512, output 64) run by ``infbench run`` on
each build, ``--rounds`` times alternately into fresh stores:

* ``llama.cpp``: llama-cpp-python in-process, llama.cpp compiled here (source build);
* ``llama.cpp-server``: llama.cpp's server from the prebuilt ``xllamacpp`` wheel.

Per cell: E2E p50, TTFT p50, TPOT p50 and output tok/s of each build, from the round with the
lowest E2E p50 (the least disturbed one: on a machine shared with other work, interference only
ever adds time), and the speed-up = prebuilt E2E p50 / compiled E2E p50; its min, max and
geometric mean over the cells are what ``infbench detect`` and ``run --dry-run`` quote. Also
the wall time of each whole ``infbench run`` (the first result's time on each build; the
least of the rounds) and the load average before and after.

Part 2 (``--compile``): the source build of llama-cpp-python (the version installed here),
timed as ``pip install --no-cache-dir llama-cpp-python==V`` into a fresh venv, once without
and once with infbench's ``CMAKE_ARGS`` (:data:`infbench.libs.llama.LLAMA_CPP_CMAKE_ARGS`),
each build checked by loading the library it made. Minutes each.

Runs on a quiet CPU: under the shared lock, nothing else measuring
(``flock /tmp/infbench-heavy.lock``). Writes ``--out`` and the same JSON into the package
(``core/infbench/data/engine_builds.json``, read by ``infbench detect``); a part not run keeps
its figures from the existing file.

    python benchmarks/engine_builds.py [--rounds 2] [--compile]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "engine_builds.json"
PACKAGE_COPY = ROOT / "core" / "infbench" / "data" / "engine_builds.json"
ENGINES = {"compiled": "llama.cpp", "prebuilt": "llama.cpp-server"}
METRICS = {"e2e_p50_s": ("e2e_s", "p50"), "ttft_p50_s": ("ttft_s", "p50"), "tpot_p50_s": ("tpot_s", "p50"),
           "output_tok_s": ("output_tok_s", None)}


def machine() -> dict[str, Any]:
    """CPU model (``/proc/cpuinfo``), logical cores, Python, and the two builds' versions."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": sys.version.split()[0]}


def run_sweep(engine: str, store: Path, home: Path) -> tuple[float, list[dict]]:
    """One ``infbench run --preset quick --engine ENGINE --json`` into ``store``; (wall s, cells)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "run", "--preset", "quick", "--engine", engine,
                        "--store", str(store), "--force", "--json"], capture_output=True, text=True,
                       env={**os.environ, "INFBENCH_HOME": str(home)}, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"infbench run --engine {engine} failed:\n{p.stderr[-3000:]}")
    return wall, json.loads(p.stdout)["cells"]


def value(cell: dict, key: str) -> float:
    """One metric of a stored cell (``results --format json`` shape)."""
    name, stat = METRICS[key]
    v = cell["metrics"][name]
    return v[stat] if stat else v


def measure_engines(rounds: int) -> dict[str, Any]:
    """Part 1 (see the module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        run_sweep("llama.cpp", Path(tmp) / "warm.db", home)        # dummy GGUF written, CPU limits measured
        walls: dict[str, list[float]] = {b: [] for b in ENGINES}
        vals: dict[str, dict[tuple, dict[str, list[float]]]] = {b: {} for b in ENGINES}
        builds: dict[str, Any] = {}
        for i in range(rounds):
            for b in ENGINES if i % 2 == 0 else reversed(list(ENGINES)):
                wall, cells = run_sweep(ENGINES[b], Path(tmp) / f"{b}-{i}.db", home)
                walls[b].append(wall)
                for c in cells:
                    if c["status"] != "ok":
                        raise SystemExit(f"{ENGINES[b]}: cell {c['cell_id']} failed: {c.get('error')}")
                    s = c["spec"]
                    key = (s["batch"], s["input_len"], s["output_len"])
                    for k in METRICS:
                        vals[b].setdefault(key, {}).setdefault(k, []).append(value(c, k))
                    builds[b] = (c.get("engine") or {}).get("build")
    cells = []
    for key in sorted(vals["compiled"]):
        row: dict[str, Any] = {"batch": key[0], "input_len": key[1], "output_len": key[2]}
        for b in ENGINES:
            best = min(range(len(vals[b][key]["e2e_p50_s"])), key=vals[b][key]["e2e_p50_s"].__getitem__)
            row[b] = {k: v[best] for k, v in vals[b][key].items()}
        row["speedup_e2e"] = row["prebuilt"]["e2e_p50_s"] / row["compiled"]["e2e_p50_s"]
        cells.append(row)
    sp = [c["speedup_e2e"] for c in cells]
    return {"rounds": rounds, "cells": cells, "builds": builds,
            "speedup": {"min": min(sp), "max": max(sp), "geomean": math.exp(statistics.fmean(map(math.log, sp))),
                        "cells": len(sp), "metric": "prebuilt E2E p50 / compiled E2E p50"},
            "sweep_wall_s": {b: min(w) for b, w in walls.items()}, "sweep_wall_s_all": walls,
            "per_cell": "the round with the lowest E2E p50 of each build"}


def time_compile(version: str, cmake_args: str | None) -> dict[str, Any]:
    """Part 2: ``pip install --no-cache-dir llama-cpp-python==VERSION`` into a fresh venv, timed;
    the build is checked by loading it (``llama_print_system_info``) and its libraries listed."""
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        py = venv / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "PYTHONPATH")}
        env["PIP_NO_CACHE_DIR"] = "1"
        if cmake_args:
            env["CMAKE_ARGS"] = cmake_args
        cmd = [str(py), "-m", "pip", "install", "-q", "--no-cache-dir", f"llama-cpp-python=={version}"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200)
        seconds = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"pip install failed ({cmake_args!r}):\n{p.stderr[-3000:]}")
        probe = ("import llama_cpp, pathlib; print(llama_cpp.llama_print_system_info().decode()); "
                 "lib = pathlib.Path(llama_cpp.__file__).parent / 'lib'; "
                 "print(' '.join(sorted(f.name for f in lib.glob('*.so'))))")
        check = subprocess.run([str(py), "-c", probe], env=env, capture_output=True, text=True, timeout=120,
                               check=True)
        info, libs = check.stdout.strip().splitlines()[-2:]
    return {"s": seconds, "cmake_args": cmake_args or "", "command": ("CMAKE_ARGS=... " if cmake_args else "")
            + " ".join(["pip", "install", "--no-cache-dir", f"llama-cpp-python=={version}"]),
            "system_info": info.strip(), "libraries": libs.split()}


def render(data: dict, variant: str | None = None) -> str:
    """Markdown for docs/benchmarks.md: ``None`` the per-cell table of the two builds, ``compile``
    the source build's time before and after infbench's CMAKE_ARGS."""
    if variant == "compile":
        c = data.get("compile") or {}
        if not c:
            return "_not measured: run `benchmarks/engine_builds.py --compile`_\n"
        b, a = c["before"], c["after"]
        rows = ["| build of llama-cpp-python " + c["version"] + " | CMAKE_ARGS | install s | shared libraries |",
                "|---|---|---:|---|"]
        for name, x in (("as published (before)", b), ("infbench's flags (after)", a)):
            rows.append(f"| {name} | `{x['cmake_args'] or '-'}` | {x['s']:.0f} | {', '.join(x['libraries'])} |")
        rows.append(f"| saved | | {b['s'] - a['s']:.0f} ({(b['s'] - a['s']) / b['s']:.0%}) | |")
        return "\n".join(rows) + "\n"
    e = data
    rows = ["| batch | in | out | compiled E2E p50 s | prebuilt E2E p50 s | speed-up | compiled TTFT p50 ms | "
            "prebuilt TTFT p50 ms | compiled out tok/s | prebuilt out tok/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in e["cells"]:
        a, b = c["compiled"], c["prebuilt"]
        rows.append(f"| {c['batch']} | {c['input_len']} | {c['output_len']} | {a['e2e_p50_s']:.3f} | "
                    f"{b['e2e_p50_s']:.3f} | {c['speedup_e2e']:.2f}x | {a['ttft_p50_s'] * 1e3:,.0f} | "
                    f"{b['ttft_p50_s'] * 1e3:,.0f} | {a['output_tok_s']:.1f} | {b['output_tok_s']:.1f} |")
    s = e["speedup"]
    w = e["sweep_wall_s"]
    rows.append(f"| **all** | | | | | **{s['min']:.2f}-{s['max']:.2f}x** (geomean {s['geomean']:.2f}x) | | | | |")
    rows.append("")
    rows.append(f"Per cell the least disturbed of {e['rounds']} rounds. Whole default sweep (`infbench run`, "
                f"{s['cells']} cells, warm-ups and model load included; least of the rounds): compiled "
                f"{w['compiled']:.0f} s, prebuilt {w['prebuilt']:.0f} s.")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of the sweep on each build")
    ap.add_argument("--no-engines", action="store_true", help="skip part 1 (keep its figures from --out)")
    ap.add_argument("--compile", action="store_true", help="run part 2 (two source builds, minutes each)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    import llama_cpp
    import xllamacpp

    old = json.loads(a.out.read_text()) if a.out.exists() else {}
    data = dict(old)
    if not a.no_engines:
        load_before = os.getloadavg()
        data.update(measure_engines(a.rounds))
        data["load_avg_before_after"] = [load_before, os.getloadavg()]
        data["machine"] = machine()
        data["versions"] = {"llama_cpp_python": llama_cpp.__version__, "xllamacpp": xllamacpp.__version__}
        data["date"] = datetime.date.today().isoformat()
        data["command"] = "python benchmarks/engine_builds.py --rounds " \
                          f"{a.rounds}" + (" --compile" if a.compile else "")
    if a.compile:
        from infbench.libs.llama import LLAMA_CPP_CMAKE_ARGS

        v = llama_cpp.__version__
        before = time_compile(v, None)
        after = time_compile(v, LLAMA_CPP_CMAKE_ARGS)
        data["compile"] = {"version": v, "before": before, "after": after, "cores": os.cpu_count(),
                           "date": datetime.date.today().isoformat(), "machine": machine(),
                           "command": "python benchmarks/engine_builds.py --compile"}
    text = json.dumps(data, indent=2) + "\n"
    for path in (a.out, PACKAGE_COPY):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if "cells" in data:
        print(render(data))
    if data.get("compile"):
        print(render(data, "compile"))


if __name__ == "__main__":
    main()
