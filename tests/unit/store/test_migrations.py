"""Store migrations: every earlier schema's fixture store (written by that version's own
code, tests/fixtures/stores/build.py) opens, migrates and reads with nothing lost; a
store newer than the code is refused."""

import shutil
import sqlite3
from pathlib import Path

import pytest

from infbench import SCHEMA_VERSION
from infbench.data.schema import Cell, CellResult, DeviceInfo, RequestRecord
from infbench.store import Store, StoreError, StoreVersionError, migrations

FIXTURES = sorted((Path(__file__).parents[2] / "fixtures" / "stores").glob("schema*.db"))


def test_schema_version_is_the_newest_migration():
    assert migrations.latest() == SCHEMA_VERSION
    assert [m.version for m in migrations.migrations()] == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_old_store_migrates_without_loss(fixture, tmp_path):
    db = tmp_path / fixture.name
    shutil.copy(fixture, db)
    old = sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0]
    s = Store(db)
    assert [m.version for m in s.migrated] == [m.version for m in migrations.migrations() if m.version > old]
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    rows = s.results(all_attempts=True)
    assert [(r["status"], r["spec"]["batch"]) for r in rows] == [("ok", 2), ("failed", 4)]
    assert rows[1]["error"] == "OOM: fixture"
    assert rows[0]["metrics"]["output_tok_s"] == 500.0
    recs = s.records(rows[0]["id"])
    assert [r.t_tokens_ns for r in recs] == [[11_000_000 + i * 1_000_000 + k * 2_000_000 for k in range(4)]
                                             for i in range(2)]
    assert all(r.t_sched_ns is None and r.server is None for r in recs)
    assert [p.power_w for p in s.power(rows[0]["id"])] == [50.0, 52.0]
    assert s.runs()[0]["status"] == "completed_with_failures"
    # the migrated store takes new cells with every current column
    dev = DeviceInfo(vendor="cpu", kind="cpu", model="x")
    cell = Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2)
    rec = RequestRecord(t_send_ns=0, t_tokens_ns=[5, 9], n_in=8, n_out=2, t_sched_ns=0, server={"a": 1})
    row = s.save_cell(rows[0]["run_id"], CellResult(cell_id=cell.cell_id(dev), spec_hash=cell.spec_hash(), cell=cell,
                                                    device=dev, status="ok", records=[rec], started_at=1.0,
                                                    finished_at=2.0))
    assert s.records(row)[0].server == {"a": 1}
    s.close()
    again = Store(db)  # a second open applies nothing
    assert again.migrated == []
    names = [r[0] for r in again.db.execute("SELECT name FROM _migrations ORDER BY version")]
    # schema 1 predates the record; later stores were created by the migrations themselves
    assert names == [m.name for m in migrations.migrations() if old > 1 or m.version > 1]
    assert {r[1] for r in again.db.execute("PRAGMA table_info(quality)")} >= {"quality_key", "weights_sha256",
                                                                            "text_sha256", "n_ctx", "value"}
    assert {r[1] for r in again.db.execute("PRAGMA table_info(claims)")} >= {"cell_id", "run_id", "pid"}
    assert {r[1] for r in again.db.execute("PRAGMA table_info(runs)")} >= {"host", "pid", "pid_started"}


def test_newer_store_refused(tmp_path):
    db = tmp_path / "new.db"
    c = sqlite3.connect(db)
    c.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(StoreVersionError, match=f"store schema {SCHEMA_VERSION + 1}.*reads {SCHEMA_VERSION}"):
        Store(db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_failed_migration_rolls_back(tmp_path, monkeypatch):
    db = tmp_path / "s.db"
    shutil.copy(FIXTURES[0], db)

    def boom(conn):
        conn.execute("ALTER TABLE requests ADD COLUMN t_sched_ns INTEGER")
        raise sqlite3.OperationalError("disk I/O error (injected)")

    ms = migrations.migrations()
    monkeypatch.setattr(migrations, "migrations", lambda: [ms[0], migrations.Migration(2, "boom", boom)])
    with pytest.raises(StoreError, match="cannot write the results store .*injected"):
        Store(db)
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "t_sched_ns" not in {r[1] for r in c.execute("PRAGMA table_info(requests)")}
