"""``infbench import``: published results and other tools' result files into the store
(LLM-Inference-Bench's CSV; ``vllm bench serve``, AIPerf, guidellm, inference-perf,
InferenceX and MLPerf Inference: :mod:`infbench.report.imports`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from infbench.cli.common import JSON_HELP, err, out, plugin_manager, print_json, store_for_writing
from infbench.data import signals
from infbench.data.errors import ConfigError
from infbench.data.inputs import ImportFlags, checked
from infbench.report.imports import FORMATS as TOOLS
from infbench.report.imports.common import imported_cells
from infbench.report.lib_import import DEFAULT_SOURCE, published_cells, read_lib_csv
from infbench.store.published import file_sha256, import_published

Opt = typer.Option

#: ``--format`` values: LLM-Inference-Bench's CSV and :data:`infbench.report.imports.FORMATS`.
FORMATS = ("lib-csv", "vllm-bench", "aiperf", "guidellm", "inference-perf", "inferencex", "mlperf")


def import_(
    file: Annotated[Path, typer.Argument(help="The file: LLM-Inference-Bench's Plots/All_results.csv or an `infbench "
                                              "export` (lib-csv), vllm bench serve's --save-result JSON, AIPerf's "
                                              "profile_export_aiperf.json/.csv, guidellm's benchmarks.json, an "
                                              "inference-perf report JSON, InferenceX's result rows, MLPerf's "
                                              "summary.csv.")],
    fmt: Annotated[str, Opt("--format", "-f", help="Layout of FILE: " + ", ".join(FORMATS) + ".")] = "lib-csv",
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    source: Annotated[str | None, Opt("--source", help="Name of the publication or tool (default: the format's "
                                                        "tool, or LLM-Inference-Bench).")] = None,
    url: Annotated[str | None, Opt("--url", help="Where the file comes from (repository or page). Credentials in "
                                              "it (user:token@, ?token=) are never stored or printed.")] = None,
    commit: Annotated[str | None, Opt("--commit", help="Version of the source (a git commit).")] = None,
    device: Annotated[str | None, Opt("--device", help="The hardware a client tool's file measured (its files "
                                                        "name none): a catalog id or name (h100-sxm), or cpu.")] = None,
    devices: Annotated[int | None, Opt("--devices", help="Devices the model ran on, where the file does not say "
                                                          "(per-device figures divide by it; default 1).")] = None,
    engine: Annotated[str | None, Opt("--engine", help="The engine the tool measured (vllm-server, "
                                                        "llama.cpp-server...), where the file does not say.")] = None,
    model: Annotated[str | None, Opt("--model", help="The zoo model the file measured, where it names a served "
                                                      "model instead (smollm2 for smollm2-135m).")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Import published results or another tool's result file as a run of its own; the cells
    are marked published (and, but for lib-csv, imported with the tool, version, file and row).

    Every figure is converted to infbench's definitions (docs/metrics.md, "Importing other
    tools' results": InferenceX's tok/s/gpu counts input and output tokens, AIPerf's and
    guidellm's ITL is infbench's TPOT, MLPerf gives system tokens/s...); what infbench does
    not define is kept as it came under `metrics.unmapped`. A file whose figures contradict
    themselves or physics (negative or NaN times, throughput beyond what the concurrency and
    latency allow, GPU counts that do not divide) is refused with the row and the reason, and
    nothing is stored. The cells are stored together or not at all: an import interrupted
    part-way (Ctrl-C, SIGTERM, a kill) stores none of them.

    Examples: `infbench import --format lib-csv All_results.csv --commit 4211f5d`;
    `infbench import -f inferencex benchmarks.json`, then `infbench compare --frontier RUN
    --against imported:inferencex:h200`; `infbench import -f vllm-bench result.json --device
    h100-sxm --engine vllm-server`.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown import format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
    checked(ImportFlags, fmt=fmt, source=source, url=url, commit=commit, device=device, devices=devices,
            engine=engine, model_name=model)
    if fmt in ("lib-csv", "inferencex", "mlperf") and any(v is not None for v in (device, devices, engine, model)):
        raise ConfigError(f"--device, --devices, --engine and --model fill what a client tool's file does not say; "
                          f"{fmt} names its hardware, framework and model per row",
                          hint="leave them out for this format")
    size = file.stat().st_size if file.is_file() else 0
    if size > 1 << 20:  # a large file says what it is doing before the reading starts
        err.print(f"import: reading {file} ({size / 1e6:.0f} MB), then storing its cells together")
    if fmt == "lib-csv":
        results, summary, src = _lib_csv(file, source, url, commit)
    else:
        results, summary, src = _tool_file(file, fmt, source, url, commit, device, devices, engine, model)
    store = store_for_writing(store_path)
    try:
        with signals.terminate_as_interrupt():
            run_id = import_published(store, results, src, command=" ".join(["infbench", *sys.argv[1:]]),
                                      progress=lambda line: err.print(line))
    except KeyboardInterrupt as exc:
        err.print("[yellow]interrupted:[/] nothing was imported (the cells are stored together or not at all)")
        raise typer.Exit(signals.exit_status(exc)) from None
    report = {"run_id": run_id, "store": str(store.path), "source": src, **summary}
    if as_json:
        print_json(report)
        return
    what = "published cells" if fmt == "lib-csv" else f"cells from {src['name']}"
    out.print(f"[bold]imported {len(results)} {what}[/] from {file} as run {run_id} in {store.path}")
    t = Table(header_style="bold")
    t.add_column("device (catalog id)")
    t.add_column("cells", justify="right")
    for d, n in sorted(summary["devices"].items()):
        t.add_row(d, str(n))
    out.print(t)
    if summary.get("single_sequence_rows"):
        out.print(f"{summary['single_sequence_rows']} llama.cpp rows are one sequence with llama-bench's n_batch "
                  "as 'Batch Size' (stored as batch 1 with options.n_batch)")
    if summary.get("skipped"):
        out.print("not LLM benchmarks, not imported: " + ", ".join(f"{k} ({v})" for k, v in summary["skipped"].items()))
    if summary.get("unmapped_figures"):
        out.print(f"kept as they came (no infbench definition): {', '.join(summary['unmapped_figures'][:12])}"
                  + (" ..." if len(summary["unmapped_figures"]) > 12 else "") + " (metrics.unmapped)")
    if summary["unmapped_devices"]:
        out.print(f"[yellow]not in the device catalog:[/] {', '.join(summary['unmapped_devices'])} (no roofline or "
                  "prediction for them)")
    if summary["unknown_models"]:
        out.print(f"[yellow]not in the model zoo:[/] {', '.join(summary['unknown_models'])} (stored; no roofline or "
                  "prediction for them)")


def _lib_csv(file: Path, source: str | None, url: str | None, commit: str | None) -> tuple[list, dict, dict]:
    """LLM-Inference-Bench's CSV (:mod:`infbench.report.lib_import`)."""
    rows = read_lib_csv(file)
    src: dict[str, Any] = {**DEFAULT_SOURCE, "file": str(file.resolve()), "sha256": file_sha256(file),
                           "format": "lib-csv"}
    if source:
        src = {"name": source, "file": src["file"], "sha256": src["sha256"], "format": "lib-csv"}
    src.update({k: v for k, v in (("url", url), ("commit", commit)) if v})
    results, summary = published_cells(rows, src, plugin_manager())
    return results, summary, src


def _tool_file(file: Path, fmt: str, source: str | None, url: str | None, commit: str | None, device: str | None,
               devices: int | None, engine: str | None, model: str | None) -> tuple[list, dict, dict]:
    """Another tool's file (:data:`infbench.report.imports.FORMATS`)."""
    f = TOOLS[fmt]
    rows, info = f.reader(file)
    if not rows:
        raise ConfigError(f"{file} holds no result to import", hint=f"pass {f.what}")
    src: dict[str, Any] = {"name": source or f.tool, "tool": f.tool, "tool_version": info.get("tool_version"),
                           "file": str(file.resolve()), "sha256": file_sha256(file), "format": fmt, "url": url or f.url}
    if commit:
        src["commit"] = commit
    results, summary = imported_cells(rows, src, plugin_manager(), device=device, devices=devices, engine=engine,
                                      model=model)
    if info.get("skipped"):
        summary["skipped"] = info["skipped"]
    return results, summary, src


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command(name="import")(import_)
