"""The one table of metric definitions (infbench.data.metrics): complete for what the
producers write, no duplicates, and the labels, units and scales every consumer shows."""

import pytest

from infbench.data import metrics as M
from infbench.data.schema import RequestRecord
from infbench.data.stored import StoredCell
from infbench.measure.derive import cell_metrics

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
    from infbench.data.schema import ChannelReading
    from infbench.measure.server_metrics import SERVERS, from_timings, summarize
    from infbench.measure.telemetry import CHANNELS, summarize_channels

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
            assert "tok_s" in d.key.split("_per_")[0] or d.key.endswith("tok_s"), d.key
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


# -- consumers read labels, units, directions and scales from the table ---------------------

def stored(cell_id="c1", ttft=0.05, tput=100.0, server=False, spec_hash=None, repeat=None):
    m = {"ttft_s": {"mean": ttft, "p50": ttft, "p99": 2 * ttft}, "tpot_s": {"mean": 0.01, "p50": 0.01, "p99": 0.02},
         "itl_s": {"p50": 0.01, "p99": 0.03}, "e2e_s": {"mean": 0.7, "p50": 0.7, "p99": 0.9, "count": 4},
         "duration_s": 0.75, "output_tok_s": tput, "total_tok_s": 3 * tput, "output_tok_s_per_device": tput,
         "request_s": 5.0, "avg_power_w": 200.0, "energy_j": 150.0, "tokens_per_j": 1.5, "mbu": 0.4, "mfu": 0.1,
         "n_completed": 4, "usd_per_mtok": 2.0}
    if server:
        m["server_ttft_s"] = {"mean": 0.02, "p50": 0.02, "p99": 0.03, "count": 4}
        m["server_waiting"] = {"mean": 1.0, "max": 3.0, "last": 0.0, "slope_per_s": 0.0}
    spec = {"model": "llama-2-7b", "engine": "vllm", "dtype": "float16", "batch": 4, "input_len": 128,
            "output_len": 64, "tensor_parallel_size": 1, "seed": 0}
    if repeat:
        spec["repeat"] = repeat
    return StoredCell(cell_id=cell_id, spec_hash=spec_hash or f"h-{cell_id}", run_id="r1", status="ok",
                      error=None, spec=spec, metrics=m, engine={}, power_note=None, wall_s=1.0,
                      engine_s=1.0, finished_at=1.0, started_at=0.0,
                      device={"vendor": "nvidia", "kind": "gpu", "model": "NVIDIA A100-SXM4-40GB", "count": 1})


def test_results_table_headers_and_values_come_from_the_table():
    from infbench.report.tables import RESULT_COLUMNS, results_table

    t = results_table([stored(server=True)])
    headers = [c.header for c in t.columns]
    metric_cols = [RESULT_COLUMNS[0], M.SERVER_TTFT.col("p50"), *RESULT_COLUMNS[1:], M.N_COMPLETED.col()]
    assert headers[8:] == [c.header for c in metric_cols]
    assert headers[8:] == ["TTFT p50 ms", "server TTFT p50 ms", "TPOT p50 ms", "ITL p99 ms", "E2E p50 s",
                           "output tok/s", "total tok/s", "tok/J", "MBU %", "MFU %", "n"]
    values = [next(iter(c.cells)) for c in t.columns][8:]
    assert values == ["50.00", "20.00", "10.00", "30.00", "0.700", "100.0", "300.0", "1.50", "40.0", "10.0", "4"]
    assert "server TTFT p50 ms" not in [c.header for c in results_table([stored()]).columns]


def test_compare_columns_come_from_the_table():
    from infbench.report.compare import COMPARED, PLOTTED, compare_rows

    for key, col in COMPARED.items():
        assert M.column(key) == col and col.better in ("lower", "higher")
    assert {c.key for c in PLOTTED} <= set(COMPARED)
    res = compare_rows([stored("a", spec_hash="w")], [stored("b", ttft=0.1, tput=50.0, spec_hash="w")])
    (pair,) = res["pairs"]
    assert set(pair["ratio"]) == set(COMPARED)
    assert pair["ratio"][M.TTFT.col("p50").key] == pytest.approx(2.0)
    assert pair["ratio"][M.OUTPUT_TOK_S.col().key] == pytest.approx(0.5)


def test_compare_cli_headers_come_from_the_table(monkeypatch):
    """`infbench compare` prints each compared metric under the table's header (the ratios
    B / A of the metrics both sides have)."""
    from typer.testing import CliRunner

    from infbench.cli import app
    from infbench.cli import report as report_cmd
    from infbench.report import compare

    a, b = [stored("a", spec_hash="w")], [stored("b", ttft=0.025, tput=200.0, spec_hash="w")]
    monkeypatch.setattr(report_cmd, "load_side", lambda arg, store: (arg, a if arg == "A" else b))
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["compare", "A", "B"])
    assert res.exit_code == 0, res.output
    shown = [c.header for c in compare.COMPARED.values() if c.key != M.MBU.key]  # no roofline stored: no MBU
    assert shown == ["output tok/s", "total tok/s", "TTFT p50 ms", "TPOT p50 ms", "ITL p99 ms", "E2E p50 s",
                     "power W", "tok/J"]
    header = next(line for line in res.output.splitlines() if "output tok/s" in line)
    assert [h for h in shown if h in header] == shown and "MBU" not in header
    assert "0.500" in res.output and "2.000" in res.output  # TTFT halved, throughput doubled


def test_report_labels_come_from_the_table():
    from infbench.report import html
    from infbench.report.data import FLAT_COLUMNS, METRICS, flat_row

    for key, label in METRICS.items():
        assert M.column(key).label == label
    assert METRICS["ttft_ms_p50"] == "TTFT p50 (ms)" and METRICS["output_tok_s"] == "Output throughput (tok/s)"
    for c in (*html.Y_AXES, *html.TRADE_OFF):
        assert c.key in METRICS
    f = flat_row(stored(server=True))
    for c in FLAT_COLUMNS:
        assert c.key in f
    assert f["ttft_ms_p50"] == pytest.approx(50.0) and f["server_waiting_max"] == 3.0 and f["mbu"] is None
    page = html.render_html([f])
    assert "SLO TTFT p99 (ms)" in page and "Output throughput (tok/s)" in page


def test_figure_code_reads_only_flat_columns():
    """Every flat-row field the static figures and the page's script read is one flat_row() writes."""
    import ast
    import re
    from pathlib import Path

    import infbench.report as pkg
    from infbench.report.data import flat_row

    fields = set(flat_row(stored(server=True))) | {"perplexity", "perplexity_stderr", "ppl_increase", "beyond_gate"}
    root = Path(pkg.__file__).parent
    tree = ast.parse((root / "static.py").read_text())
    read = {n.slice.value for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, str) and isinstance(n.value, ast.Name) and n.value.id == "r"}
    js = (root / "dashboard.js").read_text()
    read |= set(re.findall(r"\br\.([a-z_0-9]+)", js)) | set(re.findall(r"\bmets\.([a-z_0-9]+)", js))
    read |= set(re.findall(r"'([a-z]+_(?:ms|s)_p\d\d|[a-z]+_floor_ms|[a-z]+_ms_mean)'", js))
    assert {"ttft_ms_p50", "tpot_floor_ms", "output_tok_s_per_device", "avg_power_w"} <= read
    assert read - fields - {"label", "status", "device", "engine", "model", "dtype", "input_len", "output_len"} == set()


def test_repeats_labels_come_from_the_table(tmp_path):
    from infbench.analysis.repeats import HEADLINE, SHOWN, repeat_groups
    from infbench.report.tables import repeats_table

    for key, col in HEADLINE.items():
        assert M.column(key) == col
    assert set(SHOWN) <= set(HEADLINE.values())
    from infbench.analysis.repeats import base_cell_id

    rows = [stored("c1"), stored("c2", tput=110.0, repeat=2)]
    rows[0] = rows[0].replace(cell_id=base_cell_id(rows[1]))  # the first repeat keeps the unrepeated id
    groups = repeat_groups(rows)
    (g,) = groups
    assert g["metrics"]["output_tok_s"]["label"] == "output tok/s" and g["metrics"]["request_s"]["label"] == "req/s"
    assert g["metrics"]["ttft_ms_p50"]["values"] == [pytest.approx(50.0), pytest.approx(50.0)]
    t = repeats_table(groups)
    assert [c.header for c in t.columns] == ["cell", "n", *[c.header for c in SHOWN], "CV output tok/s"]


def test_slo_selection_limits_are_table_metrics():
    from infbench.report.select import LIMIT_METRICS, PERCENTILES, RANKED, best

    assert all(M.metric(k).better == "lower" and M.metric(k).unit == "s" for k in LIMIT_METRICS)
    assert set(PERCENTILES) < set(M.SUMMARY_STATS) and RANKED.better == "higher"
    got = best([stored("a", tput=10.0), stored("b", tput=20.0)], {M.E2E.key: 1.0})
    assert [r["cell_id"] for r in got] == ["b"]


def test_every_key_a_measured_cell_stores_is_defined(cpu, tmp_path):
    """A sweep through the engine session with infbench.testing's fake engine (power,
    telemetry, cost, roofline and physics included): every key of each stored cell's
    metrics is a metric of the table or a documented field."""
    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.run import RunOptions
    from infbench.data.schema import Sweep
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.plan import plan
    from infbench.store import Store

    fpm = testing.plugin_manager()
    p = plan(Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1, 2], input_len=[16],
                   output_len=[4]), cpu, fpm)
    store = Store(tmp_path / "r.db")
    try:
        s = InProcessExecutor(fpm, {"test": True}).run(p, store, RunOptions(price_per_hour=2.0, slo={"ttft_s": 1.0}),
                                                       ev.ignore)
        assert len(s.ok) == 2
        for r in store.results():
            m = r["metrics"]
            assert M.USD_PER_MTOK.key in m and M.GOODPUT.key in m
            assert set(m) - set(M.METRICS) - set(M.FIELDS) == set(), r["cell_id"]
    finally:
        store.close()


def test_one_value_of_a_metric_is_shown_as_its_columns_are():
    assert M.TTFT.header == "TTFT ms" and M.OUTPUT_TOK_S.header == "output tok/s" and M.MBU.header == "MBU %"
    assert M.TTFT.format(0.0123) == "12.30" and M.TPOT.format(0.0123, 3) == "12.300" and M.E2E.format(None) == "-"
    assert M.OUTPUT_TOK_S.format(1234.56) == M.OUTPUT_TOK_S.col().text({"output_tok_s": 1234.56}) == "1,234.6"
