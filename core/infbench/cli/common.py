"""What every command module shares: the consoles, error exit, JSON output, the plugin
manager, opening the store, and the flag-list splitter.

Exit status of every command: 0 ok, 1 error, 2 bad input, 3 some cells failed (their
errors are stored), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from infbench.errors import ConfigError, InfbenchError
from infbench.sweeps import split_values

# Wide tables when piped (rich falls back to 80 columns without a terminal).
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

#: ``--json`` option shared by the commands that print tables.
JSON_HELP = "Machine-readable output."


def fail(exc: InfbenchError) -> NoReturn:
    """Print ``error: <message>`` and ``hint: <hint>`` on stderr and exit with the error's code."""
    err.print(f"[bold red]error:[/] {escape(exc.message)}")
    if exc.hint:
        err.print(f"[yellow]hint:[/] {escape(exc.hint)}")
    raise typer.Exit(exc.exit_code)


def need(extra: str, exc: ImportError) -> NoReturn:
    """Exit with a hint to install the optional extra that provides a missing module."""
    fail(ConfigError(f"this command needs {exc.name or 'an optional package'}",
                     hint=f"pip install 'infbench[{extra}]'"))


def plugin_manager():
    """A fresh plugin manager (built-ins + installed plugins)."""
    from infbench.plugins import get_plugin_manager

    return get_plugin_manager()


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON to stdout (``default=str`` for paths and times)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def split(values: list[str] | None, flag: str, cast: type = str) -> list[Any] | None:
    """:func:`infbench.sweeps.split_values`, exiting with status 2 on a bad item."""
    try:
        return split_values(values, flag, cast)
    except ConfigError as exc:
        fail(exc)


def open_store(store_path: Path | None):
    """The results store at ``store_path`` (default location when None), or exit with the reason."""
    from infbench.store import Store

    try:
        return Store(store_path)
    except InfbenchError as exc:
        fail(exc)


@contextlib.contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """While active, file descriptor 1 points at stderr, so engines and their child processes
    (vLLM's engine core, servers) cannot write into a ``--json`` document on stdout."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
