"""Each docs/metrics.md formula against records whose answers are computed by hand."""

import pytest

from infbench.data.schema import RequestRecord
from infbench.measure.derive import cell_metrics, e2e_s, flatten, itl_samples_s, summarize, tpot_s, ttft_s

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


# --- serving-mode additions (issue 16) ----------------------------------------------------

def _rec(**kw):
    from infbench.data.schema import RequestRecord

    base = dict(t_send_ns=1_000, t_sched_ns=500, t_tokens_ns=[3_000, 4_000, 5_000], n_in=4, n_out=3)
    return RequestRecord(**{**base, **kw})


def test_release_lag_reasoning_and_turns():
    from infbench.measure.derive import cell_metrics

    recs = [_rec(t_first_reasoning_ns=3_000, t_first_answer_ns=5_000, n_reasoning=2, n_reasoning_source="usage",
                 turn=1, session=0),
            _rec(t_send_ns=2_000, t_sched_ns=1_000, t_tokens_ns=[6_000, 7_000, 8_000], turn=2, session=0,
                 t_first_reasoning_ns=6_000, t_first_answer_ns=7_000, n_reasoning=1, n_reasoning_source="chunks"),
            _rec(t_send_ns=900, t_sched_ns=900, t_tokens_ns=[], error="timeout after 1 s")]   # never sent
    m = cell_metrics(recs)
    assert m["release_lag_s"]["count"] == 2 and m["release_lag_s"]["max"] == pytest.approx(1e-6)
    assert m["ttfrt_s"]["p50"] == pytest.approx(3e-6) and m["ttfat_s"]["max"] == pytest.approx(5e-6)
    assert m["reasoning_tokens"]["mean"] == 1.5 and m["answer_tokens"]["mean"] == 1.5
    assert m["reasoning_tokens_estimated"] is True
    assert set(m["ttft_s_by_turn"]) == {"1", "2"} and m["ttft_s_by_turn"]["2"]["p50"] == pytest.approx(4e-6)


def test_non_streamed_cells_have_no_ttft_tpot_itl():
    from infbench.measure.derive import cell_metrics

    m = cell_metrics([_rec(t_tokens_ns=[9_000], n_out=30, streamed=False)] * 2)
    assert "ttft_s" not in m and "tpot_s" not in m and "itl_s" not in m and m["lib_itl_s"] is None
    assert m["e2e_s"]["p50"] == pytest.approx(8e-6) and m["output_tok_s"] > 0 and m["streamed"] is False


def test_failure_summary_names_the_causes():
    from infbench.measure.derive import failure_summary

    boom = [_rec(error="HTTP 500: internal boom", t_tokens_ns=[]) for _ in range(4)]
    assert failure_summary(boom) == "4/4 failed: HTTP 500: internal boom"
    mixed = boom[:2] + [_rec(error="timeout after 600 s (--request-timeout)", t_tokens_ns=[])]
    assert failure_summary(mixed) == ("3/3 failed: HTTP 500: internal boom (2); "
                                      "timeout after 600 s (--request-timeout) (1)")
    many = [_rec(error=f"e{i}", t_tokens_ns=[]) for i in range(5)]
    assert failure_summary(many).endswith("2 with 2 other cause(s)")
    assert "no request was sent" in failure_summary([])
