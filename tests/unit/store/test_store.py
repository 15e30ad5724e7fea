"""The SQLite store: round trip of records and power, newest attempt wins, version skew."""

import sqlite3
import time

import pytest

from infbench.data.schema import Cell, CellResult, DeviceInfo, PowerReading, RequestRecord
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


def test_client_details_round_trip_beside_the_servers_fields(tmp_path):
    """Serving-mode details (reasoning, sessions, streaming, the client's count) are stored in
    requests.server under `_client` and come back as the record's own fields."""
    s = Store(tmp_path / "r.db")
    r = result()
    recs = [RequestRecord(t_send_ns=10, t_sched_ns=5, t_tokens_ns=[20, 30], n_in=4, n_out=2, n_out_source="usage",
                          server={"timings": {"cache_n": 3}}, t_first_reasoning_ns=20, t_first_answer_ns=30,
                          n_reasoning=1, n_reasoning_source="usage", session=2, turn=3, n_in_client=5),
            RequestRecord(t_send_ns=10, t_tokens_ns=[50], n_out=9, streamed=False),
            RequestRecord(t_send_ns=10, t_tokens_ns=[50], n_out=1)]
    row = s.save_cell(s.begin_run({}), r.model_copy(update={"records": recs}))
    assert s.records(row) == recs
    raw = [x[0] for x in s.db.execute("SELECT server FROM requests WHERE cell_row=? ORDER BY idx", (row,))]
    assert '"_client"' in raw[0] and '"timings"' in raw[0] and raw[1] == '{"_client": {"streamed": false}}'
    assert raw[2] is None
