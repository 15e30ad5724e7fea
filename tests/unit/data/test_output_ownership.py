"""Outputs at the boundary (issue 22): no `--out` may be the store, no output replaces a file it did
not write (outputs written before the markers are still recognised), and no command waits on a
FIFO it was given."""

from __future__ import annotations

from pathlib import Path

from tests.support.boundaries import TRACE_RUN
from tests.support.hostile import cli, digest, make_store


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

