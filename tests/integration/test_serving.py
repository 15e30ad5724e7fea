"""Serving mode against real servers on 127.0.0.1: a fault-injecting stub (aiohttp) and
llama.cpp's own server (xllamacpp) started by infbench."""

import json
import os
import subprocess
import sys

import pytest

from infbench.data.groups import Group
from infbench.data.models import ModelShape
from infbench.data.schema import Cell, Load
from infbench.engines.openai import OpenAIEngine
from infbench.plan.target import remote_device
from tests.support.stub_server import StubServer

pytestmark = pytest.mark.integration
SECRET = "sk-test-never-store-me-4242"


@pytest.fixture(scope="module")
def stub():
    with StubServer() as s:
        yield s


def engine(stub, **opts):
    e = OpenAIEngine(remote_device(stub.base_url), {"base_url": stub.base_url, **opts})
    e.start(Group(ModelShape(name="x", config={}), "openai", "auto", 1))
    return e


def cell(model="normal", out=6, load=None, batch=2):
    return Cell(model=model, engine="openai", dtype="auto", batch=batch, input_len=8, output_len=out,
                load=load or Load(mode="batch", warmup_requests=0))


def run(e, c):
    return e.run(c, e.make_prompts(c, ModelShape(name=c.model, config={})))


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_normal_stream(stub, endpoint):
    out = run(engine(stub, endpoint=endpoint), cell())
    assert len(out.records) == 2 and not out.warnings
    for r in out.records:
        assert r.error is None and r.n_out == 6 and r.n_out_source == "usage" and len(r.t_tokens_ns) == 6
        assert r.n_in == 8                       # synthetic text of 8 words, counted by the server
    body = stub.log[-1]["body"]
    assert body["ignore_eos"] is True and body["min_tokens"] == 6 and body["stream_options"]["include_usage"]
    assert ("messages" in body) == (endpoint == "chat")


def test_role_and_empty_chunks_are_not_first_token(stub):
    out = run(engine(stub, endpoint="chat"), cell("role_first", load=Load(mode="batch", warmup_requests=0),
                                                 batch=1))
    [r] = out.records
    written = stub.log[-1]["written_ns"]
    # the first token is the first content event, written after the role-only and empty events
    assert r.t_tokens_ns[0] >= written[0] and r.n_out == 6


def test_usage_missing_fallback_warns(stub):
    out = run(engine(stub), cell("no_usage"))
    assert all(r.n_out_source == "chunks" and r.n_out == 6 for r in out.records)
    assert any("no usage" in w for w in out.warnings)


def test_short_output_warns(stub):
    out = run(engine(stub), cell("short"))
    assert all(r.n_out == 3 for r in out.records) and any("output length other than 6" in w for w in out.warnings)


@pytest.mark.parametrize("mode,needle", [("error_midstream", "model crashed"), ("close_early", "connection closed"),
                                         ("http500", "HTTP 500")])
def test_failed_requests_are_records_with_errors(stub, mode, needle):
    out = run(engine(stub), cell(mode))
    assert len(out.records) == 2 and all(needle in r.error for r in out.records)


def test_connection_closed_without_response_is_retried_once(stub):
    out = run(engine(stub), cell("drop_once", batch=1))
    [r] = out.records
    assert r.error is None and r.n_out == 6 and "connection closed" in r.server["client_retry"]


def test_each_load_mode(stub):
    e = engine(stub)
    conc = run(e, cell(load=Load(mode="concurrency", concurrency=3, num_requests=7, warmup_requests=2)))
    assert len(conc.records) == 7 and all(r.error is None for r in conc.records)
    rate = run(e, cell(load=Load(mode="rate", request_rate=40.0, num_requests=6, warmup_requests=0)))
    assert len(rate.records) == 6 and all(r.t_send_ns >= r.t_sched_ns for r in rate.records)


def test_missing_key_variable_is_a_clear_error(stub, monkeypatch):
    from infbench.data.errors import ConfigError

    monkeypatch.delenv("INFBENCH_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="INFBENCH_TEST_KEY"):
        engine(stub, api_key_env="INFBENCH_TEST_KEY")


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_cli_openai_endpoint_and_api_key_never_stored(stub, tmp_path):
    store = tmp_path / "s.db"
    env = {"INFBENCH_TEST_KEY": SECRET}
    p = cli("run", "--engine", "openai", "--base-url", stub.base_url, "--api-key-env", "INFBENCH_TEST_KEY",
            "--model", "normal", "--concurrency", "1,2", "--num-requests", "4", "--input-len", "8",
            "--output-len", "5", "--store", str(store), "--warmup", "1", env=env)  # a stub: nothing to warm
    assert p.returncode == 0, p.stderr
    assert stub.log[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"   # the key was used...
    res = cli("results", "--store", str(store), "--format", "json")
    cells = json.loads(res.stdout)
    assert len(cells) == 2 and {c["spec"]["load"]["concurrency"] for c in cells} == {1, 2}
    for c in cells:
        assert c["device"]["kind"] == "remote" and c["metrics"]["ttft_s"]["count"] == 4
        assert c["engine"]["api_key_env"] == "INFBENCH_TEST_KEY"
    csv = cli("results", "--store", str(store), "--format", "csv").stdout
    # every file infbench wrote: the db with -wal/-shm, and INFBENCH_HOME (caches, logs)
    stored = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    for artefact in (p.stdout, p.stderr, res.stdout, csv):
        assert SECRET not in artefact                                        # ...and never kept
    assert SECRET.encode() not in stored


def test_cli_rejects_serving_flags_on_batch_engine():
    p = cli("run", "--engine", "llama.cpp", "--model", "tiny", "--concurrency", "2")
    assert p.returncode == 2 and "need a server engine" in p.stderr


# --- llama.cpp's real server ---------------------------------------------------------

@pytest.fixture(scope="module")
def llama_results(tmp_path_factory):
    store = tmp_path_factory.mktemp("ls") / "s.db"
    # one warm-up block per cell (each mode's block still runs): warming until stable is
    # test_steady_state_live's subject, and on this tiny model it ran 83 s of these cells' 91 s
    common = ["--engine", "llama.cpp-server", "--model", "tiny", "--input-len", "64", "--output-len", "16",
              "--store", str(store), "--json", "--warmup", "1"]
    runs = [cli("run", *common, "--batch", "3"),
            cli("run", *common, "--concurrency", "1,4", "--num-requests", "8"),
            cli("run", *common, "--request-rate", "20", "--num-requests", "8")]
    for p in runs:
        assert p.returncode == 0, p.stderr
    return store, [json.loads(p.stdout) for p in runs]


def test_llama_server_every_mode(llama_results):
    _, (batch, conc, rate) = llama_results
    assert [c["spec"]["load"]["mode"] for c in batch["cells"]] == ["batch"]
    assert batch["cells"][0]["metrics"]["n_completed"] == 3
    assert sorted(c["spec"]["load"]["concurrency"] for c in conc["cells"]) == [1, 4]
    assert rate["cells"][0]["spec"]["load"]["request_rate"] == 20.0
    store, _ = llama_results
    from infbench.store import Store

    errors = [(r["spec"]["load"], q.error, q.n_out) for r in Store(store).results()
              for q in Store(store).records(r["id"]) if q.error or q.n_out != 16]
    assert errors == []
    for c in batch["cells"] + conc["cells"] + rate["cells"]:
        m = c["metrics"]
        assert c["status"] == "ok" and "warnings" not in m
        assert m["n_in_total"] == 64 * m["n_completed"] and m["n_out_total"] == 16 * m["n_completed"]
        for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_wait_s"):
            assert m[k]["count"] > 0
        assert c["engine"]["server_log"] and os.path.exists(c["engine"]["server_log"])


def test_client_ttft_agrees_with_server_timings(llama_results):
    """At concurrency 1 the client's TTFT must contain the server's own prompt time and
    exceed it only by transport and scheduling (loose bound: shared 2-core machine)."""
    from infbench.store import Store

    store, (_, conc, _) = llama_results
    s = Store(store)
    row = next(r for r in s.results() if (r["spec"]["load"] or {}).get("concurrency") == 1)
    recs = s.records(row["id"])
    assert all(r.server and "timings" in r.server for r in recs)
    diffs = []
    for r in recs:
        ttft_ms = (r.t_tokens_ns[0] - r.t_send_ns) / 1e6
        prompt_ms = r.server["timings"]["prompt_ms"]
        assert r.server["timings"]["prompt_n"] + r.server["timings"].get("cache_n", 0) == 64
        assert ttft_ms >= prompt_ms * 0.95
        diffs.append(ttft_ms - prompt_ms)
    assert sorted(diffs)[len(diffs) // 2] < 50.0


def test_cli_dataset_replay_on_llama_server(tmp_path):
    """`--dataset chats.jsonl`: each request is a conversation without its final assistant
    turn, forced to that turn's length; the prompt length comes from the server's usage."""
    from infbench.store import Store
    from infbench.workloads.chat import chat_requests, word_count
    from tests.support.conversations import write_conversations

    conv = tmp_path / "chats.jsonl"
    write_conversations(conv)
    store = tmp_path / "s.db"
    p = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", str(conv), "--concurrency", "2",
            "--num-requests", "10", "--max-input-len", "60", "--seed", "3", "--store", str(store), "--json",
            "--warmup", "1")  # one block (its chat endpoint still checked): the replay, not the warm-up, is tested
    assert p.returncode == 0, p.stderr
    (c,) = json.loads(p.stdout)["cells"]
    assert c["status"] == "ok" and c["spec"]["dataset"]["n"] == 11 and "warnings" not in c["metrics"]
    want = chat_requests(conv, word_count, 11, seed=3, max_input_len=60)      # 1 warm-up + 10 timed
    recs = Store(store).records(Store(store).results()[0]["id"])
    assert [r.n_out for r in recs] == [q.output_len for q in want[1:]]
    assert all(r.n_out_source == "usage" and r.n_in > 0 for r in recs)
    assert c["spec"]["output_len"] == round(sum(q.output_len for q in want) / 11)
    conv.write_text(conv.read_text() + "\n")                                 # a changed file: planned anew
    again = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", str(conv), "--concurrency",
                "2", "--num-requests", "10", "--max-input-len", "60", "--seed", "3", "--store", str(store), "--dry-run",
                "--json")
    assert json.loads(again.stdout)["cells"][0]["dataset"]["sha256"] != c["spec"]["dataset"]["sha256"]
    bad = cli("run", "--engine", "llama.cpp", "--model", "tiny", "--dataset", str(conv))
    assert bad.returncode == 2 and "--dataset replays chat conversations through a server" in bad.stderr
