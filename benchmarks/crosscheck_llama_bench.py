"""Cross-check: infbench's llama.cpp cells against llama.cpp's own ``llama-bench``.

The same GGUF (the one infbench's cell loaded, ``engine.model_file``), the same threads,
the same micro-batch (``n_ubatch`` 512; a prompt of at most 512 tokens is one decode call
in both), batch 1, the same lengths:

* **prompt processing** (pp): infbench ``n_in / TTFT`` (TTFT: one ``llama_decode`` of the
  whole prompt plus the argmax of its last logits) against ``llama-bench -p N -n 0``
  (``test_prompt``: the prompt as one batch, then ``llama_synchronize``), tokens/s;
* **generation** (tg): infbench ``1 / TPOT`` (TPOT = (E2E - TTFT) / (n_out - 1): the decode
  steps at positions ``N .. N + n_out - 2``) against ``llama-bench -p 0 -n (n_out - 1) -d N``
  (``test_gen`` at depth N: the same positions, one token per ``llama_decode``), tokens/s.

``--rounds`` rounds alternate the two tools (which one goes first alternates too); each
round is one ``infbench run --repeat R`` and one ``llama-bench -r R`` per test. Reported:
the median of every per-repeat figure of each side and their ratio - 1. Target: within 3 %.
The tools are built by ``scripts/llama_tools.sh`` from the llama.cpp sources
llama-cpp-python vendors (same version). Run under the shared lock:

    flock /tmp/infbench-heavy.lock python benchmarks/crosscheck_llama_bench.py \\
        [--model smollm2-135m --dtype f16 --input-len 128,512 --output-len 64 --rounds 3 --repeat 5] \\
        [--out benchmarks/results/crosscheck_llama_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Largest |infbench / llama-bench - 1| accepted (issue 27).
TARGET = 0.03


def tools_dir() -> Path:
    """The folder holding ``llama-bench`` and ``llama-perplexity`` (built if missing, by
    ``scripts/llama_tools.sh``; minutes on 2 cores, once per llama-cpp-python version).

    Raises:
        RuntimeError: the build failed (its output is in the message).
    """
    p = subprocess.run(["bash", str(ROOT / "scripts" / "llama_tools.sh")], capture_output=True, text=True,
                       env={**os.environ, "PYTHON": sys.executable})
    if p.returncode != 0:
        raise RuntimeError(f"scripts/llama_tools.sh failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return Path(p.stdout.strip().splitlines()[-1])


def infbench_cells(model: str, dtype: str, inputs: list[int], out_len: int, repeat: int, store: Path,
                   env: dict[str, str]) -> list[dict]:
    """``infbench run`` of batch-1 llama.cpp cells (``--repeat``, ``--force``); the cells' JSON."""
    cmd = [sys.executable, "-m", "infbench.cli", "run", "--model", model, "--engine", "llama.cpp", "--dtype", dtype,
           "--batch", "1", "--input-len", ",".join(map(str, inputs)), "--output-len", str(out_len),
           "--repeat", str(repeat), "--force", "--json", "--store", str(store)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"infbench run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    cells = json.loads(p.stdout)["cells"]
    bad = [c["error"] for c in cells if c["status"] != "ok"]
    if bad:
        raise RuntimeError(f"infbench cells failed: {bad}")
    return cells


def llama_bench(binary: Path, gguf: str, threads: int, args: list[str], repeat: int) -> list[dict]:
    """One ``llama-bench -o json`` run; its test records (``n_prompt``, ``n_gen``, ``n_depth``,
    ``samples_ts``, ``avg_ts``...)."""
    cmd = [str(binary), "-m", gguf, "-t", str(threads), "-r", str(repeat), "-o", "json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)


def measure(model: str = "smollm2-135m", dtype: str = "f16", inputs: tuple[int, ...] = (128, 512), out_len: int = 64,
            rounds: int = 3, repeat: int = 5, home: Path | None = None) -> dict:
    """Run both tools ``rounds`` times (alternating) and compare; the result recorded in the JSON.

    Returns:
        ``{"setup": {...}, "tests": [{"test": "pp128" | "tg63@d128", "infbench_tok_s",
        "llama_bench_tok_s", "diff", "within_target", "infbench_samples", "llama_bench_samples"}],
        "target": TARGET, "all_within_target": bool}``.

    Raises:
        RuntimeError: a tool failed.
    """
    work = Path(tempfile.mkdtemp(prefix="infbench-xcheck-"))
    env = {**os.environ, "INFBENCH_HOME": str(home or work / "home")}
    bins = tools_dir()
    ib: dict[str, list[float]] = {}
    lb: dict[str, list[float]] = {}
    others: list[float | None] = []  # other processes' cores during each infbench cell (noisy neighbours)
    first = infbench_cells(model, dtype, list(inputs), out_len, 1, work / "warm.db", env)  # writes the GGUF once
    gguf, threads = first[0]["engine"]["model_file"], first[0]["engine"]["n_threads"]
    t0 = time.time()
    for r in range(rounds):
        order = ("infbench", "llama-bench") if r % 2 == 0 else ("llama-bench", "infbench")
        for tool in order:
            if tool == "infbench":
                for c in infbench_cells(model, dtype, list(inputs), out_len, repeat, work / f"r{r}.db", env):
                    m, n = c["metrics"], c["spec"]["input_len"]
                    others.append((m.get("contention") or {}).get("other_cpu_cores"))
                    ib.setdefault(f"pp{n}", []).append(n / m["ttft_s"]["mean"])
                    ib.setdefault(f"tg{out_len - 1}@d{n}", []).append(1.0 / m["tpot_s"]["mean"])
            else:
                pp = llama_bench(bins / "llama-bench", gguf, threads,
                                 ["-p", ",".join(map(str, inputs)), "-n", "0"], repeat)
                tg = llama_bench(bins / "llama-bench", gguf, threads,
                                 ["-p", "0", "-n", str(out_len - 1), "-d", ",".join(map(str, inputs))], repeat)
                for t in pp:
                    lb.setdefault(f"pp{t['n_prompt']}", []).extend(t["samples_ts"])
                for t in tg:
                    lb.setdefault(f"tg{t['n_gen']}@d{t['n_depth']}", []).extend(t["samples_ts"])
                info = {k: pp[0].get(k) for k in ("build_commit", "build_number", "cpu_info", "backends", "n_batch",
                                                   "n_ubatch", "flash_attn", "type_k", "type_v", "model_type",
                                                   "model_size", "model_n_params", "poll")}
    tests = []
    for key in sorted(ib, key=lambda k: (k[:2], int(k.split("@d")[1]) if "@d" in k else int(k[2:]))):
        a, b = statistics.median(ib[key]), statistics.median(lb[key])
        tests.append({"test": key, "infbench_tok_s": round(a, 2), "llama_bench_tok_s": round(b, 2),
                      "diff": round(a / b - 1, 4), "within_target": abs(a / b - 1) <= TARGET,
                      "infbench_samples": [round(x, 2) for x in ib[key]],
                      "llama_bench_samples": [round(x, 2) for x in lb[key]]})
    import llama_cpp

    return {"setup": {"model": model, "dtype": dtype, "gguf": Path(gguf).name, "threads": threads, "batch": 1,
                      "input_lens": list(inputs), "output_len": out_len, "rounds": rounds, "repeat": repeat,
                      "llama_cpp_python": llama_cpp.__version__, "llama_bench": info, "cpus": os.cpu_count(),
                      "seconds": round(time.time() - t0, 1), "date": time.strftime("%Y-%m-%d"),
                      "other_cpu_cores_during_infbench_cells": others},
            "tests": tests, "target": TARGET, "all_within_target": all(t["within_target"] for t in tests)}


def render(data: dict, variant: str | None = None) -> str:
    """docs/benchmarks.md's table from crosscheck_llama_bench.json (benchmarks/docs_numbers.py)."""
    s = data["setup"]
    out = [f"{s['model']} {s['dtype']} (`{s['gguf']}`), batch 1, {s['threads']} threads, llama.cpp of "
           f"llama-cpp-python {s['llama_cpp_python']} (llama-bench build {s['llama_bench'].get('build_commit')}), "
           f"{s['rounds']} rounds x {s['repeat']} repeats per tool, medians; {s['date']}:", "",
           "| test | infbench tok/s | llama-bench tok/s | infbench / llama-bench - 1 | within 3 % |",
           "|---|---:|---:|---:|---|"]
    for t in data["tests"]:
        name = (f"prompt processing, {t['test'][2:]} tokens" if t["test"].startswith("pp") else
                f"generation, {t['test'][2:].split('@d')[0]} tokens after {t['test'].split('@d')[1]}")
        out.append(f"| {name} | {t['infbench_tok_s']:,.1f} | {t['llama_bench_tok_s']:,.1f} | "
                   f"{100 * t['diff']:+.1f} % | {'yes' if t['within_target'] else '**no**'} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--input-len", default="128,512")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "crosscheck_llama_bench.json")
    a = ap.parse_args()
    res = measure(a.model, a.dtype, tuple(int(x) for x in a.input_len.split(",")), a.output_len, a.rounds, a.repeat)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))


if __name__ == "__main__":
    main()
