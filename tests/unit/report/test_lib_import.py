"""Importing published results (LLM-Inference-Bench's CSV layout): round trip with
`export --format lib-csv`, errors that name the line, device/engine mapping, the published
mark, and `compare` against the imported cells; the `infbench import` command."""

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app
from infbench.data.errors import ConfigError
from infbench.data.schema import Cell, CellResult, DeviceInfo
from infbench.report.compare import compare_rows
from infbench.report.data import flat_row, lib_csv
from infbench.report.lib_import import published_cells, read_lib_csv
from infbench.store import Store
from infbench.store.published import import_published, published_runs

FIXTURES = Path(__file__).parents[2] / "fixtures"
A100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA A100-SXM4-40GB", count=4)


def local_cell(batch=16, n=256, engine="vllm", dtype="float16", tp=2, duration=4.0):
    c = Cell(model="llama-2-7b", engine=engine, dtype=dtype, batch=batch, input_len=n, output_len=n,
             tensor_parallel_size=tp)
    total = batch * 2 * n / duration
    return CellResult(cell_id=c.cell_id(A100), spec_hash=c.spec_hash(), cell=c, device=A100, status="ok",
                      metrics={"duration_s": duration, "total_tok_s": total, "output_tok_s": total / 2,
                               "ttft_s": {"mean": 0.4, "p50": 0.4}, "tpot_s": {"mean": 0.014, "p50": 0.014},
                               "e2e_s": {"mean": duration - 0.1, "p50": duration - 0.1}, "avg_power_w": 900.0},
                      started_at=time.time(), finished_at=time.time())


def test_export_then_import_round_trip(tmp_path, pm):
    store = Store(tmp_path / "site.db")
    run = store.begin_run({"host": "site"})
    cells = [local_cell(), local_cell(batch=64, n=128, duration=2.5), local_cell(batch=4, engine="llama.cpp",
                                                                                 dtype="f16", tp=1)]
    for c in cells:
        store.save_cell(run, c)
    local = store.results(run_id=run)
    csv_path = tmp_path / "site.csv"
    csv_path.write_text(lib_csv(local))

    rows = read_lib_csv(csv_path)
    assert len(rows) == 3 and rows[0].line == 2 and rows[0].hardware == "NVIDIA A100-SXM4-40GB"
    results, info = published_cells(rows, {"name": "site export"}, pm)
    assert info["devices"] == {"a100-40gb": 3} and not info["unmapped_devices"] and not info["unknown_models"]
    imported_run = import_published(store, results, {"name": "site export", "file": str(csv_path)})
    back = store.results(run_id=imported_run)
    by_hash = {r["spec_hash"]: r for r in back}
    for orig in local:
        r = by_hash[orig["spec_hash"]]  # the same workload (model, engine, dtype, batch, lengths, tp)
        assert r["cell_id"] != orig["cell_id"]  # ...but never the local cell's identity
        assert r["metrics"]["duration_s"] == pytest.approx(orig["metrics"]["duration_s"])
        assert r["metrics"]["total_tok_s"] == pytest.approx(orig["metrics"]["total_tok_s"])
        assert r["metrics"]["ttft_s"]["mean"] == pytest.approx(0.4)
        assert r["metrics"]["e2e_s"]["mean"] == pytest.approx(orig["metrics"]["duration_s"] - 0.1)
        assert r["metrics"]["avg_power_w"] == pytest.approx(900.0)
        assert r.published and not orig.published
        assert r["device"]["properties"]["catalog_id"] == "a100-40gb"
    # Published cells never count as measured here: a re-run does not skip them.
    assert store.finished_cell_ids() == {c.cell_id for c in cells} | {r["cell_id"] for r in back}
    assert [r["run_id"] for r in published_runs(store)] == [imported_run]
    assert store.runs()[0]["provenance"]["kind"] == "published"
    # Reports tell them apart, and compare pairs the site's cells with them cell by cell.
    assert flat_row(back[0])["published"] and flat_row(back[0])["device"].endswith("(site export)")
    res = compare_rows(local, back)
    assert len(res["pairs"]) == 3 and res["geomean"]["total_tok_s"] == pytest.approx(1.0)
    # Export of the imported run gives the same layout back.
    again = tmp_path / "again.csv"
    again.write_text(lib_csv(back))
    assert [(r.hardware, r.batch, r.latency_s) for r in read_lib_csv(again)] == \
           [(r.hardware, r.batch, r.latency_s) for r in rows]


def test_paper_rows_mapping(pm):
    rows = read_lib_csv(FIXTURES / "lib_published_3dev.csv")
    assert len(rows) == 180 and rows[0].line == 6  # 4 comment lines, then the header
    results, info = published_cells(rows, None, pm)
    assert info["devices"] == {"a100-40gb": 60, "h100-sxm": 60, "mi250": 60}
    by = {(r.device.properties["published_name"], r.cell.engine, r.cell.tensor_parallel_size, r.cell.batch,
           r.cell.input_len, (r.engine.get("options") or {}).get("n_batch")): r for r in results}
    # vLLM row: "Nvidia A100 GPU,2,vLLM,meta-llama/Llama-2-7b-hf,512,32,9.06..." -> tp 2, batch 32, fp16.
    v = by[("Nvidia A100 GPU", "vllm", 2, 32, 512, None)]
    assert v.cell.model == "llama-2-7b" and v.cell.dtype == "float16" and v.metrics["duration_s"] == pytest.approx(
        9.06, abs=0.01)
    assert v.metrics["total_tok_s"] == pytest.approx(32 * 1024 / v.metrics["duration_s"])
    # llama-bench -b 16 on one MI250 (2 GCDs): one sequence, n_batch 16, layer split over 2 devices.
    ll = by[("AMD MI250 GPU", "llama.cpp", 2, 1, 128, 16)]
    assert ll.device.count == 2 and ll.engine["published"] and ll.engine["line"] > 6
    assert info["single_sequence_rows"] == 60  # n_batch 1, 16, 32, 64 x 5 lengths x 3 device counts
    assert by[("AMD MI250 GPU", "llama.cpp", 2, 1, 128, 1)].engine["options"] == {"n_batch": 1}
    # Different n_batch values are different published workloads (their own spec hash).
    assert ll.spec_hash != by[("AMD MI250 GPU", "llama.cpp", 2, 1, 128, 32)].spec_hash
    assert len({r.cell_id for r in results}) == 180


def test_malformed_rows_name_their_line(tmp_path):
    good = "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput\n"
    row = "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,16,2.0,2048\n"
    p = tmp_path / "bad.csv"
    p.write_text(good + row + "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,sixteen,2.0,2048\n")
    with pytest.raises(ConfigError, match=r"bad.csv, line 3: column 'Batch Size' is 'sixteen', not a number"):
        read_lib_csv(p)
    p.write_text(good + row + row + "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,16,-1,2048\n")
    with pytest.raises(ConfigError, match=r"line 4: column 'Latency' is '-1'; it must be a positive number"):
        read_lib_csv(p)
    p.write_text(good + "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,16\n")
    with pytest.raises(ConfigError, match=r"line 2: 6 values for 8 columns"):
        read_lib_csv(p)
    p.write_text("Hardware,Framework,Model\nx,y,z\n")
    with pytest.raises(ConfigError, match=r"line 1: the header lacks Num of Hardware"):
        read_lib_csv(p)


def test_import_command(tmp_path):
    runner = CliRunner()
    db = tmp_path / "r.db"
    res = runner.invoke(app, ["import", "--format", "lib-csv", str(FIXTURES / "lib_published_3dev.csv"), "--store",
                              str(db), "--commit", "4211f5d", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["rows"] == 180 and out["source"]["commit"] == "4211f5d" and len(out["source"]["sha256"]) == 64
    store = Store(db)
    assert len(store.results()) == 180 and all(r.published for r in store.results())
    assert store.runs()[0]["provenance"]["source"]["name"] == "LLM-Inference-Bench"
    bad = tmp_path / "bad.csv"
    bad.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency\n"
                   "Nvidia A100 GPU,1,vLLM,m,128,16,oops\n")
    res = runner.invoke(app, ["import", "--format", "lib-csv", str(bad), "--store", str(db)])
    assert res.exit_code == 2 and "line 2" in res.output and "Latency" in res.output
    assert len(Store(db).results()) == 180  # nothing half-imported
    res = runner.invoke(app, ["import", "--format", "nonesuch", str(bad), "--store", str(db)])
    assert res.exit_code == 2 and "unknown import format" in res.output
