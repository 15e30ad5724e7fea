"""What every importer of another tool's results shares (issue 42): the row every format is
read into (:class:`ImportedRow`), the physical checks a row must pass before anything is
stored (:func:`check_row`), and the stored cells made from rows (:func:`imported_cells`).

A row holds figures in infbench's definitions (docs/metrics.md, "Importing other tools'
results"), each converted by its format's reader, and, apart, the figures infbench does not
define (:attr:`ImportedRow.unmapped`), under the tool's own names and units as they came.
A stored cell keeps both: the mapped figures under infbench's keys, the others under
``metrics.unmapped``; its engine description says which tool, version, file and row it came
from and which definitions were converted (``engine.definitions``).

Physics (:func:`check_row`): a file is refused, with the row and the reason, when a figure
is not finite, a time or count is negative, a percentile exceeds a higher one, TTFT exceeds
E2E, a per-token time is below :data:`MIN_TPOT_S`, the throughput exceeds what the
concurrency and latency allow (Little's law: at most ``concurrency`` requests in flight, each
taking the mean E2E), or the stated throughputs, counts and durations disagree. Nothing of
such a file is stored.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from infbench.data import metrics as M
from infbench.data.errors import ConfigError
from infbench.data.models import resolve
from infbench.data.schema import Cell, CellResult, DeviceInfo, Load, short_hash
from infbench.report.lib_import import published_device

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager
    from infbench.data.stored import StoredCell

#: Fastest decode a row may claim for one sequence: 10 µs per token (100,000 tokens/s for
#: one user; the fastest published single-user decode is a few thousand tokens/s). A TPOT or
#: an E2E per output token below it is no measurement (issue 41: a LIB row with TPOT 7.9 ns).
MIN_TPOT_S = 1e-5
#: Relative slack of the consistency checks (rounding in the published figures).
SLACK = 0.02
#: Slack of the Little's-law bound (a run's ramp-up and tail make the measured rate lower,
#: never higher; the slack covers a rate and a mean E2E taken over slightly different spans).
LITTLE_SLACK = 0.10
#: Per-request statistics as infbench names them, in increasing order (a percentile may not
#: exceed the next one).
ORDERED_STATS = ("p50", "p90", "p99", "max")
#: The per-request metrics a row may carry (s), infbench's keys.
SUMMARIES = (M.TTFT.key, M.TPOT.key, M.ITL.key, M.E2E.key)


@dataclass
class ImportedRow:
    """One result row of another tool, in infbench's definitions.

    Attributes:
        where: ``FILE, row N`` (or ``line N``) for messages.
        model: the model as published (a HF id, the tool's served name, InferenceX's key).
        device: the hardware as published (``h100``, ``NVIDIA B200-SXM-180GB``; ``""``: not
            in the file, the importer's ``--device``).
        devices: how many devices the figures are spread over (the denominator of the
            per-device figures); None: not known.
        engine: infbench's engine name where the framework maps to one, else the
            framework as published (lower case).
        dtype: the precision as published (``fp8``, ``fp4``); ``auto`` when not given.
        input_len, output_len: tokens per request (the configured or mean lengths; see
            :attr:`lengths`).
        load: :class:`infbench.data.schema.Load` fields (``mode``, ``concurrency``,
            ``request_rate``, ``num_requests``).
        summaries: per-request metrics in s by infbench key (``ttft_s``...): ``{mean, p50, p90,
            p99, max, count}``, whichever the tool gives.
        scalars: per-cell metrics by infbench key (``duration_s``, ``output_tok_s``,
            ``total_tok_s``, ``request_s``, ``avg_power_w``, ``j_per_token``...).
        unmapped: figures infbench does not define, under the tool's own names and units.
        definitions: how the tool's definitions were converted (one sentence each).
        extra: the row's identity beyond the cell (parallelism, scenario, image, date).
        lengths: ``fixed`` (every request these lengths), ``mean`` (means of varying
            lengths) or ``unpublished`` (the file gives none: MLPerf).
        n_in_total, n_out_total: total tokens over the row's requests, where given.
        completed, failed: request counts, where given.
        device_props: extra :class:`DeviceInfo` properties (``mixed``: a system of unlike devices).
        printed: the absolute rounding of the printed figures (AIPerf's CSV: 0.005 for two
            decimals), allowed beyond :data:`SLACK` in the consistency checks.
        len_range: each request's lengths drawn in ``[floor(R L), L]`` (InferenceX's
            ``--random-range-ratio``; :attr:`infbench.data.schema.Cell.len_range`), or None.
    """

    where: str
    model: str
    device: str
    devices: int | None
    engine: str
    dtype: str
    input_len: int
    output_len: int
    load: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, dict[str, float]] = field(default_factory=dict)
    scalars: dict[str, float] = field(default_factory=dict)
    unmapped: dict[str, Any] = field(default_factory=dict)
    definitions: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    lengths: str = "fixed"
    n_in_total: float | None = None
    n_out_total: float | None = None
    completed: int | None = None
    failed: int | None = None
    device_props: dict[str, Any] = field(default_factory=dict)
    len_range: float | None = None
    printed: float = 0.0


def refuse(where: str, reason: str) -> ConfigError:
    """The error of a row that contradicts itself or physics: ``where: reason``, nothing stored."""
    return ConfigError(f"{where}: {reason}", hint="the file contradicts itself or physics; nothing was imported. "
                                                  "Fix or delete that row")


def number(v: Any, name: str, where: str, *, required: bool = False, lo: float | None = 0.0) -> float | None:
    """A numeric field of a parsed file: finite, at least ``lo`` (None: no bound).

    Args:
        v: the value (None or missing: not given).
        name: the field's name in the file, for messages.
        where: the row, for messages.
        required: raise when it is missing.
        lo: the smallest value allowed (0: times, counts, throughputs).

    Raises:
        ConfigError: missing when required, not a number (``true``, a string), NaN or
            infinite, or below ``lo``.
    """
    if v is None:
        if required:
            raise refuse(where, f"{name!r} is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if isinstance(v, str):
            try:
                x = float(v)
            except ValueError:
                raise refuse(where, f"{name!r} is {v!r}, not a number") from None
        else:
            raise refuse(where, f"{name!r} is {v!r}, not a number")
    else:
        x = float(v)
    if not math.isfinite(x):
        raise refuse(where, f"{name!r} is {v!r}; a measurement is a finite number")
    if lo is not None and x < lo:
        raise refuse(where, f"{name!r} is {x:g}; it cannot be below {lo:g}")
    return x


def whole(v: Any, name: str, where: str, *, required: bool = False, lo: int = 0) -> int | None:
    """A count field: a whole number at least ``lo``.

    Raises:
        ConfigError: as :func:`number`, or a fraction.
    """
    x = number(v, name, where, required=required, lo=lo)
    if x is None:
        return None
    if x != int(x):
        raise refuse(where, f"{name!r} is {x:g}, not a whole number")
    return int(x)


def _close(a: float, b: float, tol: float = SLACK, printed: float = 0.0) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12) + printed


def check_row(r: ImportedRow) -> None:
    """Refuse a row that contradicts itself or physics (see the module doc).

    Checks, each naming the figures involved:

    * every figure finite and not negative (the readers check each as they read it; here
      again for what they derived);
    * per metric: ``p50 <= p90 <= p99 <= max`` and ``mean <= max``;
    * TTFT <= E2E (mean and p50);
    * TPOT and E2E per output token at least :data:`MIN_TPOT_S`;
    * ``output_tok_s`` = output tokens / duration, ``request_s`` = completed / duration,
      ``total_tok_s`` >= ``output_tok_s`` (within :data:`SLACK`) where the row gives them;
    * Little's law: ``request_s <= concurrency / mean E2E`` and ``output_tok_s <=
      concurrency x output_len / mean E2E`` (within :data:`LITTLE_SLACK`), with a
      concurrency and a mean E2E;
    * the mean E2E within a factor 2 of ``mean TTFT + mean TPOT x (output_len - 1)`` for
      fixed lengths (the definition of TPOT);
    * a device count of at least 1 where one is given.

    Raises:
        ConfigError: ``FILE, row N: reason``.
    """
    w = r.where
    for k, s in r.summaries.items():
        for stat, v in s.items():
            number(v, f"{k} {stat}", w)
        vals = [(st, s[st]) for st in ORDERED_STATS if s.get(st) is not None]
        for (sa, a), (sb, b) in zip(vals, vals[1:]):
            if a > b * (1 + 1e-9) + 1e-12:
                raise refuse(w, f"{k} {sa} {a:g} s exceeds its {sb} {b:g} s (a lower percentile cannot exceed a "
                                "higher one)")
        if s.get("mean") is not None and s.get("max") is not None and s["mean"] > s["max"] * (1 + 1e-9) + 1e-12:
            raise refuse(w, f"{k} mean {s['mean']:g} s exceeds its max {s['max']:g} s")
    for k, v in r.scalars.items():
        number(v, k, w)
    ttft, e2e, tpot = (r.summaries.get(k, {}) for k in (M.TTFT.key, M.E2E.key, M.TPOT.key))
    for stat in ("mean", "p50"):
        if ttft.get(stat) is not None and e2e.get(stat) is not None and ttft[stat] > e2e[stat] * (1 + SLACK) + 1e-9:
            raise refuse(w, f"TTFT {stat} {ttft[stat]:g} s exceeds E2E {stat} {e2e[stat]:g} s: the first token "
                            "cannot come after the last")
    for stat in ("mean", "p50"):
        t = tpot.get(stat)
        if t is not None and 0 < t < MIN_TPOT_S:
            raise refuse(w, f"TPOT {stat} {t * 1e9:.3g} ns is below {MIN_TPOT_S * 1e6:g} µs per token: no device "
                            "decodes one sequence that fast")
    if e2e.get("mean") and r.output_len > 1 and e2e["mean"] / r.output_len < MIN_TPOT_S and r.lengths != "unpublished":
        raise refuse(w, f"E2E mean {e2e['mean']:g} s for {r.output_len} output tokens is under "
                        f"{MIN_TPOT_S * 1e6:g} µs per token")
    dur = r.scalars.get(M.DURATION.key)
    out = r.scalars.get(M.OUTPUT_TOK_S.key)
    tot = r.scalars.get(M.TOTAL_TOK_S.key)
    req = r.scalars.get(M.REQUEST_S.key)
    if dur is not None and dur <= 0:
        raise refuse(w, f"duration {dur:g} s; a run takes time")
    if dur and out is not None and r.n_out_total is not None and not _close(out, r.n_out_total / dur,
                                                                           printed=r.printed):
        raise refuse(w, f"output throughput {out:g} tok/s, but {r.n_out_total:g} output tokens over {dur:g} s is "
                        f"{r.n_out_total / dur:g} tok/s")
    if dur and req is not None and r.completed is not None and not _close(req, r.completed / dur, printed=r.printed):
        raise refuse(w, f"request throughput {req:g} req/s, but {r.completed} completed over {dur:g} s is "
                        f"{r.completed / dur:g} req/s")
    if out is not None and tot is not None and tot < out * (1 - SLACK):
        raise refuse(w, f"total throughput {tot:g} tok/s is below the output throughput {out:g} tok/s (total counts "
                        "input and output tokens)")
    conc = r.load.get("concurrency")
    if conc and e2e.get("mean"):
        cap_req = conc / e2e["mean"]
        if req is not None and req > cap_req * (1 + LITTLE_SLACK) + r.printed:
            raise refuse(w, f"request throughput {req:g} req/s exceeds concurrency {conc} / mean E2E "
                            f"{e2e['mean']:g} s = {cap_req:g} req/s (Little's law: at most {conc} requests in flight)")
        if out is not None and r.lengths != "unpublished":
            cap_out = cap_req * r.output_len
            if out > cap_out * (1 + LITTLE_SLACK) + r.printed:
                raise refuse(w, f"output throughput {out:g} tok/s exceeds concurrency {conc} x {r.output_len} tokens / "
                                f"mean E2E {e2e['mean']:g} s = {cap_out:g} tok/s (Little's law)")
    if r.lengths == "fixed" and r.output_len > 1 and all(x.get("mean") for x in (ttft, e2e, tpot)):
        model = ttft["mean"] + tpot["mean"] * (r.output_len - 1)
        if not 0.5 <= model / e2e["mean"] <= 2.0:
            raise refuse(w, f"mean TTFT {ttft['mean']:g} s + mean TPOT {tpot['mean']:g} s x {r.output_len - 1} = "
                            f"{model:g} s, but the mean E2E is {e2e['mean']:g} s (TPOT is (E2E - TTFT) / (output - 1))")
    if r.devices is not None and r.devices < 1:
        raise refuse(w, f"{r.devices} devices; a result runs on at least one")


# -- stored cells ------------------------------------------------------------------------------
#: Hardware keys of published sources -> (catalog id, vendor, kind, the driver's model name).
HARDWARE: dict[str, tuple[str | None, str, Literal["gpu", "accelerator"], str]] = {
    "h100": ("h100-sxm", "nvidia", "gpu", "NVIDIA H100 80GB HBM3"),
    "h200": ("h200", "nvidia", "gpu", "NVIDIA H200"),
    "gh200": ("gh200", "nvidia", "gpu", "NVIDIA GH200 480GB"),
    "a100": ("a100-80gb", "nvidia", "gpu", "NVIDIA A100-SXM4-80GB"),
    "b200": (None, "nvidia", "gpu", "NVIDIA B200"),
    "b300": (None, "nvidia", "gpu", "NVIDIA B300"),
    "gb200": (None, "nvidia", "gpu", "NVIDIA GB200"),
    "gb300": (None, "nvidia", "gpu", "NVIDIA GB300"),
    "mi300x": ("mi300x", "amd", "gpu", "AMD Instinct MI300X"),
    "mi325x": (None, "amd", "gpu", "AMD Instinct MI325X"),
    "mi355x": (None, "amd", "gpu", "AMD Instinct MI355X"),
    "gaudi3": (None, "habana", "accelerator", "Intel Gaudi 3"),
}


def device_for(name: str, count: int, pm: PluginManager | None = None,
               props: dict[str, Any] | None = None) -> DeviceInfo:
    """The :class:`DeviceInfo` of a published hardware name for ``count`` devices.

    ``name`` is looked up in :data:`HARDWARE` (InferenceX's keys), else matched against the
    device catalog like LLM-Inference-Bench's names
    (:func:`infbench.report.lib_import.published_device`); a ``cpu``/``CPU: ...`` name is
    the CPU. ``properties`` hold ``catalog_id`` (None when the catalog has no such device)
    and ``published_name``.
    """
    extra = dict(props or {})
    key = name.strip().lower()
    if key in HARDWARE:
        cid, vendor, kind, model = HARDWARE[key]
        return DeviceInfo(vendor=vendor, kind=kind, model=model, count=count,
                          properties={"catalog_id": cid, "published_name": name, **extra})
    if key in ("cpu", "this cpu") or key.startswith("cpu:"):
        model = name.split(":", 1)[1].strip() if ":" in name else "CPU"
        return DeviceInfo(vendor="cpu", kind="cpu", model=model or "CPU", count=count,
                          properties={"catalog_id": None, "published_name": name, **extra})
    if extra.get("mixed"):
        vendor = (name.split()[0] if name.split() else "unknown").lower()
        return DeviceInfo(vendor=vendor, kind="gpu", model=name, count=count,
                          properties={"catalog_id": None, "published_name": name, **extra})
    dev, per_unit = published_device(name, count, pm)
    props2 = {**dev.properties, **extra}
    props2.setdefault("catalog_id", None)
    return dev.model_copy(update={"count": count, "properties": props2})


def _model_key(name: str) -> tuple[str, bool]:
    try:
        return resolve(name).name, True
    except ConfigError:
        return name, False


def imported_cells(rows: list[ImportedRow], source: dict[str, Any], pm: PluginManager | None = None,
                   device: str | None = None, devices: int | None = None,
                   engine: str | None = None, model: str | None = None) -> tuple[list[CellResult], dict[str, Any]]:
    """Stored-cell results for checked rows, marked published and imported.

    Args:
        rows: a reader's rows (each passed :func:`check_row`).
        source: the run's provenance ``source`` (``name`` = the tool, ``tool_version``,
            ``file``, ``sha256``, ``format``, ``url``, ``commit``).
        pm: the plugin manager, to match hardware names to the catalog.
        device, devices, engine, model: the importer's ``--device``, ``--devices``,
            ``--engine``, ``--model``: they fill what a file does not say (a client tool's
            file names no hardware) and replace the file's model name (a served name such as
            ``smollm2`` for the zoo's ``smollm2-135m``).

    Returns:
        ``(results, summary)``: one ok :class:`CellResult` per row, and ``{"rows",
        "devices": {catalog id or name: rows}, "unmapped_devices", "unknown_models",
        "unmapped_figures": [names]}``.
    """
    now = time.time()
    out: list[CellResult] = []
    summary: dict[str, Any] = {"rows": len(rows), "devices": {}, "unmapped_devices": [], "unknown_models": [],
                               "unmapped_figures": []}
    for r in rows:
        hw = r.device or device or "unknown"
        n_dev = r.devices or devices or 1
        dev = device_for(hw, n_dev, pm, r.device_props)
        name, known = _model_key(model or r.model)
        if not known and name not in summary["unknown_models"]:
            summary["unknown_models"].append(name)
        eng = engine or r.engine
        load = Load(**r.load) if r.load else None
        cell = Cell(model=name, engine=eng, dtype=r.dtype or "auto", batch=max(1, int(r.load.get("concurrency") or 1))
                    if r.load.get("mode") == "batch" else 1, input_len=max(1, r.input_len),
                    output_len=max(1, r.output_len), tensor_parallel_size=n_dev, warmup=0, load=load,
                    len_range=r.len_range)
        cid = dev.properties.get("catalog_id") or hw
        summary["devices"][cid] = summary["devices"].get(cid, 0) + 1
        if not dev.properties.get("catalog_id") and hw not in summary["unmapped_devices"]:
            summary["unmapped_devices"].append(hw)
        for k in r.unmapped:
            if k not in summary["unmapped_figures"]:
                summary["unmapped_figures"].append(k)
        metrics: dict[str, Any] = {k: dict(v) for k, v in r.summaries.items() if v}
        metrics.update(r.scalars)
        outp, tot = r.scalars.get(M.OUTPUT_TOK_S.key), r.scalars.get(M.TOTAL_TOK_S.key)
        if outp is not None:
            metrics.setdefault(M.OUTPUT_TOK_S_PER_DEVICE.key, outp / n_dev)
        if tot is not None:
            metrics.setdefault(M.TOK_S_PER_DEVICE.key, tot / n_dev)
        tp50 = (r.summaries.get(M.TPOT.key) or {}).get("p50")
        if tp50:
            metrics.setdefault(M.TOK_S_PER_USER.key, 1.0 / tp50)
        metrics[M.DEVICES_USED.key] = n_dev
        metrics["published"] = True
        if r.unmapped:
            metrics["unmapped"] = dict(r.unmapped)
        mark = {"source": source.get("name"), "sha256": source.get("sha256"), "where": r.where, "device": hw}
        eng_desc: dict[str, Any] = {
            "name": eng, "published": True, "imported": True, "source": source.get("name"),
            "tool_version": source.get("tool_version"), "format": source.get("format"),
            "file": source.get("file"), "row": r.where, "framework": r.engine, "published_model": r.model,
            "lengths": r.lengths, "definitions": list(r.definitions)}
        if r.extra:
            eng_desc["extra"] = r.extra
        out.append(CellResult(
            cell_id=short_hash({"spec": cell.spec(), "device": dev.signature(), "imported": mark}),
            spec_hash=cell.spec_hash(), cell=cell, device=dev, status="ok", metrics=metrics,
            power_note=None if r.scalars.get(M.AVG_POWER.key) else "imported: no power in the source",
            engine=eng_desc, wall_s=r.scalars.get(M.DURATION.key), engine_s=r.scalars.get(M.DURATION.key),
            started_at=now, finished_at=now))
    return out, summary


def is_imported(row: StoredCell) -> bool:
    """Whether a stored cell (``Store.results()`` item) came from ``infbench import`` of another
    tool's file (any format but LLM-Inference-Bench's CSV)."""
    return bool((row.engine or {}).get("imported"))
