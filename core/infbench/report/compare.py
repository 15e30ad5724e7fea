"""``infbench compare A B``: per-cell ratios between two sets of results (two sweeps,
two sites, two images).

Cells are matched by ``spec_hash``, the hash of the workload alone (model, engine,
dtype, batch or load, lengths, tp, seed), which is the same on every site and in every
image. (``cell_id`` adds the device signature, so it matches only on identical
hardware; where it does, the two agree.) Cells left unmatched are then matched on the
workload as a person reads it (:func:`workload_key`: the zoo model whatever name was
typed, the engine family, the precision class, batch or load, lengths, tp, seed) when one
of the two is a published cell (``infbench import``), which pairs a site's run with the
paper's cells however each spelled the model and dtype, or when the two are one engine
family's two builds (``llama.cpp`` compiled in-process and the prebuilt ``llama.cpp-server``
running the same batch, as the CPU's default sweep does on each: issue 25). A side is a
run id (prefix) in the store, a results database file, or ``FILE.db:RUN``.
"""

from __future__ import annotations

import html
import json
import math
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infbench.analysis.predict import engine_family
from infbench.data import metrics as M
from infbench.data.engine import precision_of
from infbench.data.errors import ConfigError
from infbench.data.metrics import Column
from infbench.data.models import resolve
from infbench.data.outputs import COMPARE_HTML, generator_meta, html_json, log_ticks, plotly_text, write_output
from infbench.data.schema import canonical_json, short_hash
from infbench.data.stored import StoredCell
from infbench.quality.gate import group_key
from infbench.report.data import flat_row
from infbench.store import Store, StoreError, describe_db_error, valid_run_prefix
from infbench.store.published import published_runs

#: Compared metrics: flat-row key -> column (header, better direction: :mod:`infbench.data.metrics`).
COMPARED: dict[str, Column] = {c.key: c for c in (
    M.OUTPUT_TOK_S.col(), M.TOTAL_TOK_S.col(), M.TTFT.col("p50"), M.TPOT.col("p50"), M.ITL.col("p99"),
    M.E2E.col("p50"), M.AVG_POWER.col(), M.TOKENS_PER_J.col(), M.MBU.col())}
#: The ratios :func:`write_compare_html` plots.
PLOTTED = (M.OUTPUT_TOK_S.col(), M.TTFT.col("p50"), M.TPOT.col("p50"), M.TOKENS_PER_J.col())


def load_side(arg: str, default_store: Path | None) -> tuple[str, list[StoredCell]]:
    """The newest ok/failed cells of one side: ``RUN`` (id prefix in ``default_store``),
    ``FILE.db`` (all its cells) or ``FILE.db:RUN``.

    Returns:
        ``(label, Store.results() rows)``.

    Raises:
        ConfigError: the file does not exist, or the run matches no cell.
    """
    path: str | None = None
    run: str | None = arg
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


#: The prefix of ``compare --against``: ``imported:SOURCE[:DEVICE[:ENGINE]]``.
IMPORTED_PREFIX = "imported:"


def load_imported(arg: str, default_store: Path | None) -> tuple[str, list[StoredCell]]:
    """The imported cells ``compare --against imported:SOURCE[:DEVICE[:ENGINE]]`` names.

    ``SOURCE`` matches an imported run's source name or format, case-insensitive
    (``inferencex``, ``mlperf``, ``vllm-bench``, ``aiperf``, ``LLM-Inference-Bench``);
    ``DEVICE`` a cell's catalog id, its published hardware name, or a part of its model name
    (``mi300x``, ``h200``, ``b200``); ``ENGINE`` a part of its engine or framework
    (``sglang``). Empty parts match everything.

    Returns:
        ``(label, Store.results() rows)``, the newest cells of every matching imported run.

    Raises:
        ConfigError: no imported run or no cell matches (the sources and devices there are
            named in the hint).
    """
    parts = arg[len(IMPORTED_PREFIX):].split(":") if arg.startswith(IMPORTED_PREFIX) else []
    if not parts or not parts[0]:
        raise ConfigError(f"--against {arg[:80]!r}: expected imported:SOURCE[:DEVICE[:ENGINE]]",
                          hint="e.g. --against imported:inferencex:mi300x (see `infbench import`)")
    src, dev, eng = (parts + ["", ""])[:3]
    store = Store(default_store, readonly=True)
    try:
        runs = published_runs(store)
        want = src.lower()
        chosen = [r for r in runs if want in {str(((r.get("provenance") or {}).get("source") or {}).get(k) or "")
                                              .lower() for k in ("name", "format", "tool")}]
        rows = [c for r in chosen for c in store.results(run_id=r["run_id"])]
    finally:
        store.close()
    if not chosen:
        names = sorted({str(((r.get("provenance") or {}).get("source") or {}).get("format") or
                             ((r.get("provenance") or {}).get("source") or {}).get("name")) for r in runs}) or ["none"]
        raise ConfigError(f"no imported run from {src!r} in the store",
                          hint=f"imported sources here: {', '.join(names)}; `infbench import --format ...` first")

    def dev_ok(r: StoredCell) -> bool:
        d = r.device or {}
        p = d.get("properties") or {}
        keys = {str(p.get("catalog_id") or "").lower(), str(p.get("published_name") or "").lower()}
        return not dev or dev.lower() in keys or dev.lower() in str(d.get("model") or "").lower()

    def eng_ok(r: StoredCell) -> bool:
        e = f"{r.spec.get('engine')} {(r.engine or {}).get('framework') or ''}".lower()
        return not eng or eng.lower() in e

    picked = [r for r in rows if r.status == "ok" and dev_ok(r) and eng_ok(r)]
    if not picked:
        devs = sorted({str(((r.device or {}).get("properties") or {}).get("catalog_id") or
                           ((r.device or {}).get("properties") or {}).get("published_name")) for r in rows})
        raise ConfigError(f"no imported cell of {src!r} matches device {dev or 'any'!r} and engine {eng or 'any'!r}",
                          hint=f"devices imported from {src}: {', '.join(devs[:12])}")
    return arg, picked


def compare_rows(a: Sequence[StoredCell], b: Sequence[StoredCell]) -> dict[str, Any]:
    """Match two sides by spec_hash and compute ratios B / A.

    Cells of the same workload measured with other engine arguments (``--engine-arg``;
    their spec hashes differ) are paired when nothing else matches them, and their label
    names the arguments of each side (``[n_ubatch=4 vs no engine args]``).

    Returns:
        ``{"pairs": [{"label", "spec_hash", "cell_id_a", "cell_id_b", "engine_args_a",
        "engine_args_b", "a": {metric: v},
        "b": {..}, "ratio": {metric: b/a or None}}], "only_a": n, "only_b": n,
        "geomean": {metric: geometric mean of the ratios}}``. Only cells ok on both sides
        are paired; failed ones count as unmatched.
    """
    fa = {r.spec_hash: {**flat_row(r), "_spec": r.spec} for r in a if r.status == "ok"}
    fb = {r.spec_hash: {**flat_row(r), "_spec": r.spec} for r in b if r.status == "ok"}
    # Second pass: unmatched cells of which one side is published (imported), paired on the
    # normalised workload and keyed under A's hash.
    ka = {workload_key(r): r for r in a if r.status == "ok" and r.spec_hash not in fb}
    for r in b:
        wk = workload_key(r) if r.status == "ok" and r.spec_hash not in fa else None
        ra = ka.get(wk) if wk is not None else None
        if ra is not None and ra.spec_hash not in fb and (ra.published or r.published
                                                          or ra.spec["engine"] != r.spec["engine"]):
            fb[ra.spec_hash] = fb.pop(r.spec_hash)
    # Third pass: the same workload measured with other engine arguments (--engine-arg n_ubatch=4
    # against none): paired on the spec without them, the arguments shown in the label.
    base_a = {_without_args(fa[h]["_spec"]): h for h in fa if h not in fb}
    for h in [h for h in fb if h not in fa]:
        ha = base_a.get(_without_args(fb[h]["_spec"]))
        if ha is not None and (fa[ha]["_spec"].get("engine_args") or fb[h]["_spec"].get("engine_args")):
            del base_a[_without_args(fb[h]["_spec"])]
            fb[ha] = fb.pop(h)
    pairs = []
    for h in [h for h in fa if h in fb]:
        xa, xb = fa[h], fb[h]
        ratio = {}
        for key in COMPARED:
            va, vb = xa.get(key), xb.get(key)
            ratio[key] = vb / va if va and vb is not None and va > 0 else None
        label = xa["label"].split(" | ")
        other = f" vs {xb['engine']}" if xb.get("engine") and xb.get("engine") != xa.get("engine") else ""
        if xa.get("engine_args") != xb.get("engine_args"):  # what tells the two cells apart
            label[0] = label[0].replace(f" [{xa['engine_args']}]", "") if xa.get("engine_args") else label[0]
            other += f" [{xa.get('engine_args') or 'no engine args'} vs {xb.get('engine_args') or 'no engine args'}]"
        pairs.append({"label": f"{label[0]}{other} | {label[-1]}", "spec_hash": h, "cell_id_a": xa["cell_id"],
                      "engine_args_a": xa.get("engine_args"), "engine_args_b": xb.get("engine_args"),
                      "cell_id_b": xb["cell_id"], "device_a": xa["device"], "device_b": xb["device"],
                      "a": {c: xa.get(c) for c in COMPARED}, "b": {c: xb.get(c) for c in COMPARED},
                      "ratio": ratio})
    geo = {}
    for k in COMPARED:
        vals = [p["ratio"][k] for p in pairs if p["ratio"][k] and p["ratio"][k] > 0]
        geo[k] = math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
    return {"pairs": pairs, "only_a": len(set(fa) - set(fb)), "only_b": len(set(fb) - set(fa)), "geomean": geo}


def _without_args(spec: dict[str, Any]) -> str:
    """The canonical JSON of a stored cell spec without its engine arguments."""
    return canonical_json({k: v for k, v in spec.items() if k != "engine_args"})


def workload_key(r: StoredCell) -> tuple[Any, ...] | None:
    """A stored cell's workload as a person reads it: ``(zoo model, engine family,
    precision class, batch, load, input, output, tp, seed, engine options)``; None for a dataset
    replay. Two spellings of one workload (``llama-2-7b``/``meta-llama/Llama-2-7b-hf``,
    ``float16``/``fp16``, ``vllm``/``vllm-server``; a server's batch-mode load, all requests at
    once and streamed, and an in-process batch) give one key."""

    s = r.spec
    if s.get("dataset"):
        return None
    try:
        model = resolve(s["model"]).name
    except ConfigError:
        model = s["model"]
    dtype = str(s["dtype"]).lower()
    ld = s.get("load") or {}
    if ld.get("mode") == "batch" and set(ld) <= {"mode", "burstiness"}:  # burstiness: unused in batch mode
        ld = {}
    load = json.dumps(ld, sort_keys=True)
    options = json.dumps((r.engine or {}).get("options") or {}, sort_keys=True, default=str)
    return (model, engine_family(s["engine"]), precision_of(dtype), s["batch"], load, s["input_len"],
            s["output_len"], s.get("tensor_parallel_size") or 1, s.get("seed", 0), options)


def compare_html(result: dict[str, Any], label_a: str, label_b: str) -> str:
    """A self-contained plotly page: one bar per matched cell of the B / A ratio of
    output throughput, TTFT p50 and TPOT p50 (1 = equal). The figure travels as JSON in a
    ``<script type="application/json">`` element (:func:`infbench.data.outputs.html_json`:
    ``<``, ``>`` and ``&`` escaped), so no label can change how the page parses."""
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs


    pairs = result["pairs"]
    fig = go.Figure()
    for c in PLOTTED:
        fig.add_bar(name=c.header, x=[p["label"] for p in pairs], y=[p["ratio"][c.key] for p in pairs])
    fig.add_hline(y=1.0, line_dash="dash", line_color="grey")
    title = f"{label_b} / {label_a}: per-cell ratios ({len(pairs)} matched cells)"
    fig.update_layout(title=title, barmode="group", yaxis_title="ratio B / A", yaxis_type="log", height=600)
    fig.update_yaxes(**log_ticks([1.0, *(p["ratio"][c.key] for p in pairs for c in PLOTTED)]))  # no bare digit
    payload = html_json(plotly_text(json.loads(fig.to_json())))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">{generator_meta("compare")}'
            f"<title>{html.escape(title)}</title><script>{get_plotlyjs()}</script></head><body>"
            f'<div id="ratios"></div><script type="application/json" id="infbench-figure">{payload}</script>'
            "<script>const f = JSON.parse(document.getElementById('infbench-figure').textContent);"
            "Plotly.newPlot('ratios', f.data, f.layout);</script></body></html>")


def write_compare_html(result: dict[str, Any], label_a: str, label_b: str, path: Path,
                       protect: Any = ()) -> Path:
    """Write :func:`compare_html` to ``path`` through :func:`infbench.data.outputs.write_output`
    (atomic; never over a store in ``protect``, an SQLite file or a file that is not an
    earlier compare plot).

    Raises:
        OutputRefused: see :func:`infbench.data.outputs.check_output`.
        OSError: ``path`` cannot be written.
    """
    return write_output(path, compare_html(result, label_a, label_b), COMPARE_HTML, protect)


def _without_dtype(r: StoredCell) -> StoredCell:
    """A stored row whose ``spec_hash`` ignores the dtype (so two precisions of one workload match)."""
    spec = {k: v for k, v in r.spec.items() if k != "dtype"}
    return r.replace(spec_hash=short_hash(spec))


def compare_precisions(a: Sequence[StoredCell], b: Sequence[StoredCell], dtype_a: str, dtype_b: str,
                       quality: list[dict[str, Any]], max_increase: float | None = None) -> dict[str, Any]:
    """Two precisions of the same workloads: cells of side A at ``dtype_a`` matched with
    cells of side B at ``dtype_b`` whose spec is otherwise equal, and the perplexity change.

    Args:
        a, b: ``Store.results()`` rows (the same rows on both sides to compare within a store).
        dtype_a, dtype_b: the two dtypes (case-insensitive, as stored).
        quality: stored perplexity measurements (:func:`infbench.store.quality.quality_results`).
        max_increase: the gate as a fraction (0.01 = 1 %), or None.

    Returns:
        :func:`compare_rows`'s dict (ratios B / A) plus ``"perplexity"``: one entry per model,
        engine and text measured at both dtypes: ``{"model", "engine", "text_path", "n_ctx",
        "ppl_a", "ppl_b", "stderr_a", "stderr_b", "change"`` (ppl_b / ppl_a - 1),
        ``"beyond_gate"`` (None without a gate)``}``.
    """
    da, db = dtype_a.lower(), dtype_b.lower()
    res = compare_rows([_without_dtype(r) for r in a if str(r.spec["dtype"]).lower() == da],
                       [_without_dtype(r) for r in b if str(r.spec["dtype"]).lower() == db])
    newest: dict[tuple, dict[str, dict[str, Any]]] = {}
    for q in quality:
        if q.get("status") != "ok" or q.get("value") is None or q["dtype"].lower() not in (da, db):
            continue
        slot = newest.setdefault(group_key(q), {})
        d = q["dtype"].lower()
        if d not in slot or q["id"] > slot[d]["id"]:
            slot[d] = q
    ppl = []
    for _k, slot in newest.items():
        if da in slot and db in slot:
            qa, qb = slot[da], slot[db]
            change = qb["value"] / qa["value"] - 1.0
            ppl.append({"model": qa["model"], "engine": qa["engine"], "text_path": qa["text_path"],
                        "n_ctx": qa["n_ctx"], "ppl_a": qa["value"], "ppl_b": qb["value"], "stderr_a": qa["stderr"],
                        "stderr_b": qb["stderr"], "change": change,
                        "beyond_gate": None if max_increase is None else change > max_increase})
    res["perplexity"] = ppl
    return res
