"""Report sections for serving as production looks: the server's own TTFT beside the
client's, goodput against load for ``--find-max`` searches (the knee marked), the spread
of repeated cells (mean ± 95 % t-interval), and device telemetry (utilisation, clocks,
temperature, throttling).

:func:`serving_html` gives the HTML sections the interactive report appends (plotly
figures drawn once, from all cells given, plus tables); :func:`write_serving_figures`
draws the same figures as PNG/SVG with matplotlib. Both skip what the cells do not have.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infbench.analysis.repeats import SHOWN, fmt_ci, repeat_groups
from infbench.analysis.slo_search import searches
from infbench.data import metrics as M
from infbench.data.outputs import html_json, log_ticks, plotly_text
from infbench.data.secrets import printable, redact
from infbench.data.stored import StoredCell
from infbench.report.static import LITERAL_TEXT, save_figure

#: Ids of the HTML figures, when their data exists.
SERVING_FIGURES = ("fig-server-ttft", "fig-goodput", "fig-repeats")


#: The columns the figures and tables compare (labels from :mod:`infbench.data.metrics`).
_TTFT, _SERVER_TTFT, _TPUT = M.TTFT.col("p50"), M.SERVER_TTFT.col("p50"), M.OUTPUT_TOK_S.col()
#: The server's own metrics in the report's table, after the client's TTFT.
_SERVER_TABLE = (M.SERVER_TTFT.col("p50"), M.SERVER_TPOT.col("p50"), M.SERVER_WAITING.col("max"),
                 M.SERVER_KV_CACHE_USAGE.col("max"), M.SERVER_PREFIX_CACHE_HIT_RATE.col(), M.SERVER_PREEMPTIONS.col())
#: The telemetry table's channels.
_TELEMETRY_TABLE = (M.UTIL_PCT.col("mean"), M.CLOCK_MHZ.col("mean"), M.TEMP_C.col("max"))


def _server_rows(flat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in flat if f["status"] == "ok" and f.get(_SERVER_TTFT.key) is not None]


def _telemetry_rows(flat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    util = M.UTIL_PCT.col("mean").key
    return [f for f in flat if f["status"] == "ok" and (f.get(util) is not None or f.get("throttled"))]


def serving_figures(rows: Sequence[StoredCell], flat: list[dict[str, Any]]) -> dict[str, Any]:
    """Plotly figures (``plotly.graph_objects.Figure``) by id, for the cells that have the data.

    Args:
        rows: ``Store.results()`` items (for searches and repeats).
        flat: the same cells as :func:`infbench.report.data.flat_row` rows.
    """
    import plotly.graph_objects as go


    figs: dict[str, Any] = {}
    srv = _server_rows(flat)
    if srv:
        f = go.Figure()
        labels = [r["label"] for r in srv]
        f.add_bar(name=f"client {_TTFT.phrase}", x=labels, y=[r[_TTFT.key] for r in srv])
        f.add_bar(name=f"{_SERVER_TTFT.phrase}, its /metrics", x=labels, y=[r[_SERVER_TTFT.key] for r in srv])
        f.update_layout(title="TTFT: the client's measurement beside the server's own", barmode="group",
                        yaxis_title=_TTFT.flat_unit, xaxis_tickfont_size=8, height=430)
        figs["fig-server-ttft"] = f
    found = searches(rows)
    if found:
        f = go.Figure()
        for s in found:
            pts = s["points"]
            name = f"{s['label']} ({s['mode']})"
            f.add_scatter(x=[p["load"] for p in pts], y=[p["fraction"] for p in pts], mode="lines+markers", name=name,
                          marker={"symbol": ["circle" if p["passed"] else "x" for p in pts], "size": 10},
                          text=[p["saturated"] or ("passes" if p["passed"] else "fails") for p in pts],
                          hovertemplate="load %{x}: %{y:.0%} meet the SLO<br>%{text}<extra></extra>")
            if s["knee"] is not None:
                f.add_vline(x=s["knee"], line_dash="dot", annotation_text=f"knee {s['knee']:g}")
            f.add_hline(y=s["goodput"], line_dash="dash", line_color="grey")
        mode = found[0]["mode"]
        f.update_layout(title="Goodput against load: share of requests meeting the SLO (x = failed probe)",
                        xaxis_title="requests in flight" if mode == "concurrency" else "requests per s",
                        xaxis_type="log", yaxis_title="fraction meeting the SLO", yaxis_range=[0, 1.05], height=430)
        f.update_xaxes(**log_ticks(p["load"] for s in found for p in s["points"]))  # whole values, no bare digit
        figs["fig-goodput"] = f
    groups = _repeat_groups(rows)
    if groups:
        f = go.Figure()
        for g in groups:
            m = g["metrics"].get(_TPUT.key)  # metrics-dict: repeat_groups' t-interval of the column
            if not m:
                continue
            f.add_scatter(x=[g["label"]] * len(m["values"]), y=m["values"], mode="markers",
                          name=f"{g['label']} repeats", marker={"size": 7, "opacity": 0.6}, showlegend=False)
            f.add_scatter(x=[g["label"]], y=[m["mean"]], mode="markers", name="mean ± 95 % CI",
                          error_y={"type": "data", "array": [m["ci95"] or 0]}, marker={"size": 12, "symbol": "diamond"},
                          showlegend=False)
        f.update_layout(title=f"Repeats: {_TPUT.phrase} of each repeat, mean ± 95 % t-interval",
                        yaxis_title=_TPUT.label, xaxis_tickfont_size=8, height=430)
        figs["fig-repeats"] = f
    return figs


def _repeat_groups(rows: Sequence[StoredCell]) -> list[dict[str, Any]]:
    try:
        return repeat_groups(rows)
    except ImportError:  # scipy missing: the section is left out
        return []


def _table(head: list[str], body: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        return html.escape(printable(redact(str(v))))

    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    tr = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in body)
    return f'<table class="serving"><thead><tr>{th}</tr></thead><tbody>{tr}</tbody></table>'


def serving_html(rows: Sequence[StoredCell], flat: list[dict[str, Any]]) -> str:
    """The report's serving sections (figures and tables), or ``""`` when no cell has any of
    server metrics, searches, repeats or telemetry.

    Raises:
        ImportError: plotly is missing.
    """
    figs = serving_figures(rows, flat)
    titles = {"fig-server-ttft": "Server TTFT vs client TTFT", "fig-goodput": "Goodput vs load (--find-max)",
              "fig-repeats": "Repeats and their spread"}
    parts, scripts = [], []
    for fid, fig in figs.items():
        parts.append(f'<section><h2>{titles[fid]}</h2><div id="{fid}" class="fig"></div></section>')
        payload = html_json(plotly_text(json.loads(fig.to_json())))  # <, > and & escaped: no label ends the script
        scripts.append(f"(function(){{const f={payload};Plotly.newPlot('{fid}',f.data,f.layout,"
                       "{responsive:true});})();")
    srv = _server_rows(flat)
    if srv:
        body = [[r["label"], r["server_name"], r[_TTFT.key], *(r[c.key] for c in _SERVER_TABLE)] for r in srv]
        parts.append("<section><h2>The server's own metrics (Prometheus /metrics, per cell)</h2>" + _table(
            ["cell", "server", f"client {_TTFT.phrase}", *(c.phrase for c in _SERVER_TABLE)], body) + "</section>")
    tel = _telemetry_rows(flat)
    if tel:
        body = [[r["label"], *(r[c.key] for c in _TELEMETRY_TABLE),
                 ("yes: " + (r["throttle_reasons"] or "")) if r["throttled"] else "no"] for r in tel]
        n = sum(1 for r in tel if r["throttled"])
        parts.append(f"<section><h2>Device telemetry ({n} throttled cell{'s' if n != 1 else ''})</h2>" + _table(
            ["cell", *(c.phrase for c in _TELEMETRY_TABLE), "throttled"], body) + "</section>")
    groups = _repeat_groups(rows)
    if groups:
        stats = [g["metrics"] for g in groups]  # metrics-dict: repeat_groups' per-column t-intervals
        shown = [c for c in SHOWN if any(c.key in st for st in stats)]
        body = [[g["label"], g["n"], *[fmt_ci(st[c.key]) if c.key in st else "-" for c in shown],
                 "-" if not (st.get(_TPUT.key) or {}).get("cv") else
                 f"{100 * st[_TPUT.key]['cv']:.1f} %"] for g, st in zip(groups, stats, strict=True)]
        parts.append("<section><h2>Repeats: mean ± 95 % t-interval</h2>" + _table(
            ["cell", "n", *[c.header for c in shown], f"CV {_TPUT.header}"], body) + "</section>")
    if not parts:
        return ""
    style = ("<style>table.serving{border-collapse:collapse;font-size:12px;width:100%}table.serving td,"
             "table.serving th{border-bottom:1px solid #eee;padding:3px 6px;text-align:right}"
             "table.serving td:first-child,table.serving th:first-child{text-align:left}</style>")
    script = f"<script>{''.join(scripts)}</script>" if scripts else ""
    return style + "".join(parts) + script


def steady_html(rows: Sequence[StoredCell], runs: list[dict[str, Any]]) -> str:
    """The report's steady-state section (docs/metrics.md, "Steady state"): per cell its warm-up
    (mode, blocks, whether it settled, seconds), its steady window (serving: length, output
    tok/s, TPOT p50) and its flags; then the known-bad host and device states of the runs shown
    (provenance ``host_state.warnings``) and the cells outside their calibrated prediction
    (``unexpected``). ``""`` when no cell has a warm-up record and no run a warning."""
    body = []
    for r in rows:
        w = r.field("warmup")
        if r.status != "ok" or not isinstance(w, dict):
            continue
        s = r.spec
        win = r.field("steady_window") or {}
        flags = ((r.field("steady") or {}).get("flags") or {})
        tpot = (win.get("tpot_s") or {}).get("p50")
        body.append([f"{s['model']} {s['engine']} b{s['batch']} i{s['input_len']} o{s['output_len']}",
                     w.get("mode"), len(w.get("blocks") or []),
                     {True: "yes", False: "no", None: "-"}.get(w.get("converged"), "-"), w.get("seconds"),
                     win.get("duration_s"), win.get("output_tok_s"), None if tpot is None else tpot * 1e3,
                     ", ".join(sorted(flags)) or "-", (r.field("unexpected") or {}).get("text") or "-"])
    ids = {r.run_id for r in rows}
    warned = [[run["run_id"], w] for run in runs if run.get("run_id") in ids
              for w in (((run.get("provenance") or {}).get("host_state") or {}).get("warnings") or [])]
    if not body and not warned:
        return ""
    parts = ['<section id="steady-state"><h2>Steady state: warm-up, steady window, flags</h2>']
    if body:
        parts.append(_table(["cell", "warm-up", "blocks", "settled", "warm-up s", "window s", "window out tok/s",
                             "window TPOT p50 ms", "flags", "unexpected"], body))
    if warned:
        parts.append("<h3>Host and device state known to spoil a measurement</h3>"
                     + _table(["run", "warning"], warned))
    return "".join(parts) + "</section>"


def write_serving_figures(rows: Sequence[StoredCell], flat: list[dict[str, Any]], out_dir: Path,
                          formats: tuple[str, ...] = ("png", "svg"), dpi: int = 150, protect: Any = ()) -> list[Path]:
    """PNG/SVG versions of :func:`serving_figures` (matplotlib): ``goodput_vs_load``,
    ``server_vs_client_ttft``, ``repeats_spread``, labels drawn literally; returns the files
    written (:func:`infbench.report.static.save_figure`).

    Raises:
        ImportError: matplotlib is missing.
        OutputRefused: a figure's path holds something else.
    """
    import matplotlib


    matplotlib.use("Agg")
    with matplotlib.rc_context(LITERAL_TEXT):
        return _write_serving_figures(rows, flat, out_dir, formats, dpi, protect)


def _write_serving_figures(rows: Sequence[StoredCell], flat: list[dict[str, Any]], out_dir: Path,
                           formats: tuple[str, ...], dpi: int, protect: Any) -> list[Path]:
    import matplotlib.pyplot as plt


    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        written.extend(save_figure(fig, out_dir, name, formats, dpi, protect))

    found = searches(rows)
    if found:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for s in found:
            pts = s["points"]
            line, = ax.plot([p["load"] for p in pts], [p["fraction"] for p in pts], marker="o",
                            label=f"{s['label']} ({s['mode']})")
            bad = [p for p in pts if not p["passed"]]
            ax.scatter([p["load"] for p in bad], [p["fraction"] for p in bad], marker="x", s=80, color="red", zorder=3)
            if s["knee"] is not None:
                ax.axvline(s["knee"], linestyle=":", color=line.get_color())
                ax.annotate(f"knee {s['knee']:g}", (s["knee"], 0.05), rotation=90, fontsize=8)
            ax.axhline(s["goodput"], linestyle="--", color="grey", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("requests in flight" if found[0]["mode"] == "concurrency" else "requests per s")
        ax.set_ylabel("fraction of requests meeting the SLO")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, "goodput_vs_load")
    srv = _server_rows(flat)[:30]
    if srv:
        x = np.arange(len(srv))
        fig, ax = plt.subplots(figsize=(max(7, len(srv) * 0.4), 5))
        ax.bar(x - 0.2, [r[_TTFT.key] for r in srv], 0.4, label=f"client {_TTFT.phrase}")
        ax.bar(x + 0.2, [r[_SERVER_TTFT.key] for r in srv], 0.4, label=f"{_SERVER_TTFT.phrase}, its /metrics")
        ax.set_xticks(x, [r["label"] for r in srv], rotation=75, ha="right", fontsize=6)
        ax.set_ylabel(_TTFT.flat_unit)
        ax.legend(fontsize=8)
        save(fig, "server_vs_client_ttft")
    groups = [g for g in _repeat_groups(rows) if _TPUT.key in g["metrics"]][:30]  # metrics-dict: repeat_groups' stats
    if groups:
        fig, ax = plt.subplots(figsize=(max(6, len(groups) * 0.6), 4.5))
        for i, g in enumerate(groups):
            m = g["metrics"][_TPUT.key]  # metrics-dict: repeat_groups' t-interval of the column
            ax.scatter([i] * len(m["values"]), m["values"], alpha=0.5, s=14)
            ax.errorbar([i], [m["mean"]], yerr=[[m["ci95"] or 0], [m["ci95"] or 0]], fmt="D", color="black",
                        capsize=4)
        ax.set_xticks(range(len(groups)), [g["label"] for g in groups], rotation=75, ha="right", fontsize=6)
        ax.set_ylabel(f"{_TPUT.phrase} (mean ± 95 % CI)")
        save(fig, "repeats_spread")
    return written


def figures_json(rows: Sequence[StoredCell], flat: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures' data as plain JSON (for tests and ``--json`` consumers)."""
    return {k: json.loads(v.to_json()) for k, v in serving_figures(rows, flat).items()}
