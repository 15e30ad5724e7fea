"""Issue 14, sections 1, 2 and 6: every bad input of the hostile-user review gets a clear
error (exit 2, a message naming the file or value), never a traceback, never a silently
wrong result, and stored data is never changed by a command that failed or only reads.

The CLI runs in-process (:func:`tests.support.hostile.cli` fails on any escaped
exception), so these are fast; runs of a real engine are in
``tests/integration/test_fault_injection.py``.
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import time

import pytest
from rich.console import Console

from infbench import SCHEMA_VERSION
from infbench.data.errors import ConfigError
from infbench.store import Store, StoreError
from tests.support.hostile import (
    cell_result,
    cli,
    corrupt_table,
    digest,
    make_store,
    readonly_dir,
    worker_folder,
)

DRY = ["run", "--model", "tiny", "--dry-run"]


# -- section 1: sweep files ----------------------------------------------------------
def test_binary_sweep_file(tmp_path):
    f = tmp_path / "b.yaml"
    f.write_bytes(os.urandom(2000).replace(b"\xef", b"\xff"))
    r = cli("run", "--sweep", f, "--dry-run")
    assert "not UTF-8 text" in r.output and "b.yaml" in r.output


def test_deeply_nested_sweep_file(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("models: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nesting deeper than" in cli("run", "--sweep", f, "--dry-run").output
    f.write_text("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 200)))
    assert "nesting deeper than" in cli("run", "--sweep", f, "--dry-run").output


def test_alias_bomb_is_refused_with_a_short_message(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("models: *i")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    r = cli("run", "--sweep", f, "--dry-run")
    assert time.monotonic() - t0 < 30  # not a timing assertion: a bomb takes hours or all memory
    assert "alias" in r.output and len(r.output) < 2000
    # a few aliases are fine: the message of a wrong value stays short however long the value
    f.write_text("x: &x [" + ",".join(["1"] * 5000) + "]\nbatch: *x\nmodels: [" + "a" * 100_000 + "]\n")
    r = cli("run", "--sweep", f, "--dry-run")
    assert len(r.output) < 3000


def test_duplicate_keys_are_refused(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("batch: [1]\nmodels: [tiny]\nbatch: [2]\n")
    r = cli("run", "--sweep", f, "--dry-run")
    assert "duplicate key 'batch'" in r.output and "line 3" in r.output


@pytest.mark.parametrize("yaml_text, message", [
    ("batch: [true]", "batch.0"),
    ("batch: [1.0e+23]", "batch.0"),
    ("batch: [100000000]", "at most 1,000,000"),
    ('batch: ["4"]', "batch.0"),
    ("models: [1]", "models.0"),
    ("warmup: true", "warmup"),
    ("seed: -1", "seed"),
    ("cell_timeout_s: .inf", "finite"),
    ("request_rate: [.nan]", "request_rate"),
    ("1: 2", "'1'"),
    ("preset: [quick]", "unknown preset"),
    ("- a\n- b", "must hold a mapping"),
])
def test_strict_sweep_types(tmp_path, yaml_text, message):
    f = tmp_path / "s.yaml"
    f.write_text(yaml_text + "\n")
    assert message in cli("run", "--sweep", f, "--dry-run").output


@pytest.mark.parametrize("flags, message", [
    (["--batch", ","], "--batch was given no value"),
    (["--batch", "1e23"], "--batch takes integers"),
    (["--batch", "99999999999"], "at most"),
    (["--threads", "0"], "--threads"),
    (["--engine-arg", "bogus_knob=5"], "bogus_knob"),
    (["--engine-arg", "n_ubatc=5"], "did you mean: n_ubatch"),
    (["--power-interval", "0"], "--power-interval"),
    (["--seed", "-3"], "seed"),
])
def test_bad_flags(flags, message):
    assert message in cli(*DRY, *flags).output


def test_known_engine_arg_is_accepted():
    cli(*DRY, "--engine-arg", "n_ubatch=256", code=0)


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


@pytest.mark.parametrize("where", ["readonly", "missing-parent", "proc"])
def test_output_paths(tmp_path, where):
    store = make_store(tmp_path / "s.db")
    with readonly_dir(tmp_path) as ro:
        base = {"readonly": ro, "missing-parent": ro / "no" / "such", "proc": "/proc/infbench-test"}[where]
        for args in (["export", "--format", "csv", "--out", f"{base}/x.csv"],
                     ["export", "--format", "lib-csv", "--out", f"{base}/x.csv"],
                     ["report", "--no-static", "--out", f"{base}/rep"],
                     ["compare", f"{store}", f"{store}", "--out", f"{base}/cmp.html"],
                     ["run", "--model", "tiny", "--write-spec", f"{base}/spec.json"]):
            if args[0] != "run":
                args += ["--store", store] if args[0] != "compare" else []
            r = cli(*args)
            assert "cannot write" in r.output and str(base) in r.output


# -- section 1/2: ingest ------------------------------------------------------------
def _ingest_refused(folder, store, *expected):
    before = digest(store)
    r = cli("ingest", folder, "--store", store)
    flat = " ".join(r.output.split())  # the printer wraps at the terminal's width; tmp paths differ in length
    for e in expected:
        assert e in flat, r.output
    assert digest(store) == before  # nothing stored, not even an empty run
    return r


@pytest.mark.parametrize("provenance, message", [
    ("[1, 2]", "must hold a JSON object"),
    ('"just a string"', "must hold a JSON object"),
    ("{broken", "missing or unreadable"),
])
def test_ingest_malformed_provenance(tmp_path, provenance, message):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w")
    (w / "provenance.json").write_text(provenance)
    _ingest_refused(w, store, message)


def test_ingest_bad_fields_and_files(tmp_path):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w1", status={"not": "a status"})
    _ingest_refused(w, store, "status", "is not one of")
    w = worker_folder(tmp_path / "w2", provenance=["a", "list"])
    _ingest_refused(w, store, "'provenance' must be an object")
    w = worker_folder(tmp_path / "w3")
    (w / "cells.jsonl").write_bytes((w / "cells.jsonl").read_bytes() + b'{"cell_id": "\xff\xfe"}\n')
    _ingest_refused(w, store, "line 3", "not UTF-8")
    w = worker_folder(tmp_path / "w4")
    (w / "cells.jsonl").unlink()
    (w / "cells.jsonl").mkdir()
    _ingest_refused(w, store, "cells.jsonl is not a file")
    w = worker_folder(tmp_path / "w5")
    (w / "cells.jsonl").unlink()
    _ingest_refused(w, store, "cells.jsonl is missing")


def _mutated(**change):
    r = cell_result(2)
    d = json.loads(r.model_dump_json())
    for path, value in change.items():
        node = d
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return d


@pytest.mark.parametrize("change, message", [
    ({"metrics.ttft_s.p50": -5.0}, "do not match its raw records"),
    ({"metrics.output_tok_s": 1e12}, "output_tok_s"),
    ({"metrics.ttft_s": "fast"}, "not numbers"),
    ({"records": []}, "status ok with no request records"),
    ({"spec_hash": "0" * 16}, "is not the hash of its spec"),
    ({"cell_id": "f" * 16}, "does not match its spec and device"),
    ({"cell.batch": 3}, "is not the hash of its spec"),
    ({"status": "maybe"}, "status"),
])
def test_ingest_validates_every_cell(tmp_path, change, message):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w")
    good = (w / "cells.jsonl").read_text()
    (w / "cells.jsonl").write_text(good + json.dumps(_mutated(**change)) + "\n")
    _ingest_refused(w, store, message, "nothing was stored")


def test_ingest_records_with_time_running_backwards(tmp_path):
    store = make_store(tmp_path / "s.db")
    d = _mutated()
    d["records"][0]["t_tokens_ns"] = [d["records"][0]["t_send_ns"] - 5_000_000_000] * 3
    w = worker_folder(tmp_path / "w")
    (w / "cells.jsonl").write_text(json.dumps(d) + "\n")
    _ingest_refused(w, store, "token times before the send")


def test_ingest_is_one_transaction_and_keeps_a_cut_last_line(tmp_path):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w", cells=[cell_result(1), cell_result(2), cell_result(3)])
    text = (w / "cells.jsonl").read_text()
    (w / "cells.jsonl").write_text(text[:-40])  # the worker was killed while writing cell 3
    r = cli("ingest", w, "--store", store, "--json", code=0)
    res = json.loads(r.stdout)
    assert res["ok"] == 2 and res["skipped_lines"] == 1 and res["status"] == "completed"
    s = Store(store, readonly=True)
    assert len(s.runs()) == 2 and len(s.results(run_id=res["run_id"])) == 2


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


def test_ingested_text_is_printed_without_control_characters(tmp_path):
    store = make_store(tmp_path / "s.db")
    evil = "tiny\x1b]0;pwned\x07\x1b[2J"
    w = worker_folder(tmp_path / "w", cells=[cell_result(1, model=evil),
                                             cell_result(1, status="failed", error="boom \x1b[31mred\x9b2J")])
    cli("ingest", w, "--store", store, code=0)
    for args in (["results"], ["results", "--format", "csv"], ["export", "--format", "csv"],
                 ["export", "--format", "lib-csv"], ["results", "--status", "failed"]):
        out = cli(*args, "--store", store, code=0).stdout
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), (args, out)
    assert "tiny" in cli("results", "--store", store, "--format", "csv", code=0).stdout


# -- section 2: other commands ------------------------------------------------------
@pytest.mark.parametrize("a, b", [("", ""), ("%", "_"), ("'; DROP TABLE cells; --", "x")])
def test_compare_needs_real_sides(tmp_path, a, b):
    p = make_store(tmp_path / "s.db")
    r = cli("compare", a, b, "--store", p)
    assert "neither a run id" in r.output


def test_run_ids_are_prefixes_not_patterns(tmp_path):
    p = make_store(tmp_path / "s.db")
    assert "not a run id" in cli("results", "--store", p, "--run", "%").output
    assert "not a run id" in cli("export", "--store", p, "--run", "_").output
    assert "not a run id" in cli("report", "--store", p, "--run", "").output
    s = Store(p, readonly=True)
    assert s.results(run_id="%") == [] and s.results(run_id="_") == []


def test_results_status_is_checked(tmp_path):
    p = make_store(tmp_path / "s.db")
    r = cli("results", "--store", p, "--status", "bogus")
    assert "unknown status 'bogus'" in r.output and "ok, failed" in r.output
    r = cli("results", "--store", p, "--status", "failed", code=0)
    assert "no results with status failed" in r.output and "run `infbench run` first" not in r.output


def test_site_config_problems(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    site.write_bytes(b"\x00\xffbinary\x80garbage")
    for args in (["detect"], ["detect", "--json"], DRY):
        r = cli(*args)
        assert str(site) in r.output and "not UTF-8" in r.output
    site.write_text('[cerebas]\nbase_url = "https://x/v1"\n')
    r = " ".join(cli("detect").output.split())
    assert "[cerebas]" in r and "did you mean: cerebras" in r
    assert "[cerebas]" in cli(*DRY).output
    site.write_text('[containers]\nmount_roots = ["/scratch"]\n[sambanova]\napi_key_env = "K"\n')
    cli("detect", code=0)


def test_detect_exit_status_on_plugin_errors(monkeypatch):
    from infbench import hookimpl
    from infbench.contract.manager import build_plugin_manager

    class Broken:
        @hookimpl
        def infbench_detect(self):
            raise RuntimeError("driver \x1b[31mexploded\x1b[0m")

    pm = build_plugin_manager()
    pm.register(Broken(), name="broken")
    monkeypatch.setattr("infbench.cli.common.plugin_manager", lambda: pm)
    monkeypatch.setattr("infbench.cli.detect_cmd.plugin_manager", lambda: pm)
    r = cli("detect", code=1)
    assert "plugin broken failed to detect" in r.output and "\x1b" not in r.output
    det = json.loads(cli("detect", "--json", code=1).stdout)
    assert det["errors"][0]["plugin"] == "broken" and det["devices"]


def test_dataset_with_a_non_utf8_line(tmp_path):
    f = tmp_path / "chats.jsonl"
    ok = json.dumps({"messages": [{"role": "user", "content": "hi there you"},
                                  {"role": "assistant", "content": "hello to you too"}]})
    f.write_bytes((ok + "\n").encode() + b'{"messages": "\xff\xfe"}\n')
    r = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", f, "--dry-run")
    assert f"{f}:2" in r.output and "not UTF-8" in r.output


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

    src = Path(__file__).parents[1] / "fixtures" / "stores" / "schema1-2935f24.db"
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


# -- section 6: numbers are never cut ------------------------------------------------
def _rows_with_big_numbers(tmp_path):
    p = make_store(tmp_path / "s.db", cells=3)
    db = sqlite3.connect(p)
    for (i, m) in db.execute("SELECT id, metrics FROM cells").fetchall():
        m = json.loads(m)
        m.update(output_tok_s=1593.123456 * 10**i, total_tok_s=26731.5 * 10**i, mbu=0.5, mfu=0.25)
        db.execute("UPDATE cells SET metrics=? WHERE id=?", (json.dumps(m), i))
    db.commit()
    return Store(p, readonly=True).results()


@pytest.mark.parametrize("width", [40, 60, 80, 120, 160])
def test_results_table_never_cuts_a_number(tmp_path, width):
    from infbench.report.tables import _fmt, print_results

    rows = _rows_with_big_numbers(tmp_path)
    c = Console(width=width, file=io.StringIO(), force_terminal=False)
    print_results(c, rows)
    text = c.file.getvalue()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    for r in rows:
        for v, digits in ((r["metrics"]["output_tok_s"], 1), (r["metrics"]["total_tok_s"], 1)):
            assert _fmt(v, 1, digits) in text
        assert "tiny-random-llama" in text.replace("\n", "").replace("│", "").replace(" ", "") or width < 60


def test_piped_results_are_whole(tmp_path):
    rows = _rows_with_big_numbers(tmp_path)
    p = rows[0]
    store = tmp_path / "s.db"
    r = cli("results", "--store", store, code=0)  # not a terminal: 160 columns, split if needed
    assert "…" not in r.stdout and "tiny-random-llama" in r.stdout
    assert f"{p['metrics']['output_tok_s']:,.1f}" in r.stdout

