"""After a real run: the roofline in every cell, `infbench report` rendered in a real headless
browser (Debian's chromium driven by selenium), `export --format lib-csv`, `compare`, and
`predict --calibrate` on the stored cells."""

import csv
import io
import json
import math
import os
import shutil
from pathlib import Path

import pytest

from tests.integration.test_cli import infbench, physics_reasons
from tests.support.home import make_home

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: Kept after the run (CI artefact): the page and a screenshot of it.
ARTIFACTS = Path(os.environ.get("INFBENCH_ARTIFACTS", ROOT / "artifacts"))
FIGURES = ("fig-throughput", "fig-heatmap", "fig-latency", "fig-power", "fig-pareto", "fig-roofline")


@pytest.fixture(scope="module")
def measured(tmp_path_factory, gguf_cache, cpu_limits_file):
    """Two runs of the same 4 cells (tiny model, llama.cpp, declared 40 W power)."""
    home = make_home(tmp_path_factory.mktemp("report-home"), gguf_cache, cpu_limits_file)
    env = {"INFBENCH_HOME": str(home)}
    store = str(home / "results.db")
    args = ["run", "-m", "tiny", "-e", "llama.cpp", "--dtype", "f32", "-b", "1,2", "--input-len", "16,32",
            "--output-len", "8", "--power-watts", "40", "--power-label", "declared for the test", "--json"]
    a = json.loads(infbench(*args, env=env).stdout)
    b = json.loads(infbench(*args, "--force", env=env).stdout)
    assert a["ok"] == 4 and b["ok"] == 4
    return {"env": env, "store": store, "home": home, "run_a": a["run_id"], "run_b": b["run_id"]}


def test_every_cell_has_roofline(measured):
    cells = json.loads(infbench("results", "--format", "json", "--store", measured["store"]).stdout)
    assert len(cells) == 4
    for c in cells:
        m = c["metrics"]
        assert m["roofline"]["device_id"] == "cpu" and "ISA x clock x cores" in m["roofline"]["source"]
        # Every physics bound holds; a noisy-neighbour flag (other processes on this shared
        # machine) says nothing about the roofline and is left out here.
        bounds = [r for r in physics_reasons(m) if "noisy neighbours" not in r]
        assert m["roofline"]["attainable"]["bandwidth_bytes_s"] > 0 and not bounds, bounds
        assert 0 < m["mbu"] and 0 < m["mfu"]
        # A floor is a floor: the engine can match it (within the measurement noise of the
        # limits on a shared VM) but not beat it by much.
        assert m["tpot_s"]["mean"] > 0.5 * m["roofline"]["tpot_floor_s"]
        assert m["avg_power_w"] == pytest.approx(40, rel=0.05)


def _chrome():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver:
        msg = "needs Debian's chromium and chromium-driver (scripts/test.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    o = webdriver.ChromeOptions()
    o.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,2300"):
        o.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=o)


SHOWN = "return " + json.dumps(list(FIGURES)) + """.map(id => { const g = document.getElementById(id);
  return {id: id, plotted: g.classList.contains('js-plotly-plot'), svg: g.querySelectorAll('.main-svg').length,
          traces: (g.data || []).length, points: (g.data || []).reduce((s, t) => s + ((t.x || []).length), 0),
          empty: (g.layout.annotations || []).map(a => a.text)}; });"""


def test_report_renders_every_figure_and_filters_work(measured, tmp_path):
    from selenium.webdriver.support.ui import Select

    out_dir = tmp_path / "report"
    res = json.loads(infbench("report", "--out", str(out_dir), "--store", measured["store"], "--json",
                              "--slo-tpot", "1", env=measured["env"]).stdout)
    page = Path(res["html"])
    assert page.is_file() and res["cells"] == 4
    assert {Path(f).name for f in res["figures"]} >= {"throughput_vs_batch.png", "throughput_vs_batch.svg",
                                                      "heatmap_input_output.png", "ttft_itl.png",
                                                      "power_tokens_per_joule.png", "latency_throughput_pareto.png",
                                                      "measured_vs_roofline.png"}
    assert all(Path(f).stat().st_size > 5000 for f in res["figures"])
    html = page.read_text()
    assert "<script src=" not in html and "<link " not in html  # self-contained: nothing fetched, works offline
    d = _chrome()
    try:
        d.get(page.as_uri())
        shown = {f["id"]: f for f in d.execute_script(SHOWN)}
        for fid in FIGURES:
            f = shown[fid]
            assert f["plotted"] and f["svg"] > 0 and f["traces"] > 0 and f["points"] > 0 and not f["empty"], f
        assert d.execute_script("return window.infbench.filtered().length") == 4
        before = shown["fig-throughput"]["points"]
        # Filter: drop batch 2 -> half the cells, fewer points everywhere.
        Select(d.find_element("id", "filter-batch")).deselect_by_value("2")
        after = {f["id"]: f for f in d.execute_script(SHOWN)}
        assert d.execute_script("return window.infbench.filtered().length") == 2
        assert after["fig-throughput"]["points"] < before
        assert after["fig-latency"]["points"] < shown["fig-latency"]["points"]
        assert "2 of 4" in d.find_element("id", "status").text
        # Axis selector: plot TTFT instead of throughput.
        Select(d.find_element("id", "y-axis")).select_by_value("ttft_ms_p50")
        title = d.execute_script("return document.getElementById('fig-throughput').layout.yaxis.title.text")
        assert title.startswith("TTFT p50")
        Select(d.find_element("id", "filter-batch")).select_by_value("2")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(ARTIFACTS / "report-screenshot.png"))
        shutil.copy(page, ARTIFACTS / "report.html")
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        d.quit()
    assert (ARTIFACTS / "report-screenshot.png").stat().st_size > 20000


def test_export_lib_csv(measured):
    text = infbench("export", "--format", "lib-csv", "--store", measured["store"], env=measured["env"]).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.splitlines()[0].split(",")
    # LLM-Inference-Bench's Plots/All_results.csv columns first, in its order.
    assert header[:8] == ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size",
                          "Latency", "Throughput"]
    assert len(rows) == 4 and {r["Framework"] for r in rows} == {"llama.cpp"}
    cells = {(c["spec"]["batch"], c["spec"]["input_len"]): c for c in
             json.loads(infbench("results", "--format", "json", "--store", measured["store"]).stdout)}
    for r in rows:
        c = cells[(int(r["Batch Size"]), int(r["Input Length"]))]
        assert float(r["Throughput"]) == pytest.approx(c["metrics"]["total_tok_s"])
        assert float(r["Latency"]) == pytest.approx(c["metrics"]["duration_s"])
        assert r["Input Output Length"] == f"{r['Input Length']}/8"
        assert float(r["avg_power"]) == pytest.approx(40_000, rel=0.05)  # mW, as in their power table


def test_compare_two_runs(measured, tmp_path):
    out = tmp_path / "cmp.html"
    res = json.loads(infbench("compare", measured["run_a"], measured["run_b"], "--store", measured["store"],
                              "--json", "--out", str(out), env=measured["env"]).stdout)
    # results() keeps the newest attempt per cell, so run A's cells are read by run id from
    # all attempts: every workload of A is matched in B.
    assert len(res["pairs"]) == 4 and res["only_a"] == 0 and res["only_b"] == 0
    for p in res["pairs"]:
        assert p["cell_id_a"] == p["cell_id_b"]
        assert math.isfinite(p["ratio"]["output_tok_s"]) and p["ratio"]["output_tok_s"] > 0
    ratios = [p["ratio"]["output_tok_s"] for p in res["pairs"]]  # the geometric mean of the pairs' ratios
    assert res["geomean"]["output_tok_s"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / len(ratios)), rel=1e-3)
    assert out.stat().st_size > 100_000
    table = infbench("compare", measured["run_a"], measured["run_b"], "--store", measured["store"],
                     env=measured["env"]).stdout
    assert "geometric mean" in table and "4 matched cells" in table


def test_predict_calibrated_on_stored_cells(measured):
    env = measured["env"]
    res = json.loads(infbench("predict", "--calibrate", "--device", "cpu", "--store", measured["store"], "-m", "tiny",
                              "-b", "1,2", "--input", "16", "--output", "8", "--dtype", "f32", "--json",
                              env=env).stdout)
    (cal,) = res["calibrations"]
    assert cal["device_id"] == "cpu" and cal["engine"] == "llama.cpp" and cal["n_train"] + cal["n_test"] == 4
    assert cal["error_test"]["tpot_s"]["error"] >= 0 and cal["error_test"]["tpot_s"]["n"] == cal["n_test"]
    assert Path(cal["saved"]).is_file() and cal["sources"] == {"published": 0, "local": cal["n_train"]}
    assert len(res["predictions"]) == 2
    assert all(p["efficiency"]["source"].startswith("fitted on") for p in res["predictions"])
    # The prediction for a measured configuration is in the measured range.
    cells = json.loads(infbench("results", "--format", "json", "--store", measured["store"]).stdout)
    meas = [c["metrics"]["tpot_s"]["mean"] for c in cells if c["spec"]["input_len"] == 16]
    for p in res["predictions"]:
        assert min(meas) / 3 < p["tpot_s"] < max(meas) * 3
    bad = infbench("predict", "-m", "tiny", "--device", "h900", env=env, check=False)
    assert bad.returncode == 2 and "unknown device 'h900'" in bad.stderr
