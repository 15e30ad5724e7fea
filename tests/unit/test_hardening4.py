"""Issue 33, the fourth hardening round: no output replaces a file that is not an output,
engine arguments are part of a cell's identity and checked before a run, nothing
impossible or contradictory is stored as ok, no `run` option is silently ignored, and the
internal errors and the secret of the probe are clear errors.

The CLI runs in-process (:func:`tests.support.hostile.cli` fails on any escaped
exception). Device nodes, FIFOs and sockets are made in pytest's temporary folder, never
the real ``/dev/null``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from infbench.data.errors import ConfigError
from infbench.data.schema import Cell, DeviceInfo, Load, Sweep
from tests.support.hostile import SPECIAL_KINDS, assert_no_secret, cli, make_store, same_node, special_file

DRY = ["run", "--model", "tiny", "--dry-run"]


# -- item 1: the writer refuses anything that is not a regular file or absent ---------------------
def _writing_commands(tmp_path: Path, store: Path) -> dict[str, tuple[list, Path]]:
    """Each command that writes a file, with the path its ``--out``/``--write-spec`` names."""
    t = tmp_path / "target"
    return {
        "export csv": (["export", "--format", "csv", "--store", store, "--out", t], t),
        "export json": (["export", "--format", "json", "--store", store, "--out", t], t),
        "export lib-csv": (["export", "--format", "lib-csv", "--store", store, "--out", t], t),
        "compare --out": (["compare", store, store, "--out", t], t),
        "run --write-spec": (["run", "--model", "tiny", "--batch", "1", "--store", store, "--write-spec", t], t),
        "report --out (the folder)": (["report", "--no-static", "--store", store, "--out", t], t),
        "report --out (index.html)": (["report", "--no-static", "--store", store, "--out", tmp_path / "rep"],
                                      tmp_path / "rep" / "index.html"),
        "report --out (a figure)": (["report", "--static", "--store", store, "--out", tmp_path / "rep"],
                                    tmp_path / "rep" / "figures" / "throughput_vs_batch.png"),
        "worker --out (the folder)": (["worker", "--spec", tmp_path / "spec.json", "--out", t], t),
        "worker --out (cells.jsonl)": (["worker", "--spec", tmp_path / "spec.json", "--out", tmp_path / "w"],
                                       tmp_path / "w" / "cells.jsonl"),
    }


WRITERS = ["export csv", "export json", "export lib-csv", "compare --out", "run --write-spec",
           "report --out (the folder)", "report --out (index.html)", "report --out (a figure)",
           "worker --out (the folder)", "worker --out (cells.jsonl)"]


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("command", WRITERS)
def test_no_writer_replaces_a_special_file(tmp_path, command, kind):
    """Every command that writes refuses a device node, FIFO, socket, folder or a link to
    one (exit 2, naming the path and what it is), before reading the store or planning, and
    leaves the node as it was."""
    store = make_store(tmp_path / "s.db")
    args, target = _writing_commands(tmp_path, store)[command]
    is_folder_target = command.endswith("(the folder)")
    if kind == "folder" and is_folder_target:
        pytest.skip("a folder is what this --out takes")
    _, words = special_file(target, kind)
    before = os.lstat(target)
    r = cli(*args, code=2)
    text = " ".join(r.output.split())
    assert str(target.name) in text and words.split(" (a symbolic")[0] in text, r.output
    assert same_node(target, before)
    if kind == "fifo":
        assert not any(p.name.endswith(".tmp") for p in target.parent.iterdir())  # no work was begun


def test_writers_refuse_before_any_work(tmp_path):
    """The refusal comes first: with a store that does not exist, the output is named,
    not the missing store (the store would be read after the check)."""
    fifo, _ = special_file(tmp_path / "out.csv", "fifo")
    r = cli("export", "--format", "csv", "--store", tmp_path / "none.db", "--out", fifo)
    assert "FIFO" in r.output and "none.db" not in r.output


def test_link_to_the_store_is_refused(tmp_path):
    store = make_store(tmp_path / "s.db")
    link = tmp_path / "out.csv"
    link.symlink_to(store)
    for args in (["export", "--format", "csv", "--store", store, "--out", link],
                 ["compare", store, store, "--out", link]):
        assert "results store" in cli(*args).output
    assert store.is_file() and not store.is_symlink()


def test_a_regular_earlier_output_is_still_replaced(tmp_path):
    """What the writer always did stays: an earlier output (also through a link) is replaced."""
    store = make_store(tmp_path / "s.db")
    out = tmp_path / "r.csv"
    cli("export", "--format", "csv", "--store", store, "--out", out, code=0)
    link = tmp_path / "link.csv"
    link.symlink_to(out)
    cli("export", "--format", "csv", "--store", store, "--out", link, code=0)
    assert link.is_symlink() and out.read_text().startswith("cell_id,")


# -- item 2: engine arguments are part of a cell's identity, and checked before a run -------------
PINNED_CPU = DeviceInfo(vendor="cpu", kind="cpu", model="AMD EPYC 7763 64-Core Processor")
PINNED_H100 = DeviceInfo(vendor="nvidia", kind="gpu", model="NVIDIA H100 80GB HBM3", count=8)
#: (cell, spec_hash, cell_id on PINNED_CPU, cell_id on PINNED_H100), computed on main at a6bda0c,
#: before engine arguments entered the identity: a cell without them keeps its id forever.
PINNED = [
    (Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=3),
     "f18da4b1b47feac5", "2dcc1215f64552ca", "b65a66bad91e11ac"),
    (Cell(model="smollm2-135m", engine="transformers", dtype="float16", batch=4, input_len=128, output_len=64, seed=3,
          warmup=2), "e640004e38d08e51", "c72d9b5608ab263e", "ffeeff561407616d"),
    (Cell(model="llama-3-8b", engine="vllm", dtype="bfloat16", batch=64, input_len=1024, output_len=128,
          tensor_parallel_size=8), "f2bd35fb9783721d", "c4f894cb75380a7d", "d923b0b77ec7f8f7"),
    (Cell(model="smollm2-135m", engine="llama.cpp-server", dtype="q8_0", batch=1, input_len=256, output_len=32,
          load=Load(mode="concurrency", concurrency=8, num_requests=64)),
     "3e3d91e6648b4f3b", "e0d2f303a8fea298", "435e3fb14198b56d"),
    (Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=2, input_len=64, output_len=16,
          prefix_len=32, num_prefixes=2, repeat=3), "28627022c5a13eb4", "b25f81e40a4699a4", "7908ab6ce3496cb8"),
]


@pytest.mark.parametrize("cell, spec_hash, on_cpu, on_h100", PINNED)
def test_cell_ids_without_engine_args_are_those_of_main(cell, spec_hash, on_cpu, on_h100):
    assert (cell.spec_hash(), cell.cell_id(PINNED_CPU), cell.cell_id(PINNED_H100)) == (spec_hash, on_cpu, on_h100)
    # {} is "none given" too
    assert cell.model_copy(update={"engine_args": {}}).cell_id(PINNED_CPU) == on_cpu
    assert Cell(**{**cell.model_dump(), "engine_args": {}}).spec_hash() == spec_hash


def test_planned_cells_without_engine_args_keep_their_ids(pm, cpu):
    """Planning without engine arguments gives the cells main planned (same spec, same id);
    with them, every id and spec hash changes, and each value is its own cell."""
    from infbench.plan import plan

    def cells(**kw):
        sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1, 2], input_len=[8],
                   output_len=[3], **kw)
        return plan(sw, cpu, pm).cells

    plain = cells()
    assert [c.cell_id(PINNED_CPU) for c in plain][0] == PINNED[0][2]
    assert all(c.engine_args is None for c in plain)
    four, eight = cells(engine_args={"n_ubatch": 4}), cells(engine_args={"n_ubatch": 8})
    assert all(c.engine_args == {"n_ubatch": 4} for c in four)
    ids = [{c.cell_id(PINNED_CPU) for c in cs} for cs in (plain, four, eight)]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])
    assert len({c.spec_hash() for c in plain + four + eight}) == 6
    assert "[n_ubatch=4]" in four[0].label()


def test_engine_args_only_enter_the_cells_of_engines_that_read_them(pm, cpu):
    from infbench.plan import plan

    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp", "transformers"], dtypes=["f16"], batch=[1],
               input_len=[8], output_len=[3], engine_args={"n_ubatch": 4})
    by_engine = {c.engine: c for c in plan(sw, cpu, pm).cells}
    assert by_engine["llama.cpp"].engine_args == {"n_ubatch": 4}
    assert by_engine["transformers"].engine_args is None  # transformers has no n_ubatch: its ids stay


def test_a_run_with_engine_args_is_not_skipped(tmp_path, cpu):
    """The probe: `run --engine-arg ...` after a plain run printed "skipped ... already
    stored ok". It is now a new cell, stored beside the first."""
    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.run import RunOptions
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.plan import plan
    from infbench.store import Store

    fpm = testing.plugin_manager()
    store = Store(tmp_path / "r.db")
    ex = InProcessExecutor(fpm, {"test": True})

    def run(**kw):
        sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1], input_len=[16],
                   output_len=[4], **kw)
        return ex.run(plan(sw, cpu, fpm), store, RunOptions(engine_options=dict(kw.get("engine_args") or {})),
                      ev.ignore)

    assert len(run().ok) == 1
    tuned = run(engine_args={"ttft_s": 0.002})
    assert len(tuned.ok) == 1 and not tuned.skipped
    assert len(run(engine_args={"ttft_s": 0.002}).skipped) == 1      # the same arguments: already stored
    stored = {r["cell_id"]: r["spec"].get("engine_args") for r in store.results()}
    assert sorted(map(str, stored.values())) == ["None", "{'ttft_s': 0.002}"]
    store.close()


@pytest.mark.parametrize("arg, message", [
    ("n_ubatch=-1", "n_ubatch=-1: input should be greater than or equal to 1"),
    ("n_ubatch=0", "n_ubatch=0: input should be greater than or equal to 1"),
    ("n_ubatch=1000000000", "less than or equal to 1048576"),
    ("n_ubatch=1e9", "n_ubatch=1000000000.0: input should be a valid integer"),  # read as JSON: a float (issue 41)
    ("n_threads=0", "n_threads=0: input should be greater than or equal to 1"),
    ("n_threads=1.5", "n_threads=1.5: input should be a valid integer"),
    ('n_threads={"a":1}', 'n_threads={"a":1}: input should be a valid integer'),
    ("n_threads=[1,2]", "n_threads=[1,2]: input should be a valid integer"),
    ("n_threads=nan", "n_threads=nan: input should be a valid integer"),
    ("n_threads=.inf", "input should be a valid integer"),
    ("n_threads=true", "input should be a valid integer"),
    ("n_gpu_layers=-2", "n_gpu_layers=-2"),
])
def test_bad_engine_arg_values_are_refused_before_the_run(tmp_path, arg, message):
    store = tmp_path / "s.db"
    for extra in (["--dry-run"], ["--store", store]):
        r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "3", "--engine-arg", arg,
                *extra)
        assert message in " ".join(r.output.split()) and "refused by llama.cpp" in r.output
        assert "takes an integer from" in r.output  # the hint says what the option takes
    assert not store.exists()  # nothing was started or stored


@pytest.mark.parametrize("arg, message", [
    ("extra_body={bad", "not JSON"),
    ("extra_body=[1, 2]", "must be a JSON object"),
    ("extra_headers={\"X-A\": 1}", "valid string"),
    ("extra_headers={\"X A\": \"1\"}", "not an HTTP token"),
    ("endpoint=foo", "'completions' or 'chat'"),
    ("startup_timeout_s=.nan", "finite number"),
    ("parallel=0", "greater than or equal to 1"),
    ("event_loop=trio", "'uvloop' or 'asyncio'"),
])
def test_bad_openai_options_are_refused(arg, message):
    engine = "llama.cpp-server" if arg.startswith(("startup", "parallel")) else "openai"
    where = ["--model", "tiny"] if engine != "openai" else ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    r = cli("run", "--engine", engine, *where, "--batch", "1", "--dry-run", "--engine-arg", arg)
    assert message in " ".join(r.output.split()) and f"refused by {engine}" in r.output


def test_extra_body_and_headers_are_parsed_as_json():
    """The probe: `--engine-arg 'extra_body={"token": ...}'` failed every request with
    "dictionary update sequence element #0 has length 1" (the text was merged as a dict)."""
    from infbench.contract.registry import engine_specs
    from infbench.data.engine_options import check_engine_args, parse_engine_args
    from infbench.engines.openai import OpenAIEngine

    raw = parse_engine_args(['extra_body={"top_k": 5, "token": "s3cretTOKEN"}', 'extra_headers={"X-Team": "abcd1234"}'])
    from infbench.contract.manager import get_plugin_manager

    checked = check_engine_args(engine_specs(get_plugin_manager()), ["openai"], raw)
    assert checked.values["extra_body"] == {"top_k": 5, "token": "s3cretTOKEN"}
    eng = OpenAIEngine(DeviceInfo(vendor="remote", kind="remote", model="x"), {"base_url": "http://h/v1",
                                                                               **checked.values})
    body = eng.payload(Cell(model="m", engine="openai", dtype="auto", batch=1, input_len=4, output_len=2), "hi")
    assert body["top_k"] == 5 and body["prompt"] == "hi"
    assert eng._headers()["X-Team"] == "abcd1234" and "abcd1234" in eng._secrets()
    # in the identity: extra_body, its token redacted; extra_headers never (credentials)
    ident = checked.identity["openai"]
    assert set(ident) == {"extra_body"} and ident["extra_body"]["top_k"] == 5
    assert "s3cretTOKEN" not in json.dumps(ident)


def test_options_models_declare_the_engines_options(pm):
    from infbench.contract.registry import engine_specs
    from infbench.data.engine_options import TransformersOptions

    specs = engine_specs(pm)
    assert specs["transformers"].options_model is TransformersOptions
    assert TransformersOptions(cache_implementation="static").cache_implementation == "static"
    with pytest.raises(ValidationError):
        TransformersOptions(cache_implementation="dynamic")
    with pytest.raises(ValidationError):
        TransformersOptions.model_validate({"bogus": 1})  # unknown keys refused by name
    assert {"n_threads", "n_gpu_layers", "n_ubatch"} == set(specs["llama.cpp"].options)
    cli(*DRY, "--engine-arg", "n_ubatch=256", code=0)


def test_plugin_engines_declaring_names_only_keep_working():
    """A plugin's EngineSpec with `options` names and no model: names checked, values as parsed."""
    from infbench.data.engine import EngineSpec
    from infbench.data.engine_options import check_engine_args

    specs = {"acme": EngineSpec("acme", None, ["cpu"], options=("knob",)),
             "open": EngineSpec("open", None, ["cpu"])}
    got = check_engine_args(specs, ["acme"], {"knob": "1.5x"})
    assert got.values == {"knob": "1.5x"} and got.identity == {"acme": {"knob": "1.5x"}}
    with pytest.raises(ConfigError, match="did you mean: knob"):
        check_engine_args(specs, ["acme"], {"knbo": 1})
    assert check_engine_args(specs, ["open"], {"anything": 1}).identity == {"open": {"anything": 1}}


def test_results_report_and_compare_show_the_distinguishing_arguments(tmp_path):
    from infbench.report.compare import compare_rows
    from infbench.report.data import flat_row
    from infbench.report.tables import result_row
    from infbench.store import Store
    from tests.support.hostile import DEV, cell_result

    s = Store(tmp_path / "s.db")
    base = cell_result(1)
    tuned_cell = base.cell.model_copy(update={"engine_args": {"n_ubatch": 4}})
    tuned = base.model_copy(update={"cell": tuned_cell, "cell_id": tuned_cell.cell_id(DEV),
                                    "spec_hash": tuned_cell.spec_hash()})
    ra, rb = s.begin_run({"host": "t"}, command="a"), s.begin_run({"host": "t"}, command="b")
    s.save_cell(ra, base)
    s.save_cell(rb, tuned)
    rows = {r["run_id"]: r for r in s.results()}
    a, b = rows[ra], rows[rb]
    assert result_row(b)["engine_args"] == "n_ubatch=4" and "engine_args" not in result_row(a)
    assert "[n_ubatch=4]" in flat_row(b)["label"] and flat_row(b)["engine_args"] == "n_ubatch=4"
    res = compare_rows([a], [b])
    assert len(res["pairs"]) == 1 and "[no engine args vs n_ubatch=4]" in res["pairs"][0]["label"]
    out = cli("results", "--store", tmp_path / "s.db", code=0).output
    assert "n_ubatch=4" in out
    s.close()


# -- item 3: nothing impossible or self-contradictory is stored as ok --------------------------------
LIB_HEAD = ("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput,"
            "Input Length,Output Length,TTFT Latency,end_latency\n")
#: A sound row: 8 x (128 + 128) tokens in 2.5 s = 819.2 tok/s, TTFT 0.1 s, E2E 2.4 s.
GOOD_ROW = "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.5,819.2,128,128,0.1,2.4\n"


def _import(tmp_path, text, code=2):
    f = tmp_path / "lib.csv"
    f.write_text(text)
    store = tmp_path / "s.db"
    r = cli("import", f, "--store", store, code=code)
    return r, store


def test_a_sound_lib_row_imports(tmp_path):
    r, store = _import(tmp_path, LIB_HEAD + GOOD_ROW, code=0)
    from infbench.store import Store

    s = Store(store, readonly=True)
    (row,) = s.results()
    assert row["metrics"]["tpot_s"]["mean"] == pytest.approx((2.4 - 0.1) / 127)
    s.close()


@pytest.mark.parametrize("row, message", [
    # the probe: TTFT 99 s against an E2E of 2.5 s was stored ok with tpot_s = -0.76 s
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,120,17.07,128,128,99,2.5\n",
     "'TTFT Latency' 99 s exceeds 'end_latency' 2.5 s"),
    # the probe: Input Output Length 128/128 against Input Length 4096 / Output Length 2 was stored as i4096 o2
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128/128,8,2.5,819.2,4096,2,0.1,2.4\n",
     "says 128/128 tokens, but 'Input Length'/'Output Length' say 4096/2"),
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.5,1000,128,128,0.1,2.4\n",
     "'Throughput' 1000 tok/s x 'Latency' 2.5 s is 2500 tokens, but batch 8 x (128 + 128) tokens is 2048"),
    ("Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.5,819.2,128,128,0.1,3.9\n",
     "'end_latency' 3.9 s exceeds 'Latency' 2.5 s"),
])
def test_contradictory_lib_rows_are_refused_with_their_line(tmp_path, row, message):
    r, store = _import(tmp_path, LIB_HEAD + GOOD_ROW + row)
    assert "line 3" in r.output and message in " ".join(r.output.split())
    assert not store.exists() or not cli("results", "--store", store, "--format", "json", code=None).stdout.strip(
        "[]\n")


def test_rounded_throughput_is_accepted(tmp_path):
    # 8 x 256 / 2.47 = 829.15...: printed as 829.1 and 2.47, inside the rounding of the two numbers
    _import(tmp_path, LIB_HEAD + "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,8,2.47,829.1,128,128,0.1,2.4\n",
            code=0)


def test_duplicate_headers_and_header_only_files_are_refused(tmp_path):
    r, _ = _import(tmp_path, "Hardware,Hardware," + LIB_HEAD.removeprefix("Hardware,")
                   + "Nvidia H100 GPU," + GOOD_ROW)
    assert "'Hardware' more than once" in " ".join(r.output.split())
    r, store = _import(tmp_path, LIB_HEAD)  # the probe: a header-only CSV made an empty "completed" run
    assert "a header but no rows" in r.output and not store.exists()


def test_non_finite_perplexity_is_a_failed_result(tmp_path, cpu, monkeypatch):
    """The probe: a GGUF with a NaN norm stored a NaN perplexity as ok, which passed
    `--max-ppl-increase 1%`. The scorer's NaN log-probabilities now fail the measurement."""
    import numpy as np

    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.models import resolve
    from infbench.data.run import RunOptions
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.execution.scenarios.scoring import perplexity_plan
    from infbench.quality.perplexity import PerplexityRequest
    from infbench.store import Store
    from infbench.store.quality import quality_results

    text = tmp_path / "t.txt"
    text.write_text("abcdefgh" * 64)

    class W:
        sha256, format, path, dtype = "0" * 64, "hf", None, None

        def record(self):
            return {"real": True}

    req = PerplexityRequest(resolve("tiny-random-llama"), W(), "fake", "f16", text.read_text(), str(text), "ab" * 32,
                            64, 2)
    monkeypatch.setattr("infbench.execution.scenarios.scoring.request_for", lambda item, spec, pm=None: req)
    monkeypatch.setattr(testing.FakeScorer, "chunk_nll",
                        lambda self, chunks, first: ([np.full(chunks.shape[1] - first - 1, np.nan)] * len(chunks),
                                                     None))
    fpm = testing.plugin_manager()
    store = Store(tmp_path / "r.db")
    s = InProcessExecutor(fpm, {"test": True}).run(perplexity_plan([req], cpu), store, RunOptions(), ev.ignore)
    (q,) = s.quality
    assert q.status == "failed" and q.perplexity is None and "NaN or infinite log-probabilities" in q.error
    (row,) = quality_results(store)
    assert row["status"] == "failed" and row["value"] is None
    store.close()


def test_non_finite_perplexity_from_any_source_is_failed():
    from infbench.data.scores import PerplexityResult

    for v in (float("nan"), float("inf")):
        r = PerplexityResult(model="m", weights_sha256="0", engine="llama.cpp", dtype="f16", text_path="t",
                             text_sha256="s", n_ctx=8, perplexity=v, chunk_perplexity=[v])
        assert r.status == "failed" and r.perplexity is None and r.chunk_perplexity == []


def test_a_stored_nan_perplexity_never_passes_a_gate():
    from infbench.quality.gate import with_gate

    def q(dtype, value):
        return {"model": "m", "weights_sha256": "w", "engine": "llama.cpp", "dtype": dtype, "text_sha256": "t",
                "n_ctx": 512, "max_chunks": None, "status": "ok", "value": value}

    rows = with_gate([q("f16", 10.0), q("q4_0", float("nan"))], 0.01)
    assert rows[0]["baseline_dtype"] == "f16" and rows[1]["beyond_gate"] is True


@pytest.mark.parametrize("value", ["nan", "NaN%", "inf%", "-inf", "0", "0%", "-1%", "1e999"])
def test_gates_take_finite_positive_values_only(tmp_path, value):
    from infbench.quality.gate import parse_increase

    with pytest.raises(ConfigError):
        parse_increase(value)
    store = make_store(tmp_path / "s.db")
    text = tmp_path / "t.txt"
    text.write_text("word " * 100)
    for args in (["results", "--quality", "--store", store],
                 ["compare", "--dtypes", "f16,q4_0", "--store", store],
                 ["report", "--no-static", "--store", store, "--out", tmp_path / "rep"],
                 ["perplexity", "--model", "tiny", "--text", text, "--store", store]):
        r = cli(*args, "--max-ppl-increase", value)
        assert "--max-ppl-increase" in r.output


@pytest.mark.parametrize("extra", [["--dry-run"], []])
def test_lengths_beyond_the_context_are_refused_when_planned(tmp_path, extra):
    """The probe: `run --output-len 10000000` on a 2048-token model was accepted (also by
    --dry-run); llama.cpp sized its context for it, grew to 10.7 GB and ignored SIGTERM."""
    store = tmp_path / "s.db"
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "10000000", "--store", store,
            *extra)
    assert "exceeds the model's context of 2,048 tokens" in r.output and "10,000,008 together" in r.output
    assert not store.exists()
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "2000", "--output-len", "49", *extra,
            "--store", store)
    assert "2,049 together" in r.output  # input + output together, one token over


def test_perplexity_n_ctx_beyond_the_context_is_refused(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("word " * 5000)
    r = cli("perplexity", "--model", "tiny", "--text", text, "--n-ctx", "4096", "--store", tmp_path / "s.db")
    assert "--n-ctx 4096 exceeds the context of tiny-random-llama (2,048 tokens)" in " ".join(r.output.split())


def test_a_power_reading_below_zero_makes_energy_unavailable(tmp_path, cpu):
    """The probe: `run --power-command 'echo -50'` stored an ok cell with no power note."""
    from infbench import testing
    from infbench.data import events as ev
    from infbench.data.run import RunOptions
    from infbench.data.schema import PowerReading
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.measure.power import CommandPowerSampler, energy_j, energy_summary
    from infbench.plan import plan
    from infbench.store import Store

    neg = [PowerReading(t_ns=0, power_w=100.0), PowerReading(t_ns=10**9, power_w=-50.0)]
    e, _, note = energy_summary(neg)
    assert e is None and "below zero" in note and energy_j(neg) is None
    nan = [PowerReading(t_ns=0, energy_j=1.0), PowerReading(t_ns=10**9, energy_j=float("nan"))]
    assert energy_summary(nan)[0] is None and energy_j(nan) is None

    fpm = testing.plugin_manager()
    store = Store(tmp_path / "r.db")
    sw = Sweep(models=["tiny-random-llama"], engines=["fake"], dtypes=["f16"], batch=[1], input_len=[16],
               output_len=[4])
    opts = RunOptions(power_override=CommandPowerSampler("echo -50"), power_interval_s=0.01,
                      engine_options={"sleep_s": 0.05})
    s = InProcessExecutor(fpm, {"test": True}).run(plan(sw, cpu, fpm), store, opts, ev.ignore)
    (cell,) = s.ok
    assert cell.metrics.get("energy_j") is None and "below zero" in (cell.power_note or "")
    store.close()


# -- item 6: the internal error and the secret of the probe ---------------------------------------
@pytest.mark.parametrize("budget, message", [
    ("99999999999999999999h", "21 characters long (at most 16)"),
    ("999999999h", "at most 10,000,000 s"),
    ("9999999999999m", "at most 10,000,000 s"),
])
def test_huge_adaptive_budgets_are_clear_errors(budget, message):
    """The probe: `--adaptive 99999999999999999999h` raised pydantic's ValidationError
    ("this is a bug in infbench")."""
    r = cli("run", "--model", "tiny", "--batch", "1,2", "--adaptive", budget, "--dry-run")
    assert message in r.output and "bug" not in r.output


RAY_SECRET = "s3cretPW"


@pytest.mark.parametrize("address", [f"user:{RAY_SECRET}@127.0.0.1:18604", f"ray://user:{RAY_SECRET}@127.0.0.1:18604"])
def test_the_ray_address_secret_is_never_printed(tmp_path, address):
    """The probe: `run --executor ray --ray-address 'user:s3cretPW@127.0.0.1:18604'` printed
    the password in the error and in the suggested `ray status --address ...` command."""
    pytest.importorskip("ray")
    outs = {}
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "3", "--executor", "ray",
            "--ray-address", address, "--store", tmp_path / "s.db", env={"INFBENCH_RAY_CONNECT_TIMEOUT": "5"})
    outs["run"] = r.output
    assert "ray status --address" in r.output and "127.0.0.1:18604" in r.output
    outs["detect"] = cli("detect", "--ray-address", address, code=None,
                         env={"INFBENCH_RAY_CONNECT_TIMEOUT": "5"}).output
    assert_no_secret(outs, RAY_SECRET)


def test_one_redaction_covers_scheme_less_addresses():
    from infbench.data.secrets import redact, redact_argv

    assert redact(f"at user:{RAY_SECRET}@10.0.0.1:6379 now") == "at [redacted]@10.0.0.1:6379 now"
    assert RAY_SECRET not in " ".join(redact_argv(["infbench", "run", "--ray-address", f"u:{RAY_SECRET}@h:6379"]))
    for keep in ("python:3.11@sha256:12345", "ubuntu:22.04@sha256:0123abcd", "user@host:22", "12:30 at 10.0.0.1:80"):
        assert redact(keep) == keep
