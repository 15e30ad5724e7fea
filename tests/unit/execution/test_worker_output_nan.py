"""A worker output folder with NaN in a cell (issue 22): refused by ``ingest``, nothing stored."""

from __future__ import annotations

from tests.support.hostile import ingest_refused, make_store, worker_folder


def test_worker_output_with_nan_is_refused(tmp_path):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w")
    text = (w / "cells.jsonl").read_text().replace('"wall_s":null', '"wall_s":NaN', 1)
    assert "NaN" in text
    (w / "cells.jsonl").write_text(text)
    ingest_refused(w, store, "NaN is not a JSON number", "line 1")
    (w / "provenance.json").write_text('{"schema_version": NaN}')
    ingest_refused(w, store, "NaN")

