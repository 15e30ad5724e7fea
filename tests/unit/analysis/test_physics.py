"""Physics as a check on every cell (infbench.analysis.physics): sound cells pass, cells that
beat their floor, exceed a utilisation of 1, produced too few tokens or hit a prefix cache
are stored `suspect` with the reason, and results, report and export show it."""

from __future__ import annotations

import pytest

from infbench.analysis.floor import add_roofline
from infbench.analysis.physics import PhysicalLimits, limits_from_info, mark_suspect
from infbench.analysis.roofline import Limits, roofline_for
from infbench.data.models import resolve
from infbench.data.schema import Cell, CellResult, DeviceInfo, Load, RequestRecord
from infbench.data.stored import StoredCell

A100 = Limits(id="a100-40gb", bandwidth_bytes_s=1.555e12, peak_flops={"fp16": 312e12, "fp32": 19.5e12})
GPU = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA A100-SXM4-40GB")


def records(n: int, ttft: float, tpot: float, n_out: int, n_in: int = 128, server=None, stagger: float = 0.0):
    """``n`` requests sent at 0 (plus ``stagger`` x i), first token after ``ttft`` s, then one per ``tpot`` s."""
    out = []
    for i in range(n):
        t0 = int(i * stagger * 1e9)
        toks = [t0 + int((ttft + k * tpot) * 1e9) for k in range(n_out)]
        out.append(RequestRecord(t_send_ns=t0, t_tokens_ns=toks, n_in=n_in, n_out=n_out, server=server))
    return out


def result(cell: Cell, recs: list[RequestRecord], status: str = "ok") -> CellResult:
    from infbench.measure.derive import cell_metrics

    return CellResult(cell_id="c", spec_hash="h", cell=cell, device=GPU, status=status,
                      metrics=cell_metrics(recs, devices_used=1) if status == "ok" else {}, records=recs,
                      started_at=0.0, finished_at=1.0)


CELL = Cell(model="llama-2-7b", engine="vllm", dtype="float16", batch=1, input_len=128, output_len=128)


def floors(cell: Cell = CELL) -> dict:
    return roofline_for(cell.model_dump(), None, A100)


def test_a_sound_cell_is_not_suspect():
    f = floors()
    r = result(CELL, records(1, 2 * f["ttft_floor_s"], 2 * f["tpot_floor_s"], 128))
    add_roofline(r, resolve("llama-2-7b"), A100)
    assert "suspect" not in r.metrics and 0.4 < r.metrics["mbu"] < 0.6 and r.metrics["mfu"] < 1


def test_fixture_with_too_few_tokens_is_suspect():
    f = floors()
    r = result(CELL, records(1, 2 * f["ttft_floor_s"], 2 * f["tpot_floor_s"], 100))   # 100 of 128 asked
    add_roofline(r, resolve("llama-2-7b"), A100)
    assert r.status == "ok" and "too few tokens: 1 of 1 requests produced fewer output tokens than the 128 asked " \
                                "(as few as 100)" in r.metrics["suspect"]
    short_prompt = result(CELL, records(1, 2 * f["ttft_floor_s"], 2 * f["tpot_floor_s"], 128, n_in=64))
    mark_suspect(short_prompt, A100)
    assert "prompts were shorter than the 128 tokens asked" in short_prompt.metrics["suspect"]


def test_faster_than_the_floor_and_utilisation_above_one():
    f = floors()
    r = result(CELL, records(1, 0.5 * f["ttft_floor_s"], 0.5 * f["tpot_floor_s"], 128))
    add_roofline(r, resolve("llama-2-7b"), A100)
    s = r.metrics["suspect"]
    assert r.metrics["mbu"] > 1 and "MBU 2.00 > 1" in s and "a100-40gb's theoretical bandwidth" in s
    assert "TTFT below its floor" in s and "TPOT below its floor" in s and "E2E below its floor" in s


def test_cache_resident_model_on_a_cpu_names_the_cache():
    lim = limits_from_info({"id": "cpu", "memory_bandwidth_bytes_s": 20e9, "peak_flops": {"fp32": 300e9},
                            "bandwidth_kind": "attainable", "cache_bytes": 32 * 2**20,
                            "attainable": {"memory_bandwidth_bytes_s": 20e9, "flops": {"fp32": 150e9}}})
    assert isinstance(lim, PhysicalLimits) and lim.bandwidth_kind == "attainable" and lim.cache_bytes == 32 * 2**20
    cell = Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f32", batch=1, input_len=16, output_len=8)
    f = roofline_for(cell.model_dump(), None, lim)
    r = result(cell, records(1, 2 * f["ttft_floor_s"], 0.2 * f["tpot_floor_s"], 8, n_in=16))
    add_roofline(r, resolve("tiny-random-llama"), lim)
    assert "fit in the 32 MiB last-level cache" in r.metrics["suspect"]
    att = r.metrics["roofline"]["attainable"]
    assert att["bandwidth_bytes_s"] == 20e9 and att["mbu"] == pytest.approx(r.metrics["mbu"])
    assert att["mfu_fp32"] == pytest.approx(2 * r.metrics["mfu"])      # 150 GFLOP/s attainable vs 300 peak
    assert r.metrics["roofline"]["bandwidth_kind"] == "attainable"


def test_prefix_cache_hit_reported_by_the_server():
    f = floors()
    recs = records(1, 2 * f["ttft_floor_s"], 2 * f["tpot_floor_s"], 128, server={"timings": {"cache_n": 120}})
    r = result(CELL, recs)
    add_roofline(r, resolve("llama-2-7b"), A100)
    assert "prefix cache hit: 1 of 1 requests took up to 120 prompt tokens" in r.metrics["suspect"]
    # a shared first token (BOS) from the cache is not a prefix-cache hit worth the name
    bos = result(CELL, records(1, 2 * f["ttft_floor_s"], 2 * f["tpot_floor_s"], 128, server={"cached_tokens": 1}))
    add_roofline(bos, resolve("llama-2-7b"), A100)
    assert "suspect" not in bos.metrics


def test_serving_cells_use_the_floor_of_one_request():
    cell = CELL.model_copy(update={"load": Load(mode="concurrency", concurrency=4, num_requests=4)})
    one = floors()
    # staggered requests each prefilled alone: TTFT above the one-prompt floor, below a 4-prompt one -> sound
    ok = result(cell, records(4, 1.5 * one["ttft_floor_s"], 1.5 * one["tpot_floor_s"], 128, stagger=1.0))
    add_roofline(ok, resolve("llama-2-7b"), A100)
    assert not any("below its floor" in x for x in ok.metrics.get("suspect", "").split("; "))
    bad = result(cell, records(4, 0.5 * one["ttft_floor_s"], 1.5 * one["tpot_floor_s"], 128, stagger=1.0))
    add_roofline(bad, resolve("llama-2-7b"), A100)
    assert "below the prefill floor of one prompt" in bad.metrics["suspect"]


def test_failed_cells_and_unknown_limits():
    r = result(CELL, [], status="failed")
    mark_suspect(r, A100)
    assert "suspect" not in r.metrics
    # without device limits the token checks still run
    short = result(CELL, records(1, 0.1, 0.01, 10))
    add_roofline(short, resolve("llama-2-7b"), None, "no description")
    assert short.metrics["roofline_note"] == "no description" and "too few tokens" in short.metrics["suspect"]


def stored(suspect: str | None) -> StoredCell:
    m = {"ttft_s": {"mean": 0.1, "p50": 0.1}, "tpot_s": {"mean": 0.01, "p50": 0.01}, "e2e_s": {"mean": 1.0},
         "duration_s": 1.0, "output_tok_s": 100.0, "total_tok_s": 200.0, "n_completed": 1}
    if suspect:
        m["suspect"] = suspect
    return StoredCell(cell_id="c1", spec_hash="h", run_id="r", status="ok", error=None,
                      spec=CELL.model_dump(), device=GPU.model_dump(), metrics=m, engine={}, power_note=None,
                      wall_s=1.0, engine_s=1.0, started_at=0.0, finished_at=1.0)


def test_results_report_and_export_show_suspect():
    from rich.console import Console

    from infbench.report.data import flat_row, lib_csv
    from infbench.report.html import render_html
    from infbench.report.tables import results_csv, results_table, suspect_notes

    rows = [stored("MBU 1.90 > 1: decode read faster"), stored(None)]
    console = Console(width=250, record=True)
    console.print(results_table(rows))
    text = console.export_text()
    assert "suspect" in text and text.count(" ok ") >= 1
    assert suspect_notes(rows) == ["c1 llama-2-7b vllm b1 i128 o128: MBU 1.90 > 1: decode read faster"]
    assert "suspect" in results_csv(rows).splitlines()[0]
    lib = lib_csv(rows).splitlines()
    assert lib[0].endswith(",suspect") and lib[1].endswith("MBU 1.90 > 1: decode read faster") and lib[2].endswith(",")
    flat = [flat_row(r) for r in rows]
    assert flat[0]["suspect"].startswith("MBU") and flat[1]["suspect"] is None
    pytest.importorskip("plotly")
    page = render_html(flat)
    assert 'id="suspect-cells"' in page and "(1 suspect)" in page and "MBU 1.90 &gt; 1" in page


def test_published_h100_figure_implies_its_mbu():
    """LLM-Inference-Bench's 0.994 s (Llama-3-8B, vLLM, b1, in = out = 128) on the H100 SXM's
    3.35 TB/s: TPOT at most (0.994 - TTFT floor) / 127, MBU at least bytes / (TPOT x bw)."""
    from infbench.analysis.physics import LIB_H100_LLAMA3_8B as pub
    from infbench.analysis.physics import published_utilisation

    h100 = Limits("h100-sxm", 3.35e12, {"bf16": 989.4e12})
    spec = {k: pub[k] for k in ("model", "dtype", "batch", "input_len", "output_len")}
    r = published_utilisation(spec, pub["e2e_s"], h100)
    floor = roofline_for({**spec, "load": None}, None, h100)
    tpot = (0.994 - floor["ttft_floor_s"]) / 127
    assert r["tpot_s_at_most"] == pytest.approx(tpot)
    assert r["mbu_at_least"] == pytest.approx(floor["decode_bytes_per_step"] / (tpot * 3.35e12))
    assert 0.5 < r["mbu_at_least"] < 0.65 and r["e2e_utilisation"] == pytest.approx(floor["e2e_floor_s"] / 0.994)
    # 15.04 GB per decode step: Llama-3-8B's bf16 weights without the embedding table, plus KV and activations
    assert floor["decode_bytes_per_step"] == pytest.approx(15.04e9, rel=0.01)


def test_workloads_that_reuse_prefixes_by_design_are_not_suspect_for_it():
    """Shared prefixes, a Mooncake trace's repeated hash_ids and multi-turn sessions hit the
    prefix cache on purpose: no prefix-cache reason and no TTFT floor; a trace's per-request
    output lengths are not measured against its mean; an Azure trace (unique prompts) and a
    plain cell still are checked for hits."""
    from infbench.data.schema import Dataset, Trace

    f = floors()
    load = Load(mode="concurrency", concurrency=1, num_requests=2)
    hit = {"cached_tokens": 100}
    fast = 0.5 * f["ttft_floor_s"]                       # a prefill mostly served from the cache
    moon = Trace(path="/t.jsonl", sha256="0" * 16, format="mooncake", n=2, max_total_len=300)
    data = Dataset(path="/c.jsonl", sha256="0" * 16, n=2, multi_turn=True)
    by_design = [CELL.model_copy(update={"load": load, "prefix_len": 100, "num_prefixes": 2}),
                 CELL.model_copy(update={"load": load.model_copy(update={"mode": "trace", "concurrency": None,
                                                                           "trace_speed": 1.0}), "trace": moon}),
                 CELL.model_copy(update={"load": load, "dataset": data})]
    for cell in by_design:
        r = result(cell, records(2, fast, 2 * f["tpot_floor_s"], 64 if cell.trace else 128, server=hit, stagger=1))
        add_roofline(r, resolve("llama-2-7b"), A100)
        assert "suspect" not in r.metrics, (cell.label(), r.metrics.get("suspect"))
    assert roofline_for(by_design[1].model_dump(), None, A100) is None    # lengths vary per request
    azure = by_design[1].model_copy(update={"trace": moon.model_copy(update={"format": "azure"})})
    r = result(azure, records(2, 2 * f["ttft_floor_s"], 2 * f["tpot_floor_s"], 64, server=hit, stagger=1))
    add_roofline(r, resolve("llama-2-7b"), A100)
    assert r.metrics["suspect"].startswith("prefix cache hit: 2 of 2 requests")
    plain = result(CELL.model_copy(update={"load": load}), records(2, fast, 2 * f["tpot_floor_s"], 128, server=hit,
                                                                   stagger=1))
    add_roofline(plain, resolve("llama-2-7b"), A100)
    assert "prefix cache hit" in plain.metrics["suspect"] and "below the prefill floor" in plain.metrics["suspect"]
