"""``infbench report`` (HTML and figures), ``infbench export`` (CSV/JSON for other tools)
and ``infbench compare`` (two runs, stores or sites, cell by cell)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from infbench.cli.common import (
    JSON_HELP,
    check_run_id,
    err,
    need,
    open_store,
    out,
    plugin_manager,
    print_json,
    read_results,
    split,
    store_paths,
    writing,
)
from infbench.data.errors import ConfigError
from infbench.data.inputs import CompareFlags, ExportFlags, ReportFlags, checked
from infbench.data.outputs import COMPARE_HTML, EXPORT_JSON, check_folder, check_output, json_text, write_output
from infbench.data.paths import default_store_path
from infbench.data.secrets import printable
from infbench.quality.gate import parse_increase, with_gate
from infbench.report.compare import (
    COMPARED,
    compare_precisions,
    compare_rows,
    load_imported,
    load_side,
    write_compare_html,
)
from infbench.report.data import (
    LIB_CSV,
    attach_perplexity,
    device_label,
    flat_row,
    lib_csv,
    lib_rows,
    limits_resolver,
    select_rows,
)
from infbench.report.html import write_report
from infbench.report.imports.export import INFERENCEX_JSON, VLLM_BENCH_JSON, inferencex_rows, vllm_bench_results
from infbench.report.serving import serving_html, steady_html, write_serving_figures
from infbench.report.static import write_figures
from infbench.report.tables import RESULTS_CSV, print_table, results_csv, results_json
from infbench.store.quality import quality_results

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.stored import StoredCell

Opt = typer.Option
ListOpt = list[str] | None


def _filtered(store, run_id, model, device, engine):
    return select_rows(read_results(store, run_id=run_id), split(model, "--model"), split(device, "--device"),
                       split(engine, "--engine"))


def _read_store(store_path, run_id):
    """The store opened read-only, or None when the default store does not exist yet."""
    check_run_id(run_id)
    if store_path is None and not default_store_path().exists():
        return None
    return open_store(store_path, readonly=True)


def report(
    out_dir: Annotated[Path, Opt("--out", "-o", help="Folder for index.html and figures/.")] = Path("infbench-report"),
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    run_id: Annotated[str | None, Opt("--run", help="Only this run (id prefix).")] = None,
    model: Annotated[ListOpt, Opt("--model", "-m", help="Only these models.")] = None,
    device: Annotated[ListOpt, Opt("--device", help="Only devices whose vendor or name contains this.")] = None,
    engine: Annotated[ListOpt, Opt("--engine", "-e", help="Only these engines.")] = None,
    static: Annotated[bool, Opt("--static/--no-static", help="Also write PNG and SVG figures for papers "
                                "(matplotlib).")] = True,
    title: Annotated[str, Opt("--title", help="Page title.")] = "infbench report",
    slo_ttft: Annotated[float | None, Opt("--slo-ttft", help="TTFT p99 limit (s) marked in the trade-off figure "
                                          "(editable in the page).")] = None,
    slo_tpot: Annotated[float | None, Opt("--slo-tpot", help="TPOT p99 limit (s) marked in the trade-off "
                                          "figure.")] = None,
    max_ppl_increase: Annotated[str | None, Opt("--max-ppl-increase", help="Mark precisions whose perplexity "
                                                "exceeds their model's highest precision by more than this (e.g. "
                                                "1%) in the perplexity figure.")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Write an interactive HTML report of stored results (one self-contained file that
    works offline) and, with `--static`, PNG/SVG figures.

    Figures: throughput vs batch size, an input x output heatmap, TTFT and ITL bars,
    power and tokens per joule, the latency-throughput trade-off with its Pareto front and
    the SLO-meeting cells, measured latency against the roofline floor, and perplexity
    against throughput per precision (cells whose model, engine and dtype have a stored
    `infbench perplexity`; LLM-Inference-Bench Figs. 10/29); with serving data also the
    server's own TTFT beside the client's, goodput against load for `run --find-max`
    searches (the knee marked), the spread of `--repeat` cells (mean ± 95 % CI) and device
    telemetry (utilisation, clocks, temperature, throttling). The page has
    filters (device, engine, model, precision, batch, lengths, tp, run) and axis
    selectors. Example: `infbench report --out report && xdg-open report/index.html`.
    """
    checked(ReportFlags, slo_ttft=slo_ttft, slo_tpot=slo_tpot, title=title)
    protect = store_paths(store_path)
    check_folder(out_dir, "--out", "a report", protect, files=["index.html"])
    figures = out_dir / "figures"
    if figures.is_dir():  # each figure the report may write is a regular file or absent
        check_folder(figures, "--out", "a report's figures", protect,
                     files=sorted(f.name for f in figures.iterdir() if f.suffix in (".png", ".svg", ".pdf")))
    elif os.path.lexists(figures):
        check_folder(figures, "--out", "a report's figures", protect)
    store = _read_store(store_path, run_id)
    rows = _filtered(store, run_id, model, device, engine) if store else []
    if not rows:
        filtered = run_id or model or device or engine
        where = store.path if store else store_path or "the default store"
        err.print(f"no results to report in {where}"
                  + (" for these filters" if filtered else "; run `infbench run` first"))
        raise typer.Exit(1)
    resolve = limits_resolver(plugin_manager())
    flat = [flat_row(r, resolve) for r in rows]

    gate = parse_increase(max_ppl_increase)
    with_ppl = attach_perplexity(flat, with_gate(quality_results(store, status="ok"), gate))
    try:
        with writing(out_dir):
            page = write_report(flat, out_dir, title, slo_ttft * 1e3 if slo_ttft else None,
                                slo_tpot * 1e3 if slo_tpot else None, extra_html=serving_html(rows, flat)
                                + steady_html(rows, store.runs()),
                                ppl_gate=gate, protect=protect)
            figs = []
            if static:
                figs = (write_figures(flat, out_dir / "figures", protect=protect)
                        + write_serving_figures(rows, flat, out_dir / "figures", protect=protect))
    except ImportError as exc:
        raise need("report", exc) from None
    backfilled = sum(1 for f in flat if f["roofline_backfilled"])
    if as_json:
        print_json({"html": str(page), "figures": [str(p) for p in figs], "cells": len(flat),
                    "roofline_backfilled": backfilled, "cells_with_perplexity": with_ppl,
                    "suspect": sum(1 for f in flat if f["status"] == "ok" and f.get("suspect"))})
        return
    note = f"; roofline computed now for {backfilled} older cells" if backfilled else ""
    n_suspect = sum(1 for f in flat if f["status"] == "ok" and f.get("suspect"))
    note += f"; {n_suspect} suspect cells listed on the page" if n_suspect else ""
    out.print(f"[green]wrote[/] {page} ({len(flat)} cells{note})")
    if figs:
        out.print(f"[green]wrote[/] {len(figs)} figure files in {out_dir / 'figures'}")


def export(
    fmt: Annotated[str, Opt("--format", "-f", help="lib-csv (LLM-Inference-Bench's CSV columns), csv, json, "
                            "inferencex (InferenceX's result rows) or vllm-bench (vllm bench serve's result JSON, "
                            "one file per cell into the --out folder).")] = "lib-csv",
    out_file: Annotated[Path | None, Opt("--out", "-o", help="File to write (default: stdout); with vllm-bench, a "
                                         "folder.")] = None,
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    run_id: Annotated[str | None, Opt("--run", help="Only this run (id prefix).")] = None,
    model: Annotated[ListOpt, Opt("--model", "-m", help="Only these models.")] = None,
    device: Annotated[ListOpt, Opt("--device", help="Only devices whose vendor or name contains this.")] = None,
    engine: Annotated[ListOpt, Opt("--engine", "-e", help="Only these engines.")] = None,
) -> None:
    """Export stored results for other tools.

    `--format lib-csv` writes LLM-Inference-Bench's columns (Hardware, Num of Hardware,
    Framework, Model, Input Output Length, Batch Size, Latency, Throughput, then Input
    Length, Output Length, TTFT Latency, end_latency, avg_power in mW, and infbench's
    suspect: why a cell breaks physics, empty when sound) for ok batch-mode cells, so its
    dashboard (InferenceGraphPlotter) and notebooks read infbench results.

    `--format inferencex` writes InferenceX's result rows (the JSON its app reads:
    tput_per_gpu counts input and output tokens, interactivity 1 / TPOT, latencies in s) for
    ok cells with a concurrency; `--format vllm-bench --out DIR` one `vllm bench serve`
    result JSON per ok serving cell. `infbench import` reads both back to the same figures.
    """
    kind = {"json": EXPORT_JSON, "csv": RESULTS_CSV, "lib-csv": LIB_CSV,
            "inferencex": INFERENCEX_JSON}.get(fmt, RESULTS_CSV)  # fmt checked next
    protect = store_paths(store_path)
    checked(ExportFlags, fmt=fmt)
    if fmt == "vllm-bench":
        if not out_file:
            raise ConfigError("--format vllm-bench writes one file per cell: give --out a folder",
                              hint="e.g. infbench export --format vllm-bench --out vllm-results/")
        check_folder(out_file, "--out", "vllm-bench results", protect)
    elif out_file:
        check_output(out_file, kind, protect)  # refused before the store is read
    store = _read_store(store_path, run_id)
    rows = _filtered(store, run_id, model, device, engine) if store else []
    if fmt == "vllm-bench":
        assert out_file is not None  # required above
        results = vllm_bench_results(rows)
        with writing(out_file):
            for name, d in results:
                write_output(out_file / name, json_text(d, indent=None) + "\n", VLLM_BENCH_JSON, protect)
        err.print(f"wrote {len(results)} vllm bench result file(s) in {out_file}"
                  + ("" if results else " (no ok serving cell with a duration and an output throughput)"))
        return
    if fmt == "inferencex":
        ix = inferencex_rows(rows)
        text = json_text(ix, indent=None) + "\n"
        if not ix:
            err.print("[yellow]no ok cell with a concurrency and a total throughput to export[/]")
    elif fmt == "json":
        text = json_text(results_json(rows)) + "\n"
    elif fmt == "csv":
        text = results_csv(rows) if rows else ""
    else:
        text = lib_csv(rows)
        if not lib_rows(rows):
            err.print("[yellow]no ok batch-mode cells to export[/] (LLM-Inference-Bench's layout has no "
                      "serving-mode columns)")
    n_suspect = sum(1 for r in rows if r.status == "ok" and r.suspect)
    if n_suspect:
        err.print(f"[yellow]{n_suspect} suspect cell(s)[/]: exported with their reason (lib-csv: column suspect; "
                  "csv: suspect; json: metrics.suspect)")
    n_pred = sum(1 for r in rows if r.status == "predicted")
    if n_pred:
        err.print(f"[magenta]{n_pred} predicted cell(s)[/] (not measured): " + (
            "left out of lib-csv (measurements only)" if fmt == "lib-csv" else
            "labelled status predicted, with their 90 % intervals (csv: *_lo/*_hi; json: metrics.interval)"))
    if out_file:
        with writing(out_file):
            write_output(out_file, text, kind, protect)
        err.print(f"wrote {out_file}")
    else:
        sys.stdout.write(text)


def _compare_frontier(a: list[StoredCell], b: list[StoredCell], la: str, lb: str, axis: str, as_json: bool) -> None:
    """``compare --frontier``: the fronts of both sides paired by (device, engine), or the one
    front of each side, compared at equal interactivity (:func:`infbench.analysis.frontier.compare`).

    Raises:
        typer.Exit: 2 for an unknown axis or fronts that cannot be paired; 1 when no pair
            shares an interactivity.
    """
    from infbench.analysis.frontier import AXES, compare, fronts  # noqa: PLC0415 - name clash: compare

    if axis not in AXES:
        raise ConfigError(f"unknown --axis {axis!r}", hint=f"use one of: {', '.join(AXES)}")
    fa, fb = fronts(a, axis, device_label), fronts(b, axis, device_label)
    ka, kb = {(f.device, f.engine): f for f in fa}, {(f.device, f.engine): f for f in fb}
    pairs = [(ka[k], kb[k]) for k in ka if k in kb]
    if not pairs and len(fa) == 1 and fb:  # one front against each of B's (an imported publication's)
        pairs = [(fa[0], f) for f in fb]
    elif not pairs and len(fb) == 1 and fa:
        pairs = [(f, fb[0]) for f in fa]
    if not pairs:
        names = lambda fs: ", ".join(f"{f.device} {f.engine}" for f in fs) or "none"  # noqa: E731
        raise ConfigError(f"no front to pair: A has {names(fa)}; B has {names(fb)}",
                         hint="compare runs (or stores) that hold one device and engine each, or the same ones")
    res = [compare(x, y) for x, y in pairs]
    if as_json:
        print_json({"a": la, "b": lb, "axis": axis, "comparisons": res})
        if all(r["overlap"] is None for r in res):  # as documented: nothing comparable exits 1, --json too
            raise typer.Exit(1)
        return
    label = AXES[axis][0]
    out.print(f"x: tok/s/user = 1 / TPOT p50 (vLLM's TPOT: AIPerf's and guidellm's ITL); y: {label}; imported "
              "figures converted to these definitions (docs/metrics.md, importing other tools' results)")
    for r in res:
        t = Table(title=f"{label}: B / A at equal interactivity (A = {escape(r['a'])}, B = {escape(r['b'])})",
                  header_style="bold")
        for c in ("tok/s/user", "A", "B", "B / A"):
            t.add_column(c, justify="right")
        for p in r["points"]:
            t.add_row(f"{p['tok_s_per_user']:,.1f}", "-" if p["a"] is None else f"{p['a']:,.4g}",
                      "-" if p["b"] is None else f"{p['b']:,.4g}", "-" if p["ratio"] is None else f"{p['ratio']:.3f}")
        out.print(t)
        if r["overlap"] is None:
            out.print("  the fronts share no interactivity: nothing to compare at equal tok/s/user")
        else:
            g = r["geomean_ratio"]
            out.print(f"  overlap {r['overlap'][0]:,.1f}-{r['overlap'][1]:,.1f} tok/s/user; geometric mean B / A "
                      + ("-" if g is None else f"{g:.3f}"))
    if all(r["overlap"] is None for r in res):
        raise typer.Exit(1)


def compare(
    run_a: Annotated[str | None, typer.Argument(help="Side A: run id (prefix), results .db file, or FILE.db:RUN. "
                                                "With --dtypes it may be left out (the whole store).")] = None,
    run_b: Annotated[str | None, typer.Argument(help="Side B, the same forms (default: side A).")] = None,
    store_path: Annotated[Path | None, Opt("--store", help="Database for run ids.")] = None,
    html_out: Annotated[Path | None, Opt("--out", "-o", help="Also write a plot of the ratios (HTML).")] = None,
    dtypes: Annotated[str | None, Opt("--dtypes", help="Compare two precisions, A,B (e.g. f16,q4_0): cells at A "
                                      "against the same workloads at B, and the perplexity change.")] = None,
    max_ppl_increase: Annotated[str | None, Opt("--max-ppl-increase", help="With --dtypes: flag a perplexity "
                                                "change above this (e.g. 1%).")] = None,
    frontier: Annotated[bool, Opt("--frontier", help="Compare the two sides' throughput-interactivity fronts: "
                                  "B's throughput per device over A's at equal tok/s/user (docs/report.md).")] = False,
    axis: Annotated[str, Opt("--axis", help="With --frontier: tok_s_per_device (default), output_tok_s_per_device, "
                             "j_per_token or usd_per_mtok.")] = "tok_s_per_device",
    against: Annotated[str | None, Opt("--against", help="Side B from imported results: imported:SOURCE[:DEVICE"
                                       "[:ENGINE]] (e.g. imported:inferencex:mi300x:sglang) instead of a run.")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Compare two sets of results cell by cell: ratios B / A of throughput, latency,
    power and tokens per joule, for cells with the same workload (spec hash).

    `--frontier` compares fronts instead: per device and engine on both sides (or the one
    front of a side against each front of the other), B / A of the throughput per device at
    equal interactivity, read where both fronts are defined; `infbench compare --frontier
    runA runB`. `--against imported:inferencex:mi300x` takes side B from an imported
    publication (`infbench import`): `infbench compare --frontier MYRUN --against
    imported:inferencex:mi300x` reads the gap to InferenceX's MI300X fronts.

    Examples: `infbench compare 3f2a 9c1d` (two runs in the store);
    `infbench compare siteA.db siteB.db` (two sites); `--out ratios.html` plots them;
    `infbench compare --dtypes f16,q4_0 --max-ppl-increase 1%` (two precisions in the
    store: speed ratios and the perplexity change, flagged beyond 1 %).
    """
    pair = None
    protect = store_paths(store_path, *(s.split(":")[0] for s in (run_a, run_b) if s and ".db" in s))
    checked(CompareFlags, run_a=run_a, run_b=run_b, dtypes=dtypes, against=against)
    if html_out:
        check_output(html_out, COMPARE_HTML, protect)
    if dtypes is not None:
        pair = split([dtypes], "--dtypes")
        if not pair or len(pair) != 2:
            raise ConfigError(f"--dtypes takes two dtypes, got {dtypes!r}", hint="e.g. --dtypes f16,q4_0")
    elif run_a is None or (run_b is None and against is None):
        raise ConfigError("compare needs two sides (A B, or A --against imported:...), or --dtypes A,B",
                          hint="e.g. infbench compare 3f2a 9c1d, or infbench compare --dtypes f16,q4_0")
    if against is not None and (run_b is not None or dtypes is not None):
        raise ConfigError("--against replaces side B", hint="give A and --against, without B or --dtypes")

    gate = parse_increase(max_ppl_increase)
    if run_a is not None:
        la, a = load_side(run_a, store_path)
    else:
        la, a = str(open_store(store_path, readonly=True).path), None
    b: list[StoredCell] | None
    if against is not None:
        lb, b = load_imported(against, store_path)
    else:
        lb, b = load_side(run_b, store_path) if run_b is not None else (la, a)
    if frontier:
        assert a is not None and b is not None  # two sides were required above
        _compare_frontier(a, b, la, lb, axis, as_json)
        return
    if pair is not None:
        store = open_store(store_path, readonly=True)
        a = a if a is not None else store.results()
        b = b if b is not None else a
        res = compare_precisions(a, b, pair[0], pair[1], quality_results(store, status="ok"), gate)
        la, lb = f"{la} {pair[0]}", f"{lb} {pair[1]}"
    else:
        assert a is not None and b is not None  # two sides were required above
        res = compare_rows(a, b)
    if html_out:
        try:
            with writing(html_out):
                write_compare_html(res, la, lb, html_out, protect)
        except ImportError as exc:
            raise need("report", exc) from None
    if as_json:
        print_json({"a": la, "b": lb, **res})
        return
    if res.get("perplexity") and pair is not None:
        _print_ppl_change(res["perplexity"], pair, gate)
    if not res["pairs"]:
        err.print(f"no cell is ok on both sides ({res['only_a']} only in A, {res['only_b']} only in B)")
        if res.get("perplexity"):
            return
        raise typer.Exit(1)
    t = Table(title=f"B / A  (A = {escape(la)}, B = {escape(lb)})", header_style="bold")
    t.add_column("cell", overflow="fold")
    keys = [k for k in COMPARED if any(p["ratio"][k] is not None for p in res["pairs"])]
    for k in keys:
        t.add_column(COMPARED[k].header, justify="right")

    def cell(v: float | None, higher_better: bool) -> str:
        if v is None:
            return "-"
        good = (v > 1.02) if higher_better else (v < 0.98)
        bad = (v < 0.98) if higher_better else (v > 1.02)
        return f"[green]{v:.3f}[/]" if good else (f"[red]{v:.3f}[/]" if bad else f"{v:.3f}")

    higher = {k: COMPARED[k].better == "higher" for k in keys}
    for p in res["pairs"]:
        t.add_row(escape(printable(p["label"])), *[cell(p["ratio"][k], higher[k]) for k in keys])
    t.add_row("[bold]geometric mean[/]", *[cell(res["geomean"][k], higher[k]) for k in keys])
    print_table(out, t, keep=1)
    out.print(f"{len(res['pairs'])} matched cells; {res['only_a']} only in A, {res['only_b']} only in B "
              "(matched by workload spec hash, or by workload with the engine arguments that differ shown; "
              "green = B better)")
    if html_out:
        out.print(f"[green]wrote[/] {html_out}")


def _print_ppl_change(rows: list[dict], pair: list[str], gate: float | None) -> None:
    """The perplexity table of ``compare --dtypes``."""
    t = Table(title=f"perplexity {pair[1]} vs {pair[0]}", header_style="bold")
    for c in ("model", "engine", "text", f"PPL {pair[0]}", f"PPL {pair[1]}", "change"):
        t.add_column(c, justify="right" if c.startswith(("PPL", "change")) else "left")
    for r in rows:
        ch = f"{r['change'] * 100:+.2f} %"
        if r["beyond_gate"] and gate is not None:
            ch = f"[red]{ch} > {gate * 100:g} %[/]"
        elif r["beyond_gate"] is False:
            ch = f"[green]{ch}[/]"
        t.add_row(escape(Path(r["model"]).name), r["engine"], f"{Path(r['text_path'] or '').name} n_ctx {r['n_ctx']}",
                  f"{r['ppl_a']:.4f} +/- {r['stderr_a']:.4f}", f"{r['ppl_b']:.4f} +/- {r['stderr_b']:.4f}", ch)
    out.print(t)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(report)
    app.command()(export)
    app.command()(compare)
