"""Numbers are never cut (issue 14, section 6): the results table at any terminal width, and piped
results whole."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from rich.console import Console

from infbench.store import Store
from tests.support.hostile import (
    cli,
    make_store,
)


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

