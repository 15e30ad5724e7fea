"""Parsing of streamed server-sent events: the first-token rule, usage, fallbacks."""

import json

import pytest

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


# --- issue 14: a bad event or bad usage fails that request only, with the reason -------------

def text(t, finish=None):
    return ev({"choices": [{"text": t, "finish_reason": finish}]})


def usage(ct, pt=4, **extra):
    return ev({"choices": [], "usage": {"prompt_tokens": pt, "completion_tokens": ct, **extra}})


def stream(*events):
    return [(10 * (i + 1), e) for i, e in enumerate(events)] + [(999, b"data: [DONE]\n\n")]


def test_malformed_choices_is_the_requests_error_not_an_exception():
    p = parse_stream(stream(text("a"), ev({"choices": "notalist"}), text("b", "length")))
    r = to_record(p, 0, 0, 1, None)
    assert r.error == "malformed event: 'choices' is str, not a list"
    for bad in (ev({"choices": ["x"]}), ev([1, 2]), ev({"usage": "x"}), ev({"choices": [{"text": {"a": 1}}]}),
                b"data: {nope\n\n"):
        assert to_record(parse_stream(stream(text("a"), bad)), 0, 0, 1, None).error, bad
    p = parse_stream(stream(chat({"content": "a"}), ev({"choices": [{"delta": 5}]})), chat=True)
    assert to_record(p, 0, 0, 1, None).error == "malformed event: 'delta' is int, not an object"


@pytest.mark.parametrize("ct,why", [(-5, "not a token count"), (10**9, "not a token count in 0..8"),
                                    (float("inf"), "not a token count"), (2.5, "not a token count"),
                                    (1, "but 2 events with text"), (True, "not a token count"),
                                    ("7", "not a token count")])
def test_impossible_usage_fails_the_request(ct, why):
    r = to_record(parse_stream(stream(text("a"), text("b", "length"), usage(ct))), 0, 0, 1, None, max_tokens=8)
    assert r.error.startswith("invalid usage from the server") and why in r.error
    assert len(r.t_tokens_ns) == 2 and r.n_out == 2          # no billion-entry list


def test_huge_usage_without_max_tokens_is_bounded():
    r = to_record(parse_stream(stream(text("a", "length"), usage(10**9))), 0, 0, 1, None)
    assert "invalid usage" in r.error and len(r.t_tokens_ns) == 1


# --- reasoning (issue 16 part 4) ----------------------------------------------------------

def test_reasoning_deltas_then_answer():
    reads = stream(chat({"role": "assistant"}), chat({"reasoning_content": "hmm"}), chat({"reasoning": " so"}),
                   chat({"content": "Yes"}), chat({"content": "!"}, finish="length"),
                   ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                                "completion_tokens_details": {"reasoning_tokens": 2}}}))
    p = parse_stream(reads, chat=True, keep_text=True)
    assert p.token_times_ns == [20, 30, 40, 50] and p.reasoning_times_ns == [20, 30]
    assert p.answer_times_ns == [40, 50] and p.text == "Yes!"
    r = to_record(p, 5, 0, None, None)
    assert r.t_tokens_ns[0] == 20                               # TTFT: first token of any kind
    assert (r.t_first_reasoning_ns, r.t_first_answer_ns) == (20, 40)
    assert r.n_reasoning == 2 and r.n_reasoning_source == "usage" and r.n_out == 4


@pytest.mark.parametrize("pieces,n_think,answer", [
    (["<think>", "a", " b", "</think>", "\n\n", "Ans", "wer"], 4, "Answer"),
    (["<th", "ink>a", " b</th", "ink>", "Answer"], 4, "Answer"),       # tags split across events
    (["a", " b", "</think>", " Answer"], 3, "Answer"),                  # opened by the chat template
    (["<think>", "a", " b"], 3, None),                                  # cut before the answer
    (["no", " reasoning"], 0, "no reasoning"),
])
def test_think_tags(pieces, n_think, answer):
    reads = stream(*[text(x) for x in pieces[:-1]], text(pieces[-1], "length"))
    p = parse_stream(reads, keep_text=True)
    r = to_record(p, 0, 0, 1, None)
    assert len(p.reasoning_times_ns) == n_think and len(p.answer_times_ns) == len(pieces) - n_think
    assert r.n_reasoning == (n_think or None) and (r.n_reasoning_source == "chunks") == bool(n_think)
    assert r.t_first_answer_ns == (10 * (n_think + 1) if answer else None)
    assert p.text == (answer or "")


def test_non_streaming_response():
    from infbench.engines.openai import parse_response

    body = json.dumps({"choices": [{"message": {"content": "<think>x y</think> the answer"}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 9}}).encode()
    p = parse_response(body, 777, chat=True, keep_text=True)
    r = to_record(p, 100, 90, None, None, max_tokens=16, streamed=False)
    assert r.error is None and not r.streamed and r.t_tokens_ns == [777] and r.n_out == 9 and r.n_in == 5
    assert r.t_first_answer_ns is None and p.text == "the answer"


def test_error_event_text_is_cleaned():
    p = parse_stream(stream(ev({"error": {"message": "bad \x1b[31mthing\x1b[0m"}})))
    assert to_record(p, 0, 0, 1, None).error == "bad thing"


# --- fuzz: whatever a server streams, the client records an error, never raises -------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["choices", "text", "delta", "content", "reasoning_content", "usage",
                                          "completion_tokens", "prompt_tokens", "finish_reason", "error",
                                          "message", "timings"]), inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(JSONS | st.binary(max_size=20), max_size=6), chat=st.booleans(),
       cut=st.integers(0, 50), streamed=st.booleans())
def test_any_stream_gives_a_record(events, chat, cut, streamed):
    raw = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)
    reads = [(1, raw[:cut]), (2, raw[cut:])]
    r = to_record(parse_stream(reads, chat=chat, keep_text=True), 0, 0, None, None, max_tokens=8, streamed=streamed)
    assert r.error is not None or (r.n_out <= 8 and len(r.t_tokens_ns) <= 8)


def test_cached_prompt_tokens_from_usage_kept_when_they_are_a_count():
    """``usage.prompt_tokens_details.cached_tokens`` goes to the record's server fields (the
    physics check reads it); a malformed details object is ignored, not a crash."""
    def rec(details):
        usage = {"prompt_tokens": 7, "completion_tokens": 1, "prompt_tokens_details": details}
        reads = [(10, chat({"content": "a"}, finish="stop")), (20, ev({"choices": [], "usage": usage})),
                 (30, b"data: [DONE]\n\n")]
        return to_record(parse_stream(reads, chat=True), t_send=0, t_sched=0, n_in_sent=None, transport_error=None)

    assert rec({"cached_tokens": 5}).server["cached_tokens"] == 5
    for bad in ({"cached_tokens": "5"}, {"cached_tokens": True}, "x", None, {"cached_tokens": 0}):
        r = rec(bad)
        assert r.error is None and "cached_tokens" not in (r.server or {})
