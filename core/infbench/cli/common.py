"""What every command module shares: the consoles, the one error printer, JSON output, the
plugin manager, opening the store, and the flag-list splitter.

Commands raise :class:`~infbench.data.errors.InfbenchError`; the entry point prints it once
(:func:`print_error`, from :class:`infbench.cli.Commands`) and exits with its status. Exit
status of every command: 0 ok, 1 error, 2 bad input, 3 some cells failed (their errors are
stored), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.flags import split_values
from infbench.data.outputs import SafeConsole, json_text, terminal_text
from infbench.data.secrets import printable

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.stored import StoredCell
    from infbench.store import Store

# Wide tables when piped (rich falls back to 80 columns without a terminal). Every string
# printed through them is stripped of escape sequences and redacted (infbench.data.outputs).
out: Console = SafeConsole(width=None if sys.stdout.isatty() else 160)
err: Console = SafeConsole(stderr=True, width=None if sys.stderr.isatty() else 160)

#: ``--json`` option shared by the commands that print tables.
JSON_HELP = "Machine-readable output."


def print_error(exc: InfbenchError) -> None:
    """The one error printer: ``error: <message>`` and ``hint: <hint>`` on stderr (called by the
    entry point, :class:`infbench.cli.Commands`, for every command)."""
    err.print(f"[bold red]error:[/] {escape(exc.message)}")
    if exc.hint:
        err.print(f"[yellow]hint:[/] {escape(exc.hint)}")


def need(extra: str, exc: ImportError) -> ConfigError:
    """The error of a missing optional module, with a hint to install the extra providing it
    (``raise need("report", exc)``)."""
    return ConfigError(f"this command needs {exc.name or 'an optional package'}",
                       hint=f"pip install 'infbench[{extra}]'")


def plugin_manager():
    """A fresh plugin manager (built-ins + installed plugins)."""
    from infbench.contract.manager import get_plugin_manager  # noqa: PLC0415 - start-up: not loaded by --help

    return get_plugin_manager()


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented, strict JSON to stdout (:func:`infbench.data.outputs.json_text`:
    strings redacted, no NaN or Infinity, ``str()`` for paths and times)."""
    sys.stdout.write(json_text(obj) + "\n")


def split(values: list[str] | None, flag: str, cast: type = str) -> list[Any] | None:
    """:func:`infbench.data.flags.split_values` (raises ConfigError, exit 2, on a bad item)."""
    return split_values(values, flag, cast)


def check_run_id(run_id: str | None, flag: str = "--run") -> None:
    """Refuse (ConfigError, exit 2) a ``run_id`` that is not None nor a run id prefix (hex digits)."""
    from infbench.store import valid_run_prefix  # noqa: PLC0415 - start-up: not loaded by --help

    if run_id is not None and not valid_run_prefix(run_id):
        raise ConfigError(f"{flag} {run_id[:40]!r} is not a run id (run ids are hex digits, e.g. 3f2a9c)",
                          hint="see the run ids with `infbench results --format json` or the store's runs")


def open_store(store_path: Path | None, readonly: bool = False):
    """The results store at ``store_path`` (default location when None).

    Args:
        store_path: ``--store``, or None for ``$INFBENCH_HOME/results.db``.
        readonly: open read-only (``results``, ``report``, ``export``, ``compare``): the
            file is never written; a missing file is an error (exit 2).

    Raises:
        InfbenchError: the store cannot be opened (why, and what to do).
    """
    from infbench.store import Store  # noqa: PLC0415 - start-up: not loaded by --help

    return Store(store_path, readonly=readonly)


def read_results(store: Store, **kwargs: Any) -> list[StoredCell]:
    """``store.results(**kwargs)`` (typed stored cells); a file that cannot be read (a corrupt page found only when
    the rows are read) is a StoreError (exit 2) with the reason."""
    from infbench.store import StoreError, describe_db_error  # noqa: PLC0415 - start-up: not loaded by --help

    try:
        return store.results(**kwargs)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the results store {store.path}: {describe_db_error(exc)}",
                         hint=f"salvage it with `sqlite3 {store.path} .recover | sqlite3 recovered.db`") from None


def store_for_writing(store_path: Path | None):
    """:func:`open_store` for ``run`` and ``ingest``, made ready by
    :func:`infbench.store.recovery.prepare` (integrity check, runs left ``running`` by a
    dead process marked ``interrupted``, journalled cells stored), with a note for each
    thing it did; raises (exit 2) when the store is damaged or cannot be written."""
    from infbench.analysis.floor import recheck  # noqa: PLC0415 - start-up: not loaded by --help
    from infbench.store.recovery import prepare  # noqa: PLC0415 - start-up: not loaded by --help

    store = open_store(store_path)
    try:
        rec = prepare(store, check=lambda r: recheck(r, plugin_manager()))  # journalled cells: run's physics
    except InfbenchError:
        store.close()
        raise
    if rec.interrupted:
        err.print(f"[yellow]note:[/] {len(rec.interrupted)} run(s) left `running` by a process that is gone are now "
                  f"marked interrupted: {', '.join(rec.interrupted)}")
    if rec.replayed_cells:
        err.print(f"[yellow]note:[/] stored {rec.replayed_cells} cell(s) kept in the journal by an earlier run "
                  f"({rec.journal_files} journal file(s))")
    for n in rec.notes:
        err.print(f"[yellow]note:[/] {escape(n)}")
    return store


@contextlib.contextmanager
def writing(path: Path, what: str = "--out") -> Iterator[None]:
    """Turn an OS error while writing ``path`` (read-only folder, a parent that cannot be
    created, ``/proc``, a full disk) into ``error: cannot write ...`` (ConfigError, exit 2); a
    write the output boundary refuses (:class:`infbench.data.outputs.OutputRefused`: the store,
    an SQLite file, a file infbench did not write) raises its own error."""
    try:
        yield
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({what}): {exc.strerror or exc}",
                          hint=f"choose a writable location for {what}") from None


def store_paths(*paths: Path | str | None) -> list[Path]:
    """The stores a command's outputs must never overwrite: the given ``--store`` (and any
    other store it reads), and the default one."""
    from infbench.data.paths import default_store_path  # noqa: PLC0415 - start-up: not loaded by --help

    return [Path(p) for p in paths if p] + [default_store_path()]


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


def print_side_event(console: Any, event: Any) -> bool:
    """Print what every run observer shows the same way (a lost node, a note, a worker's log
    line at debug level), cleaned of control characters; False for any other event."""
    from infbench.data import events as ev  # noqa: PLC0415 - start-up: not loaded by --help

    if isinstance(event, ev.NodeLost):
        console.print(f"[yellow]node lost:[/] {escape(event.node)}: {escape(event.error)}")
    elif isinstance(event, ev.Note):
        console.print(f"[yellow]note:[/] {escape(printable(event.text))}")
    elif isinstance(event, ev.LogLine):
        logging.getLogger("infbench.execution.worker").debug("%s", printable(event.line))
    else:
        return False
    return True


class ProgressObserver:
    """The run's observer on the terminal: moves the progress bar, prints failures, notes
    and lost nodes, and logs worker lines at debug level (``-v``)."""

    def __init__(self, progress: Progress, task: Any):
        self.progress, self.task = progress, task

    def __call__(self, event: Any) -> None:
        from infbench.data import events as ev  # noqa: PLC0415 - start-up: not loaded by --help

        p = self.progress
        where = f" on {event.node}" if getattr(event, "node", None) else ""
        if isinstance(event, ev.GroupLoading):  # progress descriptions bypass the console's cleaning
            p.update(self.task, description=escape(terminal_text(f"loading {event.group.label()}{where}", False)))
        elif isinstance(event, ev.CellStarted):
            p.update(self.task, description=escape(terminal_text(f"{event.cell.label()}{where}", False)))
        elif isinstance(event, ev.CellSkipped):
            p.advance(self.task)
        elif isinstance(event, ev.CellFlagged):
            p.console.print(f"[yellow]{escape(event.flag)}[/] {escape(printable(event.result.cell.label()))}{where}: "
                            f"{escape(printable(event.text))}")
        elif isinstance(event, ev.CellFinished):
            p.advance(self.task)
            r = event.result
            if r.status != "ok":
                p.console.print(f"[red]failed[/] {escape(printable(r.cell.label()))}{where}: "
                                f"{escape(printable(r.error))}")
        else:
            print_side_event(p.console, event)
