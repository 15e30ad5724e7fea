"""The fleet (device types from node reports), --device selection, per-type planning and
the driver's scheduler, on simulated nodes (no Ray)."""

from __future__ import annotations

import signal

import pytest

from infbench.data.errors import ConfigError
from infbench.data.groups import Group
from infbench.data.schema import Cell, DeviceInfo, Sweep
from infbench.execution.executors.fleet import (
    Fleet,
    NodeReport,
    Scheduler,
    WorkItem,
    fleet_dict,
    plan_fleet,
    task_resources,
)

CPU = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU", count=1)
H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=4)
H100x8 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=8)
GAUDI = DeviceInfo(vendor="habana", kind="accelerator", model="HL-225", count=8)


def node(i, *devices, gpus=0, cpus=8):
    res = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return NodeReport(node_id=f"{i:056x}", hostname=f"n{i}", devices=[CPU, *devices], resources=res)


def fleet():
    return Fleet.from_reports([node(1, H100, gpus=4), node(2, H100, gpus=4), node(3, H100x8, gpus=8),
                               node(4, GAUDI), node(5)])


def test_types_by_signature_and_selection():
    f = fleet()
    assert [(t.label(), len(t.nodes)) for t in f.types] == [
        ("cpu Test CPU x1", 5), ("nvidia NVIDIA H100 80GB HBM3 x4", 2), ("nvidia NVIDIA H100 80GB HBM3 x8", 1),
        ("habana HL-225 x8", 1)]
    # by (vendor, model) for display; cell ids keep the count
    assert [len(v) for v in f.by_model().values()] == [1, 2, 1]
    assert [t.device.vendor for t in f.select()] == ["nvidia", "nvidia", "habana"]  # accelerators by default
    assert len(f.select("all")) == 4
    assert [t.device.count for t in f.select("NVIDIA H100 80GB HBM3")] == [4, 8]
    assert [t.device.vendor for t in f.select("cpu, habana")] == ["cpu", "habana"]
    with pytest.raises(ConfigError, match="matching 'tpu'") as e:
        f.select("tpu")
    assert "habana HL-225 x8" in e.value.hint
    assert [t.device.vendor for t in Fleet.from_reports([node(1)]).select()] == ["cpu"]
    with pytest.raises(ConfigError, match="no node"):
        Fleet.from_reports([]).select()
    d = fleet_dict(f)
    assert [g["nodes"] for g in d["device_groups"]] == [5, 3, 1] and len(d["nodes"]) == 5


def test_plan_once_per_type(pm, cpu):
    other = cpu.model_copy(update={"model": "Other CPU", "count": 2})
    f = Fleet.from_reports([NodeReport("a" * 56, "n1", devices=[cpu]), NodeReport("b" * 56, "n2", devices=[other])])
    sweep = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1, 2], input_len=[8],
                  output_len=[2])
    plans = plan_fleet(sweep, f.select("all"), pm)
    assert [p.device.model for p in plans] == [cpu.model, "Other CPU"]
    ids = [{c.cell_id(p.device) for c in p.cells} for p in plans]
    assert len(ids[0]) == 2 and not ids[0] & ids[1]  # the device is part of the cell id
    bad = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1], input_len=[8],
                output_len=[2], tensor_parallel_size=[2])
    with pytest.raises(ConfigError, match=f"cpu {cpu.model} x1: tensor_parallel_size 2"):
        plan_fleet(bad, f.select("all"), pm)


def items(device, tps, engine="vllm"):
    out = []
    for i, tp in enumerate(tps):
        c = Cell(model="m", engine=engine, dtype="bf16", batch=1, input_len=8, output_len=2, tensor_parallel_size=tp)
        out.append(WorkItem(i, device, Group(None, engine, "bf16", tp, [c]), [c]))
    return out


def test_gpu_nodes_share_out_their_gpus():
    f = Fleet.from_reports([node(1, H100, gpus=4), node(2, H100, gpus=4)])
    s = Scheduler(f, items(H100, [2, 2, 4, 1, 1, 2]))
    first = s.assign()
    # buckets of equal needs in order of first appearance: the tp=2 items fill node 1 and
    # half of node 2, the tp=4 item waits for a whole node, the tp=1 items fill node 2
    assert [(it.tensor_parallel_size, n.hostname) for it, n in first] == [(2, "n1"), (2, "n1"), (2, "n2"),
                                                                          (1, "n2"), (1, "n2")]
    assert s.pending() == 1 and s.assign() == []
    s.release(first[0][0])
    assert s.assign() == []  # 2 GPUs free on n1: not enough for tp=4
    s.release(first[1][0])
    assert [(it.tensor_parallel_size, n.hostname) for it, n in s.assign()] == [(4, "n1")]
    assert s.busy == {f.nodes[0].node_id: 4, f.nodes[1].node_id: 4}
    assert task_resources(H100, 2, f.nodes[0]) == {"num_cpus": 1.0, "num_gpus": 2}
    assert task_resources(H100, 2, f.nodes[0], engine_uses_ray=True) == {"num_cpus": 0, "num_gpus": 0}


def test_other_nodes_run_one_group_at_a_time_and_lost_nodes_get_nothing():
    f = Fleet.from_reports([node(1), node(2)])
    work = items(CPU, [1, 1, 1], engine="llama.cpp")
    s = Scheduler(f, work)
    got = s.assign()
    assert [n.hostname for _, n in got] == ["n1", "n2"] and s.pending() == 1
    assert task_resources(CPU, 1, f.nodes[0]) == {"num_cpus": 8, "num_gpus": 0}
    s.lose(f.nodes[1].node_id)
    s.release(got[1][0])
    s.requeue(got[1][0])  # its cells go back, first in line
    s.release(got[0][0])
    again = s.assign()
    assert [(it.key, n.hostname) for it, n in again] == [(1, "n1")]
    assert got[1][0].attempts == 2
    s.lose(f.nodes[0].node_id)
    assert not s.can_run(work[2])


def test_eligibility_excludes_nodes_without_the_engine():
    a, b = node(1), node(2)
    b.engines_missing = {"vllm": ["vllm"]}
    f = Fleet.from_reports([a, b])
    s = Scheduler(f, items(CPU, [1, 1]), lambda it, n: it.group.engine not in n.engines_missing)
    assert [n.hostname for _, n in s.assign()] == ["n1"]
    a.alive = False
    assert not s.can_run(items(CPU, [1])[0])


def test_sigterm_becomes_an_interrupt_and_composes():
    from infbench.execution.executors.ray import _sigterm_interrupts

    before = signal.getsignal(signal.SIGTERM)
    with _sigterm_interrupts(signal.SIG_DFL), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    seen = []

    def theirs(signum, frame):  # a process-wide SIGTERM -> KeyboardInterrupt conversion, kept as is
        seen.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, lambda *a: None)  # what ray.init puts there (sys.exit in Ray)
    with _sigterm_interrupts(theirs), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert seen == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is theirs
    signal.signal(signal.SIGTERM, before)


# -- splitting a group over free nodes (simulated fleets) --------------------------------------------------

from infbench.execution.executors.fleet import Estimates, Splitter, best_tail, simulate, split_item  # noqa: E402


def group_item(key, device, n, engine="llama.cpp", tp=1, output_len=16):
    """One group of ``n`` cells (batch 1..n) as a work item."""
    cells = [Cell(model="m", engine=engine, dtype="f16", batch=b, input_len=8, output_len=output_len,
                  tensor_parallel_size=tp) for b in range(1, n + 1)]
    return WorkItem(key, device, Group(None, engine, "f16", tp, cells), list(cells))


def fixed(cell_s, load_s):
    """Estimates that know every cell takes ``cell_s`` and every load ``load_s``."""
    return Estimates(predict=lambda it, c: cell_s, load=lambda it: load_s)


def test_best_tail_balances_the_two_parts():
    # 6 cells of 10 s, a new part loads for 4 s: cut after 3 or 4 cells; both finish by 34 s instead of 64 s
    k, before, after = best_tail(4.0, [10.0] * 6, 4.0, keep=1)
    assert before == 64.0 and after == 34.0 and k == 3
    # a part mid-cell may give away every cell it has not started (keep=0)
    assert best_tail(5.0, [10.0], 1.0, keep=0)[:2] == (0, 15.0)
    assert best_tail(0.0, [10.0], 1.0, keep=1) is None  # a part about to start keeps its only cell


def test_splits_a_lone_group_over_free_nodes_when_it_pays():
    f = Fleet.from_reports([node(1), node(2), node(3)])
    item = group_item(0, CPU, 6)
    sched = Scheduler(f, [item])
    [(it, n1)] = sched.assign()
    sp = Splitter(sched, fixed(10.0, 4.0), clock=lambda: 0.0)
    s = sp.propose([it])
    # two free nodes: shared three ways, each part finishing at (64 + 2 x 4) / 3 = 24 s: the tail 5, 6 first
    assert s is not None and not s.started and s.node.hostname != n1.hostname
    assert [c.batch for c in s.cells] == [5, 6] and s.before_s == 64.0 and s.after_s == 44.0
    new = split_item(it, s.cells, 1)
    sched.place(new, s.node)
    assert [c.batch for c in it.cells] == [1, 2, 3, 4] and new.split_from == 0 and new.key == 1
    # the third node takes the next share of the longest part; then every part ends by 24 s and no node is free
    s2 = sp.propose([it, new])
    assert s2.item is it and [c.batch for c in s2.cells] == [3, 4] and s2.after_s == 24.0
    assert s2.node.hostname not in (n1.hostname, s.node.hostname)
    sched.place(split_item(s2.item, s2.cells, 2), s2.node)
    assert sched.fit(it) is None and sp.propose([it, new]) is None
    # with one free node it is halved: 34 s each
    two = Scheduler(Fleet.from_reports([node(1), node(2)]), [group_item(0, CPU, 6)])
    [(it2, _)] = two.assign()
    h = Splitter(two, fixed(10.0, 4.0), clock=lambda: 0.0).propose([it2])
    assert [c.batch for c in h.cells] == [4, 5, 6] and h.after_s == 34.0


def test_no_split_when_the_load_outweighs_the_cells():
    f = Fleet.from_reports([node(1), node(2)])
    item = group_item(0, CPU, 6)
    sched = Scheduler(f, [item])
    [(it, _)] = sched.assign()
    # 6 cells of 0.5 s: a second copy of the model (10 s) never pays
    assert Splitter(sched, fixed(0.5, 10.0), clock=lambda: 0.0).propose([it]) is None
    # 6 cells of 2 s against a 3 s load: it pays (finish 15 s -> 9 s)
    assert Splitter(sched, fixed(2.0, 3.0), clock=lambda: 0.0).propose([it]) is not None
    # unknown cell times: no split (nothing to judge it by)
    assert Splitter(sched, Estimates(load=lambda it: 1.0), clock=lambda: 0.0).propose([it]) is None


def test_running_part_is_split_from_its_tail_and_held_after_an_empty_hand_off():
    f = Fleet.from_reports([node(1), node(2)])
    item = group_item(0, CPU, 6)
    sched = Scheduler(f, [item])
    [(it, _)] = sched.assign()
    p = it.progress
    p.started_at, p.cell, p.cell_at, p.done = 0.0, it.cells[1], 14.0, {it.cells[0].spec_hash()}
    sp = Splitter(sched, fixed(10.0, 4.0), clock=lambda: 15.0)
    s = sp.propose([it])
    # on cell 2 for 1 s (9 s left), 4 cells pending: the tail 5, 6 goes (9 + 20 = 29 s vs 4 + 20 = 24 s)
    assert s.started and [c.batch for c in s.cells] == [5, 6] and s.before_s == 49.0 and s.after_s == 29.0
    p.hold = True
    assert sp.propose([it]) is None


def test_parts_that_stay_whole_and_gpu_slots():
    f = Fleet.from_reports([node(1), node(2)])
    item = group_item(0, CPU, 6)
    sched = Scheduler(f, [item])
    sched.assign()
    assert Splitter(sched, fixed(10.0, 1.0), can_split=lambda it: False, clock=lambda: 0.0).propose([item]) is None
    # a GPU node with 4 GPUs holds a tp=2 part and its split on the same node; a tp=4 part needs another node
    g = Fleet.from_reports([node(1, H100, gpus=4)])
    two = group_item(0, H100, 6, engine="vllm", tp=2)
    sg = Scheduler(g, [two])
    sg.assign()
    s = Splitter(sg, fixed(10.0, 1.0), clock=lambda: 0.0).propose([two])
    assert s is not None and s.node.hostname == "n1"
    sg.place(split_item(two, s.cells, 1), s.node)
    assert sg.busy == {g.nodes[0].node_id: 4} and sg.fit(two) is None
    four = group_item(0, H100, 6, engine="vllm", tp=4)
    s4 = Scheduler(g, [four])
    s4.assign()
    assert Splitter(s4, fixed(10.0, 1.0), clock=lambda: 0.0).propose([four]) is None


def test_estimates_learn_from_the_run_and_prefer_stored_durations():
    item = group_item(0, CPU, 3)
    a, b, c = item.cells
    e = Estimates(predict=lambda it, x: 1.0 * x.batch, load=lambda it: 7.0)
    assert e.cell_s(item, b) == 2.0 and e.load_s(item) == 7.0
    e.observe_cell(item, a, 3.0)            # 3x slower than predicted: the group's other cells scale
    e.observe_load(item, 5.0)
    assert e.cell_s(item, c) == 9.0 and e.load_s(item) == 5.0
    stored = Estimates(predict=lambda it, x: 1.0, stored=lambda it, x: 42.0 if x is b else None)
    assert stored.cell_s(item, b) == 42.0 and stored.cell_s(item, c) == 1.0
    bare = Estimates(load=lambda it: 1.0)    # no prediction: the group's observed cells by their weight
    assert bare.cell_s(item, b) is None
    bare.observe_cell(item, a, 2.0)
    assert bare.cell_s(item, a) == 2.0 and bare.cell_s(item, c) > 2.0


def test_simulated_fleet_runs_every_cell_once_and_splitting_shortens_it():
    def run(split, n_nodes=4, cell=10.0, load=5.0):
        f = Fleet.from_reports([node(i) for i in range(1, n_nodes + 1)])
        work = [group_item(0, CPU, 12), group_item(1, CPU, 3)]
        planned = sorted(c.spec_hash() for it in work for c in it.cells)
        r = simulate(f, work, lambda it, c: cell, lambda it: load, split=split)
        assert sorted(h for h, _ in r.ran) == planned          # every cell measured once
        return r

    whole, split = run(False), run(True)
    assert whole.makespan_s == 5.0 + 12 * 10.0 and whole.loads == 2 and whole.splits == 0
    # 150 s of cells in 10 s steps over 4 nodes: at best 4 cells per node after one 5 s load (45 s); the
    # greedy splitter gets within one cell of it
    assert split.splits >= 2 and 45.0 <= split.makespan_s <= 45.0 + 10.0 and split.loads == 2 + split.splits
    assert split.cell_s == whole.cell_s == 150.0
    # cells far cheaper than a load: nothing is split
    tiny = run(True, cell=0.1, load=30.0)
    assert tiny.splits == 0
