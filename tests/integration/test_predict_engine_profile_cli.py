"""`infbench predict --calibrate --engine E` on imported published cells, then a prediction
for a device without cells of its own: it uses the stored engine profile and says so. No
engine needed: the cells are LLM-Inference-Bench's (tests/fixtures/lib_published_3dev.csv)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app

FIXTURES = Path(__file__).parent.parent / "fixtures"

pytestmark = pytest.mark.integration


def test_predict_on_a_device_without_cells_uses_the_engine_profile(tmp_path, infbench_home):
    runner = CliRunner()
    db = str(tmp_path / "r.db")
    assert runner.invoke(app, ["import", str(FIXTURES / "lib_published_3dev.csv"), "--store", db]).exit_code == 0
    res = runner.invoke(app, ["predict", "--calibrate", "--engine", "vllm", "--store", db, "--json"])
    assert res.exit_code == 0, res.output
    prof = json.loads(res.stdout)["profile"]
    saved = Path(prof["saved"])
    assert saved == infbench_home / "calibration" / "profile__vllm.json" and saved.is_file()
    assert prof["engine"] == "vllm" and [d["catalog_id"] for d in prof["devices"]] == ["a100-40gb"]
    for name, v in prof["parameters"].items():  # every value with its 90 % range, inside its bounds
        assert v["bound"][0] <= v["lo"] <= v["value"] <= v["hi"] <= v["bound"][1], name

    # H200 has no cells: the profile and H200's datasheet, with intervals for a new device.
    res = runner.invoke(app, ["predict", "-m", "llama-2-7b", "-d", "h200", "-e", "vllm", "-b", "1,16", "--input", "512",
                              "--output", "512", "--dtype", "fp16", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["predictions"]
    for r in rows:
        c = r["calibration"]
        assert c["used"] == "engine profile" and c["path"] == str(saved) and not c["device_terms"]
        assert "h200 from its datasheet" in c["detail"] and "device" in r["interval_kinds"]
        lo, hi = r["interval"]["duration_s"]
        assert lo < r["duration_s"] < hi
    # The table says the same.
    table = runner.invoke(app, ["predict", "-m", "llama-2-7b", "-d", "h200", "-e", "vllm", "--dtype", "fp16"],
                          env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "calibration used: engine profile" in table.output

    # The profile's own device keeps its terms; another engine without a profile falls back
    # to the defaults, and a device calibrated on its own cells uses that first.
    a100 = json.loads(runner.invoke(app, ["predict", "-m", "llama-2-7b", "-d", "a100-40gb", "-e", "vllm", "--dtype",
                                          "fp16", "--json"]).stdout)["predictions"][0]
    assert a100["calibration"]["used"] == "engine profile" and a100["calibration"]["device_terms"]
    sg = json.loads(runner.invoke(app, ["predict", "-m", "llama-2-7b", "-d", "h200", "-e", "sglang-server",
                                        "--json"]).stdout)["predictions"][0]
    assert sg["calibration"]["used"] == "defaults"
    assert runner.invoke(app, ["predict", "--calibrate", "-d", "h100-sxm", "-e", "trtllm-serve", "--store",
                               db]).exit_code == 0
    trt = json.loads(runner.invoke(app, ["predict", "-m", "llama-2-7b", "-d", "h100-sxm", "-e", "trtllm-serve",
                                         "--dtype", "fp16", "--json"]).stdout)["predictions"][0]
    assert trt["calibration"]["used"] == "device"

    # What-if and file-described devices: the profile and their figures, never device terms.
    wi = json.loads(runner.invoke(app, ["predict", "-m", "llama-2-7b", "-d", "a100-40gb", "-e", "vllm", "--set",
                                        "memory_bandwidth_tb_s=3", "--json"]).stdout)["predictions"][0]
    assert wi["calibration"]["used"] == "engine profile" and not wi["calibration"]["device_terms"]
    f = tmp_path / "my.yaml"
    f.write_text("- id: future-gpu\n  name: Future GPU\n  vendor: nvidia\n  memory_gib: 288\n  bandwidth_tb_s: 8\n"
                 "  peak_tflops: {bf16: 2500}\n  sources: [\"what-if\"]\n")
    fut = json.loads(runner.invoke(app, ["predict", "-m", "llama-3-70b", "--device-file", str(f), "-e", "vllm",
                                         "--json"]).stdout)["predictions"][0]
    assert fut["calibration"]["used"] == "engine profile" and fut["device"] == "future-gpu"
    req = json.loads(runner.invoke(app, ["predict", "--requirements", "-m", "llama-3-8b", "-d", "h200", "-e", "vllm",
                                         "--preset", "genz-chat", "--json"]).stdout)["requirements"]
    assert req and all(r["calibration"]["used"] == "engine profile" for r in req)
