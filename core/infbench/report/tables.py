"""Terminal tables and flat exports of stored results (rich tables, JSON, CSV).

A table is printed with :func:`print_table`, which never cuts a value: on a terminal (or
a pipe) too narrow for every column, the columns are split over several tables, each
repeating the key columns (model, engine...), and text columns wrap instead of ending in
an ellipsis. Text that came from outside (model names, errors from an ingested folder or
a server) is printed and written to CSV without control characters
(:func:`infbench.data.secrets.printable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.text import JustifyMethod

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from infbench.analysis.repeats import SHOWN, fmt_ci
from infbench.data import metrics as M
from infbench.data.metrics import field
from infbench.data.outputs import OutputKind, csv_text, starts_with
from infbench.data.schema import engine_args_label, load_label
from infbench.data.secrets import printable
from infbench.data.stored import StoredCell
from infbench.measure.derive import flatten


def _fmt(v: Any, scale: float = 1.0, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v * scale:,.{digits}f}"


def result_row(r: StoredCell) -> dict[str, Any]:
    """One stored cell (``Store.results()`` item) as a flat dict: ids, spec, device,
    status, error and every metric flattened (``ttft_s_p50``, ``ttft_s_count``...); a
    predicted cell also has ``predicted`` and its intervals (``e2e_s_lo``, ``e2e_s_hi``...)."""
    spec, dev, m = r.spec, r.device, r.metrics or {}
    row = {"cell_id": r.cell_id, "spec_hash": r.spec_hash, "run_id": r.run_id, "status": r.status,
           "error": r.error, **spec, "device_vendor": dev["vendor"], "device_model": dev["model"],
           "device_count": dev["count"], "power_note": r.power_note, "wall_s": r.wall_s,
           "engine_s": r.engine_s, "finished_at": r.finished_at}
    row.pop("engine_args", None)
    if spec.get("engine_args"):
        row["engine_args"] = engine_args_label(spec["engine_args"])  # one column: n_ubatch=4 extra_body={...}
    row.update(flatten({k: v for k, v in m.items() if k not in ("slo", "interval")}))
    interval = field(m, "interval")
    if isinstance(interval, dict):  # a predicted cell's 90 % intervals: metric_lo, metric_hi
        for k, v in interval.items():
            if isinstance(v, list) and len(v) == 2:
                row[f"{k}_lo"], row[f"{k}_hi"] = v
    return row


#: The attributes of a stored cell :func:`results_json` keeps, in order.
RESULT_JSON_KEYS = ("cell_id", "spec_hash", "run_id", "status", "error", "spec", "device", "metrics", "engine",
                    "power_note", "wall_s", "engine_s", "started_at", "finished_at")


def results_json(rows: Sequence[StoredCell]) -> list[dict[str, Any]]:
    """Stored cells for ``--format json``: :data:`RESULT_JSON_KEYS` of each, metrics keeping
    their nested summaries (``{"ttft_s": {"mean":.., "p50":.., "p90":.., "p99":.., "max":..,
    "count":..}}``)."""
    out = []
    for r in rows:
        d = r.to_dict()
        out.append({k: d[k] for k in RESULT_JSON_KEYS})
    return out


#: ``export --format csv --out``: how an earlier export is recognised (its first columns).
RESULTS_CSV = OutputKind("export --format csv", "--out", starts_with(b"cell_id,spec_hash,run_id,status"))


def results_csv(rows: Sequence[StoredCell]) -> str:
    """Stored cells as CSV, one flattened row per cell (:func:`result_row`); every text cell
    cleaned and neutralised (:func:`infbench.data.outputs.csv_cell`: no control characters, no
    credentials, no formula a spreadsheet would run)."""
    flat = [result_row(r) for r in rows]
    cols: list[str] = []
    for f in flat:
        cols += [k for k in f if k not in cols]
    return csv_text(flat, cols)


def dicts_csv(rows: list[dict[str, Any]]) -> str:
    """Any list of flat dicts as CSV (columns in order of first appearance), through
    :func:`infbench.data.outputs.csv_text`; empty text for no rows."""
    cols: list[str] = []
    for f in rows:
        cols += [k for k in f if k not in cols]
    return csv_text(rows, cols) if rows else ""


#: The metric columns of :func:`results_table`, in order (the server's own TTFT is put after
#: the first when a cell has it); headers, scales and digits from :mod:`infbench.data.metrics`.
RESULT_COLUMNS = (M.TTFT.col("p50"), M.TPOT.col("p50"), M.ITL.col("p99"), M.E2E.col("p50"), M.OUTPUT_TOK_S.col(),
                  M.TOTAL_TOK_S.col(), M.TOKENS_PER_J.col(), M.MBU.col(), M.MFU.col())


def results_table(rows: Sequence[StoredCell], title: str = "infbench results") -> Table:
    """A rich table: spec (``#k`` marks the k-th repeat), status (``ok``, ``suspect`` for an
    ok cell that breaks physics: :func:`suspect_notes` gives why, ``failed``, ``predicted``
    for an adaptive sweep's unmeasured cell, its numbers predicted; ``throttled`` added when
    the device limited its clocks), then :data:`RESULT_COLUMNS`: TTFT p50 (ms) with the
    server's own TTFT p50 beside it when a server's metrics were scraped, TPOT p50 (ms), ITL
    p99 (ms), E2E p50 (s), throughputs, tokens per joule, MBU/MFU (roofline utilisations, %);
    and the completed requests ``n``."""
    t = Table(title=title, header_style="bold", show_lines=False)
    cols = list(RESULT_COLUMNS)
    if any(M.SERVER_TTFT.value(r.metrics) for r in rows):
        cols.insert(1, M.SERVER_TTFT.col("p50"))
    for col, just in [("model", "left"), ("engine", "left"), ("dtype", "left"), ("device", "left"),
                      ("batch/load", "right"), ("in", "right"), ("out", "right"), ("status", "left"),
                      *((c.header, "right") for c in cols), (M.N_COMPLETED.col().header, "right")]:
        t.add_column(col, justify=cast("JustifyMethod", just), no_wrap=col in ("model",))
    for r in rows:
        s, m = r.spec, r.metrics or {}
        if r.status == "predicted":
            status = "[magenta]predicted[/] (not measured)"
        elif r.status != "ok":
            status = f"[red]failed[/] {escape(printable(r.error)[:60])}"
        else:
            status = "[yellow]suspect[/]" if r.field("suspect") else "[green]ok[/]"
        if r.field("throttled"):
            status += " [yellow]throttled[/]"
        if r.field("host_bound"):
            status += " [yellow]host-bound[/]"
        ld = s.get("load")
        size = str(s["batch"]) if not ld or ld["mode"] == "batch" else load_label(ld)
        if s.get("repeat"):
            size += f" #{s['repeat']}"
        published = (r.engine or {}).get("published") or r.field("published")
        status = status + (" [cyan](published)[/]" if published else "")
        engine = s["engine"] + (f" [{engine_args_label(s['engine_args'])}]" if s.get("engine_args") else "")
        t.add_row(*[escape(printable(x)) for x in (s["model"], engine, s["dtype"], r.device["vendor"])], size,
                  str(s["input_len"]), str(s["output_len"]), status, *(c.text(m) for c in cols),
                  str(m.get(M.N_COMPLETED.key, "-")))
    return t


#: Columns :func:`print_results` repeats in every part of a split results table.
RESULT_KEY_COLUMNS = 4


def _cell_width(cell: Any) -> int:
    if isinstance(cell, Text):
        return max((len(line) for line in cell.plain.splitlines()), default=0)
    if isinstance(cell, str):
        return max((len(line) for line in Text.from_markup(cell).plain.splitlines()), default=0)
    return 8


def split_table(table: Table, width: int, keep: int = 1) -> list[Table]:
    """``table`` as one or more tables no wider than ``width`` characters, none of whose
    values is cut.

    Right-aligned columns (numbers) keep their full width and never wrap; left-aligned
    columns (names, errors) wrap instead of ending in an ellipsis. When the columns do not
    fit side by side they are split over several tables, each starting with a row number
    ``#`` and as many of the first ``keep`` columns (the row's key) as fit in 40 % of the
    width, and each repeating the title with its part number.

    Args:
        table: a rich table (any columns).
        width: the console width in characters.
        keep: how many leading columns identify a row.

    Returns:
        The tables to print, in order (``[table]`` rebuilt when one fits).
    """
    cols = list(table.columns)
    cells = [list(c.cells) for c in cols]
    need = []
    for c, col_cells in zip(cols, cells):
        w = max([_cell_width(c.header)] + [_cell_width(x) for x in col_cells])
        if c.justify != "right":
            w = min(w, max(30, _cell_width(c.header)))  # longer text wraps
        need.append(w + 3)  # padding 2 + border 1
    index = False
    if 1 + sum(need) > width and len(cols) > 1:
        index = True
        n_w = len(str(table.row_count)) + 3
        keep = min(keep, len(cols) - 1)
        while keep > 0 and 1 + n_w + sum(need[:keep]) > 0.4 * width:
            keep -= 1
        key_w = 1 + n_w + sum(need[:keep])
    else:
        keep = 0
        key_w = 1
    parts: list[list[int]] = []
    current: list[int] = []
    used = key_w
    for i in range(keep, len(cols)):
        if current and used + need[i] > width:
            parts.append(current)
            current, used = [], key_w
        current.append(i)
        used += need[i]
    parts.append(current)
    out = []
    for n, part in enumerate(parts):
        title = table.title
        if len(parts) > 1 and title is not None:
            title = f"{title} ({n + 1}/{len(parts)})"
        t = Table(title=title, header_style=table.header_style, show_lines=table.show_lines)
        if index:
            t.add_column("#", justify="right", no_wrap=True)
        for i in list(range(keep)) + part:
            c = cols[i]
            if c.justify == "right":
                t.add_column(c.header, justify="right", no_wrap=True, min_width=need[i] - 3, style=c.style)
            else:
                t.add_column(c.header, justify=c.justify, no_wrap=False, overflow="fold", style=c.style)
        for r in range(table.row_count):
            t.add_row(*([str(r + 1)] if index else []), *[cells[i][r] for i in list(range(keep)) + part])
        out.append(t)
    return out


def print_table(console: Console, table: Table, keep: int = 1) -> None:
    """Print ``table`` on ``console`` with no value cut (:func:`split_table` at the
    console's width)."""
    for t in split_table(table, console.width, keep):
        console.print(t)


def print_results(console: Console, rows: Sequence[StoredCell], title: str = "infbench results") -> None:
    """Print stored cells as :func:`results_table`, split to the console's width."""
    print_table(console, results_table(rows, title=title), keep=RESULT_KEY_COLUMNS)


def suspect_notes(rows: Sequence[StoredCell]) -> list[str]:
    """One line per stored ok cell marked ``suspect`` (:mod:`infbench.analysis.physics`):
    ``"<cell id> <model> <engine> b<batch> i<in> o<out>: <reasons>"``."""
    out = []
    for r in rows:
        reason = r.field("suspect")
        if r.status == "ok" and reason:
            s = r.spec
            out.append(f"{r.cell_id} {s['model']} {s['engine']} b{s['batch']} i{s['input_len']} "
                       f"o{s['output_len']}: {reason}")
    return out


def unexpected_notes(rows: Sequence[StoredCell]) -> list[str]:
    """One line per ok cell whose measurement lies outside its calibrated prediction's 90 %
    interval (``metrics["unexpected"]``, :mod:`infbench.analysis.expectation`): ``"<cell id>
    <label>: <sentence>"``."""
    out = []
    for r in rows:
        note = r.field("unexpected")
        if r.status == "ok" and isinstance(note, dict) and note.get("text"):
            s = r.spec
            out.append(f"{r.cell_id} {s['model']} {s['engine']} b{s['batch']} i{s['input_len']} o{s['output_len']}: "
                       f"{note['text']}")
    return out


def state_notes(rows: Sequence[StoredCell], runs: list[dict[str, Any]]) -> list[str]:
    """The known-bad host and device states of the runs ``rows`` came from (each run's
    provenance ``host_state.warnings``, :func:`infbench.measure.hoststate.state_warnings`):
    ``"run <id>: <warning>"``."""
    ids = {r.run_id for r in rows}
    out = []
    for run in runs:
        if run.get("run_id") not in ids:
            continue
        st = (run.get("provenance") or {}).get("host_state") or {}
        for w in st.get("warnings") or []:
            out.append(f"run {run['run_id']}: {w}")
    return out


def repeats_table(groups: list[dict[str, Any]], title: str = "repeats: mean ± 95 % t-interval") -> Table:
    """A rich table of :func:`infbench.analysis.repeats.repeat_groups`: one row per repeated
    cell, mean ± half-width of the 95 % t-interval and the coefficient of variation."""
    cols = [c for c in SHOWN if any(c.key in g["metrics"] for g in groups)]  # metrics-dict: repeat_groups' summaries
    tput = M.OUTPUT_TOK_S.col()
    t = Table(title=title, header_style="bold")
    t.add_column("cell", no_wrap=True)
    t.add_column("n", justify="right")
    for c in cols:
        t.add_column(c.header, justify="right")
    t.add_column(f"CV {tput.header}", justify="right")
    for g in groups:
        m = g["metrics"]  # metrics-dict: repeat_groups' per-column t-intervals, not a cell's metrics
        cv = (m.get(tput.key) or {}).get("cv")
        t.add_row(g["label"], str(g["n"]), *[fmt_ci(m[c.key], max(c.metric.digits, 2)) if c.key in m else "-"
                                             for c in cols], "-" if cv is None else f"{100 * cv:.1f} %")
    return t


def quality_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored perplexity measurements (:func:`infbench.store.quality.quality_results`, gate
    fields of :func:`infbench.quality.gate.with_gate` where present) for ``--json``: the
    identity, ``perplexity`` and ``stderr``, the gate, and the full stored result."""
    keep = ("id", "quality_key", "model", "weights_sha256", "engine", "dtype", "text_path", "text_sha256", "n_ctx",
            "max_chunks", "n_chunks", "n_tokens", "status", "error", "baseline_dtype", "ppl_increase", "beyond_gate",
            "skipped")
    return [{**{k: r[k] for k in keep if k in r}, "perplexity": r["value"], "stderr": r["stderr"],
             "result": r["result"]} for r in rows]


def quality_table(rows: list[dict[str, Any]], title: str = "perplexity",
                  max_increase: float | None = None) -> Table:
    """A rich table of perplexity measurements: model, engine, dtype, PPL +/- its
    uncertainty, scored tokens (chunks x n_ctx), the change against the baseline precision
    (red beyond ``max_increase``), the weights' and the text's hashes."""
    t = Table(title=title, header_style="bold")
    for col, just in [("model", "left"), ("engine", "left"), ("dtype", "left"), ("PPL", "right"),
                      ("+/-", "right"), ("tokens", "right"), ("chunks x n_ctx", "right"), ("vs baseline", "right"),
                      ("weights", "left"), ("text", "left"), ("status", "left")]:
        t.add_column(col, justify=cast("JustifyMethod", just), no_wrap=col == "model")
    for r in rows:
        inc = r.get("ppl_increase")
        if inc is None:
            vs = "-"
        else:
            vs = f"{inc * 100:+.2f} % vs {r['baseline_dtype']}" if r.get("baseline_dtype") != r["dtype"] else "baseline"
            if r.get("beyond_gate"):
                vs = f"[red]{vs} > {max_increase * 100:g} %[/]" if max_increase is not None else f"[red]{vs}[/]"
            elif r.get("beyond_gate") is False and r.get("baseline_dtype") != r["dtype"]:
                vs = f"[green]{vs}[/]"
        status = "[green]ok[/]" if r["status"] == "ok" else f"[red]failed[/] {escape(printable(r.get('error'))[:60])}"
        if r.get("skipped"):
            status += " (stored)"
        t.add_row(Path(r["model"]).name, r["engine"], r["dtype"], _fmt(r.get("value"), 1, 4),
                  _fmt(r.get("stderr"), 1, 4), str(r.get("n_tokens") or "-"),
                  f"{r.get('n_chunks') or 0} x {r['n_ctx']}", vs, (r.get("weights_sha256") or "")[:12],
                  f"{Path(r.get('text_path') or '').name} {r['text_sha256'][:8]}", status)
    return t
