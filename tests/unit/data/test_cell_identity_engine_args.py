"""Engine arguments in a cell's identity (issue 33, item 2): cells without them keep the ids main
computed, each value is its own cell, only engines that read them see them, a run with them is
not skipped, and results, report and compare show the distinguishing arguments."""

from __future__ import annotations

import pytest

from infbench.data.schema import Cell, DeviceInfo, Load, Sweep
from tests.support.hostile import cli

# -- item 2: engine arguments are part of a cell's identity, and checked before a run -------------
PINNED_CPU = DeviceInfo(vendor="cpu", kind="cpu", model="AMD EPYC 7763 64-Core Processor")


PINNED_H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=8)


#: (cell, spec_hash, cell_id on PINNED_CPU, cell_id on PINNED_H100), computed on main at a6bda0c,
#: before engine arguments entered the identity: a cell without them keeps its id forever.
PINNED = [
    (Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=3),
     "f18da4b1b47feac5", "2dcc1215f64552ca", "b65a66bad91e11ac"),
    (Cell(model="smollm2-135m", engine="transformers", dtype="float16", batch=4, input_len=128, output_len=64, seed=3,
          warmup=2), "e640004e38d08e51", "c72d9b5608ab263e", "ffeeff561407616d"),
    (Cell(model="llama-3-8b", engine="vllm", dtype="bfloat16", batch=64, input_len=1024, output_len=128,
          tensor_parallel_size=8), "f2bd35fb9783721d", "c4f894cb75380a7d", "d923b0b77ec7f8f7"),
    (Cell(model="smollm2-135m", engine="llama.cpp-server", dtype="q8_0", batch=1, input_len=256, output_len=32,
          load=Load(mode="concurrency", concurrency=8, num_requests=64)),
     "3e3d91e6648b4f3b", "e0d2f303a8fea298", "435e3fb14198b56d"),
    (Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=2, input_len=64, output_len=16,
          prefix_len=32, num_prefixes=2, repeat=3), "28627022c5a13eb4", "b25f81e40a4699a4", "7908ab6ce3496cb8"),
]


@pytest.mark.parametrize("cell, spec_hash, on_cpu, on_h100", PINNED)
def test_cell_ids_without_engine_args_are_those_of_main(cell, spec_hash, on_cpu, on_h100):
    assert (cell.spec_hash(), cell.cell_id(PINNED_CPU), cell.cell_id(PINNED_H100)) == (spec_hash, on_cpu, on_h100)
    # {} is "none given" too
    assert cell.model_copy(update={"engine_args": {}}).cell_id(PINNED_CPU) == on_cpu
    assert Cell(**{**cell.model_dump(), "engine_args": {}}).spec_hash() == spec_hash


def test_planned_cells_without_engine_args_keep_their_ids(pm, cpu):
    """Planning without engine arguments gives the cells main planned (same spec, same id);
    with them, every id and spec hash changes, and each value is its own cell."""
    from infbench.plan import plan

    def cells(**kw):
        sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1, 2], input_len=[8],
                   output_len=[3], **kw)
        return plan(sw, cpu, pm).cells

    plain = cells()
    assert [c.cell_id(PINNED_CPU) for c in plain][0] == PINNED[0][2]
    assert all(c.engine_args is None for c in plain)
    four, eight = cells(engine_args={"n_ubatch": 4}), cells(engine_args={"n_ubatch": 8})
    assert all(c.engine_args == {"n_ubatch": 4} for c in four)
    ids = [{c.cell_id(PINNED_CPU) for c in cs} for cs in (plain, four, eight)]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])
    assert len({c.spec_hash() for c in plain + four + eight}) == 6
    assert "[n_ubatch=4]" in four[0].label()


def test_engine_args_only_enter_the_cells_of_engines_that_read_them(pm, cpu):
    from infbench.plan import plan

    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp", "transformers"], dtypes=["f16"], batch=[1],
               input_len=[8], output_len=[3], engine_args={"n_ubatch": 4})
    by_engine = {c.engine: c for c in plan(sw, cpu, pm).cells}
    assert by_engine["llama.cpp"].engine_args == {"n_ubatch": 4}
    assert by_engine["transformers"].engine_args is None  # transformers has no n_ubatch: its ids stay


def test_a_run_with_engine_args_is_not_skipped(tmp_path, cpu):
    """The probe: `run --engine-arg ...` after a plain run printed "skipped ... already
    stored ok". It is now a new cell, stored beside the first."""
    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.run import RunOptions
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.plan import plan
    from infbench.store import Store

    fpm = testing.plugin_manager()
    store = Store(tmp_path / "r.db")
    ex = InProcessExecutor(fpm, {"test": True})

    def run(**kw):
        sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1], input_len=[16],
                   output_len=[4], **kw)
        return ex.run(plan(sw, cpu, fpm), store, RunOptions(engine_options=dict(kw.get("engine_args") or {})),
                      ev.ignore)

    assert len(run().ok) == 1
    tuned = run(engine_args={"ttft_s": 0.002})
    assert len(tuned.ok) == 1 and not tuned.skipped
    assert len(run(engine_args={"ttft_s": 0.002}).skipped) == 1      # the same arguments: already stored
    stored = {r["cell_id"]: r["spec"].get("engine_args") for r in store.results()}
    assert sorted(map(str, stored.values())) == ["None", "{'ttft_s': 0.002}"]
    store.close()


def test_results_report_and_compare_show_the_distinguishing_arguments(tmp_path):
    from infbench.report.compare import compare_rows
    from infbench.report.data import flat_row
    from infbench.report.tables import result_row
    from infbench.store import Store
    from tests.support.hostile import DEV, cell_result

    s = Store(tmp_path / "s.db")
    base = cell_result(1)
    tuned_cell = base.cell.model_copy(update={"engine_args": {"n_ubatch": 4}})
    tuned = base.model_copy(update={"cell": tuned_cell, "cell_id": tuned_cell.cell_id(DEV),
                                    "spec_hash": tuned_cell.spec_hash()})
    ra, rb = s.begin_run({"host": "t"}, command="a"), s.begin_run({"host": "t"}, command="b")
    s.save_cell(ra, base)
    s.save_cell(rb, tuned)
    rows = {r["run_id"]: r for r in s.results()}
    a, b = rows[ra], rows[rb]
    assert result_row(b)["engine_args"] == "n_ubatch=4" and "engine_args" not in result_row(a)
    assert "[n_ubatch=4]" in flat_row(b)["label"] and flat_row(b)["engine_args"] == "n_ubatch=4"
    res = compare_rows([a], [b])
    assert len(res["pairs"]) == 1 and "[no engine args vs n_ubatch=4]" in res["pairs"][0]["label"]
    out = cli("results", "--store", tmp_path / "s.db", code=0).output
    assert "n_ubatch=4" in out
    s.close()

