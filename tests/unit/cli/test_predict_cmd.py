"""`infbench predict`'s command-line path (issues 33 and 34): figures outside physical bounds
in both directions, parallelism the model cannot take, an engine profile fitted on too few
cells, a home that cannot be written, the built-in profile shadowed by the home's own (and
ignored with --no-builtin), intervals that name their residuals, device calibration that
skips models outside the zoo and keeps campaigns apart. No engine: the cells are
LLM-Inference-Bench's (tests/fixtures/lib_published_3dev.csv) or synthetic."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.analysis.calibration import builtin_profile, prior_terms, resolve_basis
from infbench.analysis.predict import limits_for_id
from infbench.cli import app
from infbench.contract.manager import get_plugin_manager
from infbench.detect.devices import load_device_specs

FIXTURES = Path(__file__).parents[2] / "fixtures"
DEVICE = ("- id: future-gpu\n  name: Future GPU\n  vendor: nvidia\n  memory_gib: 288\n  bandwidth_tb_s: {bw}\n"
          "  peak_tflops: {{bf16: {peak}}}\n  sources: [\"what-if\"]\n")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def said(res) -> str:
    """The command's output with line wraps undone."""
    return " ".join(res.output.split())


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "r.db"
    assert invoke("import", str(FIXTURES / "lib_published_3dev.csv"), "--store", str(db)).exit_code == 0
    return db


# -- issue 33: bounds in both directions --------------------------------------------------

@pytest.mark.parametrize("value", ["1e-300", "5e-324", "0.0001"])
def test_set_refuses_a_peak_below_any_device(value):
    res = invoke("predict", "-m", "llama-3-8b", "-d", "h100-sxm", "--set", f"peak_bf16_tflops={value}")
    assert res.exit_code == 2 and "the least any device has" in said(res) and "1 GFLOP/s" in said(res)


def test_set_refuses_a_bandwidth_below_any_memory_and_keeps_sane_figures():
    res = invoke("predict", "-m", "llama-3-8b", "-d", "h100-sxm", "--set", "memory_bandwidth_tb_s=1e-300")
    assert res.exit_code == 2 and "PC133" in res.output
    ok = invoke("predict", "-m", "llama-3-8b", "-d", "h100-sxm", "--set", "memory_bandwidth_tb_s=0.05", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["predictions"][0]["tpot_s"] > 0.1  # 16 GB at 50 GB/s


@pytest.mark.parametrize(("bw", "peak", "what"), [("1.0e-300", "2500", "bandwidth_tb_s"),
                                                  ("8", "5.0e-324", "peak_tflops.bf16")])
def test_device_file_refuses_figures_below_any_device(tmp_path, bw, peak, what):
    f = tmp_path / "d.yaml"
    f.write_text(DEVICE.format(bw=bw, peak=peak))
    res = invoke("predict", "-m", "llama-3-8b", "--device-file", str(f))
    assert res.exit_code == 2 and what in said(res) and "the least any device has" in said(res)
    assert f"{f}:" in res.output  # with the file and line
    f.write_text(DEVICE.format(bw="8", peak="2500"))
    assert load_device_specs(f)[0].bandwidth_tb_s == 8


# -- issue 33: parallelism the model cannot take ---------------------------------------------

@pytest.mark.parametrize(("args", "why"), [(["--tp", "3"], "does not divide llama-3-8b's 32 attention heads"),
                                           (["--tp", "7", "--pp", "5"], "32 attention heads"),
                                           (["--tp", "2", "--pp", "5"], "32 layers")])
def test_predict_refuses_parallelism_that_does_not_divide_the_model(args, why):
    res = invoke("predict", "-m", "llama-3-8b", "-d", "h100-sxm", "-e", "vllm", *args)
    assert res.exit_code == 2 and why in res.output and "hint" in res.output


def test_llama_cpp_tp_is_reported_as_what_it_is():
    res = invoke("predict", "-m", "llama-2-7b", "-d", "a100-40gb", "-e", "llama.cpp", "--tp", "4", "--json")
    row = json.loads(res.stdout)["predictions"][0]
    assert (row["tp"], row["pp"], row["split"]) == (1, 4, "layer") and "layer" in " ".join(row["notes"])
    table = invoke("predict", "-m", "llama-2-7b", "-d", "a100-40gb", "-e", "llama.cpp", "--tp", "4")
    assert "splits layers, not tensors" in table.output


# -- issue 33: an engine profile needs as many cells as it has free parameters --------------------

def test_engine_profile_on_too_few_cells_is_refused_with_the_counts(tmp_path):
    lines = (FIXTURES / "lib_published_3dev.csv").read_text().splitlines()
    head = next(i for i, t in enumerate(lines) if t.startswith("Hardware"))
    few = tmp_path / "few.csv"
    few.write_text("\n".join(lines[head:head + 2]) + "\n")  # one cell: A100 / vLLM
    db = tmp_path / "few.db"
    assert invoke("import", str(few), "--store", str(db)).exit_code == 0
    res = invoke("predict", "--calibrate", "--engine", "vllm", "--store", str(db))
    assert res.exit_code == 2
    assert "10 free parameters" in said(res) and "0 usable cells" in said(res) and "Nvidia A100 GPU (1)" in said(res)


def test_engine_profile_reports_free_parameters_and_what_it_left_out(store):
    res = invoke("predict", "--calibrate", "--engine", "vllm", "--store", str(store), "--json")
    prof = json.loads(res.stdout)["profile"]
    assert prof["free_parameters"] == 10 and prof["cells"] >= 10 and prof["prior"] == "built-in profile"


# -- issue 33: a home that cannot be written -------------------------------------------------------

def test_a_home_that_cannot_be_written_is_a_clear_error(store, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the calibration folder should be")
    monkeypatch.setenv("INFBENCH_HOME", str(blocker))
    for args in (["--calibrate", "--engine", "vllm"], ["--calibrate", "-d", "a100-40gb", "-e", "vllm"]):
        res = CliRunner().invoke(app, ["predict", *args, "--store", str(store)])
        assert res.exit_code == 2, res.output
        assert "cannot save the" in res.output and str(blocker) in res.output and "INFBENCH_HOME" in res.output
        assert "Traceback" not in res.output and not isinstance(res.exception, OSError)


# -- issue 34: the home shadows the built-in profile, --no-builtin ignores it -----------------------

def test_a_stored_profile_shadows_the_built_in_one(store, infbench_home):
    builtin = builtin_profile("vllm")[0]
    assert ("model", "vllm", "mixtral-8x7b") in builtin.terms  # the built-in one knows Mixtral
    assert invoke("predict", "--calibrate", "--engine", "vllm", "--store", str(store)).exit_code == 0
    b = resolve_basis(infbench_home, "h100-sxm", "vllm", "cuda")
    assert b.used == "engine profile" and b.key is None  # H100 has no vLLM cells in the store
    assert ("model", "vllm", "mixtral-8x7b") not in b.fit.terms  # the store never saw Mixtral
    h100 = limits_for_id(get_plugin_manager(), "h100-sxm")
    eff_mix = b.efficiency_for("vllm", h100, "mixtral-8x7b")
    eff_avg = b.efficiency_for("vllm", h100, None)
    assert eff_mix.eff_memory == eff_avg.eff_memory  # no per-model term for a model the store lacks
    # A device calibrated with no stored profile starts from the built-in engine-wide terms only.
    fixed, src = prior_terms("trtllm-serve", "cuda", infbench_home)
    assert "built-in profile" in src and "no per-model terms" in src
    assert {k[0] for k in fixed} == {"mu", "stack"}
    none, why = prior_terms("trtllm-serve", "cuda", infbench_home, builtin=False)
    assert none == {} and "--no-builtin" in why


def test_device_calibration_says_which_profile_it_starts_from(store):
    res = invoke("predict", "--calibrate", "-d", "h100-sxm", "-e", "trtllm-serve", "--store", str(store))
    assert res.exit_code == 0, res.output
    assert "starting from the built-in profile of trtllm-serve" in res.output and "--no-builtin" in res.output
    res = invoke("predict", "--calibrate", "-d", "h100-sxm", "-e", "trtllm-serve", "--store", str(store),
                 "--no-builtin", "--json")
    [cal] = json.loads(res.stdout)["calibrations"]
    assert cal["prior"].startswith("generic priors")


def test_no_builtin_ignores_the_built_in_profile_and_its_intervals(store):
    res = invoke("predict", "-m", "llama-2-7b", "-d", "h100-sxm", "-e", "vllm", "--no-builtin", "--json")
    row = json.loads(res.stdout)["predictions"][0]
    assert row["calibration"]["used"] == "defaults" and row["calibration"]["path"] is None
    assert row["interval"]["duration_s"] == [None, None] and any("no interval" in n for n in row["notes"])
    # A profile of the store's own cells: intervals from its inner folds, each kind named.
    assert invoke("predict", "--calibrate", "--engine", "llama.cpp", "--store", str(store), "--no-builtin").exit_code \
        == 0
    own = json.loads(invoke("predict", "-m", "llama-2-7b", "-d", "mi250", "-e", "llama.cpp", "--tp", "2", "--dtype",
                            "f16", "-b", "1", "--input", "512", "--output", "512", "--no-builtin", "--json",
                            "--engine-arg", "n_batch=64").stdout)["predictions"][0]
    assert own["calibration"]["used"] == "engine profile"
    assert own["interval_source"]["random"].startswith("inner folds of the")
    lo, hi = own["interval"]["duration_s"]
    assert lo < own["duration_s"] < hi
    # A kind the store's profile cannot calibrate (one device: no new-device residuals) gets
    # no interval under --no-builtin, and the built-in table's, named, without it.
    new = json.loads(invoke("predict", "-m", "llama-2-7b", "-d", "h100-sxm", "-e", "llama.cpp", "--dtype", "f16",
                            "--no-builtin", "--json").stdout)["predictions"][0]
    assert new["interval_source"]["device"] is None and new["interval"]["duration_s"] == [None, None]
    named = json.loads(invoke("predict", "-m", "llama-2-7b", "-d", "h100-sxm", "-e", "llama.cpp", "--dtype", "f16",
                              "--json").stdout)["predictions"][0]
    assert "LLM-Inference-Bench" in named["interval_source"]["device"]
    assert named["interval"]["duration_s"][0] is not None


# -- issue 34: device calibration skips models outside the zoo, keeps campaigns apart -------------

def test_device_calibration_skips_models_outside_the_zoo(tmp_path):
    lines = (FIXTURES / "lib_published_3dev.csv").read_text().splitlines()
    head = next(i for i, t in enumerate(lines) if t.startswith("Hardware"))
    rows = [t for t in lines[head + 1:] if t.startswith("Nvidia A100 GPU,1,vLLM")]
    extra = [t.replace("meta-llama/Llama-2-7b-hf", "Deci/DeciLM-7B") for t in rows[:5]]
    f = tmp_path / "deci.csv"
    f.write_text("\n".join([lines[head], *rows, *extra]) + "\n")
    db = tmp_path / "d.db"
    assert invoke("import", str(f), "--store", str(db)).exit_code == 0
    res = invoke("predict", "--calibrate", "-d", "a100-40gb", "-e", "vllm", "--store", str(db), "--json")
    assert res.exit_code == 0, res.output
    [cal] = json.loads(res.stdout)["calibrations"]
    assert len(cal["excluded"]["unknown_model"]) == 5 and cal["n_train"] + cal["n_test"] == len(rows)


def test_campaigns_of_one_device_stay_apart(tmp_path):
    lines = (FIXTURES / "lib_published_3dev.csv").read_text().splitlines()
    head = next(i for i, t in enumerate(lines) if t.startswith("Hardware"))
    rows = [t for t in lines[head + 1:] if t.startswith("Nvidia A100 GPU,1,vLLM")]
    # The same cells under a second published name that maps to the same catalog device.
    other = [t.replace("Nvidia A100 GPU", "NVIDIA A100-SXM4-40GB") for t in rows]
    f = tmp_path / "two.csv"
    f.write_text("\n".join([lines[head], *rows, *other]) + "\n")
    db = tmp_path / "two.db"
    assert invoke("import", str(f), "--store", str(db)).exit_code == 0
    res = invoke("predict", "--calibrate", "-d", "a100-40gb", "-e", "vllm", "--store", str(db))
    assert res.exit_code == 2 and "2 campaigns" in res.output and "--device-label" in res.output
    ok = invoke("predict", "--calibrate", "-d", "a100-40gb", "-e", "vllm", "--store", str(db), "--device-label",
                "Nvidia A100 GPU", "--json")
    assert ok.exit_code == 0, ok.output
    [cal] = json.loads(ok.stdout)["calibrations"]
    assert cal["campaign"] == "Nvidia A100 GPU" and cal["n_train"] + cal["n_test"] == len(rows)
    # A prediction for the campaign the device calibration was fitted on uses it; another does not.
    mine = json.loads(invoke("predict", "-m", "llama-2-7b", "-d", "a100-40gb", "-e", "vllm", "--device-label",
                             "Nvidia A100 GPU", "--json").stdout)["predictions"][0]
    other = json.loads(invoke("predict", "-m", "llama-2-7b", "-d", "a100-40gb", "-e", "vllm", "--device-label",
                              "NVIDIA A100-SXM4-40GB", "--json").stdout)["predictions"][0]
    assert mine["calibration"]["used"] == "device" and other["calibration"]["used"] != "device"
    bad = invoke("predict", "--calibrate", "-d", "a100-40gb", "-e", "vllm", "--store", str(db), "--device-label",
                 "Intel PVC GPU")
    assert bad.exit_code == 2 and "campaigns of this device in the store" in bad.output


def test_a_refused_cell_prints_as_refused_with_its_reason():
    res = invoke("predict", "-m", "llama-3-70b", "-d", "h100-sxm", "-e", "vllm")
    assert res.exit_code == 0, res.output
    assert "refused" in res.output and "weights take 141.1 GB per device" in said(res)
