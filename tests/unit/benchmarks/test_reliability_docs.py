"""docs/reliability.md's counts are rendered from benchmarks/results/reliability.json by
benchmarks/reliability.py's ``render`` (issue 22: no total typed by hand), and every total
is the sum of the rows benchmarks.md shows (``render`` checks it)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _reliability():
    spec = importlib.util.spec_from_file_location("reliability_bench", ROOT / "benchmarks" / "reliability.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_docs_counts_are_the_jsons():
    data = json.loads((ROOT / "benchmarks" / "results" / "reliability.json").read_text())
    rel = _reliability()
    table = rel.render(data)                       # asserts the totals are the sums of its rows
    assert f"{data['totals']['cases_tried']:,} cases" in table
    doc = (ROOT / "docs" / "reliability.md").read_text()
    m = re.search(r"<!-- numbers: reliability:counts -->\n(.*?)<!-- /numbers -->", doc, re.S)
    assert m, "docs/reliability.md has no reliability:counts region"
    assert m.group(1).strip() == rel.render(data, "counts").strip()
    t = data["totals"]
    parts = ("bad_input_cases", "boundary_cases", "round4_cases", "secret_paths", "round5_cases")
    tried = sum(data[k]["passed"] + data[k]["failed"] for k in parts if k in data)
    assert t["cases_tried"] == tried + data["fuzz"]["total_examples"] + data["option_scan"]["pairs"]
    assert data["option_scan"]["ignored"] == 0  # issue 33: no run option accepted and ignored
    assert t["failed_checks"] == 0 and t["cells_lost"] == 0
    # issue 41: no case of any kind unhandled, every case classified
    by = data["round5_cases"]["by_kind"]
    assert all(v["unhandled"] == 0 for v in by.values()) and by["unclassified"]["cases"] == 0
