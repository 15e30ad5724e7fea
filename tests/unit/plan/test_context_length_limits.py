"""Lengths beyond the model's context (issue 33, item 3): refused when the cells are planned, and a
perplexity `n_ctx` beyond the context refused."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli


@pytest.mark.parametrize("extra", [["--dry-run"], []])
def test_lengths_beyond_the_context_are_refused_when_planned(tmp_path, extra):
    """The probe: `run --output-len 10000000` on a 2048-token model was accepted (also by
    --dry-run); llama.cpp sized its context for it, grew to 10.7 GB and ignored SIGTERM."""
    store = tmp_path / "s.db"
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "10000000", "--store", store,
            *extra)
    assert "exceeds the model's context of 2,048 tokens" in r.output and "10,000,008 together" in r.output
    assert not store.exists()
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "2000", "--output-len", "49", *extra,
            "--store", store)
    assert "2,049 together" in r.output  # input + output together, one token over


def test_perplexity_n_ctx_beyond_the_context_is_refused(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("word " * 5000)
    r = cli("perplexity", "--model", "tiny", "--text", text, "--n-ctx", "4096", "--store", tmp_path / "s.db")
    assert "--n-ctx 4096 exceeds the context of tiny-random-llama (2,048 tokens)" in " ".join(r.output.split())

