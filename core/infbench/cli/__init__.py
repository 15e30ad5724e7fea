"""The ``infbench`` command line (typer + rich), one module per command group.

Commands follow the flow of a run: ``detect`` (:mod:`.detect`) -> ``run``, ``worker``,
``ingest`` (:mod:`.run`) -> ``results`` (:mod:`.results`) -> ``report``, ``export``,
``compare`` (:mod:`.report`); ``import`` (:mod:`.importer`: published results);
``perplexity``, ``quantize`` (:mod:`.quality`); ``predict`` (:mod:`.predict`); ``devices``,
``models`` (:mod:`.catalog`) and ``plugins`` (:mod:`.plugins_cmd`: also ``check`` and ``new``)
list what is available; ``containers`` (:mod:`.containers`) builds worker images. The
modules hold options and printing; what a command computes lives in the library
(:mod:`infbench.plan.sweeps`, :mod:`infbench.execution.bookkeeping`, ...), where tests call it
without a subprocess.

Every command that prints a table also takes ``--json``. Exit status: 0 ok, 1 error,
2 bad input, 3 some cells failed (their errors are stored), 130 interrupted.

Commands raise; errors are printed in one place, the entry point (:class:`Commands`, the
app's command group: an :class:`~infbench.data.errors.InfbenchError` as ``error:``/``hint:``
with its exit status, a store error with exit 2), so that ``infbench`` and a test's
``CliRunner`` print them the same way; :func:`main` adds the last line of defence against a
raw traceback.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from infbench.cli import (
    catalog,
    containers,
    detect_cmd,
    importer,
    plugins_cmd,
    predict_cmd,
    quality_cmd,
    report,
    results,
    run_cmd,
)
from infbench.cli.common import out, print_error
from infbench.data.errors import InfbenchError, StoreFailure
from infbench.data.version import __version__


class Commands(TyperGroup):
    """The ``infbench`` command group: runs a command and prints what it raised, once
    (:func:`infbench.cli.common.print_error`), exiting with the error's status."""

    def invoke(self, ctx: Any) -> Any:
        """Invoke the command; an infbench error is printed and becomes its exit status, a
        store error (:class:`sqlite3.Error`) exit 2."""
        try:
            return super().invoke(ctx)
        except InfbenchError as exc:
            print_error(exc)
            raise typer.Exit(exc.exit_code) from None
        except sqlite3.Error as exc:
            print_error(StoreFailure(exc))
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=Commands,
    name="infbench",
    help="Benchmark LLM inference the same way on any accelerator.\n\n"
         "Start with `infbench detect`, then `infbench run` (a quick default sweep on the detected "
         "device), then `infbench results`.",
    no_args_is_help=True, add_completion=False, rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        out.print(f"infbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log engine messages (debug).")] = False,
) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    for h in [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]:  # printed: cleaned
        h.setFormatter(_CleanFormatter(h.formatter._fmt if h.formatter else None))


class _CleanFormatter(logging.Formatter):
    """A log formatter whose lines pass through :func:`infbench.data.outputs.terminal_text`."""

    def format(self, record: logging.LogRecord) -> str:
        from infbench.data.outputs import terminal_text

        return terminal_text(super().format(record))


#: The command modules, in the order their commands appear in ``--help``.
COMMAND_MODULES = (detect_cmd, run_cmd, results, report, importer, quality_cmd, predict_cmd, catalog, plugins_cmd,
                   containers)
for _m in COMMAND_MODULES:
    _m.register(app)


def main() -> None:
    """Console-script entry point.

    Errors of the commands are printed by :class:`Commands`; this is the last line of defence
    against a raw traceback: anything else is one ``internal error`` line naming the exception
    and where it happened (exit 1; ``-v`` shows the traceback)."""
    import traceback

    from infbench.data.outputs import terminal_text as clean

    try:
        app()
    except Exception as exc:  # noqa: BLE001 - print one line, not a traceback
        if "-v" in sys.argv or "--verbose" in sys.argv:
            traceback.print_exc()
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        sys.stderr.write(f"internal error: {type(exc).__name__}: {clean(str(exc)[:500])}{where}\n"
                         "hint: this is a bug in infbench; please report it with this line (add -v for the "
                         "traceback)\n")
        sys.exit(1)
