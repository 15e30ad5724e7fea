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


def quiet_enough(rows: list[dict], setup: dict) -> None:
    """A speed comparison is only meaningful on a quiet machine: when other processes loaded
    the CPUs through too many samples of either tool (infbench's noisy-neighbour figures, kept
    in the result), the test is skipped with those figures, and fails under CI=true (CI's
    machine must be quiet)."""
    noisy = [r for r in rows if r["samples_used"] != "quiet"]
    if noisy:
        others = {k: v for k, v in setup.items() if k.startswith("other_cpu_cores")}
        msg = (f"too few quiet samples on this machine ({[r.get('test', r.get('batch')) for r in noisy]}); "
               f"other processes' cores: {others}")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


#: The CI test's bound on infbench / llama-bench - 1 for prompt processing (the benchmark
#: states 3 %: see the test). 6 % until a CI replica on 2026-11-26 (this VM in a slow state:
#: both tools at about 580 tok/s against the usual 1,160-1,220) gave infbench +10.8 % paired:
#: rounds of +12 %, +12 % and -0.1 %, infbench the faster one, no other process on the CPUs.
#: A harness that slowed the engine as the first H100 run showed (2.9-3.9x) is still far
#: outside 15 %, and the benchmark keeps its 3 % target.
CI_BOUND = 0.15
#: ... for generation (1 / TPOT). Runs of the same code on these VMs gave paired differences of
#: -8.7 %, -7.3 %, -11.2 % (2026-11-26, a VM whose speed flips between two states) and +9.3 %
#: (CI's machine, pooled), so 6 % failed on noise; a harness that slowed the engine as the first
#: H100 run showed (2.9-3.9x) is still far outside 15 %.
CI_BOUND_GENERATION = 0.15
#: ... for vLLM's throughput benchmark made greedy (see the test).
CI_BOUND_VLLM = 0.10


def test_llama_bench_agrees_with_infbench_llama_cpp_cells(tmp_path, infbench_home):
    """Prompt processing (n_in / TTFT) and generation (1 / TPOT) tokens/s of infbench's
    batch-1 llama.cpp cells against llama-bench's at the same GGUF, threads, micro-batch and
    lengths (medians over alternating rounds): within :data:`CI_BOUND` here, within 3 % in the
    longer benchmark (benchmarks/crosscheck_llama_bench.py)."""
    m = bench("crosscheck_llama_bench")
    # 64 output tokens as the benchmark: infbench's TPOT also holds the first decode step after the
    # prefill (llama.cpp plans a new graph for it), a cost that fewer tokens share less
    res = m.measure("smollm2-135m", "f16", (128,), 64, rounds=3, repeat=3, home=infbench_home, wait_quiet_s=120,
                    min_quiet=3)
    keep(tmp_path, "crosscheck_llama_bench", res)
    assert {t["test"] for t in res["tests"]} == {"pp128", "tg63@d128"}
    quiet_enough(res["tests"], res["setup"])
    for t in res["tests"]:
        # The 3 % target is the benchmark's (8 rounds x 5 repeats, docs/benchmarks.md). This
        # shorter run (3 x 3) is a CI check of the same comparison with a bound of its own: on
        # this VM infbench's pp128 runs settle near either 1,160 or 1,220 tok/s, so 9 samples
        # put its median 3-5 % from llama-bench's in some runs (seen: +4.7 %, +3.2 %, -0.4 %,
        # and +10.8 % with the VM at half speed: CI_BOUND). A systematic difference beyond 15 %
        # still fails. It is judged on the paired figure (the
        # median of each round's ratio): CI once saw the pooled medians 9.3 % apart on generation
        # with speeds drifting between rounds, which the pooled figure cannot tell from a bias.
        bound = CI_BOUND_GENERATION if t["test"].startswith("tg") else CI_BOUND
        assert t["diff_paired"] is not None and abs(t["diff_paired"]) <= bound, (
            t, res["setup"]["other_cpu_cores_during_infbench_cells"])


def test_llama_perplexity_agrees_with_infbench_perplexity(tmp_path, infbench_home):
    """The same GGUF (SmolLM2 Q4_1) and text, n_ctx 512, every chunk: within 0.1 %."""
    m = bench("crosscheck_perplexity")
    res = m.measure(512, home=infbench_home)
    keep(tmp_path, "crosscheck_perplexity", res)
    assert res["infbench"]["n_chunks"] == res["llama_perplexity"]["n_chunks"] >= 2
    assert abs(res["diff"]) <= m.TARGET, res


@pytest.mark.vllm
def test_vllm_bench_throughput_agrees_with_infbench_vllm_cells(tmp_path, infbench_home):
    """Output tokens/s of infbench's vLLM batch cell and vLLM's own throughput benchmark at the
    same shape and engine arguments: within the stated 15 % as the benchmark is (it samples at
    temperature 1.0 and clocks the whole ``LLM.generate``), within 3 % with its sampling made
    greedy as infbench's (benchmarks/crosscheck_vllm.py)."""
    m = bench("crosscheck_vllm")
    res = m.measure("smollm2-135m", "bfloat16", (8,), 128, 64, rounds=2, repeat=2, home=infbench_home,
                    wait_quiet_s=120, min_quiet=2)
    keep(tmp_path, "crosscheck_vllm", res)
    (s,) = res["shapes"]
    assert all(n == 8 * (128 + 64) for n in s["vllm_bench_total_num_tokens"]), s
    assert not res["setup"]["greedy_errors"], res["setup"]["greedy_errors"]
    quiet_enough(res["shapes"], res["setup"])
    assert abs(s["diff"]) <= m.TARGET_AS_IS, s           # vLLM's benchmark as it is: the stated bound
    # made greedy, as infbench decodes: the benchmark's target is 3 % (docs/benchmarks.md, 2 rounds
    # more). This 2 x 2 check (4 infbench samples against 2 of vLLM's) has CI_BOUND_VLLM: since
    # in-process engines run in an engine process of their own (issue 30), runs of the same code
    # gave -3.3 %, -6.1 % and +3.3 %: the VM's noise on 4 against 2 samples, not a bias of one
    # sign. A harness that slowed the engine as the first H100 run did would still fail here.
    assert abs(s["diff_greedy"]) <= CI_BOUND_VLLM, s
