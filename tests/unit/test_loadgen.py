"""The load generator's schedule, with a send coroutine that only sleeps (no server)."""

import asyncio
import time

import numpy as np
import pytest

from infbench.measure.loadgen import arrival_offsets_s, run_load
from infbench.schema import Load, RequestRecord


def test_arrivals_poisson_and_bursty():
    gaps = np.diff(arrival_offsets_s(20001, rate=4.0, burstiness=1.0, seed=1))
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)          # exponential: CV = 1
    bursty = np.diff(arrival_offsets_s(20001, rate=4.0, burstiness=0.25, seed=1))
    assert bursty.mean() == pytest.approx(0.25, rel=0.05)
    assert (bursty.std() / bursty.mean()) ** 2 == pytest.approx(4.0, rel=0.1)  # gamma: CV^2 = 1/shape


class Recorder:
    def __init__(self, delay=0.02):
        self.delay, self.inflight, self.peak, self.sent = delay, 0, 0, []

    async def __call__(self, i, t_sched):
        t_send = time.perf_counter_ns()
        self.sent.append(i)
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        await asyncio.sleep(self.delay)
        self.inflight -= 1
        return RequestRecord(t_send_ns=t_send, t_sched_ns=t_sched, t_tokens_ns=[time.perf_counter_ns()], n_out=1)


def test_concurrency_keeps_n_in_flight_and_excludes_warmup():
    rec = Recorder()
    out = asyncio.run(run_load(rec, Load(mode="concurrency", concurrency=3, num_requests=9, warmup_requests=2), 20))
    assert len(out) == 9 and rec.peak == 3
    assert rec.sent[:2] == [0, 1] and len(rec.sent) == 11    # warm-up first, not returned


def test_batch_releases_all_at_once():
    rec = Recorder()
    out = asyncio.run(run_load(rec, Load(mode="batch", warmup_requests=0), 8, batch=5))
    assert len(out) == 5 and rec.peak == 5 and len({r.t_sched_ns for r in out}) == 1


def test_rate_follows_schedule_and_duration_limit():
    rec = Recorder(delay=0.001)
    t0 = time.perf_counter_ns()
    out = asyncio.run(run_load(rec, Load(mode="rate", request_rate=50.0, num_requests=20, warmup_requests=0), 20,
                               seed=3))
    offs = arrival_offsets_s(20, 50.0, 1.0, 3)
    sched = np.array([r.t_sched_ns for r in out]) - out[0].t_sched_ns
    assert np.allclose(sched / 1e9, offs, atol=1e-6)
    assert all(r.t_send_ns >= r.t_sched_ns for r in out) and out[0].t_sched_ns >= t0
    limited = asyncio.run(run_load(Recorder(0.001), Load(mode="rate", request_rate=100.0, duration_s=0.2,
                                                          warmup_requests=0), 10))
    assert 5 <= len(limited) <= 60


def test_timeout_is_a_failed_record():
    out = asyncio.run(run_load(Recorder(delay=1.0), Load(mode="batch", timeout_s=0.05, warmup_requests=0), 2,
                               batch=2))
    assert [r.error for r in out] == ["timeout after 0.05 s"] * 2
