"""``infbench run --adaptive`` with the real llama.cpp engine: a share of the grid measured
(the design cells first: the grid's extremes and middle), the rest stored as ``predicted``
cells with intervals, shown as predicted by ``results`` (hidden by ``--measured-only``), and
measured by a later plain run."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_cli import infbench

pytestmark = pytest.mark.integration

GRID = ["--model", "tiny-random-llama", "--engine", "llama.cpp", "--batch", "1,2,4", "--input-len", "16,32,64",
        "--output-len", "8"]


def test_adaptive_then_a_plain_run_measures_the_predicted_cells(tmp_path):
    db = str(tmp_path / "r.db")
    out = json.loads(infbench("run", *GRID, "--adaptive", "50%", "--store", db, "--json").stdout)
    # At most 50 % of 9 cells (floor: 4); fewer when every interval is narrow first (and it says why).
    measured = out["ok"]
    assert out["status"] == "completed" and 3 <= measured <= 4 and out["predicted"] == 9 - measured
    assert out["failed"] == 0
    [eng] = out["scenario"]["adaptive"]["engines"].values()
    assert eng["stopped"] == ("budget" if measured == 4 else "narrow")
    cells = {(c["spec"]["batch"], c["spec"]["input_len"]): c for c in out["cells"]}
    for design in ((1, 16), (4, 64), (2, 32)):  # all-smallest, all-largest, the middle
        assert cells[design]["status"] == "ok"
    pred = [c for c in out["cells"] if c["status"] == "predicted"]
    for c in pred:
        iv = c["metrics"]["interval"]["e2e_s"]
        assert iv[0] is not None and iv[0] <= c["metrics"]["e2e_s"]["p50"] <= iv[1], c["metrics"]
    table = infbench("results", "--store", db).stdout
    assert "predicted" in table
    measured_only = json.loads(infbench("results", "--store", db, "--format", "json", "--measured-only").stdout)
    assert len(measured_only) == measured and all(r["status"] == "ok" for r in measured_only)
    again = json.loads(infbench("run", *GRID, "--store", db, "--json").stdout)
    assert again["ok"] == 9 - measured and again["skipped"] == measured and again["predicted"] == 0
    final = json.loads(infbench("results", "--store", db, "--format", "json").stdout)
    assert len(final) == 9 and all(r["status"] == "ok" for r in final)
