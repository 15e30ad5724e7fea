"""A conversation dataset with a line that is not UTF-8 (issue 14, section 2): a clear error naming the line."""

from __future__ import annotations

import json

from tests.support.hostile import (
    cli,
)


def test_dataset_with_a_non_utf8_line(tmp_path):
    f = tmp_path / "chats.jsonl"
    ok = json.dumps({"messages": [{"role": "user", "content": "hi there you"},
                                  {"role": "assistant", "content": "hello to you too"}]})
    f.write_bytes((ok + "\n").encode() + b'{"messages": "\xff\xfe"}\n')
    r = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", f, "--dry-run")
    assert f"{f}:2" in r.output and "not UTF-8" in r.output

