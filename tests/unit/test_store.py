"""The SQLite store: round trip of records and power, newest attempt wins, version skew."""

import sqlite3
import time

import pytest

from infbench.schema import Cell, CellResult, DeviceInfo, PowerReading, RequestRecord
from infbench.store import Store, StoreVersionError

DEV = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


def result(status="ok", batch=1, error=None):
    c = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=batch, input_len=4, output_len=3)
    recs = [RequestRecord(t_send_ns=10, t_tokens_ns=[20, 30, 45], n_in=4, n_out=3)]
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status=status,
                      error=error, metrics={"output_tok_s": 1.0}, records=recs,
                      power=[PowerReading(t_ns=1, energy_j=2.0), PowerReading(t_ns=2, energy_j=3.5)],
                      started_at=time.time(), finished_at=time.time())


def test_round_trip(tmp_path):
    s = Store(tmp_path / "r.db")
    run = s.begin_run({"host": "h"})
    row = s.save_cell(run, result())
    s.finish_run(run, "completed")
    [r] = s.results()
    assert r["spec"]["batch"] == 1 and r["metrics"] == {"output_tok_s": 1.0} and r["run_id"] == run
    assert s.records(row)[0].t_tokens_ns == [20, 30, 45]
    assert [p.energy_j for p in s.power(row)] == [2.0, 3.5]
    assert s.runs()[0]["status"] == "completed" and s.runs()[0]["provenance"] == {"host": "h"}
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newest_attempt_decides_skip(tmp_path):
    s = Store(tmp_path / "r.db")
    run = s.begin_run({})
    failed = result("failed", error="OOM")
    s.save_cell(run, failed)
    assert s.finished_cell_ids() == set()
    s.save_cell(run, result("ok"))
    assert s.finished_cell_ids() == {failed.cell_id}
    assert len(s.results()) == 1 and len(s.results(all_attempts=True)) == 2
    assert s.results(run_id=run[:6])[0]["status"] == "ok"


def test_newer_schema_refused(tmp_path):
    p = tmp_path / "r.db"
    Store(p).close()
    db = sqlite3.connect(p)
    db.execute("PRAGMA user_version=999")
    db.commit()
    db.close()
    with pytest.raises(StoreVersionError, match="newer infbench"):
        Store(p)
