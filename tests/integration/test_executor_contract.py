"""The executor contract (:class:`infbench.execution.executors.Executor`), checked the same way for
every executor with the real llama.cpp engine: each pending cell ends as exactly one
stored attempt with the plan's cell id; typed events arrive in order; stored-ok cells are
skipped and ``force`` measures them again; the run's status and provenance are recorded.

An executor joins by adding a factory to ``FACTORIES`` (its fixtures may skip where its
runtime is missing: the container executor needs the CPU worker image, the Ray executor
a local two-node Ray cluster). Events are in order per node (``event.node``): the Ray
executor runs groups on several nodes at once.
"""

from __future__ import annotations

import pytest

from infbench.data import events as ev
from infbench.data.run import RunOptions
from infbench.data.schema import Sweep
from infbench.detect import detect
from infbench.execution.bookkeeping import provenance
from infbench.execution.executors.container import ContainerExecutor
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.plan import plan
from infbench.store import Store

pytestmark = pytest.mark.integration


@pytest.fixture
def inprocess(pm):
    return lambda prov: InProcessExecutor(pm, prov)


@pytest.fixture
def container(pm, cpu_image, tmp_path):
    from infbench.runtimes import container_runtime

    return lambda prov: ContainerExecutor(pm, container_runtime("docker"), prov, job_root=tmp_path / "jobs")


@pytest.fixture
def ray(pm, ray_cluster):
    from infbench.execution.executors.ray import RayExecutor

    ray_cluster.connect()
    return lambda prov: RayExecutor(pm, prov)


FACTORIES = ["inprocess", "container", "ray"]


@pytest.fixture(params=FACTORIES)
def make_executor(request):
    return request.getfixturevalue(request.param)


def test_executor_contract(make_executor, pm, tmp_path):
    det = detect(pm)
    dev = det.devices[0]
    sweep = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16", "q8_0"], batch=[1, 2],
                  input_len=[16], output_len=[4])
    p = plan(sweep, dev, pm)
    store = Store(tmp_path / "r.db")
    prov = provenance(det, pm)
    ex = make_executor(prov)
    seen = ev.Collector()
    s = ex.run(p, store, RunOptions(), seen)

    # every cell: exactly one stored attempt, ok, with the plan's ids and forced lengths
    want = {c.cell_id(dev): c for c in p.cells}
    rows = store.results(all_attempts=True)
    assert sorted(r["cell_id"] for r in rows) == sorted(want)
    assert {r["spec_hash"] for r in rows} == {c.spec_hash() for c in p.cells}
    for r in rows:
        c = want[r["cell_id"]]
        assert r["status"] == "ok", r["error"]
        assert r["metrics"]["n_completed"] == c.batch and r["metrics"]["n_out_total"] == c.batch * c.output_len
        assert len(store.records(r["id"])) == c.batch
    assert len(s.ok) == len(p.cells) and not s.failed and not s.skipped
    assert {r.cell_id for r in s.ok} == set(want)

    # typed events: each group loads once, before its cells (on its node); each cell
    # starts, then finishes once; on one node, one cell at a time
    loads = seen.of(ev.GroupLoading)
    assert sorted(g.group.label() for g in loads) == sorted(g.label() for g in p.groups)
    finished = [e.result.cell_id for e in seen.of(ev.CellFinished)]
    assert sorted(finished) == sorted(want)
    by_node: dict = {}
    for e in seen.events:
        if isinstance(e, (ev.GroupLoading, ev.CellStarted, ev.CellFinished)):
            by_node.setdefault(e.node, []).append(e)
    if set(by_node) == {None}:  # one place (this host, one container): groups load in plan order
        assert [g.group.label() for g in loads] == [g.label() for g in p.groups]
    for events in by_node.values():
        loaded: set[str] = set()
        order = [e for e in events if not isinstance(e, ev.GroupLoading)]
        for e in events:
            if isinstance(e, ev.GroupLoading):
                loaded.add(e.group.label())
            elif isinstance(e, ev.CellStarted):
                assert next(g.label() for g in p.groups if e.cell in g.cells) in loaded
        for i in range(0, len(order), 2):
            assert isinstance(order[i], ev.CellStarted) and isinstance(order[i + 1], ev.CellFinished)
            assert order[i].cell.spec_hash() == order[i + 1].result.cell.spec_hash()

    run = store.runs()[0]
    assert run["status"] == "completed" and run["run_id"] == s.run_id
    assert run["provenance"]["infbench_version"] and run["provenance"]["devices"]

    # a re-run skips every stored-ok cell and stores nothing
    again = ev.Collector()
    s2 = ex.run(p, store, RunOptions(), again)
    assert len(s2.skipped) == len(p.cells) and not s2.ok and not s2.failed
    assert len(again.of(ev.CellSkipped)) == len(p.cells) and not again.of(ev.CellFinished)
    assert len(store.results(all_attempts=True)) == len(p.cells)
    assert store.runs()[0]["status"] == "completed"

    # force measures every cell again: one more attempt each, the newest is current
    s3 = ex.run(p, store, RunOptions(force=True), ev.Collector())
    assert len(s3.ok) == len(p.cells)
    assert len(store.results(all_attempts=True)) == 2 * len(p.cells)
    assert {r["run_id"] for r in store.results()} == {s3.run_id}
