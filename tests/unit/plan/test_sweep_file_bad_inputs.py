"""Bad sweep files (issue 14, section 1): binary, deeply nested, alias bombs, duplicate keys and
wrong types are refused with a clear error (exit 2, naming the file or value), never a traceback.
The CLI runs in-process (:func:`tests.support.hostile.cli` fails on any escaped exception)."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.hostile import (
    cli,
)


# -- section 1: sweep files ----------------------------------------------------------
def test_binary_sweep_file(tmp_path):
    f = tmp_path / "b.yaml"
    f.write_bytes(os.urandom(2000).replace(b"\xef", b"\xff"))
    r = cli("run", "--sweep", f, "--dry-run")
    assert "not UTF-8 text" in r.output and "b.yaml" in r.output


def test_deeply_nested_sweep_file(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("models: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nesting deeper than" in cli("run", "--sweep", f, "--dry-run").output
    f.write_text("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 200)))
    assert "nesting deeper than" in cli("run", "--sweep", f, "--dry-run").output


def test_alias_bomb_is_refused_with_a_short_message(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("models: *i")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    r = cli("run", "--sweep", f, "--dry-run")
    assert time.monotonic() - t0 < 30  # not a timing assertion: a bomb takes hours or all memory
    assert "alias" in r.output and len(r.output) < 2000
    # a few aliases are fine: the message of a wrong value stays short however long the value
    f.write_text("x: &x [" + ",".join(["1"] * 5000) + "]\nbatch: *x\nmodels: [" + "a" * 100_000 + "]\n")
    r = cli("run", "--sweep", f, "--dry-run")
    assert len(r.output) < 3000


def test_duplicate_keys_are_refused(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("batch: [1]\nmodels: [tiny]\nbatch: [2]\n")
    r = cli("run", "--sweep", f, "--dry-run")
    assert "duplicate key 'batch'" in r.output and "line 3" in r.output


@pytest.mark.parametrize("yaml_text, message", [
    ("batch: [true]", "batch.0"),
    ("batch: [1.0e+23]", "batch.0"),
    ("batch: [100000000]", "at most 1,000,000"),
    ('batch: ["4"]', "batch.0"),
    ("models: [1]", "models.0"),
    ("warmup: true", "warmup"),
    ("seed: -1", "seed"),
    ("cell_timeout_s: .inf", "finite"),
    ("request_rate: [.nan]", "request_rate"),
    ("1: 2", "'1'"),
    ("preset: [quick]", "unknown preset"),
    ("- a\n- b", "must hold a mapping"),
])
def test_strict_sweep_types(tmp_path, yaml_text, message):
    f = tmp_path / "s.yaml"
    f.write_text(yaml_text + "\n")
    assert message in cli("run", "--sweep", f, "--dry-run").output

