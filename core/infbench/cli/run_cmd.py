"""``infbench run`` (plan, launch, measure, store), ``infbench worker`` (the same cells in
another place) and ``infbench ingest`` (a worker's results into the store)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from infbench.cli.common import (
    JSON_HELP,
    err,
    out,
    print_json,
    stdout_to_stderr,
    store_for_writing,
    store_paths,
    writing,
)
from infbench.cli.flags import with_config_options
from infbench.cli.progress import SweepProgress, first_run_note
from infbench.cli.quality_cmd import perplexity_after_run
from infbench.cli.serving_cmd import run_find_max
from infbench.data import signals
from infbench.data.outputs import WORKER_SPEC, check_folder, check_output, check_own_folder
from infbench.data.run_config import RunConfig
from infbench.data.signals import Terminated
from infbench.data.stored import StoredCell
from infbench.data.version import __version__
from infbench.data.worker_spec import CELLS_FILE, DB_FILE, PROVENANCE_FILE, QUALITY_FILE
from infbench.detect.registry import registry
from infbench.execution.bookkeeping import run_command
from infbench.execution.orchestrator import head_start, prepare
from infbench.execution.scenarios.adaptive_sweep import outline
from infbench.execution.worker import event_line, run_worker
from infbench.execution.worker import ingest as do_ingest
from infbench.report.tables import print_results, quality_json, quality_table, results_json, suspect_notes
from infbench.store import StoreError, describe_db_error

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store

RUN_HELP = """Run a sweep of cells and store every result.

With no arguments: the detected device's default sweep, named by its plugin. On the CPU,
the `quick` preset (smollm2-135m with dummy weights, batch 1/4/8, input 128/512, output
64) on llama.cpp compiled in-process when installed (`infbench[llamacpp]`), else on
llama.cpp's prebuilt server (`llama.cpp-server`, part of a plain install), else in the CPU
worker image; a few minutes on 2 cores; on an NVIDIA, AMD or Intel GPU or a
Gaudi, LLM-Inference-Bench's corner (llama-3-8b with dummy weights, batch 1/16/64, input
= output 128/1024) on the best engine that runs there: the plugin's image when built and a
container runtime answers, else vLLM, else transformers on the device, else llama.cpp
built for it. `--dry-run` shows the choice, why, and the command installing each better
engine; with none usable the run is refused, never measured on the CPU instead. Every
engine proves it runs on the device before its first timed request.

**Examples** on a plain install (`pip install infbench`: llama.cpp's prebuilt server)

    infbench run                                                   # the device's default sweep
    infbench run --dry-run                                         # its cells, engine, build and why
    infbench run --engine llama.cpp-server --batch 1,8 --input-len 128 --output-len 32
    infbench run --engine llama.cpp-server --concurrency 1,4 --num-requests 16
    infbench run --engine llama.cpp-server --input-len 128 --request-rate 1 --find-max rate --slo-ttft-ms 300
    infbench run --preset genz-qa --engine llama.cpp-server --batch 1 --dry-run

**More examples** (some need another engine: `pip install 'infbench[llamacpp]'`, `'infbench[transformers]'`,
vLLM; or files of yours: a sweep, conversations, a trace; or a server, a cluster)

    infbench run --model qwen2.5-0.5b --engine llama.cpp,transformers --dtype fp16 --batch 1,8
    infbench run --preset paper --model tinyllama-1.1b
    infbench run --sweep my-sweep.yaml --force
    infbench run --engine vllm --model tiny --batch 1,8          # vLLM offline, batch mode
    infbench run --engine vllm-server --concurrency 1,16,64 --num-requests 200
    infbench run --engine vllm-server --dataset chats.jsonl --request-rate 2,4 --slo-ttft 0.5
    infbench run --engine openai --base-url http://127.0.0.1:8000/v1 --model my-model --concurrency 8
    infbench run --engine vllm-server --trace mooncake.jsonl --trace-speed 0.5,1 --num-requests 500
    infbench run --engine llama.cpp-server --dataset chats.jsonl --multi-turn --think-time 1 -c 4
    infbench run --engine vllm-server --prefix-len 256 --num-prefixes 4 --input-len 512 -c 8
    infbench run --engine openai --base-url URL --model M --tokenizer ./tok --no-stream -c 4
    infbench run --executor container                              # inside the worker image
    infbench run --executor ray --ray-address 10.0.0.1:6379 --device all   # a Ray cluster
    infbench run --executor ray --device nvidia --container-runtime apptainer
    infbench run --engine vllm-server --concurrency 1 --find-max concurrency --slo-ttft-ms 500 --slo-tpot-ms 50
    infbench run --repeat 5 --price-per-hour 2.5                   # mean ± 95 % CI, USD per Mtok

**Serving as production looks**: `--find-max rate|concurrency` brackets then bisects for
the highest load at which `--goodput` (default 0.9) of the requests meet `--slo-ttft-ms`
and `--slo-tpot-ms`, each probe a stored cell (starting at the first `--concurrency` /
`--request-rate`); it stops going up when the server saturates. Server engines are
scraped for their Prometheus `/metrics` every `--scrape-interval` s (server TTFT, queue,
KV cache, prefix-cache hits). `--repeat N` measures each cell N times (`infbench results
--repeats` shows mean ± 95 % t-interval); `--price-per-hour` adds `usd_per_mtok`.
    infbench run -m model.gguf --dtype f16,q8_0,q4_K_M --perplexity wiki.test.raw   # speed and quality

**Real weights**: `--model` a `.gguf` file (llama.cpp; at its own type, or `--dtype` names
precisions derived from it, see `infbench quantize`) or a Hugging Face folder with weights
(transformers, vLLM). Each cell records that its weights are real, their SHA-256 and the
model's greedy answer to a factual question (its own tokenizer and chat template).

**Where cells run** (`--executor`): `auto` runs in-process on the CPU and, on vendor
hardware, inside the plugin's worker image when a Docker engine (or apptainer) is
present; `container` forces the worker image (`--container-runtime docker|apptainer`;
build images with `infbench containers build`); `inprocess` forces this process; `ray`
spreads the groups over a Ray cluster's nodes: the sweep is planned once per device
type of the fleet (`--device all`, or a comma list; default every accelerator type,
else the CPUs), each group runs on a node with its device, and a node lost mid-sweep
hands its remaining cells to another node of the same type (docs/cluster.md). Results are stored the same way whichever
executor ran them, with the image or node in the provenance. (`--runtime` is the old
name: none = inprocess, docker/apptainer = container.)

Cells already stored with status ok are skipped (re-run to resume an interrupted sweep;
`--force` measures again). A failed cell (OOM, crash, timeout) is stored with its error
and the sweep goes on.
"""

Opt = typer.Option


@with_config_options
def run(**values: Any) -> None:
    """``infbench run``: its options are generated from :class:`~infbench.data.run_config.RunConfig`
    (:mod:`infbench.cli.flags`); the values become one configuration, and :func:`_run` plans
    and runs it."""
    notes: list[str] = []
    config = RunConfig.from_flags(values, notes)
    if config.output.write_spec is not None:  # refused before anything is detected or planned
        check_output(config.output.write_spec, WORKER_SPEC, store_paths(config.output.store))
    # SIGTERM (Slurm/PBS time limits, `docker stop`) ends the run as Ctrl-C does.
    try:
        with signals.terminate_as_interrupt(), signals.native_call_watchdog(enabled=not config.engine.process):
            _run(config, notes)
    except KeyboardInterrupt as exc:  # before any cell ran (planning, detection)
        err.print("[yellow]interrupted[/] before any cell was measured")
        raise typer.Exit(signals.exit_status(exc)) from None


def _run(config: RunConfig, notes: list[str]) -> None:
    """Plan (:func:`infbench.execution.orchestrator.prepare`, after the engine's head start), then
    write a spec, print a dry run, or run the scenario on the chosen executor
    (:meth:`~infbench.execution.orchestrator.RunPlan.run`; the perplexity after it the same way)
    and print the summary."""
    reg = registry()
    head_start(config, reg)
    prep = prepare(config, reg)
    for n in [*notes, *prep.notes]:
        err.print(f"[yellow]note:[/] {escape(n)}")
    prep.notes.clear()
    for w in prep.warnings:
        err.print(f"[yellow]warning:[/] {w}")
    cells = prep.cells()
    output = prep.config.output
    as_json = output.as_json
    if output.write_spec is not None:
        with writing(output.write_spec, "--write-spec"):
            wspec = prep.write_spec()
        if as_json:
            print_json({"spec": str(output.write_spec), "spec_hash": wspec.spec_hash(), "cells": len(cells)})
        else:
            out.print(f"wrote worker spec {output.write_spec} ({len(cells)} cells, spec hash {wspec.spec_hash()})")
        return
    if output.dry_run:
        _print_dry_run(prep.plans, as_json, prep.fleet, prep.default)
        if prep.refused() and prep.default is not None:
            raise prep.default.refusal()
        return
    if prep.default is not None:
        _print_default_notes(prep.default)  # on stderr, also with --json
    ex = prep.executor()
    for n in prep.notes:
        err.print(f"[yellow]note:[/] {escape(n)}")
    store = store_for_writing(output.store)
    if prep.config.scenario.kind == "find_max":
        run_find_max(prep, store, as_json)
        return
    if not as_json:
        dev, fleet = prep.device, prep.fleet
        where = f", in {ex.runtime.name} worker containers" if ex.name == "container" else (
            f", on {ex.name}" if ex.name != "inprocess" else "")
        if fleet is not None:
            types = "; ".join(f"{p.device.vendor} ({p.device.model})" for p in prep.plans)
            out.print(f"infbench {__version__}: {len(cells)} cell(s) on {types}, over the {len(fleet.nodes)} "
                      f"node(s) of the Ray cluster {fleet.address}, store {store.path}")
        else:
            out.print(f"infbench {__version__}: {len(cells)} cell(s) on {dev.vendor} ({dev.model}){where}, "
                      f"store {store.path}")

    kind = "cpu" if all(p.device.kind == "cpu" for p in prep.plans) else "accelerator"
    observer = SweepProgress(cells, err, disable=as_json, device_kind=kind)  # one bar, its ETA, a line per cell
    try:
        with observer, stdout_to_stderr(as_json):
            summary = prep.run(store, observer)
    except sqlite3.Error as exc:  # the run could not even be recorded (begin): nothing was measured
        raise StoreError(f"cannot write the results store {store.path}: {describe_db_error(exc)}",
                         hint="free disk space, wait for the process holding it, or pass --store another file"
                         ) from None
    except KeyboardInterrupt as exc:
        with signals.deferred():
            _print_interrupted(store, as_json, exc)
        raise typer.Exit(signals.exit_status(exc)) from None
    quality = None
    if prep.config.scenario.kind == "perplexity":
        quality = perplexity_after_run(prep, store, as_json)
    _print_summary(store, summary, as_json, quality)
    first_run_note(store, summary, out, as_json)  # where results went, and the commands that show them
    if summary.failed or any(q["status"] != "ok" for q in quality or []):
        raise typer.Exit(3)


def _print_interrupted(store: Store, as_json: bool, exc: BaseException) -> None:
    """What an interrupted run kept: its status and counts (JSON with ``--json``)."""
    why = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    run_id = next(reversed(store.run_meta), None)
    counts = {"ok": 0, "failed": 0}
    try:
        rows = store.results(run_id=run_id, all_attempts=True) if run_id else []
        for r in rows:
            counts["ok" if r.status == "ok" else "failed"] += 1
        status = next((r["status"] for r in store.runs() if r["run_id"] == run_id), "interrupted")
    except Exception:  # noqa: BLE001 - a broken store must not hide the interruption
        status = "interrupted"
    if as_json:
        print_json({"run_id": run_id, "status": status, "store": str(store.path), **counts, "signal": why})
    err.print(f"[yellow]{why}:[/] {counts['ok']} ok and {counts['failed']} failed cell(s) of run {run_id} are "
              "stored; run the same command again to resume.")


def _print_default(default: Any) -> None:
    """The default sweep, every engine considered (best first) with its status and the
    command installing it, and the choice."""
    d = default.device
    out.print(f"default sweep for {d.vendor} ({escape(d.model)}), from "
              f"{'infbench' if default.source == 'core' else 'the ' + default.source + ' plugin'}: "
              f"{escape(default.description)}")
    out.print("engines, best first:" if not default.user_engines else "engines given with --engine:")
    for i, c in enumerate(default.candidates, 1):
        mark = "->" if c is default.chosen else "  "
        colour = "green" if c.usable else "red" if c.status == "unsupported" else "yellow"
        out.print(f" {mark} {i}. {c.engine} ({escape(c.where)}): [{colour}]{c.status}[/] {escape(c.reason)}")
        if c.fix and not c.usable:
            out.print(f"        install: {escape(c.fix)}")
    out.print(f"chosen: {escape(default.why())}")


def _print_default_notes(default: Any) -> None:
    """Before a run: the engine choice and each better engine that is missing, as notes."""
    err.print(f"[yellow]note:[/] default sweep for {default.device.vendor}: {escape(default.why())}")
    for c in default.better_missing():
        err.print(f"[yellow]note:[/] better engine not available: {c.engine} ({escape(c.where)}), {c.status}: "
                  f"{escape(c.reason)}" + (f"; install: {escape(c.fix)}" if c.fix else ""))
    if default.user_engines:
        for c in default.candidates:
            if not c.usable:
                err.print(f"[yellow]warning:[/] {c.engine} cannot run on {default.device.vendor} here ({c.status}: "
                          f"{escape(c.reason)}); its cells will be stored failed" +
                          (f"; install: {escape(c.fix)}" if c.fix else ""))


def _print_dry_run(plans: list[Any], as_json: bool, fleet: Any = None, default: Any = None) -> None:
    """The planned cells: one plan per device type (several on a Ray fleet), with the
    default sweep's engine choice when the device's default sweep is used."""
    def nodes(dev: Any) -> list[str]:
        t = fleet.type_of(dev) if fleet is not None else None
        return [n.name() for n in t.nodes] if t is not None else []


    if as_json:
        docs = [{"device": p.device.model_dump(), **({"nodes": nodes(p.device)} if fleet is not None else {}),
                 **({"adaptive": a} if (a := outline(p)) is not None else {}),
                 "cells": [{"cell_id": c.cell_id(p.device), **c.model_dump()} for c in p.cells]} for p in plans]
        if fleet is not None:
            print_json({"plans": docs})
        else:
            print_json({**docs[0], "default_sweep": default.to_dict() if default else None})
        return
    if default is not None:
        _print_default(default)
    for the_plan in plans:
        dev = the_plan.device
        on = f" on node(s) {', '.join(nodes(dev))}" if fleet is not None else ""
        out.print(f"{len(the_plan.cells)} cell(s) on {dev.vendor} ({dev.model}){on}:")
        a = outline(the_plan)
        if a is not None:
            what = "the frontier search" if a["objective"] == "front" else "the adaptive sweep"
            corners = f", the {a['corners']} series corners first" if a["corners"] else ""
            most = (f"measures at most {a['measured_at_most']} ({a['budget']}{corners}) and predicts at least "
                    f"{a['predicted_at_least']}" if a["measured_at_most"] is not None
                    else f"measures for {a['budget']}{corners} and predicts the rest")
            out.print(f"  {what} {most} of these cells")
        for g in the_plan.groups:
            out.print(f"  [bold]{g.label()}[/]")
            for c in g.cells:
                args = f"  {escape(c.args_label())}" if c.engine_args else ""
                size = c.load.label() if c.load is not None and c.load.mode != "batch" else f"b{c.batch}"
                out.print(f"    {c.cell_id(dev)}  {size} i{c.input_len} o{c.output_len}{args}")


def _journaled_row(r: Any, run_id: str) -> StoredCell:
    """A measured cell (:class:`~infbench.data.schema.CellResult`) the store refused, kept in
    the run's journal, as the summary shows it: a stored cell of ``run_id`` whose spec is the
    cell's full JSON dump and whose device, metrics and engine are as JSON has them."""
    return StoredCell.from_result(r, run_id, spec=r.cell.model_dump(mode="json"),
                                  **r.model_dump(mode="json", include={"device", "metrics", "engine"}))


def _print_summary(store: Store, summary: Any, as_json: bool, quality: list[dict] | None = None) -> None:
    rows: list[StoredCell]
    try:
        rows = store.results(run_id=summary.run_id)
    except sqlite3.Error:
        rows = []
    if summary.journaled and not summary.journal_stored:
        rows += [_journaled_row(r, summary.run_id) for r in summary.journaled]
        err.print(f"[yellow]note:[/] {len(summary.journaled)} measured cell(s) could not be written to {store.path}; "
                  f"they are kept in {summary.journal} and the next `infbench run` on this store stores them")
    elif summary.journaled:
        err.print(f"[yellow]note:[/] {len(summary.journaled)} cell(s) the store refused for a while are stored now")
    if as_json:
        print_json({"run_id": summary.run_id, "status": summary.status, "store": str(store.path),
                    "ok": len(summary.ok), "failed": len(summary.failed), "skipped": len(summary.skipped),
                    **({"not_reached": len(summary.not_reached)} if summary.not_reached else {}),
                    "predicted": len(summary.predicted), **({"scenario": summary.scenario} if summary.scenario else {}),
                    "claimed_elsewhere": len(summary.claimed), "journaled": len(summary.journaled),
                    "journal": summary.journal if not summary.journal_stored else None,
                    "cells": results_json(rows), **({"perplexity": quality_json(quality)} if quality is not None
                                                    else {})})
        return
    if rows:
        print_results(out, rows, title=f"run {summary.run_id}")
    for line in suspect_notes(rows):
        out.print(f"[yellow]suspect:[/] {escape(line)}")
    if quality:
        out.print(quality_table(quality, title="perplexity"))
    if summary.claimed:
        out.print(f"{len(summary.claimed)} cell(s) skipped: another process on this store measured them "
                  f"({escape(summary.claimed[0][1])}{', ...' if len(summary.claimed) > 1 else ''}).")
    if summary.not_reached:
        out.print(f"{len(summary.not_reached)} cell(s) not reached: the frontier stopped their series (a doubling "
                  "added under 5 % throughput, the SLO broke, or a cell failed); `infbench results --frontier` "
                  "shows the front.")
    if len(summary.skipped) > len(summary.claimed):
        out.print(f"{len(summary.skipped) - len(summary.claimed)} cell(s) skipped: already stored ok (use --force to "
                  "measure again).")
    for n in {r.power_note for r in rows if r.power_note}:
        out.print(f"[dim]energy: {n}[/]")
    for r in rows:
        behind = (r.field("client") or {}).get("behind")
        if behind:
            out.print(f"[yellow]note:[/] the client fell behind in cell {r.cell_id}: {escape('; '.join(behind))} "
                      "(its own stamps may lag by up to client_lag_p99_ms)")
    predicted = f", {len(summary.predicted)} predicted (not measured)" if summary.predicted else ""
    out.print(f"run {summary.run_id}: {len(summary.ok)} ok, {len(summary.failed)} failed, "
              f"{len(summary.skipped)} skipped{predicted}. See `infbench results`.")


def worker(
    spec: Annotated[Path, Opt("--spec", help="Worker spec (`infbench run --write-spec FILE` writes one).")],
    out_dir: Annotated[Path, Opt("--out", help="Folder for provenance.json, cells.jsonl and worker.db: a new or "
                                               "empty folder, or one an earlier worker made.")],
) -> None:
    """Run the cells of a worker spec here and write raw results and provenance to --out.

    This is what a vendor image runs (`ENTRYPOINT ["infbench", "worker"]`), with --out
    mounted from the host; a batch job on another node runs it the same way. Bring the
    results back with `infbench ingest DIR`. Each finished cell is appended to
    cells.jsonl at once, so a killed worker loses only the cell it was running. A spec
    from an infbench with another store schema, one edited after it was written, or a
    folder holding files infbench did not write there is refused (exit 2).
    """
    def observer(event: Any) -> None:
        line = event_line(event)
        if line is not None:
            print(line, file=sys.stderr, flush=True)

    try:
        check_folder(out_dir, "--out", "a worker's results",  # never a store or another file
                     files=[CELLS_FILE, QUALITY_FILE, PROVENANCE_FILE, DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm"])
        check_own_folder(out_dir, "--out", "a worker's results")  # a folder infbench did not make is the user's
        with signals.terminate_as_interrupt():  # `docker stop` sends SIGTERM
            prov = run_worker(spec, out_dir, observer)
    except KeyboardInterrupt as exc:
        err.print("[yellow]interrupted:[/] finished cells are in cells.jsonl")
        raise typer.Exit(signals.exit_status(exc)) from None
    out.print(f"worker {prov['status']}: results in {out_dir}")
    if prov["status"] not in ("completed",):
        raise typer.Exit(3)


def ingest(
    out_dir: Annotated[Path, typer.Argument(help="A worker's --out folder.")],
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Store a worker's results (its --out folder) as one run, with the worker's provenance.

    Cell ids and spec hashes are kept as the worker computed them, so the same workload
    run in another image or on another site compares cell by cell (`infbench compare`).
    """
    store = store_for_writing(store_path)
    try:
        res = do_ingest(out_dir, store, command=run_command())
    except sqlite3.Error as exc:
        raise StoreError(f"the results store {store.path} refused the ingest ({describe_db_error(exc)}); nothing "
                         "was stored", hint=f"free disk space or wait for the process holding it, then ingest "
                                            f"{out_dir} again (the folder is untouched)") from None
    cells = res.pop("cells")
    if as_json:
        print_json({**res, "cell_ids": [c.cell_id for c in cells]})
        return
    skipped = f"; {res['skipped_lines']} incomplete last line skipped" if res["skipped_lines"] else ""
    out.print(f"run {res['run_id']}: {res['ok']} ok, {res['failed']} failed ingested from {out_dir} "
              f"(worker status {res['status']}{skipped})")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command(help=RUN_HELP)(run)
    app.command()(worker)
    app.command()(ingest)
