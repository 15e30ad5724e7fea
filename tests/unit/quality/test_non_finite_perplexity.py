"""Non-finite perplexity and gates (issue 33, item 3): a NaN or infinite perplexity from any source is a
failed result, never passes a gate, and gates take finite positive values only."""

from __future__ import annotations

import pytest

from infbench.data.errors import ConfigError
from tests.support.hostile import cli, make_store


def test_non_finite_perplexity_is_a_failed_result(tmp_path, cpu, monkeypatch):
    """The probe: a GGUF with a NaN norm stored a NaN perplexity as ok, which passed
    `--max-ppl-increase 1%`. The scorer's NaN log-probabilities now fail the measurement."""
    import numpy as np

    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.models import resolve
    from infbench.data.run import RunOptions
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.execution.scenarios.scoring import perplexity_plan
    from infbench.quality.perplexity import PerplexityRequest
    from infbench.store import Store
    from infbench.store.quality import quality_results

    text = tmp_path / "t.txt"
    text.write_text("abcdefgh" * 64)

    class W:
        sha256, format, path, dtype = "0" * 64, "hf", None, None

        def record(self):
            return {"real": True}

    req = PerplexityRequest(resolve("tiny-random-llama"), W(), "fake", "f16", text.read_text(), str(text), "ab" * 32,
                            64, 2)
    monkeypatch.setattr("infbench.execution.scenarios.scoring.request_for", lambda item, spec, pm=None: req)
    monkeypatch.setattr(testing.FakeScorer, "chunk_nll",
                        lambda self, chunks, first: ([np.full(chunks.shape[1] - first - 1, np.nan)] * len(chunks),
                                                     None))
    fpm = testing.plugin_manager()
    store = Store(tmp_path / "r.db")
    s = InProcessExecutor(fpm, {"test": True}).run(perplexity_plan([req], cpu), store, RunOptions(), ev.ignore)
    (q,) = s.quality
    assert q.status == "failed" and q.perplexity is None and "NaN or infinite log-probabilities" in q.error
    (row,) = quality_results(store)
    assert row["status"] == "failed" and row["value"] is None
    store.close()


def test_non_finite_perplexity_from_any_source_is_failed():
    from infbench.data.scores import PerplexityResult

    for v in (float("nan"), float("inf")):
        r = PerplexityResult(model="m", weights_sha256="0", engine="llama.cpp", dtype="f16", text_path="t",
                             text_sha256="s", n_ctx=8, perplexity=v, chunk_perplexity=[v])
        assert r.status == "failed" and r.perplexity is None and r.chunk_perplexity == []


def test_a_stored_nan_perplexity_never_passes_a_gate():
    from infbench.quality.gate import with_gate

    def q(dtype, value):
        return {"model": "m", "weights_sha256": "w", "engine": "llama.cpp", "dtype": dtype, "text_sha256": "t",
                "n_ctx": 512, "max_chunks": None, "status": "ok", "value": value}

    rows = with_gate([q("f16", 10.0), q("q4_0", float("nan"))], 0.01)
    assert rows[0]["baseline_dtype"] == "f16" and rows[1]["beyond_gate"] is True


@pytest.mark.parametrize("value", ["nan", "NaN%", "inf%", "-inf", "0", "0%", "-1%", "1e999"])
def test_gates_take_finite_positive_values_only(tmp_path, value):
    from infbench.quality.gate import parse_increase

    with pytest.raises(ConfigError):
        parse_increase(value)
    store = make_store(tmp_path / "s.db")
    text = tmp_path / "t.txt"
    text.write_text("word " * 100)
    for args in (["results", "--quality", "--store", store],
                 ["compare", "--dtypes", "f16,q4_0", "--store", store],
                 ["report", "--no-static", "--store", store, "--out", tmp_path / "rep"],
                 ["perplexity", "--model", "tiny", "--text", text, "--store", store]):
        r = cli(*args, "--max-ppl-increase", value)
        assert "--max-ppl-increase" in r.output

