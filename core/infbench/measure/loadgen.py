"""The load generator of serving mode: batch, fixed concurrency, or request rate.

It decides *when* each request is released and leaves sending and timestamping to a
``send(index, t_sched_ns)`` coroutine (:class:`infbench.engines.openai.OpenAIEngine`),
so the generator does no per-token work. Arrival times for ``rate`` are drawn up front
from a seeded gamma distribution with shape ``burstiness`` and mean ``1/request_rate``
(shape 1 = Poisson), as vLLM's ``benchmarks/serve.py`` does. Every record carries
``t_sched_ns`` (release time) beside ``t_send_ns`` (hand-off to the HTTP client), so a
client that falls behind its schedule shows as queue wait, not as TTFT.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import numpy as np

from infbench.schema import Load, RequestRecord

Send = Callable[[int, int], Awaitable[RequestRecord]]


def arrival_offsets_s(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Cumulative arrival offsets in s of ``n`` requests at mean ``rate`` req/s.

    Inter-arrival times ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)); the first
    request arrives at 0.
    """
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


async def _guard(send: Send, i: int, t_sched: int, timeout_s: float | None) -> RequestRecord:
    try:
        if timeout_s is None:
            return await send(i, t_sched)
        return await asyncio.wait_for(send(i, t_sched), timeout_s)
    except TimeoutError:
        return RequestRecord(t_send_ns=t_sched, t_sched_ns=t_sched, error=f"timeout after {timeout_s} s")


async def run_load(send: Send, load: Load, n_prompts: int, batch: int = 1, seed: int = 0) -> list[RequestRecord]:
    """Offer requests per ``load`` and return the timed records (warm-up excluded).

    Args:
        send: sends prompt ``index % n_prompts`` and returns its record; must not raise.
        load: the load spec. ``batch`` mode sends ``batch`` requests at once.
        n_prompts: prompts available (reused round-robin).
        batch: requests of ``batch`` mode.
        seed: seed of the arrival times.

    Requests are indexed from 0 over warm-up and timed parts, so timed requests never
    reuse the warm-up's prompts when enough prompts exist.
    """
    w = load.warmup_requests
    if w:
        width = load.concurrency or w
        await _concurrent(send, range(w), min(width, w), None, load.timeout_s)
    if load.mode == "batch":
        now = time.perf_counter_ns()
        idx = range(w, w + batch)
        return list(await asyncio.gather(*(_guard(send, i, now, load.timeout_s) for i in idx)))
    n = load.num_requests or (None if load.duration_s else max(4 * (load.concurrency or 1), 16))
    if load.mode == "concurrency":
        c = load.concurrency or 1
        idx = range(w, w + n) if n else itertools.count(w)
        return await _concurrent(send, idx, c, load.duration_s, load.timeout_s)
    return await _rate(send, load, w, n, seed)


async def _concurrent(send: Send, indices, width: int, duration_s: float | None,
                      timeout_s: float | None) -> list[RequestRecord]:
    """``width`` workers take the next index as soon as they are free."""
    it = iter(indices)
    out: list[tuple[int, RequestRecord]] = []
    end = time.perf_counter_ns() + int(duration_s * 1e9) if duration_s else None

    async def worker() -> None:
        for i in it:
            t = time.perf_counter_ns()
            if end is not None and t >= end:
                return
            out.append((i, await _guard(send, i, t, timeout_s)))

    await asyncio.gather(*(worker() for _ in range(width)))
    return [r for _, r in sorted(out, key=lambda p: p[0])]


async def _rate(send: Send, load: Load, first: int, n: int | None, seed: int) -> list[RequestRecord]:
    """Release request k at t0 + offset_k; an optional concurrency cap delays releases."""
    cap = asyncio.Semaphore(load.concurrency) if load.concurrency else None
    count = n or int(load.request_rate * load.duration_s * 2 + 16)
    offsets = arrival_offsets_s(count, load.request_rate, load.burstiness, seed)
    t0 = time.perf_counter_ns()
    end = t0 + int(load.duration_s * 1e9) if load.duration_s else None
    tasks = []

    async def one(i: int, t_sched: int) -> RequestRecord:
        if cap is None:
            return await _guard(send, i, t_sched, load.timeout_s)
        async with cap:
            return await _guard(send, i, t_sched, load.timeout_s)

    for k, off in enumerate(offsets):
        t_sched = t0 + int(off * 1e9)
        if end is not None and t_sched >= end:
            break
        delay = (t_sched - time.perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(first + k, t_sched)))
    return list(await asyncio.gather(*tasks))
