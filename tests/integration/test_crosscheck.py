"""Cross-checks against tools nobody here wrote (issue 27): llama.cpp's own ``llama-bench`` and
``llama-perplexity`` (built by scripts/llama_tools.sh from the llama.cpp sources llama-cpp-python
vendors) and vLLM's own throughput benchmark, each against infbench on the same model, shapes
and settings. The measuring code is the benchmark scripts' (benchmarks/crosscheck_*.py, which
write the committed figures); these tests run smaller versions and write their agreement as
JSON to ``$INFBENCH_CROSSCHECK_DIR`` (default: the test's tmp folder). The speed comparisons
start each tool's run in a quiet second and compare the samples measured while other processes
left the CPUs alone (infbench's noisy-neighbour check); without enough of them the test is
skipped, or fails under CI=true (a quiet machine)."""

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def bench(name: str):
    """benchmarks/NAME.py as a module (benchmarks/ is not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"_xcheck_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def keep(tmp_path: Path, name: str, result: dict) -> Path:
    out = Path(os.environ.get("INFBENCH_CROSSCHECK_DIR") or tmp_path) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return out


def agrees_in_form(ours: float, theirs: float, diff: float | None) -> None:
    """The comparison's mechanism: both tools measured a finite positive rate and the stated
    difference is ours / theirs - 1 (as rounded in the result). How close the two are is the
    benchmark's to say (docs/benchmarks.md, 3 % targets), not a test's: a timing bound on a
    shared 2-core VM fails on its noise (issue 40, item 9)."""
    assert math.isfinite(ours) and ours > 0 and math.isfinite(theirs) and theirs > 0
    assert diff is not None and diff == pytest.approx(ours / theirs - 1, abs=2e-3)


@pytest.mark.alone
def test_llama_bench_and_infbench_measure_the_same_llama_cpp_cells(tmp_path, infbench_home):
    """Prompt processing (n_in / TTFT) and generation (1 / TPOT) tokens/s of infbench's
    batch-1 llama.cpp cells beside llama-bench's at the same GGUF, threads, micro-batch and
    lengths, alternating rounds: both sides measured, paired and compared. The 3 % agreement is
    benchmarks/crosscheck_llama_bench.py's (8 rounds x 5 repeats, docs/benchmarks.md)."""
    m = bench("crosscheck_llama_bench")
    res = m.measure("smollm2-135m", "f16", (128,), 64, rounds=2, repeat=2, home=infbench_home, wait_quiet_s=5,
                    min_quiet=2)
    keep(tmp_path, "crosscheck_llama_bench", res)
    assert {t["test"] for t in res["tests"]} == {"pp128", "tg63@d128"}
    for t in res["tests"]:
        assert t["n_infbench"] >= 2 and t["n_llama_bench"] >= 2, t
        agrees_in_form(t["infbench_tok_s"], t["llama_bench_tok_s"], t["diff"])
        assert t["diff_paired"] is not None and math.isfinite(t["diff_paired"]), t


def test_llama_perplexity_agrees_with_infbench_perplexity(tmp_path, infbench_home):
    """The same GGUF (SmolLM2 Q4_1) and text, n_ctx 512, the text's first 3 chunks (`--chunks 3`
    on both: every chunk, about 8, is the benchmark's and the docs' figure, as is its second
    llama-perplexity run, one chunk per decode call): within 0.1 %."""
    m = bench("crosscheck_perplexity")
    res = m.measure(512, home=infbench_home, one_chunk_per_call=False, chunks=3)
    keep(tmp_path, "crosscheck_perplexity", res)
    assert res["infbench"]["n_chunks"] == res["llama_perplexity"]["n_chunks"] == 3
    assert abs(res["diff"]) <= m.TARGET, res


@pytest.mark.vllm
@pytest.mark.alone
def test_vllm_bench_and_infbench_measure_the_same_vllm_cells(tmp_path, infbench_home):
    """Output tokens/s of infbench's vLLM batch cell beside vLLM's own throughput benchmark at
    the same shape and engine arguments: both sides ran the same tokens and are compared. The
    agreement (15 % as is, 3 % with vLLM's sampling made greedy as infbench's) and the greedy
    variant (a third vLLM start) are benchmarks/crosscheck_vllm.py's (docs/benchmarks.md; issue 40,
    item 9), and so is infbench's default warm-up: here one block (``--warmup 1``)."""
    m = bench("crosscheck_vllm")
    res = m.measure("smollm2-135m", "bfloat16", (8,), 128, 64, rounds=1, repeat=1, home=infbench_home,
                    wait_quiet_s=5, min_quiet=1, greedy=False, warmup=1)
    keep(tmp_path, "crosscheck_vllm", res)
    (s,) = res["shapes"]
    assert all(n == 8 * (128 + 64) for n in s["vllm_bench_total_num_tokens"]), s
    assert res["setup"]["engine_args"]["max_num_seqs"] >= 8, res["setup"]   # the cell's batch fits one step
    agrees_in_form(s["infbench_output_tok_s"], s["vllm_bench_output_tok_s"], s["diff"])
    assert "diff_greedy" not in s
