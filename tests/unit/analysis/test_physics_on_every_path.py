"""Physics wherever a number enters the store (issue 41, item 6): a replayed cell and an ingested
one faster than any hardware are stored suspect, a perplexity below one is a failed measurement,
and `predict` refuses what `run` refuses."""

from __future__ import annotations

from tests.support.hostile import cli


def test_a_replayed_cell_is_held_to_physics(tmp_path):
    """A signed journal entry whose cell breaks a device-free floor is stored suspect, not ok."""
    from infbench.store import Store, journal

    path = tmp_path / "s.db"
    s = Store(path)
    run = s.begin_run({"host": "h"}, command="infbench run")
    s.run_meta[run] = {"provenance": {}, "command": "", "started_at": 1.0}
    bad = cell_result_fast()
    journal.keep(s, run, bad, "database or disk is full")
    journal.release(s, run)
    assert journal.replay(s)["cells"] == 1
    [row] = Store(path, readonly=True).results()
    assert "faster than any hardware" in (row["metrics"].get("suspect") or "")


def cell_result_fast():
    """A sound-looking cell whose three tokens arrive 1, 2 and 3 ns after the send."""
    from infbench.data.schema import Cell, CellResult, RequestRecord
    from infbench.measure.derive import cell_metrics
    from tests.support.hostile import DEV

    c = Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=3)
    recs = [RequestRecord(t_send_ns=1000, t_tokens_ns=[1001, 1002, 1003], n_in=8, n_out=3)]
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status="ok",
                      metrics=cell_metrics(recs), records=recs, engine={"name": "llama.cpp"}, started_at=1.0,
                      finished_at=2.0)


# -- item 6: physics on ingest, and predict refuses what run refuses ------------------------------
def test_perplexity_below_one_is_a_failed_measurement():
    from infbench.data.scores import PerplexityResult

    for ppl in (0.5, -3.5):
        r = PerplexityResult(model="m", engine="e", dtype="f16", text_path="t.txt", text_sha256="t",
                             weights_sha256="w", n_ctx=64, status="ok", perplexity=ppl)
        assert r.status == "failed" and "at least 1" in r.error


def test_an_ingested_cell_faster_than_any_hardware_is_stored_suspect(tmp_path):
    from infbench.execution.worker import ingest
    from infbench.store import Store
    from tests.support.hostile import worker_folder

    out = worker_folder(tmp_path / "w", cells=[cell_result_fast()])
    s = Store(tmp_path / "s.db")
    res = ingest(out, s)
    assert res["ok"] == 1
    [row] = Store(tmp_path / "s.db", readonly=True).results()
    assert "faster than any hardware" in row["metrics"]["suspect"]


def test_predict_refuses_what_run_refuses():
    r = cli("predict", "--model", "smollm2-135m", "--device", "cpu", "--input", "20000", "--output", "128")
    assert "exceeds the model's context of 8,192" in " ".join(r.output.split())
    r = cli("predict", "--model", "smollm2-135m", "--device", "cpu", "--engine", "vllm", "--engine-arg",
            "max_num_batched_tokens=-1")
    assert "max_num_batched_tokens" in r.output

