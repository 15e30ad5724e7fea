"""Each METRICS.md formula against records whose answers are computed by hand."""

import pytest

from infbench.measure.metrics import cell_metrics, e2e_s, flatten, itl_samples_s, summarize, tpot_s, ttft_s
from infbench.schema import RequestRecord

MS = 1_000_000  # ns per ms


def rec(send_ms, token_ms, n_in=10, error=None, source="engine"):
    return RequestRecord(t_send_ns=send_ms * MS, t_tokens_ns=[t * MS for t in token_ms], n_in=n_in,
                         n_out=len(token_ms), error=error, n_out_source=source)


def test_per_request_formulas():
    r = rec(0, [100, 110, 130, 160])  # ttft 100 ms, e2e 160 ms, n_out 4
    assert ttft_s(r) == pytest.approx(0.100)
    assert e2e_s(r) == pytest.approx(0.160)
    assert tpot_s(r) == pytest.approx((0.160 - 0.100) / 3)
    assert itl_samples_s(r) == pytest.approx([0.010, 0.020, 0.030])


def test_tpot_undefined_for_one_token():
    assert tpot_s(rec(0, [50])) is None


def test_summarize_percentiles_and_count():
    s = summarize([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert s["count"] == 10 and s["mean"] == pytest.approx(5.5) and s["max"] == 10
    assert s["p50"] == pytest.approx(5.5)          # linear interpolation, as numpy/vLLM
    assert s["p90"] == pytest.approx(9.1)
    assert s["p99"] == pytest.approx(9.91)
    assert summarize([])["count"] == 0 and summarize([])["p50"] is None


def test_cell_metrics_batch_by_hand():
    # Two requests sent at t=0 and t=10 ms; one failed request that must be excluded.
    a = rec(0, [100, 120, 140], n_in=8)        # ttft .100 e2e .140 tpot .020
    b = rec(10, [110, 150, 190, 230], n_in=6)  # ttft .100 e2e .220 tpot .040
    bad = rec(0, [], n_in=5, error="boom")
    m = cell_metrics([a, b, bad], devices_used=2, energy_j=3.5, slo={"ttft_s": 0.2, "tpot_s": 0.03})
    duration = 0.230  # last token 230 ms - first send 0 ms
    assert m["duration_s"] == pytest.approx(duration)
    assert m["n_requests"] == 3 and m["n_completed"] == 2 and m["n_failed"] == 1
    assert m["n_in_total"] == 14 and m["n_out_total"] == 7
    assert m["output_tok_s"] == pytest.approx(7 / duration)
    assert m["total_tok_s"] == pytest.approx(21 / duration)
    assert m["output_tok_s_per_device"] == pytest.approx(7 / duration / 2)
    assert m["request_s"] == pytest.approx(2 / duration)
    assert m["ttft_s"]["mean"] == pytest.approx(0.100) and m["ttft_s"]["count"] == 2
    assert m["e2e_s"]["mean"] == pytest.approx(0.180)
    assert m["tpot_s"]["mean"] == pytest.approx(0.030)
    assert m["itl_s"]["count"] == 5 and m["itl_s"]["max"] == pytest.approx(0.040)
    # LLM-Inference-Bench eq. 1 with means: (0.180 - 0.100) / (2 x (3.5 - 1))
    assert m["lib_itl_s"] == pytest.approx(0.080 / (2 * 2.5))
    # goodput: a meets both limits (tpot .020), b misses tpot (.040 > .030)
    assert m["goodput_req_s"] == pytest.approx(1 / duration)
    assert m["energy_j"] == 3.5
    assert m["avg_power_w"] == pytest.approx(3.5 / duration)
    assert m["tokens_per_j"] == pytest.approx(21 / 3.5)
    assert m["output_tokens_per_j"] == pytest.approx(7 / 3.5)
    assert m["token_counts_estimated"] is False


def test_estimated_counts_flagged_and_no_energy_keys_without_energy():
    m = cell_metrics([rec(0, [10, 20], source="client_tokenizer")])
    assert m["token_counts_estimated"] is True
    assert "energy_j" not in m and "tokens_per_j" not in m


def test_nothing_completed_gives_null_throughput():
    m = cell_metrics([rec(0, [], error="x")])
    assert m["n_completed"] == 0 and m["output_tok_s"] is None and m["duration_s"] is None


def test_flatten_names():
    f = flatten({"ttft_s": {"p50": 1.0, "count": 3}, "output_tok_s": 5.0})
    assert f == {"ttft_s_p50": 1.0, "ttft_s_count": 3, "output_tok_s": 5.0}
