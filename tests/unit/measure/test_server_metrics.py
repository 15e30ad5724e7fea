"""Server metrics: Prometheus text captured from real servers (vLLM 0.32 CPU and llama.cpp
through xllamacpp, tests/fixtures/metrics/SOURCES.md) parsed with prometheus_client, the
server recognised by its names, deltas and histogram percentiles over a cell."""

import math
from pathlib import Path

import pytest

from infbench.measure.server_metrics import (
    SERVERS,
    Scrape,
    ServerMetricsScraper,
    detect_server,
    histogram_delta,
    histogram_quantile,
    metrics_url,
    parse_metrics,
    summarize,
)

FIX = Path(__file__).parents[2] / "fixtures" / "metrics"


def scraped(tag: str) -> dict:
    """A scraper's result from a captured before/after pair (as if scraped at t=0 and t=2 s)."""
    s = ServerMetricsScraper(f"http://{tag}/metrics")
    fams = {f.name: f for f in SERVERS}
    a = parse_metrics((FIX / f"{tag}-before.txt").read_text(), 0)
    b = parse_metrics((FIX / f"{tag}-after.txt").read_text(), 2_000_000_000)
    s.family = detect_server(b)
    s.scrapes = [a, b]
    assert s.family is fams[s.family.name]
    return s.result()


def test_vllm_cpu_metrics():
    r = scraped("vllm-0.32-cpu")
    assert r["server"] == "vllm"
    h = r["histograms"]["vllm:time_to_first_token_seconds"]
    assert h["count"] == 6 and h["sum"] > 0                     # the six requests of the capture
    assert r["deltas"]["vllm:request_success_total"] == 6
    s = summarize(r)
    assert s["server_ttft_s"]["count"] == 6 and 0 < s["server_ttft_s"]["p50"] <= s["server_ttft_s"]["p99"]
    assert s["server_tpot_s"]["count"] == 6
    assert s["server_preemptions"] == 0
    # three of the six prompts repeat earlier ones: vLLM's prefix cache served some of their blocks
    assert 0 < s["server_prefix_cache_hit_rate"] < 1
    assert set(r["series"]) >= {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}


def test_llamacpp_metrics():
    r = scraped("llamacpp-xllamacpp")
    assert r["server"] == "llama.cpp"
    assert r["histograms"] == {}                                 # llama.cpp exports no histograms
    s = summarize(r)
    assert "server_ttft_s" not in s
    assert r["deltas"]["llamacpp:tokens_predicted_total"] == 6 * 8
    # repeated prompts: llama.cpp's slots reuse their cached prompt tokens
    assert 0 < s["server_prefix_cache_hit_rate"] < 1
    assert s["server_running"]["max"] == 0 and "server_kv_cache_usage" not in s


def test_histogram_quantile_interpolates_inside_the_bucket():
    b = {0.1: 2.0, 0.5: 8.0, math.inf: 10.0}
    assert histogram_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * 3 / 6)
    assert histogram_quantile(0.1, b) == pytest.approx(0.05)
    assert histogram_quantile(0.99, b) == 0.5                   # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, {math.inf: 0.0}) is None
    d = histogram_delta({"buckets": {0.1: 1.0, math.inf: 1.0}, "sum": 0.05, "count": 1.0},
                        {"buckets": {0.1: 3.0, math.inf: 4.0}, "sum": 0.5, "count": 4.0})
    assert d == {"buckets": {"0.1": 2.0, "inf": 3.0}, "sum": pytest.approx(0.45), "count": 3.0}


def test_parser_sums_label_sets_averages_kv_usage_and_skips_created():
    text = """# HELP vllm:num_requests_running r
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:kv_cache_usage_perc k
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
# HELP vllm:num_preemptions_total p
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 1.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
"""
    s = parse_metrics(text, averaged=("vllm:kv_cache_usage_perc",))
    assert s.values == {"vllm:num_requests_running": 5.0, "vllm:kv_cache_usage_perc": pytest.approx(0.3),
                        "vllm:num_preemptions_total": 1.0}
    assert s.types["vllm:num_preemptions_total"] == "counter"
    assert detect_server(s).name == "vllm" and detect_server(Scrape(t_ns=0)) is None
    with pytest.raises(ValueError):
        parse_metrics("this is { not prometheus")


def test_queue_trend_and_gauge_rates():
    series = {"sglang:num_queue_reqs": [[0, 0.0], [1_000_000_000, 4.0], [2_000_000_000, 8.0]],
              "sglang:num_running_reqs": [[0, 16.0], [2_000_000_000, 16.0]],
              "sglang:cache_hit_rate": [[0, 0.1], [2_000_000_000, 0.25]],
              "sglang:spec_accept_rate": [[0, 0.0], [2_000_000_000, 0.7]]}
    s = summarize({"server": "sglang", "series": series, "deltas": {}, "histograms": {}})
    assert s["server_waiting"] == {"mean": 4.0, "max": 8.0, "last": 8.0, "slope_per_s": pytest.approx(4.0)}
    assert s["server_prefix_cache_hit_rate"] == 0.25 and s["server_spec_acceptance_rate"] == 0.7
    assert summarize(None) == {} and summarize({"server": None}) == {}


def test_metrics_url_of_engines():
    class E:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    assert metrics_url(E(options={}, base_url="http://h:8000/v1")) == "http://h:8000/metrics"
    assert metrics_url(E(options={}, base_url="http://h:8000/v1", metrics_url="http://h:9/m")) == "http://h:9/m"
    assert metrics_url(E(options={"metrics_url": ""}, base_url="http://h:8000/v1")) is None
    assert metrics_url(E(options={})) is None
    # the base URL's query and fragment belong to its API, not to /metrics
    assert metrics_url(E(options={}, base_url="https://u:pw@h/x/v1/?api_key=k#f")) == "https://u:pw@h/x/metrics"


def test_scraper_stores_and_prints_its_url_without_credentials():
    s = ServerMetricsScraper("http://user:s3cret-pw@127.0.0.1:9/metrics?token=t0ken-value", interval_s=0.1,
                             timeout_s=1)
    s.start()
    s.stop()
    assert s.error.startswith("no Prometheus metrics at http://127.0.0.1:9/metrics: ")
    assert "s3cret-pw" not in s.error and "t0ken-value" not in s.error and "user" not in s.error
    assert s.public_url == "http://127.0.0.1:9/metrics"


def test_unreachable_endpoint_is_a_note_not_an_error():
    s = ServerMetricsScraper("http://127.0.0.1:9/metrics", interval_s=0.1, timeout_s=1)
    s.start()
    s.stop()
    assert "no Prometheus metrics at http://127.0.0.1:9/metrics" in s.error and s.result() is None
