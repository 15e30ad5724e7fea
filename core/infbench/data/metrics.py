"""The one table of metric definitions: every metric infbench stores or shows, once.

A :class:`MetricDef` says what a metric is called where it is stored (``key``, with its unit
in the name: ``ttft_s``), how people read it (``label``, one spelling; ``short``, the same
label abbreviated for terminal columns), its ``unit``, which direction is better, how it
is shown (``scale`` x the stored value, in ``shown_unit``: TTFT stored in s is shown in ms),
the statistics kept (``stats``: a latency summary keeps mean, p50, p90, p99, max and count;
a scalar keeps none) and where its formula comes from (``source``: a docs/metrics.md row,
a paper, an engine's file). :data:`METRICS` holds them by key.

A :class:`Column` is one metric with one statistic, as a table or a figure shows it
(``TTFT.col("p50")``): its key in the report's flat rows (``ttft_ms_p50``: the unit of the
value in its name), its heading for figures (``TTFT p50 (ms)``) and its header for terminal
tables (``TTFT p50 ms``). Producers (:mod:`infbench.measure`) write the keys, consumers
(``results``, ``report``, ``compare``, ``export``, repeats, SLO selection) read labels, units,
directions and scales from here, so a metric is named in one place. docs/metrics.md gives
the formulas.

:data:`FIELDS` lists what else a cell's ``metrics`` dict may hold (flags, notes, nested
records) that is not a metric.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

#: Which direction of a metric is better (None: neither, e.g. a duration or a count).
Better = Literal["lower", "higher"]

#: Statistics of a per-request summary (:func:`infbench.measure.derive.summarize`).
SUMMARY_STATS = ("mean", "p50", "p90", "p99", "max", "count")
#: Statistics of a server's latency histogram (:mod:`infbench.measure.server_metrics`).
HISTOGRAM_STATS = ("mean", "p50", "p90", "p99", "count")
#: Statistics of a server gauge sampled during a cell (requests running, KV-cache usage).
GAUGE_STATS = ("mean", "max")
#: Statistics of a telemetry channel over a cell (:mod:`infbench.measure.telemetry`).
TELEMETRY_STATS = ("mean", "min", "max", "count")

#: How a unit appears at the end of a key (``ttft_s``, ``client_lag_p99_ms``): a column
#: shown in another unit is renamed (``ttft_s`` shown in ms: ``ttft_ms``).
_KEY_SUFFIX = {"s": "_s", "ms": "_ms"}


@dataclass(frozen=True)
class MetricDef:
    """One metric's definition.

    Attributes:
        key: the name as stored in a cell's ``metrics`` (``ttft_s``); its unit is in it.
        label: how people read it, one spelling (``TTFT``, ``output throughput``).
        unit: the stored value's unit (``s``, ``tok/s``, ``W``, ``J``, ``tok/J``, ``req/s``,
            ``USD/Mtok``, ``MHz``, ``%``; ``""`` for a count or a fraction 0..1).
        better: ``"lower"``, ``"higher"`` or None (neither).
        source: where the formula comes from (docs/metrics.md section, paper, engine file).
        stats: the statistics kept (:data:`SUMMARY_STATS`...); ``()`` for a scalar.
        short: the label abbreviated for terminal columns (None: the label); ``""`` when
            the unit says it all (``tok/J``).
        shown_unit: the unit it is shown in (None: ``unit``).
        scale: shown value = stored value x scale (1e3 for s shown in ms, 100 for a fraction
            shown in %).
        digits: decimals shown in terminal tables (of the shown value).
        path: where it sits in a cell's ``metrics`` (None: at ``key``); e.g. the roofline's
            floors under ``("roofline", "ttft_floor_s")``, telemetry under ``("telemetry", ch)``.
        keyed_by: the stored value is a dict of such values keyed by this (``turn``), or None.
        description: one line on what it measures.
    """

    key: str
    label: str
    unit: str
    better: Better | None
    source: str
    stats: tuple[str, ...] = ()
    short: str | None = None
    shown_unit: str | None = None
    scale: float = 1.0
    digits: int = 2
    path: tuple[str, ...] | None = None
    keyed_by: str | None = None
    description: str = ""

    @property
    def shown(self) -> str:
        """The unit the metric is shown in (``ms`` for TTFT)."""
        return self.unit if self.shown_unit is None else self.shown_unit

    @property
    def header(self) -> str:
        """A terminal column of one value of this metric (a prediction, a limit): the short
        label and the shown unit (``TTFT ms``, ``output tok/s``); :attr:`Column.header` adds
        the statistic."""
        return " ".join(p for p in (self.label if self.short is None else self.short, self.shown) if p)

    def format(self, value: float | None, digits: int | None = None) -> str:
        """``value`` (stored unit) as shown in a terminal table: x :attr:`scale`, ``digits``
        decimals (None: :attr:`digits`), thousands separated; ``-`` for None."""
        if value is None:
            return "-"
        return f"{value * self.scale:,.{self.digits if digits is None else digits}f}"

    @property
    def higher_is_better(self) -> bool | None:
        """True if higher is better, False if lower is, None if neither."""
        return None if self.better is None else self.better == "higher"

    def col(self, stat: str | None = None) -> Column:
        """This metric with one statistic (``"p50"``; None for a scalar) as a table column.

        Raises:
            ValueError: ``stat`` is not one the metric keeps.
        """
        return Column(self, stat)

    def value(self, metrics: Mapping[str, Any] | None, stat: str | None = None) -> Any:
        """The stored value in a cell's ``metrics`` (the statistic ``stat`` of a summary),
        in the stored unit; None where it is missing."""
        v: Any = metrics or {}
        for part in self.path or (self.key,):
            v = v.get(part) if isinstance(v, Mapping) else None
        if stat is not None:
            v = v.get(stat) if isinstance(v, Mapping) else None
        return v


@dataclass(frozen=True)
class Column:
    """One metric with one statistic, as the report's flat rows, figures and terminal
    tables show it.

    Attributes:
        metric: the :class:`MetricDef`.
        stat: the statistic (``"p50"``), or None for a scalar metric.
    """

    metric: MetricDef
    stat: str | None = None

    def __post_init__(self) -> None:
        m = self.metric
        if (self.stat is None) != (not m.stats) or (self.stat is not None and self.stat not in m.stats):
            keeps = ", ".join(m.stats) or "no statistics (a scalar)"
            raise ValueError(f"metric {m.key!r} keeps {keeps}; asked for {self.stat!r}")

    @property
    def _renamed(self) -> bool:
        """True when the flat rows hold the shown value under a key naming the shown unit."""
        m = self.metric
        old, new = _KEY_SUFFIX.get(m.unit), _KEY_SUFFIX.get(m.shown)
        return bool(old and new and old != new and m.key.endswith(old))

    @property
    def key(self) -> str:
        """The key in the report's flat rows: the stored key, renamed to the shown unit when
        that unit ends the key (``ttft_s`` shown in ms: ``ttft_ms``), then ``_<stat>``
        (``ttft_ms_p50``, ``e2e_s_p50``, ``util_pct_mean``, ``output_tok_s``)."""
        m = self.metric
        base = m.key[: -len(_KEY_SUFFIX[m.unit])] + _KEY_SUFFIX[m.shown] if self._renamed else m.key
        return f"{base}_{self.stat}" if self.stat else base

    @property
    def flat_scale(self) -> float:
        """Flat-row value = stored value x this (the shown scale where the key was renamed,
        else 1: a key without a unit in its name keeps the stored value, e.g. MBU's fraction;
        a count is never scaled)."""
        return self.metric.scale if self._renamed and self.stat != "count" else 1.0

    @property
    def flat_unit(self) -> str:
        """The unit of the flat-row value (``""`` for a count)."""
        if self.stat == "count":
            return ""
        return self.metric.shown if self._renamed else self.metric.unit

    @property
    def shown_unit(self) -> str:
        """The unit of the shown value (``""`` for a count)."""
        return "" if self.stat == "count" else self.metric.shown

    @property
    def shown_scale(self) -> float:
        """Shown value = stored value x this (1 for a count)."""
        return 1.0 if self.stat == "count" else self.metric.scale

    @property
    def phrase(self) -> str:
        """The heading inside a sentence: ``TTFT p50 (ms)``, ``output throughput (tok/s)``:
        the label, the statistic and the flat-row value's unit in brackets; a scalar without a
        unit (a fraction) has its description there instead (``MBU (decode bandwidth
        utilisation)``)."""
        m = self.metric
        text = m.label + (f" {self.stat}" if self.stat else "")
        note = self.flat_unit or (m.description if self.stat is None else "")
        return text + (f" ({note})" if note else "")

    @property
    def label(self) -> str:
        """The heading of a figure's axis or a selector: :attr:`phrase` with a capital first
        letter (``Output throughput (tok/s)``)."""
        return self.phrase[:1].upper() + self.phrase[1:]

    @property
    def header(self) -> str:
        """The header of a terminal column: the short label, the statistic and the shown unit
        (``TTFT p50 ms``, ``output tok/s``, ``tok/J``, ``MBU %``)."""
        m = self.metric
        short = m.label if m.short is None else m.short
        return " ".join(p for p in (short, self.stat or "", self.shown_unit) if p)

    @property
    def better(self) -> Better | None:
        """The metric's better direction (a count has none)."""
        return None if self.stat == "count" else self.metric.better

    def stored(self, metrics: Mapping[str, Any] | None) -> float | None:
        """The value in a cell's stored ``metrics`` (stored unit), None where missing."""
        v = self.metric.value(metrics, self.stat)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def flat(self, metrics: Mapping[str, Any] | None) -> float | None:
        """The flat-row value (:attr:`flat_unit`) from a cell's stored ``metrics``."""
        v = self.stored(metrics)
        return None if v is None else v * self.flat_scale

    def shown(self, metrics: Mapping[str, Any] | None) -> float | None:
        """The value shown in terminal tables (:attr:`MetricDef.shown`) from stored ``metrics``."""
        v = self.stored(metrics)
        return None if v is None else v * self.shown_scale

    def text(self, metrics: Mapping[str, Any] | None) -> str:
        """The shown value formatted for a terminal table (``1,234.56``; ``-`` when missing)."""
        v = self.shown(metrics)
        return "-" if v is None else f"{v:,.{0 if self.stat == 'count' else self.metric.digits}f}"


_MD = "docs/metrics.md"


def _latency(key: str, label: str, source: str, description: str, **kw: Any) -> MetricDef:
    """A per-request latency summary stored in s and shown in ms (unless ``kw`` says otherwise)."""
    kw.setdefault("shown_unit", "ms")
    kw.setdefault("scale", 1e3)
    return MetricDef(key, label, "s", "lower", source, SUMMARY_STATS, description=description, **kw)


# -- per request (summaries over a cell's requests) -----------------------------------------
TTFT = _latency("ttft_s", "TTFT", f"{_MD} Per request: t_tokens[0] - t_send (all tools)",
                "time to first token")
TPOT = _latency("tpot_s", "TPOT", f"{_MD} Per request: (e2e - ttft) / (n_out - 1); vLLM benchmarks/serve.py "
                "(aiperf: ITL)", "time per output token after the first")
ITL = _latency("itl_s", "ITL", f"{_MD} Per request: t_tokens[i] - t_tokens[i-1], pooled; vLLM ITL",
               "inter-token latency")
E2E = _latency("e2e_s", "E2E", f"{_MD} Per request: t_tokens[-1] - t_send (all tools)", "end-to-end latency",
               shown_unit="s", scale=1.0, digits=3)
TTFRT = _latency("ttfrt_s", "TTFRT", f"{_MD} Serving mode: t_first_reasoning - t_send; aiperf reasoning metrics",
                 "time to first reasoning token")
TTFAT = _latency("ttfat_s", "TTFAT", f"{_MD} Serving mode: t_first_answer - t_send; guidellm time to first "
                 "output token", "time to first answer (non-reasoning) token")
RELEASE_LAG = _latency("release_lag_s", "release lag", f"{_MD} Serving mode: t_send - t_sched over sent requests",
                       "how late the client sent each request against its schedule")
QUEUE_WAIT = _latency("queue_wait_s", "client queue wait", f"{_MD} Serving mode: t_send - t_sched of the "
                      "completed requests", "time a completed request waited in the client's own queue")
TTFT_BY_TURN = _latency("ttft_s_by_turn", "TTFT by turn", f"{_MD} Serving mode: TTFT per turn of multi-turn "
                        "sessions", "TTFT per turn index", keyed_by="turn")
REASONING_TOKENS = MetricDef("reasoning_tokens", "reasoning tokens", "", None,
                             f"{_MD} Serving mode: usage.completion_tokens_details.reasoning_tokens, else one per "
                             "reasoning event", SUMMARY_STATS, description="reasoning tokens per request")
ANSWER_TOKENS = MetricDef("answer_tokens", "answer tokens", "", None, f"{_MD} Serving mode: n_out - reasoning_tokens",
                          SUMMARY_STATS, description="answer (non-reasoning) tokens per request")

# -- per cell -------------------------------------------------------------------------------
N_REQUESTS = MetricDef("n_requests", "requests sent", "", None, f"{_MD} Per cell", short="requests")
N_COMPLETED = MetricDef("n_completed", "completed requests", "", None,
                        f"{_MD} Per cell: requests without error that produced a token", short="n")
N_FAILED = MetricDef("n_failed", "failed requests", "", None, f"{_MD} Per cell", short="failed")
N_IN_TOTAL = MetricDef("n_in_total", "input tokens", "", None, f"{_MD} Per cell: sum n_in of completed requests")
N_OUT_TOTAL = MetricDef("n_out_total", "output tokens", "", None, f"{_MD} Per cell: sum n_out of completed requests")
DEVICES_USED = MetricDef("devices_used", "devices", "", None, f"{_MD} Per cell: devices the model instance ran on")
DURATION = MetricDef("duration_s", "duration", "s", None, f"{_MD} Per cell: last token of the cell - first t_send",
                     digits=3)
OUTPUT_TOK_S = MetricDef("output_tok_s", "output throughput", "tok/s", "higher",
                         f"{_MD} Per cell: sum n_out / duration_s (vLLM, aiperf)", short="output", digits=1)
TOTAL_TOK_S = MetricDef("total_tok_s", "total throughput", "tok/s", "higher",
                        f"{_MD} Per cell: (sum n_in + sum n_out) / duration_s (LLM-Inference-Bench eq. 2)",
                        short="total", digits=1)
OUTPUT_TOK_S_PER_DEVICE = MetricDef("output_tok_s_per_device", "output throughput per device", "tok/s", "higher",
                                    f"{_MD} Per cell: output_tok_s / tensor_parallel_size (Perplexity's A100/H100 "
                                    "study)", short="output/device", digits=1)
TOK_S_PER_DEVICE = MetricDef("tok_s_per_device", "total throughput per device", "tok/s", "higher",
                             f"{_MD} Per cell: total_tok_s / devices_used (InferenceX's y axis: total tok/s / "
                             "(tp x pp))", short="total/device", digits=1)
TOK_S_PER_USER = MetricDef("tok_s_per_user", "interactivity", "tok/s", "higher",
                           f"{_MD} Per cell: 1 / TPOT p50 (InferenceX's x axis: 1000 / median TPOT in ms)",
                           short="tok/s/user", digits=1)
REQUEST_S = MetricDef("request_s", "request throughput", "req/s", "higher",
                      f"{_MD} Per cell: completed requests / duration_s", short="")
LIB_ITL = MetricDef("lib_itl_s", "LLM-Inference-Bench ITL", "s", "lower",
                    f"{_MD} Per cell: (mean E2E - mean TTFT) / (B x (mean n_out - 1)) (LLM-Inference-Bench eq. 1)",
                    short="LIB ITL", shown_unit="ms", scale=1e3)
GOODPUT = MetricDef("goodput_req_s", "goodput", "req/s", "higher",
                    f"{_MD} Per cell: requests meeting every SLO / duration_s (DistServe, vLLM)")
ENERGY = MetricDef("energy_j", "energy", "J", "lower", f"{_MD} Per cell: device energy over the timed part")
AVG_POWER = MetricDef("avg_power_w", "average power", "W", "lower", f"{_MD} Per cell: energy_j / duration_s",
                      short="power", digits=1)
TOKENS_PER_J = MetricDef("tokens_per_j", "tokens per joule", "tok/J", "higher",
                         f"{_MD} Per cell: (sum n_in + sum n_out) / energy_j (Beyond Throughput)", short="")
OUTPUT_TOKENS_PER_J = MetricDef("output_tokens_per_j", "output tokens per joule", "tok/J", "higher",
                                f"{_MD} Per cell: sum n_out / energy_j", short="output")
J_PER_TOKEN = MetricDef("j_per_token", "energy per token", "J/tok", "lower",
                        f"{_MD} Per cell: energy_j / (sum n_in + sum n_out) (InferenceX's J/token axis)", short="J/tok",
                        digits=4)
J_PER_OUTPUT_TOKEN = MetricDef("j_per_output_token", "energy per output token", "J/tok", "lower",
                               f"{_MD} Per cell: energy_j / sum n_out", short="J/out tok", digits=4)
USD_PER_MTOK = MetricDef("usd_per_mtok", "cost per million output tokens", "USD/Mtok", "lower",
                         f"{_MD} Repeats, SLO search and cost: price_per_hour / 3600 x duration_s / (sum n_out / "
                         "1e6) (inference-perf #139)", short="")
CLIENT_LAG_P99 = MetricDef("client_lag_p99_ms", "client event-loop lag p99", "ms", "lower",
                           f"{_MD} Serving mode: p99 of the event loop's lag sampled every 10 ms",
                           short="client lag p99")
HARNESS_SHARE = MetricDef("harness_share", "harness share", "", "lower",
                          f"{_MD} Per cell: harness_cpu_s / (harness_cpu_s + engine_cpu_s) over the timed part "
                          "(measure/harness.py)", short="harness", shown_unit="%", scale=100.0, digits=1,
                          description="the share of the cell's CPU time that was infbench's own")
WARMUP = MetricDef("warmup_s", "warm-up time", "s", None,
                   f"{_MD} Per cell: wall seconds of the warm-up passes before the timed part (compilation included)",
                   short="warm-up")
COMPILE = MetricDef("compile_s", "compile time", "s", None,
                    f"{_MD} Per cell: wall seconds of the first warm-up pass at this cell's shape when the engine "
                    "compiles for it (transformers' static cache with torch.compile), outside the timed part",
                    short="compile")

# -- steady state (measure/steady.py, analysis/steady.py; docs/metrics.md "Steady state") -----
_SS = f"{_MD} Steady state"
STEADY_OUTPUT_TOK_S = MetricDef("steady_output_tok_s", "steady output throughput", "tok/s", "higher",
                                f"{_SS}: output tokens arriving inside the steady window / its length (vLLM's Rust "
                                "bench's window: in-flight requests at the target concurrency)",
                                short="steady out tok/s", path=("steady_window", "output_tok_s"), digits=1)
STEADY_TOTAL_TOK_S = MetricDef("steady_total_tok_s", "steady total throughput", "tok/s", "higher",
                               f"{_SS}: (prompt tokens of requests whose first token arrived in the window + output "
                               "tokens arriving in it) / its length", short="steady tok/s",
                               path=("steady_window", "total_tok_s"), digits=1)
STEADY_TPOT = MetricDef("steady_tpot_s", "steady TPOT", "s", "lower",
                        f"{_SS}: TPOT of the requests whose whole decode lies inside the steady window",
                        SUMMARY_STATS, shown_unit="ms", scale=1e3, path=("steady_window", "tpot_s"))
STEADY_ITL = MetricDef("steady_itl_s", "steady ITL", "s", "lower",
                       f"{_SS}: inter-token gaps whose both tokens lie inside the steady window", SUMMARY_STATS,
                       shown_unit="ms", scale=1e3, path=("steady_window", "itl_s"))
STEADY_ENERGY = MetricDef("steady_energy_j", "steady energy", "J", "lower",
                          f"{_SS}: device energy over exactly the steady window (ML.ENERGY)",
                          path=("steady_window", "energy_j"))
STEADY_TOKENS_PER_J = MetricDef("steady_tokens_per_j", "steady tokens per joule", "tok/J", "higher",
                                f"{_SS}: the window's tokens (as steady_total_tok_s counts them) / steady_energy_j",
                                short="steady", path=("steady_window", "tokens_per_j"))
STEADY_WINDOW_S = MetricDef("steady_window_s", "steady window", "s", None,
                            f"{_SS}: from when the in-flight requests first reach the target concurrency until they "
                            "last fall below it", short="window", path=("steady_window", "duration_s"))

# -- roofline (analysis/roofline.py, docs/roofline.md) --------------------------------------
_ROOF = "docs/roofline.md"
MBU = MetricDef("mbu", "MBU", "", "higher", f"{_ROOF}: decode bytes per step / (TPOT x bandwidth x tp)",
                shown_unit="%", scale=100.0, digits=1, description="decode bandwidth utilisation")
MFU = MetricDef("mfu", "MFU", "", "higher", f"{_ROOF}: prefill FLOPs / (TTFT x peak FLOP/s x tp)",
                shown_unit="%", scale=100.0, digits=1, description="prefill FLOP utilisation")
MBU_ATTAINABLE = MetricDef("mbu_attainable", "MBU against the measured attainable bandwidth", "", "higher",
                           f"{_ROOF}: MBU with the CPU's measured attainable bandwidth", shown_unit="%", scale=100.0,
                           digits=1, path=("roofline", "attainable", "mbu"), description="CPU")
MFU_ATTAINABLE_FP32 = MetricDef("mfu_attainable_fp32", "MFU against the measured attainable fp32 rate", "", "higher",
                                f"{_ROOF}: MFU with the CPU's measured attainable fp32 rate", shown_unit="%",
                                scale=100.0, digits=1, path=("roofline", "attainable", "mfu_fp32"), description="CPU")
TTFT_FLOOR = MetricDef("ttft_floor_s", "TTFT roofline floor", "s", None,
                       f"{_ROOF}: max(prefill FLOPs / peak, bytes / bandwidth)", shown_unit="ms", scale=1e3,
                       path=("roofline", "ttft_floor_s"))
TPOT_FLOOR = MetricDef("tpot_floor_s", "TPOT roofline floor", "s", None,
                       f"{_ROOF}: bytes of one decode step / bandwidth", shown_unit="ms", scale=1e3,
                       path=("roofline", "tpot_floor_s"))

# -- the server's own metrics (measure/server_metrics.py; named as docs/metrics.md maps them) --
_SRV = f"{_MD} Server metrics"
SERVER_TTFT = MetricDef("server_ttft_s", "server TTFT", "s", "lower",
                        f"{_SRV}: the server's TTFT histogram (vLLM, SGLang) or llama.cpp's timings.prompt_ms",
                        HISTOGRAM_STATS, shown_unit="ms", scale=1e3, description="the server's own TTFT")
SERVER_TPOT = MetricDef("server_tpot_s", "server TPOT", "s", "lower",
                        f"{_SRV}: the server's time-per-output-token histogram or timings.predicted_per_token_ms",
                        HISTOGRAM_STATS, shown_unit="ms", scale=1e3)
SERVER_QUEUE_TIME = MetricDef("server_queue_time_s", "server queue time", "s", "lower",
                              f"{_SRV}: the server's queue-time histogram", HISTOGRAM_STATS, shown_unit="ms",
                              scale=1e3)
SERVER_RUNNING = MetricDef("server_running", "server running requests", "", None,
                           f"{_SRV}: num_requests_running gauge over the scrapes", GAUGE_STATS, short="server running")
SERVER_WAITING = MetricDef("server_waiting", "server waiting requests", "", "lower",
                           f"{_SRV}: num_requests_waiting gauge over the scrapes (slope_per_s: least-squares trend)",
                           ("mean", "max", "last", "slope_per_s"), short="server waiting")
SERVER_KV_CACHE_USAGE = MetricDef("server_kv_cache_usage", "server KV-cache usage", "", None,
                                  f"{_SRV}: kv_cache_usage gauge, a fraction", GAUGE_STATS, short="server KV cache",
                                  shown_unit="%", scale=100.0, digits=1)
SERVER_PREEMPTIONS = MetricDef("server_preemptions", "server preemptions", "", "lower",
                               f"{_SRV}: preemption counter's delta over the cell")
SERVER_PREFIX_CACHE_HIT_RATE = MetricDef("server_prefix_cache_hit_rate", "server prefix-cache hit rate", "", None,
                                         f"{_SRV}: cached prompt tokens / prompt tokens over the cell",
                                         short="server prefix hits", shown_unit="%", scale=100.0, digits=1)
SERVER_SPEC_ACCEPTANCE_RATE = MetricDef("server_spec_acceptance_rate", "server speculative acceptance rate", "",
                                        "higher", f"{_SRV}: accepted / drafted tokens over the cell",
                                        short="server spec accepted", shown_unit="%", scale=100.0, digits=1)

# -- telemetry channels (measure/telemetry.py; plugin contract 1.5) ---------------------------
_TEL = f"{_MD} Telemetry channels: the device sampler's readings over the timed part"


def _channel(key: str, label: str, unit: str, description: str) -> MetricDef:
    """A telemetry channel, stored under ``metrics["telemetry"][key]``; ``description`` says
    what it measures and where each vendor's sampler reads it."""
    return MetricDef(key, label, unit, None, _TEL, TELEMETRY_STATS, path=("telemetry", key), digits=1,
                     description=description)


UTIL_PCT = _channel("util_pct", "device utilisation", "%",
                    "device busy time over the driver's sample period, % (NVML utilization.gpu, amdsmi "
                    "gfx_activity, xpu-smi GPU Utilization, hl-smi utilization.aip, psutil cpu_percent)")
MEM_UTIL_PCT = _channel("mem_util_pct", "memory utilisation", "%",
                        "memory-controller busy time, % (NVML utilization.memory, amdsmi umc_activity, xpu-smi "
                        "GPU Memory Utilization)")
CLOCK_MHZ = _channel("clock_mhz", "clock", "MHz",
                     "core clock in MHz (NVML SM clock, amdsmi GFX clock, xpu-smi GPU Frequency, hl-smi "
                     "clocks.current.soc, psutil cpu_freq)")
MEM_CLOCK_MHZ = _channel("mem_clock_mhz", "memory clock", "MHz", "memory clock in MHz (NVML MEM clock, amdsmi MEM "
                         "clock)")
TEMP_C = _channel("temp_c", "temperature", "C",
                  "device temperature in degrees C (NVML GPU sensor, amdsmi hotspot, xpu-smi GPU Core "
                  "Temperature, hl-smi temperature.aip, psutil's package sensor)")
MEM_TEMP_C = _channel("mem_temp_c", "memory temperature", "C",
                      "memory temperature in degrees C (xpu-smi GPU Memory Temperature)")
#: The telemetry channels a device's sampler may read (plugin contract 1.5).
TELEMETRY_CHANNELS = (UTIL_PCT, MEM_UTIL_PCT, CLOCK_MHZ, MEM_CLOCK_MHZ, TEMP_C, MEM_TEMP_C)

# -- quality (per precision, the quality table; docs/quality.md) -----------------------------
PERPLEXITY = MetricDef("perplexity", "perplexity", "", "lower",
                       f"{_MD} Per precision: exp(mean NLL), llama.cpp tools/perplexity/perplexity.cpp", digits=4,
                       description="llama-perplexity method")
PPL_INCREASE = MetricDef("ppl_increase", "perplexity increase", "", "lower",
                         f"{_MD} Per precision: perplexity / the baseline precision's - 1", shown_unit="%",
                         scale=100.0, digits=2)

_ALL = (TTFT, TPOT, ITL, E2E, TTFRT, TTFAT, RELEASE_LAG, QUEUE_WAIT, TTFT_BY_TURN, REASONING_TOKENS, ANSWER_TOKENS,
        N_REQUESTS, N_COMPLETED, N_FAILED, N_IN_TOTAL, N_OUT_TOTAL, DEVICES_USED, DURATION, OUTPUT_TOK_S,
        TOTAL_TOK_S, OUTPUT_TOK_S_PER_DEVICE, TOK_S_PER_DEVICE, TOK_S_PER_USER, REQUEST_S, LIB_ITL, GOODPUT, ENERGY,
        AVG_POWER, TOKENS_PER_J, OUTPUT_TOKENS_PER_J, J_PER_TOKEN, J_PER_OUTPUT_TOKEN, USD_PER_MTOK, CLIENT_LAG_P99,
        HARNESS_SHARE, WARMUP, COMPILE, STEADY_OUTPUT_TOK_S, STEADY_TOTAL_TOK_S, STEADY_TPOT, STEADY_ITL,
        STEADY_ENERGY, STEADY_TOKENS_PER_J, STEADY_WINDOW_S, MBU, MFU, MBU_ATTAINABLE,
        MFU_ATTAINABLE_FP32, TTFT_FLOOR, TPOT_FLOOR, SERVER_TTFT, SERVER_TPOT, SERVER_QUEUE_TIME, SERVER_RUNNING,
        SERVER_WAITING, SERVER_KV_CACHE_USAGE,
        SERVER_PREEMPTIONS, SERVER_PREFIX_CACHE_HIT_RATE, SERVER_SPEC_ACCEPTANCE_RATE, UTIL_PCT, MEM_UTIL_PCT,
        CLOCK_MHZ, MEM_CLOCK_MHZ, TEMP_C, MEM_TEMP_C, PERPLEXITY, PPL_INCREASE)

#: Every metric by its stored key.
METRICS: Mapping[str, MetricDef] = MappingProxyType({d.key: d for d in _ALL})

#: What else a cell's ``metrics`` may hold that is not a metric: key -> what it is.
FIELDS: Mapping[str, str] = MappingProxyType({
    "slo": "the per-request limits goodput was judged against ({ttft_s, tpot_s, e2e_s}, s)",
    "contention": "noisy neighbours during the cell's timed part (measure/contention.py): other processes' "
                  "CPU time in cores and processes on the device",
    "streamed": "False when no request was streamed (TTFT, TPOT, ITL then absent)",
    "token_counts_estimated": "True if a token count came from a client-side estimate",
    "reasoning_tokens_estimated": "True if a reasoning count came from counting chunks",
    "energy_source": "the power source's name (counter, sampled power)",
    "energy_label": "what the power source measures, as its plugin labels it",
    "telemetry_note": "why the telemetry channels could not be read",
    "server_metrics_note": "why the server's /metrics could not be scraped",
    "warnings": "what the engine or the client warned about during the cell",
    "roofline": "the roofline floor of the cell (analysis/roofline.py)",
    "roofline_note": "why no roofline was computed",
    "suspect": "why an ok cell breaks a physical bound (analysis/physics.py)",
    "telemetry": "telemetry channels over the cell ({channel: {mean, min, max, count}})",
    "throttled": "a throttle reason was active during the timed part",
    "throttle_reasons": "the throttle reasons seen",
    "host_bound": "True when the engine's host thread, not the device, set the cell's pace: device util_pct "
                  "below 30 % while the engine's process was busy (measure/harness.py host_bound)",
    "host_bound_reason": "the figures behind host_bound",
    "server_name": "the server recognised by its metric prefix",
    "server_latency_source": "histogram or timings: where server_ttft_s/server_tpot_s came from",
    "timed_window_epoch_s": "[start, end] of the timed part (first send to last token) on the wall clock "
                            "(Unix s), for cross-checks with external meters (nvidia-smi, a PDU)",
    "harness": "what infbench itself used during the timed part (measure/harness.py): where the engine ran "
               "(mode), harness and engine CPU seconds, and infbench's threads beside the engine",
    "client": "the serving client's own health (loop and release lag, reasons it fell behind)",
    "find_max": "a --find-max probe's judgement (analysis/slo_search.py)",
    "published": "True for a cell imported from published results",
    "invalid": "metric keys whose stored value had the wrong shape (None on read: store.checked_metrics)",
    "unmapped": "an imported cell's figures that infbench does not define, under the source tool's own names and "
                "units, as they came (infbench import; docs/metrics.md, importing other tools' results)",
    "price_per_hour_usd": "the --price-per-hour behind usd_per_mtok",
    "predicted": "True for an adaptive sweep's predicted cell (status predicted: not measured)",
    "interval": "a predicted cell's 90 % interval per metric ({metric: [lo, hi]})",
    "interval_half_width": "a predicted cell's interval half-width (log units)",
    "prediction_basis": "what a predicted cell's numbers rest on (the fit, the engine profile)",
    "warmup": "the cell's warm-up record (measure/steady.py warm_up): mode (until-stable, carried, fixed, none), "
              "why, each block's TPOT median (ms), core clock (MHz) and seconds, converged, the last blocks' "
              "spread, seconds, tolerance and ceiling",
    "steady": "the steady-state checks (analysis/steady.py): timed_drift (first and last thirds), "
              "reference_tpot_ms (what the group's sentinel compares), sentinel, repeat_cv, remeasured, and "
              "flags (not-warm, unsteady, drift: name -> the sentence with its figures)",
    "steady_window": "a serving cell's steady window and its figures (measure/steady.py window_metrics): "
                     "t0_ns, t1_ns, duration_s, share of the run, throughputs, TPOT, ITL, energy over the "
                     "window, peak_in_flight, warning",
    "host": "the host during the cell: compact_stall (memory-compaction stalls, /proc/vmstat delta)",
    "unexpected": "a measured cell outside its calibrated prediction's 90 % interval (analysis/expectation.py): "
                  "the metrics outside, their ratios to the prediction, the interval and the basis; a note",
})


def field(metrics: Mapping[str, Any] | None, name: str) -> Any:
    """The value of the non-metric field ``name`` (:data:`FIELDS`: ``suspect``, ``client``,
    ``find_max``, ``warmup``...) in a cell's ``metrics``; None where the cell has none.

    Raises:
        KeyError: ``name`` is not a declared field (a metric is read through its
            :class:`MetricDef`: ``metric(key).value(metrics)``; an unknown name is a typo).
    """
    if name not in FIELDS:
        known = "a metric: read it with its MetricDef" if name in METRICS else "not a declared field"
        raise KeyError(f"{name!r} is {known} (infbench.data.metrics.FIELDS lists the fields)")
    return metrics.get(name) if isinstance(metrics, Mapping) else None


def metric(key: str) -> MetricDef:
    """The definition of the stored metric ``key``.

    Raises:
        KeyError: no metric has that key (the message names the nearest ones).
    """
    try:
        return METRICS[key]
    except KeyError:
        import difflib  # noqa: PLC0415 - optional: inside try

        near = difflib.get_close_matches(key, list(METRICS), n=3)
        raise KeyError(f"no metric {key!r} in infbench.data.metrics"
                       + (f" (did you mean {', '.join(near)}?)" if near else "")) from None


def _columns() -> dict[str, Column]:
    out: dict[str, Column] = {}
    for d in _ALL:
        if d.keyed_by:
            continue
        for c in ([Column(d, s) for s in d.stats] if d.stats else [Column(d)]):
            out[c.key] = c
    return out


_COLUMNS = _columns()


def column(key: str) -> Column:
    """The column whose flat-row key is ``key`` (``ttft_ms_p50``, ``output_tok_s``).

    Raises:
        KeyError: no metric and statistic give that key.
    """
    try:
        return _COLUMNS[key]
    except KeyError:
        raise KeyError(f"no metric column {key!r} in infbench.data.metrics") from None


def columns() -> Iterator[Column]:
    """Every metric's every column (one per statistic kept, one for a scalar)."""
    return iter(_COLUMNS.values())
