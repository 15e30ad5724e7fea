"""``infbench results``: the stored cells as a table, JSON or CSV, or the best per SLO."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from infbench.analysis.frontier import AXES, DEFAULT_INTERACTIVITIES, fronts
from infbench.cli.common import check_run_id, err, open_store, out, print_json, read_results
from infbench.cli.serving_cmd import print_repeats, print_searches
from infbench.data import metrics as M
from infbench.data.errors import ConfigError
from infbench.data.inputs import ResultsFlags, checked
from infbench.data.paths import default_store_path
from infbench.data.stored import STATUSES
from infbench.quality.gate import parse_increase, with_gate
from infbench.report.data import device_label
from infbench.report.select import best as pick
from infbench.report.tables import (
    dicts_csv,
    print_results,
    quality_json,
    quality_table,
    results_csv,
    results_json,
    state_notes,
    suspect_notes,
    unexpected_notes,
)
from infbench.store.quality import quality_results

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.stored import StoredCell

Opt = typer.Option


def results(
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    fmt: Annotated[str, Opt("--format", "-f", help="table, json or csv.")] = "table",
    run_id: Annotated[str | None, Opt("--run", help="Only this run (id prefix).")] = None,
    all_attempts: Annotated[bool, Opt("--all", help="Every attempt, not just the newest per cell.")] = False,
    status: Annotated[str | None, Opt("--status", help="Only ok, failed or predicted cells.")] = None,
    measured_only: Annotated[bool, Opt("--measured-only", help="Hide predicted cells (an adaptive sweep's "
                                       "unmeasured cells).")] = False,
    best: Annotated[bool, Opt("--best", help="Per model and device, the cell with the highest output tok/s per "
                              "device that meets the --max-* limits.")] = False,
    max_ttft: Annotated[float | None, Opt("--max-ttft", help="TTFT limit in s (with --best).")] = None,
    max_tpot: Annotated[float | None, Opt("--max-tpot", help="TPOT limit in s (with --best).")] = None,
    max_e2e: Annotated[float | None, Opt("--max-e2e", help="E2E limit in s (with --best), e.g. 25.6 as in "
                                         "Perplexity's A100/H100 study.")] = None,
    percentile: Annotated[str, Opt("--percentile", help="Statistic that must meet the limits: mean, p50, p90, "
                                   "p99, max.")] = "p99",
    repeats: Annotated[bool, Opt("--repeats", help="Per repeated cell (`run --repeat N`): mean ± 95 % "
                                 "t-interval of the headline metrics across its repeats.")] = False,
    searches: Annotated[bool, Opt("--searches", help="The `run --find-max` searches: goodput per probed load "
                                  "and the knee.")] = False,
    quality: Annotated[bool, Opt("--quality", help="Only the perplexity measurements (`infbench perplexity`), in "
                                 "every format.")] = False,
    max_ppl_increase: Annotated[str | None, Opt("--max-ppl-increase", help="Flag precisions whose perplexity "
                                                "exceeds their model's highest precision by more than this "
                                                "(e.g. 1%).")] = None,
    frontier: Annotated[bool, Opt("--frontier", help="The throughput-interactivity front per device and engine, "
                                  "pooled over configurations: Pareto-optimal cells by tok/s/user (1 / TPOT p50) and "
                                  "--axis (docs/report.md).")] = False,
    axis: Annotated[str, Opt("--axis", help="With --frontier: tok_s_per_device (default), output_tok_s_per_device, "
                             "j_per_token or usd_per_mtok.")] = "tok_s_per_device",
) -> None:
    """Show stored results: the newest attempt of every cell.

    `--best --max-e2e 25.6` keeps the cells whose p99 E2E latency is within 25.6 s and
    shows, per model and device, the one with the highest output throughput per device.

    `--repeats` summarises cells measured with `run --repeat N` (mean ± 95 % t-interval);
    `--searches` lists `run --find-max` searches (goodput per load, the knee). With a
    server engine the table shows the server's own TTFT (its /metrics) beside the client's.

    `--format json` gives each cell's spec, device, engine versions and metrics
    (latency summaries with mean/p50/p90/p99/max and the request count behind them);
    `--format csv` flattens them (`ttft_s_p50`, `ttft_s_count`, ...).

    A cell shown `predicted` was not measured: an adaptive sweep stored its predicted
    numbers with 90 % intervals (`--format json`: `metrics.interval`); `--measured-only`
    hides such cells, and a plain run of the same grid measures them.

    A cell shown `suspect` is stored with its numbers but breaks a physical bound (faster
    than its roofline floor, a utilisation above 1, fewer tokens than asked, a prefix-cache
    hit) or was not measured at steady state (`not-warm`, `unsteady`, `drift`: docs/metrics.md,
    "Steady state"); the reason is printed under the table and kept in `metrics.suspect`. A cell
    outside its calibrated prediction's 90 % interval is noted `unexpected`; the known-bad host
    states of the runs shown (a powersave governor, swap in use...) are printed last.

    Perplexity measurements follow the cells in the table (`--quality` for them alone, as
    JSON or CSV too); `--max-ppl-increase 1%` flags the precisions more than 1 % worse than
    their model's highest precision.
    """
    if status is not None and status not in STATUSES:
        raise ConfigError(f"unknown status {status!r}", hint=f"use one of: {', '.join(STATUSES)}")
    check_run_id(run_id)

    checked(ResultsFlags, fmt=fmt, status=status, max_ttft=max_ttft, max_tpot=max_tpot, max_e2e=max_e2e,
            percentile=percentile)
    gate = parse_increase(max_ppl_increase)
    if store_path is None and not default_store_path().exists():
        err.print(f"no results in {default_store_path()}; run `infbench run` first")
        return
    store = open_store(store_path, readonly=True)
    if quality:
        _quality(store, fmt, all_attempts, status, gate)
        return
    rows = read_results(store, run_id=run_id, all_attempts=all_attempts)
    if status:
        rows = [r for r in rows if r.status == status]
    if measured_only:
        rows = [r for r in rows if r.status != "predicted"]
    if frontier:
        _frontier(rows, axis, fmt)
        return
    if repeats or searches:
        (print_repeats if repeats else print_searches)(rows, fmt)
        return
    limits = {d.key: v for d, v in ((M.TTFT, max_ttft), (M.TPOT, max_tpot), (M.E2E, max_e2e)) if v is not None}
    if limits and not best:
        raise ConfigError("--max-ttft/--max-tpot/--max-e2e select with --best", hint="add --best")
    if best:
        try:
            rows = pick(rows, limits, percentile)
        except ValueError as exc:
            raise ConfigError(str(exc), hint="e.g. infbench results --best --max-e2e 25.6") from None
        if not rows and fmt == "table":
            err.print(f"no ok cell meets {limits} at {percentile}")
            raise typer.Exit(1)
    if fmt == "json":
        print_json(results_json(rows))
    elif fmt == "csv":
        sys.stdout.write(results_csv(rows) if rows else "")
    elif not rows:
        what = " ".join(f for f in (f"with status {status}" if status else "",
                                     f"in run {run_id}" if run_id else "") if f)
        err.print(f"no results {what + ' ' if what else ''}in {store.path}"
                  + ("" if what else "; run `infbench run` first"))
    else:
        print_results(out, rows, title=f"results in {store.path}")
        for line in suspect_notes(rows):
            out.print(f"[yellow]suspect:[/] {escape(line)}")
        for line in unexpected_notes(rows):
            out.print(f"[cyan]unexpected:[/] {escape(line)}")
        for line in state_notes(rows, store.runs()):
            out.print(f"[yellow]host state:[/] {escape(line)}")
        n_pred = sum(1 for r in rows if r.status == "predicted")
        if n_pred:
            out.print(f"[magenta]{n_pred} predicted cell(s)[/]: not measured (an adaptive sweep's predictions; their "
                      "90 % intervals in --format json); --measured-only hides them, a plain run measures them")
    if fmt == "table" and not best and not run_id:  # measurements belong to no run
        q = quality_results(store, all_attempts=all_attempts, status=status)
        if q:
            out.print(quality_table(with_gate(q, gate), title="perplexity", max_increase=gate))


def _frontier(rows: list[StoredCell], axis: str, fmt: str) -> None:
    """``results --frontier``: one front per (device, engine) as a table or JSON
    (:func:`infbench.analysis.frontier.fronts`)."""

    if axis not in AXES:
        raise ConfigError(f"unknown --axis {axis!r}", hint=f"use one of: {', '.join(AXES)}")
    fs = fronts(rows, axis, device_label)
    if fmt == "json":
        print_json({"axis": axis, "x": "tok_s_per_user", "fronts": [f.as_dict() for f in fs]})
        return
    if fmt == "csv":
        raise ConfigError("--frontier prints a table or JSON", hint="--format table or --format json")
    if not fs:
        err.print("no ok serving cell with a TPOT and the axis; measure one with `infbench run --preset frontier`")
        raise typer.Exit(1)
    label, _ = AXES[axis]
    for f in fs:
        t = Table(title=f"frontier: {escape(f.device)}, {f.engine} ({len(f.front)} of {len(f.points)} cells on "
                        "the front)", header_style="bold", title_justify="left")
        for c in ("tok/s/user", label, "configuration", "cell"):
            t.add_column(c, justify="right" if c != "configuration" else "left")
        for p in f.front:
            t.add_row(f"{p.x:,.1f}", f"{p.y:,.4g}", escape(p.config) + (" (predicted)" if p.predicted else ""),
                      p.cell_id[:12])
        out.print(t)
        at = ", ".join(f"{x:g}: " + (f"{v:,.4g}" if (v := f.interpolate(x)) is not None else "-")
                       for x in DEFAULT_INTERACTIVITIES)
        out.print(f"  {label} at tok/s/user {at}; area {f.area() or 0:,.4g}; "
                  f"{len(f.points) - len(f.front)} dominated")
        for note in f.certainty()["notes"]:
            out.print(f"  [yellow]note:[/] {escape(note)}")


def _quality(store, fmt: str, all_attempts: bool, status: str | None, gate: float | None) -> None:
    """``results --quality``: the perplexity measurements as a table, JSON or CSV."""
    rows = with_gate(quality_results(store, all_attempts=all_attempts, status=status), gate)
    if fmt == "json":
        print_json(quality_json(rows))
    elif fmt == "csv":
        sys.stdout.write(dicts_csv([{k: v for k, v in r.items() if k != "result"} for r in quality_json(rows)]))
    elif not rows:
        err.print(f"no perplexity measurements in {store.path}; run `infbench perplexity` first")
    else:
        out.print(quality_table(rows, title=f"perplexity in {store.path}", max_increase=gate))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(results)
