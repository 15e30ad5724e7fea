"""Cells handed from a running worker to another one: the part of the worker contract
that lets the Ray driver split a group while its worker runs (:mod:`infbench.execution.executors.fleet`,
:mod:`infbench.execution.executors.ray`).

A worker whose spec allows it (:attr:`~infbench.data.scenarios.SweepScenario.handoff`)
*takes* each cell before measuring it by creating ``<out>/taken/<spec_hash>`` with
``O_CREAT | O_EXCL``; the driver *hands a cell off* by creating the same file first, from
a small task on the worker's node (:func:`hand_off`). The file system of that node lets
exactly one of them create it, so each cell is measured by one worker: the worker skips a
cell it could not take, and the driver gives another worker only the cells it took. A
cell the worker had already started stays with it.

The file holds who took it (``worker`` or ``handed``). Nothing else is shared between
nodes: the output folder is the worker's own (inside a container, the same folder
mounted at ``/job/out``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: The folder of the markers, inside the worker's output folder.
TAKEN_DIR = "taken"
WORKER, HANDED = "worker", "handed"
_HASH = re.compile(r"[0-9a-f]{1,64}")


def take(out_dir: Path, spec_hash: str, who: str = WORKER) -> bool:
    """Take the cell ``spec_hash`` for ``who``: True when this call created its marker,
    False when someone took it before.

    Raises:
        ValueError: ``spec_hash`` is not a hex spec hash (nothing is created).
        OSError: the folder cannot be written.
    """
    if not _HASH.fullmatch(spec_hash):
        raise ValueError(f"not a cell's spec hash: {spec_hash[:80]!r}")
    folder = Path(out_dir) / TAKEN_DIR
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / spec_hash, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(who)
    return True


def hand_off(out_dir: Path, spec_hashes: list[str]) -> list[str]:
    """Take ``spec_hashes`` away from the worker writing ``out_dir`` (see the module doc):
    the ones this call took, in order; the others the worker had taken already."""
    return [h for h in spec_hashes if take(out_dir, h, HANDED)]


def taken_by(out_dir: Path, spec_hash: str) -> str | None:
    """Who took ``spec_hash`` (``worker``, ``handed``), or None when nobody did."""
    try:
        return (Path(out_dir) / TAKEN_DIR / spec_hash).read_text() or None
    except OSError:
        return None
