"""Published results in the store: an imported publication is one run whose provenance
says where it came from, its cells marked ``published`` (no schema change).

Why no new column: a published cell differs from a local one in where it came from, not
in what it holds; the run's provenance (``{"kind": "published", "source": {...}}``) and
each cell's engine description (``{"published": true, "source": ..., "line": ...}``) carry
that, and its ``cell_id`` includes the source, so nothing that keys on cell ids (resume,
``finished_cell_ids``) can mistake it for a local measurement. Readers that show or fit
cells ask :attr:`infbench.data.stored.StoredCell.published` (``flat_row`` labels the device
``(published)``; ``predict --calibrate`` counts them apart).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.data.schema import CellResult
from infbench.data.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


#: Cells stored between two progress lines of a large import.
PROGRESS_EVERY = 10_000


def import_published(store: Store, results: list[CellResult], source: dict[str, Any], command: str = "",
                     progress: Callable[[str], None] | None = None) -> str:
    """Store published cells as one run and return its id, all or nothing (issue 41: an
    import killed after 104,405 of 10^6 cells left them all shown ok).

    The run is begun first (``running``, with this process as its owner); its cells and
    its ``completed`` status are then written in one transaction. An import that fails or
    is killed part-way commits no cell: the run stays with none, marked ``failed`` (an
    error) or, once its process is gone, ``interrupted`` by the next command that writes
    the store, which says so.

    Args:
        store: an open :class:`infbench.store.Store`.
        results: :func:`infbench.report.lib_import.published_cells` output.
        source: the provenance's ``source`` (name, url, commit, file, sha256, citation).
        command: the command line, for the run record.
        progress: receives a line every :data:`PROGRESS_EVERY` cells of a large import.
    """
    prov = {"kind": "published", "source": source, "cells": len(results), "imported_at": time.time(),
            "infbench_version": __version__}
    run_id = store.begin_run(prov, command=command)
    try:
        with store.transaction():
            for i, r in enumerate(results, 1):
                store.save_cell(run_id, r)
                if progress is not None and i % PROGRESS_EVERY == 0:
                    progress(f"import: {i:,} of {len(results):,} cells written (committed together at the end)")
            store.finish_run(run_id, "completed")
    except BaseException as exc:
        store.finish_run(run_id, "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
        raise
    return run_id


def published_runs(store: Store) -> list[dict[str, Any]]:
    """The runs of ``store`` that are imported publications, newest first."""
    return [r for r in store.runs() if (r.get("provenance") or {}).get("kind") == "published"]
