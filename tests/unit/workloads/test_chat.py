"""The chat-conversation workload: formats, dropping the final assistant turn, length
filter, seeded sampling, and errors that name the line."""

import json

import pytest

from infbench.data.errors import ConfigError
from infbench.workloads.chat import ChatRequest, chat_requests, read_conversations, word_count
from tests.support.conversations import write_conversations


@pytest.fixture
def conv(tmp_path):
    p = tmp_path / "chats.jsonl"
    return p, write_conversations(p)


def test_three_formats_normalised(conv):
    path, truth = conv
    convs = read_conversations(path)
    assert len(convs) == len(truth) == 40
    for _, msgs in convs:
        assert {m["role"] for m in msgs} <= {"system", "user", "assistant"} and msgs[-1]["role"] == "assistant"


def test_final_assistant_turn_dropped_and_forced(conv):
    path, truth = conv
    reqs = chat_requests(path, word_count, n=40, max_input_len=10_000)
    for r in reqs:
        t = truth[r.line - 1]
        assert r.messages[-1]["role"] == "user"
        assert r.input_len == t["prompt_words"] and r.output_len == t["answer_words"]


def test_length_filter_and_seeded_sampling(conv):
    path, truth = conv
    eligible = sum(1 for t in truth if t["prompt_words"] <= 30 and 10 <= t["answer_words"] <= 20)
    reqs = chat_requests(path, word_count, n=eligible, max_input_len=30, min_output_len=10, max_output_len=20)
    assert all(r.input_len <= 30 and 10 <= r.output_len <= 20 for r in reqs)
    a = chat_requests(path, word_count, n=5, seed=1, max_input_len=10_000)
    assert a == chat_requests(path, word_count, n=5, seed=1, max_input_len=10_000)
    assert a != chat_requests(path, word_count, n=5, seed=2, max_input_len=10_000)
    with pytest.raises(ConfigError, match=f"{eligible} of 40 conversations pass the length filter"):
        chat_requests(path, word_count, n=eligible + 1, max_input_len=30, min_output_len=10, max_output_len=20)


def test_conversation_without_final_exchange_skipped(tmp_path):
    p = tmp_path / "c.jsonl"
    lines = [{"messages": [{"role": "user", "content": "a b c d"}]},                     # no answer
             {"messages": [{"role": "assistant", "content": "a b c d"}]},                # no prompt
             {"messages": [{"role": "user", "content": "a b c d e"},
                           {"role": "assistant", "content": "w x y z"},
                           {"role": "user", "content": "more words here please"}]}]     # ends with user
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    (r,) = chat_requests(p, word_count, n=1)
    assert r == ChatRequest(({"role": "user", "content": "a b c d e"},), 5, 4, 3)


@pytest.mark.parametrize("line, match", [
    ("{not json", r":2: not valid JSON"),
    ('{"text": "hi"}', r":2: no 'messages'"),
    ('{"messages": [{"role": "robot", "content": "x"}]}', r":2: unknown speaker 'robot'"),
    ('{"messages": [{"role": "user", "content": [{"type": "image"}]}]}', r":2: a user turn has no text"),
])
def test_bad_lines_name_the_line(tmp_path, line, match):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"messages": []}\n' + line + "\n")
    with pytest.raises(ConfigError, match=match):
        read_conversations(p)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        read_conversations(tmp_path / "nope.jsonl")
