"""The README's example terminal output, captured from the real commands (no hand edits):

1. ``infbench detect`` on this host;
2. ``infbench detect`` with the stand-in plugin of tests/integration/test_accelerator_first.py
   that reports an NVIDIA H100 on this CPU-only host (only detection is faked; the engine
   table is the real plugins' verdict);
3. ``infbench run`` with no arguments (the detected device's default sweep), timed.

Each in a fresh ``INFBENCH_HOME`` (the dummy GGUF and the CPU limits are made before the
timed run by an untimed one), with ``COLUMNS`` wide enough for the tables. Run it under the
shared lock (it measures):

    python benchmarks/readme_example.py [--out benchmarks/results/readme_example.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COLUMNS = "160"


def cli(*args: str, env: dict[str, str]) -> tuple[str, float]:
    """``infbench ARGS``: stdout + stderr as a terminal shows them, and the wall time (s).

    Raises:
        SystemExit: the command failed.
    """
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                       env={**os.environ, **env, "COLUMNS": COLUMNS, "TERM": "dumb", "NO_COLOR": "1"}, timeout=1800)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"infbench {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return (p.stderr + p.stdout).rstrip(), dt


def stand_in_plugin(root: Path) -> str:
    """The H100 stand-in plugin folder (as the integration test writes it); returns its path."""
    from tests.integration.test_accelerator_first import DEVICES, PLUGIN

    devices = {k: d.model_dump() for k, d in DEVICES.items()}
    root.mkdir(parents=True, exist_ok=True)
    (root / "infbench_fakegpu.py").write_text(PLUGIN.replace("{DEVICES}", repr(devices)))
    info = root / "infbench_fakegpu-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: infbench-fakegpu\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[infbench]\nfakegpu = infbench_fakegpu\n")
    return str(root)


def render(data: dict, variant: str | None = None) -> str:
    """The README's blocks from readme_example.json (benchmarks/docs_numbers.py): ``detect``,
    ``detect_h100`` (its engine table only), ``run``, or ``seconds`` (the default sweep's time)."""
    if variant == "seconds":
        return (f"`infbench run` with no arguments runs the detected device's **default sweep**; on this "
                f"project's {data['cpus']}-core VM\nit took {data['run_s']:.0f} s "
                f"(`benchmarks/results/readme_example.json`).")
    if variant == "detect_h100":
        lines = data["detect_h100"].splitlines()
        start = next(i for i, x in enumerate(lines) if "Engines on nvidia" in x)
        end = next((i for i in range(start + 1, len(lines)) if "Engines on " in lines[i]), len(lines))
        body = "\n".join(lines[start:end])
        return f"```\n$ INFBENCH_FAKE_GPU=nvidia infbench detect     # stand-in plugin on PYTHONPATH\n{body}\n```"
    cmd = {"detect": "infbench detect", "run": "infbench run"}[variant or "run"]
    return f"```\n$ {cmd}\n{data[variant or 'run']}\n```"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "readme_example.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="infbench-readme-"))
    home = {"INFBENCH_HOME": str(work / "home")}
    detect, _ = cli("detect", env=home)
    fake = stand_in_plugin(work / "fakegpu")
    path = os.pathsep.join([fake, os.environ.get("PYTHONPATH", "")])
    h100, _ = cli("detect", env={"INFBENCH_HOME": str(work / "h100-home"), "PYTHONPATH": path,
                                 "INFBENCH_FAKE_GPU": "nvidia"})
    cli("run", "--store", str(work / "warm.db"), env=home)        # dummy GGUF and CPU limits, untimed
    run, run_s = cli("run", env=home)
    res = {"detect": detect.replace(str(work), "..."), "detect_h100": h100.replace(str(work), "..."),
           "run": run.replace(str(work / "home"), "~/.infbench"), "run_s": round(run_s, 1), "cpus": os.cpu_count(),
           "host": platform.node(), "date": time.strftime("%Y-%m-%d"), "columns": int(COLUMNS)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res, "detect"), render(res, "detect_h100"), render(res, "run"), render(res, "seconds"), sep="\n\n")


if __name__ == "__main__":
    main()
