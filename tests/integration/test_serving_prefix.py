"""Production-like serving workloads against llama.cpp's real server (xllamacpp, started by
infbench on 127.0.0.1, prompt cache on as llama.cpp ships it): repeated trace ``hash_ids``
and shared prefixes reach the server's prefix cache (its own per-request
``timings.cache_n``), distinct prompts do not; trace output lengths are forced per request;
multi-turn sessions carry the server's answers; and the CLI runs a trace end to end.

vLLM's counterparts (its ``/metrics`` prefix-cache counters) are in test_vllm.py, which
shares one vLLM server."""

import json
import os
import subprocess
import sys

import pytest

from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.schema import Cell, Dataset, Load, Trace
from infbench.detect.platforms.cpu import cpu_device
from infbench.engines.llama_server import LlamaServerEngine
from infbench.workloads.chat import file_digest

pytestmark = pytest.mark.integration
M = resolve("tiny")


def write_trace(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Trace(path=str(path), sha256=file_digest(path), format="mooncake", n=len(rows),
                 max_total_len=max(r["input_length"] + r["output_length"] for r in rows))


def trace_cell(tr, cap=2):
    return Cell(model=M.name, engine="llama.cpp-server", dtype="f16", batch=1, input_len=600, output_len=4,
                load=Load(mode="trace", trace_speed=4.0, warmup_requests=1, concurrency=cap), trace=tr)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    home = tmp_path_factory.mktemp("llama-home")
    sizing = [Cell(model=M.name, engine="llama.cpp-server", dtype="f16", batch=1, input_len=1100, output_len=16,
                   load=Load(mode="concurrency", concurrency=2))]
    e = LlamaServerEngine(cpu_device(), {})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFBENCH_HOME", str(home))
        e.start(Group(M, "llama.cpp-server", "f16", 1, sizing))
    yield e
    e.stop()


def run(e, c):
    out = e.run(c, e.make_prompts(c, M))
    assert [r.error for r in out.records] == [None] * len(out.records)
    return out


def cache_hit_rate(records) -> float:
    """llama.cpp's own view: prompt tokens taken from its cache over all prompt tokens."""
    t = [r.server["timings"] for r in records]
    cached = sum(x.get("cache_n", 0) for x in t)
    return cached / (cached + sum(x["prompt_n"] for x in t))


def test_trace_hash_ids_reach_the_prefix_cache_with_forced_lengths(llama, tmp_path):
    shared = write_trace(tmp_path / "shared.jsonl",
                         [{"timestamp": 150 * i, "input_length": 600, "output_length": 3 + i, "hash_ids": [7, 100 + i]}
                          for i in range(4)])
    out = run(llama, trace_cell(shared))
    assert [r.n_out for r in out.records] == [3, 4, 5, 6]                        # each record's own length
    assert all(r.n_in == 600 for r in out.records)
    assert cache_hit_rate(out.records) > 0.3                                   # block 7 (512 tokens) reused
    assert sum(r.server["timings"].get("cache_n", 0) >= 512 for r in out.records[1:]) >= 2
    distinct = write_trace(tmp_path / "distinct.jsonl",
                           [{"timestamp": 150 * i, "input_length": 600, "output_length": 3, "hash_ids": [200 + i]}
                            for i in range(4)])
    out = run(llama, trace_cell(distinct))
    # no shared block: at most a chance one-token match with a slot's previous prompt
    assert all(r.server["timings"].get("cache_n", 0) <= 1 for r in out.records)
    assert cache_hit_rate(out.records) < 0.01


def test_shared_prefix_workload_reaches_the_prefix_cache(llama):
    base = Cell(model=M.name, engine="llama.cpp-server", dtype="f16", batch=1, input_len=256, output_len=4,
                load=Load(mode="concurrency", concurrency=2, num_requests=8, warmup_requests=0))
    shared = run(llama, base.model_copy(update={"prefix_len": 192, "num_prefixes": 2}))
    assert cache_hit_rate(shared.records) > 0.3
    plain = run(llama, base.model_copy(update={"seed": 5}))
    assert all(r.server["timings"].get("cache_n", 0) <= 1 for r in plain.records)


def test_multi_turn_context_grows_by_the_servers_answers(llama, tmp_path):
    from tests.support.conversations import write_conversations

    conv = tmp_path / "chats.jsonl"
    write_conversations(conv)
    d = Dataset(path=str(conv), sha256=file_digest(conv), n=5, multi_turn=True, max_input_len=60,
                max_total_len=1024)
    c = Cell(model=M.name, engine="llama.cpp-server", dtype="f16", batch=1, input_len=30, output_len=10,
             load=Load(mode="concurrency", concurrency=2, num_requests=4, warmup_requests=1), dataset=d)
    out = run(llama, c)
    sessions = {}
    for r in out.records:
        sessions.setdefault(r.session, []).append(r)
    assert any(len(v) > 1 for v in sessions.values())
    for turns in sessions.values():
        turns.sort(key=lambda r: r.turn)
        for a, b in zip(turns, turns[1:]):
            # turn k+1's prompt holds turn k's prompt and the answer the server gave to it
            # (a generated special token detokenises to nothing: allow a few)
            assert b.n_in >= a.n_in + a.n_out - 3
            assert b.t_sched_ns >= a.t_tokens_ns[-1]


def test_cli_trace_replay_on_llama_server(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [{"timestamp": 100 * i, "input_length": 40 + i, "output_length": 2 + i, "hash_ids": [1]}
                       for i in range(5)])
    store = tmp_path / "s.db"
    p = subprocess.run([sys.executable, "-m", "infbench.cli", "run", "--engine", "llama.cpp-server", "--model",
                        "tiny", "--trace", str(path), "--trace-speed", "2", "--store", str(store), "--json",
                        "--warmup", "1"],
                       capture_output=True, text=True, timeout=600, env={**os.environ})
    assert p.returncode == 0, p.stderr
    (c,) = json.loads(p.stdout)["cells"]
    assert c["status"] == "ok" and c["spec"]["load"]["mode"] == "trace" and c["spec"]["trace"]["n"] == 5
    m = c["metrics"]
    assert m["n_out_total"] == 2 + 3 + 4 + 5 + 6 and m["release_lag_s"]["count"] == 5
    assert "client_lag_p99_ms" in m and m["client"]["event_loop"] in ("uvloop", "asyncio")
    table = subprocess.run([sys.executable, "-m", "infbench.cli", "results", "--store", str(store)],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert table.returncode == 0 and "trace" in table.stdout, table.stderr          # the load's label


def test_len_range_requests_get_their_own_lengths_from_the_real_server(llama):
    """--len-range 0.5 (issue 31): each request's prompt and forced output length drawn around
    the cell's; llama.cpp's server generates exactly each request's own length, and the
    physics check holds every request to the cell's bounds (none flagged)."""
    from infbench.analysis.physics import token_reasons

    c = Cell(model=M.name, engine="llama.cpp-server", dtype="f16", batch=1, input_len=64, output_len=16,
             load=Load(mode="concurrency", concurrency=2, num_requests=8, warmup_requests=1), len_range=0.5)
    prompts = llama.make_prompts(c, M)
    asked = [p.output_len for p in prompts[1:]]            # after the warm-up request
    assert len(set(asked)) > 1 and all(8 <= n <= 16 for n in asked)
    out = llama.run(c, prompts)
    done = [r for r in out.records if r.error is None]
    assert len(done) == 8
    assert sorted(r.n_out for r in done) == sorted(asked)
    assert sorted(r.n_in for r in done if r.n_in) == sorted(len(p.content) for p in prompts[1:])
    assert token_reasons(c, out.records) == []
