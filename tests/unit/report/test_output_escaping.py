"""Output that could act (issue 22): CSV formulas neutralised (and the guard taken off by the
lib-csv round trip), terminal escapes from an import, JSON embedded in report and compare
pages, figure labels drawn literally, strict JSON output."""

from __future__ import annotations

import csv as _csv
import io as _io
import json
import re
import sqlite3
from pathlib import Path

import pytest

from infbench.store import Store
from tests.support.boundaries import LIB_HEAD
from tests.support.hostile import DRY, cli, make_store


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
        text = json.dumps(data, ensure_ascii=False)
        # the compare figure's strings are HTML-escaped for plotly (issue 41), shown literally
        shown = name.strip("\u2028").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert name in text or name.strip("\u2028") in json.dumps(data) or shown in text


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

