"""The journal replays only what infbench wrote for the store (issue 41, item 1): entries are signed
and a forged file is refused by name."""

from __future__ import annotations

import json


def test_journal_entries_are_signed_and_a_forged_file_is_refused_by_name(tmp_path):
    """A file dropped into the journal folder (TTFT -5 s, 1e15 tok/s, claiming this store)
    is not replayed: the next start names it and leaves it; infbench's own journal, signed
    with this home's key, still replays; an entry edited by hand is refused whole."""
    from infbench.data.events import Collector
    from infbench.data.run import RunSummary
    from infbench.execution.bookkeeping import record
    from infbench.store import Store, journal
    from infbench.store.recovery import prepare
    from tests.support.hostile import cell_result

    path = tmp_path / "s.db"
    s = Store(path)
    key = str(path.resolve())
    d = journal.journal_dir()
    d.mkdir(parents=True)
    forged = cell_result(1)
    forged.records[0].t_tokens_ns[:] = [forged.records[0].t_send_ns - 5_000_000_000] * 3
    lines = [{"kind": "run", "store": key, "run_id": "f" * 32, "provenance": {}, "command": "", "started_at": 1.0},
             {"kind": "cell", "store": key, "run_id": "f" * 32, "cell": forged.model_dump(mode="json"),
              "error": "x"}]
    (d / "dropped.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rec = prepare(s)
    assert rec.replayed_cells == 0 and any("dropped.jsonl" in n and "not written by infbench" in n
                                           for n in rec.notes), rec.notes
    assert (d / "dropped.jsonl").is_file() and not Store(path, readonly=True).results()
    # infbench's own journal (a store that refused the write) is signed and replays
    run = s.begin_run({"host": "h"}, command="infbench run")

    class Full(Store):
        def save_cell(self, run_id, r):
            import sqlite3

            raise sqlite3.OperationalError("database or disk is full")

    full = Full(path)
    full.run_meta[run] = {"provenance": {}, "command": "infbench run", "started_at": 1.0}
    record(full, run, RunSummary(run), cell_result(2), Collector())
    mine = journal.release(full, run)
    entries = [json.loads(x) for x in mine.read_text().splitlines()]
    assert all(isinstance(e.get("mac"), str) and len(e["mac"]) == 64 for e in entries)
    edited = tmp_path / "edited.jsonl"
    entries[1]["cell"]["metrics"]["output_tok_s"] = 1e15
    edited.write_text("".join(json.dumps(e) + "\n" for e in entries))
    rec = prepare(Store(path))
    assert rec.replayed_cells == 1 and rec.journal_files == 1  # its own journal, then deleted
    (d / "edited.jsonl").write_bytes(edited.read_bytes())
    refused: list = []
    assert journal.replay(Store(path), refused)["cells"] == 0
    assert {n for n, _ in refused} == {"dropped.jsonl", "edited.jsonl"}
    assert any("signature does not match" in why for n, why in refused if n == "edited.jsonl")

