"""Issue 41: serving against imperfect servers, for real on 127.0.0.1 (the stub server of
tests/support): a stream that never ends is cut at its bound, tokens beyond ``max_tokens``
are not counted and flag the cell, and a server without ``usage`` gets its input tokens
estimated from the prompt's length (marked), never 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infbench.store import Store
from tests.support.stub_server import StubServer

pytestmark = pytest.mark.integration
# One warm-up block: a stub server has nothing to warm, and its blocks need not settle (19 s seen).
SERVING = ["--engine", "openai", "--concurrency", "1", "--num-requests", "2", "--input-len", "16", "--output-len", "8",
           "--warmup-requests", "0", "--warmup", "1"]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "infbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


@pytest.fixture(scope="module")
def stub():
    with StubServer() as s:
        yield s


def _cell(store):
    [row] = Store(store, readonly=True).results(all_attempts=True)
    return row


def test_a_stream_without_end_is_cut_long_before_the_request_timeout(stub, tmp_path):
    store = tmp_path / "s.db"
    p = cli("run", *SERVING, "--base-url", stub.base_url, "--model", "forever", "--request-timeout", "600",
            "--store", store, "--json")
    import sqlite3

    errors = [r[0] for r in sqlite3.connect(store).execute("SELECT error FROM requests")]
    assert len(errors) == 2 and all("cut: the server streamed more than 48 events" in (e or "") for e in errors), \
        (errors, p.stderr[-2000:])
    assert _cell(store)["status"] == "failed"           # every request cut: no measurement


def test_tokens_beyond_max_tokens_are_not_counted_and_flag_the_cell(stub, tmp_path):
    store = tmp_path / "s.db"
    p = cli("run", *SERVING, "--base-url", stub.base_url, "--model", "extra", "--store", store)
    assert p.returncode == 0, p.stderr
    row = _cell(store)
    m = row["metrics"]
    assert row["status"] == "ok" and m["n_out_total"] == 16            # 2 requests x max_tokens 8, not 48
    assert "too many tokens" in m["suspect"] and "16 extra" in m["suspect"]


def test_input_tokens_without_usage_are_estimated_never_zero(stub, tmp_path):
    store = tmp_path / "s.db"
    p = cli("run", *SERVING, "--base-url", stub.base_url, "--model", "no_usage", "--store", store, "--json")
    assert p.returncode == 0, p.stderr
    m = _cell(store)["metrics"]
    assert m["n_in_total"] > 0
    out = json.loads(p.stdout)
    assert out["cells"][0]["metrics"]["n_in_total"] == m["n_in_total"]
    assert "estimated from the prompt's length" in p.stderr + json.dumps(out)
