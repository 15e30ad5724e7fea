"""Following a worker (``infbench worker`` in a container, an Apptainer image or a child
process on a Ray node): its ``infbench-worker:`` log lines and the results it appends to
its output folder, as one stream of events, read the same way by the container executor
(on the host) and by a Ray node (:mod:`infbench.execution.executors.raynode`).

The worker's line protocol is :func:`infbench.execution.worker.event_line`. Results are read from
``out/cells.jsonl`` and ``out/quality.jsonl`` as each ``done``/``scored`` line appears
(never through a symlink the worker could plant: :func:`read_no_follow`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import stat
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from infbench.data.schema import Cell, CellResult
from infbench.data.scores import PerplexityResult

PREFIX = "infbench-worker: "
#: Seconds of silence (no worker event) allowed on top of the cell timeout before the
#: worker is killed; covers loading a model.
STALL_GRACE_S = 600.0
#: Stall limit when no cell timeout is set.
DEFAULT_STALL_S = 3600.0


def stall_limit(cell_timeout_s: float | None) -> float:
    """Seconds a worker may stay silent before it is killed as stalled (s)."""
    return (cell_timeout_s + STALL_GRACE_S) if cell_timeout_s else DEFAULT_STALL_S


def read_no_follow(path: Path, offset: int = 0) -> bytes:
    """The bytes of ``path`` from ``offset``, refusing a symlink (the worker writes the
    folder: a planted ``cells.jsonl -> /etc/shadow`` must not be read on the host).

    Raises:
        OSError: missing, a symlink (ELOOP) or not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class JsonlTail:
    """Reads the complete lines appended to a worker's JSONL output since the last read, as
    ``model`` instances (lines that do not validate are skipped: ingest checks them).

    Args:
        path: ``cells.jsonl`` or ``quality.jsonl``.
        model: :class:`~infbench.data.schema.CellResult` or
            :class:`~infbench.data.scores.PerplexityResult`.
    """

    def __init__(self, path: Path, model: type[BaseModel] = CellResult):
        self.path, self.model, self.offset = path, model, 0

    def read(self) -> list[Any]:
        """The new complete lines, parsed."""
        try:
            data = read_no_follow(self.path, self.offset)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for line in data[:end].splitlines():
            if line.strip():
                with contextlib.suppress(ValueError, ValidationError):
                    out.append(self.model.model_validate_json(line))
        return out


@dataclass
class WorkerExit:
    """How a worker ended.

    Attributes:
        exit_code: its exit status (None: unknown).
        reason: ``exited``, ``was killed (...)``, ``reported nothing for N s ...``.
        running: what it was doing: the :class:`~infbench.data.schema.Cell` of the cell in progress,
            the quality key of a perplexity measurement in progress, or None.
        tail: its last log lines that were not events.
        provenance: its ``provenance.json`` (None: unreadable).
        description: the container it ran in (runtime, image, image id), if any.
    """

    exit_code: int | None
    reason: str
    running: Cell | str | None = None
    tail: list[str] = field(default_factory=list)
    provenance: dict[str, Any] | None = None
    description: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """Whether the worker ran its whole spec (its status completed, with or without
        failed cells), so nothing it was sent is left."""
        st = (self.provenance or {}).get("status")
        return self.exit_code in (0, 3) and st in ("completed", "completed_with_failures")

    @property
    def refused(self) -> bool:
        """Whether the worker refused the job (exit 2: a bad spec, no device, another text)."""
        return self.exit_code == 2

    def error(self, where: str = "") -> str:
        """The error stored with what the worker was running."""
        tail = " | ".join(self.tail[-5:])
        on = f" on node {where}" if where else ""
        return (f"worker {self.reason} (exit status {self.exit_code}){on} during this cell; last log lines: {tail}"
                if not self.refused else f"worker refused the job (exit status 2){on}; last log lines: {tail}")


def _cell_of(rest: str) -> tuple[str, Cell | None]:
    """``<spec_hash> <cell JSON>`` of a ``cell`` line (an older worker sends a label instead)."""
    h, _, body = rest.partition(" ")
    try:
        return h, Cell.model_validate_json(body)
    except (ValueError, ValidationError):
        return h, None


def follow_worker(handle: Any, job: Path, stall_s: float,
                  log_path: Path | None = None) -> Generator[tuple[str, Any], None, None]:
    """Follow a started worker until it exits, as events.

    Args:
        handle: the worker: ``lines()`` (its log lines), ``wait()``, ``kill()``, ``cleanup()``
            (:mod:`infbench.runtimes`, :class:`infbench.execution.executors.raynode.ProcessWorker`).
        job: the job folder (the worker writes ``job/out``).
        stall_s: seconds of silence before the worker is killed (:func:`stall_limit`).
        log_path: where to append every line (default ``job/worker.log``).

    Yields:
        ``(kind, payload)``: ``("loading", group label)``, ``("cell", (spec_hash, Cell or
        None))``, ``("timed", spec_hash)`` (its warm-up done), ``("result", CellResult)``
        (each finished cell as its ``done`` line
        appears), ``("score", (quality key, label))``, ``("quality", PerplexityResult)``,
        ``("log", line)`` for a line that is not an event, and last ``("exit", WorkerExit)``.

    Closing the generator (or an exception in the caller, Ctrl-C) kills the worker; the
    handle is always cleaned up.
    """
    cells = JsonlTail(job / "out" / "cells.jsonl", CellResult)
    scores = JsonlTail(job / "out" / "quality.jsonl", PerplexityResult)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        try:
            for line in handle.lines():
                lines.put(line)
        finally:
            lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    log_tail: collections.deque[str] = collections.deque(maxlen=40)
    running: Cell | str | None = None
    sent: set[Any] = set()
    stalled = False
    last = time.monotonic()
    ended = False

    pending: list[tuple[str, str, Any]] = []   # read, not yet announced
    announced: set[str] = set()   # what the worker's ``done`` / ``scored`` lines named so far

    def results(every: bool = False) -> Generator[tuple[str, Any], None, None]:
        """The results stored since the last call, but only those the log has announced
        (``every``: all of them, once the worker exited). The log is read late, by a thread:
        by the time ``done A`` is handled the file may already hold B, whose ``cell B`` line
        is still queued; yielding B then would put its result before its start."""
        pending.extend(("result", r.spec_hash, r) for r in cells.read())
        pending.extend(("quality", "q:" + q.key(), q) for q in scores.read())
        kept = []
        for kind, key, obj in pending:
            # one yield per line: a cell measured again (its group's sentinel) or flagged after it
            # was stored comes back as another line of the same spec hash
            line_key = (key, obj.model_dump_json()) if kind == "result" else key
            if line_key in sent:
                continue
            if every or key in announced:
                sent.add(line_key)
                yield kind, obj
            else:
                kept.append((kind, key, obj))
        pending[:] = kept

    code = None
    try:
        with (log_path or job / "worker.log").open("a") as log:
            while True:
                try:
                    line = lines.get(timeout=0.5)  # short waits: a cancel's KeyboardInterrupt lands here
                except queue.Empty:
                    if time.monotonic() - last > stall_s and not stalled:
                        stalled = True
                        handle.kill()
                    continue
                if line is None:
                    break
                log.write(line + "\n")
                log.flush()
                if not line.startswith(PREFIX):
                    log_tail.append(line)
                    yield "log", line
                    continue
                last = time.monotonic()
                kind, _, rest = line[len(PREFIX):].partition(" ")
                if kind == "loading":
                    yield "loading", rest
                elif kind == "cell":
                    h, cell = _cell_of(rest)
                    running = cell
                    yield "cell", (h, cell)
                elif kind == "timed":
                    yield "timed", rest.strip()
                elif kind in ("done", "scored"):
                    name = rest.split(" ", 1)[0]
                    announced.add(name if kind == "done" else "q:" + name)
                    yield from results()
                    running = None
                elif kind == "flagged":  # a stored cell flagged after the fact: its line again
                    yield from results()
                elif kind == "score":
                    key, _, label = rest.partition(" ")
                    running = key
                    yield "score", (key, label)
                else:
                    log_tail.append(line)
        code = handle.wait()
        yield from results(every=True)
        ended = True
    finally:
        if not ended:
            with contextlib.suppress(Exception):
                handle.kill()
        handle.cleanup()
    prov = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        prov = json.loads(read_no_follow(job / "out" / "provenance.json"))
    if stalled:
        reason = (f"reported nothing for {stall_s:.0f} s and was killed "
                  f"(stall limit: --cell-timeout + {STALL_GRACE_S:.0f} s)")
    elif code in (137, -9):
        reason = "was killed (SIGKILL: out of memory, `docker kill`, or the OOM killer)"
    elif code is None:
        reason = "vanished (its exit status could not be read)"
    else:
        reason = "exited"
    yield "exit", WorkerExit(code, reason, running, list(log_tail), prov if isinstance(prov, dict) else None)
