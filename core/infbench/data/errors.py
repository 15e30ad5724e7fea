"""Errors infbench raises for bad input and failed measurements.

Every error carries a ``hint``: what the user should do about it. The CLI prints
``error: <message>`` and ``hint: <hint>`` and exits with status 2 (bad input) or 1.
"""

from __future__ import annotations

import difflib
import traceback
from collections.abc import Iterable
from pathlib import Path


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

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled with its attributes, whatever the subclass's ``__init__`` takes, so an
        error raised in an engine's own process (:mod:`infbench.engines.process`) arrives
        whole: its type, message, hint and fields (``DeviceMismatch.fix``...)."""
        return (_rebuild_error, (type(self), dict(self.__dict__)))


def _rebuild_error(cls: type[InfbenchError], state: dict[str, object]) -> InfbenchError:
    """An :class:`InfbenchError` of type ``cls`` from its pickled attributes (see ``__reduce__``)."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, state.get("message", ""))
    exc.__dict__.update(state)
    return exc


class ConfigError(InfbenchError):
    """Bad user input: an unknown model, engine or precision, a malformed sweep file."""

    exit_code = 2


class EngineUnavailable(InfbenchError):
    """An engine's library is not installed or cannot run on the chosen device."""

    exit_code = 2


class VersionSkew(InfbenchError):
    """Host and worker (or image) were written by infbench versions with different store schemas."""

    exit_code = 2


class CellTimeout(InfbenchError):
    """A cell ran past its time limit (``--cell-timeout``); stored as a failed cell."""


class DeviceMismatch(InfbenchError):
    """An engine would run (or ran) somewhere other than the device its cells are planned on.

    Raised by an adapter's :meth:`~infbench.data.engine.Engine.start` (before loading
    weights, when the installed library has no support for the device) or
    :meth:`~infbench.data.engine.Engine.verify_device` (after loading, when the engine's
    own report shows another device). The group then fails before its first timed
    request and every cell is stored failed with :meth:`cell_error`, so nothing is stored
    ``ok`` under a device it did not run on.

    Args:
        engine: engine name (``llama.cpp``).
        device: the planned device, as the user knows it (``nvidia NVIDIA H100 80GB HBM3``).
        reason: what is installed or what the engine reported (``llama-cpp-python 0.3.36
            was built without GPU offload``).
        instead: where the cells would have run instead (``the CPU``).
        fix: the command that fixes it (the ``hint``).
    """

    exit_code = 2

    def __init__(self, engine: str, device: str, reason: str, instead: str, fix: str | None):
        self.engine, self.device, self.reason, self.instead, self.fix = engine, device, reason, instead, fix
        super().__init__(f"{engine} does not run on {device}: {reason}; its cells would have run on {instead}",
                         hint=fix)

    def cell_error(self) -> str:
        """The error stored with each cell of the refused group: the message and the fix."""
        return f"device check failed: {self.message}" + (f". Fix: {self.fix}" if self.fix else "")


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


def describe_error(exc: BaseException) -> str:
    """``Type: message`` with the innermost frame, for a stored failed cell (OOM is named as such).

    An error raised in an engine's own process carries the description made there, where
    its traceback was (``remote_description``, :mod:`infbench.engines.process`)."""
    remote = getattr(exc, "remote_description", None)
    if isinstance(remote, str):
        return remote
    if isinstance(exc, MemoryError):
        return f"OOM: MemoryError: {exc}"
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


class StoreFailure(InfbenchError):
    """The results store's database failed under a command (a :class:`sqlite3.Error` no layer
    turned into a message of its own): printed by the entry point, exit 2.

    Args:
        exc: the database error.
    """

    exit_code = 2

    def __init__(self, exc: BaseException):
        super().__init__(f"the results store failed: {exc}", hint="check the --store file (disk space, permissions, "
                                                                  "`sqlite3 FILE 'PRAGMA integrity_check'`)")
