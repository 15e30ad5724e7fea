"""The load generator of serving mode: batch, fixed concurrency, request rate, or a trace.

It decides *when* each request is released and leaves sending and timestamping to a
``send(index, t_sched_ns)`` coroutine (:class:`infbench.engines.openai.OpenAIEngine`),
so the generator does no per-token work. Arrival times for ``rate`` are drawn up front
from a seeded gamma distribution with shape ``burstiness`` and mean ``1/request_rate``
(shape 1 = Poisson), as vLLM's ``benchmarks/serve.py`` does; ``trace`` takes them from
the trace. Every record carries ``t_sched_ns`` (release time) beside ``t_send_ns``
(written to the socket), so a client that falls behind its schedule shows as
``release_lag_s``, not as TTFT.

A unit of work may be a single request or a multi-turn session (``send`` then returns
the session's records, and applies the per-request timeout to each turn itself). ``send``
may also return any object with an ``error`` attribute standing for a record to be built
later (the serving client parses responses after the timed part); such objects come back
as they are, in the records' place.

Client health: while the timed part runs, a monitor task measures the event loop's lag
(how late a 10 ms sleep wakes up: the time any ready network read waited) into
:class:`LoadStats`. A cell whose requests all time out before one completes stops
offering new ones (:class:`LoadStats` says so), so an unresponsive server costs one
request timeout, not one per request.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infbench.data.schema import Load, RequestRecord

#: Sends unit ``index`` at scheduled ``t_sched_ns``; its awaitable gives a record, a list of them
#: (a session), or an engine-private raw object that the engine turns into records later.
Send = Callable[[int, int], Awaitable[Any]]

#: Per-request limit (s) when ``Load.timeout_s`` (``--request-timeout``) is not given:
#: long enough for thousands of tokens on a slow CPU server, short enough that a server
#: that never answers cannot hold ``infbench run`` for hours.
DEFAULT_REQUEST_TIMEOUT_S = 600.0
#: Interval of the event-loop lag monitor (s).
LAG_INTERVAL_S = 0.010


def request_timeout_s(load: Load) -> float:
    """The per-request limit of ``load`` in s: its ``timeout_s`` or :data:`DEFAULT_REQUEST_TIMEOUT_S`."""
    return load.timeout_s or DEFAULT_REQUEST_TIMEOUT_S


@dataclass
class LoadStats:
    """What the load generator observed about itself during the timed part.

    Attributes:
        loop_lag_ms: event-loop lag samples (ms): how late each 10 ms monitor sleep woke.
        stopped: why new requests stopped being offered early, or None.
        not_sent: timed requests never sent because of ``stopped``.
        timed_start_ns: ``perf_counter_ns`` at the start of the timed part.
    """

    loop_lag_ms: list[float] = field(default_factory=list)
    stopped: str | None = None
    not_sent: int = 0
    timed_start_ns: int | None = None


def arrival_offsets_s(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Cumulative arrival offsets in s of ``n`` requests at mean ``rate`` req/s.

    Inter-arrival times ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)); the first
    request arrives at 0.
    """
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


class _Run:
    """Shared state of one :func:`run_load`: timeouts, completions, the early stop."""

    def __init__(self, send: Send, timeout_s: float | None, width: int, stats: LoadStats):
        self.send, self.timeout_s, self.width, self.stats = send, timeout_s, max(1, width), stats
        self.timeouts = 0
        self.completed = 0

    @property
    def stop(self) -> bool:
        return self.stats.stopped is not None

    async def one(self, i: int, t_sched: int) -> list[RequestRecord]:
        """Send unit ``i`` (timeout applied when set); never raises for a request's failure."""
        try:
            if self.timeout_s is None:
                out = await self.send(i, t_sched)
            else:
                # asyncio.timeout, not wait_for: the request runs in this task, with no extra
                # task (whose first step would wait behind every ready read) before it is sent.
                async with asyncio.timeout(self.timeout_s):
                    out = await self.send(i, t_sched)
        except TimeoutError:
            out = RequestRecord(t_send_ns=t_sched, t_sched_ns=t_sched,
                                error=f"timeout after {self.timeout_s:g} s (--request-timeout)")
        recs = out if isinstance(out, list) else [out]
        for r in recs:
            if r.error is None:
                self.completed += 1
            elif r.error.startswith("timeout after"):
                self.timeouts += 1
        if self.completed == 0 and self.timeouts >= self.width and self.stats.stopped is None:
            self.stats.stopped = (f"{self.timeouts} request(s) timed out and none completed: stopped offering "
                                  "requests (server unresponsive?)")
        return recs


async def _lag_monitor(samples: list[float], interval_s: float = LAG_INTERVAL_S) -> None:
    """Append, every ``interval_s``, how late the sleep woke up (ms)."""
    step = int(interval_s * 1e9)
    while True:
        t = time.perf_counter_ns()
        await asyncio.sleep(interval_s)
        samples.append(max(0, time.perf_counter_ns() - t - step) / 1e6)


async def run_load(send: Send, load: Load, n_prompts: int, batch: int = 1, seed: int = 0,
                   schedule_s: Sequence[float] | None = None, stats: LoadStats | None = None,
                   guard: bool = True, prepare: Callable[[int], None] | None = None) -> list[RequestRecord]:
    """Offer requests per ``load`` and return the timed records (warm-up excluded).

    Args:
        send: sends unit ``index`` (prompt ``index % n_prompts``) and returns its record, or
            a session's records; must not raise for a failed request.
        load: the load spec. ``batch`` mode sends ``batch`` requests at once.
        n_prompts: prompts available (reused round-robin).
        batch: requests of ``batch`` mode.
        seed: seed of the arrival times (``rate``).
        schedule_s: mode ``trace``: each timed unit's release offset in s (already
            divided by the trace speed); unit ``warmup_requests + k`` is released at
            ``t0 + schedule_s[k]``, ``t0`` taken after the warm-up.
        stats: filled with the loop lag and any early stop.
        guard: apply the per-request timeout around each unit (False when ``send``
            applies it itself, e.g. per turn of a session).
        prepare: called with a unit's index before waiting for its release time (rate
            and trace modes), to build its request ahead of the clock.

    Requests are indexed from 0 over warm-up and timed parts, so timed requests never
    reuse the warm-up's prompts when enough prompts exist.
    """
    stats = stats if stats is not None else LoadStats()
    timeout = request_timeout_s(load) if guard else None
    w = load.warmup_requests
    width = max(load.concurrency or 0, batch if load.mode == "batch" else 0, 1)
    if w:
        warm = _Run(send, timeout, w, LoadStats())
        await _concurrent(warm, range(w), min(load.concurrency or w, w), None)
    run = _Run(send, timeout, width, stats)
    lag = asyncio.create_task(_lag_monitor(stats.loop_lag_ms))
    stats.timed_start_ns = time.perf_counter_ns()
    try:
        if load.mode == "batch":
            now = time.perf_counter_ns()
            outs = await asyncio.gather(*(run.one(i, now) for i in range(w, w + batch)))
            return [r for recs in outs for r in recs]
        if load.mode == "trace":
            return await _scheduled(run, load, w, list(schedule_s or []), prepare)
        n = load.num_requests or (None if load.duration_s else max(4 * (load.concurrency or 1), 16))
        if load.mode == "concurrency":
            c = load.concurrency or 1
            idx = range(w, w + n) if n else itertools.count(w)
            return await _concurrent(run, idx, c, load.duration_s, n)
        rate = load.request_rate
        if rate is None:
            raise ValueError("a rate load needs request_rate (Load validates it)")
        count = n or int(rate * (load.duration_s or 0.0) * 2 + 16)
        offsets = arrival_offsets_s(count, rate, load.burstiness, seed)
        return await _scheduled(run, load, w, offsets.tolist(), prepare)
    finally:
        lag.cancel()


async def _concurrent(run: _Run, indices, width: int, duration_s: float | None,
                      planned: int | None = None) -> list[RequestRecord]:
    """``width`` workers take the next index as soon as they are free."""
    it = iter(indices)
    out: list[tuple[int, list[RequestRecord]]] = []
    end = time.perf_counter_ns() + int(duration_s * 1e9) if duration_s else None

    async def worker() -> None:
        for i in it:
            t = time.perf_counter_ns()
            if (end is not None and t >= end) or run.stop:
                return
            out.append((i, await run.one(i, t)))

    await asyncio.gather(*(worker() for _ in range(width)))
    if run.stop and planned:
        run.stats.not_sent = planned - len(out)
    return [r for _, recs in sorted(out, key=lambda p: p[0]) for r in recs]


async def _sleep_until(t_ns: int) -> None:
    """Sleep until ``perf_counter_ns() >= t_ns``. Event-loop timers have 1 ms granularity
    (libuv's, under uvloop) and may wake up to 1 ms early; an early wake sleeps again, and
    the last fraction of a ms is waited by yielding to the loop."""
    while True:
        left = t_ns - time.perf_counter_ns()
        if left <= 0:
            return
        await asyncio.sleep(left / 1e9 if left > 200_000 else 0)


async def _scheduled(run: _Run, load: Load, first: int, offsets: list[float],
                     prepare: Callable[[int], None] | None) -> list[RequestRecord]:
    """Release unit ``first + k`` at ``t0 + offsets[k]``; an optional concurrency cap delays
    releases (``t_sched`` stays the scheduled time, so the wait shows as release lag)."""
    cap = asyncio.Semaphore(load.concurrency) if load.concurrency else None
    t0 = time.perf_counter_ns()
    end = t0 + int(load.duration_s * 1e9) if load.duration_s else None
    tasks = []

    async def capped(i: int, t_sched: int) -> list[RequestRecord]:
        assert cap is not None  # only used with a concurrency cap
        async with cap:
            return await run.one(i, t_sched)

    for k, off in enumerate(offsets):
        t_sched = t0 + int(off * 1e9)
        if end is not None and t_sched >= end:
            break
        if run.stop:
            run.stats.not_sent = len(offsets) - k
            break
        if prepare is not None:
            prepare(first + k)
        await _sleep_until(t_sched)
        tasks.append(asyncio.create_task(capped(first + k, t_sched) if cap else run.one(first + k, t_sched)))
    outs = await asyncio.gather(*tasks)
    return [r for recs in outs for r in recs]
