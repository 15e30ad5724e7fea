"""The fuzz layer of issue 14 (hypothesis): sweep files, command-line flags, conversation
datasets, worker output folders and server-sent event streams, generated to break
infbench. Properties: no exception other than infbench's own errors (the CLI exits 0 or
2 with ``error:``, never a traceback), bounded messages, and a store that a failed or
read-only command leaves byte for byte unchanged.

Bounded for CI: ``INFBENCH_FUZZ_EXAMPLES`` examples per test (default 30), no deadline,
derandomised (the same examples every run) unless ``INFBENCH_FUZZ_RANDOM=1``.
``benchmarks/reliability.py`` runs it with many more examples and counts them
(``INFBENCH_FUZZ_STATS=FILE`` appends one JSON line per test with its example count).
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infbench.data.errors import InfbenchError
from infbench.data.schema import Sweep
from infbench.store import Store
from tests.support.hostile import cell_result, cli, digest, make_store, worker_folder

EXAMPLES = int(os.environ.get("INFBENCH_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("INFBENCH_FUZZ_RANDOM"),
                database=None, suppress_health_check=list(HealthCheck))
COUNTS: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _stats():
    yield
    path = os.environ.get("INFBENCH_FUZZ_STATS")
    if path:
        with open(path, "a") as f:
            for name, n in COUNTS.items():
                f.write(json.dumps({"test": name, "examples": n}) + "\n")


def count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


# -- values a hostile user types ------------------------------------------------------
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["tiny", "smollm2-135m", "llama.cpp", "f16", "fp16", "1e23", "-1", "0", ",", "%", "\x1b[2J"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
FIELDS = list(Sweep.model_fields) + ["preset", "bogus", "Batch"]


def _tmp(tmp_path_factory, name: str) -> Path:
    return tmp_path_factory.mktemp(name)


# -- sweep files ------------------------------------------------------------------------
@FUZZ
@given(data=st.dictionaries(st.sampled_from(FIELDS), values, max_size=6))
def test_fuzz_sweep_files_structured(tmp_path_factory, data):
    from infbench.plan.sweeps import build_sweep

    count("sweep files (structured YAML)")
    f = _tmp(tmp_path_factory, "sw") / "s.yaml"
    try:
        f.write_text(yaml.safe_dump(data, allow_unicode=True))
    except (yaml.YAMLError, UnicodeEncodeError):
        return
    try:
        sweep = build_sweep(None, f)
    except InfbenchError as exc:
        assert exc.exit_code == 2 and len(exc.message) < 3000
        return
    assert isinstance(sweep, Sweep)
    assert all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 1_000_000 for b in sweep.batch)


yaml_tokens = st.sampled_from(["models:", "batch:", " [", "]", "{", "}", "&a", "*a", "- ", "\n", "  ", ":", ",",
                               "!!python/object:os.system", "!!binary", "1e23", "true", "'", '"', "<<: *a", "...",
                               "---", "%YAML 1.1", "\t", "#", "? ", "|", ">", "\x00", "\x85", "\ufeff"])


@FUZZ
@given(parts=st.lists(st.one_of(yaml_tokens, st.text(max_size=10)), max_size=60),
       raw=st.binary(max_size=200))
def test_fuzz_sweep_files_raw(tmp_path_factory, parts, raw):
    from infbench.plan.sweeps import build_sweep

    count("sweep files (raw text and bytes)")
    d = _tmp(tmp_path_factory, "raw")
    for i, content in enumerate(("".join(parts).encode("utf-8", "surrogatepass"), raw)):
        f = d / f"s{i}.yaml"
        f.write_bytes(content)
        try:
            build_sweep(None, f)
        except InfbenchError as exc:
            assert exc.exit_code == 2 and str(f) in exc.message and len(exc.message) < 3000


# -- command-line flags -----------------------------------------------------------------
flag_values = st.one_of(st.text(alphabet=string.printable, max_size=12),
                        st.integers(min_value=-5, max_value=10**30).map(str),
                        st.sampled_from(["", ",", ",,1", "1,,2", "1e23", "nan", "inf", "-0", "0x10", "１", "1;2",
                                         "tiny", "llama.cpp", "f16", "bogus=1", "n_ubatch=x", "="]))
RUN_FLAGS = ["--batch", "--input-len", "--output-len", "--model", "--engine", "--dtype", "--seed", "--warmup",
             "--tp", "--concurrency", "--request-rate", "--num-requests", "--engine-arg", "--cell-timeout",
             "--threads", "--power-interval", "--preset", "--device", "--executor", "--slo-ttft"]


@FUZZ
@given(flags=st.lists(st.tuples(st.sampled_from(RUN_FLAGS), flag_values), min_size=1, max_size=4))
def test_fuzz_run_flags(flags):
    count("run flags (--dry-run)")
    args = ["run", "--dry-run", "--model", "tiny"] + [x for f, v in flags for x in (f, v)]
    r = cli(*args, code=None)
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        assert len(r.output) < 5000


@pytest.fixture(scope="module")
def fixed_store(tmp_path_factory):
    p = make_store(tmp_path_factory.mktemp("store") / "s.db", cells=3)
    return p, digest(p)


@FUZZ
@given(cmd=st.sampled_from(["results", "export", "compare"]), flags=st.lists(
    st.tuples(st.sampled_from(["--run", "--status", "--format", "--model", "--engine", "--device", "--all",
                               "--best", "--max-e2e", "--percentile"]), flag_values), max_size=3),
    side=flag_values)
def test_fuzz_reading_commands_leave_the_store_alone(fixed_store, cmd, flags, side):
    count("results/export/compare flags")
    store, before = fixed_store
    args = [cmd] + ([side, str(store)] if cmd == "compare" else ["--store", store])
    for f, v in flags:
        args += [f] if f in ("--all", "--best") else [f, v]
    r = cli(*args, code=None)
    assert r.exit_code in (0, 1, 2), r.output
    assert digest(store) == before


# -- conversation datasets --------------------------------------------------------------
turn = st.fixed_dictionaries({}, optional={"role": values, "from": values, "content": values, "value": values})
conversation = st.one_of(
    st.fixed_dictionaries({"messages": st.one_of(values, st.lists(turn, max_size=4))}),
    st.fixed_dictionaries({"conversations": st.lists(turn, max_size=4)}), values)


@FUZZ
@given(lines=st.lists(st.one_of(conversation.map(lambda o: json.dumps(o, default=str).encode()),
                                st.binary(max_size=40)), max_size=6))
def test_fuzz_datasets(tmp_path_factory, lines):
    from infbench.workloads.chat import chat_requests, word_count

    count("conversation datasets")
    f = _tmp(tmp_path_factory, "ds") / "chats.jsonl"
    f.write_bytes(b"\n".join(lines))
    try:
        reqs = chat_requests(f, word_count, 1, min_input_len=0, min_output_len=1)
    except InfbenchError as exc:
        assert exc.exit_code == 2 and str(f) in exc.message
        return
    assert reqs[0].output_len >= 1 and reqs[0].messages


# -- worker output folders ----------------------------------------------------------------
def _poke(obj, path, value):
    """Set ``obj[path] = value`` where the path still exists (earlier edits may have
    replaced a part of it with something else)."""
    node = obj
    for k in path[:-1]:
        if isinstance(node, dict) and k in node:
            node = node[k]
        elif isinstance(node, list) and node:
            node = node[int(k) % len(node)] if k.isdigit() else node[0]
        else:
            return
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and node and path[-1].isdigit():
        node[int(path[-1]) % len(node)] = value


CELL_PATHS = [("metrics", "ttft_s"), ("metrics", "ttft_s", "p50"), ("metrics", "output_tok_s"), ("status",),
              ("spec_hash",), ("cell_id",), ("cell", "batch"), ("cell", "model"), ("records",),
              ("records", "0", "t_tokens_ns"), ("records", "0", "n_out"), ("records", "0", "t_send_ns"),
              ("device",), ("device", "count"), ("error",), ("metrics",), ("started_at",), ("power",)]
PROV_PATHS = [("status",), ("provenance",), ("schema_version",), ("spec_hash",), ("provenance", "host")]


@FUZZ
@given(cell_edits=st.lists(st.tuples(st.sampled_from(CELL_PATHS), values), max_size=3),
       prov_edits=st.lists(st.tuples(st.sampled_from(PROV_PATHS), values), max_size=2),
       junk=st.lists(st.binary(max_size=30), max_size=2), cut=st.integers(min_value=0, max_value=400))
def test_fuzz_ingest_folders(tmp_path_factory, fixed_store, cell_edits, prov_edits, junk, cut):
    from infbench.execution.worker import check_cell, ingest

    count("ingest folders")
    d = _tmp(tmp_path_factory, "w")
    w = worker_folder(d / "out", cells=[cell_result(1), cell_result(2)])
    store_path = d / "s.db"
    store_path.write_bytes(fixed_store[0].read_bytes())
    before = digest(store_path)
    cells = [json.loads(x) for x in (w / "cells.jsonl").read_text().splitlines()]
    for path, v in cell_edits:
        _poke(cells[1], path, v)
    prov = json.loads((w / "provenance.json").read_text())
    for path, v in prov_edits:
        _poke(prov, path, v)
    (w / "provenance.json").write_text(json.dumps(prov, default=str))
    text = b"".join(json.dumps(c, default=str).encode() + b"\n" for c in cells) + b"\n".join(junk)
    (w / "cells.jsonl").write_bytes(text[:len(text) - cut] if cut < len(text) else text)
    store = Store(store_path)
    try:
        res = ingest(w, store)
    except InfbenchError as exc:
        assert exc.exit_code == 2 and len(exc.message) < 3000
        store.close()
        assert digest(store_path) == before
        return
    for c in res["cells"]:
        assert check_cell(c) == []
    assert len(store.results(run_id=res["run_id"], all_attempts=True)) == len(res["cells"])
    store.close()


# -- server-sent event streams -------------------------------------------------------------
event_obj = st.one_of(
    st.fixed_dictionaries({"choices": st.one_of(values, st.lists(st.fixed_dictionaries({}, optional={
        "text": values, "delta": st.one_of(values, st.fixed_dictionaries({}, optional={"content": values})),
        "finish_reason": values}), max_size=2))}, optional={"usage": st.one_of(values, st.fixed_dictionaries(
            {}, optional={"completion_tokens": values, "prompt_tokens": values}))}),
    st.fixed_dictionaries({"error": values}), values)
sse_chunk = st.one_of(event_obj.map(lambda o: b"data: " + json.dumps(o, default=str).encode() + b"\n\n"),
                      st.sampled_from([b"data: [DONE]\n\n", b"data: {", b"\r\n\r\n", b": keep-alive\n\n",
                                       b"event: x\n"]), st.binary(max_size=30))


@settings(FUZZ)
@given(chunks=st.lists(sse_chunk, max_size=8), chat=st.booleans())
def test_fuzz_sse_streams(chunks, chat):
    from infbench.engines.openai import parse_stream, to_record

    count("SSE streams")
    reads = [(1000 + 10 * i, c) for i, c in enumerate(chunks)]
    rec = to_record(parse_stream(reads, chat=chat), t_send=500, t_sched=400, n_in_sent=8, transport_error=None)
    assert 0 <= rec.n_out <= 10**6 and rec.n_in >= 0
    assert rec.t_tokens_ns == sorted(rec.t_tokens_ns) and all(t >= 500 for t in rec.t_tokens_ns)
    assert rec.error is not None or rec.t_tokens_ns


# ===========================================================================================
# Issue 22: the readers and flags added since (traces, imports, device files, predict flags,
# find-max flags, site config)
# ===========================================================================================
hostile_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**63, 10**300, 1e308, -0.0, 0.5, True, False, None, "4", "", "1e23", [], {}]))
json_value = st.one_of(hostile_numbers, values)


def _json_line(obj) -> bytes:
    # json.dumps writes NaN/Infinity as Python does: exactly what a hostile file holds
    return json.dumps(obj, default=str).encode()


trace_line = st.one_of(
    st.fixed_dictionaries({"timestamp": json_value, "input_length": json_value, "output_length": json_value},
                          optional={"hash_ids": st.one_of(json_value, st.lists(hostile_numbers, max_size=4))}),
    st.fixed_dictionaries({"timestamp": st.integers(0, 10**6), "input_length": st.integers(1, 64),
                           "output_length": st.integers(1, 64)}),
    json_value)


@FUZZ
@given(lines=st.lists(st.one_of(trace_line.map(_json_line), st.binary(max_size=40)), min_size=1, max_size=6),
       azure=st.lists(st.lists(st.one_of(st.text(max_size=12), hostile_numbers.map(str)), min_size=1, max_size=4),
                      max_size=4))
def test_fuzz_traces(tmp_path_factory, lines, azure):
    from infbench.workloads.trace import MAX_LEN, MAX_SPAN_S, read_trace

    count("traces (Mooncake JSONL and Azure CSV)")
    d = _tmp(tmp_path_factory, "tr")
    files = [(d / "t.jsonl", b"\n".join(lines) + b"\n"),
             (d / "a.csv", ("TIMESTAMP,ContextTokens,GeneratedTokens\n" +
                            "\n".join(",".join(row) for row in azure) + "\n").encode("utf-8", "surrogatepass"))]
    for f, content in files:
        f.write_bytes(content)
        try:
            recs = read_trace(f)
        except InfbenchError as exc:
            assert exc.exit_code == 2 and str(f) in exc.message and len(exc.message) < 3000
            continue
        assert recs and recs[0].t_s == 0.0
        for r in recs:
            assert isinstance(r.input_len, int) and not isinstance(r.input_len, bool) and 1 <= r.input_len <= MAX_LEN
            assert isinstance(r.output_len, int) and not isinstance(r.output_len, bool)
            assert 1 <= r.output_len <= MAX_LEN and 0.0 <= r.t_s <= MAX_SPAN_S
            assert all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in r.hash_ids)


@FUZZ
@given(lines=st.lists(st.one_of(trace_line.map(_json_line), st.binary(max_size=30)), min_size=1, max_size=4),
       timeout=st.sampled_from([None, "0.5", "2", "1e9", "nan"]))
def test_fuzz_trace_runs_never_start(tmp_path_factory, fixed_store, lines, timeout):
    count("traces through `run --trace --dry-run`")
    store, before = fixed_store
    f = _tmp(tmp_path_factory, "trr") / "t.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    args = ["run", "--engine", "llama.cpp-server", "--model", "tiny", "--dry-run", "--trace", str(f), "--store",
            str(store)] + (["--cell-timeout", timeout] if timeout else [])
    r = cli(*args, code=None)
    assert r.exit_code in (0, 2), r.output
    assert digest(store) == before


LIB_COLUMNS = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency",
               "Throughput"]
lib_cell = st.one_of(st.sampled_from(["Nvidia A100 GPU", "AMD MI250 GPU", "vLLM", "llama.cpp", "128", "16", "1",
                                      "1.5", "154.8", "128/64", "-1", "0", "nan", "inf", "1e300", "true", "=cmd|x",
                                      '"a,b"', '"two\nlines"', "\x1b[31m", "\x00", ""]),
                     hostile_numbers.map(str), st.text(max_size=10))


@FUZZ
@given(rows=st.lists(st.lists(lib_cell, min_size=6, max_size=10), min_size=1, max_size=4),
       header=st.sampled_from([LIB_COLUMNS, LIB_COLUMNS[:5], LIB_COLUMNS + ["avg_power"]]),
       raw=st.binary(max_size=60), latin=st.booleans())
def test_fuzz_imports(tmp_path_factory, fixed_store, rows, header, raw, latin):
    count("imports (LLM-Inference-Bench CSV)")
    d = _tmp(tmp_path_factory, "imp")
    text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    f = d / "x.csv"
    f.write_bytes(text.encode("latin-1", "replace") if latin else text.encode("utf-8", "surrogatepass") + raw)
    store = d / "s.db"
    store.write_bytes(fixed_store[0].read_bytes())
    before = digest(store)
    r = cli("import", str(f), "--store", str(store), "--json", code=None)
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        assert digest(store) == before and len(r.output) < 5000
        return
    res = json.loads(r.stdout)
    s = Store(store, readonly=True)
    for row in s.results(run_id=res["run_id"]):
        spec = row["spec"]
        assert 1 <= spec["batch"] <= 1_000_000 and 1 <= spec["tensor_parallel_size"] <= 65_536
        assert all(isinstance(v, (int, float)) and v == v and abs(v) != float("inf")
                   for v in row["metrics"].values() if isinstance(v, float))
    s.close()


device_entry = st.fixed_dictionaries(
    {"id": st.one_of(st.text(min_size=1, max_size=8), json_value), "name": st.just("X"), "vendor": st.just("v"),
     "sources": st.just(["a"])},
    optional={"bandwidth_tb_s": json_value, "memory_gib": json_value, "tdp_w": json_value,
              "link_bandwidth_gb_s": json_value, "devices_per_package": json_value,
              "peak_tflops": st.one_of(json_value, st.dictionaries(st.sampled_from(["bf16", "fp16", "fp64", ""]),
                                                                   hostile_numbers, max_size=3)),
              "bogus": json_value})


@FUZZ
@given(entries=st.one_of(st.lists(st.one_of(device_entry, json_value), max_size=3), json_value),
       raw=st.one_of(st.none(), st.binary(max_size=80)))
def test_fuzz_device_files(tmp_path_factory, entries, raw):
    import math

    from infbench.detect.devices import MAX_PEAK_TFLOPS, PHYSICAL_LIMITS, load_device_specs

    count("device files (--device-file)")
    f = _tmp(tmp_path_factory, "dev") / "dev.yaml"
    if raw is not None:
        f.write_bytes(raw)
    else:
        try:
            f.write_text(yaml.safe_dump(entries, allow_unicode=True))
        except (yaml.YAMLError, UnicodeEncodeError):
            return
    try:
        specs = load_device_specs(f)
    except InfbenchError as exc:
        assert exc.exit_code == 2 and str(f) in exc.message and len(exc.message) < 3000
        return
    for s in specs:
        for k, hi in PHYSICAL_LIMITS.items():
            v = getattr(s, k)
            assert v is None or (math.isfinite(v) and 0 < v <= hi)
        assert all(math.isfinite(v) and 0 < v <= MAX_PEAK_TFLOPS for v in s.peak_tflops.values())
    r = cli("predict", "-m", "llama-3-8b", "--device-file", str(f), "--json", code=None)
    assert r.exit_code in (0, 2), r.output


predict_value = st.one_of(st.sampled_from(["0", "-4", "1", "8", "1,0", "nan", "inf", "-inf", "1e300", "0.5", "",
                                           ",", "x"]), st.integers(-10, 10**7).map(str))
PREDICT_FLAGS = ["-b", "--input", "--output", "--tp", "--pp", "--ep", "--moe-imbalance", "--spec-k", "--acceptance",
                 "--eff-compute", "--eff-memory", "--overhead-ms", "--slo-ttft", "--slo-tpot"]
set_value = st.tuples(st.sampled_from(["memory_bandwidth_tb_s", "memory_gib", "memory_gb", "link_bandwidth_gb_s",
                                       "peak_bf16_tflops", "peak__tflops", "peak_fp64_tflops", "bogus", ""]),
                      predict_value).map(lambda kv: f"{kv[0]}={kv[1]}")


@FUZZ
@given(flags=st.lists(st.tuples(st.sampled_from(PREDICT_FLAGS), predict_value), max_size=3),
       sets=st.lists(set_value, max_size=2), device=st.sampled_from([["-d", "h100-sxm"], ["-d", "a100-40gb"], []]))
def test_fuzz_predict_flags(flags, sets, device):
    import math

    count("predict flags")
    args = ["predict", "-m", "llama-3-8b", "--json", *device] + [x for f, v in flags for x in (f, v)]
    args += [x for s in sets for x in ("--set", s)]
    r = cli(*args, code=None)
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 0:
        for p in json.loads(r.stdout)["predictions"]:
            for k in ("ttft_s", "tpot_s", "e2e_s", "output_tok_s", "total_tok_s"):
                assert p[k] is None or (math.isfinite(p[k]) and p[k] >= 0), (args, k, p[k])


@FUZZ
@given(mode=st.sampled_from(["rate", "concurrency", "bogus", ""]),
       flags=st.lists(st.tuples(st.sampled_from(["--find-max-probes", "--find-max-limit", "--goodput",
                                                 "--slo-ttft-ms", "--slo-tpot-ms", "--concurrency", "--request-rate"]),
                                predict_value), max_size=4))
def test_fuzz_find_max_flags(fixed_store, mode, flags):
    count("find-max flags (--dry-run)")
    store, before = fixed_store
    args = ["run", "--engine", "llama.cpp-server", "--model", "tiny", "--input-len", "8", "--output-len", "4",
            "--dry-run", "--find-max", mode, "--store", str(store)] + [x for f, v in flags for x in (f, v)]
    r = cli(*args, code=None)
    assert r.exit_code in (0, 2), r.output
    assert digest(store) == before


toml_value = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "+nan", "-5", "0", "1e308", "99999999999999999999", "true", '"x"',
                     '"https://u:p@h/v1"', '"ftp://x"', '"http://127.0.0.1:8000/v1"', "[]", "[1, [2, [3]]]",
                     "{a = 1}", '"\\u001b[2J"', "1979-05-27", '""']),
    st.integers(-(2**40), 2**40).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(alphabet=string.ascii_letters + "[]{}=,\"' .\\", max_size=12))
toml_key = st.sampled_from(["base_url", "api_key_env", "system", "count", "power_w", "power_command", "power_label",
                            "model", "mount_roots", "bogus", "max_clock_ghz"])


@FUZZ
@given(tables=st.lists(st.tuples(st.sampled_from(["cerebras", "sambanova", "containers", "cpu", "cerebas", "x.y"]),
                                 st.lists(st.tuples(toml_key, toml_value), max_size=4)), max_size=3),
       raw=st.one_of(st.none(), st.binary(max_size=60)))
def test_fuzz_site_config(tmp_path_factory, monkeypatch_module, tables, raw):
    from infbench.contract.site import site_config, site_section
    from infbench.detect.platforms.remote import RemotePlatform

    count("site config (site.toml)")
    f = _tmp(tmp_path_factory, "site") / "site.toml"
    if raw is not None:
        f.write_bytes(raw)
    else:
        f.write_text("".join(f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in kvs) for name, kvs in tables))
    monkeypatch_module.setenv("INFBENCH_SITE_CONFIG", str(f))
    try:
        site_config()
        for name in ("cerebras", "sambanova"):
            cfg = RemotePlatform.from_site(name, site_section(name),
                                           {"base_url": "https://api.example.com/v1", "api_key_env": "K",
                                            "system": "S"})
            if cfg is not None:
                cfg.device(name)
                cfg.power_description()
    except InfbenchError as exc:
        assert exc.exit_code == 2 and str(f) in exc.message and len(exc.message) < 3000


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


# -- issue 33: the fourth round's kinds ---------------------------------------------------------
WRITER_KINDS = ["absent", "earlier output", "foreign file", "store link", "chardev", "fifo", "socket", "folder",
                "link-to-fifo", "dangling-link"]


@FUZZ
@given(kind=st.sampled_from(WRITER_KINDS), writer=st.sampled_from(["csv", "json", "lib-csv", "compare", "spec"]),
       nested=st.booleans())
def test_fuzz_writer_targets(tmp_path_factory, kind, writer, nested):
    """Whatever the target is, the writer replaces only an absent path or a regular earlier
    output of its kind; every other node is left exactly as it was, and the refusal names it."""
    import os
    import stat

    from infbench.data.outputs import EXPORT_JSON, WORKER_SPEC, OutputRefused, write_output
    from infbench.report.data import LIB_CSV
    from infbench.report.tables import RESULTS_CSV
    from tests.support.hostile import special_file

    count("writer targets (device nodes, FIFOs, sockets, folders, links)")
    d = _tmp(tmp_path_factory, "w")
    target = (d / "sub" / "out") if nested else d / "out"
    target.parent.mkdir(parents=True, exist_ok=True)
    out_kind = {"csv": RESULTS_CSV, "json": EXPORT_JSON, "lib-csv": LIB_CSV, "spec": WORKER_SPEC}.get(writer)
    from infbench.data.outputs import COMPARE_HTML

    out_kind = out_kind or COMPARE_HTML
    sample = {"csv": "cell_id,spec_hash,run_id,status\n", "json": '[{"cell_id": "x"}]',
              "lib-csv": "Hardware,Num of Hardware,Framework,Model,\n", "spec": '{"schema_version": 1, "cells": []}',
              "compare": '<meta name="generator" content="infbench compare">'}[writer]
    store = make_store(d / "s.db")
    if kind == "earlier output":
        target.write_text(sample)
    elif kind == "foreign file":
        target.write_text("someone's notes\n")
    elif kind == "store link":
        target.symlink_to(store)
    elif kind != "absent":
        try:
            special_file(target, kind)
        except pytest.skip.Exception:
            return
    before = os.lstat(target) if os.path.lexists(target) else None
    try:
        write_output(target, sample, out_kind, [store])
    except OutputRefused as exc:
        assert kind not in ("absent", "earlier output") and str(target) in exc.message and exc.exit_code == 2
        after = os.lstat(target)
        assert before is not None and (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
        return
    assert kind in ("absent", "earlier output"), f"{kind} was written over"
    assert stat.S_ISREG(os.stat(target).st_mode) and target.read_text() == sample


ENGINES_TYPED = ["llama.cpp", "transformers", "llama.cpp-server", "openai", "vllm", "optimum-habana"]
arg_text = st.one_of(values.map(lambda v: json.dumps(v, default=str)), st.text(max_size=20),
                     st.sampled_from(["-1", "0", "1", "1e9", "1000000000", "1.5", "nan", ".nan", ".inf", "true",
                                      "[1,2]", '{"a":1}', '{"top_k": 5}', '{"X-A": "b"}', "static", "chat", "uvloop",
                                      "", "4096", "4097", "-2", "99999999999999999999"]))


@FUZZ
@given(engine=st.sampled_from(ENGINES_TYPED), picks=st.lists(st.tuples(st.integers(0, 40), arg_text), min_size=1,
                                                              max_size=3))
def test_fuzz_engine_argument_types(engine, picks):
    """Any `--engine-arg KEY=VALUE` on an engine's own keys is typed within its bounds or
    refused with exit 2, before anything runs; never a traceback, never a value out of bounds."""
    from infbench.contract.manager import get_plugin_manager
    from infbench.contract.registry import engine_specs
    from infbench.data.engine_options import check_engine_args, parse_engine_args
    from infbench.data.schema import canonical_json

    count("engine-argument types (--engine-arg)")
    specs = engine_specs(get_plugin_manager())
    model = specs[engine].options_model
    keys = list(model.model_fields)
    items = [f"{keys[i % len(keys)]}={v}" for i, v in picks]
    try:
        got = check_engine_args(specs, [engine], parse_engine_args(items))
    except InfbenchError as exc:
        assert exc.exit_code == 2 and len(exc.message) < 3000
        return
    typed = model.model_validate({k: v for k, v in got.values.items() if k in model.model_fields})
    for k, v in typed.model_dump(exclude_none=True).items():
        if isinstance(v, int) and not isinstance(v, bool):
            assert -1 <= v <= 1_048_576, (k, v)
        if isinstance(v, float):
            assert v == v and abs(v) != float("inf")
    assert "NaN" not in canonical_json(got.identity) and "Infinity" not in canonical_json(got.identity)


positive = st.floats(min_value=1e-4, max_value=1e5, allow_nan=False, allow_infinity=False)


@FUZZ
@given(lat=positive, ttft=st.one_of(st.none(), positive), e2e=st.one_of(st.none(), positive),
       tput=st.one_of(st.none(), positive), batch=st.integers(1, 256), n_in=st.integers(1, 4096),
       n_out=st.integers(1, 4096), io=st.sampled_from(["same", "pair", "other"]), digits=st.integers(1, 8))
def test_fuzz_import_consistency(tmp_path_factory, lat, ttft, e2e, tput, batch, n_in, n_out, io, digits):
    """A row that read_lib_csv accepts never contradicts itself: TTFT <= E2E <= Latency and
    Throughput x Latency = batch (or one sequence) x tokens, within the printed rounding;
    its stored TPOT is never negative."""
    from infbench.report.lib_import import published_cells, read_lib_csv

    count("imports checked for consistency (TTFT, E2E, lengths, throughput)")
    fmt = f"{{:.{digits}g}}"
    if tput is None and io == "same":
        tput = batch * (n_in + n_out) / lat   # often a consistent row
    iol = f"{n_in}/{n_out}" if io != "other" else f"{n_in + 1}/{n_out}"
    row = ["Nvidia A100 GPU", "1", "vLLM", "meta-llama/Llama-2-7b-hf", iol, str(batch), fmt.format(lat),
           "" if tput is None else fmt.format(tput), str(n_in), str(n_out),
           "" if ttft is None else fmt.format(ttft), "" if e2e is None else fmt.format(e2e)]
    f = _tmp(tmp_path_factory, "cons") / "x.csv"
    f.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput,"
                 "Input Length,Output Length,TTFT Latency,end_latency\n" + ",".join(row) + "\n")
    try:
        (r,) = read_lib_csv(f)
    except InfbenchError as exc:
        assert exc.exit_code == 2 and "line 2" in exc.message
        return
    assert io != "other"
    from decimal import Decimal

    def ulp(text: str) -> float:  # half a unit of the last printed digit, relative to the value
        return 0.5 * 10.0 ** Decimal(text).as_tuple().exponent / float(text) if text else 0.0

    lat_t, tput_t, ttft_t, e2e_t = row[6], row[7], row[10], row[11]
    slack = 0.005
    if r.ttft_s is not None and r.e2e_s is not None:
        assert r.ttft_s <= r.e2e_s * (1 + slack + ulp(ttft_t) + ulp(e2e_t))
    for v, t in ((r.ttft_s, ttft_t), (r.e2e_s, e2e_t)):
        assert v is None or v <= r.latency_s * (1 + slack + ulp(lat_t) + ulp(t))
    if r.throughput_tok_s is not None:
        tokens = r.throughput_tok_s * r.latency_s
        tol = slack + ulp(lat_t) + ulp(tput_t)
        assert any(abs(tokens / e - 1) <= tol * (1 + 1e-9) for e in (batch * (n_in + n_out), n_in + n_out))
    (cell,), _ = published_cells([r])
    assert (cell.metrics.get("tpot_s") or {}).get("mean", 0.0) >= 0


GATES = [
    ["results", "--quality", "--max-ppl-increase"], ["compare", "--dtypes", "f16,q4_0", "--max-ppl-increase"],
    ["report", "--no-static", "--max-ppl-increase"], ["perplexity", "--model", "tiny", "--max-ppl-increase"],
    ["run", "--model", "tiny", "--dry-run", "--slo-ttft"], ["run", "--model", "tiny", "--dry-run", "--slo-tpot"],
    ["run", "--model", "tiny", "--dry-run", "--slo-e2e"], ["run", "--model", "tiny", "--dry-run", "--slo-ttft-ms"],
    ["results", "--max-ttft"], ["results", "--max-tpot"], ["results", "--max-e2e"],
    ["report", "--no-static", "--slo-ttft"], ["report", "--no-static", "--slo-tpot"],
]
gate_value = st.one_of(st.sampled_from(["nan", "NaN", "inf", "-inf", "inf%", "NaN%", "1e999", "1e999%", "-1", "0",
                                        "0%", "-0", "1%", "0.5", "25"]),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr))


@FUZZ
@given(gate=st.sampled_from(GATES), value=gate_value)
def test_fuzz_nan_and_inf_in_every_gate(tmp_path_factory, fixed_store, gate, value):
    """Every gate (the perplexity gate, SLO limits, result filters) takes a finite positive
    value only: NaN, infinities, zero and negatives are a usage error (exit 2)."""
    import math

    count("NaN/inf/zero in every gate")
    d = _tmp(tmp_path_factory, "gate")
    text = d / "t.txt"
    text.write_text("word " * 100)
    store = d / "s.db"
    store.write_bytes(fixed_store[0].read_bytes())
    extra = {"results": ["--store", store], "compare": ["--store", store], "report": ["--store", store, "--out",
             d / "rep"], "perplexity": ["--text", text, "--store", store], "run": []}[gate[0]]
    r = cli(*gate, value, *extra, code=None)
    try:
        v = float(value.strip().rstrip("%"))
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        assert r.exit_code == 2, f"{' '.join(gate)} {value}: exit {r.exit_code}\n{r.output}"


@FUZZ
@given(n_in=st.one_of(st.integers(1, 4096), st.integers(1, 10_000_000)),
       n_out=st.one_of(st.integers(1, 4096), st.integers(1, 10_000_000)))
def test_fuzz_lengths_against_context(n_in, n_out):
    """A sweep is refused when planned exactly when input + output exceeds the model's
    context (tiny-random-llama: 2,048 tokens)."""
    from infbench.contract.manager import get_plugin_manager
    from infbench.detect.platforms.cpu import cpu_device
    from infbench.plan import plan

    count("lengths against the model's context")
    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1], input_len=[n_in],
               output_len=[n_out])
    try:
        p = plan(sw, cpu_device(), get_plugin_manager())
    except InfbenchError as exc:
        assert n_in + n_out > 2048 and "context of 2,048" in exc.message
        return
    assert n_in + n_out <= 2048 and p.cells


@FUZZ
@given(mode=st.sampled_from(["batch", "serving", "find-max", "adaptive", "perplexity"]),
       pair=st.lists(st.integers(0, 200), min_size=2, max_size=2))
def test_fuzz_options_by_modes(tmp_path_factory, mode, pair):
    """Two options together in one mode: with the second given, the first still changes the
    run or is refused; never accepted and ignored (the scan of test_option_scan.py, by pairs)."""
    from infbench.contract.manager import get_plugin_manager
    from tests.support.option_scan import ALWAYS, BASE, MODES, files, prepared_effect, run_options
    from tests.support.option_scan import values as option_values

    count("run options x modes (pairs)")
    f = files(_tmp(tmp_path_factory, "scan"))
    vals = option_values(f)
    names = [n for n in run_options() if n not in ALWAYS and n in vals]
    first, second = names[pair[0] % len(names)], names[pair[1] % len(names)]
    base = {**BASE, **{k: (v.format(**f) if isinstance(v, str) else v) for k, v in MODES[mode].items()},
            **vals[second]}
    pm = get_plugin_manager()
    without = {**base, **{k: v for k, v in vals[first].items() if k != first}}
    before, after = prepared_effect(without, pm), prepared_effect({**without, **vals[first]}, pm)
    if before[0] == "refused" or after[0] == "refused" or first == second or first in vals[second]:
        return
    assert after[1] != before[1], f"{first} ignored in {mode} with {second}"
