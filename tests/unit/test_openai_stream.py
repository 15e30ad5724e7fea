"""Parsing of streamed server-sent events: the first-token rule, usage, fallbacks."""

import json

from infbench.engines.openai import parse_stream, to_record


def ev(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat(delta=None, finish=None):
    return ev({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]})


USAGE = ev({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


def test_first_token_rule_chat():
    reads = [(100, chat({"role": "assistant"})), (110, chat({"content": ""})), (120, chat({"content": "Hi"})),
             (130, chat({"content": " there"})), (140, chat({"content": "!"}, finish="length")),
             (150, USAGE), (160, b"data: [DONE]\n\n")]
    p = parse_stream(reads, chat=True)
    assert p.token_times_ns == [120, 130, 140]        # role-only, empty, usage-only do not count
    assert p.usage["completion_tokens"] == 3 and p.done and p.finish_reason == "length"
    r = to_record(p, t_send=50, t_sched=40, n_in_sent=None, transport_error=None)
    assert r.n_in == 7 and r.n_out == 3 and r.n_out_source == "usage" and r.error is None
    assert r.t_tokens_ns[0] - r.t_send_ns == 70 and r.t_send_ns - r.t_sched_ns == 10


def test_event_split_across_reads_takes_completing_time():
    e = ev({"choices": [{"text": "a", "finish_reason": None}]})
    reads = [(10, e[:9]), (20, e[9:] + ev({"choices": [{"text": "b", "finish_reason": "stop"}]})),
             (30, b"data: [DO"), (40, b"NE]\r\n\r\n")]
    p = parse_stream(reads)
    assert p.token_times_ns == [20, 20] and p.done


def test_usage_counts_tokens_that_came_without_text():
    # 4 tokens, but one event carried no text (e.g. an incomplete UTF-8 byte): pad at the end.
    reads = [(10, ev({"choices": [{"text": "x"}]})), (20, ev({"choices": [{"text": ""}]})),
             (30, ev({"choices": [{"text": "y"}]})), (40, ev({"choices": [{"text": "z", "finish_reason": "length"}]})),
             (50, ev({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4}}))]
    r = to_record(parse_stream(reads), 0, 0, 2, None)
    assert r.n_out == 4 and r.t_tokens_ns == [10, 30, 40, 40]


def test_no_usage_falls_back_to_chunks_flagged():
    reads = [(10, ev({"choices": [{"text": "x"}]})), (20, ev({"choices": [{"text": "y", "finish_reason": "length"}]})),
             (30, b"data: [DONE]\n\n")]
    r = to_record(parse_stream(reads), 0, 0, 5, None)
    assert r.n_out == 2 and r.n_out_source == "chunks" and r.n_in == 5 and r.error is None


def test_errors():
    r = to_record(parse_stream([(10, ev({"choices": [{"text": "x"}]}))]), 0, 0, 1, None)
    assert "stream ended early" in r.error and r.t_tokens_ns == [10]
    p = parse_stream([(10, ev({"choices": [{"text": "x"}]})), (20, ev({"error": {"message": "model crashed"}}))])
    assert to_record(p, 0, 0, 1, None).error == "model crashed"
    assert to_record(parse_stream([]), 0, 0, 1, "ReadError: reset").error == "ReadError: reset"


def test_server_fields_kept():
    reads = [(10, ev({"choices": [{"text": "x", "finish_reason": "length"}], "timings": {"prompt_ms": 5.0},
                      "time_info": {"queue_time": 0.001}})), (20, b"data: [DONE]\n\n")]
    r = to_record(parse_stream(reads), 0, 0, 1, None)
    assert r.server == {"timings": {"prompt_ms": 5.0}, "time_info": {"queue_time": 0.001}, "finish_reason": "length"}
