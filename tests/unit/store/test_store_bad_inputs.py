"""Bad stores (issue 14, sections 1 and 2): paths that are not a store, a store failing its
integrity check, read-only folders and homes, a bad stored cell, a foreign or old SQLite file
opened by the readers (never rewritten, never upgraded), a missing store; store errors are
configuration errors."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from infbench import SCHEMA_VERSION
from infbench.data.errors import ConfigError
from infbench.store import Store, StoreError
from tests.support.hostile import (
    cli,
    corrupt_table,
    digest,
    make_store,
    readonly_dir,
    worker_folder,
)


# -- section 1: stores and output paths ------------------------------------------------
@pytest.fixture
def bad_stores(tmp_path):
    good = make_store(tmp_path / "good.db")
    data = good.read_bytes()
    (tmp_path / "text.db").write_text("not a database\n")
    (tmp_path / "random.db").write_bytes(os.urandom(8192))
    (tmp_path / "truncated.db").write_bytes(data[:1000])
    (tmp_path / "folder.db").mkdir()
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(data)
    corrupt_table(corrupt)
    return {"text": tmp_path / "text.db", "random": tmp_path / "random.db", "truncated": tmp_path / "truncated.db",
            "folder": tmp_path / "folder.db", "devnull": "/dev/null", "corrupt": corrupt}


@pytest.mark.parametrize("kind", ["text", "random", "truncated", "folder", "devnull", "corrupt"])
def test_bad_store_paths(bad_stores, kind, tmp_path):
    path = bad_stores[kind]
    before = digest(path) if kind != "folder" and kind != "devnull" else None
    for args in (["results"], ["results", "--format", "json"], ["export", "--format", "csv"], ["report", "--out",
                 tmp_path / "rep"], ["ingest", worker_folder(tmp_path / "w")]):
        r = cli(*args, "--store", path)
        assert str(path) in r.output
    r = cli("run", "--model", "tiny", "--batch", "1", "--store", path)
    assert str(path) in r.output
    r = cli("compare", f"{path}" if str(path).endswith(".db") else "0a", "0b", code=2)
    if before is not None:
        assert digest(path) == before


def test_run_refuses_a_store_failing_integrity_check(tmp_path):
    p = make_store(tmp_path / "s.db")
    corrupt_table(p, "requests")  # results still read (cells intact); writing here would spread the damage
    before = digest(p)
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "2", "--store", p)
    assert "damaged" in r.output and "integrity_check" in r.output and ".recover" in r.output
    assert digest(p) == before


def test_readonly_folder_and_home(tmp_path, monkeypatch):
    good = make_store(tmp_path / "good.db").read_bytes()
    with readonly_dir(tmp_path, {"s.db": good}) as ro:
        # reading a store on a read-only file system works and changes nothing
        r = cli("results", "--store", ro / "s.db", "--format", "json", code=0)
        assert len(json.loads(r.stdout)) == 2
        cli("compare", f"{ro / 's.db'}", f"{ro / 's.db'}", "--json", code=0)
        # writing there is a clear error
        assert "cannot" in cli("run", "--model", "tiny", "--batch", "1", "--store", ro / "new.db").output
        assert "read-only" in cli("run", "--model", "tiny", "--batch", "1", "--store", ro / "s.db").output
        assert "cannot" in cli("ingest", worker_folder(tmp_path / "w"), "--store", ro / "new.db").output
        monkeypatch.setenv("INFBENCH_HOME", str(ro / "home"))
        assert "cannot" in cli("run", "--model", "tiny", "--batch", "1").output


def test_one_bad_stored_cell_never_breaks_the_readers(tmp_path):
    """A cell stored by something else with ``metrics.ttft_s = "fast"``: results, report,
    export and compare show the store; the bad value is shown as missing."""
    p = make_store(tmp_path / "s.db")
    db = sqlite3.connect(p)
    m = json.loads(db.execute("SELECT metrics FROM cells WHERE id=1").fetchone()[0])
    m.update(ttft_s="fast", output_tok_s=[1], total_tok_s=float("nan"))
    db.execute("UPDATE cells SET metrics=? WHERE id=1", (json.dumps(m),))
    db.commit()
    db.close()
    r = cli("results", "--store", p, code=0)
    assert "tiny-random-llama" in r.output
    rows = json.loads(cli("results", "--store", p, "--format", "json", code=0).stdout)
    assert rows[0]["metrics"]["ttft_s"] is None and set(rows[0]["metrics"]["invalid"]) == {"ttft_s", "output_tok_s",
                                                                                         "total_tok_s"}
    cli("export", "--store", p, "--format", "csv", code=0)
    cli("export", "--store", p, "--format", "lib-csv", code=0)
    cli("report", "--store", p, "--out", tmp_path / "rep", "--no-static", code=0)
    cli("compare", f"{p}", f"{p}", code=0)


def test_readers_never_rewrite_a_foreign_sqlite_file(tmp_path):
    f = tmp_path / "theirs.db"
    db = sqlite3.connect(f)
    db.execute("CREATE TABLE accounts (id INTEGER, name TEXT)")
    db.execute("INSERT INTO accounts VALUES (1, 'x')")
    db.commit()
    db.close()
    before = digest(f)
    for args in (["results"], ["export"], ["report", "--out", tmp_path / "r"], ["run", "--model", "tiny",
                                                                               "--batch", "1"]):
        r = cli(*args, "--store", f)
        assert "not an infbench results store" in r.output
    assert "not an infbench results store" in cli("compare", f"{f}", f"{f}").output
    assert digest(f) == before and not (tmp_path / "theirs.db-wal").exists()
    c = sqlite3.connect(f)
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert c.execute("PRAGMA user_version").fetchone()[0] == 0


def test_readers_open_an_old_store_without_upgrading_it(tmp_path):
    from pathlib import Path

    src = Path(__file__).parents[2] / "fixtures" / "stores" / "schema1-2935f24.db"
    p = tmp_path / "old.db"
    p.write_bytes(src.read_bytes())
    before = digest(p)
    rows = json.loads(cli("results", "--store", p, "--format", "json", "--all", code=0).stdout)
    assert [r["status"] for r in rows] == ["ok", "failed"]
    cli("export", "--store", p, code=0)
    cli("compare", f"{p}", f"{p}", "--json", code=0)
    assert digest(p) == before
    assert sqlite3.connect(p).execute("PRAGMA user_version").fetchone()[0] == 1
    assert Store(p).migrated  # a writer upgrades it
    assert sqlite3.connect(p).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_missing_store_for_readers(tmp_path):
    cli("results", code=0)  # the default store does not exist yet: a hint, not an error
    assert "no results store" in cli("results", "--store", tmp_path / "typo.db").output
    assert not (tmp_path / "typo.db").exists()
    with pytest.raises(StoreError, match="no results store"):
        Store(tmp_path / "typo.db", readonly=True)


def test_store_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        Store(tmp_path)

