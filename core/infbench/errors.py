"""Errors infbench raises for bad input and failed measurements.

Every error carries a ``hint``: what the user should do about it. The CLI prints
``error: <message>`` and ``hint: <hint>`` and exits with status 2 (bad input) or 1.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InfbenchError(Exception):
    """Base class of infbench's user-facing errors.

    Args:
        message: what was wrong.
        hint: how to fix it (optional).
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(InfbenchError):
    """Bad user input: an unknown model, engine or precision, a malformed sweep file."""

    exit_code = 2


class EngineUnavailable(InfbenchError):
    """An engine's library is not installed or cannot run on the chosen device."""

    exit_code = 2


class CellTimeout(InfbenchError):
    """A cell ran past its time limit (``--cell-timeout``); stored as a failed cell."""


def suggest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``"did you mean: a, b?"`` for the closest ``choices`` to ``name``, or ``""``.

    Uses :func:`difflib.get_close_matches` (ratio >= 0.5) on lower-cased names.
    """
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    if not close:
        close = [c for c in lowered if name.lower() in c][:n]
    return f"did you mean: {', '.join(lowered[c] for c in close)}?" if close else ""
