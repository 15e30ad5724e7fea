"""Imports and exports of other tools' formats around a real serving run (issue 42): a run of
infbench's client against a streaming server on 127.0.0.1 (the stub with injected delays),
exported as InferenceX rows and as vllm bench serve results and imported back to the same
figures; `compare --frontier RUN --against imported:...`; and the report, in a real headless
browser, drawing measured and imported fronts together."""

import json
import os
from pathlib import Path

import pytest

from tests.integration.test_cli import infbench
from tests.integration.test_report import ARTIFACTS, _chrome
from tests.support.stub_server import StubServer

pytestmark = pytest.mark.integration
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "imports"
#: The figures that must come back from an export's import (metric, statistic or None).
FIGURES = (("ttft_s", "p50"), ("ttft_s", "mean"), ("ttft_s", "p99"), ("tpot_s", "p50"), ("tpot_s", "mean"),
           ("e2e_s", "p50"), ("e2e_s", "p90"), ("output_tok_s", None), ("total_tok_s", None))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One measured frontier-like sweep: concurrency 1, 2, 4 against the stub (10 ms TTFT, 4 ms
    per token), plus an InferenceX publication imported into the same store."""
    tmp = tmp_path_factory.mktemp("peer")
    store = str(tmp / "s.db")
    env = {"INFBENCH_HOME": str(tmp / "home")}
    with StubServer(ttft_s=0.01, itl_s=0.004) as s:
        out = json.loads(infbench("run", "--engine", "openai", "--base-url", s.base_url, "--model", "normal",
                                  "--concurrency", "1,2,4", "--num-requests", "8", "--input-len", "8",
                                  "--output-len", "12", "--store", store, "--json", env=env).stdout)
    assert out["ok"] == 3
    return {"store": store, "env": env, "run": out["run_id"], "tmp": tmp}


def _cells(store, run, env):
    return json.loads(infbench("results", "--store", store, "--run", run, "--format", "json", env=env).stdout)


def _value(m, key, stat):
    return m[key] if stat is None else (m.get(key) or {}).get(stat)


def test_exports_round_trip(served):
    store, env, tmp = served["store"], served["env"], served["tmp"]
    measured = {c["spec"]["load"]["concurrency"]: c for c in _cells(store, served["run"], env)}
    ix = tmp / "ix.json"
    infbench("export", "--format", "inferencex", "--store", store, "--run", served["run"], "--out", str(ix), env=env)
    rows = json.loads(ix.read_text())
    assert len(rows) == 3 and all(r["metrics"]["tput_per_gpu"] > 0 for r in rows)
    back = json.loads(infbench("import", "-f", "inferencex", str(ix), "--store", store, "--json", env=env).stdout)
    vdir = tmp / "vllm"
    infbench("export", "--format", "vllm-bench", "--store", store, "--run", served["run"], "--out", str(vdir), env=env)
    files = sorted(vdir.glob("*.json"))
    assert len(files) == 3 and all(json.loads(f.read_text())["completed"] == 8 for f in files)
    runs = [back["run_id"]]
    for f in files:
        runs.append(json.loads(infbench("import", "-f", "vllm-bench", str(f), "--store", store, "--engine", "openai",
                                        "--model", "normal", "--json", env=env).stdout)["run_id"])
    for run in runs:
        for c in _cells(store, run, env):
            orig = measured[c["spec"]["load"]["concurrency"]]
            assert c["engine"]["imported"] and c["cell_id"] != orig["cell_id"]
            for key, stat in FIGURES:
                assert _value(c["metrics"], key, stat) == pytest.approx(_value(orig["metrics"], key, stat),
                                                                        rel=1e-9), (run, key, stat)


def test_compare_frontier_against_an_imported_front(served):
    store, env, tmp = served["store"], served["env"], served["tmp"]
    ix = tmp / "ix2.json"
    infbench("export", "--format", "inferencex", "--store", store, "--run", served["run"], "--out", str(ix), env=env)
    rows = json.loads(ix.read_text())
    for r in rows:  # the same front, published as if from another machine
        r["hardware"] = "mi300x"
    ix.write_text(json.dumps(rows))
    infbench("import", "-f", "inferencex", str(ix), "--store", store, env=env)
    p = infbench("compare", "--store", store, "--frontier", served["run"], "--against", "imported:inferencex:mi300x",
                 "--json", env=env)
    (cmp,) = json.loads(p.stdout)["comparisons"]
    assert cmp["overlap"] and cmp["geomean_ratio"] == pytest.approx(1.0)  # a front read against itself
    assert "InferenceX" in cmp["b"] and "AMD Instinct MI300X" in cmp["b"]


def test_report_draws_measured_and_imported_fronts(served):
    store, env, tmp = served["store"], served["env"], served["tmp"]
    infbench("import", "-f", "inferencex", str(FIX / "inferencex_benchmarks_excerpt.json"), "--store", store, env=env)
    res = json.loads(infbench("report", "--out", str(tmp / "report"), "--store", store, "--json", env=env).stdout)
    assert any(Path(f).name == "frontier.png" for f in res["figures"])
    d = _chrome()
    try:
        d.get(Path(res["html"]).as_uri())
        fronts = d.execute_script("return window.infbench.fronts")
        imported = [f for f in fronts if f["imported"]]
        measured = [f for f in fronts if not f["imported"]]
        assert measured and any("InferenceX" in f["name"] for f in imported)
        traces = d.execute_script("return document.getElementById('fig-frontier').data.map(t => "
                                  "[t.name, (t.marker || {}).symbol || '', (t.line || {}).dash || ''])")
        assert any(n.endswith("(imported)") and sym == "diamond-open" for n, sym, _ in traces)
        assert any("front (imported)" in n and dash == "dash" for n, _, dash in traces)
        title = d.execute_script("return document.getElementById('fig-frontier').layout.title.text")
        assert "imported" in title and "docs/metrics.md" in title
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(ARTIFACTS / "report-imported-fronts.png"))
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        d.quit()
    assert os.path.getsize(ARTIFACTS / "report-imported-fronts.png") > 20000
