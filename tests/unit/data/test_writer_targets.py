"""Writer targets (issue 33, item 1): no command that writes replaces a device node, FIFO, socket,
folder or a link to the store, it refuses before any work, and a regular earlier output is still
replaced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.hostile import SPECIAL_KINDS, cli, make_store, same_node, special_file


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

