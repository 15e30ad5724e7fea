"""Command flags at the boundary (issue 22): `run`'s refused before anything starts, the reading
commands', `--perplexity`'s and `quantize --threads`' checked and bounded."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli, digest, make_store


@pytest.mark.parametrize("flags", [["--power-watts", "nan"], ["--scrape-interval", "-1"], ["--price-per-hour", "inf"],
                                   ["--find-max", "rate", "--find-max-probes", "0"],
                                   ["--find-max", "rate", "--find-max-probes", "-3"]])
def test_run_flags_are_refused_before_anything_starts(tmp_path, flags):
    """``--scrape-interval -1`` was refused only after the run had begun; ``--power-watts
    nan`` was an internal error; ``--find-max-probes 0``/``-3`` exited 0."""
    r = cli("run", "--model", "tiny", "--batch", "1", "--store", tmp_path / "s.db", *flags)
    assert flags[-2] in r.output and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("args, message", [
    (["results", "--max-ttft", "nan"], "--max-ttft"), (["results", "--max-e2e", "-1"], "--max-e2e"),
    (["results", "--percentile", "p42"], "--percentile"), (["results", "--format", "xml"], "--format"),
    (["export", "--format", "xml"], "--format"), (["report", "--slo-ttft", "inf"], "--slo-ttft"),
    (["report", "--title", "x" * 1000], "--title"),
])
def test_reading_commands_check_their_flags(tmp_path, args, message):
    p = make_store(tmp_path / "s.db")
    before = digest(p)
    assert message in cli(*args, "--store", p).output
    assert digest(p) == before


@pytest.mark.parametrize("flags, message", [(["--n-ctx", "0"], "--n-ctx"), (["--chunks", "0"], "--chunks"),
                                            (["--threads", "0"], "--threads")])
def test_perplexity_flags(tmp_path, flags, message):
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 100)
    r = cli("perplexity", "--model", "x.gguf", "--text", text, *flags, "--store", tmp_path / "s.db")
    assert message in r.output and not (tmp_path / "s.db").exists()


def test_quantize_threads_are_bounded(tmp_path):
    assert "--threads" in cli("quantize", "--model", tmp_path / "m.gguf", "--to", "q8_0", "--threads", "-1").output

