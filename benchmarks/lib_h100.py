"""LLM-Inference-Bench's H100 llama.cpp cells for Meta-Llama-3-8B, reproduced (issue 39).

**What LIB's "batch" is for llama.cpp.** LIB ran (``llama.cpp/H100/llama3-8b.sh`` in
argonne-lcf/LLM-Inference-Bench)::

    llama-bench -m llama_3_8b_f16.gguf -p IN -n OUT -pg IN,OUT -b BATCH -r 1 -o csv

``-b`` is llama.cpp's logical batch (``n_batch``), which also caps the physical batch
(``n_ubatch``, 512 by default): the number of prompt tokens one forward pass takes. Every test
is **one sequence**. The CSV's latency is the ``pg`` test (prompt then generation) and its
throughput is (IN + OUT) / latency. At ``-b 1`` the prompt goes through one token per pass, so
128 + 128 tokens take 256 passes (2.52 s, 9.8 ms each); at ``-b 16`` it takes 8 + 128 = 136
passes (1.41 s, 10.4 ms each): latency falls with "batch", which no reading of batch as
concurrent sequences explains. The matching infbench cell is therefore ``--batch 1`` with
``--engine-arg n_ubatch=BATCH`` (llama.cpp-server's ``--ubatch-size``; its logical batch stays
2048 >= BATCH), and LIB's latency is that cell's E2E (TTFT + the decode steps).

**What LIB's figure implies.** With every pass memory-bound (a prompt chunk of 64 tokens or
fewer costs about one decode step on an H100), a pass takes at most
``step = latency / (ceil(IN / BATCH) + OUT)`` and reads at least the decode bytes of one step
(:func:`infbench.analysis.roofline.roofline_for`: the weights without the embedding table, the
KV cache), so ``MBU >= decode_bytes / (step x bandwidth)``.

This script:

* always: the LIB side of each cell of the subset (IN = OUT in 128 and 1024, BATCH in 1, 16 and 64,
  one GPU; ``benchmarks/data/lib_all_results.csv``), with the implied step and MBU on the
  described device (``--device``, default ``h100-sxm``: 3.35 TB/s), and the infbench command of
  each cell;
* ``--run``: runs those cells with infbench into ``--store`` (one ``infbench run`` per cell: a
  failed cell does not stop the rest) on this host's GPU; never on a CPU unless ``--model`` names
  a CPU-sized model (the script's logic checked on a CPU with ``--model tiny``);
* ``--store``: reads the measured cells and writes infbench beside LIB: E2E, the ratio, TPOT, MBU
  (infbench's own, from the measured TPOT), and whether the cell is within 15 % of LIB's E2E;
* ``--llama-bench FILE``: the bare engine's own figure for the same cells (``llama-bench -o json``
  of LIB's command, built as infbench's server: :mod:`scripts/gpu_llama_cuda.sh`), beside both.

    python benchmarks/lib_h100.py                                   # the LIB side and the plan
    python benchmarks/lib_h100.py --run --store lib.db              # on the GPU host
    python benchmarks/lib_h100.py --store lib.db --llama-bench lb.json --out benchmarks/results/lib_h100.json

Target (issue 39): each cell within 15 % of LIB's E2E, or a measured reason (llama.cpp version,
flags, the GPU's clocks). Without a GPU no measured figure is written: ``infbench`` is None.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CSV = Path(__file__).resolve().parent / "data" / "lib_all_results.csv"
#: LIB's hardware, framework and model names in its CSV, and the zoo name of the model.
LIB_HW, LIB_FW, LIB_MODEL, ZOO_MODEL = "Nvidia H100 GPU", "llama.cpp", "meta-llama/Meta-Llama-3-8B", "llama-3-8b"
#: The subset issue 39 asks for: IN = OUT lengths and LIB batches.
LENGTHS = (128, 1024)
BATCHES = (1, 16, 64)
#: Within this of LIB's E2E a cell is reproduced.
TOL = 0.15


def lib_cells(path: Path = CSV, lengths: tuple[int, ...] = LENGTHS,
              batches: tuple[int, ...] = BATCHES) -> list[dict[str, Any]]:
    """LIB's H100 llama.cpp Llama-3-8B rows on one GPU for ``lengths`` x ``batches``:
    ``{"io", "batch", "latency_s", "tok_s"}`` (``io``: IN = OUT tokens; ``tok_s``: LIB's
    throughput, (IN + OUT) / latency).

    Raises:
        SystemExit: a cell of the subset is missing from the CSV.
    """
    want = {(n, b) for n in lengths for b in batches}
    out = {}
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if (r["Hardware"], r["Num of Hardware"], r["Framework"], r["Model"]) != (LIB_HW, "1", LIB_FW, LIB_MODEL):
                continue
            key = (int(r["Input Output Length"]), int(r["Batch Size"]))
            if key in want:
                out[key] = {"io": key[0], "batch": key[1], "latency_s": float(r["Latency"]),
                            "tok_s": float(r["Throughput"])}
    missing = sorted(want - set(out))
    if missing:
        raise SystemExit(f"{path}: no LIB row for (io, batch) {missing}")
    return [out[k] for k in sorted(out)]


def passes(io: int, batch: int) -> int:
    """Forward passes of LIB's ``pg`` test: ``ceil(IN / BATCH)`` prompt chunks, then llama-bench's
    ``OUT`` single-token decodes. infbench's E2E of the same request takes one pass fewer (its
    first token comes from the last prompt chunk): under 0.4 % of these cells."""
    return math.ceil(io / batch) + io


def lib_side(cell: dict[str, Any], limits: Any, model: str = ZOO_MODEL) -> dict[str, Any]:
    """What LIB's figure implies on ``limits``' device: ``step_s_at_most`` (s per pass),
    ``mbu_at_least`` (module doc) and ``tok_s_check`` (IN + OUT) / latency against LIB's own
    throughput column (1.0: the CSV is self-consistent)."""
    from infbench.analysis.roofline import roofline_for

    spec = {"model": model, "dtype": "float16", "batch": 1, "input_len": cell["io"], "output_len": cell["io"],
            "load": None}
    r = roofline_for(spec, None, limits)
    step = cell["latency_s"] / passes(cell["io"], cell["batch"])
    return {"passes": passes(cell["io"], cell["batch"]), "step_s_at_most": step,
            "mbu_at_least": r["decode_bytes_per_step"] / (step * limits.bandwidth_bytes_s) if r else None,
            "tok_s_check": 2 * cell["io"] / cell["latency_s"] / cell["tok_s"]}


def infbench_args(cell: dict[str, Any], model: str, engine: str = "llama.cpp-server") -> list[str]:
    """``infbench run`` arguments of the cell matching LIB's (module doc)."""
    return ["--model", model, "--engine", engine, "--dtype", "f16", "--batch", "1", "--input-len", str(cell["io"]),
            "--output-len", str(cell["io"]), "--engine-arg", f"n_ubatch={cell['batch']}"]


def measured(store: Path, cells: list[dict[str, Any]], model: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The newest ok cell of the store matching each LIB cell (model, llama.cpp-server, batch 1,
    IN = OUT, ``n_ubatch``): ``{"cell_id", "device", "e2e_s", "ttft_s", "tpot_s", "mbu", "flags",
    "device_proof"}`` (s; E2E, TTFT, TPOT are p50)."""
    from infbench.store import Store

    out: dict[tuple[int, int], dict[str, Any]] = {}
    for r in Store(store).results():
        s, m = r["spec"], r["metrics"] or {}
        if r["status"] != "ok" or s["model"] != model or s["engine"] != "llama.cpp-server" or s["batch"] != 1:
            continue
        key = (s["input_len"], int((s.get("engine_args") or {}).get("n_ubatch", 0)))
        if s["output_len"] != s["input_len"] or key not in {(c["io"], c["batch"]) for c in cells}:
            continue
        out[key] = {"cell_id": r["cell_id"], "device": r["device"]["model"],
                    "e2e_s": (m.get("e2e_s") or {}).get("p50"), "ttft_s": (m.get("ttft_s") or {}).get("p50"),
                    "tpot_s": (m.get("tpot_s") or {}).get("p50"), "mbu": m.get("mbu"),
                    "suspect": m.get("suspect"),
                    "device_proof": (r.get("engine") or {}).get("device_proof")}
    return out


def bare(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """llama-bench's ``pg`` tests from its ``-o json`` output: per (IN, n_batch), ``e2e_s``
    (``avg_ns`` / 1e9) and ``tok_s`` (``avg_ts``), with the build it reports."""
    out = {}
    for t in json.loads(path.read_text()):
        if t.get("n_prompt") and t.get("n_gen") and t["n_prompt"] == t["n_gen"]:
            out[(int(t["n_prompt"]), int(t["n_batch"]))] = {
                "e2e_s": t["avg_ns"] / 1e9, "tok_s": t["avg_ts"], "build": t.get("build_commit"),
                "n_ubatch": t.get("n_ubatch")}
    return out


def main() -> None:
    """Parse the arguments; compute the LIB side; run, read and compare as asked; print or write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="h100-sxm", help="device description id for the implied MBU")
    ap.add_argument("--model", default=ZOO_MODEL, help="zoo model of the cells (tiny: a logic check on a CPU)")
    ap.add_argument("--run", action="store_true", help="run the cells with infbench into --store")
    ap.add_argument("--store", type=Path, help="the store the cells are (or go) in")
    ap.add_argument("--llama-bench", type=Path, help="llama-bench -o json output of LIB's command")
    ap.add_argument("--timeout-s", type=float, default=600, help="per cell run, s")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="all runs together, s: a cell that would start past it is skipped and said (the GPU "
                    "host's minutes are counted)")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from infbench.analysis.roofline import Limits
    from infbench.contract.manager import get_plugin_manager
    from infbench.detect.devices import catalog, find_spec

    if a.run and a.store is None:
        raise SystemExit("--run needs --store (where the cells go)")
    lim = Limits.from_info(find_spec(catalog(get_plugin_manager()), a.device).per_device())
    cells = lib_cells()
    runs = []
    if a.run:
        start = time.perf_counter()
        for c in cells:
            left = a.timeout_s if a.budget_s is None else min(a.timeout_s, a.budget_s - (time.perf_counter() - start))
            if left < 10:
                runs.append({"io": c["io"], "batch": c["batch"], "exit": None, "wall_s": 0.0,
                             "stderr_tail": f"skipped: --budget-s {a.budget_s:g} spent"})
                continue
            t0 = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, "-m", "infbench.cli", "run", *infbench_args(c, a.model),
                                    "--store", str(a.store), "--json"], capture_output=True, text=True, timeout=left)
                code, tail = p.returncode, p.stderr[-800:] if p.returncode else ""
            except subprocess.TimeoutExpired as e:
                code, tail = None, f"stopped after {left:.0f} s: {(e.stderr or b'')[-600:]!r}"
            runs.append({"io": c["io"], "batch": c["batch"], "exit": code, "wall_s": time.perf_counter() - t0,
                         "stderr_tail": tail})
            print(f"io {c['io']} batch {c['batch']}: exit {code} in {runs[-1]['wall_s']:.0f} s", flush=True)
    got = measured(a.store, cells, a.model) if a.store and a.store.exists() else {}
    lb = bare(a.llama_bench) if a.llama_bench else {}
    rows = []
    for c in cells:
        k = (c["io"], c["batch"])
        m, b = got.get(k), lb.get(k)
        ratio = m["e2e_s"] / c["latency_s"] if m and m["e2e_s"] else None
        rows.append({**c, "lib": lib_side(c, lim), "command": "infbench run " + " ".join(infbench_args(c, a.model)),
                     "infbench": m, "bare": b, "e2e_vs_lib": ratio,
                     "bare_vs_lib": b["e2e_s"] / c["latency_s"] if b else None,
                     "infbench_vs_bare": m["e2e_s"] / b["e2e_s"] if m and m["e2e_s"] and b else None,
                     "within": None if ratio is None else abs(ratio - 1) <= TOL})
    out = {"source": "LLM-Inference-Bench (arXiv:2411.00136), benchmarks/data/lib_all_results.csv: H100, 1 GPU, "
                     "llama.cpp, Meta-Llama-3-8B f16 GGUF",
           "device": a.device, "bandwidth_bytes_s": lim.bandwidth_bytes_s, "model": a.model, "tol": TOL,
           "cells": rows, "runs": runs, "store": str(a.store) if a.store else None,
           "date": time.strftime("%Y-%m-%d")}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2) if a.json else render(out))


def render(d: dict[str, Any], variant: str | None = None) -> str:
    """The table (docs/hardware-runs.md): per cell LIB's latency, the pass it implies and its MBU,
    the bare llama-bench and infbench's E2E with their ratios to LIB's ("-": not measured)."""
    def f(x: Any, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    lines = [f"LIB: {d['source']}; implied figures on {d['device']} ({d['bandwidth_bytes_s'] / 1e12:.2f} TB/s).", "",
             "| in = out | LIB batch (n_ubatch) | LIB E2E s | passes | LIB s/pass at most | LIB MBU at least | "
             "llama-bench E2E s | infbench E2E s | infbench / LIB | infbench TPOT ms | infbench MBU | within 15 % |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in d["cells"]:
        m, b, lib = r["infbench"] or {}, r["bare"] or {}, r["lib"]
        lines.append(f"| {r['io']} | {r['batch']} | {r['latency_s']:.2f} | {lib['passes']} | "
                     f"{1e3 * lib['step_s_at_most']:.1f} ms | {f(lib['mbu_at_least'], '.2f')} | "
                     f"{f(b.get('e2e_s'), '.2f')} | {f(m.get('e2e_s'), '.2f')} | {f(r['e2e_vs_lib'], '.2f')} | "
                     f"{f(m['tpot_s'] * 1e3 if m.get('tpot_s') else None, '.2f')} | {f(m.get('mbu'), '.2f')} | "
                     f"{'-' if r['within'] is None else ('yes' if r['within'] else 'no')} |")
    if not any(r["infbench"] for r in d["cells"]):
        lines += ["", "No cell measured yet: the infbench and llama-bench columns fill in on an H100 "
                  "(scripts/gpu_llama_cuda.sh)."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
