"""`infbench import` of published CSVs at the boundary (issue 22): rows no publication measured,
Latin-1 and multi-line CSVs, and the command's flags."""

from __future__ import annotations

import pytest

from tests.support.boundaries import FIXTURE_CSV, LIB_HEAD
from tests.support.hostile import cli, digest, make_store, store_dump


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


@pytest.mark.parametrize("args, message", [
    (["import", "--url", "not a url"], "--url"), (["import", "--commit", "$(rm -rf /)"], "--commit"),
    (["import", "--source", ""], "--source"),
])
def test_import_flags(tmp_path, args, message):
    r = cli(args[0], FIXTURE_CSV, *args[1:], "--store", tmp_path / "s.db")
    assert message in r.output and not (tmp_path / "s.db").exists()

