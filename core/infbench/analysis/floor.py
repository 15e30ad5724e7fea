"""The roofline floor of a measured cell: the device's limits from its plugin or the
catalog, and MBU/MFU put into an ok cell's metrics (:mod:`infbench.analysis.roofline`),
then the cell checked against physics (:mod:`infbench.analysis.physics`)."""

from __future__ import annotations

from typing import Any

from infbench.analysis.physics import limits_from_info, mark_suspect
from infbench.analysis.roofline import RooflineError, roofline_for
from infbench.contract.manager import PluginManager
from infbench.data import metrics as M
from infbench.data.models import resolve
from infbench.data.schema import CellResult, DeviceInfo
from infbench.detect.devices import device_limits


def device_roofline_limits(pm: PluginManager, device: DeviceInfo) -> tuple[Any, str | None]:
    """The device's :class:`~infbench.analysis.roofline.Limits` for the roofline, or
    ``(None, reason)`` when it is not described (no plugin answers, no catalog match)
    or its description lacks bandwidth or peak rate."""
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
    _roofline(result, shape, limits, reason)
    mark_suspect(result, limits, shape)


def _roofline(result: CellResult, shape: Any, limits: Any, reason: str | None = None) -> None:
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
    result.metrics[M.MBU.key] = r["mbu"]
    result.metrics[M.MFU.key] = r["mfu"]


def recheck(result: CellResult, pm: PluginManager) -> list[str]:
    """The physics check of a cell that arrives measured from elsewhere (a worker's folder
    at ``ingest``, the journal), as ``run`` applies it to its own cells (issue 41): the
    roofline recomputed on a copy from this host's description of the cell's device (where
    it has one) and the model's shape (where it resolves), then every reason of
    :func:`infbench.analysis.physics.check_cell`, the device-free floors included.

    Returns:
        The reasons (empty when sound, or when the cell is not ok). The result itself is
        not changed; :func:`mark_rechecked` adds the reasons to it.
    """
    if result.status != "ok":
        return []
    probe = result.model_copy(deep=True)
    for k in ("suspect", "roofline", "roofline_note", M.MBU.key, M.MFU.key):
        probe.metrics.pop(k, None)
    limits, reason = device_roofline_limits(pm, result.device)
    try:
        shape = resolve(result.cell.model)
    except Exception:  # noqa: BLE001 - a model this host does not know: no roofline, the other checks still run
        shape, limits = None, None
    add_roofline(probe, shape, limits, reason)
    found = M.field(probe.metrics, "suspect")
    return [r for r in str(found).split("; ") if r] if found else []


def mark_rechecked(result: CellResult, reasons: list[str]) -> None:
    """Add ``reasons`` (:func:`recheck`) to an ok cell's ``metrics["suspect"]``, keeping
    those it carried."""
    if not reasons or result.status != "ok":
        return
    had = [r for r in str(M.field(result.metrics, "suspect") or "").split("; ") if r]
    result.metrics["suspect"] = "; ".join(dict.fromkeys(had + reasons))
