"""``infbench report``: one self-contained interactive HTML page (plotly.js inlined, the
cells embedded as JSON; opens offline from disk, no server).

Figures (those of LLM-Inference-Bench and the energy study), all redrawn in the browser
from the filtered cells:

* ``fig-throughput``: a metric against batch size (or input/output length, tp), one
  line per configuration; the axis and colour selectors of LLM-Inference-Bench's
  dashboard (``InferenceGraphPlotter``).
* ``fig-heatmap``: input x output length, coloured by the selected metric (best over
  the dimensions not shown).
* ``fig-latency``: TTFT and ITL p50 per configuration, whiskers to p99.
* ``fig-power``: average power (W) and tokens per joule per device / engine / model.
* ``fig-pareto``: latency against throughput per device, the Pareto front drawn and the
  cells meeting the SLO (TTFT and TPOT limits typed into the page) marked.
* ``fig-frontier``: the throughput-interactivity frontier (issue 31): tok/s/user (1 / TPOT
  p50) against tok/s per device, switchable to output tok/s per device, J/token and USD per
  million tokens; one front per device and engine pooled over configurations, every point's
  configuration on hover, predicted points hollow with their intervals; the table under it
  reads each front at 20, 50 and 100 tok/s/user and gives its area
  (:mod:`infbench.analysis.frontier` computes the same in Python).
* ``fig-roofline``: measured TTFT and TPOT against their roofline floors (the
  diagonal is the hardware limit), with MBU / MFU on hover.
* ``fig-quality``: perplexity against output throughput, one point per precision of a
  model on an engine and device (its best throughput over the filtered cells), as
  LLM-Inference-Bench's Figs. 10/29; precisions beyond ``--max-ppl-increase`` are marked.

Filters (multi-select) cover device, engine, model, precision, batch, lengths, tp and
run. Cells marked ``suspect`` (:mod:`infbench.analysis.physics`) are listed with their
reasons in a section of their own. The page exposes ``window.infbench`` (``rows``, ``filtered()``, ``render()``) so a
browser test can check what it shows.
"""

from __future__ import annotations

import html
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

from infbench.data import metrics as M
from infbench.data.outputs import REPORT_HTML, generator_meta, html_json, write_output
from infbench.data.secrets import printable, redact
from infbench.report.data import DIMENSIONS, METRICS

FIGURES = ("fig-throughput", "fig-heatmap", "fig-latency", "fig-power", "fig-pareto", "fig-frontier", "fig-roofline",
           "fig-quality")
#: The frontier figure's y axes (docs/report.md; the first is the default), and the
#: interactivities (tok/s/user) its table reads each front at.
FRONTIER_AXES = (M.TOK_S_PER_DEVICE.col(), M.OUTPUT_TOK_S_PER_DEVICE.col(), M.J_PER_TOKEN.col(), M.USD_PER_MTOK.col())
FRONTIER_AT = (20, 50, 100)
#: The metrics the first figure's Y axis selector offers (the first is the default).
Y_AXES = (M.OUTPUT_TOK_S.col(), M.TOTAL_TOK_S.col(), M.OUTPUT_TOK_S_PER_DEVICE.col(), M.TOKENS_PER_J.col(),
          M.TTFT.col("p50"), M.TPOT.col("p50"), M.ITL.col("p50"), M.E2E.col("p50"), M.MBU.col(), M.MFU.col(),
          M.MBU_ATTAINABLE.col(), M.MFU_ATTAINABLE_FP32.col())
#: The latencies the trade-off figure offers against throughput per device (the first is the default).
TRADE_OFF = (M.TPOT.col("p50"), M.TTFT.col("p50"), M.ITL.col("p50"), M.E2E.col("p50"), M.TPOT.col("p99"))

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:12px 20px;background:#1f2937;color:#fff}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;font-size:13px;color:#cbd5e1}
#controls{display:flex;flex-wrap:wrap;gap:10px;padding:10px 20px;background:#fff;border-bottom:1px solid #ddd}
#controls label{font-size:12px;font-weight:600;display:flex;flex-direction:column;gap:2px}
#controls select{min-width:110px;font-size:12px}#controls input{width:80px}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px;padding:12px 20px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}
section h2{font-size:14px;margin:2px 6px 6px}.fig{height:430px}
#status{font-size:12px;color:#555;padding:0 20px 6px}
"""

def _script() -> str:
    return files("infbench.report").joinpath("dashboard.js").read_text(encoding="utf-8")



def _select(id_: str, label: str, options: dict[str, str], selected: str) -> str:
    opts = "".join(f'<option value="{html.escape(k)}"{" selected" if k == selected else ""}>{html.escape(v)}</option>'
                   for k, v in options.items())
    return f'<label>{html.escape(label)}<select id="{id_}">{opts}</select></label>'


def render_html(rows: list[dict[str, Any]], title: str = "infbench report", failed: int = 0,
                slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None, extra_html: str = "",
                ppl_gate: float | None = None) -> str:
    """The report page for flat rows (:func:`infbench.report.data.flat_row`).

    Args:
        rows: flat rows (ok and failed; failed ones are counted, not plotted).
        title: page title.
        failed: failed cells to mention.
        slo_ttft_ms, slo_tpot_ms: initial SLO limits (p99, ms) of the trade-off figure.
        extra_html: more sections placed after the six figures (the serving sections of
            :mod:`infbench.report.serving`).
        ppl_gate: the ``--max-ppl-increase`` fraction shown in the quality figure, or None.

    Raises:
        ImportError: plotly is not installed (``pip install 'infbench[report]'``).
    """
    from plotly.offline import get_plotlyjs

    data = {"rows": rows, "dimensions": DIMENSIONS, "metrics": METRICS, "failed": failed, "ppl_gate": ppl_gate,
            "frontier_at": list(FRONTIER_AT),
            "frontier_lower": [c.key for c in FRONTIER_AXES if c.better == "lower"]}
    payload = html_json(data)  # <, > and & as \u003c...: no stored text can end the script or open a comment
    xs = {k: DIMENSIONS[k] for k in ("batch", "input_len", "output_len", "tp")}
    ys = {c.key: c.label for c in Y_AXES}
    colors = {"config": "configuration (what varies)", **{k: DIMENSIONS[k] for k in
                                                          ("device", "engine", "model", "dtype", "tp")}}
    lat = {c.key: c.label for c in TRADE_OFF}
    controls = (
        '<div id="filters" style="display:contents"></div>'
        + _select("x-axis", "X axis", xs, "batch") + _select("y-axis", "Y axis", ys, Y_AXES[0].key)
        + _select("color-by", "Colour by", colors, "config")
        + _select("latency-metric", "Trade-off latency", lat, TRADE_OFF[0].key)
        + _select("frontier-axis", "Frontier axis", {c.key: c.label for c in FRONTIER_AXES}, FRONTIER_AXES[0].key)
        + f'<label>SLO {html.escape(M.TTFT.col("p99").label)}<input id="slo-ttft" type="number" min="0" '
          f'value="{"" if slo_ttft_ms is None else slo_ttft_ms:}"></label>'
        + f'<label>SLO {html.escape(M.TPOT.col("p99").label)}<input id="slo-tpot" type="number" min="0" '
          f'value="{"" if slo_tpot_ms is None else slo_tpot_ms:}"></label>')
    titles = {"fig-throughput": "Throughput vs batch size", "fig-heatmap": "Input x output length",
              "fig-latency": "TTFT and ITL", "fig-power": "Power and tokens per joule",
              "fig-pareto": "Latency-throughput trade-off", "fig-roofline": "Measured vs roofline floor",
              "fig-frontier": "Throughput-interactivity frontier",
              "fig-quality": "Perplexity vs throughput per precision"}
    sections = "".join(f'<section><h2>{titles[f]}</h2><div id="{f}" class="fig"></div>'
                       + ('<table id="frontier-table" style="font-size:12px"></table>' if f == "fig-frontier" else "")
                       + '</section>' for f in FIGURES)
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    n_ok = sum(1 for r in rows if r["status"] == "ok")
    n_pred = sum(1 for r in rows if r["status"] == "predicted")
    suspect = [r for r in rows if r["status"] == "ok" and r.get("suspect")]
    if suspect:
        items = "".join(f"<li><b>{_text(r['label'])}</b> ({_text(r['cell_id'])}): "
                        f"{_text(r['suspect'])}</li>" for r in suspect)
        sections += (f'<section id="suspect-cells"><h2>Suspect cells ({len(suspect)}): stored, but they break a '
                     f'physical bound</h2><ul style="font-size:12px">{items}</ul></section>')
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">{generator_meta('report')}"
            f"<title>{_text(title)}</title>"
            f"<style>{_CSS}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<header><h1>{_text(title)}</h1><p>{n_ok} ok cells ({len(suspect)} suspect), {failed} failed"
            + (f", {n_pred} predicted (not measured: hollow markers with 90 % intervals)" if n_pred else "")
            + f"; generated {stamp} by "
            f"infbench. Formulas: docs/metrics.md; roofline: docs/roofline.md.</p></header>"
            f"<div id=\"controls\">{controls}</div><div id=\"status\"></div><main>{sections}{extra_html}</main>"
            f"<script type=\"application/json\" id=\"infbench-data\">{payload}</script>"
            f"<script>{_script()}</script></body></html>")


def write_report(rows: list[dict[str, Any]], out_dir: Path, title: str = "infbench report",
                 slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None, extra_html: str = "",
                 ppl_gate: float | None = None, protect: Any = ()) -> Path:
    """Write ``out_dir/index.html`` (self-contained) through
    :func:`infbench.data.outputs.write_output` (atomic; never over a store in ``protect``, an
    SQLite file or a file that is not an earlier report page); returns its path.

    Raises:
        OutputRefused: see :func:`infbench.data.outputs.check_output`.
        OSError: the folder cannot be written.
    """
    failed = sum(1 for r in rows if r["status"] not in ("ok", "predicted"))
    page = render_html(rows, title, failed, slo_ttft_ms, slo_tpot_ms, extra_html, ppl_gate)
    return write_output(out_dir / "index.html", page, REPORT_HTML, protect)


def _text(value: Any) -> str:
    """Text from the store as HTML: redacted, control characters dropped, escaped."""
    return html.escape(printable(redact(str(value))))
