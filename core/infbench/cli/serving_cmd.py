"""The serving additions of ``infbench run``: ``--find-max`` (SLO-constrained maximum
load; logic in :mod:`infbench.analysis.slo_search`) and the SLO flags in ms. Options and
printing only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from infbench.cli.common import err, fail, out, print_json, stdout_to_stderr
from infbench.data import metrics as M
from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.secrets import printable

if TYPE_CHECKING:  # pragma: no cover
    from infbench.store import Store


def slo_seconds(seconds: float | None, ms: float | None, name: str) -> float | None:
    """One SLO limit in s from ``--slo-NAME`` (s) or ``--slo-NAME-ms``.

    Raises:
        ConfigError: both given.
    """
    if seconds is not None and ms is not None:
        raise ConfigError(f"give --slo-{name} (s) or --slo-{name}-ms, not both")
    return ms / 1e3 if ms is not None else seconds


def run_find_max(the_plan: Any, store: Store, opts: Any, executor: Any, mode: str, ttft_s: float | None,
                 tpot_s: float | None, goodput: float, limit: float | None, probes: int, as_json: bool) -> None:
    """``--find-max``: run the search (``the_plan``, from
    :func:`infbench.execution.scenarios.find_max.find_max_plan`) on ``executor`` with a progress bar
    and print the knee and the probes (:func:`infbench.execution.orchestrator.find_max_result`).

    Exits 3 when no probe passed because every probe failed, or nothing was measured."""
    from infbench.analysis.slo_search import SloTarget, knee_text, searches
    from infbench.cli.common import ProgressObserver
    from infbench.execution.orchestrator import find_max_result

    plan = the_plan
    try:
        slo = SloTarget(ttft_s=ttft_s, tpot_s=tpot_s, goodput=goodput)
        progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=err, disable=as_json)
        observer = ProgressObserver(progress, progress.add_task("searching", total=probes))
        with progress, stdout_to_stderr(as_json):
            summary = executor.run(plan, store, opts, observer)
    except InfbenchError as exc:
        fail(exc)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/] the probes measured so far are stored.")
        raise typer.Exit(130) from None
    res, rows = find_max_result(plan, store, summary, mode)
    found = next(iter(searches(rows)), None)
    if as_json:
        print_json({"run_id": summary.run_id, "status": summary.status, "store": str(store.path), "find_max": res})
    else:
        from rich.table import Table

        t = Table(title=f"--find-max {mode}: goodput >= {goodput:g} with {slo.as_dict()}", header_style="bold")
        for c in ("load", "meets SLO", "passed", "TTFT p99 ms", "TPOT p99 ms", "server TTFT p50 ms", "saturation"):
            t.add_column(c, justify="left" if c == "saturation" else "right")
        for r in sorted(rows, key=lambda r: r["metrics"]["find_max"]["load"]):
            m, fm = r["metrics"] or {}, r["metrics"]["find_max"]

            def ms(k: str, q: str, m: dict = m) -> str:
                v = (m.get(k) or {}).get(q)
                return "-" if v is None else f"{v * 1e3:,.1f}"

            t.add_row(f"{fm['load']:g}", f"{100 * fm['fraction']:.0f} %", "[green]yes[/]" if fm["passed"] else
                      "[red]no[/]", ms(M.TTFT.key, "p99"), ms(M.TPOT.key, "p99"), ms("server_ttft_s", "p50"),
                      escape(printable(fm.get("saturated") or r.get("error") or "")))
        out.print(t)
        out.print(f"[bold]{escape(knee_text(res if res.get('probes') else (found or res)))}[/]  run "
                  f"{summary.run_id}; `infbench report` plots goodput against load.")
    if res.get("knee") is None and (not rows or all(r["status"] != "ok" for r in rows)):
        err.print(f"[red]--find-max found no load:[/] {escape(printable(res.get('stopped') or 'every probe failed'))}")
        raise typer.Exit(3)


def print_repeats(rows: list[dict[str, Any]], fmt: str) -> None:
    """``results --repeats``: :func:`~infbench.analysis.repeats.repeat_groups` as a table or JSON."""
    from infbench.analysis.repeats import repeat_groups
    from infbench.report.tables import repeats_table

    try:
        groups = repeat_groups(rows)
    except ImportError as exc:
        from infbench.cli.common import need

        need("report", exc)
    if fmt == "json":
        print_json(groups)
    elif not groups:
        err.print("no cell has two or more ok repeats (run with --repeat N)")
    else:
        out.print(repeats_table(groups))


def print_searches(rows: list[dict[str, Any]], fmt: str) -> None:
    """``results --searches``: :func:`~infbench.analysis.slo_search.searches` as tables or JSON."""
    from rich.table import Table

    from infbench.analysis.slo_search import knee_text, searches

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
