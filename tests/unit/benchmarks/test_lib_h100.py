"""benchmarks/lib_h100.py's LIB side (issue 39): the subset read from LIB's CSV, and the reading
of LIB's llama.cpp "batch" as llama-bench's ``-b`` on one sequence (prompt chunks), checked on
the published figures themselves."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("lib_h100", ROOT / "benchmarks" / "lib_h100.py")
lib = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lib)


def test_subset_is_read_and_self_consistent():
    cells = lib.lib_cells()
    assert [(c["io"], c["batch"]) for c in cells] == [(n, b) for n in (128, 1024) for b in (1, 16, 64)]
    first = cells[0]
    assert (first["latency_s"], round(first["tok_s"], 1)) == (2.52048, 101.6)
    for c in cells:  # LIB's throughput is (IN + OUT) / latency: one sequence, not `batch` of them
        assert abs(2 * c["io"] / c["latency_s"] / c["tok_s"] - 1) < 0.01, c


def test_batch_as_prompt_chunks_explains_the_published_latencies():
    """Read as concurrent sequences, batch 16 could not be faster than batch 1 for one request's
    latency; read as prompt chunks of `batch` tokens, every cell's time per forward pass is the
    same to within 10 % (9.8-10.7 ms), as one memory-bound pass of an 8B f16 model is."""
    per_pass = [c["latency_s"] / lib.passes(c["io"], c["batch"]) for c in lib.lib_cells()]
    assert max(per_pass) / min(per_pass) < 1.10
    assert lib.passes(128, 1) == 256 and lib.passes(128, 16) == 136 and lib.passes(1024, 64) == 1040


def test_infbench_cell_matches_lib_setting():
    c = {"io": 128, "batch": 16}
    args = lib.infbench_args(c, "llama-3-8b")
    assert args[args.index("--batch") + 1] == "1" and args[args.index("--engine-arg") + 1] == "n_ubatch=16"
    assert args[args.index("--input-len") + 1] == args[args.index("--output-len") + 1] == "128"


def test_bare_reads_llama_bench_pg_tests(tmp_path):
    out = [{"n_prompt": 128, "n_gen": 0, "n_batch": 16, "avg_ns": 1e8, "avg_ts": 1280.0},
           {"n_prompt": 128, "n_gen": 128, "n_batch": 16, "n_ubatch": 16, "avg_ns": 1.5e9, "avg_ts": 170.7,
            "build_commit": "abc"}]
    (tmp_path / "lb.json").write_text(json.dumps(out))
    got = lib.bare(tmp_path / "lb.json")
    assert got == {(128, 16): {"e2e_s": 1.5, "tok_s": 170.7, "build": "abc", "n_ubatch": 16}}


def test_render_says_nothing_was_measured():
    d = {"source": "LIB", "device": "h100-sxm", "bandwidth_bytes_s": 3.35e12,
         "cells": [{**c, "lib": {"passes": lib.passes(c["io"], c["batch"]), "step_s_at_most": 0.01,
                                 "mbu_at_least": 0.45}, "infbench": None, "bare": None, "e2e_vs_lib": None,
                    "within": None} for c in lib.lib_cells()]}
    text = lib.render(d)
    assert text.count("\n| 1") == 6 and "No cell measured yet" in text
