"""Serving as production traffic looks (issue 16) and the serving client's hardening
(issue 14), against a real streaming server on 127.0.0.1 (the fault-injecting aiohttp stub):
bad usage, malformed events, failures summarised, timeouts, secrets, reasoning deltas,
non-streaming requests, multi-turn sessions, trace replay, the client-side tokenizer."""

import json
import os
import subprocess
import sys

import pytest

from infbench.data.groups import Group
from infbench.data.models import ModelShape
from infbench.data.run import RunOptions
from infbench.data.schema import Cell, Dataset, Load, Trace
from infbench.engines.openai import OpenAIEngine
from infbench.measure.cell import measure_cell
from infbench.measure.power import NoPower
from infbench.plan.target import remote_device
from tests.support.stub_server import StubServer

pytestmark = pytest.mark.integration
SECRET = "sk-test-never-store-me-9876"


@pytest.fixture(scope="module")
def stub():
    with StubServer() as s:
        yield s


def engine(stub, base_url=None, **opts):
    url = base_url or stub.base_url
    e = OpenAIEngine(remote_device(url), {"base_url": url, **opts})
    e.start(Group(ModelShape(name="x", config={}), "openai", "auto", 1))
    return e


def cell(model="normal", out=6, load=None, batch=2, **kw):
    """A stub cell with no warm-up block (``warmup=0``): these tests read the server's log and
    its one-shot faults as the timed requests meet them; the warm-up block is tested in
    tests/unit/measure/test_steady_state.py and tests/integration/test_steady_state_live.py."""
    kw.setdefault("warmup", 0)
    return Cell(model=model, engine="openai", dtype="auto", batch=batch, input_len=8, output_len=out,
                load=load or Load(mode="batch", warmup_requests=0), **kw)


def measure(e, c):
    """The cell as `infbench run` stores it (status, error, metrics)."""
    g = Group(ModelShape(name=c.model, config={}), "openai", "auto", 1, [c])
    return measure_cell(e, g, c, e.device, NoPower("test"), RunOptions())


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "infbench.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


# --- issue 14: usage, malformed events, failure causes, timeouts -------------------------------

@pytest.mark.parametrize("mode", ["usage_negative", "usage_huge"])
def test_impossible_usage_fails_the_requests_not_a_negative_throughput(stub, mode):
    r = measure(engine(stub), cell(mode, batch=4))
    assert r.status == "failed" and r.error.startswith("4/4 failed: invalid usage from the server: ")
    assert "usage.completion_tokens=" in r.error
    assert all(len(q.t_tokens_ns) == 6 for q in r.records)          # no billion-entry list
    assert r.metrics["output_tok_s"] is None


def test_one_malformed_event_fails_only_its_request(stub):
    r = measure(engine(stub), cell("malformed_once", batch=4))
    assert r.status == "ok" and r.metrics["n_completed"] == 3 and r.metrics["n_failed"] == 1
    [bad] = [q for q in r.records if q.error]
    assert bad.error == "malformed event: 'choices' is str, not a list"
    assert any(w.startswith("1/4 request(s) failed: malformed event") for w in r.metrics["warnings"])


@pytest.mark.parametrize("mode,want", [
    ("http500", '4/4 failed: HTTP 500: {"error": {"message": "internal boom"}}'),
    ("close_early", "4/4 failed: connection closed by the server mid-response"),
    ("error_midstream", "4/4 failed: model crashed"),
])
def test_cell_error_names_the_real_causes(stub, mode, want):
    r = measure(engine(stub), cell(mode, batch=4))
    assert r.status == "failed" and r.error.startswith(want), r.error


def test_a_hanging_server_times_out_and_stops_the_cell(stub):
    load = Load(mode="concurrency", concurrency=2, num_requests=20, timeout_s=0.5, warmup_requests=0)
    r = measure(engine(stub), cell("hang", load=load))
    assert r.status == "failed" and r.error.endswith("failed: timeout after 0.5 s (--request-timeout)")
    assert len(r.records) <= 3 and r.metrics["client"]["stopped"]
    assert any("none completed" in w for w in r.metrics["warnings"])


def test_default_request_timeout_is_in_the_help():
    p = cli("run", "--help")
    assert p.returncode == 0 and "default 600" in " ".join(p.stdout.split())


# --- issue 14: secrets and terminal escapes ----------------------------------------------------

def test_server_echoing_the_key_stores_no_prefix_and_no_escapes(stub, monkeypatch):
    monkeypatch.setenv("INFBENCH_TEST_KEY", SECRET)
    e = engine(stub, api_key_env="INFBENCH_TEST_KEY")
    r = measure(e, cell("echo_auth", batch=1))
    assert r.status == "failed" and "HTTP 401" in r.error
    stored = json.dumps(r.model_dump(mode="json"))
    for leak in (SECRET, SECRET[:8], "sk-test", "\x1b", "\x07", "\\u001b", "\\u0007"):
        assert leak not in stored, leak


def test_credentials_in_the_base_url_are_used_but_never_kept(stub, tmp_path):
    host = stub.base_url.split("//")[1]
    url = f"http://alice:pa55word-XYZ@{host}?api_key=QKEY-123456"
    store = tmp_path / "s.db"
    p = cli("run", "--engine", "openai", "--base-url", url, "--model", "normal", "--concurrency", "1",
            "--num-requests", "2", "--input-len", "4", "--output-len", "3", "--store", str(store),
            "--warmup", "1")  # a stub: nothing to warm
    assert p.returncode == 0, p.stderr
    sent = stub.log[-1]
    assert sent["query"] == "api_key=QKEY-123456" and sent["path"] == "/v1/completions"   # query kept, path right
    assert sent["headers"]["Authorization"].startswith("Basic ")                        # userinfo used
    outputs = [p.stdout, p.stderr]
    for args in (("results", "--format", "json"), ("results", "--format", "csv"), ("export", "--format", "lib-csv")):
        q = cli(*args, "--store", str(store))
        outputs.append(q.stdout + q.stderr)
    stored = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    for leak in ("pa55word", "QKEY-123456", "alice:"):
        assert leak.encode() not in stored and all(leak not in o for o in outputs), leak
    cells = json.loads(cli("results", "--store", str(store), "--format", "json").stdout)
    assert cells[0]["device"]["model"] == f"http://{host}" and cells[0]["engine"]["base_url"] == f"http://{host}"


def test_worker_spec_drops_url_credentials(stub, tmp_path):
    host = stub.base_url.split("//")[1]
    spec = tmp_path / "spec.json"
    p = cli("run", "--engine", "openai", "--base-url", f"http://u:pw-777@{host}?token=T0K3N", "--model", "normal",
            "--concurrency", "1", "--write-spec", str(spec))
    assert p.returncode == 0, p.stderr
    assert "pw-777" not in spec.read_text() and "T0K3N" not in spec.read_text()


# --- issue 16: reasoning, non-streaming, tokenizer ---------------------------------------------

@pytest.mark.parametrize("mode,endpoint,source", [("reasoning", "chat", "usage"), ("think", "completions", "chunks")])
def test_reasoning_then_answer(stub, mode, endpoint, source):
    e = engine(stub, endpoint=endpoint, extra_body={"itl_s": 0.005})     # tokens in separate reads
    r = measure(e, cell(mode, batch=2))
    assert r.status == "ok" and not r.metrics.get("warnings")
    for q in r.records:
        assert q.t_tokens_ns[0] == q.t_first_reasoning_ns < q.t_first_answer_ns     # TTFT: first token of any kind
        assert q.n_reasoning == 3 and q.n_out == 6 and q.n_reasoning_source == source
    m = r.metrics
    assert m["ttfrt_s"]["p50"] == pytest.approx(m["ttft_s"]["p50"]) and m["ttfat_s"]["p50"] > m["ttft_s"]["p50"]
    assert m["reasoning_tokens"]["mean"] == 3 and m["answer_tokens"]["mean"] == 3


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_no_stream_measures_e2e_only(stub, endpoint):
    load = Load(mode="concurrency", concurrency=2, num_requests=4, warmup_requests=1, stream=False)
    r = measure(engine(stub, endpoint=endpoint), cell(load=load, out=5))
    assert r.status == "ok" and stub.log[-1]["body"]["stream"] is False
    m = r.metrics
    assert "ttft_s" not in m and "tpot_s" not in m and "itl_s" not in m and m["streamed"] is False
    assert m["e2e_s"]["count"] == 4 and m["output_tok_s"] > 0 and m["n_out_total"] == 20
    assert all(not q.streamed and len(q.t_tokens_ns) == 1 for q in r.records)


def test_tokenizer_counts_compared_with_usage(stub, tmp_path):
    from infbench.data.models import resolve
    from infbench.engines.hf_dummy import dummy_hf_dir

    tok = str(dummy_hf_dir(resolve("tiny"), tmp_path / "hf"))
    same = measure(engine(stub, tokenizer=tok), cell("normal", batch=3))
    assert [(q.n_in, q.n_in_client) for q in same.records] == [(8, 8)] * 3 and not same.metrics.get("warnings")
    body = stub.log[-1]["body"]["prompt"]
    assert isinstance(body, str) and len(body.split()) == 8 and body.split()[0].startswith("t")
    off = measure(engine(stub, tokenizer=tok), cell("bos", batch=3))
    assert [(q.n_in, q.n_in_client) for q in off.records] == [(9, 8)] * 3          # the server's count is kept
    assert any("differs from --tokenizer" in w and "+1 to +1" in w for w in off.metrics["warnings"])


# --- issue 16: multi-turn sessions and traces -------------------------------------------------

def test_multi_turn_second_turn_carries_the_servers_first_answer(stub, tmp_path):
    from infbench.workloads.chat import chat_sessions, file_digest, word_count

    path = tmp_path / "chats.jsonl"
    msgs = [{"role": "user", "content": "alpha beta gamma delta"}, {"role": "assistant", "content": "a b c d e"},
            {"role": "user", "content": "epsilon zeta eta theta"}, {"role": "assistant", "content": "f g h i"},
            {"role": "user", "content": "iota kappa lambda mu"}, {"role": "assistant", "content": "j k l m n o"}]
    path.write_text("\n".join(json.dumps({"messages": msgs}) for _ in range(5)) + "\n")
    d = Dataset(path=str(path), sha256=file_digest(path), n=5, multi_turn=True, think_time_s=0.05)
    load = Load(mode="concurrency", concurrency=2, num_requests=4, warmup_requests=1)
    e = engine(stub)
    stub.log.clear()
    r = measure(e, cell(load=load, dataset=d))
    assert r.status == "ok", r.error
    assert len(r.records) == 12 and sorted({q.session for q in r.records}) == [1, 2, 3, 4]
    assert [q.n_out for q in r.records if q.session == 1] == [5, 4, 6]           # each answer's own length
    by_id = {e["id"]: e for e in stub.log}
    for s in (1, 2, 3, 4):
        turns = sorted((q for q in r.records if q.session == s), key=lambda q: q.turn)
        assert [q.turn for q in turns] == [1, 2, 3]
        assert turns[1].t_sched_ns >= turns[0].t_tokens_ns[-1] + 50_000_000        # think time after the answer
    seconds = [e for e in by_id.values() if len(e["body"]["messages"]) == 3]
    assert len(seconds) == 4
    for second in seconds:
        answer = second["body"]["messages"][1]
        assert answer["role"] == "assistant"
        rid = int(answer["content"].split()[0][1:])                                  # " r<id> tok tok ..."
        assert answer["content"] == f" r{rid}" + " tok" * 4                         # the server's own answer, verbatim
        assert by_id[rid]["body"]["messages"][0]["content"] == "alpha beta gamma delta"
    assert set(r.metrics["ttft_s_by_turn"]) == {"1", "2", "3"}
    assert chat_sessions(path, word_count, 5)[0].turns[1] == ("epsilon zeta eta theta", 4)


def test_a_dataset_cells_warmup_block_goes_to_the_chat_endpoint_too(stub, tmp_path):
    """The warm-up block replaces a dataset's prompts with synthetic ones of its lengths, but it
    sends them where the cell's requests go (a chat-only server would refuse /completions)."""
    from infbench.workloads.chat import file_digest

    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": "alpha beta gamma delta"},
                                                       {"role": "assistant", "content": "a b c d e"}]})
                              for _ in range(4)) + "\n")
    d = Dataset(path=str(path), sha256=file_digest(path), n=4)
    e = engine(stub)
    stub.log.clear()
    r = measure(e, cell(load=Load(mode="concurrency", concurrency=2, num_requests=4, warmup_requests=0), dataset=d,
                        warmup=1))
    assert r.status == "ok", r.error
    assert r.metrics["warmup"]["mode"] == "fixed" and len(r.metrics["warmup"]["blocks"]) == 1
    assert len(stub.log) == 4 + 4                                      # the block's 2 x 2, then the 4 timed
    assert all("messages" in x["body"] and "prompt" not in x["body"] for x in stub.log)


def test_trace_replay_forces_each_length_at_its_time(stub, tmp_path):
    from infbench.workloads.chat import file_digest

    rows = [{"timestamp": t, "input_length": n_in, "output_length": n_out, "hash_ids": h}
            for t, n_in, n_out, h in [(0, 20, 3, [1]), (40, 30, 5, [1, 2]), (40, 10, 2, [3]), (150, 25, 4, [1])]]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = Trace(path=str(path), sha256=file_digest(path), format="mooncake", n=4, block_tokens=16, max_total_len=35)
    load = Load(mode="trace", trace_speed=2.0, warmup_requests=1)
    e = engine(stub, prompt_format="text")
    stub.log.clear()
    r = measure(e, cell(load=load, trace=tr))
    assert r.status == "ok" and not r.metrics.get("warnings"), r.metrics.get("warnings")
    assert [q.n_out for q in r.records] == [3, 5, 2, 4]
    sched = [(q.t_sched_ns - r.records[0].t_sched_ns) / 1e6 for q in r.records]
    assert sched == pytest.approx([0, 20, 20, 75], abs=1e-3)                         # trace ms / speed 2
    assert all(q.t_send_ns >= q.t_sched_ns for q in r.records)
    assert r.metrics["release_lag_s"]["count"] == 4
    prompts = [x["body"]["prompt"].split() for x in stub.log[1:]]                   # after the warm-up
    assert prompts[0][:16] == prompts[1][:16] == prompts[3][:16] and prompts[2][:10] != prompts[0][:10]
    assert stub.log[0]["body"]["prompt"].split()[:16] != prompts[0][:16]            # warm-up shares no block
