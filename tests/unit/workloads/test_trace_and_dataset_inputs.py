"""Traces and datasets at the boundary (issue 22): bad trace fields and Azure rows refused with their
line, far-future timestamps, a cell timeout shorter than the trace, strict JSON dataset lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.boundaries import TRACE_RUN
from tests.support.hostile import cli


# -- silently wrong ----------------------------------------------------------------------------------
def _trace(tmp_path, lines: list[str], name="t.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("".join(line + "\n" for line in lines))
    return f


@pytest.mark.parametrize("bad, message", [
    ('{"timestamp": 5, "input_length": true, "output_length": 2}', "input_length must be an integer, got True"),
    ('{"timestamp": 5, "input_length": 4.0, "output_length": 2}', "input_length must be an integer"),
    ('{"timestamp": 5, "input_length": "4", "output_length": 2}', "input_length must be an integer"),
    ('{"timestamp": NaN, "input_length": 4, "output_length": 2}', "NaN is not a JSON number"),
    ('{"timestamp": Infinity, "input_length": 4, "output_length": 2}', "Infinity is not a JSON number"),
    ('{"timestamp": -Infinity, "input_length": 4, "output_length": 2}', "Infinity is not a JSON number"),
    ('{"timestamp": 1e300, "input_length": 4, "output_length": 2}', "outside"),
    ('{"timestamp": 5, "input_length": 4, "output_length": false}', "output_length must be an integer"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2, "hash_ids": [true]}', "hash_ids"),
    ('{"timestamp": 5, "timestamp": 6, "input_length": 4, "output_length": 2}', "duplicate key"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2, "x": ' + "[" * 100 + "]" * 100 + "}", "nesting"),
])
def test_bad_trace_fields_are_refused_with_their_line(tmp_path, bad, message):
    """``"input_length": true`` was taken as 1 token; NaN/Infinity timestamps failed inside
    the load generator."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}', bad])
    r = cli(*TRACE_RUN, f)
    assert f"{f}:2" in r.output and message in r.output, r.output


def test_far_future_trace_timestamps_are_refused(tmp_path):
    """A replay would wait for a request years away: refused with its line and the span."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 1000, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 900000000000, "input_length": 8, "output_length": 2}'])
    r = cli(*TRACE_RUN, f)
    assert f"{f}:3" in r.output and "days after the first" in r.output
    a = tmp_path / "a.csv"
    a.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,2\n9999-12-31 23:59:59,4,2\n")
    assert f"{a}:3" in cli(*TRACE_RUN, a).output


def test_cell_timeout_shorter_than_the_trace_is_refused_when_planned(tmp_path):
    """A 3 s trace under ``--cell-timeout 2`` stored an ``ok`` cell holding part of its
    requests, with no word about the rest."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 1000, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 3000, "input_length": 8, "output_length": 2}'])
    r = cli(*TRACE_RUN, f, "--cell-timeout", "2")
    assert "1 of its 3 requests would never be sent" in " ".join(r.output.split())
    cli(*TRACE_RUN, f, "--cell-timeout", "2", "--trace-speed", "2", code=0)  # 1.5 s at twice the speed
    cli(*TRACE_RUN, f, "--cell-timeout", "10", code=0)


@pytest.mark.parametrize("content, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,true,2\n", "ContextTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nnan,4,2\n", "TIMESTAMP"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,4,1e300\n", "GeneratedTokens"),
    ('TIMESTAMP,ContextTokens,GeneratedTokens\n"1\n2",4,2\n', "runs over lines"),
])
def test_bad_azure_trace_rows(tmp_path, content, message):
    f = tmp_path / "az.csv"
    f.write_text(content)
    r = cli(*TRACE_RUN, f)
    assert f"{f}:2" in r.output and message in r.output, r.output


def test_dataset_lines_are_strict_json(tmp_path):
    f = tmp_path / "chats.jsonl"
    ok = json.dumps({"messages": [{"role": "user", "content": "hi there you"},
                                  {"role": "assistant", "content": "hello to you too"}]})
    f.write_text(ok + "\n" + ok.replace('"hi there you"', "NaN") + "\n")
    r = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", f, "--dry-run")
    assert f"{f}:2" in r.output and "NaN" in r.output

