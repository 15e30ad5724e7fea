"""The CLI mode of the validation (benchmarks/lib_validation.py --cli, issue 34) on a slice of
LLM-Inference-Bench's published cells: per fold a fresh home and store with the training rows
only, `infbench predict --calibrate --engine E --no-builtin`, then `infbench predict --json`
for the held-out cells; and a prediction for a config-only zoo model (never measured, never
fitted) with an interval. No engine runs: the cells are the paper's."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import lib_validation  # noqa: E402 - benchmarks/ is not a package

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slice_csv(tmp_path_factory):
    """Llama-2-7B, Mistral-7B and Llama-3-8B on the A100 and the H100 under vLLM: 3 models x 2
    devices, every row of the published file for them."""
    src = (ROOT / "benchmarks" / "data" / "lib_all_results.csv").read_text().splitlines()
    keep = [src[0]] + [t for t in src[1:] if ",vLLM," in t and t.split(",")[0] in ("Nvidia A100 GPU", "Nvidia H100 GPU")
                       and t.split(",")[3] in ("meta-llama/Llama-2-7b-hf", "mistralai/Mistral-7B-v0.1",
                                                "meta-llama/Meta-Llama-3-8B")]
    f = tmp_path_factory.mktemp("slice") / "slice.csv"
    f.write_text("\n".join(keep) + "\n")
    return f


def test_cli_validation_mode_on_a_slice(slice_csv):
    doc = lib_validation.run_cli(slice_csv, ["random", "lomo", "lodo"], log=lambda _m: None)
    sp = doc["splits"]
    assert doc["mode"] == "cli" and doc["groups"] == 2
    # random: one fold, both groups scored; lomo: one fold per model, a row per (device, model);
    # lodo: each device predicted from the other's profile and its datasheet.
    assert {r["device"] for r in sp["random"]["rows"]} == {"Nvidia A100 GPU", "Nvidia H100 GPU"}
    assert {r["fold"] for r in sp["lomo"]["rows"]} == {"llama-2-7b", "llama-3-8b", "mistral-7b"}
    assert {(r["fold"], r["device"]) for r in sp["lodo"]["rows"]} == {("a100-40gb", "Nvidia A100 GPU"),
                                                                    ("h100-sxm", "Nvidia H100 GPU")}
    for split, d in sp.items():
        s = d["summary"]
        assert s["measured"] == sum(r["measured"] for r in d["rows"]) > 0, split
        assert 0 <= s["coverage"] <= 1 and s["median"] is not None, split
        for r in d["rows"]:
            assert r["profile"]["cells"] >= 10 and r["n"] == r["measured"]
            assert len(r["scores"]) + r["refused"] == r["n"]
    # The same cells seen in training predict well; a device never seen is harder.
    assert sp["random"]["summary"]["median"] < 0.15
    # The markdown of docs/roofline.md renders from it.
    assert "| random | 1 | 2 |" in lib_validation.render(doc, "cli_summary")
    assert "Nvidia A100 GPU" in lib_validation.render(doc, "cli_folds.random")
    # leave-one-model-out lists the folds above 20 % only (its target is on the p90)
    over = [r for r in sp["lomo"]["rows"] if r["error"] is None or r["error"] > 0.2]
    lomo = lib_validation.render(doc, "cli_folds.lomo")
    assert lomo.startswith("| split |") and lomo.count("\n| lomo |") == len(over)


def test_a_config_only_model_is_predicted_with_an_interval(slice_csv, tmp_path):
    runner = CliRunner()
    db = tmp_path / "r.db"
    assert runner.invoke(app, ["import", str(slice_csv), "--store", str(db)]).exit_code == 0
    res = runner.invoke(app, ["predict", "--calibrate", "--engine", "vllm", "--store", str(db), "--json"])
    assert res.exit_code == 0, res.output
    # Mixtral-8x22B: in the zoo from its config alone, in neither the store nor the built-in profile.
    res = runner.invoke(app, ["predict", "-m", "mixtral-8x22b", "-d", "h100-sxm", "-e", "vllm", "--tp", "8", "-b",
                              "1,64", "--input", "512", "--output", "128", "--json"])
    assert res.exit_code == 0, res.output
    one, many = json.loads(res.stdout)["predictions"]
    for r in (one, many):
        assert r["calibration"]["used"] == "engine profile" and r["calibration"]["device_terms"]
        assert "model" in r["interval_kinds"] and r["interval_source"]["model"].startswith("inner folds")
        lo, hi = r["interval"]["e2e_s"]
        assert lo < r["e2e_s"] < hi
    assert one["config"]["experts_touched"] == 2.0 and many["config"]["experts_touched"] > 7.9
    assert many["tpot_s"] > one["tpot_s"]
