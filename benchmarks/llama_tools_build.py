"""What building llama.cpp's ``llama-bench`` and ``llama-perplexity`` costs the install
(``scripts/llama_tools.sh``, run by ``scripts/setup.sh``): seconds to fetch and configure,
seconds to build the two targets, jobs, flags, source version.

    python benchmarks/llama_tools_build.py      # a fresh build in a temp folder
    python benchmarks/llama_tools_build.py --from-cache                         # the cached build's own record

Either way the figures are those ``scripts/llama_tools.sh`` recorded (``build.json``) when it
built; ``--from-cache`` copies the record of the build setup.sh made.
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
    """docs/benchmarks.md's sentence from llama_tools_build.json (benchmarks/docs_numbers.py)."""
    total = data["download_configure_s"] + data["build_s"]
    return (f"Building them (`scripts/llama_tools.sh`, {data['jobs']} jobs, {data['host_cpus']} CPUs, "
            f"{data['source']}) took {data['build_s'] / 60:.1f} min to compile\nand {total / 60:.1f} min in all "
            f"(download and configure included) on {data['built'][:10]}; it runs once per llama-cpp-python version.")


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
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    print(render(record))


if __name__ == "__main__":
    main()
