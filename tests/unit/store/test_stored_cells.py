"""Store.results() returns typed stored cells (issue 40, item 5): the result, its run and its
attempt, read through attributes and the metric table; the dict view 1.x scripts used still reads."""

from __future__ import annotations

import json
import time

import pytest

from infbench.data import metrics as M
from infbench.data.metrics import field
from infbench.data.schema import Cell, CellResult, DeviceInfo, RequestRecord
from infbench.data.stored import StoredCell
from infbench.store import Store

DEV = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


def result(batch=1, status="ok", metrics=None):
    c = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=batch, input_len=4, output_len=3)
    recs = [RequestRecord(t_send_ns=10, t_tokens_ns=[20, 30, 45], n_in=4, n_out=3)]
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status=status,
                      error=None if status == "ok" else "RuntimeError: OOM",
                      metrics=metrics if metrics is not None else {"ttft_s": {"p50": 0.25}, "suspect": "a; b"},
                      records=recs, started_at=time.time(), finished_at=time.time(), wall_s=1.5)


def test_results_are_typed_with_their_run_and_attempt(tmp_path):
    s = Store(tmp_path / "r.db")
    run1 = s.begin_run({})
    s.save_cell(run1, result(status="failed", metrics={}))
    s.save_cell(run1, result(batch=2))
    run2 = s.begin_run({})
    s.save_cell(run2, result())
    newest = s.results()
    assert all(isinstance(r, StoredCell) for r in newest)
    by_batch = {r.spec["batch"]: r for r in newest}
    assert by_batch[1].run_id == run2 and by_batch[1].attempt == 2 and by_batch[1].ok
    assert by_batch[2].run_id == run1 and by_batch[2].attempt == 1
    every = s.results(all_attempts=True)
    assert [(r.spec["batch"], r.attempt, r.status) for r in every] == [(1, 1, "failed"), (2, 1, "ok"), (1, 2, "ok")]
    assert every[0].failed and every[0].error == "RuntimeError: OOM"
    # the attempt counts every run, also when only one run is read
    assert [r.attempt for r in s.results(run_id=run2)] == [2]
    assert [r.id for r in every] == sorted(r.id for r in every)


def test_metrics_are_read_through_the_metric_table(tmp_path):
    s = Store(tmp_path / "r.db")
    s.save_cell(s.begin_run({}), result())
    [r] = s.results()
    assert M.TTFT.value(r.metrics, "p50") == 0.25 and M.TTFT.col("p50").flat(r.metrics) == 250.0
    assert r.suspect == "a; b" and r.field("suspect") == field(r.metrics, "suspect") == "a; b"
    assert r.field("client") is None and not r.predicted and not r.published
    with pytest.raises(KeyError, match="is a metric: read it with its MetricDef"):
        r.field("ttft_s")
    with pytest.raises(KeyError, match="not a declared field"):
        r.field("suspcet")


def test_the_dict_view_of_1x_scripts_still_reads(tmp_path):
    s = Store(tmp_path / "r.db")
    run = s.begin_run({})
    s.save_cell(run, result())
    [r] = s.results()
    assert r["status"] == "ok" and r["run_id"] == run and r["metrics"]["ttft_s"]["p50"] == 0.25
    assert r.get("nothing") is None and "attempt" in r
    d = dict(r)
    assert d == r.to_dict() and d["wall_s"] == 1.5
    assert json.loads(json.dumps(r.to_dict()))["spec"]["batch"] == 1
    with pytest.raises(TypeError):
        r["status"] = "failed"  # read-only: the store is the truth


def test_from_row_and_from_result_fill_what_a_row_lacks():
    res = result()
    c = StoredCell.from_result(res, "run-1", status="predicted")
    assert c.run_id == "run-1" and c.status == "predicted" and c.predicted and c.spec == res.cell.spec()
    assert c.device["model"] == "Test CPU" and c.wall_s == 1.5 and c.attempt == 1 and c.id is None
    w = StoredCell.from_row({"cell_id": "x", "status": "ok", "metrics": {"published": True}, "other": 1})
    assert w.cell_id == "x" and w.spec == {} and w.run_id == "" and w.published and w.engine == {}
    assert StoredCell.from_row({"cell_id": "y"}).status == "failed"
