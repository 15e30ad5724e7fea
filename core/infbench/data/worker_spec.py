"""The worker contract's spec (:class:`WorkerSpec`): what a worker runs (cells, device, the
run's configuration, scenario), written by the host and read by ``infbench worker`` where it
runs (:mod:`infbench.execution.worker`). The configuration is the run's own
:class:`~infbench.data.run_config.RunConfig`, the model of the command line and the sweep
file: one schema. Both ends check the store schema version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from infbench.data.errors import ConfigError, VersionSkew
from infbench.data.inputs import read_text, strict_json
from infbench.data.run_config import RunConfig
from infbench.data.scenarios import ScenarioSpec, SweepScenario
from infbench.data.schema import SWEEP_LIMITS, Cell, DeviceInfo, short_hash
from infbench.data.secrets import URL_ENGINE_OPTIONS, redact_tree, redact_url
from infbench.data.version import SCHEMA_VERSION, __version__

SPEC_FILE, PROVENANCE_FILE, CELLS_FILE, DB_FILE = "spec.json", "provenance.json", "cells.jsonl", "worker.db"
QUALITY_FILE = "quality.jsonl"


class WorkerSpec(BaseModel):
    """What a worker runs: the cells, the device group they were planned for, options.

    Attributes:
        schema_version: the host's store schema; the worker refuses another one.
        infbench_version: the host's infbench version (for messages).
        device: the device group the host planned for; the worker runs on the detected
            device of the same vendor and model.
        cells: the cells, in run order (a search's template cell, a perplexity item's
            placeholder cell: the scenario decides what is measured of them).
        config: the run's configuration as planned (its measuring knobs:
            :meth:`infbench.data.run.RunOptions.of`), URL credentials redacted.
        scenario: what to measure (default: every cell, a sweep).
        workload_hash: :meth:`spec_hash` as the host wrote it; :func:`read_spec` refuses a
            spec whose cells no longer hash to it (edited after it was written).
    """

    schema_version: int
    infbench_version: str
    device: DeviceInfo
    cells: list[Cell] = Field(min_length=1)
    config: RunConfig = Field(default_factory=RunConfig)
    scenario: ScenarioSpec = Field(default_factory=SweepScenario)
    workload_hash: str | None = None

    def spec_hash(self) -> str:
        """Hash of the workload: the cells' spec hashes in order (device and options excluded)."""
        return short_hash([c.spec_hash() for c in self.cells])


def skew(what: str, their_schema: Any, their_version: Any) -> VersionSkew:
    return VersionSkew(
        f"{what} was written by infbench {their_version} (store schema {their_schema}); this is infbench "
        f"{__version__} (store schema {SCHEMA_VERSION})",
        hint="use the same infbench on host and worker: rebuild the worker image from this checkout "
             "(`infbench containers build`) or install the matching infbench version on the host")


def make_spec(plan: Any, opts: Any = None) -> WorkerSpec:
    """The worker spec of ``plan`` (a :class:`~infbench.plan.Plan`): its device, cells and
    scenario, and the run's configuration (``opts``: :class:`infbench.data.run.RunOptions`, whose
    :meth:`~infbench.data.run.RunOptions.as_config` it is; None: the defaults) with URL
    credentials redacted (:func:`infbench.data.secrets.redact_url`: a worker authenticates with
    ``api_key_env`` only), stamped with this infbench's store schema."""
    config = opts.as_config() if opts is not None else RunConfig()
    eng = config.engine
    urls = {k: redact_url(v) for k in ("base_url",) if isinstance(v := getattr(eng, k), str)}
    args = {k: redact_url(v) if k in URL_ENGINE_OPTIONS and isinstance(v, str) else v
            for k, v in (eng.args or {}).items()}
    config = config.model_copy(update={"engine": eng.model_copy(update={**urls, "args": args or None})})
    spec = WorkerSpec(schema_version=SCHEMA_VERSION, infbench_version=__version__, device=plan.device,
                      cells=plan.cells, config=config, scenario=plan.scenario)
    return spec.model_copy(update={"workload_hash": spec.spec_hash()})


def redacted_doc(spec: WorkerSpec) -> dict[str, Any]:
    """``spec`` as the JSON document ``--write-spec`` writes: the device and the configuration
    through :func:`infbench.data.secrets.redact_tree` (the cells untouched: their ids)."""
    doc = spec.model_dump(mode="json")
    doc.update(device=redact_tree(doc["device"]), config=redact_tree(doc["config"]))
    return doc


#: Fields of a cell and of its load held to the sweep's bounds (:data:`~infbench.data.schema.SWEEP_LIMITS`).
_CELL_BOUNDS = {"batch": "batch", "input_len": "input_len", "output_len": "output_len",
                "tensor_parallel_size": "tensor_parallel_size", "warmup": "warmup"}
_LOAD_BOUNDS = {"concurrency": "concurrency", "request_rate": "request_rate", "num_requests": "num_requests",
                "duration_s": "duration_s", "warmup_requests": "warmup_requests", "timeout_s": "request_timeout_s"}


def spec_problems(spec: WorkerSpec) -> list[str]:
    """What keeps a worker spec from running as planned (issue 41: a spec edited to
    ``output_len 10000000`` ran until killed): its cells do not hash to its
    ``workload_hash`` (or it has none), or a cell's size is beyond the bounds planning
    applies (:data:`~infbench.data.schema.SWEEP_LIMITS`). The model's context is checked
    where the model is resolved (:func:`infbench.plan.check_context`, by the worker)."""
    out = []
    if spec.workload_hash is None:
        out.append("it carries no workload_hash (written by hand, or by an older infbench)")
    elif spec.workload_hash != spec.spec_hash():
        out.append(f"its cells hash to {spec.spec_hash()}, not to the workload_hash {spec.workload_hash[:40]!r} it "
                   "was written with: it was edited after it was written")
    for i, c in enumerate(spec.cells, 1):
        checks = [(f, getattr(c, f), SWEEP_LIMITS[k]) for f, k in _CELL_BOUNDS.items()]
        if c.load is not None:
            checks += [(f"load.{f}", getattr(c.load, f), SWEEP_LIMITS[k]) for f, k in _LOAD_BOUNDS.items()]
        for name, v, limit in checks:
            if v is not None and v > limit:
                out.append(f"cell {i} ({c.label()[:60]}): {name} {v:,} is above the bound of {limit:,}")
    return out


def write_spec(plan: Any, path: Path, opts: Any = None) -> WorkerSpec:
    """Write the worker spec of ``plan`` (a :class:`~infbench.plan.Plan`) to ``path``.

    Args:
        plan: the planned cells and their device.
        path: the ``spec.json`` to write (folders created).
        opts: optional :class:`infbench.data.run.RunOptions` (its configuration goes into the spec).
    """
    spec = make_spec(plan, opts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spec.model_dump_json(indent=2))
    return spec


def read_spec(path: Path) -> WorkerSpec:
    """Read and check a worker spec.

    Raises:
        VersionSkew: the spec's schema version is not this infbench's.
        ConfigError: unreadable or invalid file, or a spec its cells no longer match or
            beyond the plan's bounds (:func:`spec_problems`).
    """
    try:  # a regular file of bounded size (a FIFO would wait forever), strict JSON
        raw = strict_json(read_text(path, "worker spec", 256 << 20), str(path))
    except ConfigError as exc:
        raise ConfigError(f"cannot read worker spec {path}: {exc.message[:300]}",
                          hint="write one with `infbench run --write-spec FILE`") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"worker spec {path} must hold a JSON object, got {type(raw).__name__}",
                          hint="write one with `infbench run --write-spec FILE`")
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise skew(f"worker spec {path}", raw.get("schema_version"), raw.get("infbench_version", "?"))
    try:
        spec = WorkerSpec(**raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid worker spec {path}: {str(exc)[:600]}") from None
    problems = spec_problems(spec)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ConfigError(f"worker spec {path} is refused before anything runs: {'; '.join(problems[:3])}{more}",
                          hint="write the spec again with `infbench run ... --write-spec FILE` (change the sweep, "
                               "not the spec)")
    return spec
