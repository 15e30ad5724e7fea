"""Cells handed from a running worker to another one (the Ray driver splitting a group):
the marker protocol, a worker that skips what was handed off, and a sweep part split in two."""

from __future__ import annotations

import threading

import pytest

from infbench import testing
from infbench.data import events as ev
from infbench.data import handoff
from infbench.data.run import RunOptions, RunSummary
from infbench.data.schema import Sweep
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.execution.executors.raynode import hand_off_here
from infbench.execution.scenarios import make_scenario
from infbench.execution.scenarios.find_max import FindMax
from infbench.execution.scenarios.scoring import Perplexity
from infbench.execution.session import RunContext
from infbench.plan import plan
from infbench.store import Store


def test_each_cell_is_taken_once(tmp_path):
    assert handoff.take(tmp_path, "ab12") and not handoff.take(tmp_path, "ab12", handoff.HANDED)
    assert handoff.taken_by(tmp_path, "ab12") == "worker" and handoff.taken_by(tmp_path, "cd34") is None
    assert handoff.hand_off(tmp_path, ["ab12", "cd34", "ef56"]) == ["cd34", "ef56"]
    assert not handoff.take(tmp_path, "cd34") and handoff.taken_by(tmp_path, "cd34") == "handed"
    with pytest.raises(ValueError, match="spec hash"):
        handoff.take(tmp_path, "../../etc/passwd")


def test_racing_takers_never_both_win(tmp_path):
    hashes = [f"{i:016x}" for i in range(200)]
    won: dict[str, list[str]] = {"worker": [], "handed": []}

    def racer(who):
        for h in hashes:
            if handoff.take(tmp_path, h, who):
                won[who].append(h)

    threads = [threading.Thread(target=racer, args=(w,)) for w in won]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won["worker"] + won["handed"]) == hashes and not set(won["worker"]) & set(won["handed"])


def test_node_side_hand_off_finds_the_job_folder(infbench_home):
    out = infbench_home / "jobs" / "ray-run-3-1" / "out"
    handoff.take(out, "aa")                      # the worker started this one
    assert hand_off_here("ray-run-3-1", ["aa", "bb"]) == ["bb"]
    with pytest.raises(ValueError):
        hand_off_here("../elsewhere", ["cc"])


def test_worker_skips_cells_handed_off(cpu, tmp_path):
    fpm = testing.plugin_manager()
    p = plan(Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1, 2, 3, 4],
                   input_len=[16], output_len=[4]), cpu, fpm)
    out = tmp_path / "out"
    handed = handoff.hand_off(out, [c.spec_hash() for c in p.cells[2:]])
    seen = ev.Collector()
    store = Store(tmp_path / "w.db")
    s = InProcessExecutor(fpm, {}, take=lambda c: handoff.take(out, c.spec_hash())).run(
        p, store, RunOptions(force=True), seen)
    assert len(handed) == 2 and [r.cell.batch for r in s.ok] == [1, 2] and s.status == "completed"
    assert [e.reason for e in seen.of(ev.CellSkipped)] == ["handed to another worker"] * 2
    assert sorted(r["spec"]["batch"] for r in store.results()) == [1, 2]


def test_sweep_part_splits_into_disjoint_parts_with_the_same_claims(cpu, tmp_path):
    fpm = testing.plugin_manager()
    p = plan(Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1, 2, 3, 4, 5, 6],
                   input_len=[16], output_len=[4]), cpu, fpm)
    sc = make_scenario(p)
    store = Store(tmp_path / "r.db")
    ctx = RunContext(fpm, cpu, store, RunSummary(store.begin_run({}, "x")))
    (part,) = sc.parts(ctx)
    assert sc.splits and not FindMax.splits and not Perplexity.splits
    new = sc.split(part, part.group.cells[4:])
    assert [c.batch for c in part.group.cells] == [1, 2, 3, 4] and [c.batch for c in part.expected] == [1, 2, 3, 4]
    assert [c.batch for c in new.group.cells] == [5, 6] == [c.batch for c in new.expected]
    assert new.group.key() == part.group.key() and new.spec == part.spec
    from infbench.store import claims

    assert set(claims.live_claims(store)) == {c.cell_id(cpu) for c in p.cells}   # claimed once, by this run
    # a worker of the first part that finishes its four cells leaves nothing of it to do
    part.results.extend(ctx.fail(c, "x") for c in part.group.cells)
    assert sc.resume(part) is None and sc.resume(new) is not None
