"""A predicted cell (an adaptive sweep's unmeasured cell) is a stored result of its own
kind: never ok, never counted as measured (a later plain run measures it), marked by
`results`, hidden by `--measured-only`, labelled by `export`, drawn hollow by `report`."""

import csv
import io
import json

from typer.testing import CliRunner

from infbench.analysis.adaptive import AdaptivePlanner
from infbench.cli import app
from infbench.report.data import flat_row, lib_rows
from infbench.store import Store
from tests.unit.analysis.test_predict_profile import DEV, H100, grid, measure


def stored(tmp_path):
    """A store with 4 measured cells of a 16-cell grid and 12 predicted ones."""
    cells = grid()
    pl = AdaptivePlanner(cells, DEV, H100, "25%", stack="cuda", target=None)  # the whole budget
    store = Store(tmp_path / "r.db")
    run = store.begin_run({"host": "test"}, command="adaptive")
    while (c := pl.next_cell()) is not None:
        r = measure(c)
        store.save_cell(run, r)
        pl.record(r)
    for r in pl.predicted_results():
        store.save_cell(run, r)
    store.finish_run(run, "completed")
    return store, run, pl


def test_predicted_cells_are_never_counted_as_measured(tmp_path):
    store, run, pl = stored(tmp_path)
    rows = store.results()
    pred = [r for r in rows if r["status"] == "predicted"]
    assert len(rows) == 16 and len(pred) == 12 and all(r.predicted for r in pred)
    # Only the measured cells are finished: a plain run of the grid measures the other 12.
    finished = store.finished_cell_ids()
    assert len(finished) == 4 and finished.isdisjoint({r["cell_id"] for r in pred})
    assert {c.cell_id(DEV) for c in grid()} - finished == {r["cell_id"] for r in pred}
    # ... and once it has, the measurement is the cell's newest attempt and it is finished.
    c = next(x for x in grid() if x.cell_id(DEV) == pred[0]["cell_id"])
    store.save_cell(run, measure(c))
    assert pred[0]["cell_id"] in store.finished_cell_ids()
    assert next(r for r in store.results() if r["cell_id"] == pred[0]["cell_id"])["status"] == "ok"
    # Predicted metrics read like measured ones, with their intervals; never exported as measurements.
    f = flat_row(pred[1])
    assert f["predicted"] and f["status"] == "predicted" and f["label"].endswith("(predicted)")
    assert f["output_tok_s_lo"] < f["output_tok_s"] < f["output_tok_s_hi"]
    assert f["e2e_s_p50_lo"] < f["e2e_s_p50"] < f["e2e_s_p50_hi"]
    assert all(r["Latency"] for r in lib_rows(store.results())) and len(lib_rows(store.results())) == 5
    store.close()


def test_results_marks_predicted_cells_and_export_labels_them(tmp_path):
    store, _, _ = stored(tmp_path)
    store.close()
    db = str(tmp_path / "r.db")
    runner = CliRunner()
    res = runner.invoke(app, ["results", "--store", db], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert res.output.count("predicted (not measured)") == 12 and "12 predicted cell(s)" in res.output
    hidden = runner.invoke(app, ["results", "--store", db, "--measured-only"], env={"COLUMNS": "250"})
    assert hidden.exit_code == 0 and "predicted (not measured)" not in hidden.output and "ok" in hidden.output
    only = runner.invoke(app, ["results", "--store", db, "--status", "predicted", "--format", "json"])
    data = json.loads(only.stdout)
    assert len(data) == 12 and all(d["status"] == "predicted" and d["metrics"]["predicted"] for d in data)
    assert all(d["metrics"]["interval"]["e2e_s"][0] < d["metrics"]["e2e_s"]["mean"] for d in data)
    out = runner.invoke(app, ["export", "--format", "csv", "--store", db])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    pred = [r for r in rows if r["status"] == "predicted"]
    assert len(pred) == 12 and all(r["predicted"] == "True" and float(r["e2e_s_lo"]) < float(r["e2e_s_hi"])
                                   for r in pred)
    assert "12 predicted cell(s)" in out.stderr
    lib = runner.invoke(app, ["export", "--format", "lib-csv", "--store", db])
    assert lib.stdout.count("\n") == 5 and "left out of lib-csv" in lib.stderr


def test_report_draws_predicted_cells(tmp_path):
    store, _, _ = stored(tmp_path)
    store.close()
    res = CliRunner().invoke(app, ["report", "--store", str(tmp_path / "r.db"), "--out", str(tmp_path / "rep"),
                                   "--json"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "12 predicted (not measured: hollow markers with 90 % intervals)" in page and "0 failed" in page
    assert "circle-open" in page and (tmp_path / "rep" / "figures" / "throughput_vs_batch.png").is_file()
