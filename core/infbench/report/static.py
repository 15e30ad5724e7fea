"""Static figures for papers (matplotlib, PNG and SVG): the same views as the HTML
report (perplexity vs throughput where perplexity is stored), drawn from all ok cells
given (filter with ``infbench report --model/--device ...`` first); the throughput figure
also draws an adaptive sweep's predicted cells, hollow, with their 90 % intervals.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from infbench.analysis.frontier import Point, pareto
from infbench.data import metrics as M
from infbench.data.outputs import FIGURE, write_output
from infbench.report.data import pareto_front, quality_points


def _series_key(r: dict[str, Any], keys: list[str]) -> str:
    return " ".join(str(r[k]) for k in keys) or "all"


def _varying(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    return [k for k in keys if len({r[k] for r in rows}) > 1]


#: matplotlib settings of every figure: text is drawn as written (a model name
#: ``m$\\x{$`` is not parsed as mathtext, and never given to TeX).
LITERAL_TEXT: Any = {"text.parse_math": False, "text.usetex": False}


def write_figures(rows: list[dict[str, Any]], out_dir: Path, formats: tuple[str, ...] = ("png", "svg"),
                  dpi: int = 150, protect: Any = ()) -> list[Path]:
    """Draw the figures of ok ``rows`` (flat rows) into ``out_dir``, every label literal
    (:data:`LITERAL_TEXT`), each file written by :func:`save_figure`.

    Returns:
        The files written (a figure without data is skipped).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'infbench[report]'``).
        OutputRefused: a figure's path holds something else (see :func:`save_figure`).
    """
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context(LITERAL_TEXT):
        return _write_figures(rows, out_dir, formats, dpi, protect)


def _write_figures(rows: list[dict[str, Any]], out_dir: Path, formats: tuple[str, ...], dpi: int,
                   protect: Any) -> list[Path]:
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok"]
    predicted = [r for r in rows if r["status"] == "predicted" and r[M.OUTPUT_TOK_S.key] is not None
                 and r["batch"] is not None]
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        written.extend(save_figure(fig, out_dir, name, formats, dpi, protect))

    # 1. throughput vs batch size, one line per configuration
    pts = [r for r in ok if r[M.OUTPUT_TOK_S.key] is not None and r["batch"] is not None]
    if pts or predicted:
        keys = _varying(pts + predicted, ["device", "engine", "engine_args", "model", "dtype", "tp", "input_len",
                                          "output_len"])
        series: dict[str, list] = defaultdict(list)
        for r in pts + predicted:
            series[_series_key(r, keys)].append(r)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, rs in sorted(series.items()):
            rs.sort(key=lambda r: r["batch"])
            meas = [r for r in rs if r["status"] == "ok"]
            line = ax.plot([r["batch"] for r in meas], [r[M.OUTPUT_TOK_S.key] for r in meas], marker="o", label=name)
            pred = [r for r in rs if r["status"] == "predicted"]
            if pred:
                # Predicted (not measured) cells: hollow markers with their 90 % interval.
                y = [r[M.OUTPUT_TOK_S.key] for r in pred]
                err = [[max(v - (r["output_tok_s_lo"] or v), 0) for v, r in zip(y, pred, strict=True)],
                       [max((r["output_tok_s_hi"] or v) - v, 0) for v, r in zip(y, pred, strict=True)]]
                color = line[0].get_color() if meas else None
                ax.errorbar([r["batch"] for r in pred], y, yerr=err, fmt="o", mfc="none", color=color, capsize=2,
                            label=f"{name} (predicted, 90 % interval)" if not meas else None)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size / concurrency")
        ax.set_ylabel(M.OUTPUT_TOK_S.col().label)
        ax.grid(alpha=0.3)
        if len(series) <= 12:
            ax.legend(fontsize=7)
        save(fig, "throughput_vs_batch")

    # 2. input x output heatmap (best over the rest)
    if pts:
        ins = sorted({r["input_len"] for r in pts})
        outs = sorted({r["output_len"] for r in pts})

        z = np.full((len(outs), len(ins)), np.nan)
        for r in pts:
            i, o = ins.index(r["input_len"]), outs.index(r["output_len"])
            z[o, i] = np.nanmax([z[o, i], r[M.OUTPUT_TOK_S.key]])
        fig, ax = plt.subplots(figsize=(6, 4.5))
        im = ax.imshow(z, origin="lower", cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(ins)), [str(v) for v in ins])
        ax.set_yticks(range(len(outs)), [str(v) for v in outs])
        for o in range(len(outs)):
            for i in range(len(ins)):
                if not np.isnan(z[o, i]):
                    ax.text(i, o, f"{z[o, i]:.3g}", ha="center", va="center", color="w", fontsize=8)
        ax.set_xlabel("input length (tokens)")
        ax.set_ylabel("output length (tokens)")
        fig.colorbar(im, label=f"best {M.OUTPUT_TOK_S.col().phrase}")
        save(fig, "heatmap_input_output")

    # 3. TTFT and ITL bars
    lat = [r for r in ok if r["ttft_ms_p50"] is not None][:30]
    if lat:
        x = np.arange(len(lat))
        fig, ax = plt.subplots(figsize=(max(7, len(lat) * 0.35), 5))
        for off, metric in zip((-0.2, 0.2), (M.TTFT, M.ITL)):
            p50, p99 = metric.col("p50").key, metric.col("p99").key
            y = [r[p50] or 0 for r in lat]
            spread = [float((r[p99] or r[p50] or 0) - (r[p50] or 0)) for r in lat]
            whisker = [e if e > 0 else 0.0 for e in spread]
            ax.bar(x + off, y, 0.4, yerr=[[0.0] * len(lat), whisker],
                   label=f"{metric.label} p50 (whisker p99)", capsize=2)
        ax.set_xticks(x, [r["label"] for r in lat], rotation=75, ha="right", fontsize=6)
        ax.set_yscale("log")
        ax.set_ylabel(M.TTFT.shown)
        ax.legend(fontsize=8)
        save(fig, "ttft_itl")

    # 4. power and tokens per joule per device/engine/model
    pw = [r for r in ok if r["avg_power_w"] is not None]
    if pw:
        groups: dict[str, list] = defaultdict(list)
        for r in pw:
            groups[f"{r['device']}\n{r['engine']} {r['model']}"].append(r)
        names = sorted(groups)
        fig, ax = plt.subplots(figsize=(max(6, len(names) * 1.2), 4.5))
        x = np.arange(len(names))
        ax.bar(x - 0.2, [np.mean([r["avg_power_w"] for r in groups[n]]) for n in names], 0.4,
               label=M.AVG_POWER.col().phrase)
        ax2 = ax.twinx()
        ax2.bar(x + 0.2, [np.mean([r["tokens_per_j"] or 0 for r in groups[n]]) for n in names], 0.4,
                color="tab:green", label=M.TOKENS_PER_J.col().phrase)
        ax.set_xticks(x, names, fontsize=7)
        ax.set_ylabel(M.AVG_POWER.unit)
        ax2.set_ylabel(M.TOKENS_PER_J.unit)
        fig.legend(fontsize=8, loc="upper right")
        save(fig, "power_tokens_per_joule")

    # 5. latency-throughput trade-off with the Pareto front
    tr = [r for r in ok if r["tpot_ms_p50"] is not None and r["output_tok_s_per_device"] is not None]
    if tr:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for dev in sorted({r["device"] for r in tr}):
            d = [r for r in tr if r["device"] == dev]
            xy = [(r["tpot_ms_p50"], r["output_tok_s_per_device"]) for r in d]
            ax.scatter([x for x, _ in xy], [y for _, y in xy], label=dev, s=18)
            front = [xy[i] for i in pareto_front(xy)]
            ax.plot(*zip(*front), linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel(M.TPOT.col("p50").label)
        ax.set_ylabel(M.OUTPUT_TOK_S_PER_DEVICE.col().label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, "latency_throughput_pareto")

    # 5b. the throughput-interactivity frontier (tok/s/device against tok/s/user), one front per
    # device and engine pooled over configurations; predicted points hollow (infbench.analysis.frontier)
    fr = [r for r in rows if r["status"] in ("ok", "predicted") and r.get(M.TOK_S_PER_USER.key)
          and r.get(M.TOK_S_PER_DEVICE.key)]
    if fr:
        fig, ax = plt.subplots(figsize=(7, 4.5))

        def front_key(r: dict[str, Any]) -> str:
            return r.get("front_series") or f"{r['device']} | {r['engine']}"

        fr_keys = sorted({front_key(r) for r in fr})
        n_imported = 0
        for i, key in enumerate(fr_keys):
            color = f"C{i % 10}"
            fr_rows = [r for r in fr if front_key(r) == key]
            imported = all(r.get("published") for r in fr_rows)
            n_imported += imported
            fr_pts = [Point(r[M.TOK_S_PER_USER.key], r[M.TOK_S_PER_DEVICE.key], r["cell_id"], r["label"],
                            predicted=bool(r.get("predicted"))) for r in fr_rows]
            fr_front = pareto(fr_pts)
            meas = [p for p in fr_pts if not p.predicted]
            pred = [p for p in fr_pts if p.predicted]
            if imported:  # an imported publication: hollow diamonds, a dashed front
                ax.scatter([p.x for p in meas], [p.y for p in meas], s=30, marker="D", facecolors="none",
                           edgecolors=color, label=f"{key} (imported)")
            else:
                ax.scatter([p.x for p in meas], [p.y for p in meas], s=20, color=color, label=key)
            if pred:
                ax.scatter([p.x for p in pred], [p.y for p in pred], s=36, facecolors="none", edgecolors=color,
                           label=f"{key} (predicted)")
            ax.plot([p.x for p in fr_front], [p.y for p in fr_front], linewidth=1.2, color=color,
                    linestyle="--" if imported else "-")
        if n_imported:
            ax.set_title("imported points converted to infbench's definitions (docs/metrics.md)", fontsize=8)
        ax.set_xlabel(M.TOK_S_PER_USER.col().label + " = 1 / TPOT p50")
        ax.set_ylabel(M.TOK_S_PER_DEVICE.col().label + " (input + output)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, "frontier")

    # 6. measured vs roofline floor
    rf = [r for r in ok if r["tpot_floor_ms"] is not None and r["tpot_ms_mean"] is not None]
    if rf:
        fig, ax = plt.subplots(figsize=(5.5, 5))
        t = [r for r in rf if r["ttft_floor_ms"] is not None and r["ttft_ms_mean"] is not None]
        ax.scatter([r["ttft_floor_ms"] for r in t], [r["ttft_ms_mean"] for r in t], label=f"{M.TTFT.label} (prefill)",
                   s=18)
        ax.scatter([r["tpot_floor_ms"] for r in rf], [r["tpot_ms_mean"] for r in rf], marker="D",
                   label=f"{M.TPOT.label} (decode)", s=18)
        vals = [v for r in rf for v in (r["tpot_floor_ms"], r["tpot_ms_mean"])] + \
               [v for r in t for v in (r["ttft_floor_ms"], r["ttft_ms_mean"])]
        lo, hi = min(vals) / 1.5, max(vals) * 1.5
        ax.plot([lo, hi], [lo, hi], "--", color="grey", label="hardware limit")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("roofline floor (ms)")
        ax.set_ylabel("measured mean (ms)")
        ax.legend(fontsize=8)
        save(fig, "measured_vs_roofline")

    # 7. perplexity vs throughput per precision (LLM-Inference-Bench Figs. 10/29)
    qp = quality_points(ok)
    if qp:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in sorted({p["series"] for p in qp}):
            ps = [p for p in qp if p["series"] == name]
            bars = ax.errorbar([p[M.OUTPUT_TOK_S.key] for p in ps], [p["perplexity"] for p in ps],
                               yerr=[p["perplexity_stderr"] or 0 for p in ps], marker="o", capsize=2, label=name)
            for p in ps:
                ax.annotate(p["dtype"] + (" (beyond gate)" if p["beyond_gate"] else ""),
                            (p[M.OUTPUT_TOK_S.key], p["perplexity"]), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color="tab:red" if p["beyond_gate"] else bars[0].get_color())
        ax.set_xlabel(M.OUTPUT_TOK_S.col().label)
        ax.set_ylabel(M.PERPLEXITY.col().label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, "perplexity_vs_throughput")
    return written


#: Metadata naming infbench in each figure format (how an earlier figure is recognised).
FIGURE_METADATA = {"png": {"Software": "infbench report"}, "svg": {"Creator": "infbench report"},
                   "pdf": {"Creator": "infbench report"}}


def label_log_axes(fig: Any) -> None:
    """Label every logarithmic axis of ``fig`` with whole values, never a bare minor digit
    (issue 41: a "9" left of 1, a "2" and a "5" between decades read as data): base-10 axes
    tick at each decade (1, 10, 100), or at 1, 2 and 5 of each decade where the axis spans
    fewer than three, each labelled with its full value (20, 50, 0.2); base-2 axes at their
    powers of two; minor ticks stay unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for ax in fig.get_axes():
        for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_scale() != "log":
                continue
            base = getattr(axis.get_transform(), "base", 10)
            lo, hi = (min(lim), max(lim))
            if base == 10 and lo > 0:
                subs = (1.0, 2.0, 5.0) if math.log10(hi / lo) < 3 else (1.0,)
                axis.set_major_locator(LogLocator(base=10, subs=subs))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
            axis.set_minor_formatter(NullFormatter())


def save_figure(fig: Any, out_dir: Path, name: str, formats: Any, dpi: int, protect: Any = ()) -> list[Path]:
    """Write a matplotlib figure as ``out_dir/<name>.<fmt>`` for each format (tight layout)
    through :func:`infbench.data.outputs.write_output` (atomic; never over a store in
    ``protect``, an SQLite file or a file that is not an earlier infbench figure) and close
    it. Returns the paths written.

    Raises:
        OutputRefused: see :func:`infbench.data.outputs.check_output`.
        OSError: the folder cannot be written.
    """
    import matplotlib.pyplot as plt


    try:
        label_log_axes(fig)
        fig.tight_layout()
        paths = []
        for fmt in formats:
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, dpi=dpi, metadata=FIGURE_METADATA.get(fmt))
            paths.append(write_output(out_dir / f"{name}.{fmt}", buf.getvalue(), FIGURE, protect))
        return paths
    finally:
        plt.close(fig)
