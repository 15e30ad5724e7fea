"""Serving load spread over client nodes, the cluster-free parts: how a cell's schedule is
shared out, and how the nodes' records are merged into one cell on one clock."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.data.schema import Cell, Load, RequestRecord
from infbench.measure.derive import cell_metrics, ttft_s
from infbench.measure.loadgen import arrival_offsets_s
from infbench.measure.remote_load import NodeOutput, Timed, merge, partition, shares_of


def serving(load, **kw):
    return Cell(model="m", engine="llama.cpp-server", dtype="f16", batch=1, input_len=8, output_len=4, load=load, **kw)


def test_counts_are_shared_round_robin():
    assert shares_of(10, 3) == [4, 3, 3] and shares_of(None, 2) == [None, None] and sum(shares_of(7, 4)) == 7


def test_concurrency_is_shared_and_every_prompt_goes_to_one_node():
    c = serving(Load(mode="concurrency", concurrency=5, num_requests=12, warmup_requests=3))
    prompts = [f"p{i}" for i in range(15)]
    shares = partition(c, prompts, 2)
    assert [s.cell.load.concurrency for s in shares] == [3, 2]
    assert [s.cell.load.num_requests for s in shares] == [6, 6]
    assert [s.cell.load.warmup_requests for s in shares] == [2, 1]
    assert shares[0].prompts == ["p0", "p2", "p3", "p5", "p7", "p9", "p11", "p13"]
    assert sorted(p for s in shares for p in s.prompts) == sorted(prompts)
    assert all(s.cell.spec_hash() != c.spec_hash() for s in shares) and shares[0].method == "concurrency shares"
    # never more nodes than requests in flight
    one = partition(serving(Load(mode="concurrency", concurrency=1, num_requests=4)), ["a"] * 4, 3)
    assert len(one) == 1 and one[0].cell.load.num_requests == 4
    # no count given: each node sends its share of what one client would (max(4 c, 16))
    default = partition(serving(Load(mode="concurrency", concurrency=4)), ["a"] * 64, 2)
    assert [s.cell.load.num_requests for s in default] == [8, 8]


def test_poisson_rate_becomes_independent_streams():
    c = serving(Load(mode="rate", request_rate=8.0, num_requests=40), seed=3)
    shares = partition(c, list(range(40)), 4)
    assert [s.cell.load.request_rate for s in shares] == [2.0] * 4
    assert [s.cell.load.num_requests for s in shares] == [10] * 4
    seeds = {s.cell.seed for s in shares}
    assert len(seeds) == 4 and shares[0].method == "poisson streams"
    # the superposition of the nodes' streams has the cell's rate (many arrivals, so the mean is close)
    merged = np.sort(np.concatenate([arrival_offsets_s(20000, s.cell.load.request_rate, 1.0, s.cell.seed)
                                     for s in shares]))
    assert abs(1 / np.diff(merged[:20000]).mean() - 8.0) < 0.4


def test_bursty_rate_deals_the_one_schedule_and_traces_go_by_request():
    c = serving(Load(mode="rate", request_rate=4.0, burstiness=0.5, num_requests=9), seed=1)
    shares = partition(c, [f"p{i}" for i in range(9)], 2)
    offsets = arrival_offsets_s(9, 4.0, 0.5, 1).tolist()
    assert [s.cell.load.mode for s in shares] == ["trace", "trace"] and shares[0].method == "dealt schedule"
    assert [p.record.t_s for p in shares[1].prompts] == offsets[1::2]
    assert [p.materialize() for p in shares[1].prompts] == ["p1", "p3", "p5", "p7"]
    trace = serving(Load(mode="trace", trace_speed=2.0))
    reqs = [Timed(f"t{i}", type(shares[0].prompts[0].record)(i * 0.5)) for i in range(5)]
    ts = partition(trace, reqs, 2)
    assert [[p.record.t_s for p in s.prompts] for s in ts] == [[0.0, 1.0, 2.0], [0.5, 1.5]]
    assert all(s.cell.load.trace_speed == 2.0 for s in ts) and ts[0].method == "trace by request"
    with pytest.raises(ValueError, match="batch"):
        partition(serving(Load(mode="batch")), ["a"], 2)


def rec(t0, ttft_ms=50, n=4, tpot_ms=10):
    toks = [t0 + int(ttft_ms * 1e6) + i * int(tpot_ms * 1e6) for i in range(n)]
    return RequestRecord(t_send_ns=t0, t_sched_ns=t0, t_tokens_ns=toks, n_in=8, n_out=n, n_out_source="usage")


def test_merge_shifts_whole_records_so_clock_skew_never_enters_ttft():
    # node A's perf clock starts at 1e12, node B's at 5e9; B's wall clock is 2.5 s ahead of ours
    a = NodeOutput({"node_id": "a" * 56, "hostname": "ha"}, [rec(10**12 + i * 10**8) for i in range(3)],
                   anchor_perf_ns=10**12, anchor_wall_ns=1_000_000 * 10**9, offset_ns=0, rtt_ns=2 * 10**5,
                   metrics={"client_lag_p99_ms": 0.4, "client": {"behind": [], "loop_lag_ms": {"p99": 0.4}}})
    b = NodeOutput({"node_id": "b" * 56, "hostname": "hb"}, [rec(5 * 10**9 + i * 10**8, ttft_ms=70) for i in range(2)],
                   anchor_perf_ns=5 * 10**9, anchor_wall_ns=1_000_002 * 10**9 + 5 * 10**8, offset_ns=25 * 10**8,
                   rtt_ns=4 * 10**5, late_ns=3 * 10**6,
                   metrics={"client_lag_p99_ms": 1.5, "client": {"behind": ["lag"], "loop_lag_ms": {"p99": 1.5}}},
                   warnings=["w"])
    ours_perf, ours_wall = 7 * 10**9, 1_000_000 * 10**9
    records, m, warnings, _ = merge([a, b], ours_perf, ours_wall)
    assert len(records) == 5 and {r.client_node for r in records} == {"a" * 12, "b" * 12}
    # per-record latencies are the node's own differences, unchanged
    assert sorted(round(ttft_s(r), 6) for r in records) == [0.05] * 3 + [0.07] * 2
    # both nodes started at the same instant of our clock (B's offset removed): sends interleave from there
    assert [r.t_send_ns - ours_perf for r in records] == [0, 0, 10**8, 10**8, 2 * 10**8]
    cm = cell_metrics(records)
    assert cm["n_completed"] == 5 and abs(cm["duration_s"] - (0.2 + 0.05 + 0.03)) < 1e-9
    c = m["client"]
    assert m["client_lag_p99_ms"] == 1.5 and c["behind"] == ["bbbbbbbbbbbb: lag"]
    assert warnings == ["client node bbbbbbbbbbbb: w"]
    assert [n["requests"] for n in c["nodes"]] == [3, 2] and c["nodes"][1]["clock_offset_s"] == 2.5
    assert c["nodes"][1]["clock_error_s"] == 2e-4 and c["spread"]["clock_error_s"] == 2e-4
    assert c["nodes"][1]["start_late_s"] == 0.003


def test_load_nodes_needs_a_cluster_and_a_measuring_process_with_ray(pm, monkeypatch):
    from infbench.contract.registry import engine_specs
    from infbench.data.errors import ConfigError
    from infbench.data.run_config import RunConfig
    from infbench.data.schema import Sweep
    from infbench.execution.orchestrator import spread_nodes

    def checked_request(**flags):
        return RunConfig.from_flags(flags)

    specs = engine_specs(pm)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    serving_sweep = Sweep(models=["tiny-random-llama"], engines=["llama.cpp-server"], dtypes=["f16"], batch=[1],
                          input_len=[8], output_len=[4])
    endpoint = Sweep(models=["m"], engines=["openai"], dtypes=["auto"], batch=[1], input_len=[8], output_len=[4])
    notes: list[str] = []
    with pytest.raises(ConfigError, match="none was given"):
        spread_nodes(checked_request(load_nodes=2), "inprocess", serving_sweep, specs, notes)
    with pytest.raises(ConfigError, match="worker image"):
        spread_nodes(checked_request(load_nodes=2, ray_address="h:1"), "container", serving_sweep, specs, notes)
    with pytest.raises(ConfigError, match="worker image"):
        spread_nodes(checked_request(load_nodes=2, ray_address="h:1", container_runtime="docker", executor="ray"),
                     "ray", serving_sweep, specs, notes)
    assert spread_nodes(checked_request(load_nodes=3, ray_address="h:1"), "inprocess", serving_sweep, specs,
                        notes) == 3
    assert spread_nodes(checked_request(), "inprocess", serving_sweep, specs, notes) is None and not notes
    # --executor ray with only an endpoint: its load from every node (0), said in a note
    assert spread_nodes(checked_request(ray_address="h:1", executor="ray"), "ray", endpoint, specs, notes) == 0
    assert "every node of the cluster" in notes[0]
    assert spread_nodes(checked_request(ray_address="h:1", executor="ray"), "ray", serving_sweep, specs,
                        []) is None
