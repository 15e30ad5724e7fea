"""The worker contract in subprocesses: a spec written by the host, `infbench worker` runs it,
`infbench ingest` stores it; the same cells as an in-process run, version skew refused, a
killed worker loses only its running cell."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.integration.test_cli import infbench

pytestmark = pytest.mark.integration

# one warm-up block per cell (the worker contract is the subject; --warmup N through the worker
# spec once failed every cell, e5e3018)
CELLS = ["-m", "tiny", "-e", "llama.cpp", "--dtype", "f32", "-b", "1,2", "--input-len", "16", "--output-len", "4",
         "--warmup", "1"]


def test_worker_matches_in_process_run(tmp_path):
    local = json.loads(infbench("run", *CELLS, "--store", str(tmp_path / "a.db"), "--json").stdout)
    spec = tmp_path / "spec.json"
    w = json.loads(infbench("run", *CELLS, "--write-spec", str(spec), "--json").stdout)
    assert w["cells"] == 2 and spec.is_file()
    out = tmp_path / "out"
    p = infbench("worker", "--spec", str(spec), "--out", str(out))
    assert "infbench-worker: done" in p.stderr  # one line per event, for a host's log stream
    assert {f.name for f in out.iterdir()} >= {"provenance.json", "cells.jsonl", "worker.db"}
    ing = json.loads(infbench("ingest", str(out), "--store", str(tmp_path / "b.db"), "--json").stdout)
    assert ing["ok"] == 2 and ing["failed"] == 0 and ing["status"] == "completed"
    assert ing["spec_hash"] == w["spec_hash"]
    there = json.loads(infbench("results", "--store", str(tmp_path / "b.db"), "--format", "json").stdout)
    by_id = {c["cell_id"]: c for c in there}
    for c in local["cells"]:
        other = by_id[c["cell_id"]]  # same cell id: same workload on the same device
        assert other["spec_hash"] == c["spec_hash"]
        for k in ("n_in_total", "n_out_total", "n_completed"):
            assert other["metrics"][k] == c["metrics"][k]
        assert other["metrics"]["ttft_s"]["p50"] > 0 and other["metrics"]["output_tok_s"] > 0
        assert other["metrics"]["mbu"] > 0  # the roofline is computed in the worker too
    from infbench.store import Store

    run = Store(tmp_path / "b.db").runs()[0]
    assert run["provenance"]["worker"] is True and run["provenance"]["spec_hash"] == w["spec_hash"]
    cmp = json.loads(infbench("compare", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--json").stdout)
    assert len(cmp["pairs"]) == 2


def test_spec_carries_scrape_interval_and_price(tmp_path):
    """A worker measures with the options of the run that wrote its spec: the /metrics
    interval and the price per hour travel in it, as in the container and Ray executors."""
    spec = tmp_path / "spec.json"
    served = ["-m", "tiny", "-e", "llama.cpp-server", "-b", "1", "--input-len", "16", "--output-len", "4"]
    infbench("run", *served, "--write-spec", str(spec), "--scrape-interval", "0.25", "--price-per-hour", "2.5")
    raw = json.loads(spec.read_text())  # the run's configuration, the model of the command line (issue 40)
    assert raw["config"]["load"]["scrape_interval_s"] == 0.25 and raw["config"]["power"]["price_per_hour"] == 2.5


def test_version_skew_is_refused(tmp_path):
    spec = tmp_path / "spec.json"
    infbench("run", *CELLS, "--write-spec", str(spec))
    raw = json.loads(spec.read_text())
    raw["schema_version"] += 1
    raw["infbench_version"] = "9.9.9"
    spec.write_text(json.dumps(raw))
    p = infbench("worker", "--spec", str(spec), "--out", str(tmp_path / "out"), check=False)
    assert p.returncode == 2
    assert "infbench 9.9.9" in p.stderr and "store schema" in p.stderr and "rebuild" in p.stderr
    out = tmp_path / "old"
    out.mkdir()
    (out / "provenance.json").write_text(json.dumps({"schema_version": 0, "infbench_version": "0.0.1"}))
    p = infbench("ingest", str(out), "--store", str(tmp_path / "s.db"), check=False)
    assert p.returncode == 2 and "infbench 0.0.1 (store schema 0)" in p.stderr


def test_killed_worker_keeps_finished_cells(tmp_path):
    spec = tmp_path / "spec.json"
    # Three cells; the last is long enough to be killed in the middle of (16 + 2,000 tokens fit
    # tiny-random-llama's 2,048-token context, which the plan enforces).
    infbench("run", "-m", "tiny", "-e", "llama.cpp", "--dtype", "f32", "-b", "1", "--input-len", "16",
             "--output-len", "4,8,2000", "--write-spec", str(spec))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "infbench.cli", "worker", "--spec", str(spec), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed = 0
    try:
        # Killed as the third cell's timed part starts (its `timed` line): the long cell is then
        # always cut, however fast this machine decodes it.
        assert proc.stderr is not None
        for line in proc.stderr:
            timed += line.startswith("infbench-worker: timed ")
            if timed == 3:
                break
        assert timed == 3, "worker ended before the long cell"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len((out / "cells.jsonl").read_text().splitlines()) == 2
    with (out / "cells.jsonl").open("a") as f:
        f.write('{"cell_id": "trunc')  # a line cut by the kill
    ing = json.loads(infbench("ingest", str(out), "--store", str(tmp_path / "s.db"), "--json").stdout)
    assert ing["ok"] == 2 and ing["skipped_lines"] == 1 and ing["status"] == "interrupted"
