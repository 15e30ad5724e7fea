"""The server's own view of a cell: its Prometheus ``/metrics``, scraped while the cell runs.

A :class:`ServerMetricsScraper` reads the endpoint once when the timed part starts, every
``interval_s`` on a daemon thread, and once when it ends. Each scrape is parsed with
``prometheus_client``'s text parser (``text_string_to_metric_families``); nothing is
parsed by hand. Per cell it keeps

* the **time series** of the gauges and counters that describe load (running and
  waiting requests, KV-cache usage, preemptions, prefix-cache and speculative-decoding
  counters), one value per scrape, summed over label sets (KV-cache usage: averaged);
* the **deltas** over the cell of every counter (last scrape - first), and of every
  histogram (per-bucket counts, ``_sum`` and ``_count``), so the server's own TTFT and
  TPOT distributions of exactly this cell's requests can be read back.

Every name is the one the server exports (``vllm:num_requests_waiting``,
``llamacpp:prompt_tokens_total``...). :data:`SERVERS` says, per server, which of its
metrics answer which question; docs/metrics.md lists them with their sources:
vLLM ``vllm/v1/metrics/loggers.py`` (0.32), SGLang ``python/sglang/srt/metrics/
collector.py``, llama.cpp's server (``--metrics``; what xllamacpp's build exports, read
from a live server) and TGI's ``docs/source/reference/metrics.md``.

The first scrape goes out when the engine's ``run`` starts, so a serving cell's deltas
include its warm-up requests (``--warmup-requests``, default 1); the histogram counts
show it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from infbench.data import metrics as M
from infbench.data.engine_options import as_dict
from infbench.data.secrets import clean_text, redact_url, url_secrets
from infbench.measure.derive import NS
from infbench.measure.derive import summarize as stats

#: Labels that distinguish samples of one series rather than separate series.
_BUCKET = "le"


@dataclass(frozen=True)
class ServerFamily:
    """Which metrics of one server answer which question (names as the server exports them).

    Each tuple lists alternatives, the first one present wins (names changed across
    releases). Gauges are read per scrape; counters (``_total`` sample names) as deltas
    over the cell; histograms by family name.

    Attributes:
        name: ``vllm``, ``sglang``, ``llama.cpp`` or ``tgi``.
        prefix: the prefix every metric of the server carries (detects the server).
        running, waiting: gauges of requests being processed / queued.
        kv_usage: gauge of the KV-cache fill, a fraction 0..1.
        preemptions: counters of preempted (vLLM) or retracted (SGLang) requests; a gauge
            name here is read as its last value minus its first.
        prefix_hits, prefix_queries: counters whose delta ratio is the prefix-cache hit
            rate over the cell (tokens served from the cache / prompt tokens looked up).
        prefix_hit_rate: a gauge of the hit rate, used when the server has no counters.
        prefix_misses_are_queries: llama.cpp counts uncached prompt tokens apart from the
            cached ones, so queries = hits + misses.
        spec_accepted, spec_drafted: counters whose delta ratio is the speculative-decoding
            acceptance rate.
        spec_rate: a gauge of the acceptance rate, when there are no counters.
        ttft, tpot: histograms (seconds) of the server's time to first token and time per
            output token.
        queue_time: histogram of the time a request waited in the server's queue.
    """

    name: str
    prefix: str
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    prefix_hits: tuple[str, ...] = ()
    prefix_queries: tuple[str, ...] = ()
    prefix_hit_rate: tuple[str, ...] = ()
    prefix_misses_are_queries: bool = False
    spec_accepted: tuple[str, ...] = ()
    spec_drafted: tuple[str, ...] = ()
    spec_rate: tuple[str, ...] = ()
    ttft: tuple[str, ...] = ()
    tpot: tuple[str, ...] = ()
    queue_time: tuple[str, ...] = ()

    def series_names(self) -> tuple[str, ...]:
        """The names kept as time series (one value per scrape)."""
        return (self.running + self.waiting + self.kv_usage + self.preemptions + self.prefix_hits
                + self.prefix_queries + self.prefix_hit_rate + self.spec_accepted + self.spec_drafted
                + self.spec_rate)


#: The servers infbench reads, by the prefix of their metric names.
SERVERS: tuple[ServerFamily, ...] = (
    # vLLM V1 (vllm/v1/metrics/loggers.py; vllm/v1/spec_decode/metrics.py).
    ServerFamily(
        name="vllm", prefix="vllm:", running=("vllm:num_requests_running",), waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        preemptions=("vllm:num_preemptions_total",),
        prefix_hits=("vllm:prefix_cache_hits_total",), prefix_queries=("vllm:prefix_cache_queries_total",),
        spec_accepted=("vllm:spec_decode_num_accepted_tokens_total",),
        spec_drafted=("vllm:spec_decode_num_draft_tokens_total",),
        ttft=("vllm:time_to_first_token_seconds",),
        tpot=("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
        queue_time=("vllm:request_queue_time_seconds",)),
    # SGLang (python/sglang/srt/metrics/collector.py, docs "Production Metrics").
    ServerFamily(
        name="sglang", prefix="sglang:", running=("sglang:num_running_reqs",), waiting=("sglang:num_queue_reqs",),
        kv_usage=("sglang:token_usage",), preemptions=("sglang:num_retracted_reqs",),
        prefix_hits=("sglang:cached_tokens_total",), prefix_queries=("sglang:prompt_tokens_total",),
        prefix_hit_rate=("sglang:cache_hit_rate",), spec_rate=("sglang:spec_accept_rate",),
        ttft=("sglang:time_to_first_token_seconds",),
        tpot=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        queue_time=("sglang:queue_time_seconds",)),
    # llama.cpp's server with metrics on (tools/server; xllamacpp CommonParams.endpoint_metrics).
    ServerFamily(
        name="llama.cpp", prefix="llamacpp:", running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",), kv_usage=("llamacpp:kv_cache_usage_ratio",),
        prefix_hits=("llamacpp:prompt_tokens_cached_total",), prefix_queries=("llamacpp:prompt_tokens_total",),
        prefix_misses_are_queries=True,
        spec_accepted=("llamacpp:spec_decode_num_accepted_tokens_total",),
        spec_drafted=("llamacpp:spec_decode_num_draft_tokens_total",)),
    # Text Generation Inference (docs/source/reference/metrics.md): no TTFT histogram, no
    # KV-cache or prefix-cache metric.
    ServerFamily(
        name="tgi", prefix="tgi_", running=("tgi_batch_current_size",), waiting=("tgi_queue_size",),
        tpot=("tgi_request_mean_time_per_token_duration",), queue_time=("tgi_request_queue_duration",)),
)


@dataclass
class Scrape:
    """One parsed ``/metrics`` answer.

    Attributes:
        t_ns: ``perf_counter_ns`` halfway through the request.
        values: sample name -> value summed over label sets (``_created`` samples and
            histogram parts left out); the KV-cache gauges are averaged instead.
        histograms: family name -> ``{"buckets": {le: cumulative count}, "sum", "count"}``,
            summed over label sets.
        types: family or sample name -> Prometheus type (``counter``, ``gauge``...).
    """

    t_ns: int
    values: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)


def parse_metrics(text: str, t_ns: int = 0, averaged: tuple[str, ...] = ()) -> Scrape:
    """Parse Prometheus exposition text with ``prometheus_client.parser``.

    Args:
        text: the body of ``GET /metrics``.
        t_ns: when it was read.
        averaged: sample names whose label sets are averaged rather than summed
            (fractions such as KV-cache usage, one per engine of a data-parallel server).

    Returns:
        A :class:`Scrape`.

    Raises:
        ValueError: the text is not Prometheus exposition format (the parser's error).
    """
    from prometheus_client.parser import text_string_to_metric_families

    s = Scrape(t_ns=t_ns)
    counts: dict[str, int] = defaultdict(int)
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram", "gaugehistogram"):
            h = s.histograms.setdefault(fam.name, {"buckets": defaultdict(float), "sum": 0.0, "count": 0.0})
            for smp in fam.samples:
                if smp.name.endswith("_bucket"):
                    h["buckets"][_le(smp.labels.get(_BUCKET))] += smp.value
                elif smp.name.endswith(("_sum", "_gsum")):
                    h["sum"] += smp.value
                elif smp.name.endswith(("_count", "_gcount")):
                    h["count"] += smp.value
            s.types[fam.name] = fam.type
            continue
        for smp in fam.samples:
            if smp.name.endswith("_created"):
                continue
            s.values[smp.name] = s.values.get(smp.name, 0.0) + smp.value
            counts[smp.name] += 1
            s.types[smp.name] = fam.type
    for name in averaged:
        if counts.get(name, 0) > 1:
            s.values[name] /= counts[name]
    for h in s.histograms.values():
        h["buckets"] = dict(sorted(h["buckets"].items()))
    return s


def _le(v: str | None) -> float:
    return math.inf if v in (None, "+Inf", "Inf", "inf") else float(v)


def detect_server(scrape: Scrape) -> ServerFamily | None:
    """The :data:`SERVERS` entry whose prefix most names in ``scrape`` carry, or None."""
    names = list(scrape.values) + list(scrape.histograms)
    best, n_best = None, 0
    for fam in SERVERS:
        n = sum(1 for x in names if x.startswith(fam.prefix))
        if n > n_best:
            best, n_best = fam, n
    return best


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q``-quantile of a cumulative histogram, by linear interpolation inside the
    bucket that holds it (Prometheus ``histogram_quantile``; the lowest bucket starts at
    0, a quantile in the ``+Inf`` bucket returns the highest finite bound).

    Args:
        q: 0..1.
        buckets: upper bound -> cumulative count (``+Inf`` included).

    Returns:
        The quantile in the histogram's unit, or None when it holds no observation.
    """
    items = sorted(buckets.items())
    if not items or items[-1][1] <= 0:
        return None
    total = items[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in items:
        if c >= rank and c > prev_c:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = (le if not math.isinf(le) else prev_le), c
    return prev_le


def histogram_summary(h: dict[str, Any]) -> dict[str, float | int | None]:
    """``{mean, p50, p90, p99, count}`` of a histogram delta (``{"buckets", "sum", "count"}``),
    in the histogram's unit; the percentiles are :func:`histogram_quantile` estimates,
    as precise as the server's buckets."""
    n = h.get("count") or 0
    b = {float(k): v for k, v in h.get("buckets", {}).items()}
    if n <= 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "count": 0}
    return {"mean": h["sum"] / n, "p50": histogram_quantile(0.5, b), "p90": histogram_quantile(0.9, b),
            "p99": histogram_quantile(0.99, b), "count": int(round(n))}


def histogram_delta(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    """``b - a`` bucket by bucket (``a`` None: ``b`` itself); buckets keyed by bound as a
    string (``"0.1"``, ``"inf"``) so the result is JSON."""
    a = a or {"buckets": {}, "sum": 0.0, "count": 0.0}
    return {"buckets": {_key(le): c - a["buckets"].get(le, 0.0) for le, c in b["buckets"].items()},
            "sum": b["sum"] - a["sum"], "count": b["count"] - a["count"]}


def _key(le: float) -> str:
    return "inf" if math.isinf(le) else repr(float(le))


def _first(names: tuple[str, ...], have: dict[str, Any]) -> str | None:
    return next((n for n in names if n in have), None)


class ServerMetricsScraper:
    """Scrapes a Prometheus endpoint on a daemon thread between :meth:`start` and :meth:`stop`.

    Args:
        url: the ``/metrics`` URL (``http://127.0.0.1:8000/metrics``); stored and printed
            without userinfo or query (:func:`infbench.data.secrets.redact_url`).
        interval_s: time between scrapes in s (> 0).
        timeout_s: limit of one request.

    After :meth:`stop`, :meth:`result` gives the cell's series and deltas and
    :meth:`summary` its headline figures. If the first scrape fails (no endpoint, not
    Prometheus text), :attr:`error` says why and nothing else is read.
    """

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float = 5.0):
        if interval_s <= 0:
            raise ValueError(f"scrape interval must be > 0 s, got {interval_s}")

        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        self.public_url = redact_url(url)  # what is stored and printed: no userinfo, no query
        self.scrapes: list[Scrape] = []
        self.family: ServerFamily | None = None
        self.error: str | None = None
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    def _secrets(self) -> list[str]:
        """The URL's credentials and query values, scrubbed from anything stored."""
        return url_secrets(self.url)

    def _scrape(self) -> Scrape:
        t0 = time.perf_counter_ns()
        r = self._client.get(self.url, timeout=self.timeout_s)
        t1 = time.perf_counter_ns()
        r.raise_for_status()
        averaged = self.family.kv_usage if self.family else tuple(n for f in SERVERS for n in f.kv_usage)
        return parse_metrics(r.text, (t0 + t1) // 2, averaged)

    def _once(self) -> None:
        try:
            s = self._scrape()
        except Exception:  # noqa: BLE001 - a missed scrape leaves a gap, the cell goes on
            self.failures += 1
            return
        with self._lock:
            self.scrapes.append(s)

    def start(self) -> None:
        """Take the first scrape (it decides which server this is) and start the thread."""
        import httpx

        self.scrapes, self.failures, self.error = [], 0, None
        self._stop.clear()
        self._client = httpx.Client()
        try:
            first = self._scrape()
        except Exception as exc:  # noqa: BLE001 - no metrics is a note, not a failure
            self.error = clean_text(f"no Prometheus metrics at {self.public_url}: {type(exc).__name__}: {exc}",
                                    self._secrets())
            self._client.close()
            return
        self.family = detect_server(first)
        if self.family is None:
            self.error = (f"{self.public_url} answered, but with no metric of a known server (vLLM, SGLang, "
                          "llama.cpp, TGI)")
        self.scrapes.append(first)
        self._thread = threading.Thread(target=self._loop, name="infbench-scrape", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._once()

    def stop(self) -> None:
        """Stop the thread and take the last scrape."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1)
            self._thread = None
            self._once()
        if self._client is not None:
            self._client.close()
            self._client = None

    def result(self) -> dict[str, Any] | None:
        """What the store keeps (``CellResult.server_metrics``), or None if nothing was read.

        Returns:
            ``{"server", "url", "interval_s", "scrapes", "failures", "t0_ns", "t1_ns",
            "series": {name: [[t_ns, value], ...]}, "deltas": {counter sample name: last
            - first}, "histograms": {family: {"buckets": {le: count}, "sum", "count"}}}``,
            names as the server exports them.
        """
        if not self.scrapes:
            return None
        first, last = self.scrapes[0], self.scrapes[-1]
        fam = self.family
        keep = fam.series_names() if fam else ()
        series = {n: [[s.t_ns, s.values[n]] for s in self.scrapes if n in s.values] for n in keep}
        deltas = {n: last.values[n] - first.values.get(n, 0.0) for n, t in last.types.items()
                  if t == "counter" and n in last.values}
        hists = {n: histogram_delta(first.histograms.get(n), h) for n, h in last.histograms.items()}
        return {"server": fam.name if fam else None, "url": self.public_url, "interval_s": self.interval_s,
                "scrapes": len(self.scrapes), "failures": self.failures, "t0_ns": first.t_ns, "t1_ns": last.t_ns,
                "series": {n: v for n, v in series.items() if v}, "deltas": deltas, "histograms": hists}


def summarize(result: dict[str, Any] | None) -> dict[str, Any]:
    """Headline figures of a scraped cell, for ``CellResult.metrics`` (``server_*`` keys).

    Args:
        result: :meth:`ServerMetricsScraper.result` (or the stored dict).

    Returns:
        Any of ``server_name``; ``server_ttft_s`` and ``server_tpot_s``
        (``{mean, p50, p90, p99, count}`` from the server's histograms, s; then
        ``server_latency_source`` is ``histogram``);
        ``server_queue_time_s`` (same form); ``server_running`` and ``server_waiting``
        (``{mean, max}`` requests over the scrapes, ``server_waiting`` also ``last`` and
        ``slope_per_s``, the least-squares trend of the queue in requests per s);
        ``server_kv_cache_usage`` (``{mean, max}``, fraction 0..1);
        ``server_preemptions`` (count over the cell); ``server_prefix_cache_hit_rate``
        and ``server_spec_acceptance_rate`` (fractions over the cell). A figure the
        server does not export is left out.
    """
    if not result or not result.get("server"):
        return {}
    fam = next(f for f in SERVERS if f.name == result["server"])
    series, deltas, hists = result["series"], result["deltas"], result["histograms"]
    out: dict[str, Any] = {"server_name": fam.name}
    for key, names in ((M.SERVER_TTFT.key, fam.ttft), (M.SERVER_TPOT.key, fam.tpot),
                       (M.SERVER_QUEUE_TIME.key, fam.queue_time)):
        n = _first(names, hists)
        if n is not None and hists[n]["count"] > 0:
            out[key] = histogram_summary({**hists[n], "buckets": {float(k): v for k, v in hists[n]["buckets"].items()}})
            out["server_latency_source"] = "histogram"
    for key, names in ((M.SERVER_RUNNING.key, fam.running), (M.SERVER_WAITING.key, fam.waiting),
                       (M.SERVER_KV_CACHE_USAGE.key, fam.kv_usage)):
        n = _first(names, series)
        if n is None:
            continue
        pts = series[n]
        vals = [v for _, v in pts]
        d = {"mean": sum(vals) / len(vals), "max": max(vals)}
        if key == M.SERVER_WAITING.key:
            d["last"] = vals[-1]
            d["slope_per_s"] = _slope(pts)
        out[key] = d
    n = _first(fam.preemptions, deltas) or _first(fam.preemptions, series)
    if n is not None:
        out[M.SERVER_PREEMPTIONS.key] = deltas[n] if n in deltas else series[n][-1][1] - series[n][0][1]
    hits, queries = _first(fam.prefix_hits, deltas), _first(fam.prefix_queries, deltas)
    if hits is not None and queries is not None:
        q = deltas[queries] + (deltas[hits] if fam.prefix_misses_are_queries else 0.0)
        out[M.SERVER_PREFIX_CACHE_HIT_RATE.key] = deltas[hits] / q if q > 0 else None
    elif (n := _first(fam.prefix_hit_rate, series)) is not None:
        out[M.SERVER_PREFIX_CACHE_HIT_RATE.key] = series[n][-1][1]
    acc, drafted = _first(fam.spec_accepted, deltas), _first(fam.spec_drafted, deltas)
    if acc is not None and drafted is not None and deltas[drafted] > 0:
        out[M.SERVER_SPEC_ACCEPTANCE_RATE.key] = deltas[acc] / deltas[drafted]
    elif (n := _first(fam.spec_rate, series)) is not None and series[n][-1][1] > 0:
        out[M.SERVER_SPEC_ACCEPTANCE_RATE.key] = series[n][-1][1]
    return out


def from_timings(records: list[Any]) -> dict[str, Any]:
    """The server's TTFT and TPOT from its per-request ``timings`` (llama.cpp's server sends
    ``prompt_ms`` and ``predicted_per_token_ms`` with each response), for servers whose
    ``/metrics`` has no latency histograms.

    Args:
        records: the cell's :class:`~infbench.data.schema.RequestRecord` objects.

    Returns:
        ``{"server_ttft_s": summary, "server_tpot_s": summary, "server_latency_source":
        "timings"}`` (:func:`infbench.measure.derive.summarize`, s) over the completed
        requests that carry timings; ``{}`` when none does. ``prompt_ms`` is the prompt's
        processing time in the slot, without the time the request waited for a slot.
    """
    ts = [r.server["timings"] for r in records
          if r.error is None and r.server and isinstance(r.server.get("timings"), dict)]
    ttft = [t["prompt_ms"] / 1e3 for t in ts if isinstance(t.get("prompt_ms"), (int, float))]
    tpot = [t["predicted_per_token_ms"] / 1e3 for t in ts
            if isinstance(t.get("predicted_per_token_ms"), (int, float)) and (t.get("predicted_n") or 0) > 1]
    if not ttft:
        return {}
    out: dict[str, Any] = {M.SERVER_TTFT.key: stats(ttft), "server_latency_source": "timings"}
    if tpot:
        out[M.SERVER_TPOT.key] = stats(tpot)
    return out


def _slope(pts: list[list[float]]) -> float | None:
    """Least-squares slope of ``[[t_ns, v], ...]`` in units per s (None for < 2 points)."""
    if len(pts) < 2:
        return None
    ts = [t * NS for t, _ in pts]
    vs = [v for _, v in pts]
    mt, mv = sum(ts) / len(ts), sum(vs) / len(vs)
    den = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / den if den > 0 else None


def metrics_url(engine: Any) -> str | None:
    """Where ``engine``'s server exports Prometheus metrics, or None for in-process engines.

    In order: the engine option ``metrics_url`` (``--engine-arg metrics_url=URL``; an
    empty value turns scraping off), the engine's ``metrics_url`` attribute (set by the
    servers infbench starts), else ``/metrics`` beside an OpenAI ``base_url``
    (``http://host:8000/v1`` -> ``http://host:8000/metrics``, the base URL's query and
    fragment dropped), the path vLLM, SGLang, llama.cpp and TGI serve it on. The URL may
    carry userinfo (to connect); the scraper stores and prints it redacted.
    """
    opts = as_dict(getattr(engine, "options", None))  # the options given (a typed model's, or a dict)
    if "metrics_url" in opts:
        return opts["metrics_url"] or None
    url = getattr(engine, "metrics_url", None)
    if url:
        return url
    base = getattr(engine, "base_url", None)
    if not base:
        return None

    u = urlsplit(base)  # the query and fragment of a base URL belong to its API, not to /metrics
    path = u.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return urlunsplit((u.scheme, u.netloc, path + "/metrics", "", ""))
