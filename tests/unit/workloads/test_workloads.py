"""Serving workloads: traces (Mooncake, Azure), shared prefixes, multi-turn sessions, the
client-side tokenizer, and how cells are planned from them."""

import json

import pytest

from infbench.data.errors import ConfigError
from infbench.workloads.prompt import PromptMaker
from infbench.workloads.trace import TraceRequest, detect_format, read_trace, select


def mooncake(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [{"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 0, "input_length": 600, "output_length": 7, "hash_ids": [1, 3]},
        {"timestamp": 2500, "input_length": 100, "output_length": 3, "hash_ids": [9]}]


def test_mooncake_trace_in_time_order(tmp_path):
    recs = read_trace(mooncake(tmp_path / "t.jsonl", ROWS))
    assert [r.t_s for r in recs] == [0.0, 1.0, 2.5] and [r.line for r in recs] == [2, 1, 3]
    assert recs[0].hash_ids == (1, 3) and recs[1].output_len == 5
    assert [r.line for r in select(recs, n=2)] == [2, 1]
    assert [r.line for r in select(recs, duration_s=1.0, speed=2.0)] == [2, 1]   # 2.5 s / 2 > 1 s


def test_equal_hash_ids_give_identical_blocks(tmp_path):
    recs = read_trace(mooncake(tmp_path / "t.jsonl", ROWS))
    maker = PromptMaker("token_ids", vocab_size=32000)
    a, b, c = (TraceRequest(r, maker, seed=0).materialize() for r in recs)
    assert len(a.content) == 600 and len(b.content) == 700 and len(c.content) == 100
    assert a.content[:512] == b.content[:512]                      # hash id 1 shared
    assert a.content[512:] != b.content[512:600]                   # ids 3 and 2 differ
    assert c.content != a.content[:100]
    assert (a.output_len, b.output_len, a.n_in) == (7, 5, 600)
    words = PromptMaker("text")                                    # remote endpoints: words, same rule
    wa, wb = (TraceRequest(r, words).materialize() for r in recs[:2])
    assert wa.content.split()[:512] == wb.content.split()[:512] and len(wa.content.split()) == 600


def test_each_trace_cell_draws_its_own_blocks(tmp_path):
    """Within a cell equal hash ids share blocks; another cell (another speed, a repeat)
    draws other blocks and other warm-ups, so it does not replay the last cell's prompts
    from the server's cache; the same cell twice is the same replay."""
    from infbench.analysis.repeats import repeat_cell
    from infbench.data.models import resolve
    from infbench.data.schema import Cell, DeviceInfo, Load, Trace
    from infbench.engines.openai import OpenAIEngine
    from infbench.workloads.chat import file_digest

    path = mooncake(tmp_path / "t.jsonl", ROWS)
    tr = Trace(path=str(path), sha256=file_digest(path), format="mooncake", n=3, max_total_len=705)
    cell = Cell(model="tiny", engine="openai", dtype="auto", batch=1, input_len=467, output_len=5, trace=tr,
                load=Load(mode="trace", trace_speed=1.0, warmup_requests=1))
    e = OpenAIEngine(DeviceInfo(vendor="remote", kind="remote", model="endpoint"), {"prompt_format": "token_ids"})

    def prompts(c):
        ps = e.make_prompts(c, resolve("tiny"))
        return [ps[0].content] + [p.materialize().content for p in ps[1:]]

    a, again = prompts(cell), prompts(cell)
    faster = prompts(cell.model_copy(update={"load": cell.load.model_copy(update={"trace_speed": 2.0})}))
    rep = prompts(repeat_cell(cell, 2))
    assert a == again and a[1][:512] == a[2][:512]                 # hash id 1 shared within the cell
    for other in (faster, rep):
        assert other[0] != a[0] and other[1][:512] != a[1][:512] and other[1][:512] == other[2][:512]
    assert all(a[0][:128] != x[:128] for x in a[1:])              # the warm-up shares no block



@pytest.mark.parametrize("fmt,options", [("token_ids", {}), ("text", {})])
def test_each_served_cell_draws_its_own_synthetic_prompts(fmt, options):
    """A server's prefix cache outlives a cell: cells that differ only in load or output
    length must not send the prompts of the cell before them (TTFT against a warm cache);
    the same cell measured in another run sends the same prompts, measured again on the same
    server a fresh draw of them (issue 38's re-measure hit the cache); shared prefixes stay shared."""
    from infbench.data.models import resolve
    from infbench.data.schema import Cell, DeviceInfo, Load
    from infbench.engines.openai import OpenAIEngine

    e = OpenAIEngine(DeviceInfo(vendor="remote", kind="remote", model="endpoint"), {"prompt_format": fmt, **options})
    m = resolve("tiny")
    cell = Cell(model="tiny", engine="openai", dtype="auto", batch=1, input_len=64, output_len=8,
                load=Load(mode="concurrency", concurrency=1, num_requests=4, warmup_requests=1))

    def prompts(c):
        return [getattr(p, "content", p) for p in e.make_prompts(c, m)]

    a = prompts(cell)
    assert a == prompts(cell) and len(set(map(str, a))) == 5
    busier = prompts(cell.model_copy(update={"load": cell.load.model_copy(update={"concurrency": 4})}))
    longer = prompts(cell.model_copy(update={"output_len": 16}))
    for other in (busier, longer):
        assert not {str(x) for x in other} & {str(x) for x in a}
    shared = cell.model_copy(update={"prefix_len": 32, "num_prefixes": 1})
    sp = prompts(shared)
    head = (lambda x: x[:32]) if fmt == "token_ids" else (lambda x: x.split()[:32])
    assert all(head(x) == head(sp[0]) for x in sp) and len(set(map(str, sp))) == 5
    # sent once to this server (a closed port here: the requests fail, the server might have
    # their prompts all the same), the cell measured again on it gets a fresh draw of the same
    # lengths; another engine (another server, another run) draws the cell's own prompts again
    e.base_url = "http://127.0.0.1:9/v1"
    out = e.run(cell, e.make_prompts(cell, m))
    assert out.records and all(r.error for r in out.records)
    again = prompts(cell)
    assert not {str(x) for x in again} & {str(x) for x in a}
    size = len if fmt == "token_ids" else (lambda x: len(x.split()))
    assert [size(x) for x in again] == [size(x) for x in a]
    fresh = OpenAIEngine(DeviceInfo(vendor="remote", kind="remote", model="endpoint"), {"prompt_format": fmt})
    assert [getattr(p, "content", p) for p in fresh.make_prompts(cell, m)] == a


def test_azure_trace(tmp_path):
    p = tmp_path / "az.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:46.9000000,10,2\n2023-11-16 18:15:48.1805900,20,1\n")
    assert detect_format(p) == "azure"
    recs = read_trace(p)
    assert [round(r.t_s, 6) for r in recs] == [0.0, 0.21941, 1.5] and recs[0].input_len == 374
    prompts = [TraceRequest(r, PromptMaker("token_ids", vocab_size=1000)).materialize() for r in recs]
    assert [len(x.content) for x in prompts] == [374, 10, 20] and prompts[1].content != prompts[0].content[:10]


@pytest.mark.parametrize("content,msg", [
    ('{"timestamp": 1, "input_length": 5}\n', "missing output_length"),
    ('{"timestamp": 1, "input_length": -5, "output_length": 1}\n', "outside"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [-1]}\n', "non-negative"),
    ('{"timestamp": "x", "input_length": 5, "output_length": 1}\n', "number of ms"),
    ("{nope\n", "not valid JSON"),
    ("a,b\n1,2\n", "unknown trace format"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "neither a date-time"),
])
def test_bad_traces_name_the_line(tmp_path, content, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(ConfigError, match=msg):
        read_trace(p)


def test_binary_trace_and_dataset_are_clear_errors(tmp_path):
    from infbench.workloads.chat import read_conversations

    p = tmp_path / "b.jsonl"
    p.write_bytes(b'{"messages": []}\n\xff\xfe\x00garbage\n')
    with pytest.raises(ConfigError, match=r"b.jsonl:2: not UTF-8"):
        read_conversations(p)
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_trace(p)


def test_shared_prefix_prompts():
    maker = PromptMaker("token_ids", vocab_size=32000)
    ps = maker.shared_prefix(40, 64, 48, 3, seed=1)
    assert all(len(p.content) == 64 and p.n_in == 64 for p in ps)
    prefixes = {tuple(p.content[:48]) for p in ps}
    assert len(prefixes) == 3                                      # every prefix used, no other
    assert len({tuple(p.content[48:]) for p in ps}) == 40          # unique tails
    assert maker.shared_prefix(40, 64, 48, 3, seed=1) == ps         # seeded
    with pytest.raises(ValueError):
        maker.shared_prefix(1, 10, 11, 1)


def test_tokenizer_gives_exact_lengths(tmp_path):
    from infbench.data.models import resolve
    from infbench.engines.hf_dummy import dummy_hf_dir
    from infbench.workloads.tokenizer import load_tokenizer, tokenizer_text

    folder = dummy_hf_dir(resolve("tiny"), tmp_path / "hf")
    tt = tokenizer_text(str(folder))
    maker = PromptMaker("text", tokenizer=tt)
    for p in maker.prompts(5, 37, seed=2) + maker.shared_prefix(5, 40, 16, 2):
        assert tt.count(p.content) == p.n_in == len(p.content.split()) in (37, 40)
    assert tt.chat_count([{"role": "user", "content": "t5 t6"}]) > 2     # the chat template counts
    with pytest.raises(ConfigError, match="does not download"):
        load_tokenizer("no-such-org/no-such-model-xyz")


def test_multi_turn_sessions(tmp_path):
    from infbench.workloads.chat import chat_sessions, session_of, word_count

    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two"},
            {"role": "user", "content": "three"}, {"role": "assistant", "content": "a b c d"},
            {"role": "user", "content": "five six seven"}, {"role": "assistant", "content": "x y z w v"},
            {"role": "user", "content": "dangling"}]
    s = session_of(msgs, word_count, 1)
    assert s.context == ({"role": "system", "content": "be brief"},)
    assert s.turns == (("one two\nthree", 4), ("five six seven", 5)) and s.input_len == 5
    assert session_of(msgs, word_count, 1, max_output_len=4).turns == (("one two\nthree", 4),)
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"messages": msgs}) + "\n" + json.dumps({"messages": msgs[1:4]}) + "\n")
    assert len(chat_sessions(p, word_count, 2, min_input_len=1, min_output_len=1)) == 2
    with pytest.raises(ConfigError, match="give a session"):
        chat_sessions(p, word_count, 3, min_input_len=1, min_output_len=1)


def test_planning_trace_prefix_and_multi_turn_cells(tmp_path, pm):
    from infbench.data.schema import Sweep
    from infbench.plan import plan
    from infbench.plan.target import remote_device

    dev = remote_device("http://127.0.0.1:1/v1")
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    base = dict(models=["m"], engines=["openai"], dtypes=["auto"], batch=[1], input_len=[64], output_len=[8])
    cells = plan(Sweep(**base, trace=str(trace), trace_speed=[0.5, 2], num_requests=2), dev, pm).cells
    assert [c.load.label() for c in cells] == ["trace x0.5", "trace x2"]
    assert cells[0].trace.n == 2 and cells[0].trace.format == "mooncake" and cells[0].trace.max_total_len == 705
    assert cells[0].input_len == 650 and cells[0].output_len == 6 and cells[0].spec_hash() != cells[1].spec_hash()
    pre = plan(Sweep(**base, prefix_len=32, num_prefixes=4, concurrency=[2], stream=False), dev, pm).cells[0]
    assert (pre.prefix_len, pre.num_prefixes, pre.load.stream) == (32, 4, False) and "prefix32x4" in pre.label()
    plain = plan(Sweep(**base, concurrency=[2]), dev, pm).cells[0]
    assert "prefix_len" not in plain.spec() and "stream" not in plain.spec()["load"]   # old ids unchanged
    for bad, msg in [(dict(trace=str(trace), request_rate=[1]), "trace's own times"),
                     (dict(multi_turn=True), "give --dataset"), (dict(trace_speed=[2]), "needs --trace"),
                     (dict(prefix_len=100), "exceeds --input-len"), (dict(num_prefixes=2), "needs --prefix-len")]:
        with pytest.raises(ConfigError, match=msg):
            plan(Sweep(**base, **bad), dev, pm)
