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
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

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
from infbench.cli.common import out
from infbench.data.version import __version__

app = typer.Typer(
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

    The last line of defence against a raw traceback: an infbench error that escaped a
    command is printed as ``error:``/``hint:`` (its exit status), a store error as
    ``error:`` with exit 2, and anything else as one ``internal error`` line naming the
    exception and where it happened (exit 1; ``-v`` shows the traceback)."""
    import sqlite3
    import traceback

    from infbench.data.errors import InfbenchError
    from infbench.data.outputs import terminal_text as clean

    try:
        app()
    except InfbenchError as exc:
        sys.stderr.write(f"error: {clean(exc.message)}\n" + (f"hint: {clean(exc.hint)}\n" if exc.hint else ""))
        sys.exit(exc.exit_code)
    except sqlite3.Error as exc:
        sys.stderr.write(f"error: the results store failed: {clean(exc)}\n"
                         "hint: check the --store file (disk space, permissions, "
                         "`sqlite3 FILE 'PRAGMA integrity_check'`)\n")
        sys.exit(2)
    except Exception as exc:  # noqa: BLE001 - print one line, not a traceback
        if "-v" in sys.argv or "--verbose" in sys.argv:
            traceback.print_exc()
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        sys.stderr.write(f"internal error: {type(exc).__name__}: {clean(str(exc)[:500])}{where}\n"
                         "hint: this is a bug in infbench; please report it with this line (add -v for the "
                         "traceback)\n")
        sys.exit(1)
