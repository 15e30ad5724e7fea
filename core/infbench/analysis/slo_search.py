"""SLO-constrained maximum load (``infbench run --find-max rate|concurrency``).

The search offers one load after another to a server that stays up, each load a stored
cell (a *probe*), and finds the highest load at which at least a fraction ``goodput`` of
the requests meet the SLO (TTFT and TPOT limits), the knee of the goodput curve:

1. **bracket**: from the start load, double while the probe passes (up to ``limit``);
   if the very first probe fails, halve until one passes;
2. **bisect** between the highest passing and the lowest failing load until they are one
   step apart (concurrency: adjacent integers; rate: within ``rel_tol`` of each other).

A probe fails when too few requests meet the SLO, or when the server *saturates*: in
rate mode (an open loop, where nothing bounds the queue) the server's waiting queue
grew without bound over the probe (its own ``/metrics``, :mod:`infbench.measure.
server_metrics`), or the client's release lag (``t_send - t_sched``) kept growing; a
saturated load is never exceeded. This is the method of DistServe's goodput and of
vLLM's ``--goodput`` search scripts (``benchmarks/auto_tune``), with goodput counted per
request as in docs/metrics.md ``goodput_req_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from infbench.data import metrics as M
from infbench.data.errors import ConfigError
from infbench.data.schema import Cell, CellResult, Load, RequestRecord
from infbench.data.stored import StoredCell
from infbench.measure.derive import tpot_s, ttft_s
from infbench.measure.server_metrics import SERVERS, _slope

MODES = ("rate", "concurrency")
#: Default upper bound of the search per mode (requests in flight; requests per s).
DEFAULT_LIMIT = {"concurrency": 512, "rate": 1000.0}


@dataclass(frozen=True)
class SloTarget:
    """The SLO a load must meet.

    Attributes:
        ttft_s: TTFT limit per request in s (None: not limited).
        tpot_s: TPOT limit per request in s (None: not limited).
        goodput: fraction of the requests (sent, failed ones included) that must meet
            every limit, 0 < goodput <= 1 (default 0.9).
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    goodput: float = 0.9

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.tpot_s is None:
            raise ConfigError("--find-max needs an SLO", hint="give --slo-ttft-ms and/or --slo-tpot-ms")
        if not 0 < self.goodput <= 1:
            raise ConfigError(f"--goodput is a fraction of requests in (0, 1], got {self.goodput}",
                              hint="e.g. --goodput 0.9")
        for name, v in (("--slo-ttft-ms", self.ttft_s), ("--slo-tpot-ms", self.tpot_s)):
            if v is not None and v <= 0:
                raise ConfigError(f"{name} must be > 0")

    def meets(self, r: RequestRecord) -> bool:
        """True if the request completed within every limit (a request with one token has
        no TPOT and meets a TPOT limit)."""
        if r.error is not None or not r.t_tokens_ns:
            return False
        if self.ttft_s is not None and ttft_s(r) > self.ttft_s:
            return False
        t = tpot_s(r)
        return not (self.tpot_s is not None and t is not None and t > self.tpot_s)

    def as_dict(self) -> dict[str, float]:
        """``{"ttft_s", "tpot_s"}`` (the given ones), as ``RunOptions.slo`` takes them."""
        return {k: v for k, v in ((M.TTFT.key, self.ttft_s), (M.TPOT.key, self.tpot_s)) if v is not None}


def goodput_fraction(records: Sequence[RequestRecord], slo: SloTarget) -> float:
    """Fraction of ``records`` (every sent request; failures count as misses) meeting ``slo``;
    0.0 for no records."""
    return sum(1 for r in records if slo.meets(r)) / len(records) if records else 0.0


def saturation(result: CellResult, mode: str) -> str | None:
    """Why a probe shows an unbounded queue, or None.

    Only in ``rate`` mode (an open loop; in ``concurrency`` mode the client bounds what
    waits). Two signs, either suffices:

    * the server's waiting queue (``server_waiting`` from its ``/metrics``) reached a
      quarter of the probe's requests (at least 4) and rose while requests were still
      being released (least-squares trend of the scraped series over that window; the
      whole cell's trend when fewer than 3 scrapes fall in it);
    * the client's release lag (``t_send - t_sched``) grew: its mean over the last
      quarter of the requests (by schedule) exceeds the first quarter's by more than
      max(0.5 s, 5 inter-arrival times).
    """
    if mode != "rate":
        return None
    m = result.metrics or {}
    waiting = M.SERVER_WAITING.value(m, "max")
    n = M.N_REQUESTS.value(m) or len(result.records)
    recs = sorted((r for r in result.records if r.t_sched_ns is not None), key=lambda r: r.t_sched_ns or 0)
    if waiting is not None and waiting >= max(4.0, 0.25 * n):
        slope = _offered_slope(result, recs)
        if slope is None:
            slope = M.SERVER_WAITING.value(m, "slope_per_s")
        if slope is not None and slope > 0:
            return (f"server queue grew to {waiting:g} waiting requests while requests arrived "
                    f"({slope:+.3g}/s, {M.field(m, 'server_name')} /metrics)")
    if len(recs) >= 8 and result.cell.load is not None and result.cell.load.request_rate:
        k = len(recs) // 4
        lag = [(r.t_send_ns - (r.t_sched_ns or r.t_send_ns)) / 1e9 for r in recs]
        growth = sum(lag[-k:]) / k - sum(lag[:k]) / k
        if growth > max(0.5, 5.0 / result.cell.load.request_rate):
            return f"release lag grew by {growth:.2f} s over the probe (client could not keep the schedule)"
    return None


def _offered_slope(result: CellResult, recs: list[RequestRecord]) -> float | None:
    """Trend (requests per s) of the server's waiting queue while requests were still being
    released (first to last ``t_sched``), from the scraped series; None without one. After
    the last release the queue drains, which says nothing about the offered load."""
    sm = result.server_metrics or {}
    fam = next((f for f in SERVERS if f.name == sm.get("server")), None)
    if fam is None or not recs:
        return None
    name = next((x for x in fam.waiting if x in sm.get("series", {})), None)
    if name is None:
        return None
    t0, t1 = recs[0].t_sched_ns, recs[-1].t_sched_ns
    pts = [p for p in sm["series"][name] if t0 <= p[0] <= t1]
    return _slope(pts) if len(pts) >= 3 else None


@dataclass
class Probe:
    """One measured load.

    Attributes:
        load: requests in flight (concurrency) or arrivals per s (rate).
        result: the stored cell (None for a probe measured by an earlier worker of a
            resumed search, known only by its outcome).
        fraction: share of its requests meeting the SLO.
        passed: fraction >= goodput, ok, and not saturated.
        saturated: the saturation reason, if any.
        cell_id: the stored cell's id.
        status: the stored cell's status (``ok``, ``failed``).
    """

    load: float
    result: CellResult | None
    fraction: float
    passed: bool
    saturated: str | None = None
    cell_id: str = ""
    status: str = "ok"


def judge(result: CellResult, mode: str, slo: SloTarget, load: float) -> Probe:
    """The :class:`Probe` of a measured cell: the share of its requests meeting ``slo``, its
    saturation (:func:`saturation`), and whether it passes (ok, share >= ``slo.goodput``, not
    saturated)."""
    frac = goodput_fraction(result.records, slo)
    sat = saturation(result, mode) if result.status == "ok" else None
    passed = result.status == "ok" and frac >= slo.goodput and sat is None
    return Probe(load, result, frac, passed, sat, result.cell_id, result.status)


def probe_metrics(search_id: str, mode: str, slo: SloTarget, probe: Probe, number: int) -> dict[str, Any]:
    """``metrics["find_max"]`` of a stored probe: ``{search_id, mode, load, probe, fraction,
    goodput, passed, saturated, slo}`` (``probe`` numbers the probes of a search from 1)."""
    return {"search_id": search_id, "mode": mode, "load": probe.load, "probe": number, "fraction": probe.fraction,
            "goodput": slo.goodput, "passed": probe.passed, "saturated": probe.saturated, "slo": slo.as_dict()}


def load_of(cell: Cell, mode: str) -> float | None:
    """The load a probe cell offers in ``mode`` (requests in flight, or arrivals per s)."""
    if cell.load is None:
        return None
    v = cell.load.concurrency if mode == "concurrency" else cell.load.request_rate
    return float(v) if v is not None else None


@dataclass
class SearchResult:
    """The outcome of a search.

    Attributes:
        search_id: id shared by the probes' ``metrics.find_max``.
        mode: ``rate`` or ``concurrency``.
        slo: the target.
        probes: in the order measured.
        knee: the highest passing load (None: none passed).
        first_fail: the lowest failing load above it (None: the limit passed).
        stopped: why the search ended (``converged``, ``limit``, ``nothing passes``,
            ``probe budget``).
    """

    search_id: str
    mode: str
    slo: SloTarget | None = None
    probes: list[Probe] = field(default_factory=list)
    knee: float | None = None
    first_fail: float | None = None
    stopped: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (``--json`` and the report)."""
        slo = {**self.slo.as_dict(), "goodput": self.slo.goodput} if self.slo else None
        return {"search_id": self.search_id, "mode": self.mode, "knee": self.knee, "first_fail": self.first_fail,
                "stopped": self.stopped, "slo": slo,
                "probes": [{"load": p.load, "cell_id": p.cell_id, "status": p.status,
                            "fraction": p.fraction, "passed": p.passed, "saturated": p.saturated}
                           for p in self.probes]}


def search(measure: Callable[[float], Probe], mode: str, start: float, limit: float | None = None,
           rel_tol: float = 0.1, max_probes: int = 20, min_load: float | None = None) -> SearchResult:
    """Bracket then bisect for the highest passing load (see the module doc).

    Args:
        measure: measures one load and returns its :class:`Probe` (it is called once per
            distinct load).
        mode: ``rate`` or ``concurrency`` (integers, adjacent when converged).
        start: the first load (> 0; concurrency: >= 1).
        limit: the highest load tried (default :data:`DEFAULT_LIMIT`).
        rel_tol: rate mode converges when ``(fail - pass) <= rel_tol * pass``.
        max_probes: stop after this many probes.
        min_load: the lowest load tried when halving (default 1 for concurrency,
            ``start / 64`` for rate).

    Returns:
        A :class:`SearchResult` (``search_id`` empty: the caller sets it).

    Raises:
        ConfigError: unknown mode, or a start outside (0, limit].
    """
    if mode not in MODES:
        raise ConfigError(f"--find-max takes rate or concurrency, got {mode!r}")
    conc = mode == "concurrency"
    limit = limit if limit is not None else DEFAULT_LIMIT[mode]
    if start <= 0 or start > limit or (conc and start < 1):
        raise ConfigError(f"--find-max start load {start:g} is outside (0, {limit:g}]",
                          hint="the start is the first --concurrency/--request-rate value")
    lo_bound = min_load if min_load is not None else (1 if conc else start / 64)
    res = SearchResult(search_id="", mode=mode)
    seen: dict[float, Probe] = {}

    def probe(x: float) -> Probe:
        x = float(int(x)) if conc else float(x)
        if x not in seen:
            seen[x] = measure(x)
            res.probes.append(seen[x])
        return seen[x]

    lo: float | None = None
    hi: float | None = None
    x = float(int(start)) if conc else float(start)
    while len(res.probes) < max_probes:           # bracket upwards
        if probe(x).passed:
            lo = x
            if x >= limit:
                res.stopped = "limit"
                break
            x = min(limit, float(int(x * 2)) if conc else x * 2)
        else:
            hi = x
            break
    if lo is None and hi is not None:              # the start fails: halve
        x = hi
        while len(res.probes) < max_probes:
            nxt = float(max(int(lo_bound), int(x // 2))) if conc else x / 2
            if nxt >= x or nxt < lo_bound:
                res.stopped = "nothing passes"
                break
            x = nxt
            if probe(x).passed:
                lo = x
                break
            hi = x
    while lo is not None and hi is not None:   # bisect
        if (conc and hi - lo <= 1) or (not conc and hi - lo <= rel_tol * lo):
            res.stopped = "converged"
            break
        if len(res.probes) >= max_probes:
            break
        mid = float((int(lo) + int(hi)) // 2) if conc else (lo + hi) / 2
        if probe(mid).passed:
            lo = mid
        else:
            hi = mid
    if not res.stopped:
        res.stopped = "probe budget" if len(res.probes) >= max_probes else "converged"
    res.knee, res.first_fail = lo, hi
    return res


def check_workload(trace: bool, no_stream: bool) -> None:
    """The workloads a search cannot vary or judge.

    Raises:
        ConfigError: a trace (its own arrival times: neither a concurrency nor a rate to
            vary), or non-streaming requests (no TTFT or TPOT per request to judge).
    """
    if trace:
        raise ConfigError("--find-max varies --concurrency or --request-rate; a --trace releases its requests at "
                          "its own times", hint="sweep --trace-speed instead (e.g. --trace-speed 0.5,1,2) and read "
                          "goodput_req_s per cell, or search on synthetic or --dataset load")
    if no_stream:
        raise ConfigError("--find-max judges each request's TTFT and TPOT; --no-stream measures E2E only",
                          hint="drop --no-stream")


def probe_cell(template: Cell, mode: str, load: float) -> Cell:
    """The cell of one probe: ``template`` with its load set to ``load`` (requests in flight
    or arrivals per s), the rest (requests, duration, warm-up) kept."""
    ld = template.load or Load()
    if mode == "concurrency":
        new = ld.model_copy(update={"mode": "concurrency", "concurrency": int(load), "request_rate": None})
    else:
        new = ld.model_copy(update={"mode": "rate", "request_rate": float(load), "concurrency": None})
    return template.model_copy(update={"load": new, "batch": 1})


def envelope(template: Cell, mode: str, limit: float) -> list[Cell]:
    """Cells that size the server for the whole search (``max_num_seqs``, llama.cpp slots):
    the template at the start and at the limit (rate mode: the rate cap of a load without
    a concurrency limit)."""
    if mode == "concurrency":
        return [template, probe_cell(template, mode, limit)]
    return [template]


def searches(rows: Sequence[StoredCell]) -> list[dict[str, Any]]:
    """The stored searches among ``Store.results()`` rows (their probes carry
    ``metrics.find_max``), for ``infbench results`` and the report.

    Returns:
        One dict per search id: ``{"search_id", "mode", "slo", "goodput", "label",
        "points": [{"load", "fraction", "passed", "saturated", "goodput_req_s",
        "output_tok_s", "cell_id"}] (by load), "knee", "first_fail"}``; knee and
        first_fail as :func:`search` defines them.
    """
    by: dict[str, list[StoredCell]] = {}
    for r in rows:
        fm = r.field("find_max")
        if fm:
            by.setdefault(fm["search_id"], []).append(r)
    out = []
    for sid, rs in by.items():
        pts = sorted(({**{k: r.field("find_max")[k] for k in ("load", "fraction", "passed", "saturated")},
                       M.GOODPUT.key: M.GOODPUT.value(r.metrics),
                       M.OUTPUT_TOK_S.key: M.OUTPUT_TOK_S.value(r.metrics), "cell_id": r.cell_id,
                       "server_waiting_max": M.SERVER_WAITING.value(r.metrics, "max")}
                      for r in rs), key=lambda p: p["load"])
        fm = rs[0].field("find_max")
        passing = [p["load"] for p in pts if p["passed"]]
        knee = max(passing) if passing else None
        above = [p["load"] for p in pts if not p["passed"] and (knee is None or p["load"] > knee)]
        s = rs[0].spec
        label = f"{s['model']} {s['engine']} {s['dtype']} i{s['input_len']} o{s['output_len']}"
        out.append({"search_id": sid, "mode": fm["mode"], "slo": fm["slo"], "goodput": fm["goodput"],
                    "label": label, "points": pts, "knee": knee, "first_fail": min(above) if above else None})
    return out


def knee_text(res: dict[str, Any] | SearchResult) -> str:
    """One line: ``knee: concurrency 4 (5 fails); 6 probes, converged``."""
    d = res.as_dict() if isinstance(res, SearchResult) else res
    unit = "req/s" if d["mode"] == "rate" else "in flight"
    if d["knee"] is None:
        return f"no {d['mode']} load met the SLO (lowest tried fails)"
    above = f"; {d['first_fail']:g} fails" if d.get("first_fail") is not None else "; the limit passes"
    n = len(d.get("probes") or d.get("points") or [])
    stopped = f", {d['stopped']}" if d.get("stopped") else ""
    return f"max {d['mode']}: {d['knee']:g} {unit}{above} ({n} probes{stopped})"

