"""The worker contract: run planned cells somewhere else (a vendor's container image, an
Apptainer image, a batch job on another node) and bring the raw results back.

Host side: :func:`write_spec` turns a :class:`~infbench.plan.Plan` into ``spec.json``.
Worker side: ``infbench worker --spec spec.json --out DIR`` (:func:`run_worker`) runs the
cells with the engines installed where it runs and writes into ``DIR``:

* ``provenance.json``: the worker's provenance (host, image libraries, devices, infbench
  version and git sha, store schema), the spec hash, start/finish times and status;
  rewritten at the start and at the end.
* ``cells.jsonl``: one :class:`~infbench.schema.CellResult` per line (raw per-request
  token timestamps, power readings, metrics, errors), appended and flushed as each cell
  finishes, so a worker killed mid-cell loses only that cell.
* ``worker.db``: the same results as an ordinary infbench store (inspect with
  ``infbench results --store DIR/worker.db``).

Host side again: :func:`ingest` reads ``DIR`` into the host's store as one run whose
provenance records the worker's, keeping every cell's ``spec_hash`` and ``cell_id``, so
the same workload run in different images or sites is recognisably the same cell.

Both ends check the store schema version (:data:`infbench.SCHEMA_VERSION`): a spec or
an output written by an infbench with another schema is refused with a message naming
both versions and what to rebuild.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from infbench import SCHEMA_VERSION, __version__
from infbench.errors import ConfigError, InfbenchError
from infbench.schema import Cell, CellResult, DeviceInfo, short_hash
from infbench.secrets import redact_options

SPEC_FILE, PROVENANCE_FILE, CELLS_FILE, DB_FILE = "spec.json", "provenance.json", "cells.jsonl", "worker.db"


class VersionSkew(InfbenchError):
    """Host and worker were written by infbench versions with different store schemas."""

    exit_code = 2


class WorkerOptions(BaseModel):
    """Run options carried to the worker (the identity-free knobs of :class:`infbench.run.RunOptions`)."""

    cell_timeout_s: float | None = None
    power_interval_s: float = 0.1
    engine_options: dict[str, Any] = Field(default_factory=dict)
    slo: dict[str, float] | None = None
    server_metrics_interval_s: float = 1.0
    price_per_hour: float | None = None


class WorkerSpec(BaseModel):
    """What a worker runs: the cells, the device group they were planned for, options.

    Attributes:
        schema_version: the host's store schema; the worker refuses another one.
        infbench_version: the host's infbench version (for messages).
        device: the device group the host planned for; the worker runs on the detected
            device of the same vendor and model.
        cells: the cells, in run order.
        options: run options.
    """

    schema_version: int
    infbench_version: str
    device: DeviceInfo
    cells: list[Cell] = Field(min_length=1)
    options: WorkerOptions = Field(default_factory=WorkerOptions)

    def spec_hash(self) -> str:
        """Hash of the workload: the cells' spec hashes in order (device and options excluded)."""
        return short_hash([c.spec_hash() for c in self.cells])


def event_line(event: Any) -> str | None:
    """The worker's stderr line for a run event (:mod:`infbench.executors.events`), or
    None for events it does not announce.

    One plain, never-wrapped line per event, parsed by a host's launcher
    (:mod:`infbench.executors.container`) to move its progress display and store finished
    cells: ``infbench-worker: loading <group>``, ``infbench-worker: cell <spec_hash>
    <label>``, ``infbench-worker: done <spec_hash> <cell_id> ok|failed [error]``.
    """
    from infbench.executors.events import CellFinished, CellStarted, GroupLoading

    if isinstance(event, GroupLoading):
        line = f"loading {event.group.label()}"
    elif isinstance(event, CellStarted):
        line = f"cell {event.cell.spec_hash()} {event.cell.label()}"
    elif isinstance(event, CellFinished):
        r = event.result
        line = f"done {r.spec_hash} {r.cell_id} {r.status}" + (f" {' '.join(str(r.error).split())}" if r.error else "")
    else:
        return None
    return f"infbench-worker: {line}"


def _skew(what: str, their_schema: Any, their_version: Any) -> VersionSkew:
    return VersionSkew(
        f"{what} was written by infbench {their_version} (store schema {their_schema}); this is infbench "
        f"{__version__} (store schema {SCHEMA_VERSION})",
        hint="use the same infbench on host and worker: rebuild the worker image from this checkout "
             "(`infbench containers build`) or install the matching infbench version on the host")


def make_spec(plan: Any, opts: Any = None) -> WorkerSpec:
    """The worker spec of ``plan`` (a :class:`~infbench.plan.Plan`): its device and cells,
    and the identity-free knobs of ``opts`` (:class:`infbench.run.RunOptions`: timeout,
    power interval, engine options with URL credentials redacted by
    :func:`infbench.secrets.redact_options`, SLO, /metrics interval, price), stamped with
    this infbench's store schema."""
    o = WorkerOptions()
    if opts is not None:
        o = WorkerOptions(cell_timeout_s=opts.cell_timeout_s, power_interval_s=opts.power_interval_s,
                          engine_options=redact_options(opts.engine_options), slo=opts.slo,
                          server_metrics_interval_s=opts.server_metrics_interval_s,
                          price_per_hour=opts.price_per_hour)
    return WorkerSpec(schema_version=SCHEMA_VERSION, infbench_version=__version__, device=plan.device,
                      cells=plan.cells, options=o)


def write_spec(plan: Any, path: Path, opts: Any = None) -> WorkerSpec:
    """Write the worker spec of ``plan`` (a :class:`~infbench.plan.Plan`) to ``path``.

    Args:
        plan: the planned cells and their device.
        path: the ``spec.json`` to write (folders created).
        opts: optional :class:`infbench.run.RunOptions` (timeout, power interval, engine
            options, SLO).
    """
    spec = make_spec(plan, opts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spec.model_dump_json(indent=2))
    return spec


def read_spec(path: Path) -> WorkerSpec:
    """Read and check a worker spec.

    Raises:
        VersionSkew: the spec's schema version is not this infbench's.
        ConfigError: unreadable or invalid file.
    """
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read worker spec {path}: {exc}") from exc
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise _skew(f"worker spec {path}", raw.get("schema_version"), raw.get("infbench_version", "?"))
    try:
        return WorkerSpec(**raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid worker spec {path}: {exc}") from exc


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


def run_worker(spec_path: Path, out_dir: Path, observer: Any = None) -> dict[str, Any]:
    """Run a spec's cells here with the in-process executor and write the results to
    ``out_dir`` (see the module doc); ``observer`` receives the run's events.

    Returns:
        The final ``provenance.json`` content (``status``: completed,
        completed_with_failures, failed).

    Raises:
        VersionSkew, ConfigError: bad spec, or no detected device matches the spec's.
    """
    from infbench.detect import detect
    from infbench.executors.events import CellFinished
    from infbench.executors.inprocess import InProcessExecutor
    from infbench.models import resolve
    from infbench.plan import Group, Plan
    from infbench.plugins import get_plugin_manager
    from infbench.run import RunOptions, provenance
    from infbench.store import Store

    spec = read_spec(spec_path)
    pm = get_plugin_manager()
    det = detect(pm)
    want = spec.device
    matches = [d for d in det.devices if d.vendor == want.vendor and d.model == want.model] or \
              [d for d in det.devices if d.vendor == want.vendor]
    if not matches:
        raise ConfigError(f"the worker sees no {want.vendor} device ({want.model}); it sees: "
                          f"{', '.join(f'{d.vendor} {d.model}' for d in det.devices) or 'nothing'}",
                          hint="are the devices passed into the container (the plugin's container spec)?")
    device = matches[0]
    groups: dict[tuple, Group] = {}
    for c in spec.cells:
        g = groups.setdefault(c.group_key(), Group(resolve(c.model), c.engine, c.dtype, c.tensor_parallel_size))
        g.cells.append(c)
    plan = Plan(device=device, groups=list(groups.values()))
    out_dir.mkdir(parents=True, exist_ok=True)
    cells_path = out_dir / CELLS_FILE
    cells_path.write_text("")
    prov = {"schema_version": SCHEMA_VERSION, "infbench_version": __version__, "spec_hash": spec.spec_hash(),
            "started_at": time.time(), "finished_at": None, "status": "running",
            "provenance": {**provenance(det, pm), "worker": True}}
    _write_json(out_dir / PROVENANCE_FILE, prov)
    o = spec.options
    opts = RunOptions(force=True, cell_timeout_s=o.cell_timeout_s, power_interval_s=o.power_interval_s,
                      engine_options=dict(o.engine_options), slo=o.slo,
                      server_metrics_interval_s=o.server_metrics_interval_s, price_per_hour=o.price_per_hour)
    store = Store(out_dir / DB_FILE)

    def event(ev: Any) -> None:
        if isinstance(ev, CellFinished):
            with cells_path.open("a") as f:
                f.write(ev.result.model_dump_json() + "\n")
                f.flush()
                os.fsync(f.fileno())
        if observer is not None:
            observer(ev)

    status = "failed"
    try:
        summary = InProcessExecutor(pm, prov["provenance"]).run(plan, store, opts, event)
        status = summary.status
    finally:
        store.close()
        prov.update(finished_at=time.time(), status=status)
        _write_json(out_dir / PROVENANCE_FILE, prov)
    return prov


def ingest(out_dir: Path, store: Any, command: str = "", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read a worker's ``out_dir`` into ``store`` as one run.

    A truncated last line of ``cells.jsonl`` (a worker killed while writing) is skipped
    and counted; everything complete is stored.

    Args:
        out_dir: the worker's output folder.
        store: the host's :class:`~infbench.store.Store`.
        command: the command line to record with the run.
        extra: more provenance (image, container runtime...) merged into the run's.

    Returns:
        ``{"run_id", "ok", "failed", "skipped_lines", "status", "spec_hash", "cells":
        [CellResult]}``.

    Raises:
        VersionSkew: the worker wrote another store schema.
        ConfigError: no ``provenance.json`` in ``out_dir`` (the worker never started).
    """
    try:
        prov = json.loads((out_dir / PROVENANCE_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no worker output in {out_dir} ({PROVENANCE_FILE} missing or unreadable: {exc})",
                          hint="did the worker start? see its log") from exc
    if prov.get("schema_version") != SCHEMA_VERSION:
        raise _skew(f"worker output {out_dir}", prov.get("schema_version"), prov.get("infbench_version", "?"))
    cells: list[CellResult] = []
    skipped = 0
    path = out_dir / CELLS_FILE
    for line in (path.read_text().splitlines() if path.is_file() else []):
        if not line.strip():
            continue
        try:
            cells.append(CellResult.model_validate_json(line))
        except ValidationError:
            skipped += 1
    worker_prov = {**(prov.get("provenance") or {}), "spec_hash": prov.get("spec_hash"),
                   "worker_status": prov.get("status"), **(extra or {})}
    run_id = store.begin_run(worker_prov, command=command)
    for c in cells:
        store.save_cell(run_id, c)
    status = prov.get("status") if prov.get("status") not in (None, "running") else "interrupted"
    store.finish_run(run_id, status)
    return {"run_id": run_id, "ok": sum(c.status == "ok" for c in cells),
            "failed": sum(c.status != "ok" for c in cells), "skipped_lines": skipped, "status": status,
            "spec_hash": prov.get("spec_hash"), "cells": cells}
