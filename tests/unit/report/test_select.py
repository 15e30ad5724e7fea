"""SLO selection (`infbench results --best`) on hand-made stored rows."""

import pytest

from infbench.data.stored import StoredCell
from infbench.report.select import best, meets


def row(model, dev, tput, e2e_p99, ttft_p99=0.1, status="ok"):
    return StoredCell(cell_id=f"{dev}-{tput}", spec_hash=f"h-{dev}-{tput}", run_id="r1", status=status,
                      spec={"model": model}, device={"vendor": "nvidia", "model": dev},
                      metrics={"output_tok_s_per_device": tput, "e2e_s": {"p99": e2e_p99, "p50": e2e_p99 / 2},
                               "ttft_s": {"p99": ttft_p99}})


ROWS = [row("llama-3-8b", "A100", 900, 20.0), row("llama-3-8b", "A100", 1500, 30.0),   # too slow
        row("llama-3-8b", "H100", 2000, 25.0), row("llama-3-8b", "H100", 2600, 25.6),  # at the limit: kept
        row("llama-3-8b", "H100", 9999, 1.0, status="failed")]


def test_best_per_device_under_e2e_limit():
    got = best(ROWS, {"e2e_s": 25.6})
    assert [(r.device["model"], r.metrics["output_tok_s_per_device"]) for r in got] == [("H100", 2600),
                                                                                      ("A100", 900)]


def test_percentile_and_several_limits():
    assert [r.metrics["output_tok_s_per_device"] for r in best(ROWS, {"e2e_s": 16.0}, "p50")] == [2600, 1500]
    assert best(ROWS, {"e2e_s": 30, "ttft_s": 0.05}) == []
    assert not meets(ROWS[-1], {"e2e_s": 100})


def test_bad_limits():
    with pytest.raises(ValueError):
        best(ROWS, {})
    with pytest.raises(ValueError):
        best(ROWS, {"e2e_s": 1}, "p95")
