"""Typed events of a run (defined in the bottom layer, :mod:`infbench.data.events`, so that
the run's bookkeeping and the engine session below the executors can send them)."""

from __future__ import annotations

from infbench.data.events import (
    CellFinished,
    CellSkipped,
    CellStarted,
    CellTimed,
    Collector,
    GroupLoading,
    LogLine,
    NodeLost,
    Note,
    Observer,
    RunEvent,
    ScoreFinished,
    ScoreProgress,
    ScoreStarted,
    ignore,
)

__all__ = ["CellFinished", "CellSkipped", "CellStarted", "CellTimed", "Collector",
            "GroupLoading", "LogLine", "NodeLost", "Note",
           "Observer", "RunEvent", "ScoreFinished", "ScoreProgress", "ScoreStarted", "ignore"]
