"""The frontier sweep against llama.cpp's real server on 127.0.0.1 (issue 31): two engine
configurations (two ``parallel`` settings) each measured up the concurrency ladder until it
stops paying (the stop rule checked against the throughputs the server gave), the pooled front
(`results --frontier`), the report's frontier figure in headless Chromium with its axis switch,
and `compare --frontier` of the two configurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_cli import infbench
from tests.integration.test_report import _chrome
from tests.support.home import make_home

pytestmark = pytest.mark.integration

SWEEP = """preset: frontier
input_len: [32]
output_len: [16]
concurrency: [1, 2, 4, 8]
num_requests: 16
engine_configs: [{{parallel: {parallel}}}]
warmup: 1
"""


@pytest.fixture(scope="module")
def fronts(tmp_path_factory, gguf_cache, cpu_limits_file):
    """Two frontier runs of smollm2-135m (dummy weights) on llama.cpp-server: parallel 1 and 4."""
    root = tmp_path_factory.mktemp("frontier")
    home = make_home(root / "home", gguf_cache, cpu_limits_file)
    env = {"INFBENCH_HOME": str(home)}
    store = str(root / "s.db")
    runs = {}
    for parallel in (1, 4):
        sweep = root / f"p{parallel}.yaml"
        sweep.write_text(SWEEP.format(parallel=parallel))
        runs[parallel] = json.loads(infbench("run", "--sweep", str(sweep), "--store", store, "--price-per-hour", "2",
                                             "--json", env=env).stdout)
    return {"env": env, "store": store, "runs": runs, "root": root}


def test_each_configuration_climbs_the_ladder_and_stops_with_a_reason(fronts):
    for parallel, run in fronts["runs"].items():
        cells = [c for c in run["cells"] if c["status"] == "ok"]
        assert cells and all(c["spec"]["engine_args"] == {"parallel": parallel} for c in cells)
        conc = sorted(c["spec"]["load"]["concurrency"] for c in cells)
        assert conc == [1, 2, 4, 8][:len(conc)]                  # measured from the bottom, no gap
        for c in cells:
            ld = c["spec"]["load"]
            assert ld["num_requests"] == 16 and c["metrics"]["n_completed"] == 16
            m = c["metrics"]
            assert m["tok_s_per_user"] == pytest.approx(1 / m["tpot_s"]["p50"])
            assert m["tok_s_per_device"] == pytest.approx(m["total_tok_s"])   # one device
            assert m["usd_per_mtok"] > 0
        assert len(conc) + run.get("not_reached", 0) == 4
        # the stop rule, checked against what the server did: every doubling that led on gained at
        # least 5 % total throughput over the best before it, and the last one measured, if the
        # series stopped before the top, did not
        tok_s = [c["metrics"]["total_tok_s"] for c in sorted(cells, key=lambda c: c["spec"]["load"]["concurrency"])]
        for i in range(1, len(tok_s)):
            gained = tok_s[i] >= 1.05 * max(tok_s[:i])
            if i < len(tok_s) - 1:
                assert gained, (parallel, tok_s)          # it led on
            elif len(tok_s) < 4:
                assert not gained, (parallel, tok_s)      # it stopped here, below the top


def test_results_frontier_pools_the_configurations(fronts):
    doc = json.loads(infbench("results", "--frontier", "--format", "json", "--store", fronts["store"]).stdout)
    [front] = doc["fronts"]
    assert front["engine"] == "llama.cpp-server" and doc["x"] == "tok_s_per_user"
    pts, rest = front["front"], front["dominated"]
    # Pooled: every measured cell of both configurations is a point, on the front or dominated.
    ok = {c["cell_id"] for run in fronts["runs"].values() for c in run["cells"] if c["status"] == "ok"}
    assert {p["cell_id"] for p in pts + rest} == ok
    assert {p["config"].split()[2] for p in pts + rest} == {"parallel=1", "parallel=4"}
    assert all(p["tok_s_per_user"] > 0 and p["tok_s_per_device"] > 0 for p in pts + rest)
    # The front is exactly the points no other point beats, checked here by brute force. How many
    # there are is the server's doing, not the code's: CI's machines gave 3 or more, this VM 2, and
    # one CI machine 1 (parallel 4 at concurrency 1 was the fastest cell on both axes: its server
    # gained nothing from concurrency 2 and the stop rule ended both series). The issue's "at least
    # 3" is what a server that keeps gaining gives; the invariant is the Pareto set.
    def beats(a, b):
        ge = a["tok_s_per_user"] >= b["tok_s_per_user"] and a["tok_s_per_device"] >= b["tok_s_per_device"]
        return ge and (a["tok_s_per_user"], a["tok_s_per_device"]) != (b["tok_s_per_user"], b["tok_s_per_device"])
    everyone = pts + rest
    assert {p["cell_id"] for p in pts} == {p["cell_id"] for p in everyone if not any(beats(q, p) for q in everyone)}
    by_id = {p["cell_id"]: p for p in pts}
    assert all(beats(by_id[p["dominated_by"]], p) for p in rest)
    xs = [p["tok_s_per_user"] for p in pts]
    ys = [p["tok_s_per_device"] for p in pts]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)  # a front trades throughput for interactivity
    table = infbench("results", "--frontier", "--store", fronts["store"]).stdout
    assert "frontier:" in table and "tok/s/user" in table


def test_compare_frontier_of_the_two_configurations(fronts):
    a, b = fronts["runs"][1]["run_id"], fronts["runs"][4]["run_id"]
    p = infbench("compare", "--frontier", a, b, "--store", fronts["store"], "--json", check=False)
    doc = json.loads(p.stdout)
    [c] = doc["comparisons"]
    if c["overlap"] is None:          # the fronts need not share an interactivity; then it says so and exits 1
        assert p.returncode == 1
        return
    assert p.returncode == 0 and c["points"] and c["geomean_ratio"] > 0
    assert all(q["ratio"] is None or q["ratio"] > 0 for q in c["points"])


def test_the_report_draws_the_frontier_and_switches_axis(fronts, tmp_path):
    from selenium.webdriver.support.ui import Select

    res = json.loads(infbench("report", "--out", str(tmp_path / "r"), "--store", fronts["store"], "--json",
                              env=fronts["env"]).stdout)
    assert any(Path(f).name == "frontier.png" and Path(f).stat().st_size > 5000 for f in res["figures"])
    d = _chrome()
    try:
        d.get(Path(res["html"]).as_uri())
        fig = "document.getElementById('fig-frontier')"
        points = d.execute_script(f"return {fig}.data.reduce((s, t) => s + (t.x || []).length, 0)")
        assert points >= 5
        fr = d.execute_script("return window.infbench.fronts")
        # the report's front is the one `results --frontier` computes from the same store
        doc = json.loads(infbench("results", "--frontier", "--format", "json", "--store", fronts["store"]).stdout)
        ids = [p["cell_id"] for p in doc["fronts"][0]["front"]]
        assert len(fr) == 1 and [p["cell_id"] for p in fr[0]["front"]] == ids
        rows = d.find_elements("css selector", "#frontier-table tr")
        assert len(rows) == 2 and "llama.cpp-server" in rows[1].text
        Select(d.find_element("id", "frontier-axis")).select_by_value("usd_per_mtok")
        title = d.execute_script(f"return {fig}.layout.yaxis.title.text")
        assert "cost per million output tokens" in title.lower()
        fr2 = d.execute_script("return window.infbench.fronts")
        assert fr2[0]["front"] and all(p["y"] > 0 for p in fr2[0]["front"])
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        d.quit()


# 16 tokens in and 8 out (the fixture's 32 and 16 halved): this test's subject is the budget and
# what the front says, not the ladder: its four cells took 25 s of a 70 s test in CI's parallel stage
ADAPTIVE_SWEEP = """preset: frontier
input_len: [16]
output_len: [8]
concurrency: [1, 2, 4, 8]
num_requests: 8
engine_configs: [{parallel: 1}, {parallel: 4}]
warmup: 1
"""


def test_a_budget_below_the_corners_is_raised_to_them_and_said_before_the_run(tmp_path, gguf_cache, cpu_limits_file):
    """Issue 43 on llama.cpp's real server: `--adaptive 25%` of 8 cells is 2, below the 4 corners
    of 2 series; the run says so before it starts, measures every corner, and the shown front's
    highest point is a measured cell or is flagged as a prediction."""
    home = make_home(tmp_path / "adaptive-home", gguf_cache, cpu_limits_file)
    env = {"INFBENCH_HOME": str(home)}
    sweep = tmp_path / "a.yaml"
    sweep.write_text(ADAPTIVE_SWEEP)
    store = str(tmp_path / "s.db")
    dry = json.loads(infbench("run", "--sweep", str(sweep), "--adaptive", "25%", "--dry-run", "--json",
                              env=env).stdout)
    assert dry["adaptive"] == {"objective": "front", "budget": "25%", "cells": 8, "corners": 4,
                               "measured_at_most": 4, "predicted_at_least": 4}
    p = infbench("run", "--sweep", str(sweep), "--adaptive", "25%", "--store", store, "--json", env=env)
    assert "below the 4 corners of 2 series" in p.stderr and "raised to 4" in p.stderr
    run = json.loads(p.stdout)
    ok = {(c["spec"]["engine_args"]["parallel"], c["spec"]["load"]["concurrency"])
          for c in run["cells"] if c["status"] == "ok"}
    assert {(1, 1), (1, 8), (4, 1), (4, 8)} <= ok and len(ok) == 4, ok
    doc = json.loads(infbench("results", "--frontier", "--format", "json", "--store", store, env=env).stdout)
    [front] = doc["fronts"]
    cert = front["certainty"]
    peak = max(front["front"], key=lambda q: q["tok_s_per_device"])
    assert cert["peak_cell"] == peak["cell_id"] and cert["peak_predicted"] == bool(peak.get("predicted"))
    assert bool(cert["peak_predicted"]) == any("highest point" in n for n in cert["notes"])
    # the report's frontier table says the same: its best point, measured or predicted, and the
    # widest interval of its predicted points
    res = json.loads(infbench("report", "--out", str(tmp_path / "r"), "--store", store, "--json", env=env).stdout)
    d = _chrome()
    try:
        d.get(Path(res["html"]).as_uri())
        [fr] = d.execute_script("return window.infbench.fronts")
        assert fr["peak"]["cell_id"] == cert["peak_cell"] and fr["peak"]["predicted"] == cert["peak_predicted"]
        if cert["largest_interval"] is None:
            assert fr["largest_interval"] is None
        else:
            assert abs(fr["largest_interval"] - cert["largest_interval"]) < 1e-6 * max(1.0, cert["largest_interval"])
        row = d.find_elements("css selector", "#frontier-table tr")[1].text
        assert ("predicted: measure that cell" in row) == bool(cert["peak_predicted"]), row
        assert ("all measured" in row) == (cert["largest_interval"] is None), row
        assert not [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        d.quit()
    strict = infbench("run", "--sweep", str(sweep), "--adaptive", "25%", "--adaptive-strict", "--store", store,
                      env=env, check=False)
    assert strict.returncode == 2 and "--adaptive-strict refuses" in strict.stderr
