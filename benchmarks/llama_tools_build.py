"""What building llama.cpp's ``llama-bench`` and ``llama-perplexity`` costs the install
(``scripts/llama_tools.sh``, run by ``scripts/setup.sh``): seconds to fetch and configure,
seconds to build the two targets, jobs, flags, source version, and which way it built them:

* ``setup``: the way setup.sh takes, in llama-cpp-python's kept build tree
  (``scripts/llama_cpp_python.sh``), linking the libraries compiled there;
* ``static``: the fallback where that tree is missing, everything from the sdist.

    python benchmarks/llama_tools_build.py              # static: a fresh build in a temp folder
    python benchmarks/llama_tools_build.py --from-cache # setup: the record of the build setup.sh made

Either way the figures are those ``scripts/llama_tools.sh`` recorded (``build.json``) when it
built; each run replaces its own part of the JSON and keeps the other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's sentences from llama_tools_build.json (benchmarks/docs_numbers.py):
    the ``setup`` way's seconds, then the ``static`` fallback's minutes."""
    tree, static = data["setup"], data["static"]
    total = static["download_configure_s"] + static["build_s"]
    return (f"Building them in llama-cpp-python's build tree (`scripts/llama_tools.sh`, {tree['jobs']} jobs, "
            f"{tree['host_cpus']} CPUs, llama-cpp-python {tree['llama_cpp_python']}) took {tree['build_s']} s to "
            f"compile\nand link on {tree['built'][:10]}. The static fallback ({static['source']}) took "
            f"{static['build_s'] / 60:.1f} min to compile\nand {total / 60:.1f} min in all (download and configure "
            f"included) on {static['built'][:10]}. Either runs once per llama-cpp-python version.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-cache", action="store_true", help="record the cached build instead of building anew")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "llama_tools_build.json")
    a = ap.parse_args()
    env = {**os.environ, "PYTHON": sys.executable}
    if not a.from_cache:
        env["INFBENCH_TOOLS_DIR"] = tempfile.mkdtemp(prefix="infbench-tools-")
    p = subprocess.run(["bash", str(ROOT / "scripts" / "llama_tools.sh")], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"scripts/llama_tools.sh failed:\n{p.stderr[-3000:]}")
    record = json.loads((Path(p.stdout.strip().splitlines()[-1]).parent / "build.json").read_text())
    data = json.loads(a.out.read_text()) if a.out.exists() else {}
    data["setup" if a.from_cache else "static"] = record
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=2) + "\n")
    if {"setup", "static"} <= data.keys():
        print(render(data))


if __name__ == "__main__":
    main()
