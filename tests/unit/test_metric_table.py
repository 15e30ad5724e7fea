"""The one table of metric definitions (infbench.data.metrics): complete for what the
producers write, no duplicates, and the labels, units and scales every consumer shows."""

import pytest

from infbench.data import metrics as M
from infbench.measure.metrics import cell_metrics
from infbench.schema import RequestRecord

MS = 1_000_000


def rec(t_send=0, tokens=(10, 12, 14), n_in=8, error=None, **kw):
    return RequestRecord(t_send_ns=t_send * MS, t_tokens_ns=[t * MS for t in tokens], n_in=n_in,
                         n_out=len(tokens), error=error, **kw)


def every_key_cell_metrics_writes() -> set[str]:
    """The keys of cell_metrics() over inputs that reach every branch (energy, SLO,
    client queue, release lag, reasoning, multi-turn, a non-streamed cell)."""
    streamed = [rec(t_sched_ns=0, t_first_reasoning_ns=10 * MS, t_first_answer_ns=12 * MS, n_reasoning=1,
                    n_reasoning_source="usage", session=0, turn=1),
                rec(t_send=1, t_sched_ns=0, turn=2, session=0), rec(error="boom", tokens=())]
    keys = set(cell_metrics(streamed, devices_used=2, energy_j=3.0, slo={"ttft_s": 1.0, "tpot_s": 1.0,
                                                                          "e2e_s": 1.0}))
    keys |= set(cell_metrics([rec(streamed=False, tokens=(20,))]))
    keys |= set(cell_metrics([]))
    return keys


def test_every_key_cell_metrics_produces_is_defined():
    keys = every_key_cell_metrics_writes()
    assert {"ttft_s", "goodput_req_s", "energy_j", "ttfat_s", "ttft_s_by_turn", "streamed", "release_lag_s",
            "queue_wait_s", "reasoning_tokens"} <= keys  # the inputs reached every branch
    undefined = keys - set(M.METRICS) - set(M.FIELDS)
    assert not undefined, f"cell_metrics() writes keys the table does not define: {undefined}"


def test_summaries_keep_the_statistics_the_table_names():
    m = cell_metrics([rec(), rec(t_send=1)])
    for key in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
        assert tuple(m[key]) == M.metric(key).stats == M.SUMMARY_STATS
    for key in ("output_tok_s", "duration_s", "request_s"):
        assert M.metric(key).stats == () and isinstance(m[key], float)


def test_server_and_telemetry_producers_write_defined_keys():
    from infbench.measure.server_metrics import SERVERS, from_timings, summarize
    from infbench.measure.telemetry import CHANNELS, summarize_channels
    from infbench.schema import ChannelReading

    fam = next(f for f in SERVERS if f.name == "vllm")
    hist = {"count": 2, "sum": 0.3, "buckets": {"0.1": 1, "0.5": 2, "inf": 2}}
    stored = {"server": "vllm", "series": {fam.running[0]: [[0, 1.0], [10**9, 3.0]],
                                           fam.waiting[0]: [[0, 0.0], [10**9, 2.0]],
                                           fam.kv_usage[0]: [[0, 0.1], [10**9, 0.2]]},
              "deltas": {fam.preemptions[0]: 1.0, fam.prefix_hits[0]: 5.0, fam.prefix_queries[0]: 10.0,
                         fam.spec_accepted[0]: 3.0, fam.spec_drafted[0]: 4.0},
              "histograms": {fam.ttft[0]: hist, fam.tpot[0]: hist, fam.queue_time[0]: hist}}
    out = summarize(stored)
    assert {"server_ttft_s", "server_waiting", "server_prefix_cache_hit_rate",
            "server_spec_acceptance_rate", "server_preemptions"} <= set(out)
    for key, v in out.items():
        assert key in M.METRICS or key in M.FIELDS, key
        if key in M.METRICS and M.metric(key).stats:
            assert set(v) <= set(M.metric(key).stats), key
    r = rec(server={"timings": {"prompt_ms": 5.0, "predicted_per_token_ms": 2.0, "predicted_n": 3}})
    assert set(from_timings([r])) <= set(M.METRICS) | set(M.FIELDS)
    tel = summarize_channels([ChannelReading(t_ns=1, values={k: 1.0 for k in CHANNELS})])
    assert set(tel) <= set(M.FIELDS)
    for ch, v in tel["telemetry"].items():
        assert M.metric(ch).path == ("telemetry", ch) and tuple(v) == M.metric(ch).stats


def test_no_duplicate_keys_labels_or_columns():
    defs = list(M.METRICS.values())
    assert len({d.key for d in defs}) == len(defs)
    assert len({d.label.lower() for d in defs}) == len(defs), "two metrics share a label"
    cols = list(M.columns())
    assert len({c.key for c in cols}) == len(cols), "two columns share a flat-row key"
    assert len({c.header for c in cols}) == len(cols), "two columns share a terminal header"
    assert len({c.label for c in cols}) == len(cols), "two columns share a figure heading"
    assert not set(M.METRICS) & set(M.FIELDS)


def test_every_definition_is_complete():
    for d in M.METRICS.values():
        assert d.key and d.label and d.source, d
        assert d.better in (None, "lower", "higher"), d
        assert d.scale > 0 and d.digits >= 0, d
        # a stored key names its unit: s, ms, W, J, tok_s (the rule of docs/metrics.md)
        if d.unit in ("s", "ms"):
            assert d.key.endswith(("_s", "_ms")) or "_s_" in d.key, d.key
        if d.unit == "tok/s":
            assert "_tok_s" in d.key or d.key.endswith("tok_s"), d.key
    assert M.TTFT.better == "lower" and M.OUTPUT_TOK_S.better == "higher" and M.DURATION.better is None


def test_columns_name_their_unit_and_scale():
    c = M.TTFT.col("p50")
    assert (c.key, c.label, c.header, c.flat_scale) == ("ttft_ms_p50", "TTFT p50 (ms)", "TTFT p50 ms", 1e3)
    m = {"ttft_s": {"p50": 0.05}, "mbu": 0.5, "roofline": {"ttft_floor_s": 0.01, "attainable": {"mbu": 0.25}},
         "telemetry": {"util_pct": {"mean": 40.0}}}
    assert c.flat(m) == pytest.approx(50.0) and c.text(m) == "50.00"
    assert M.E2E.col("p50").key == "e2e_s_p50" and M.E2E.col("p50").flat_scale == 1.0
    # a fraction keeps its stored value in the flat rows and is shown in % in terminals
    assert M.MBU.col().key == "mbu" and M.MBU.col().flat(m) == 0.5 and M.MBU.col().text(m) == "50.0"
    assert M.MBU.col().header == "MBU %" and M.MBU.col().label == "MBU (decode bandwidth utilisation)"
    assert M.TTFT_FLOOR.col().key == "ttft_floor_ms" and M.TTFT_FLOOR.col().flat(m) == pytest.approx(10.0)
    assert M.MBU_ATTAINABLE.col().flat(m) == 0.25 and M.UTIL_PCT.col("mean").flat(m) == 40.0
    assert M.TTFT.col("count").label == "TTFT count" and M.TTFT.col("count").better is None
    assert M.column("ttft_ms_p50") == c and M.column("output_tok_s") == M.OUTPUT_TOK_S.col()
    assert M.OUTPUT_TOK_S.col().text({}) == "-" and M.OUTPUT_TOK_S.col().stored({"output_tok_s": True}) is None


def test_bad_lookups_say_what_exists():
    with pytest.raises(KeyError, match="did you mean ttft_s"):
        M.metric("ttft")
    with pytest.raises(KeyError, match="no metric column"):
        M.column("ttft_s_p50")  # stored in s, shown in ms: the column is ttft_ms_p50
    with pytest.raises(ValueError, match="keeps mean, p50"):
        M.TTFT.col()
    with pytest.raises(ValueError, match="a scalar"):
        M.OUTPUT_TOK_S.col("p50")
