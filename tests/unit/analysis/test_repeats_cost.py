"""``--repeat N``: distinct ids per repeat (the first keeps the unrepeated id), grouping back,
the 95 % t-interval; ``--price-per-hour``: USD per million output tokens."""

import math

import pytest

from infbench.analysis.repeats import base_cell_id, fmt_ci, repeat_groups, t_interval
from infbench.data.schema import Cell, CellResult, DeviceInfo, Sweep
from infbench.data.stored import StoredCell
from infbench.measure.cost import cost_metrics, usd_per_mtok
from infbench.plan import plan
from infbench.store import Store


def test_t_interval_matches_the_t_distribution():
    d = t_interval([10.0, 12.0, 14.0])
    # s = 2, t_{0.975, 2} = 4.302653, half-width = 4.302653 * 2 / sqrt(3)
    assert d["mean"] == 12.0 and d["std"] == pytest.approx(2.0) and d["n"] == 3
    assert d["ci95"] == pytest.approx(4.302653 * 2 / math.sqrt(3), rel=1e-6)
    assert d["min"] == 10.0 and d["max"] == 14.0 and d["cv"] == pytest.approx(2 / 12)
    assert t_interval([5.0])["ci95"] is None and t_interval([])["n"] == 0
    assert fmt_ci(d) == "12.00 ± 4.97"


def test_repeat_ids_are_distinct_and_the_first_keeps_the_unrepeated_id(pm, cpu):
    base = dict(models=["tiny"], engines=["llama.cpp"], dtypes=["f32"], batch=[1, 2], input_len=[8], output_len=[4])
    one = plan(Sweep(**base), cpu, pm).cells
    three = plan(Sweep(**base, repeat=3), cpu, pm).cells
    assert len(three) == 6 and [c.repeat for c in three] == [None, None, 2, 2, 3, 3]
    assert [c.cell_id(cpu) for c in three[:2]] == [c.cell_id(cpu) for c in one]   # unchanged ids
    assert len({c.cell_id(cpu) for c in three}) == 6
    assert three[2].label().endswith("#2")
    assert [c.seed for c in three] == [0, 0, 7919, 7919, 15838, 15838]      # fresh prompts per repeat
    rows = [StoredCell(cell_id=c.cell_id(cpu), spec_hash=c.spec_hash(), run_id="", status="ok", spec=c.model_dump(),
                       device=cpu.model_dump()) for c in three]
    assert [base_cell_id(r) for r in rows] == [c.cell_id(cpu) for c in one] * 3


def test_repeat_groups_from_the_store(tmp_path):
    dev = DeviceInfo(vendor="cpu", kind="cpu", model="x")
    store = Store(tmp_path / "r.db")
    run = store.begin_run({})
    c = Cell(model="tiny", engine="llama.cpp", dtype="f32", batch=1, input_len=8, output_len=4)
    from infbench.analysis.repeats import repeat_cell

    for rep, tok_s in ((None, 100.0), (2, 110.0), (3, 90.0)):
        cell = repeat_cell(c, rep) if rep else c
        m = {"output_tok_s": tok_s, "ttft_s": {"p50": tok_s / 1e4}, "n_out_total": 40, "duration_s": 0.4}
        store.save_cell(run, CellResult(cell_id=cell.cell_id(dev), spec_hash=cell.spec_hash(), cell=cell, device=dev,
                                        status="ok", metrics=m, started_at=0, finished_at=1))
    other = c.model_copy(update={"batch": 2})
    store.save_cell(run, CellResult(cell_id=other.cell_id(dev), spec_hash=other.spec_hash(), cell=other, device=dev,
                                    status="ok", metrics={"output_tok_s": 5.0}, started_at=0, finished_at=1))
    (g,) = repeat_groups(store.results())          # the single cell is not a group
    assert g["cell_id"] == c.cell_id(dev) and g["n"] == 3
    m = g["metrics"]["output_tok_s"]
    assert m["values"] == [100.0, 110.0, 90.0] and m["mean"] == pytest.approx(100.0)
    assert m["ci95"] == pytest.approx(4.302653 * 10 / math.sqrt(3), rel=1e-6)
    assert g["metrics"]["ttft_ms_p50"]["mean"] == pytest.approx(10.0)


def test_usd_per_mtok_formula():
    # docs/metrics.md: price_per_hour / 3600 x duration_s / (sum n_out / 1e6)
    assert usd_per_mtok(3.6, 100.0, 1_000_000) == pytest.approx(0.1)
    assert usd_per_mtok(2.0, 10.0, 0) is None and usd_per_mtok(2.0, None, 10) is None
    with pytest.raises(ValueError):
        usd_per_mtok(-1, 1, 1)
    assert cost_metrics({"duration_s": 36.0, "n_out_total": 500_000}, 10.0) == {
        "price_per_hour_usd": 10.0, "usd_per_mtok": pytest.approx(0.2)}
