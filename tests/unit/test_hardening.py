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
from infbench.errors import ConfigError
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
    for e in expected:
        assert e in r.output, r.output
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
    from infbench.plugins import build_plugin_manager

    class Broken:
        @hookimpl
        def infbench_detect(self):
            raise RuntimeError("driver \x1b[31mexploded\x1b[0m")

    pm = build_plugin_manager()
    pm.register(Broken(), name="broken")
    monkeypatch.setattr("infbench.cli.common.plugin_manager", lambda: pm)
    monkeypatch.setattr("infbench.cli.detect.plugin_manager", lambda: pm)
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


# ===========================================================================================
# Issue 22: one boundary for inputs, outputs and secrets (every example of the issue)
# ===========================================================================================
import csv as _csv  # noqa: E402
import io as _io  # noqa: E402
from pathlib import Path  # noqa: E402

from tests.support.hostile import assert_no_secret, store_dump  # noqa: E402

SECRET = "hunter2SECRET"
FIXTURE_CSV = Path(__file__).parents[1] / "fixtures" / "lib_published_3dev.csv"
LIB_HEAD = "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput\n"


def _store_with_models(path: Path, models: list[str]) -> Path:
    """A store of one run whose ok cells carry these model names (one cell each)."""
    from tests.support.hostile import cell_result

    s = Store(path)
    run = s.begin_run({"host": "test"}, command="infbench run (test)")
    for i, m in enumerate(models, 1):
        s.save_cell(run, cell_result(batch=i, model=m))
    s.finish_run(run, "completed")
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    return path


# -- secrets ------------------------------------------------------------------------------------
def test_engine_arg_url_credentials_are_redacted_where_the_store_writes_them(tmp_path):
    """``--engine-arg base_url=http://bob:pw@host/v1`` was stored verbatim in the run's
    command and provenance (only the key's name was checked)."""
    from infbench.secrets import command_line

    argv = ["infbench", "run", "--engine", "openai", "--engine-arg", f"base_url=http://bob:{SECRET}@host/v1",
            "--base-url", f"http://h/v1?api_key={SECRET}"]
    s = Store(tmp_path / "s.db")
    run = s.begin_run({"argv": argv, "engine_options": {"base_url": f"http://bob:{SECRET}@host/v1"}},
                      command=command_line(argv))
    s.finish_run(run, "completed")
    s.close()
    dump = store_dump(tmp_path / "s.db")
    assert_no_secret({"store": dump}, SECRET)
    assert "host/v1" in dump and "base_url=http://[redacted]@host/v1" in dump


def test_cell_errors_and_device_properties_are_stored_redacted(tmp_path):
    import base64

    from tests.support.hostile import cell_result

    basic = base64.b64encode(f"bob:{SECRET}".encode()).decode()
    r = cell_result(1, status="failed", error=f"HTTP 401: you sent Authorization: Basic {basic} "
                                              f"(also Basic {basic}) from https://u:{SECRET}@10.0.0.1/v1")
    r = r.model_copy(update={"device": r.device.model_copy(update={"properties": {
        "base_url": f"https://u:{SECRET}@api.example.com/v1?token={SECRET}", "api_key_env": "K"}})})
    s = Store(tmp_path / "s.db")
    run = s.begin_run({}, command="x")
    s.save_cell(run, r)
    s.close()
    dump = store_dump(tmp_path / "s.db")
    assert_no_secret({"store": dump}, SECRET)
    assert basic not in dump and "api.example.com/v1" in dump and '"api_key_env":"K"' in dump
    # the cell id is untouched: resume still recognises it
    assert Store(tmp_path / "s.db", readonly=True).results()[0]["cell_id"] == r.cell_id


def test_import_url_credentials_are_never_stored_or_printed(tmp_path):
    store = tmp_path / "s.db"
    url = f"https://user:{SECRET}@github.com/argonne-lcf/LLM-Inference-Bench?token={SECRET}2"
    r = cli("import", FIXTURE_CSV, "--store", store, "--url", url, "--json", code=0)
    assert_no_secret({"stdout": r.stdout, "output": r.output, "store": store_dump(store)}, SECRET)
    assert "github.com/argonne-lcf" in r.stdout
    r = cli("import", FIXTURE_CSV, "--store", store, "--url", url, code=0)
    assert_no_secret({"output": r.output}, SECRET)


def test_site_endpoint_credentials_are_never_printed(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text(f'[cerebras]\nbase_url = "https://u:{SECRET}@api.example.com/v1?token={SECRET}"\n'
                    'api_key_env = "CEREBRAS_API_KEY"\nmodel = "llama3.1-8b"\n')
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    outputs = {}
    for args in (["detect", "--no-engines"], ["detect", "--no-engines", "--json"],
                 ["run", "--device", "cerebras", "--dry-run"], ["run", "--device", "cerebras", "--dry-run", "--json"]):
        r = cli(*args, code=0)
        outputs[" ".join(args)] = r.output
        assert "api.example.com" in r.output, r.output
    assert_no_secret(outputs, SECRET)


# -- the store is never an output ---------------------------------------------------------------
def _out_commands(store: Path, target: Path, tmp_path: Path) -> list[list]:
    spec = tmp_path / "spec.json"
    cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "2", "--write-spec", spec,
        "--store", tmp_path / "other.db", code=0)
    return [["export", "--format", "csv", "--out", target, "--store", store],
            ["export", "--format", "lib-csv", "--out", target, "--store", store],
            ["export", "--format", "json", "--out", target, "--store", store],
            ["compare", str(store), str(store), "--out", target],
            ["report", "--no-static", "--out", target, "--store", store],
            ["run", "--model", "tiny", "--batch", "1", "--write-spec", target, "--store", tmp_path / "other.db"],
            ["worker", "--spec", spec, "--out", target]]


def test_every_out_refuses_the_stores_path(tmp_path):
    """``export --format csv --out <store>`` replaced the store with CSV text, ``compare A B
    --out <store>`` with HTML."""
    store = make_store(tmp_path / "s.db")
    for args in _out_commands(store, store, tmp_path):
        before = digest(store)
        r = cli(*args)
        assert str(store) in r.output and ("store" in r.output or "SQLite" in r.output), (args, r.output)
        assert digest(store) == before, args
    # the default store, given by no flag, and its write-ahead log
    home = tmp_path / "home"
    default = make_store(home / "results.db")
    for args in _out_commands(default, default, tmp_path)[:5]:
        args = [a for a in args if a != "--store" and a != default] if args[0] != "compare" else args
        before = digest(default)
        cli(*args, env={"INFBENCH_HOME": str(home)})
        assert digest(default) == before, args
    wal = Path(f"{store}-wal")
    wal.write_bytes(b"")
    cli("export", "--format", "csv", "--out", wal, "--store", store)


def test_outputs_never_replace_a_file_they_did_not_write(tmp_path):
    store = make_store(tmp_path / "s.db")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for args in (["export", "--format", "csv"], ["export", "--format", "json"], ["export", "--format", "lib-csv"]):
        r = cli(*args, "--out", notes, "--store", store)
        assert "not an earlier" in r.output and notes.read_text() == "my notes\n"
    r = cli("compare", str(store), str(store), "--out", notes)
    assert "not an earlier" in r.output and notes.read_text() == "my notes\n"
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "index.html").write_text("<html>my page</html>")
    assert "not an earlier" in cli("report", "--no-static", "--out", rep, "--store", store).output
    # an earlier output of the same command is replaced, atomically (no temporary file left)
    out = tmp_path / "e.csv"
    for _ in range(2):
        cli("export", "--format", "csv", "--out", out, "--store", store, code=0)
    assert out.read_text().startswith("cell_id,spec_hash,run_id,status")
    cli("report", "--no-static", "--out", tmp_path / "rep2", "--store", store, code=0)
    cli("report", "--no-static", "--out", tmp_path / "rep2", "--store", store, code=0)
    cli("compare", str(store), str(store), "--out", tmp_path / "c.html", code=0)
    cli("compare", str(store), str(store), "--out", tmp_path / "c.html", code=0)
    assert not [p for p in tmp_path.rglob("*.tmp")]


# -- output that acts ------------------------------------------------------------------------------
FORMULAS = ["=cmd|' /C calc'!A0", '=HYPERLINK("http://evil","x")', "+SUM(1,2)", "@SUM(1,2)", "-2+3+cmd|x",
            "\t=1+1", "\r=1+1"]


def test_csv_exports_neutralise_formulas(tmp_path):
    """Model names such as ``=cmd|' /C calc'!A0`` went as-is into ``export --format
    csv|lib-csv`` and ``results --format csv`` (OWASP CSV injection)."""
    store = _store_with_models(tmp_path / "s.db", FORMULAS)
    for args in (["export", "--format", "csv"], ["export", "--format", "lib-csv"], ["results", "--format", "csv"]):
        text = cli(*args, "--store", store, code=0).stdout
        rows = list(_csv.reader(_io.StringIO(text)))
        assert len(rows) > 1, (args, text)
        for row in rows:
            for cell in row:
                assert not cell or cell[0] not in "=+-@\t\r", (args, cell)
        assert "'=cmd|' /C calc'!A0" in text or "'=cmd|' /C calc'!A0" in text.replace('""', '"')
    # numbers stay numbers
    rows = list(_csv.DictReader(_io.StringIO(cli("export", "--format", "csv", "--store", store, code=0).stdout)))
    assert float(rows[0]["output_tok_s"]) > 0


def test_lib_csv_round_trip_takes_the_guard_off(tmp_path):
    store = _store_with_models(tmp_path / "s.db", ["=HYPERLINK(1)"])
    out = tmp_path / "x.csv"
    cli("export", "--format", "lib-csv", "--out", out, "--store", store, code=0)
    from infbench.report.lib_import import read_lib_csv

    assert read_lib_csv(out)[0].model == "=HYPERLINK(1)"


def test_terminal_escapes_from_an_import_never_reach_the_terminal(tmp_path):
    f = tmp_path / "evil.csv"
    f.write_text(LIB_HEAD + "Nvidia A100 GPU,1,vLLM,evil\x1b]0;pwned\x07\x1b[31mmodel,128,1,1.6,154.8\n")
    store = tmp_path / "s.db"
    outs = {"import": cli("import", f, "--store", store, code=0).output}
    for args in (["results"], ["results", "--format", "csv"], ["export", "--format", "csv"], ["compare", store, store]):
        outs[args[0]] = cli(*[str(a) for a in args], *(["--store", store] if args[0] != "compare" else []),
                            code=0).output
    for where, text in outs.items():
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), (where, text)
    assert "evilmodel" in outs["results"].replace("\n", "").replace(" ", "").replace("│", "")


@pytest.mark.parametrize("name", ["<!--<script>", "</script><script>alert(1)</script>", "a&b<c>d", "\u2028x"])
def test_report_and_compare_pages_embed_json_that_cannot_end_their_script(tmp_path, name):
    """A model name ``<!--<script>`` inside the report's embedded JSON left the dashboard blank."""
    store = _store_with_models(tmp_path / "s.db", [name, "plain"])
    cli("report", "--no-static", "--out", tmp_path / "rep", "--store", store, code=0)
    cli("compare", str(store), str(store), "--out", tmp_path / "c.html", code=0)
    for page, marker in ((tmp_path / "rep" / "index.html", 'id="infbench-data">'),
                         (tmp_path / "c.html", 'id="infbench-figure">')):
        html = page.read_text()
        body = html.split(marker, 1)[1].split("</script>", 1)[0]
        assert "<" not in body and ">" not in body and "&" not in body
        data = json.loads(body)
        assert name in json.dumps(data, ensure_ascii=False) or name.strip("\u2028") in json.dumps(data)


def test_figures_draw_labels_literally(tmp_path):
    """A model name with matplotlib mathtext (``m$\\x{$``) made ``report`` fail."""
    store = _store_with_models(tmp_path / "s.db", ["m$\\x{$", "ok$_2$", "plain"])
    r = cli("report", "--out", tmp_path / "rep", "--store", store, "--json", code=0)
    figs = json.loads(r.stdout)["figures"]
    assert figs and all(Path(f).stat().st_size > 0 for f in figs)


def test_json_output_is_strict(tmp_path):
    """A stored NaN (``--price-per-hour nan`` used to be stored) made ``export --format json``
    invalid JSON; the flag is refused now, and a NaN already stored is written as null."""
    assert "--price-per-hour" in cli(*DRY, "--price-per-hour", "nan").output
    p = make_store(tmp_path / "s.db")
    db = sqlite3.connect(p)
    m = json.loads(db.execute("SELECT metrics FROM cells WHERE id=1").fetchone()[0])
    m["usd_per_mtok"] = float("nan")
    db.execute("UPDATE cells SET metrics=?, wall_s=? WHERE id=1", (json.dumps(m), float("inf")))
    db.commit()
    db.close()
    for args in (["export", "--format", "json"], ["results", "--format", "json"]):
        text = cli(*args, "--store", p, code=0).stdout
        json.loads(text, parse_constant=lambda c, a=args: pytest.fail(f"{a}: {c} in JSON output"))


# -- hangs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["detect", "--ray-address", "127.0.0.1:1"],
                                  ["run", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--model", "tiny",
                                   "--batch", "1"]])
def test_ray_address_where_nothing_listens_fails_at_once(args, tmp_path):
    """Both waited until killed (more than 300 s), printing only Ray's warnings."""
    t0 = time.monotonic()
    r = cli(*args, "--store", tmp_path / "s.db") if args[0] == "run" else cli(*args)
    assert time.monotonic() - t0 < 60  # not a timing assertion: the old behaviour never returned
    assert "127.0.0.1:1" in r.output and "ray status --address 127.0.0.1:1" in " ".join(r.output.split())
    assert not (tmp_path / "s.db").exists()


def test_ray_address_where_something_else_listens_fails_within_the_stated_time(monkeypatch):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def accept():
        conns = []
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])  # accept and say nothing, as a wrong service might
            except OSError:
                pass
        for c in conns:
            c.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("INFBENCH_RAY_CONNECT_TIMEOUT", "3")
    try:
        t0 = time.monotonic()
        r = cli("detect", "--ray-address", f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 30
        assert f"127.0.0.1:{port}" in r.output and "within 3 s" in r.output
    finally:
        stop.set()
        t.join()
        srv.close()


# -- silently wrong ----------------------------------------------------------------------------------
def _trace(tmp_path, lines: list[str], name="t.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("".join(line + "\n" for line in lines))
    return f


TRACE_RUN = ["run", "--engine", "llama.cpp-server", "--model", "tiny", "--dry-run", "--trace"]


@pytest.mark.parametrize("bad, message", [
    ('{"timestamp": 5, "input_length": true, "output_length": 2}', "input_length must be an integer, got True"),
    ('{"timestamp": 5, "input_length": 4.0, "output_length": 2}', "input_length must be an integer"),
    ('{"timestamp": 5, "input_length": "4", "output_length": 2}', "input_length must be an integer"),
    ('{"timestamp": NaN, "input_length": 4, "output_length": 2}', "NaN is not a JSON number"),
    ('{"timestamp": Infinity, "input_length": 4, "output_length": 2}', "Infinity is not a JSON number"),
    ('{"timestamp": -Infinity, "input_length": 4, "output_length": 2}', "Infinity is not a JSON number"),
    ('{"timestamp": 1e300, "input_length": 4, "output_length": 2}', "outside"),
    ('{"timestamp": 5, "input_length": 4, "output_length": false}', "output_length must be an integer"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2, "hash_ids": [true]}', "hash_ids"),
    ('{"timestamp": 5, "timestamp": 6, "input_length": 4, "output_length": 2}', "duplicate key"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2, "x": ' + "[" * 100 + "]" * 100 + "}", "nesting"),
])
def test_bad_trace_fields_are_refused_with_their_line(tmp_path, bad, message):
    """``"input_length": true`` was taken as 1 token; NaN/Infinity timestamps failed inside
    the load generator."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}', bad])
    r = cli(*TRACE_RUN, f)
    assert f"{f}:2" in r.output and message in r.output, r.output


def test_far_future_trace_timestamps_are_refused(tmp_path):
    """A replay would wait for a request years away: refused with its line and the span."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 1000, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 900000000000, "input_length": 8, "output_length": 2}'])
    r = cli(*TRACE_RUN, f)
    assert f"{f}:3" in r.output and "days after the first" in r.output
    a = tmp_path / "a.csv"
    a.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,2\n9999-12-31 23:59:59,4,2\n")
    assert f"{a}:3" in cli(*TRACE_RUN, a).output


def test_cell_timeout_shorter_than_the_trace_is_refused_when_planned(tmp_path):
    """A 3 s trace under ``--cell-timeout 2`` stored an ``ok`` cell holding part of its
    requests, with no word about the rest."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 1000, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 3000, "input_length": 8, "output_length": 2}'])
    r = cli(*TRACE_RUN, f, "--cell-timeout", "2")
    assert "1 of its 3 requests would never be sent" in " ".join(r.output.split())
    cli(*TRACE_RUN, f, "--cell-timeout", "2", "--trace-speed", "2", code=0)  # 1.5 s at twice the speed
    cli(*TRACE_RUN, f, "--cell-timeout", "10", code=0)


@pytest.mark.parametrize("content, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,true,2\n", "ContextTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nnan,4,2\n", "TIMESTAMP"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,4,1e300\n", "GeneratedTokens"),
    ('TIMESTAMP,ContextTokens,GeneratedTokens\n"1\n2",4,2\n', "runs over lines"),
])
def test_bad_azure_trace_rows(tmp_path, content, message):
    f = tmp_path / "az.csv"
    f.write_text(content)
    r = cli(*TRACE_RUN, f)
    assert f"{f}:2" in r.output and message in r.output, r.output


@pytest.mark.parametrize("row, message", [
    ("Nvidia A100 GPU,1e300,vLLM,m,128,1,1.6,154.8", "Num of Hardware"),
    ("Nvidia A100 GPU,100000,vLLM,m,128,1,1.6,154.8", "outside 1..4,096"),
    ("Nvidia A100 GPU,1,vLLM,m,128,true,1.6,154.8", "Batch Size"),
    ("Nvidia A100 GPU,1,vLLM,m,128,1,nan,154.8", "Latency"),
    ("Nvidia A100 GPU,1,vLLM,m,128,1,inf,154.8", "Latency"),
    ("Nvidia A100 GPU,1,vLLM,m,128,1,1.6,-5", "Throughput"),
    ("Nvidia A100 GPU,1,vLLM,m,99999999999,1,1.6,154.8", "Input Output Length"),
])
def test_import_refuses_what_no_publication_measured(tmp_path, row, message):
    """``import`` stored a tensor-parallel size of 10^300."""
    f = tmp_path / "x.csv"
    f.write_text(LIB_HEAD + row + "\n")
    store = make_store(tmp_path / "s.db")
    before = digest(store)
    r = cli("import", f, "--store", store)
    assert "line 2" in r.output and message in r.output, r.output
    assert digest(store) == before


def test_import_of_latin1_and_multiline_csvs_are_input_errors(tmp_path):
    """Both failed with an internal error."""
    f = tmp_path / "latin.csv"
    f.write_bytes((LIB_HEAD + "Nvidia A100 GPU,1,vLLM,caf\xe9,128,1,1.6,154.8\n").encode("latin-1"))
    r = cli("import", f, "--store", tmp_path / "s.db")
    assert f"{f}:2" in r.output and "not UTF-8" in r.output and "iconv" not in r.output or "UTF-8" in r.output
    f = tmp_path / "multi.csv"
    f.write_text(LIB_HEAD + 'Nvidia A100 GPU,1,vLLM,"two\nlines",128,1,1.6,154.8\n')
    assert "runs over lines 2-3" in cli("import", f, "--store", tmp_path / "s.db").output
    assert not (tmp_path / "s.db").exists()
    f.write_text(LIB_HEAD + "Nvidia A100 GPU,1,vLLM,m\x00\x1b[2J,128,1,1.6,154.8\n")  # control characters: cleaned
    cli("import", f, "--store", tmp_path / "s.db", code=0)
    assert "\x00" not in store_dump(tmp_path / "s.db") and "\x1b" not in store_dump(tmp_path / "s.db")


@pytest.mark.parametrize("flags, message", [
    (["-b", "0"], "--batch"), (["-b", "-4"], "--batch"), (["--input", "-5"], "--input"),
    (["--output", "0"], "--output"), (["--tp", "0"], "--tp"), (["--pp", "-1"], "--pp"),
    (["--set", "memory_bandwidth_tb_s=inf"], "finite"), (["--set", "memory_bandwidth_tb_s=-3"], "above 0"),
    (["--set", "memory_bandwidth_tb_s=nan"], "finite"), (["--set", "peak__tflops=5"], "unknown key 'peak__tflops'"),
    (["--set", "peak_fp64_tflops=5"], "unknown key"), (["--set", "memory_gib=1e300"], "at most"),
    (["--eff-compute", "2"], "--eff-compute"), (["--eff-memory", "0"], "--eff-memory"),
    (["--acceptance", "nan"], "--acceptance"), (["--moe-imbalance", "-1"], "--moe-imbalance"),
    (["--overhead-ms", "inf"], "--overhead-ms"), (["--spec-k", "0"], "--spec-k"), (["--ep", "0"], "--ep"),
    (["--slo-ttft", "-1"], "--slo-ttft"),
])
def test_predict_refuses_what_no_hardware_or_model_can_be(flags, message):
    """``predict`` accepted a negative input length, a batch of -4, ``--set
    memory_bandwidth_tb_s=inf`` and printed negative throughput; ``-b 0`` was an internal
    error; ``peak__tflops`` (as ``--help`` spelt it) was silently ignored."""
    r = cli("predict", "-m", "llama-3-8b", "-d", "h100-sxm", *flags)
    assert message in r.output, r.output


def test_predict_help_spells_the_peak_key():
    r = cli("predict", "--help", code=0)
    assert "peak_PRECISION_tflops" in r.output and "peak__tflops" not in r.output


@pytest.mark.parametrize("content, message", [
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: -3\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     ":4: device x: bandwidth_tb_s -3 is outside"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 1.0e+308\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     ":4: device x: bandwidth_tb_s 1e+308 is outside"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: .nan\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     "finite"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 2\n  peak_tflops: {bf16: -1}\n  sources: [a]\n",
     "peak_tflops.bf16"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 2\n  peak_tflops: {bf16: 1}\n  tdp_w: true\n"
     b"  sources: [a]\n", "tdp_w must be a finite number"),
    (b"42\n", "holds a list of devices, got int"),
    (b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe binary", "not UTF-8"),
    (b"- id: x\n  id: y\n", "duplicate key"),
    (b"[" * 100 + b"]" * 100, "nesting deeper"),
    (b"- [1, 2]\n", "not a mapping"),
])
def test_device_files_are_read_strictly(tmp_path, content, message):
    """``--device-file`` with 1e308, a scalar or binary content was an internal error, and a
    negative bandwidth gave negative throughput."""
    f = tmp_path / "dev.yaml"
    f.write_bytes(content)
    r = cli("predict", "-m", "llama-3-8b", "--device-file", f)
    assert str(f) in r.output and message in " ".join(r.output.split()), r.output


@pytest.mark.parametrize("flags", [["--power-watts", "nan"], ["--scrape-interval", "-1"], ["--price-per-hour", "inf"],
                                   ["--find-max", "rate", "--find-max-probes", "0"],
                                   ["--find-max", "rate", "--find-max-probes", "-3"]])
def test_run_flags_are_refused_before_anything_starts(tmp_path, flags):
    """``--scrape-interval -1`` was refused only after the run had begun; ``--power-watts
    nan`` was an internal error; ``--find-max-probes 0``/``-3`` exited 0."""
    r = cli("run", "--model", "tiny", "--batch", "1", "--store", tmp_path / "s.db", *flags)
    assert flags[-2] in r.output and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("args, message", [
    (["results", "--max-ttft", "nan"], "--max-ttft"), (["results", "--max-e2e", "-1"], "--max-e2e"),
    (["results", "--percentile", "p42"], "--percentile"), (["results", "--format", "xml"], "--format"),
    (["export", "--format", "xml"], "--format"), (["report", "--slo-ttft", "inf"], "--slo-ttft"),
    (["report", "--title", "x" * 1000], "--title"),
])
def test_reading_commands_check_their_flags(tmp_path, args, message):
    p = make_store(tmp_path / "s.db")
    before = digest(p)
    assert message in cli(*args, "--store", p).output
    assert digest(p) == before


@pytest.mark.parametrize("args, message", [
    (["import", "--url", "not a url"], "--url"), (["import", "--commit", "$(rm -rf /)"], "--commit"),
    (["import", "--source", ""], "--source"),
])
def test_import_flags(tmp_path, args, message):
    r = cli(args[0], FIXTURE_CSV, *args[1:], "--store", tmp_path / "s.db")
    assert message in r.output and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("flags, message", [(["--n-ctx", "0"], "--n-ctx"), (["--chunks", "0"], "--chunks"),
                                            (["--threads", "0"], "--threads")])
def test_perplexity_flags(tmp_path, flags, message):
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 100)
    r = cli("perplexity", "--model", "x.gguf", "--text", text, *flags, "--store", tmp_path / "s.db")
    assert message in r.output and not (tmp_path / "s.db").exists()


def test_quantize_threads_are_bounded(tmp_path):
    assert "--threads" in cli("quantize", "--model", tmp_path / "m.gguf", "--to", "q8_0", "--threads", "-1").output


@pytest.mark.parametrize("content, message", [
    ('[cerebras]\nbase_url = "https://x/v1"\npower_w = nan\n', ":3: cerebras.power_w is nan"),
    ('[cerebras]\nbase_url = "https://x/v1"\npower_w = inf\n', "power_w is inf"),
    ('[cerebras]\nbase_url = "ftp://x/v1"\n', ":2: base_url"),
    ('[cerebras]\nbase_url = "https://x/v1"\ncount = 99999999999\n', "count"),
    ("a = " + "[" * 50 + "]" * 50 + "\n", "nested"),
])
def test_site_config_values(tmp_path, monkeypatch, content, message):
    site = tmp_path / "site.toml"
    site.write_text(content)
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    r = cli("detect", "--no-engines")
    assert message in " ".join(r.output.split()), r.output


def test_site_config_size_is_bounded(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text("# " + "x" * (2 << 20) + "\n")
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    assert "larger than 1 MiB" in cli("detect", "--no-engines").output


def test_dataset_lines_are_strict_json(tmp_path):
    f = tmp_path / "chats.jsonl"
    ok = json.dumps({"messages": [{"role": "user", "content": "hi there you"},
                                  {"role": "assistant", "content": "hello to you too"}]})
    f.write_text(ok + "\n" + ok.replace('"hi there you"', "NaN") + "\n")
    r = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", f, "--dry-run")
    assert f"{f}:2" in r.output and "NaN" in r.output


def test_worker_output_with_nan_is_refused(tmp_path):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w")
    text = (w / "cells.jsonl").read_text().replace('"wall_s":null', '"wall_s":NaN', 1)
    assert "NaN" in text
    (w / "cells.jsonl").write_text(text)
    _ingest_refused(w, store, "NaN is not a JSON number", "line 1")
    (w / "provenance.json").write_text('{"schema_version": NaN}')
    _ingest_refused(w, store, "NaN")
