"""``infbench compare A B``: per-cell ratios between two sets of results (two sweeps,
two sites, two images).

Cells are matched by ``spec_hash``, the hash of the workload alone (model, engine,
dtype, batch or load, lengths, tp, seed), which is the same on every site and in every
image. (``cell_id`` adds the device signature, so it matches only on identical
hardware; where it does, the two agree.) A side is a run id (prefix) in the store, a
results database file, or ``FILE.db:RUN``.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

from infbench.errors import ConfigError
from infbench.report.data import flat_row

#: Compared metrics: key -> (label, True if higher is better).
COMPARED = {
    "output_tok_s": ("output tok/s", True), "total_tok_s": ("total tok/s", True),
    "ttft_ms_p50": ("TTFT p50", False), "tpot_ms_p50": ("TPOT p50", False), "itl_ms_p99": ("ITL p99", False),
    "e2e_s_p50": ("E2E p50", False), "avg_power_w": ("power", False), "tokens_per_j": ("tokens/J", True),
    "mbu": ("MBU", True),
}


def load_side(arg: str, default_store: Path | None) -> tuple[str, list[dict[str, Any]]]:
    """The newest ok/failed cells of one side: ``RUN`` (id prefix in ``default_store``),
    ``FILE.db`` (all its cells) or ``FILE.db:RUN``.

    Returns:
        ``(label, Store.results() rows)``.

    Raises:
        ConfigError: the file does not exist, or the run matches no cell.
    """
    from infbench.store import Store, StoreError, describe_db_error, valid_run_prefix

    path, run = None, arg
    if ":" in arg and arg.rsplit(":", 1)[0].endswith(".db"):
        path, run = arg.rsplit(":", 1)
    elif arg.endswith(".db"):
        path, run = arg, None
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"no results database at {path}")
    if run is not None and not valid_run_prefix(run):
        raise ConfigError(f"{arg[:60]!r} is neither a run id (hex digits, e.g. 3f2a9c) nor a results .db file",
                          hint="e.g. `infbench compare 3f2a 9c1d` or `infbench compare siteA.db siteB.db:9c1d`")
    store = Store(path or default_store, readonly=True)
    try:
        # A run's own attempts (not the newest attempt of each cell, which a later run
        # of the same cells would replace).
        try:
            rows = store.results(run_id=run, all_attempts=run is not None)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read the results store {store.path}: {describe_db_error(exc)}") from None
        if not rows:
            runs = ", ".join(r["run_id"] for r in store.runs()[:8]) or "none"
            raise ConfigError(f"{arg!r} matches no stored cell in {store.path}",
                              hint=f"give a run id (recent runs: {runs}) or a results .db file")
    finally:
        store.close()
    return arg, rows


def compare_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Match two sides by spec_hash and compute ratios B / A.

    Returns:
        ``{"pairs": [{"label", "spec_hash", "cell_id_a", "cell_id_b", "a": {metric: v},
        "b": {..}, "ratio": {metric: b/a or None}}], "only_a": n, "only_b": n,
        "geomean": {metric: geometric mean of the ratios}}``. Only cells ok on both sides
        are paired; failed ones count as unmatched.
    """
    fa = {r["spec_hash"]: flat_row(r) for r in a if r["status"] == "ok"}
    fb = {r["spec_hash"]: flat_row(r) for r in b if r["status"] == "ok"}
    pairs = []
    for h in [h for h in fa if h in fb]:
        ra, rb = fa[h], fb[h]
        ratio = {}
        for k in COMPARED:
            va, vb = ra.get(k), rb.get(k)
            ratio[k] = vb / va if va and vb is not None and va > 0 else None
        label = ra["label"].split(" | ")
        pairs.append({"label": f"{label[0]} | {label[-1]}", "spec_hash": h, "cell_id_a": ra["cell_id"],
                      "cell_id_b": rb["cell_id"], "device_a": ra["device"], "device_b": rb["device"],
                      "a": {k: ra.get(k) for k in COMPARED}, "b": {k: rb.get(k) for k in COMPARED},
                      "ratio": ratio})
    geo = {}
    for k in COMPARED:
        vals = [p["ratio"][k] for p in pairs if p["ratio"][k] and p["ratio"][k] > 0]
        geo[k] = math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
    return {"pairs": pairs, "only_a": len(set(fa) - set(fb)), "only_b": len(set(fb) - set(fa)), "geomean": geo}


def write_compare_html(result: dict[str, Any], label_a: str, label_b: str, path: Path) -> Path:
    """A self-contained plotly page: one bar per matched cell of the B / A ratio of
    output throughput, TTFT p50 and TPOT p50 (1 = equal)."""
    import plotly.graph_objects as go

    pairs = result["pairs"]
    fig = go.Figure()
    for k in ("output_tok_s", "ttft_ms_p50", "tpot_ms_p50", "tokens_per_j"):
        fig.add_bar(name=COMPARED[k][0], x=[p["label"] for p in pairs], y=[p["ratio"][k] for p in pairs])
    fig.add_hline(y=1.0, line_dash="dash", line_color="grey")
    fig.update_layout(title=f"{label_b} / {label_a}: per-cell ratios ({len(pairs)} matched cells)",
                      barmode="group", yaxis_title="ratio B / A", yaxis_type="log", height=600)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return path
