"""The fleet (device types from node reports), --device selection, per-type planning and
the driver's scheduler, on simulated nodes (no Ray)."""

from __future__ import annotations

import signal

import pytest

from infbench.errors import ConfigError
from infbench.fleet import Fleet, NodeReport, Scheduler, WorkItem, fleet_dict, plan_fleet, task_resources
from infbench.plan import Group
from infbench.schema import Cell, DeviceInfo, Sweep

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
    from infbench.executors.ray import _sigterm_interrupts

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
