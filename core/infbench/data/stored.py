"""A stored cell as readers get it back: :class:`StoredCell`, typed (issue 40, item 5).

:meth:`infbench.store.Store.results` returns one per attempt it reads: the cell's result (spec,
device, status, error, metrics, engine, times), the run it belongs to and which attempt at its
cell id it is. The report, ``results``, ``compare``, the frontier, the predictor and the
exporters read its attributes, and reach a metric through the metric table
(:mod:`infbench.data.metrics`: ``TTFT.value(cell.metrics, "p50")``) or a non-metric field of the
metrics through :meth:`StoredCell.field` (checked against :data:`~infbench.data.metrics.FIELDS`),
never by a string key.

A :class:`StoredCell` is also a read-only :class:`~collections.abc.Mapping` of its attributes
(``cell["status"]``, ``dict(cell)``), so scripts and notebooks written against infbench 1.x's
``list[dict]`` keep working; the core does not use that view (``scripts/count_metric_lookups.py``
counts the core's string lookups of stored metrics, and ``scripts/test.sh`` fails past 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from infbench.data.metrics import field as metric_field

#: A stored cell's status: measured (``ok``), failed, or predicted by an adaptive sweep
#: (also the values ``results --status`` takes).
STATUSES = ("ok", "failed", "predicted")


@dataclass(frozen=True, eq=False)
class StoredCell(Mapping[str, Any]):
    """One attempt at one cell, as the store keeps it.

    Attributes:
        cell_id: the cell's identity (:attr:`infbench.data.schema.Cell.cell_id`).
        spec_hash: hash of the cell's spec (``Cell.spec_hash``).
        run_id: the run that stored this attempt ("" for a row not stored yet).
        status: ``ok``, ``failed`` or ``predicted`` (:data:`STATUSES`).
        spec: the cell's spec as stored (``Cell.spec()``'s dict: model, engine, batch or
            concurrency, input_len/output_len in tokens, dtype, engine_args...).
        device: the device group it ran on (``DeviceInfo``'s dict).
        metrics: the cell's metrics (:func:`infbench.measure.derive.cell_metrics`; keys and units
            in :data:`~infbench.data.metrics.METRICS`, other fields in ``FIELDS``), checked on
            read (a value of the wrong shape is None and its key listed under ``invalid``).
        engine: the engine's description (``Engine.describe()``).
        error: a failed cell's error ("Type: message"), else None.
        power_note: why energy is unavailable, if it is.
        wall_s: time the harness spent on the cell (s), warm-up excluded.
        engine_s: time inside the engine's calls (s).
        started_at: UNIX time the cell started (s).
        finished_at: UNIX time it finished (s).
        id: the attempt's row in the store's ``cells`` table (None: not stored).
        attempt: which attempt at this cell id it is, 1 for the first (counted in the store
            over every run; 1 for a row not stored).
    """

    cell_id: str
    spec_hash: str
    run_id: str
    status: str
    spec: dict[str, Any]
    device: dict[str, Any]
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    engine: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str | None = None
    power_note: str | None = None
    wall_s: float | None = None
    engine_s: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    id: int | None = None
    attempt: int = 1

    # -- typed reads of the metrics' non-metric fields ------------------------------
    def field(self, name: str) -> Any:
        """The value of one non-metric field of the cell's metrics (:data:`FIELDS`: ``suspect``,
        ``client``, ``find_max``, ``warmup``...), None when the cell has none.

        Raises:
            KeyError: ``name`` is not a declared field (a metric is read through its
                :class:`~infbench.data.metrics.MetricDef`; an unknown name is a typo).
        """
        return metric_field(self.metrics, name)

    @property
    def ok(self) -> bool:
        """True when the cell was measured and succeeded."""
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        """True when the attempt failed (its :attr:`error` says why)."""
        return self.status == "failed"

    @property
    def predicted(self) -> bool:
        """True for a cell an adaptive sweep predicted instead of measuring (status
        ``predicted``, or a row marked so in its metrics)."""
        return self.status == "predicted" or bool(self.field("predicted"))

    @property
    def published(self) -> bool:
        """True for a cell imported from published results (``infbench import``)."""
        return bool(self.field("published") or self.engine.get("published"))

    @property
    def suspect(self) -> str | None:
        """Why an ok cell is suspect (physics, host state, client; reasons joined by ``; ``),
        None when it is not."""
        s = self.field("suspect")
        return str(s) if s else None

    # -- building --------------------------------------------------------------------
    @classmethod
    def from_result(cls, result: Any, run_id: str = "", **changes: Any) -> StoredCell:
        """A not-yet-stored :class:`~infbench.data.schema.CellResult` seen as a stored cell (the
        adaptive planner's and the expectation check's view of a fresh result).

        Args:
            result: the cell's result.
            run_id: the run it belongs to ("" when none yet).
            changes: attribute values to set instead of the result's (``status="predicted"``).
        """
        base = {
            "cell_id": result.cell_id, "spec_hash": result.spec_hash, "run_id": run_id,
            "status": result.status, "spec": result.cell.spec(), "device": result.device.model_dump(),
            "metrics": result.metrics, "engine": result.engine, "error": result.error,
            "power_note": result.power_note, "wall_s": result.wall_s, "engine_s": result.engine_s,
            "started_at": result.started_at, "finished_at": result.finished_at,
        }
        base.update(changes)
        return cls(**base)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredCell:
        """A stored cell from a row as JSON carries it (a worker spec's ``known`` results, a
        1.x ``Store.results()`` dict): the attributes it has, the rest at their defaults
        (``spec_hash``/``run_id`` "", ``spec``/``device`` {}, status ``failed`` when absent).
        Keys that are not attributes are ignored."""
        d = {k: row[k] for k in _NAMES if k in row}
        for k, default in (("cell_id", ""), ("spec_hash", ""), ("run_id", ""), ("status", "failed"),
                           ("spec", {}), ("device", {})):
            if d.get(k) is None:
                d[k] = default
        for k in ("metrics", "engine"):
            if not isinstance(d.get(k), dict):
                d.pop(k, None)
        return cls(**d)

    def replace(self, **changes: Any) -> StoredCell:
        """A copy with some attributes changed (:func:`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The cell as a plain dict of its attributes (JSON-ready where its metrics are)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    # -- the read-only mapping view kept for 1.x scripts ----------------------------
    def __getitem__(self, key: str) -> Any:
        if key not in _NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)

    def __repr__(self) -> str:
        return (f"StoredCell(cell_id={self.cell_id!r}, run_id={self.run_id!r}, status={self.status!r}, "
                f"attempt={self.attempt})")


_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StoredCell))
