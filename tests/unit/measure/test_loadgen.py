"""The load generator's schedule, with a send coroutine that only sleeps (no server)."""

import asyncio
import time

import numpy as np
import pytest

from infbench.data.schema import Load, RequestRecord
from infbench.measure.loadgen import arrival_offsets_s, run_load


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
    assert [r.error for r in out] == ["timeout after 0.05 s (--request-timeout)"] * 2


def test_trace_schedule_is_the_traces_own_and_warmup_stays_out():
    rec = Recorder(delay=0.001)
    sched = [0.0, 0.010, 0.010, 0.045, 0.060]
    out = asyncio.run(run_load(rec, Load(mode="trace", trace_speed=1.0, warmup_requests=2), 7, schedule_s=sched))
    assert len(out) == 5 and rec.sent[:2] == [0, 1] and sorted(rec.sent[2:]) == [2, 3, 4, 5, 6]
    rel = [(r.t_sched_ns - out[0].t_sched_ns) / 1e9 for r in out]
    assert rel == pytest.approx(sched, abs=1e-9)               # released per the trace, to the ns
    assert all(r.t_send_ns >= r.t_sched_ns for r in out)       # never before its time


def test_prepare_is_called_before_each_release():
    prepared = []
    out = asyncio.run(run_load(Recorder(0.0), Load(mode="trace", trace_speed=2.0, warmup_requests=0), 3,
                               schedule_s=[0, 0.005, 0.01], prepare=prepared.append))
    assert prepared == [0, 1, 2] and len(out) == 3


def test_unresponsive_server_stops_the_cell_after_one_timeout_per_stream():
    from infbench.measure.loadgen import LoadStats

    rec, stats = Recorder(delay=10.0), LoadStats()
    out = asyncio.run(run_load(rec, Load(mode="concurrency", concurrency=2, num_requests=50, timeout_s=0.05,
                                         warmup_requests=0), 50, stats=stats))
    # both streams time out once; one of them may have taken a third request meanwhile
    assert 2 <= len(out) <= 3 and all("timeout after 0.05 s" in r.error for r in out)
    assert "none completed" in stats.stopped and stats.not_sent == 50 - len(out)


def test_default_request_timeout():
    from infbench.measure.loadgen import DEFAULT_REQUEST_TIMEOUT_S, request_timeout_s

    assert request_timeout_s(Load()) == DEFAULT_REQUEST_TIMEOUT_S == 600.0
    assert request_timeout_s(Load(timeout_s=5)) == 5


def test_sessions_return_several_records_and_lag_is_sampled():
    from infbench.measure.loadgen import LoadStats

    async def session(i, t_sched):
        recs = []
        for _ in range(3):
            recs.append(await Recorder(0.02)(i, t_sched))
        return recs

    stats = LoadStats()
    out = asyncio.run(run_load(session, Load(mode="concurrency", concurrency=2, num_requests=4, warmup_requests=0),
                               4, stats=stats, guard=False))
    assert len(out) == 12 and len(stats.loop_lag_ms) >= 5 and min(stats.loop_lag_ms) >= 0
