"""``infbench import``: published results (LLM-Inference-Bench's CSV layout) into the store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from infbench.cli.common import JSON_HELP, err, fail, out, plugin_manager, print_json, store_for_writing
from infbench.data import signals
from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.inputs import ImportFlags, checked

Opt = typer.Option

FORMATS = ("lib-csv",)


def import_(
    file: Annotated[Path, typer.Argument(help="The CSV file (LLM-Inference-Bench's Plots/All_results.csv, or what "
                                              "`infbench export --format lib-csv` wrote).")],
    fmt: Annotated[str, Opt("--format", "-f", help="Layout of FILE: lib-csv.")] = "lib-csv",
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    source: Annotated[str | None, Opt("--source", help="Name of the publication (default "
                                                        "LLM-Inference-Bench).")] = None,
    url: Annotated[str | None, Opt("--url", help="Where the file comes from (repository or page). Credentials in "
                                              "it (user:token@, ?token=) are never stored or printed.")] = None,
    commit: Annotated[str | None, Opt("--commit", help="Version of the source (a git commit).")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Import published results as an external run; the cells are marked published.

    Example: `infbench import --format lib-csv All_results.csv --commit 4211f5d`, then
    `infbench compare <your run> <the imported run>` sets your cells against the paper's
    cell by cell, and `infbench predict --calibrate --device a100-40gb --engine vllm`
    fits the prediction to them. Devices are mapped by name to `infbench devices`
    (an MI250 counts as two GCDs); llama.cpp rows measured with llama-bench `-b N` become
    one-sequence cells with n_batch N. A malformed row stops the import with its line
    number; nothing is stored then. The cells are stored together or not at all: an
    import interrupted part-way (Ctrl-C, SIGTERM, a kill) stores none of them.
    """
    from infbench.report.lib_import import DEFAULT_SOURCE, published_cells, read_lib_csv
    from infbench.store.published import file_sha256, import_published

    try:
        if fmt not in FORMATS:
            raise ConfigError(f"unknown import format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
        checked(ImportFlags, fmt=fmt, source=source, url=url, commit=commit)
        size = file.stat().st_size if file.is_file() else 0
        if size > 1 << 20:  # a large file says what it is doing before the reading starts
            err.print(f"import: reading {file} ({size / 1e6:.0f} MB), then storing its cells together")
        rows = read_lib_csv(file)
        src = {**DEFAULT_SOURCE, "file": str(file.resolve()), "sha256": file_sha256(file), "format": fmt}
        if source:
            src = {"name": source, "file": src["file"], "sha256": src["sha256"], "format": fmt}
        src.update({k: v for k, v in (("url", url), ("commit", commit)) if v})
        results, summary = published_cells(rows, src, plugin_manager())
        store = store_for_writing(store_path)
        with signals.terminate_as_interrupt():
            run_id = import_published(store, results, src, command=" ".join(["infbench", *sys.argv[1:]]),
                                      progress=lambda line: err.print(line))
    except InfbenchError as exc:
        fail(exc)
    except KeyboardInterrupt as exc:
        err.print("[yellow]interrupted:[/] nothing was imported (the cells are stored together or not at all)")
        raise typer.Exit(signals.exit_status(exc)) from None
    report = {"run_id": run_id, "store": str(store.path), "source": src, **summary}
    if as_json:
        print_json(report)
        return
    out.print(f"[bold]imported {len(results)} published cells[/] from {file} as run {run_id} in {store.path}")
    t = Table(header_style="bold")
    t.add_column("device (catalog id)")
    t.add_column("cells", justify="right")
    for d, n in sorted(summary["devices"].items()):
        t.add_row(d, str(n))
    out.print(t)
    if summary["single_sequence_rows"]:
        out.print(f"{summary['single_sequence_rows']} llama.cpp rows are one sequence with llama-bench's n_batch "
                  "as 'Batch Size' (stored as batch 1 with options.n_batch)")
    if summary["unmapped_devices"]:
        out.print(f"[yellow]not in the device catalog:[/] {', '.join(summary['unmapped_devices'])} (no roofline or "
                  "prediction for them)")
    if summary["unknown_models"]:
        out.print(f"[yellow]not in the model zoo:[/] {', '.join(summary['unknown_models'])} (stored; no roofline or "
                  "prediction for them)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command(name="import")(import_)
