"""Issue 22: one boundary for inputs, outputs and secrets. Every example of the hostile
review that filed it (137 cases tried against the commands added after the first hardening
wave: ``--find-max``, ``--trace``, ``import``, ``export``, ``compare --out``, ``predict
--set/--device-file``, ``quantize``, site-config endpoints, Ray addresses) is a test here
that failed before the fix: secrets stored or printed, the store overwritten, output that
acts (CSV formulas, terminal escapes, JSON that ends its script, mathtext), unbounded waits,
exit codes and results that lied, internal errors for bad input.

The CLI runs in-process (:func:`tests.support.hostile.cli` fails on any escaped
exception). Secrets planted in real runs against a server on 127.0.0.1 are in
``tests/integration/test_secrets_paths.py``; the readers' fuzz layer in ``test_fuzz.py``.
"""

from __future__ import annotations

import csv as _csv
import io as _io
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from infbench.store import Store
from tests.support.hostile import assert_no_secret, cli, digest, make_store, store_dump, worker_folder

DRY = ["run", "--model", "tiny", "--dry-run"]


def _ingest_refused(folder, store, *expected):
    before = digest(store)
    r = cli("ingest", folder, "--store", store)
    flat = " ".join(r.output.split())  # the printer wraps at the terminal's width; tmp paths differ in length
    for e in expected:
        assert e in flat, r.output
    assert digest(store) == before
    return r


SECRET = "hunter2SECRET"
FIXTURE_CSV = Path(__file__).parents[1] / "fixtures" / "lib_published_3dev.csv"
LIB_HEAD = "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput\n"


def _store_with_models(path: Path, models: list[str]) -> Path:
    """A store of one run whose ok cells carry these model names (one cell each)."""
    from tests.support.hostile import cell_result

    s = Store(path)
    run = s.begin_run({"host": "test"}, command="infbench run (test)")
    for i, m in enumerate(models, 1):
        s.save_cell(run, cell_result(batch=i, model=m))
    s.finish_run(run, "completed")
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    return path


# -- secrets ------------------------------------------------------------------------------------
def test_engine_arg_url_credentials_are_redacted_where_the_store_writes_them(tmp_path):
    """``--engine-arg base_url=http://bob:pw@host/v1`` was stored verbatim in the run's
    command and provenance (only the key's name was checked)."""
    from infbench.data.secrets import command_line

    argv = ["infbench", "run", "--engine", "openai", "--engine-arg", f"base_url=http://bob:{SECRET}@host/v1",
            "--base-url", f"http://h/v1?api_key={SECRET}", "--engine-arg", f"extra=http://h/v1?token={SECRET}x",
            "--engine-arg", f"note=Authorization: Basic {SECRET}"]
    s = Store(tmp_path / "s.db")
    run = s.begin_run({"argv": argv, "engine_options": {"base_url": f"http://bob:{SECRET}@host/v1"}},
                      command=command_line(argv))
    s.finish_run(run, "completed")
    s.close()
    dump = store_dump(tmp_path / "s.db")
    assert_no_secret({"store": dump}, SECRET)
    assert "host/v1" in dump and "base_url=http://[redacted]@host/v1" in dump


def test_cell_errors_and_device_properties_are_stored_redacted(tmp_path):
    import base64

    from tests.support.hostile import cell_result

    basic = base64.b64encode(f"bob:{SECRET}".encode()).decode()
    r = cell_result(1, status="failed", error=f"HTTP 401: you sent Authorization: Basic {basic} "
                                              f"(also Basic {basic}) from https://u:{SECRET}@10.0.0.1/v1")
    r = r.model_copy(update={"device": r.device.model_copy(update={"properties": {
        "base_url": f"https://u:{SECRET}@api.example.com/v1?token={SECRET}", "api_key_env": "K"}})})
    s = Store(tmp_path / "s.db")
    run = s.begin_run({}, command="x")
    s.save_cell(run, r)
    s.close()
    dump = store_dump(tmp_path / "s.db")
    assert_no_secret({"store": dump}, SECRET)
    assert basic not in dump and "api.example.com/v1" in dump and '"api_key_env":"K"' in dump
    # the cell id is untouched: resume still recognises it
    assert Store(tmp_path / "s.db", readonly=True).results()[0]["cell_id"] == r.cell_id


def test_import_url_credentials_are_never_stored_or_printed(tmp_path):
    store = tmp_path / "s.db"
    url = f"https://user:{SECRET}@github.com/argonne-lcf/LLM-Inference-Bench?token={SECRET}2"
    r = cli("import", FIXTURE_CSV, "--store", store, "--url", url, "--json", code=0)
    assert_no_secret({"stdout": r.stdout, "output": r.output, "store": store_dump(store)}, SECRET)
    assert "github.com/argonne-lcf" in r.stdout
    r = cli("import", FIXTURE_CSV, "--store", store, "--url", url, code=0)
    assert_no_secret({"output": r.output}, SECRET)


def test_site_endpoint_credentials_are_never_printed(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text(f'[cerebras]\nbase_url = "https://u:{SECRET}@api.example.com/v1?token={SECRET}"\n'
                    'api_key_env = "CEREBRAS_API_KEY"\nmodel = "llama3.1-8b"\n')
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    outputs = {}
    for args in (["detect", "--no-engines"], ["detect", "--no-engines", "--json"],
                 ["run", "--device", "cerebras", "--dry-run"], ["run", "--device", "cerebras", "--dry-run", "--json"]):
        r = cli(*args, code=0)
        outputs[" ".join(args)] = r.output
        assert "api.example.com" in r.output, r.output
    assert_no_secret(outputs, SECRET)


# -- the store is never an output ---------------------------------------------------------------
def _out_commands(store: Path, target: Path, tmp_path: Path) -> list[list]:
    spec = tmp_path / "spec.json"
    cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "2", "--write-spec", spec,
        "--store", tmp_path / "other.db", code=0)
    return [["export", "--format", "csv", "--out", target, "--store", store],
            ["export", "--format", "lib-csv", "--out", target, "--store", store],
            ["export", "--format", "json", "--out", target, "--store", store],
            ["compare", str(store), str(store), "--out", target],
            ["report", "--no-static", "--out", target, "--store", store],
            ["run", "--model", "tiny", "--batch", "1", "--write-spec", target, "--store", tmp_path / "other.db"],
            ["worker", "--spec", spec, "--out", target]]


def test_every_out_refuses_the_stores_path(tmp_path):
    """``export --format csv --out <store>`` replaced the store with CSV text, ``compare A B
    --out <store>`` with HTML."""
    store = make_store(tmp_path / "s.db")
    for args in _out_commands(store, store, tmp_path):
        before = digest(store)
        r = cli(*args)
        assert str(store) in r.output and ("store" in r.output or "SQLite" in r.output), (args, r.output)
        assert digest(store) == before, args
    # the default store, given by no flag, and its write-ahead log
    home = tmp_path / "home"
    default = make_store(home / "results.db")
    for args in _out_commands(default, default, tmp_path)[:5]:
        args = [a for a in args if a != "--store" and a != default] if args[0] != "compare" else args
        before = digest(default)
        cli(*args, env={"INFBENCH_HOME": str(home)})
        assert digest(default) == before, args
    wal = Path(f"{store}-wal")
    wal.write_bytes(b"")
    cli("export", "--format", "csv", "--out", wal, "--store", store)


def test_outputs_never_replace_a_file_they_did_not_write(tmp_path):
    store = make_store(tmp_path / "s.db")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for args in (["export", "--format", "csv"], ["export", "--format", "json"], ["export", "--format", "lib-csv"]):
        r = cli(*args, "--out", notes, "--store", store)
        assert "not an earlier" in r.output and notes.read_text() == "my notes\n"
    r = cli("compare", str(store), str(store), "--out", notes)
    assert "not an earlier" in r.output and notes.read_text() == "my notes\n"
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "index.html").write_text("<html>my page</html>")
    assert "not an earlier" in cli("report", "--no-static", "--out", rep, "--store", store).output
    # an earlier output of the same command is replaced, atomically (no temporary file left)
    out = tmp_path / "e.csv"
    for _ in range(2):
        cli("export", "--format", "csv", "--out", out, "--store", store, code=0)
    assert out.read_text().startswith("cell_id,spec_hash,run_id,status")
    cli("report", "--no-static", "--out", tmp_path / "rep2", "--store", store, code=0)
    cli("report", "--no-static", "--out", tmp_path / "rep2", "--store", store, code=0)
    cli("compare", str(store), str(store), "--out", tmp_path / "c.html", code=0)
    cli("compare", str(store), str(store), "--out", tmp_path / "c.html", code=0)
    assert not [p for p in tmp_path.rglob("*.tmp")]


# -- output that acts ------------------------------------------------------------------------------
FORMULAS = ["=cmd|' /C calc'!A0", '=HYPERLINK("http://evil","x")', "+SUM(1,2)", "@SUM(1,2)", "-2+3+cmd|x",
            "\t=1+1", "\r=1+1"]


def test_csv_exports_neutralise_formulas(tmp_path):
    """Model names such as ``=cmd|' /C calc'!A0`` went as-is into ``export --format
    csv|lib-csv`` and ``results --format csv`` (OWASP CSV injection)."""
    store = _store_with_models(tmp_path / "s.db", FORMULAS)
    for args in (["export", "--format", "csv"], ["export", "--format", "lib-csv"], ["results", "--format", "csv"]):
        text = cli(*args, "--store", store, code=0).stdout
        rows = list(_csv.reader(_io.StringIO(text)))
        assert len(rows) > 1, (args, text)
        for row in rows:
            for cell in row:
                assert not cell or cell[0] not in "=+-@\t\r", (args, cell)
        assert "'=cmd|' /C calc'!A0" in text or "'=cmd|' /C calc'!A0" in text.replace('""', '"')
    # numbers stay numbers
    rows = list(_csv.DictReader(_io.StringIO(cli("export", "--format", "csv", "--store", store, code=0).stdout)))
    assert float(rows[0]["output_tok_s"]) > 0


def test_lib_csv_round_trip_takes_the_guard_off(tmp_path):
    store = _store_with_models(tmp_path / "s.db", ["=HYPERLINK(1)"])
    out = tmp_path / "x.csv"
    cli("export", "--format", "lib-csv", "--out", out, "--store", store, code=0)
    from infbench.report.lib_import import read_lib_csv

    assert read_lib_csv(out)[0].model == "=HYPERLINK(1)"


def test_terminal_escapes_from_an_import_never_reach_the_terminal(tmp_path):
    f = tmp_path / "evil.csv"
    f.write_text(LIB_HEAD + "Nvidia A100 GPU,1,vLLM,evil\x1b]0;pwned\x07\x1b[31mmodel,128,1,1.6,154.8\n")
    store = tmp_path / "s.db"
    outs = {"import": cli("import", f, "--store", store, code=0).output}
    for args in (["results"], ["results", "--format", "csv"], ["export", "--format", "csv"], ["compare", store, store]):
        outs[args[0]] = cli(*[str(a) for a in args], *(["--store", store] if args[0] != "compare" else []),
                            code=0).output
    for where, text in outs.items():
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), (where, text)
    assert "evilmodel" in outs["results"].replace("\n", "").replace(" ", "").replace("│", "")


@pytest.mark.parametrize("name", ["<!--<script>", "</script><script>alert(1)</script>", "a&b<c>d", "\u2028x"])
def test_report_and_compare_pages_embed_json_that_cannot_end_their_script(tmp_path, name):
    """A model name ``<!--<script>`` inside the report's embedded JSON left the dashboard blank."""
    store = _store_with_models(tmp_path / "s.db", [name, "plain"])
    cli("report", "--no-static", "--out", tmp_path / "rep", "--store", store, code=0)
    cli("compare", str(store), str(store), "--out", tmp_path / "c.html", code=0)
    for page, marker in ((tmp_path / "rep" / "index.html", 'id="infbench-data">'),
                         (tmp_path / "c.html", 'id="infbench-figure">')):
        html = page.read_text()
        body = html.split(marker, 1)[1].split("</script>", 1)[0]
        assert "<" not in body and ">" not in body and "&" not in body
        data = json.loads(body)
        text = json.dumps(data, ensure_ascii=False)
        # the compare figure's strings are HTML-escaped for plotly (issue 41), shown literally
        shown = name.strip("\u2028").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert name in text or name.strip("\u2028") in json.dumps(data) or shown in text


def test_figures_draw_labels_literally(tmp_path):
    """A model name with matplotlib mathtext (``m$\\x{$``) made ``report`` fail."""
    store = _store_with_models(tmp_path / "s.db", ["m$\\x{$", "ok$_2$", "plain"])
    r = cli("report", "--out", tmp_path / "rep", "--store", store, "--json", code=0)
    figs = json.loads(r.stdout)["figures"]
    assert figs and all(Path(f).stat().st_size > 0 for f in figs)


def test_json_output_is_strict(tmp_path):
    """A stored NaN (``--price-per-hour nan`` used to be stored) made ``export --format json``
    invalid JSON; the flag is refused now, and a NaN already stored is written as null."""
    assert "--price-per-hour" in cli(*DRY, "--price-per-hour", "nan").output
    p = make_store(tmp_path / "s.db")
    db = sqlite3.connect(p)
    m = json.loads(db.execute("SELECT metrics FROM cells WHERE id=1").fetchone()[0])
    m["usd_per_mtok"] = float("nan")
    db.execute("UPDATE cells SET metrics=?, wall_s=? WHERE id=1", (json.dumps(m), float("inf")))
    db.commit()
    db.close()
    for args in (["export", "--format", "json"], ["results", "--format", "json"]):
        text = cli(*args, "--store", p, code=0).stdout
        json.loads(text, parse_constant=lambda c, a=args: pytest.fail(f"{a}: {c} in JSON output"))


# -- hangs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["detect", "--ray-address", "127.0.0.1:1"],
                                  ["run", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--model", "tiny",
                                   "--batch", "1"]])
def test_ray_address_where_nothing_listens_fails_at_once(args, tmp_path):
    """Both waited until killed (more than 300 s), printing only Ray's warnings."""
    t0 = time.monotonic()
    r = cli(*args, "--store", tmp_path / "s.db") if args[0] == "run" else cli(*args)
    assert time.monotonic() - t0 < 60  # not a timing assertion: the old behaviour never returned
    assert "127.0.0.1:1" in r.output and "ray status --address 127.0.0.1:1" in " ".join(r.output.split())
    assert not (tmp_path / "s.db").exists()


def test_ray_address_where_something_else_listens_fails_within_the_stated_time(monkeypatch):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def accept():
        conns = []
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])  # accept and say nothing, as a wrong service might
            except OSError:
                pass
        for c in conns:
            c.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("INFBENCH_RAY_CONNECT_TIMEOUT", "3")
    try:
        t0 = time.monotonic()
        r = cli("detect", "--ray-address", f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 30
        assert f"127.0.0.1:{port}" in r.output and "within 3 s" in r.output
    finally:
        stop.set()
        t.join()
        srv.close()


# -- silently wrong ----------------------------------------------------------------------------------
def _trace(tmp_path, lines: list[str], name="t.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("".join(line + "\n" for line in lines))
    return f


TRACE_RUN = ["run", "--engine", "llama.cpp-server", "--model", "tiny", "--dry-run", "--trace"]


@pytest.mark.parametrize("bad, message", [
    ('{"timestamp": 5, "input_length": true, "output_length": 2}', "input_length must be an integer, got True"),
    ('{"timestamp": 5, "input_length": 4.0, "output_length": 2}', "input_length must be an integer"),
    ('{"timestamp": 5, "input_length": "4", "output_length": 2}', "input_length must be an integer"),
    ('{"timestamp": NaN, "input_length": 4, "output_length": 2}', "NaN is not a JSON number"),
    ('{"timestamp": Infinity, "input_length": 4, "output_length": 2}', "Infinity is not a JSON number"),
    ('{"timestamp": -Infinity, "input_length": 4, "output_length": 2}', "Infinity is not a JSON number"),
    ('{"timestamp": 1e300, "input_length": 4, "output_length": 2}', "outside"),
    ('{"timestamp": 5, "input_length": 4, "output_length": false}', "output_length must be an integer"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2, "hash_ids": [true]}', "hash_ids"),
    ('{"timestamp": 5, "timestamp": 6, "input_length": 4, "output_length": 2}', "duplicate key"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2, "x": ' + "[" * 100 + "]" * 100 + "}", "nesting"),
])
def test_bad_trace_fields_are_refused_with_their_line(tmp_path, bad, message):
    """``"input_length": true`` was taken as 1 token; NaN/Infinity timestamps failed inside
    the load generator."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}', bad])
    r = cli(*TRACE_RUN, f)
    assert f"{f}:2" in r.output and message in r.output, r.output


def test_far_future_trace_timestamps_are_refused(tmp_path):
    """A replay would wait for a request years away: refused with its line and the span."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 1000, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 900000000000, "input_length": 8, "output_length": 2}'])
    r = cli(*TRACE_RUN, f)
    assert f"{f}:3" in r.output and "days after the first" in r.output
    a = tmp_path / "a.csv"
    a.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,2\n9999-12-31 23:59:59,4,2\n")
    assert f"{a}:3" in cli(*TRACE_RUN, a).output


def test_cell_timeout_shorter_than_the_trace_is_refused_when_planned(tmp_path):
    """A 3 s trace under ``--cell-timeout 2`` stored an ``ok`` cell holding part of its
    requests, with no word about the rest."""
    f = _trace(tmp_path, ['{"timestamp": 0, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 1000, "input_length": 8, "output_length": 2}',
                          '{"timestamp": 3000, "input_length": 8, "output_length": 2}'])
    r = cli(*TRACE_RUN, f, "--cell-timeout", "2")
    assert "1 of its 3 requests would never be sent" in " ".join(r.output.split())
    cli(*TRACE_RUN, f, "--cell-timeout", "2", "--trace-speed", "2", code=0)  # 1.5 s at twice the speed
    cli(*TRACE_RUN, f, "--cell-timeout", "10", code=0)


@pytest.mark.parametrize("content, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,true,2\n", "ContextTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nnan,4,2\n", "TIMESTAMP"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,4,1e300\n", "GeneratedTokens"),
    ('TIMESTAMP,ContextTokens,GeneratedTokens\n"1\n2",4,2\n', "runs over lines"),
])
def test_bad_azure_trace_rows(tmp_path, content, message):
    f = tmp_path / "az.csv"
    f.write_text(content)
    r = cli(*TRACE_RUN, f)
    assert f"{f}:2" in r.output and message in r.output, r.output


@pytest.mark.parametrize("row, message", [
    ("Nvidia A100 GPU,1e300,vLLM,m,128,1,1.6,154.8", "Num of Hardware"),
    ("Nvidia A100 GPU,100000,vLLM,m,128,1,1.6,154.8", "outside 1..4,096"),
    ("Nvidia A100 GPU,1,vLLM,m,128,true,1.6,154.8", "Batch Size"),
    ("Nvidia A100 GPU,1,vLLM,m,128,1,nan,154.8", "Latency"),
    ("Nvidia A100 GPU,1,vLLM,m,128,1,inf,154.8", "Latency"),
    ("Nvidia A100 GPU,1,vLLM,m,128,1,1.6,-5", "Throughput"),
    ("Nvidia A100 GPU,1,vLLM,m,99999999999,1,1.6,154.8", "Input Output Length"),
])
def test_import_refuses_what_no_publication_measured(tmp_path, row, message):
    """``import`` stored a tensor-parallel size of 10^300."""
    f = tmp_path / "x.csv"
    f.write_text(LIB_HEAD + row + "\n")
    store = make_store(tmp_path / "s.db")
    before = digest(store)
    r = cli("import", f, "--store", store)
    assert "line 2" in r.output and message in r.output, r.output
    assert digest(store) == before


def test_import_of_latin1_and_multiline_csvs_are_input_errors(tmp_path):
    """Both failed with an internal error."""
    f = tmp_path / "latin.csv"
    f.write_bytes((LIB_HEAD + "Nvidia A100 GPU,1,vLLM,caf\xe9,128,1,1.6,154.8\n").encode("latin-1"))
    r = cli("import", f, "--store", tmp_path / "s.db")
    assert f"{f}:2" in r.output and "not UTF-8" in r.output and "iconv" not in r.output or "UTF-8" in r.output
    f = tmp_path / "multi.csv"
    f.write_text(LIB_HEAD + 'Nvidia A100 GPU,1,vLLM,"two\nlines",128,1,1.6,154.8\n')
    assert "runs over lines 2-3" in cli("import", f, "--store", tmp_path / "s.db").output
    assert not (tmp_path / "s.db").exists()
    f.write_text(LIB_HEAD + "Nvidia A100 GPU,1,vLLM,m\x00\x1b[2J,128,1,1.6,154.8\n")  # control characters: cleaned
    cli("import", f, "--store", tmp_path / "s.db", code=0)
    assert "\x00" not in store_dump(tmp_path / "s.db") and "\x1b" not in store_dump(tmp_path / "s.db")


@pytest.mark.parametrize("flags, message", [
    (["-b", "0"], "--batch"), (["-b", "-4"], "--batch"), (["--input", "-5"], "--input"),
    (["--output", "0"], "--output"), (["--tp", "0"], "--tp"), (["--pp", "-1"], "--pp"),
    (["--set", "memory_bandwidth_tb_s=inf"], "finite"), (["--set", "memory_bandwidth_tb_s=-3"], "above 0"),
    (["--set", "memory_bandwidth_tb_s=nan"], "finite"), (["--set", "peak__tflops=5"], "unknown key 'peak__tflops'"),
    (["--set", "peak_fp64_tflops=5"], "unknown key"), (["--set", "memory_gib=1e300"], "at most"),
    (["--eff-compute", "2"], "--eff-compute"), (["--eff-memory", "0"], "--eff-memory"),
    (["--acceptance", "nan"], "--acceptance"), (["--moe-imbalance", "-1"], "--moe-imbalance"),
    (["--overhead-ms", "inf"], "--overhead-ms"), (["--spec-k", "0"], "--spec-k"), (["--ep", "0"], "--ep"),
    (["--slo-ttft", "-1"], "--slo-ttft"),
])
def test_predict_refuses_what_no_hardware_or_model_can_be(flags, message):
    """``predict`` accepted a negative input length, a batch of -4, ``--set
    memory_bandwidth_tb_s=inf`` and printed negative throughput; ``-b 0`` was an internal
    error; ``peak__tflops`` (as ``--help`` spelt it) was silently ignored."""
    r = cli("predict", "-m", "llama-3-8b", "-d", "h100-sxm", *flags)
    assert message in r.output, r.output


def test_predict_help_spells_the_peak_key():
    r = cli("predict", "--help", code=0)
    assert "peak_PRECISION_tflops" in r.output and "peak__tflops" not in r.output


@pytest.mark.parametrize("content, message", [
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: -3\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     ":4: device x: bandwidth_tb_s -3 is outside"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 1.0e+308\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     ":4: device x: bandwidth_tb_s 1e+308 is outside"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: .nan\n  peak_tflops: {bf16: 100}\n  sources: [a]\n",
     "finite"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 2\n  peak_tflops: {bf16: -1}\n  sources: [a]\n",
     "peak_tflops.bf16"),
    (b"- id: x\n  name: X\n  vendor: v\n  bandwidth_tb_s: 2\n  peak_tflops: {bf16: 1}\n  tdp_w: true\n"
     b"  sources: [a]\n", "tdp_w must be a finite number"),
    (b"42\n", "holds a list of devices, got int"),
    (b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe binary", "not UTF-8"),
    (b"- id: x\n  id: y\n", "duplicate key"),
    (b"[" * 100 + b"]" * 100, "nesting deeper"),
    (b"- [1, 2]\n", "not a mapping"),
])
def test_device_files_are_read_strictly(tmp_path, content, message):
    """``--device-file`` with 1e308, a scalar or binary content was an internal error, and a
    negative bandwidth gave negative throughput."""
    f = tmp_path / "dev.yaml"
    f.write_bytes(content)
    r = cli("predict", "-m", "llama-3-8b", "--device-file", f)
    assert str(f) in r.output and message in " ".join(r.output.split()), r.output


@pytest.mark.parametrize("flags", [["--power-watts", "nan"], ["--scrape-interval", "-1"], ["--price-per-hour", "inf"],
                                   ["--find-max", "rate", "--find-max-probes", "0"],
                                   ["--find-max", "rate", "--find-max-probes", "-3"]])
def test_run_flags_are_refused_before_anything_starts(tmp_path, flags):
    """``--scrape-interval -1`` was refused only after the run had begun; ``--power-watts
    nan`` was an internal error; ``--find-max-probes 0``/``-3`` exited 0."""
    r = cli("run", "--model", "tiny", "--batch", "1", "--store", tmp_path / "s.db", *flags)
    assert flags[-2] in r.output and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("args, message", [
    (["results", "--max-ttft", "nan"], "--max-ttft"), (["results", "--max-e2e", "-1"], "--max-e2e"),
    (["results", "--percentile", "p42"], "--percentile"), (["results", "--format", "xml"], "--format"),
    (["export", "--format", "xml"], "--format"), (["report", "--slo-ttft", "inf"], "--slo-ttft"),
    (["report", "--title", "x" * 1000], "--title"),
])
def test_reading_commands_check_their_flags(tmp_path, args, message):
    p = make_store(tmp_path / "s.db")
    before = digest(p)
    assert message in cli(*args, "--store", p).output
    assert digest(p) == before


@pytest.mark.parametrize("args, message", [
    (["import", "--url", "not a url"], "--url"), (["import", "--commit", "$(rm -rf /)"], "--commit"),
    (["import", "--source", ""], "--source"),
])
def test_import_flags(tmp_path, args, message):
    r = cli(args[0], FIXTURE_CSV, *args[1:], "--store", tmp_path / "s.db")
    assert message in r.output and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("flags, message", [(["--n-ctx", "0"], "--n-ctx"), (["--chunks", "0"], "--chunks"),
                                            (["--threads", "0"], "--threads")])
def test_perplexity_flags(tmp_path, flags, message):
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 100)
    r = cli("perplexity", "--model", "x.gguf", "--text", text, *flags, "--store", tmp_path / "s.db")
    assert message in r.output and not (tmp_path / "s.db").exists()


def test_quantize_threads_are_bounded(tmp_path):
    assert "--threads" in cli("quantize", "--model", tmp_path / "m.gguf", "--to", "q8_0", "--threads", "-1").output


@pytest.mark.parametrize("content, message", [
    ('[cerebras]\nbase_url = "https://x/v1"\npower_w = nan\n', ":3: cerebras.power_w is nan"),
    ('[cerebras]\nbase_url = "https://x/v1"\npower_w = inf\n', "power_w is inf"),
    ('[cerebras]\nbase_url = "ftp://x/v1"\n', ":2: base_url"),
    ('[cerebras]\nbase_url = "https://x/v1"\ncount = 99999999999\n', "count"),
    ("a = " + "[" * 50 + "]" * 50 + "\n", "nested"),
])
def test_site_config_values(tmp_path, monkeypatch, content, message):
    site = tmp_path / "site.toml"
    site.write_text(content)
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    r = cli("detect", "--no-engines")
    assert message in " ".join(r.output.split()), r.output


def test_site_config_size_is_bounded(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text("# " + "x" * (2 << 20) + "\n")
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    assert "larger than 1 MiB" in cli("detect", "--no-engines").output


def test_dataset_lines_are_strict_json(tmp_path):
    f = tmp_path / "chats.jsonl"
    ok = json.dumps({"messages": [{"role": "user", "content": "hi there you"},
                                  {"role": "assistant", "content": "hello to you too"}]})
    f.write_text(ok + "\n" + ok.replace('"hi there you"', "NaN") + "\n")
    r = cli("run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", f, "--dry-run")
    assert f"{f}:2" in r.output and "NaN" in r.output


def test_worker_output_with_nan_is_refused(tmp_path):
    store = make_store(tmp_path / "s.db")
    w = worker_folder(tmp_path / "w")
    text = (w / "cells.jsonl").read_text().replace('"wall_s":null', '"wall_s":NaN', 1)
    assert "NaN" in text
    (w / "cells.jsonl").write_text(text)
    _ingest_refused(w, store, "NaN is not a JSON number", "line 1")
    (w / "provenance.json").write_text('{"schema_version": NaN}')
    _ingest_refused(w, store, "NaN")


def test_no_command_waits_on_a_fifo_it_was_given(tmp_path):
    """A named pipe given as a file would block a reader forever: every reader takes
    regular files only."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["worker", "--spec", fifo, "--out", tmp_path / "w"], ["import", fifo, "--store", tmp_path / "s.db"],
                 ["run", "--model", "tiny", "--sweep", fifo, "--dry-run"],
                 [*TRACE_RUN, fifo], ["run", "--engine", "llama.cpp-server", "--model", "tiny", "--dataset", fifo,
                                      "--dry-run"], ["predict", "-m", "llama-3-8b", "--device-file", fifo]):
        r = cli(*args)
        assert str(fifo) in r.output, (args, r.output)


def test_outputs_written_before_the_markers_are_still_recognised(tmp_path):
    """A report folder, compare plot or figure written by an infbench without the generator
    marker is replaced by the next run, as before (no new refusal on upgrade)."""
    store = make_store(tmp_path / "s.db")
    rep = tmp_path / "rep"
    (rep / "figures").mkdir(parents=True)
    (rep / "index.html").write_bytes(b"<!DOCTYPE html><html><head><script>" + b"p" * 300_000 +
                                     b"</script></head><body><script>window.infbench = {rows: rows};</script></html>")
    (rep / "figures" / "throughput_vs_batch.svg").write_text('<svg><metadata><dc:title>Matplotlib v3</dc:title>'
                                                             '</metadata></svg>')
    cli("report", "--out", rep, "--store", store, code=0)
    assert 'content="infbench report"' in (rep / "index.html").read_text()
    old = tmp_path / "c.html"
    old.write_text("<html><head>" + "x" * 100_000 + "</head><body>A / B: per-cell ratios (2 matched cells)</body>")
    cli("compare", str(store), str(store), "--out", old, code=0)
    assert 'content="infbench compare"' in old.read_text()
