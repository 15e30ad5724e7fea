"""Each argument is read one way (issue 41, item 4): duplicate engine arguments, values that are JSON
or text (never YAML 1.1), a flag and an engine argument that disagree, nested `extra_body`, and
sweep files read the same way."""

from __future__ import annotations

import pytest

from tests.support.hostile import DRY, cli


# -- item 4: one reading of each argument --------------------------------------------------------
@pytest.mark.parametrize("items, says", [
    (["n_ubatch=4", "n_ubatch=8"], "given twice"),
    (["n-ubatch=4", "n_ubatch=8"], "one key"),
])
def test_duplicate_engine_args_are_an_error(items, says):
    from infbench.data.engine_options import parse_engine_args
    from infbench.data.errors import ConfigError

    with pytest.raises(ConfigError, match=says):
        parse_engine_args(items)


def test_engine_arg_values_are_json_or_text_never_yaml11():
    from infbench.data.engine_options import parse_engine_args

    got = parse_engine_args(["a=010", "b=1:30", "c=yes", "d=0.5", "e=true", "f=null", "g=NaN", "h=08", "i=10"])
    assert got == {"a": "010", "b": "1:30", "c": "yes", "d": 0.5, "e": True, "f": None, "g": "NaN", "h": "08",
                   "i": 10}


@pytest.mark.parametrize("flags, arg", [
    (["--threads", "2"], "n_threads=1"),
    (["--endpoint", "completions", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1"], "endpoint=chat"),
    (["--base-url", "http://127.0.0.1:9/v1", "--engine", "openai"], "base_url=http://127.0.0.1:8/v1"),
])
def test_a_flag_and_an_engine_arg_that_disagree_stop_the_run(flags, arg):
    r = cli(*DRY, *flags, "--engine-arg", arg)
    assert "set the same option to two values" in " ".join(r.output.split())


def test_an_engine_arg_value_in_the_same_spelling_as_its_flag_is_fine():
    cli(*DRY, "--threads", "2", "--engine-arg", "n_threads=2", code=0)


def test_nested_extra_body_is_refused_not_a_recursion_error():
    deep = "{\"a\":" * 10_000 + "1" + "}" * 10_000
    r = cli(*DRY, "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--engine-arg", f"extra_body={deep}")
    assert "nesting deeper than 32" in " ".join(r.output.split())


@pytest.mark.parametrize("value, says", [("010", "YAML 1.1 reading as a number (8)"), ("1:30", "(90)"),
                                         ("yes", "boolean only in YAML 1.1")])
def test_sweep_files_have_one_reading_too(tmp_path, value, says):
    """A sweep file's ``n_ubatch: 010`` was 8 and ``1:30`` 90 (YAML 1.1): refused with the line."""
    f = tmp_path / "s.yaml"
    f.write_text(f"models: [tiny]\nbatch: [1]\nengine_args:\n  n_ubatch: {value}\n")
    r = cli("run", "--sweep", f, "--dry-run")
    assert says in " ".join(r.output.split()) and "line 4" in " ".join(r.output.split())

