"""The repeats-needed rule of docs/metrics.md (benchmarks/repeatability.py): a two-sided
two-sample t-test at alpha 0.05 with power 0.8, solved for the smallest n per configuration."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("repeatability", ROOT / "benchmarks" / "repeatability.py")
rep = importlib.util.module_from_spec(spec)
sys.modules["repeatability"] = rep
spec.loader.exec_module(rep)


def test_normal_approximation_plus_the_t_correction():
    """With z quantiles (1.95996 + 0.84162) the classic sample size is 2 (2.8016 cv / d)^2 =
    15.7 for cv = d; Student-t quantiles at 2n - 2 degrees of freedom make it 17."""
    z = 2 * (1.959964 + 0.841621) ** 2
    assert math.ceil(z) == 16 and rep.repeats_needed(0.05, 0.05) == 17
    for cv, d in ((0.01, 0.01), (0.03, 0.02), (0.1, 0.05)):
        n = rep.repeats_needed(cv, d)
        assert math.ceil(z * (cv / d) ** 2) <= n <= math.ceil(z * (cv / d) ** 2) + 2


def test_monotone_and_bounded():
    assert rep.repeats_needed(0.0, 0.01) == 2
    assert rep.repeats_needed(0.02, 0.01) > rep.repeats_needed(0.01, 0.01) > rep.repeats_needed(0.01, 0.02)
    assert rep.repeats_needed(5.0, 0.001) == rep.CAP
    with pytest.raises(ValueError):
        rep.repeats_needed(0.1, 0.0)


def test_analyse_uses_the_quiet_runs():
    """A cell's runs flagged for noisy neighbours are left out of its quiet CV; the summary
    takes the quiet CVs of the cells that have at least 3 quiet runs."""
    vals = [100.0, 102.0, 98.0, 101.0, 12.0]
    res = {"cells": [{"cell_id": "a", "cell": "b1", "values": {n: vals for n, _, _ in rep.METRICS}, "noisy_runs": [4]},
                     {"cell_id": "b", "cell": "b8", "values": {n: vals for n, _, _ in rep.METRICS},
                      "noisy_runs": [0, 1, 4]}]}
    rep.analyse(res)
    quiet = res["cells"][0]["quiet"]["output_tok_s"]
    assert quiet["n"] == 4 and quiet["cv"] == pytest.approx(math.sqrt(8.75 / 3) / 100.25)
    assert res["cells"][0]["metrics"]["output_tok_s"]["cv"] > 0.4 and res["cells"][1]["quiet"] == {}
    assert res["summary_basis"] == "quiet runs" and res["summary_cells"] == ["b1"]
    assert res["summary"]["output_tok_s"]["cv_median"] == quiet["cv"] and res["noisy_cells"] == 4
