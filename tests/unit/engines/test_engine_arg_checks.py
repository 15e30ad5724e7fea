"""Engine arguments checked before a run (issue 33, item 2): bad values and OpenAI options refused,
`extra_body`/`extra_headers` parsed as JSON, the options models declare each engine's options,
and plugin engines that declare names only keep working."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from infbench.data.errors import ConfigError
from infbench.data.schema import Cell, DeviceInfo
from tests.support.hostile import DRY, cli


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

