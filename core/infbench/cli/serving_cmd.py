"""The serving additions of ``infbench run``: ``--find-max`` (SLO-constrained maximum
load; logic in :mod:`infbench.analysis.slo_search`) and the ``results`` views of searches and
repeats. Printing only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from infbench.analysis.repeats import repeat_groups
from infbench.analysis.slo_search import SloTarget, knee_text, searches
from infbench.cli.common import ProgressObserver, err, need, out, print_json, stdout_to_stderr
from infbench.data import metrics as M
from infbench.data.secrets import printable
from infbench.report.tables import repeats_table

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.stored import StoredCell
    from infbench.store import Store


def run_find_max(prep: Any, store: Store, as_json: bool) -> None:
    """``--find-max``: run the search (the :class:`~infbench.execution.orchestrator.RunPlan`
    whose scenario is the search; its :meth:`~infbench.execution.orchestrator.RunPlan.run`, the
    path of every scenario) with a progress bar and print the knee and the probes
    (:meth:`~infbench.execution.orchestrator.RunPlan.find_max`).

    Exits 3 when no probe passed because every probe failed, or nothing was measured."""
    sc = prep.config.scenario
    mode, goodput, probes = sc.mode, sc.goodput, sc.max_probes
    slo = SloTarget(ttft_s=prep.config.slo.ttft_s, tpot_s=prep.config.slo.tpot_s, goodput=goodput)
    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=err, disable=as_json)
    observer = ProgressObserver(progress, progress.add_task("searching", total=probes))
    try:
        with progress, stdout_to_stderr(as_json):
            summary = prep.run(store, observer)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/] the probes measured so far are stored.")
        raise typer.Exit(130) from None
    res, rows = prep.find_max(store, summary)
    found = next(iter(searches(rows)), None)
    if as_json:
        print_json({"run_id": summary.run_id, "status": summary.status, "store": str(store.path), "find_max": res})
    else:
        t = Table(title=f"--find-max {mode}: goodput >= {goodput:g} with {slo.as_dict()}", header_style="bold")
        for c in ("load", "meets SLO", "passed", "TTFT p99 ms", "TPOT p99 ms", "server TTFT p50 ms", "saturation"):
            t.add_column(c, justify="left" if c == "saturation" else "right")
        for r in sorted(rows, key=lambda r: r.field("find_max")["load"]):
            fm = r.field("find_max")

            def ms(d: M.MetricDef, q: str, m: dict[str, Any] = r.metrics or {}) -> str:
                v = d.value(m, q)
                return "-" if v is None else f"{v * 1e3:,.1f}"

            t.add_row(f"{fm['load']:g}", f"{100 * fm['fraction']:.0f} %", "[green]yes[/]" if fm["passed"] else
                      "[red]no[/]", ms(M.TTFT, "p99"), ms(M.TPOT, "p99"), ms(M.SERVER_TTFT, "p50"),
                      escape(printable(fm.get("saturated") or r.error or "")))
        out.print(t)
        out.print(f"[bold]{escape(knee_text(res if res.get('probes') else (found or res)))}[/]  run "
                  f"{summary.run_id}; `infbench report` plots goodput against load.")
    if res.get("knee") is None and (not rows or all(r.status != "ok" for r in rows)):
        err.print(f"[red]--find-max found no load:[/] {escape(printable(res.get('stopped') or 'every probe failed'))}")
        raise typer.Exit(3)


def print_repeats(rows: list[StoredCell], fmt: str) -> None:
    """``results --repeats``: :func:`~infbench.analysis.repeats.repeat_groups` as a table or JSON."""
    try:
        groups = repeat_groups(rows)
    except ImportError as exc:
        raise need("report", exc) from None
    if fmt == "json":
        print_json(groups)
    elif not groups:
        err.print("no cell has two or more ok repeats (run with --repeat N)")
    else:
        out.print(repeats_table(groups))


def print_searches(rows: list[StoredCell], fmt: str) -> None:
    """``results --searches``: :func:`~infbench.analysis.slo_search.searches` as tables or JSON."""

    found = searches(rows)
    if fmt == "json":
        print_json(found)
        return
    if not found:
        err.print("no --find-max search in these results")
        return
    for s in found:
        t = Table(title=f"{s['label']}: --find-max {s['mode']}, goodput >= {s['goodput']:g} with {s['slo']}",
                  header_style="bold")
        for c in ("load", "meets SLO", "passed", "goodput req/s", "server waiting max", "saturation"):
            t.add_column(c, justify="left" if c == "saturation" else "right")
        for p in s["points"]:
            g = p["goodput_req_s"]
            w = p.get("server_waiting_max")
            t.add_row(f"{p['load']:g}", f"{100 * p['fraction']:.0f} %", "yes" if p["passed"] else "no",
                      "-" if g is None else f"{g:.2f}", "-" if w is None else f"{w:g}", escape(p["saturated"] or ""))
        out.print(t)
        out.print(f"[bold]{escape(knee_text(s))}[/]")
