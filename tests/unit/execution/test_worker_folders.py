"""Every folder infbench writes into is its own (issue 41, item 1): `worker --out` refuses a folder
holding the user's files, and the rules of the folder mark (new, empty, marked, forged, broken)."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli


# -- item 1: every folder infbench writes into is its own --------------------------------------
@pytest.mark.parametrize("theirs", ["cells.jsonl", "provenance.json", "notes.txt"])
def test_worker_refuses_a_folder_it_did_not_make(tmp_path, theirs):
    """`worker --out DIR` where DIR holds the user's files: refused (exit 2) before the
    spec is read, naming the folder and a file, and every file left byte for byte."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / theirs).write_text("the user's own data\n")
    r = cli("worker", "--spec", tmp_path / "no-spec.json", "--out", out, code=2)
    text = " ".join(r.output.split())
    assert "did not write" in text and theirs in text and "no-spec.json" not in text
    assert (out / theirs).read_text() == "the user's own data\n" and sorted(p.name for p in out.iterdir()) == [theirs]


def test_worker_folder_mark_rules(tmp_path):
    """New, empty (a container's mount point) and marked folders are taken; a marked
    folder is reused by a resumed worker; a forged or broken mark does not count."""
    from infbench.data.outputs import FOLDER_MARK, OutputRefused, check_own_folder, folder_mark, mark_folder

    new, empty, handoff = tmp_path / "new", tmp_path / "empty", tmp_path / "handoff"
    empty.mkdir()
    (handoff / "taken").mkdir(parents=True)
    (handoff / "taken" / "ab12").write_text("handed")
    for d in (new, empty, handoff):
        check_own_folder(d, "--out", "x")
        mark_folder(d, "infbench worker")
        assert folder_mark(d)["what"] == "infbench worker"
    (new / "cells.jsonl").write_text("{}\n")  # its own earlier output: reused
    check_own_folder(new, "--out", "x")
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / FOLDER_MARK).write_text('{"written_by": "someone else"}')
    (forged / "cells.jsonl").write_text("theirs")
    with pytest.raises(OutputRefused, match="did not write"):
        check_own_folder(forged, "--out", "x")
    (forged / FOLDER_MARK).unlink()
    (forged / FOLDER_MARK).mkdir()  # a folder where the mark belongs is no mark
    with pytest.raises(OutputRefused):
        check_own_folder(forged, "--out", "x")
    odd = tmp_path / "odd"
    (odd / "taken").mkdir(parents=True)
    (odd / "taken" / "not-a-hash.txt").write_text("x")
    with pytest.raises(OutputRefused):
        check_own_folder(odd, "--out", "x")

