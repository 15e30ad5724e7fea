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

import importlib
import logging
import sqlite3
import sys
import traceback
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from infbench.cli.common import out, print_error
from infbench.data.errors import InfbenchError, StoreFailure
from infbench.data.outputs import terminal_text
from infbench.data.outputs import terminal_text as clean
from infbench.data.version import __version__

#: Every command, in the order of ``--help``: the module under :mod:`infbench.cli` whose
#: ``register(app)`` adds it, and the first paragraph of its help. ``infbench --help`` lists
#: the commands from this table, and a command's module is imported only when that command
#: runs (or shows its own help): ``infbench --help`` and ``infbench detect`` load only what they
#: use, while each command module imports what it needs at its top (issue 40).
#: tests/unit/cli/test_lazy_commands.py checks the table against the commands' own help.
COMMANDS: dict[str, tuple[str, str]] = {
    "detect": ("detect_cmd",
        "Find the devices on this host: the PCI bus plus every plugin's detect hook, and "
        "which\n"
        "engines run on each."),
    "run": ("run_cmd",
        "Run a sweep of cells and store every result."),
    "worker": ("run_cmd",
        "Run the cells of a worker spec here and write raw results and provenance to --out."),
    "ingest": ("run_cmd",
        "Store a worker's results (its --out folder) as one run, with the worker's provenance."),
    "results": ("results",
        "Show stored results: the newest attempt of every cell."),
    "report": ("report",
        "Write an interactive HTML report of stored results (one self-contained file that\n"
        "works offline) and, with `--static`, PNG/SVG figures."),
    "export": ("report",
        "Export stored results for other tools."),
    "compare": ("report",
        "Compare two sets of results cell by cell: ratios B / A of throughput, latency,\n"
        "power and tokens per joule, for cells with the same workload (spec hash)."),
    "import": ("importer",
        "Import published results or another tool's result file as a run of its own; the "
        "cells\n"
        "are marked published (and, but for lib-csv, imported with the tool, version, file and "
        "row)."),
    "perplexity": ("quality_cmd",
        "Measure perplexity exactly as llama.cpp's `llama-perplexity` does, on\n"
        "llama.cpp, transformers or vLLM, and store it beside the throughput of the same "
        "precision."),
    "quantize": ("quality_cmd",
        "Derive precisions (f16, q8_0, q4_K_M...) from one GGUF file, cached with their "
        "provenance."),
    "predict": ("predict_cmd",
        "Predict TTFT, TPOT, E2E, batch duration and throughput analytically: "
        "GenZ's\n"
        "per-operator roofline with efficiency factors, plus what the engine does "
        "(KV-cache\n"
        "capacity and waves, per-step overheads, chunked prefill, flash attention or not) "
        "and\n"
        "the parallelism (tensor, pipeline, expert) with link efficiency. Method: "
        "docs/roofline.md."),
    "devices": ("catalog",
        "List the device descriptions the installed plugins publish: memory, bandwidth,\n"
        "dense peak TFLOP/s per precision and TDP, with their sources."),
    "models": ("catalog",
        "List the model zoo: parameters, attention type and KV-cache bytes per token."),
    "plugins": ("plugins_cmd",
        "Plugins: `infbench plugins` lists them with their hooks and engines; `plugins check "
        "[NAME]` runs the conformance kit on installed plugins; `plugins new VENDOR` writes a "
        "plugin to start from (docs/plugins.md)."),
    "containers": ("containers",
        "Worker images: build the vendor plugins' images (`containers/cpu/Dockerfile.*`, "
        "`plugins/<vendor>/docker/Dockerfile.*`) and list what is built. `infbench run "
        "--executor container` runs cells in them."),
}


#: The click commands built so far, by name (:func:`load_command`). ``Any``: typer's own copy
#: of click's ``Command`` (``typer._click``) is private.
_LOADED: dict[str, Any] = {}


def load_command(name: str) -> Any:
    """The click command ``name`` (None for a name that is not a command): its module, from
    :data:`COMMANDS`, is imported once and builds all its commands (``register(app)`` on a
    typer app of its own)."""
    if name not in _LOADED and name in COMMANDS:
        module = importlib.import_module(f"infbench.cli.{COMMANDS[name][0]}")
        sub = typer.Typer(rich_markup_mode="markdown")
        module.register(sub)
        _LOADED.update(typer.main.get_group(sub).commands)
    return _LOADED.get(name)


class _LazyCommands(MutableMapping[str, Any]):
    """A group's commands: every name of :data:`COMMANDS`, each built when first looked up
    (:func:`load_command`), after the commands added to the group itself. Iterating gives
    the names without building any."""

    def __init__(self, added: Mapping[str, Any]) -> None:
        self.added = dict(added)

    def __getitem__(self, name: str) -> Any:
        if name in self.added:
            return self.added[name]
        command = load_command(name)
        if command is None:
            raise KeyError(name)
        return command

    def __setitem__(self, name: str, command: Any) -> None:
        self.added[name] = command

    def __delitem__(self, name: str) -> None:
        del self.added[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*self.added, *(name for name in COMMANDS if name not in self.added)])

    def __len__(self) -> int:
        return len(self.added) + sum(name not in self.added for name in COMMANDS)

    def __contains__(self, name: object) -> bool:
        return name in self.added or name in COMMANDS


class Commands(TyperGroup):
    """The ``infbench`` command group: runs a command and prints what it raised, once
    (:func:`infbench.cli.common.print_error`), exiting with the error's status. Its commands
    are :data:`COMMANDS`, each loaded when it is looked up (:class:`_LazyCommands`); its help
    lists them from the table, importing none."""

    _listing = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        """The commands' names, in the order of ``--help`` (none is loaded)."""
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name`` (None if there is none); while the group's help is written,
        a stand-in carrying its help line for a command not loaded yet."""
        if self._listing and cmd_name in COMMANDS and cmd_name not in _LOADED:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Write the group's help (its command list from :data:`COMMANDS`)."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

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
        """The record, formatted, redacted and without escape sequences or control characters."""
        return terminal_text(super().format(record))


def main() -> None:
    """Console-script entry point.

    Errors of the commands are printed by :class:`Commands`; this is the last line of defence
    against a raw traceback: anything else is one ``internal error`` line naming the exception
    and where it happened (exit 1; ``-v`` shows the traceback)."""


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
