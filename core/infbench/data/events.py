"""Typed events of a run, sent by every executor to the run's observer.

An executor reports what happens as it happens: a group's model is loading, a cell
started, its warm-up ended, a cell finished (stored ok or failed), a stored cell was flagged
(its group's sentinel), a cell was skipped (already stored ok),
a perplexity measurement started, progressed or finished, a node was lost (Ray), a note
for the user (e.g. a privileged container), a log line of a worker that is not an event.
The command line turns them into a progress bar; a worker turns them into its stderr
event lines (:func:`infbench.execution.worker.event_line`); tests
collect them. ``node`` names where it happened (a Ray node id, or None for this host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.groups import Group
    from infbench.data.schema import Cell, CellResult
    from infbench.data.scores import PerplexityResult


@dataclass(frozen=True)
class GroupLoading:
    """The model of ``group`` is being loaded (once per group)."""

    group: Group
    node: str | None = None


@dataclass(frozen=True)
class CellStarted:
    """``cell`` is being measured (warm-up included); ``again``: measured once more, as a new
    attempt, because its group's sentinel showed it ran while the host was slower."""

    cell: Cell
    node: str | None = None
    again: bool = False


@dataclass(frozen=True)
class CellTimed:
    """``cell``'s warm-up is done and its timed part begins (sent by the engine session; the
    progress display shows the warm-up as a phase of its own and leaves it out of its rate)."""

    cell: Cell
    node: str | None = None


@dataclass(frozen=True)
class CellFinished:
    """``result`` was stored (status ok or failed)."""

    result: CellResult
    node: str | None = None


@dataclass(frozen=True)
class CellFlagged:
    """A stored ``result`` gained a steady-state flag after it was stored (``flag``: ``drift``
    or ``unsteady``, ``text``: why, with the figures); it is stored again in place."""

    result: CellResult
    flag: str
    text: str
    node: str | None = None


@dataclass(frozen=True)
class CellSkipped:
    """``cell`` was not measured: its newest stored attempt is ok (``--force`` measures it),
    or ``reason`` says why (another process is measuring it)."""

    cell: Cell
    reason: str | None = None


@dataclass(frozen=True)
class ScoreStarted:
    """A perplexity measurement started: ``label`` (model on engine (dtype)), its quality ``key``."""

    label: str
    key: str
    node: str | None = None


@dataclass(frozen=True)
class ScoreProgress:
    """A perplexity measurement is scoring ``chunks`` chunks of ``n_ctx`` tokens."""

    key: str
    chunks: int
    n_ctx: int
    node: str | None = None


@dataclass(frozen=True)
class ScoreFinished:
    """``result`` (a perplexity measurement, ok or failed) was stored."""

    result: PerplexityResult
    node: str | None = None


@dataclass(frozen=True)
class NodeLost:
    """A node running cells died or left the cluster; ``error`` says how."""

    node: str
    error: str


@dataclass(frozen=True)
class Note:
    """A line the user must read (a fallback taken, a privileged container...)."""

    text: str


@dataclass(frozen=True)
class LogLine:
    """A worker's log line that is not an event (shown with ``-v``)."""

    line: str
    node: str | None = None


RunEvent = Union[GroupLoading, CellStarted, CellTimed, CellFinished, CellFlagged, CellSkipped,  # noqa: UP007
                 ScoreStarted, ScoreProgress, ScoreFinished, NodeLost, Note, LogLine]
#: What an executor calls with each event; must return quickly and never raise.
Observer = Callable[[RunEvent], None]


def ignore(event: RunEvent) -> None:
    """The observer that drops every event."""


class Collector:
    """An observer that keeps every event in ``events`` (for tests and scripts)."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[RunEvent]:
        """The events of one type, in order."""
        return [e for e in self.events if isinstance(e, kind)]
