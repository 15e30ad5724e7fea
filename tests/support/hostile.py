"""Helpers for the hardening tests (issue 14): the CLI driven in-process as a hostile user
would, read-only folders, stores and worker folders to break."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench import SCHEMA_VERSION, __version__
from infbench.data.schema import Cell, CellResult, DeviceInfo, RequestRecord
from infbench.measure.derive import cell_metrics
from infbench.store import Store

DEV = DeviceInfo(vendor="cpu", kind="cpu", model="Hostile CPU")

#: A dry run of the stand-in model: the arguments the hostile-input tests add theirs to.
DRY = ["run", "--model", "tiny", "--dry-run"]


def cli(*args, code: int | None = 2, env: dict[str, str] | None = None):
    """Run ``infbench ARGS`` in this process; assert no exception escaped (no traceback)
    and, unless ``code`` is None, the exit status. Returns the click result."""
    from infbench.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args], env=env)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = "".join(traceback.format_exception(r.exception))
        raise AssertionError(f"infbench {' '.join(map(str, args))} raised:\n{tb}")
    assert "Traceback" not in r.output, r.output
    if code is not None:
        assert r.exit_code == code, f"exit {r.exit_code}, wanted {code}:\n{r.output}"
    if code == 2:
        assert "error" in r.output.lower() or "invalid value" in r.output.lower(), r.output
    return r


def digest(path: Path) -> str:
    """SHA-256 of a file and its SQLite sidecars (what "unchanged" means for a store)."""
    h = hashlib.sha256()
    for p in (path, Path(f"{path}-wal")):
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def ingest_refused(folder: Path, store: Path, *expected: str):
    """``infbench ingest FOLDER --store STORE`` refused: each of ``expected`` in its output (read
    unwrapped: the printer wraps at the terminal's width and tmp paths differ in length) and
    the store unchanged, not even an empty run added. Returns the click result."""
    before = digest(store)
    r = cli("ingest", folder, "--store", store)
    flat = " ".join(r.output.split())
    for e in expected:
        assert e in flat, r.output
    assert digest(store) == before
    return r


def cell_result(batch: int = 1, status: str = "ok", model: str = "tiny-random-llama", t0: int = 1_000_000,
                error: str | None = None) -> CellResult:
    """A sound cell: raw records and the metrics derived from them."""
    c = Cell(model=model, engine="llama.cpp", dtype="f16", batch=batch, input_len=8, output_len=3)
    recs = [RequestRecord(t_send_ns=t0, t_tokens_ns=[t0 + 5_000_000 + i * 1000 + k * 2_000_000 for k in range(3)],
                          n_in=8, n_out=3) for i in range(batch)] if status == "ok" else []
    m = cell_metrics(recs) if recs else {}
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status=status,
                      error=error, metrics=m, records=recs, engine={"name": "llama.cpp"}, started_at=time.time(),
                      finished_at=time.time())


def make_store(path: Path, cells: int = 2) -> Path:
    """A store with one completed run of ``cells`` ok cells, checkpointed into one file."""
    s = Store(path)
    run = s.begin_run({"host": "test"}, command="infbench run (test)")
    for b in range(1, cells + 1):
        s.save_cell(run, cell_result(batch=b))
    s.finish_run(run, "completed")
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    return path


def worker_folder(d: Path, cells: list[CellResult] | None = None, status: str = "completed",
                  provenance: object = None) -> Path:
    """A worker's --out folder as ``infbench worker`` writes it."""
    d.mkdir(parents=True, exist_ok=True)
    cells = [cell_result(1), cell_result(2)] if cells is None else cells
    prov = {"schema_version": SCHEMA_VERSION, "infbench_version": __version__, "spec_hash": "abc",
            "started_at": 1.0, "finished_at": 2.0, "status": status,
            "provenance": {"host": "worker"} if provenance is None else provenance}
    (d / "provenance.json").write_text(json.dumps(prov))
    (d / "cells.jsonl").write_text("".join(c.model_dump_json() + "\n" for c in cells))
    return d


def corrupt_table(path: Path, table: str = "cells") -> None:
    """Overwrite the first page of ``table``'s b-tree with garbage (a corrupt page)."""
    import sqlite3

    db = sqlite3.connect(path)
    page = db.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xde\xad\xbe\xef" * (size // 4))


@contextlib.contextmanager
def readonly_dir(tmp_path: Path, files: dict[str, bytes] | None = None) -> Iterator[Path]:
    """A folder nobody can write, holding ``files``: a read-only tmpfs as root (root ignores
    permission bits), a mode-555 folder otherwise. Skips when neither can be made."""
    d = tmp_path / "readonly"
    d.mkdir()
    if os.geteuid() != 0:
        for name, data in (files or {}).items():
            (d / name).write_bytes(data)
        d.chmod(0o555)
        try:
            yield d
        finally:
            d.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("running as root without permission to mount a read-only tmpfs")
    try:
        for name, data in (files or {}).items():
            (d / name).write_bytes(data)
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True, capture_output=True)
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


@contextlib.contextmanager
def tiny_tmpfs(tmp_path: Path, size: str = "200k") -> Iterator[Path]:
    """A small tmpfs (a disk that fills up), or a skip where mounting is not allowed."""
    d = tmp_path / "tiny"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); the SQLITE_FULL store wrapper covers a full disk")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def store_dump(path: Path) -> str:
    """Every value of every column of every table of an SQLite store (and of its WAL, read
    through SQLite), as one text: what a "secret never stored" test greps. Blobs are
    decoded as Latin-1 so no byte is lost."""
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = []
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in db.execute(f'SELECT * FROM "{name}"'):
                out += [v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in row]
        return "\n".join(out)
    finally:
        db.close()


def secret_forms(*secrets: str) -> list[str]:
    """Each secret, percent-decoded and in the base64 forms an ``Authorization: Basic``
    header would carry it (``user:secret``)."""
    import base64

    out = []
    for s in secrets:
        out += [s, base64.b64encode(s.encode()).decode().rstrip("=")]
        for user in ("bob", "u", "user"):
            out.append(base64.b64encode(f"{user}:{s}".encode()).decode().rstrip("="))
    return out


def assert_no_secret(texts: dict[str, str], *secrets: str) -> None:
    """Fail naming where a planted secret (or its base64 form) was found."""
    for where, text in texts.items():
        for form in secret_forms(*secrets):
            assert form not in text, f"secret {form!r} found in {where}: ...{text[max(0, text.find(form) - 80):][:200]}"


#: The kinds of path no output may replace (issue 33): :func:`special_file` makes each.
SPECIAL_KINDS = ("chardev", "fifo", "socket", "folder", "link-to-fifo", "dangling-link")


def special_file(path: Path, kind: str) -> tuple[Path, str]:
    """Make ``path`` a path that is not a regular file, in a temporary folder (never the
    real ``/dev/null``): ``chardev`` (a copy of /dev/null's node, 1:3; skipped without
    CAP_MKNOD), ``fifo``, ``socket`` (bound, then its socket closed: the node stays),
    ``folder``, ``link-to-fifo`` (a symbolic link to a FIFO beside it), ``dangling-link``.

    Returns:
        (path, the words the refusal names it by).
    """
    import socket
    import stat

    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "chardev":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD (root)")
        return path, "character device"
    if kind == "fifo":
        os.mkfifo(path)
        return path, "FIFO"
    if kind == "socket":
        # AF_UNIX takes at most ~107 bytes: bound under a short folder, then moved into place
        # (a rename keeps the socket node), so a long tmp path (pytest-xdist's) skips nothing.
        short = tempfile.mkdtemp(prefix="ib-sock-")
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind(os.path.join(short, "s"))
            s.close()
            os.replace(os.path.join(short, "s"), path)
        finally:
            shutil.rmtree(short, ignore_errors=True)
        return path, "socket"
    if kind == "folder":
        path.mkdir()
        return path, "folder"
    if kind == "link-to-fifo":
        os.mkfifo(path.with_name(path.name + ".fifo"))
        path.symlink_to(path.name + ".fifo")
        return path, "FIFO (named pipe) (a symbolic link to"
    if kind == "dangling-link":
        path.symlink_to("no-such-target")
        return path, "which does not exist"
    raise ValueError(kind)


def same_node(path: Path, before: os.stat_result) -> bool:
    """True when ``path`` is still the very node ``before`` was (type, inode, device)."""
    after = os.lstat(path)
    return (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
