"""The planned work of a run: :class:`Group` (cells sharing one loaded model) and
:class:`Plan` (the groups of one device, and the scenario that decides what to measure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infbench.data.models import ModelShape
from infbench.data.scenarios import ScenarioSpec, SweepScenario
from infbench.data.schema import Cell, DeviceInfo


@dataclass
class Group:
    """Cells that share one loaded model: same model, engine, dtype and TP degree.

    Attributes:
        model: the resolved model shape.
        engine: engine name.
        dtype: the engine's dtype spelling.
        tensor_parallel_size: devices per model instance.
        cells: the group's cells, smallest first.
    """

    model: ModelShape
    engine: str
    dtype: str
    tensor_parallel_size: int
    cells: list[Cell] = field(default_factory=list)

    def label(self) -> str:
        """``smollm2-135m on llama.cpp (f16)``."""
        tp = f", tp={self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else ""
        return f"{self.model.name} on {self.engine} ({self.dtype}{tp})"

    def key(self) -> tuple[Any, ...]:
        """What makes two groups load the same model: ``(model, engine, dtype, tp)``, and
        the engine arguments of its cells' identity when they have any
        (:meth:`~infbench.data.schema.Cell.group_key`)."""
        base: tuple[Any, ...] = (self.model.name, self.engine, self.dtype, self.tensor_parallel_size)
        return base + self.cells[0].group_key()[4:] if self.cells else base

    def with_cells(self, cells: list[Cell]) -> Group:
        """The same group holding ``cells`` instead."""
        return Group(self.model, self.engine, self.dtype, self.tensor_parallel_size, list(cells))


@dataclass
class Plan:
    """The validated plan: groups of cells for one device, the scenario deciding what to
    measure of them (default: every cell, a sweep), and warnings to show."""

    device: DeviceInfo
    groups: list[Group]
    warnings: list[str] = field(default_factory=list)
    scenario: ScenarioSpec = field(default_factory=SweepScenario)

    @property
    def cells(self) -> list[Cell]:
        """All cells in run order."""
        return [c for g in self.groups for c in g.cells]

    def with_groups(self, groups: list[Group], scenario: ScenarioSpec | None = None) -> Plan:
        """A plan of the same device holding ``groups`` (and ``scenario``, default this one's)."""
        return Plan(self.device, [g for g in groups if g.cells], list(self.warnings),
                    scenario if scenario is not None else self.scenario)
