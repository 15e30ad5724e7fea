"""The worker contract: run planned cells somewhere else (a vendor's container image, an
Apptainer image, a batch job on another node) and bring the raw results back.

Host side: :func:`write_spec` turns a :class:`~infbench.plan.Plan` into ``spec.json``.
Worker side: ``infbench worker --spec spec.json --out DIR`` (:func:`run_worker`) runs the
cells with the engines installed where it runs and writes into ``DIR``:

* ``provenance.json``: the worker's provenance (host, image libraries, devices, infbench
  version and git sha, store schema), the spec hash, start/finish times and status;
  rewritten at the start and at the end.
* ``cells.jsonl``: one :class:`~infbench.data.schema.CellResult` per line (raw per-request
  token timestamps, power readings, metrics, errors), appended and flushed as each cell
  finishes, so a worker killed mid-cell loses only that cell.
* ``quality.jsonl``: one :class:`~infbench.data.scores.PerplexityResult` per line (a
  perplexity scenario), appended the same way.
* ``worker.db``: the same results as an ordinary infbench store (inspect with
  ``infbench results --store DIR/worker.db``).

Host side again: :func:`ingest` reads ``DIR`` into the host's store as one run whose
provenance records the worker's, keeping every cell's ``spec_hash`` and ``cell_id``, so
the same workload run in different images or sites is recognisably the same cell.

The spec carries the plan's scenario (:mod:`infbench.data.scenarios`: a sweep, a
``--find-max`` search, perplexity); the worker runs it with the in-process executor, so a
scenario measures the same way on every executor, and writes what it concluded into
``provenance.json`` under ``scenario``.

Both ends check the store schema version (:data:`infbench.SCHEMA_VERSION`): a spec or
an output written by an infbench with another schema is refused with a message naming
both versions and what to rebuild.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from infbench.analysis.floor import mark_rechecked, recheck
from infbench.contract.manager import get_plugin_manager
from infbench.data import metrics as M
from infbench.data.errors import ConfigError, VersionSkew
from infbench.data.events import (
    CellFinished,
    CellFlagged,
    CellStarted,
    CellTimed,
    GroupLoading,
    ScoreFinished,
    ScoreStarted,
)
from infbench.data.groups import Group, Plan
from infbench.data.handoff import take as take_marker
from infbench.data.inputs import read_bytes, read_text, strict_json
from infbench.data.models import resolve
from infbench.data.outputs import check_own_folder, mark_folder
from infbench.data.run import RunOptions
from infbench.data.schema import CellResult
from infbench.data.scores import PerplexityResult
from infbench.data.secrets import redact
from infbench.data.version import SCHEMA_VERSION, __version__
from infbench.data.worker_spec import (
    CELLS_FILE,
    DB_FILE,
    PROVENANCE_FILE,
    QUALITY_FILE,
    SPEC_FILE,
    WorkerSpec,
    make_spec,
    read_spec,
    skew,
    write_spec,
)
from infbench.detect import detect
from infbench.execution.bookkeeping import provenance
from infbench.execution.executors.follow import read_no_follow
from infbench.execution.executors.inprocess import InProcessExecutor
from infbench.measure.derive import cell_metrics
from infbench.plan import check_context
from infbench.store import Store, checked_metrics
from infbench.store.quality import save_quality

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store

__all__ = ["CELLS_FILE", "DB_FILE", "PROVENANCE_FILE", "QUALITY_FILE", "SPEC_FILE", "VersionSkew",
           "WorkerSpec", "ingest", "make_spec", "read_spec", "run_worker", "write_spec"]


def event_line(event: Any) -> str | None:
    """The worker's stderr line for a run event (:mod:`infbench.data.events`), or
    None for events it does not announce.

    One plain, never-wrapped line per event, parsed by a host's launcher
    (:func:`infbench.execution.executors.container.follow_worker`) to move its progress display and
    store finished results: ``infbench-worker: loading <group>``, ``infbench-worker: cell
    <spec_hash> <cell JSON>``, ``infbench-worker: timed <spec_hash>`` (warm-up done),
    ``infbench-worker: done <spec_hash> <cell_id> ok|failed
    [error]``, ``infbench-worker: flagged <spec_hash> <cell_id> <flag>`` (a stored cell flagged by
    its group's sentinel: its line in ``cells.jsonl`` again, same ``started_at``),
    ``infbench-worker: score <quality key> <label>`` and ``infbench-worker:
    scored <quality key> ok|failed [error]``.
    """
    if isinstance(event, GroupLoading):
        line = f"loading {event.group.label()}"
    elif isinstance(event, CellStarted):
        line = f"cell {event.cell.spec_hash()} {event.cell.model_dump_json()}"
    elif isinstance(event, CellTimed):
        line = f"timed {event.cell.spec_hash()}"
    elif isinstance(event, CellFinished):
        r = event.result
        line = f"done {r.spec_hash} {r.cell_id} {r.status}" + (f" {' '.join(str(r.error).split())}" if r.error else "")
    elif isinstance(event, CellFlagged):
        line = f"flagged {event.result.spec_hash} {event.result.cell_id} {event.flag}"
    elif isinstance(event, ScoreStarted):
        line = f"score {event.key} {event.label}"
    elif isinstance(event, ScoreFinished):
        q = event.result
        line = f"scored {q.key()} {q.status}" + (f" {' '.join(str(q.error).split())}" if q.error else "")
    else:
        return None
    return f"infbench-worker: {redact(line)}"


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


def run_worker(spec_path: Path, out_dir: Path, observer: Any = None) -> dict[str, Any]:
    """Run a spec's scenario here with the in-process executor and write the results to
    ``out_dir`` (see the module doc); ``observer`` receives the run's events.

    Returns:
        The final ``provenance.json`` content (``status``: completed,
        completed_with_failures, failed; ``scenario``: what the scenario concluded).

    Raises:
        VersionSkew, ConfigError: bad spec, or no detected device matches the spec's.
        OutputRefused: ``out_dir`` exists, is not empty and was not made by infbench
            (:func:`~infbench.data.outputs.check_own_folder`); nothing in it is touched.
    """
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
    for g in groups.values():  # the plan's bounds, checked again where the spec runs (not only where it was written)
        check_context(g)
    plan = Plan(device=device, groups=list(groups.values()), scenario=spec.scenario)
    check_own_folder(out_dir, "--out", "a worker's results")  # never a folder infbench did not make
    mark_folder(out_dir, "infbench worker")
    cells_path, quality_path = out_dir / CELLS_FILE, out_dir / QUALITY_FILE
    cells_path.write_text("")
    quality_path.write_text("")
    prov: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "infbench_version": __version__,
                            "spec_hash": spec.spec_hash(),
            "started_at": time.time(), "finished_at": None, "status": "running",
            "provenance": {**provenance(det, pm), "worker": True}}
    _write_json(out_dir / PROVENANCE_FILE, prov)
    opts = RunOptions.of(spec.config, force=True)  # the host's knobs, made the host's way
    store = Store(out_dir / DB_FILE)

    def append(path: Path, line: str) -> None:
        with path.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def event(ev: Any) -> None:
        if isinstance(ev, (CellFinished, CellFlagged)):  # a flagged attempt: its line again, same started_at
            append(cells_path, ev.result.model_dump_json())
        elif isinstance(ev, ScoreFinished):
            append(quality_path, ev.result.model_dump_json())
        if observer is not None:
            observer(ev)

    status = "failed"
    summary = None
    take = None
    if getattr(spec.scenario, "handoff", None):  # the host may hand cells to another worker
        def take(cell: Any) -> bool:
            try:
                return take_marker(out_dir, cell.spec_hash())
            except OSError:  # an unwritable folder: the host cannot hand cells off there either
                return True
    try:
        summary = InProcessExecutor(pm, prov["provenance"], take=take).run(plan, store, opts, event)
        status = summary.status
    finally:
        store.close()
        prov.update(finished_at=time.time(), status=status)
        if summary is not None and summary.scenario:
            prov["scenario"] = summary.scenario
        _write_json(out_dir / PROVENANCE_FILE, prov)
    return prov


#: Run statuses a worker's ``provenance.json`` may report.
WORKER_STATUSES = ("running", "completed", "completed_with_failures", "failed", "interrupted")
#: Most problems listed in one ingest error.
MAX_PROBLEMS = 5
#: Largest ``provenance.json`` and ``cells.jsonl`` read back from a worker.
MAX_PROVENANCE_BYTES = 64 << 20
MAX_CELLS_BYTES = 8 << 30


def _close(a: Any, b: Any) -> bool:
    """Whether a stored metric equals its re-derivation (floats to 1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def check_cell(r: CellResult) -> list[str]:
    """What is wrong with one worker cell (empty when it is sound): its ``spec_hash`` and
    ``cell_id`` recomputed from its spec and device, its raw records (token times after
    the send, in order; counts not negative), an ok cell having completed requests, and
    every metric :func:`~infbench.measure.derive.cell_metrics` derives re-derived from
    the raw records and compared with the stored value."""
    problems = []
    if r.spec_hash != r.cell.spec_hash():
        problems.append(f"spec_hash {r.spec_hash[:20]!r} is not the hash of its spec ({r.cell.spec_hash()})")
    if r.cell_id != r.cell.cell_id(r.device):
        problems.append(f"cell_id {r.cell_id[:20]!r} does not match its spec and device ({r.cell.cell_id(r.device)})")
    for i, q in enumerate(r.records):
        t = q.t_tokens_ns
        if q.n_in < 0 or q.n_out < 0:
            problems.append(f"request {i}: negative token count (n_in {q.n_in}, n_out {q.n_out})")
        elif t and (t[0] < q.t_send_ns or any(b < a for a, b in zip(t, t[1:]))):
            problems.append(f"request {i}: token times before the send or out of order")
    if problems:
        return problems
    done = [q for q in r.records if q.error is None and q.t_tokens_ns]
    if r.status == "ok" and not done:
        return [f"status ok with {'no request records' if not r.records else 'no completed request'}"]
    m = r.metrics
    bad = checked_metrics(m).get("invalid")
    if bad:
        return [f"metrics {', '.join(bad)} are not numbers"]
    if r.records:
        energy = M.ENERGY.value(m) if isinstance(M.ENERGY.value(m), (int, float)) else None
        slo = M.field(m, "slo") if isinstance(M.field(m, "slo"), dict) else None
        used = M.DEVICES_USED.value(m)
        devices = used if isinstance(used, int) else r.cell.tensor_parallel_size
        derived = cell_metrics(r.records, devices_used=devices, energy_j=energy, slo=slo)
        wrong = [k for k, v in derived.items() if k in m and not _close(m[k], v)]
        if wrong:
            k = wrong[0]
            problems.append(f"metrics {', '.join(wrong[:4])} do not match its raw records (e.g. {k}: stored "
                            f"{json.dumps(m[k])[:80]}, derived {json.dumps(derived[k])[:80]})")
    elif any(isinstance(v, dict) and v.get("count") for v in m.values()):
        problems.append("metrics summarise requests but the cell has no request records")
    return problems


def read_worker_output(out_dir: Path) -> tuple[dict[str, Any], list[CellResult], int]:
    """Read and check a worker's output folder without storing anything.

    Returns:
        ``(provenance.json content, cells, skipped)``: ``skipped`` counts a last line
        cut short (a worker killed while writing it), which is left out.

    Raises:
        VersionSkew: another store schema.
        ConfigError: a missing or malformed ``provenance.json`` (not an object, an
            unknown status, a provenance that is not an object), a ``cells.jsonl`` that
            is missing, not a file or not UTF-8, or any cell failing :func:`check_cell`;
            the message names the file, line and problem (up to :data:`MAX_PROBLEMS`).
    """
    out_dir = Path(out_dir)
    pfile = out_dir / PROVENANCE_FILE
    try:
        prov = strict_json(read_text(pfile, PROVENANCE_FILE, MAX_PROVENANCE_BYTES), str(pfile))
    except ConfigError as exc:
        raise ConfigError(f"no worker output in {out_dir} ({PROVENANCE_FILE} missing or unreadable: "
                          f"{exc.message[:300]})", hint="did the worker start? see its log") from None
    if not isinstance(prov, dict):
        raise ConfigError(f"{pfile} must hold a JSON object, got {type(prov).__name__}",
                          hint="is this a worker's --out folder? nothing was stored")
    if prov.get("schema_version") != SCHEMA_VERSION:
        raise skew(f"worker output {out_dir}", prov.get("schema_version"), prov.get("infbench_version", "?"))
    problems = []
    if prov.get("status") is not None and prov.get("status") not in WORKER_STATUSES:
        problems.append(f"{PROVENANCE_FILE}: status {json.dumps(prov.get('status'))[:60]} is not one of "
                        f"{', '.join(WORKER_STATUSES)}")
    if prov.get("provenance") is not None and not isinstance(prov.get("provenance"), dict):
        problems.append(f"{PROVENANCE_FILE}: 'provenance' must be an object, got "
                        f"{type(prov.get('provenance')).__name__}")
    if prov.get("spec_hash") is not None and not isinstance(prov.get("spec_hash"), str):
        problems.append(f"{PROVENANCE_FILE}: 'spec_hash' must be a string")
    path = out_dir / CELLS_FILE
    if not path.exists():
        problems.append(f"{CELLS_FILE} is missing")
        data = b""
    elif not path.is_file():
        problems.append(f"{CELLS_FILE} is not a file")
        data = b""
    else:
        data = read_bytes(path, CELLS_FILE, MAX_CELLS_BYTES)
    lines = data.split(b"\n")
    cut = lines.pop()  # the part after the last newline: empty, or a line cut short
    cells: list[CellResult] = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{CELLS_FILE} line {n}"
        try:
            if b"NaN" in raw or b"Infinity" in raw:  # Python's and pydantic's JSON take them; JSON has none
                strict_json(raw.decode("utf-8"), where)
            r = CellResult.model_validate_json(raw.decode("utf-8"))
        except ConfigError as exc:
            problems.append(exc.message[:200])
            continue
        except UnicodeDecodeError as exc:
            problems.append(f"{where}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
            continue
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(x) for x in e["loc"])[:60] or "line"
            problems.append(f"{where}: {loc}: {e['msg'][:120]}")
            continue
        problems += [f"{where} ({r.cell.label()[:60]}): {p}" for p in check_cell(r)]
        cells.append(r)
    skipped = 0
    if cut.strip():
        try:
            cells.append(CellResult.model_validate_json(cut.decode("utf-8")))
            problems += [f"{CELLS_FILE} last line: {p}" for p in check_cell(cells[-1])]
        except (UnicodeDecodeError, ValidationError):
            skipped = 1
    if problems:
        more = f" (and {len(problems) - MAX_PROBLEMS} more)" if len(problems) > MAX_PROBLEMS else ""
        raise ConfigError(f"worker output {out_dir} is not valid: " + "; ".join(problems[:MAX_PROBLEMS]) + more,
                          hint="nothing was stored; ingest takes a worker's --out folder as the worker wrote it")
    return prov, cells, skipped


def read_quality_output(out_dir: Path) -> list[PerplexityResult]:
    """The perplexity results of a worker's output folder (``quality.jsonl``; none when the
    file is absent), checked; a last line cut short (a worker killed while writing it) is
    left out.

    Raises:
        ConfigError: a line that is not UTF-8 or not a valid result (file and line named).
    """
    path = Path(out_dir) / QUALITY_FILE
    try:
        data = read_no_follow(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line cut short
    out = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            out.append(PerplexityResult.model_validate_json(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValidationError) as exc:
            raise ConfigError(f"{QUALITY_FILE} line {n} is not a perplexity result: {str(exc)[:200]}",
                              hint="nothing was stored; ingest takes a worker's --out folder as the worker "
                                   "wrote it") from None
    return out


def recheck_cells(cells: list[CellResult]) -> int:
    """Check each ok cell against physics as ``run`` checks its own
    (:func:`infbench.analysis.floor.recheck`: floors from this host's description of the
    device, utilisation <= 1, token counts, the device-free floors) and mark the ones that
    fail ``suspect`` (issue 41: a forged cell with 8 tokens within 8 ns was stored ok).

    Returns:
        How many cells were marked.
    """
    pm = get_plugin_manager()
    n = 0
    for c in cells:
        reasons = recheck(c, pm)
        if reasons:
            mark_rechecked(c, reasons)
            n += 1
    return n


def ingest(out_dir: Path, store: Store, command: str = "", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read a worker's ``out_dir`` into ``store`` as one run, in one transaction.

    Everything is checked first (:func:`read_worker_output`: provenance, every cell's
    hashes and raw records, metrics re-derived from the records); one bad cell refuses
    the whole folder and nothing is stored. Each ok cell is then checked against physics
    (:func:`recheck_cells`); one that fails is stored ``suspect`` with the reasons. A
    truncated last line of ``cells.jsonl`` (a worker killed while writing) is skipped and
    counted; everything complete is stored.

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
        ConfigError: see :func:`read_worker_output`.
    """
    prov, cells, skipped = read_worker_output(Path(out_dir))
    quality = read_quality_output(Path(out_dir))
    recheck_cells(cells)
    worker_prov = {**(prov.get("provenance") or {}), "spec_hash": prov.get("spec_hash"),
                   "worker_status": prov.get("status"), **(extra or {})}
    if isinstance(prov.get("scenario"), dict):
        worker_prov["scenario"] = prov["scenario"]
    status = prov.get("status") if prov.get("status") not in (None, "running") else "interrupted"
    with store.transaction():
        run_id = store.begin_run(worker_prov, command=command)
        for c in cells:
            store.save_cell(run_id, c)
        for q in quality:
            save_quality(store, q)
        store.finish_run(run_id, str(status))
    return {"run_id": run_id, "ok": sum(c.status == "ok" for c in cells), "quality": len(quality),
            "failed": sum(c.status != "ok" for c in cells), "skipped_lines": skipped, "status": status,
            "spec_hash": prov.get("spec_hash"), "cells": cells}
