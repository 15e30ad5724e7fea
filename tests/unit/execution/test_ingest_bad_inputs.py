"""Hostile worker folders given to ``ingest`` (issue 14, sections 1 and 2): malformed provenance,
bad fields and files, invalid cells, time running backwards, a cut last line; an ingest is one
transaction, and ingested text is printed without control characters."""

from __future__ import annotations

import json
import re

import pytest

from infbench.store import Store
from tests.support.hostile import (
    cell_result,
    cli,
    ingest_refused,
    make_store,
    worker_folder,
)


@pytest.mark.parametrize("provenance, message", [
    ("[1, 2]", "must hold a JSON object"),
    ('"just a string"', "must hold a JSON object"),
    ("{broken", "missing or unreadable"),
])
def test_ingest_malformed_provenance(tmp_path, provenance, message):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w")
    (w / "provenance.json").write_text(provenance)
    ingest_refused(w, store, message)


def test_ingest_bad_fields_and_files(tmp_path):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w1", status={"not": "a status"})
    ingest_refused(w, store, "status", "is not one of")
    w = worker_folder(tmp_path / "w2", provenance=["a", "list"])
    ingest_refused(w, store, "'provenance' must be an object")
    w = worker_folder(tmp_path / "w3")
    (w / "cells.jsonl").write_bytes((w / "cells.jsonl").read_bytes() + b'{"cell_id": "\xff\xfe"}\n')
    ingest_refused(w, store, "line 3", "not UTF-8")
    w = worker_folder(tmp_path / "w4")
    (w / "cells.jsonl").unlink()
    (w / "cells.jsonl").mkdir()
    ingest_refused(w, store, "cells.jsonl is not a file")
    w = worker_folder(tmp_path / "w5")
    (w / "cells.jsonl").unlink()
    ingest_refused(w, store, "cells.jsonl is missing")


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
    ingest_refused(w, store, message, "nothing was stored")


def test_ingest_records_with_time_running_backwards(tmp_path):
    store = make_store(tmp_path / "s.db")
    d = _mutated()
    d["records"][0]["t_tokens_ns"] = [d["records"][0]["t_send_ns"] - 5_000_000_000] * 3
    w = worker_folder(tmp_path / "w")
    (w / "cells.jsonl").write_text(json.dumps(d) + "\n")
    ingest_refused(w, store, "token times before the send")


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

