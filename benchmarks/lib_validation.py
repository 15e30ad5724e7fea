"""Validation: the prediction's held-out error and interval coverage on LLM-Inference-Bench's
published results (benchmarks/data/lib_all_results.csv), every split of issue 23.

The CSV goes through the same path as `infbench import --format lib-csv` into a fresh
results store; each engine's cells are fitted hierarchically (one engine profile over every
device: `infbench.analysis.profile`) and four splits are measured
(`infbench.analysis.validation`): a random 30 % of every (device, engine) group; length
extrapolation (fitted on lengths <= 1024, the 2048-token cells predicted); leave one model
out (a model never seen on any device); leave one device out (a device predicted from the
other devices' profile and its own datasheet). Every held-out cell is checked against its
90 % interval, calibrated on inner folds of the training cells only. The script also fits
each engine on every cell (the parameters with their 90 % ranges, the numbers of fitted
parameters and cells) and, with --write-profiles, stores those fits and the validation's
residual quantiles as the built-in engine profiles (core/infbench/analysis/engine_profiles.json).

Heavy (about half an hour on 2 shared cores): run it under the shared lock.

    python benchmarks/lib_validation.py --write-profiles \\
        [--csv benchmarks/data/lib_all_results.csv] [--out benchmarks/results/lib_validation.json] [--splits ...]

`render(data, variant)` turns the JSON into the markdown tables of docs/roofline.md
(variants: summary, random, length, lomo, lodo, parameters, engines, stacks, profiles, counts; for
the CLI mode's JSON, benchmarks/results/lib_validation_cli.json: cli_summary, cli_folds,
cli_folds.SPLIT).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "4211f5d4e9bc0145ed541b6d372d5d8223b44235"


def _dumps(obj: Any) -> str:
    """JSON with an indent, but every list of plain values on one line (the files stay
    readable and diffable without a line per number)."""
    text = json.dumps(obj, indent=1, default=str)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r"\s*\n\s*", " ", m.group(1)) + "]", text)


def _strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the JSON: the coverage mask summarised, the held-out ``|log|`` errors kept to
    4 digits (the built-in interval table is made of them; ``--merge`` reuses them)."""
    out = []
    for r in rows:
        d = {k: v for k, v in r.items() if k not in ("scores", "covered_mask")}
        d["coverage"] = r["covered"] / r["measured"] if r["measured"] else None
        d["scores"] = [float(f"{x:.4g}") if x is not None and math.isfinite(x) else None for x in r["scores"]]
        out.append(d)
    return out


def _residuals(splits: dict[str, Any]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """The held-out errors of every split by engine and interval kind (``device`` also per
    stack), for the built-in interval table."""
    from infbench.analysis.intervals import scoped_kinds
    from infbench.analysis.validation import SPLITS

    res: dict[str, dict[str, dict[str, list[float]]]] = {}
    for split, d in splits.items():
        for r in d["rows"]:
            for k in scoped_kinds(SPLITS[split], r.get("stack"), r["device"]):
                res.setdefault(r["engine"], {}).setdefault(k, {}).setdefault("duration_s", []).extend(
                    x for x in r.get("scores") or [] if x is not None and math.isfinite(x))
    return res


def run(csv: Path, splits: list[str], write_profiles: bool, log: Any = print,
        previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Import, validate every split, fit every engine on all cells; the JSON document
    (splits not run are taken from ``previous``, a document written before)."""
    from infbench.analysis.intervals import KINDS, IntervalTable
    from infbench.analysis.profile import PARAM_NAMES, Priors, build_groups, fit_fleet
    from infbench.analysis.validation import (
        LENGTH_FIT,
        LENGTH_TEST,
        LODO_DEVICES,
        LODO_ENGINES,
        TARGETS,
        default_residuals,
        run_split,
        summarize,
    )
    from infbench.contract.manager import get_plugin_manager
    from infbench.report.lib_import import published_cells, read_lib_csv
    from infbench.store import Store
    from infbench.store.published import file_sha256, import_published

    pm = get_plugin_manager()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "results.db")
        src = {"file": csv.name, "sha256": file_sha256(csv), "commit": COMMIT}
        results, info = published_cells(read_lib_csv(csv), src, pm)
        run_id = import_published(store, results, src, command="benchmarks/lib_validation.py")
        stored = store.results(run_id=run_id)
        store.close()
    groups, skipped = build_groups(pm, stored)
    priors = Priors()
    doc: dict[str, Any] = {
        "csv": str(csv.resolve().relative_to(ROOT)) if csv.resolve().is_relative_to(ROOT) else str(csv),
        "commit": COMMIT, "rows": info["rows"], "import_s": time.perf_counter() - t0,
        "cells": sum(len(g.points) for g in groups), "groups": len(groups),
        "left_out": [{k: v for k, v in s.items() if k != "cell_ids"} for s in skipped],
        "priors": priors.to_dict(), "targets": {k: list(v) if isinstance(v, tuple) else v for k, v in TARGETS.items()},
        "lodo_groups": {"devices": list(LODO_DEVICES), "engines": list(LODO_ENGINES)},
        "length": {"fit_max": LENGTH_FIT, "test": LENGTH_TEST}, "splits": {}, "machine": "shared 2-core VM",
    }
    for split, d in ((previous or {}).get("splits") or {}).items():
        if split not in splits:
            doc["splits"][split] = d
            log(f"== {split}: kept from the previous run")
    for split in splits:
        t1 = time.perf_counter()
        rows = run_split(split, groups, priors, log=log)
        doc["splits"][split] = {"summary": summarize(split, rows), "rows": _strip(rows),
                                "seconds": time.perf_counter() - t1}
        s = doc["splits"][split]["summary"]
        log(f"== {split}: median {_pct(s['median'])} p90 {_pct(s['p90'])} coverage {_pct(s['coverage'])} "
            f"({s['groups']} rows, {time.perf_counter() - t1:.0f} s)")
    # Every engine fitted on every cell: parameters with 90 % ranges, counts.
    fits: dict[str, Any] = {}
    engines: dict[str, Any] = {}
    for e in sorted({g.engine for g in groups}):
        gs = [g for g in groups if g.engine == e]
        t1 = time.perf_counter()
        fit = fit_fleet(gs, priors)
        fits[e] = fit
        engines[e] = {
            "counts": fit.count_report(e),
            "cells": sum(len(g.points) for g in gs), "coordinates": fit.n_params, "effective_parameters": fit.dof,
            "devices": len(gs), "models": len({m for g in gs for m in g.models}), "sigma": fit.sigma,
            "fit_s": time.perf_counter() - t1, "profile": fit.parameters(e),
            "groups": [{"device": g.key, "catalog_id": g.device_id, "stack": g.stack, "cells": len(g.points),
                        "coordinates": len(PARAM_NAMES) + 3 * len(g.models),
                        "parameters": fit.parameters(e, g.stack, g.key)} for g in gs],
        }
        log(f"fit {e}: {engines[e]['cells']} cells, {fit.n_params} coordinates, {fit.dof:.1f} effective")
    doc["engines"] = engines
    defaults = default_residuals(groups)
    doc["defaults"] = {"median": float(np.median(defaults)) if defaults else None, "n": len(defaults),
                       "geomean": float(np.exp(np.mean(defaults)) - 1) if defaults else None}
    table = IntervalTable.from_residuals(_residuals(doc["splits"]), source="LLM-Inference-Bench validation splits "
                                                                         "(benchmarks/lib_validation.py)")
    table.q.setdefault("*", {})["defaults"] = {"duration_s": float(np.quantile(defaults, 0.9)) if defaults else
                                               float("inf")}
    table.n.setdefault("*", {})["defaults"] = {"duration_s": len(defaults)}
    doc["intervals"] = table.to_dict()
    doc["kinds"] = list(KINDS)
    doc["total_s"] = time.perf_counter() - t0
    if write_profiles:
        prof = {"source": f"LLM-Inference-Bench's published cells ({doc['csv']} at {COMMIT[:7]})",
                "command": "benchmarks/lib_validation.py --write-profiles", "intervals": table.to_dict(),
                "engines": {e: {"fit": f.to_dict()} for e, f in fits.items()}}
        path = ROOT / "core" / "infbench" / "analysis" / "engine_profiles.json"
        path.write_text(_dumps(prof) + "\n")
        log(f"wrote {path}")
    return doc


# -- the CLI mode: validation the way a user predicts (issue 34) ----------------------------

def _cli(args: list[str], home: Path) -> Any:
    """Run ``infbench ARGS`` in this process (the typer app, as the shell runs it) with
    ``INFBENCH_HOME=home``; its parsed ``--json`` output (a ``SystemExit`` on failure)."""
    from typer.testing import CliRunner

    from infbench.cli import app

    res = CliRunner().invoke(app, args, env={"INFBENCH_HOME": str(home), "COLUMNS": "250"})
    if res.exit_code != 0:
        raise SystemExit(f"infbench {' '.join(args)} failed ({res.exit_code}): {res.output[-1500:]}")
    return json.loads(res.stdout) if "--json" in args else res.stdout


def _csv_lines(csv: Path) -> tuple[str, dict[int, str], dict[int, tuple]]:
    """The CSV's header, its data lines by line number (1 = header) and each line's cell key
    (hardware, units, framework, model, lengths, batch: repeated rows of one cell share it)."""
    import csv as csvmod

    lines = csv.read_text().splitlines()
    head = next(i for i, t in enumerate(lines) if t.strip() and not t.lstrip().startswith("#"))
    keys: dict[int, tuple] = {}
    for i, row in enumerate(csvmod.reader(lines[head + 1:]), start=head + 2):
        if row and not row[0].lstrip().startswith("#"):
            keys[i] = tuple(x.strip() for x in row[:6])
    return lines[head], {i: lines[i - 1] for i in keys}, keys


def cli_folds(split: str, groups: list[Any]) -> list[tuple[str, set[str], set[str]]]:
    """The folds of ``split`` as ``(name, training cell ids, held-out cell ids)`` over the
    master store's groups (the library splits' definitions: :func:`infbench.analysis.validation.run_split`)."""
    from infbench.analysis.predict import held_out
    from infbench.analysis.validation import LENGTH_FIT, LENGTH_TEST

    pts = [(g, p) for g in groups for p in g.points]
    if split == "random":
        test = {p["cell_id"] for _, p in pts if held_out(p["cell_id"])}
        return [("random", {p["cell_id"] for _, p in pts} - test, test)]
    if split == "length":
        return [("length", {p["cell_id"] for _, p in pts if max(p["n_in"], p["n_out"]) <= LENGTH_FIT},
                 {p["cell_id"] for _, p in pts if max(p["n_in"], p["n_out"]) == LENGTH_TEST})]
    if split == "lomo":
        return [(m, {p["cell_id"] for _, p in pts if p["model"] != m},
                 {p["cell_id"] for _, p in pts if p["model"] == m}) for m in sorted({p["model"] for _, p in pts})]
    if split == "lodo":
        return [(d, {p["cell_id"] for g, p in pts if g.device_id != d}, {p["cell_id"] for g, p in pts
                                                                            if g.device_id == d})
                for d in sorted({g.device_id for g in groups})]
    raise ValueError(f"unknown split {split!r}")


def run_cli_fold(name: str, split: str, train: set[str], test: set[str], groups: list[Any], stored: list[dict],
                 csv_parts: tuple[str, dict[int, str], dict[int, tuple]], tmp: Path,
                 log: Any = print) -> list[dict[str, Any]]:
    """One fold the way a user runs it: a fresh ``INFBENCH_HOME`` and store holding only the
    training rows (``infbench import --format lib-csv``), ``infbench predict --calibrate
    --engine E --no-builtin`` for every engine with held-out cells, then ``infbench predict
    --json --no-builtin`` for the held-out cells, grouped into one grid per (device
    campaign, engine, model, tp, n_batch); each held-out cell is scored against its row.

    Returns rows like :func:`infbench.analysis.validation.evaluate`'s (one per held-out
    group, ``model`` for ``lomo``), plus ``refused`` (measured cells the prediction refused:
    they count as not covered and are left out of the error) and ``calibrations`` (the
    engine profiles fitted: cells and devices)."""
    from infbench.analysis.validation import geomean

    header, lines, keys = csv_parts
    line_of = {r["cell_id"]: (r.get("engine") or {}).get("line") for r in stored}
    want = {keys[line_of[c]] for c in train if line_of.get(c) in keys}
    home = tmp / f"home-{split}-{name}".replace("/", "_")
    home.mkdir(parents=True, exist_ok=True)
    train_csv = home / "train.csv"
    train_csv.write_text("\n".join([header] + [t for i, t in lines.items() if keys[i] in want]) + "\n")
    db = home / "results.db"
    _cli(["import", "--format", "lib-csv", str(train_csv), "--store", str(db)], home)
    trained = {g.engine for g in groups for p in g.points if p["cell_id"] in train}
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for g in groups:
        held = [p for p in g.points if p["cell_id"] in test]
        if held and g.engine in trained:  # an engine with no training cells has no profile to predict from
            by_group[(g.key, g.engine)] = held
    engines = sorted({e for _, e in by_group})
    fitted: dict[str, Any] = {}
    for e in engines:
        t0 = time.perf_counter()
        prof = _cli(["predict", "--calibrate", "--engine", e, "--store", str(db), "--no-builtin", "--json"],
                    home)["profile"]
        fitted[e] = {"cells": prof["cells"], "devices": [d["device"] for d in prof["devices"]],
                     "seconds": time.perf_counter() - t0}
        log(f"   {split} {name}: profile {e} on {prof['cells']} cells in {fitted[e]['seconds']:.0f} s")
    gmap = {(g.key, g.engine): g for g in groups}
    rows = []
    for (key, e), held in sorted(by_group.items()):
        g = gmap[(key, e)]
        sub: dict[tuple, list[dict[str, Any]]] = {}
        for p in held:
            sub.setdefault((p["model"], p["dtype"], int(p["tp"]), json.dumps(p.get("options") or {}, sort_keys=True)),
                           []).append(p)
        scores, covered, measured, unbounded, refused, qs = [], 0, 0, 0, 0, []
        errors: list[str] = []
        by_model: dict[str, dict[str, Any]] = {}
        for (model, dtype, tp, opts), ps in sorted(sub.items()):
            args = ["predict", "-m", model, "-d", g.device_id, "--device-label", key, "-e", e, "--dtype", dtype,
                    "--tp", str(tp), "-b", ",".join(sorted({str(int(p["batch"])) for p in ps}, key=int)),
                    "--input", ",".join(sorted({str(p["n_in"]) for p in ps}, key=int)),
                    "--output", ",".join(sorted({str(p["n_out"]) for p in ps}, key=int)), "--no-builtin", "--json"]
            for k, v in json.loads(opts).items():
                args += ["--engine-arg", f"{k}={v}"]
            try:
                pred = _cli(args, home)["predictions"]
            except SystemExit as exc:  # the CLI refused the grid: its measured cells count as refused
                log(f"   {split} {name}: {exc}")
                pred = []
                errors.append(str(exc)[:300])
            at = {(r["batch"], r["input_len"], r["output_len"]): r for r in pred}
            for p in ps:
                r = at.get((int(p["batch"]), p["n_in"], p["n_out"])) or {}
                meas = p["duration_s"]
                mine = by_model.setdefault(model, {"scores": [], "covered": 0, "measured": 0, "refused": 0})
                measured += 1
                mine["measured"] += 1
                if r.get("duration_s") is None:
                    refused += 1
                    mine["refused"] += 1
                    continue
                sc = abs(math.log(r["duration_s"] / meas))
                scores.append(sc)
                mine["scores"].append(sc)
                lo, hi = r["interval"]["duration_s"]
                if lo is None:
                    unbounded += 1
                    continue
                qs.append(math.log(hi / r["duration_s"]))
                if lo <= meas <= hi:
                    covered += 1
                    mine["covered"] += 1
        base = {"device": key, "catalog_id": g.device_id, "engine": e, "stack": g.stack, "split": split,
                "fold": name, "profile": fitted.get(e), **({"cli_errors": errors} if errors else {})}
        if split == "lomo":
            for model, d in by_model.items():
                rows.append({**base, "model": model, "n": d["measured"], "error": geomean(d["scores"]),
                             "covered": d["covered"], "measured": d["measured"], "refused": d["refused"],
                             "unbounded": 0, "q_median": float(np.median(qs)) if qs else float("nan"),
                             "scores": d["scores"]})
        else:
            rows.append({**base, "n": measured, "error": geomean(scores), "covered": covered, "measured": measured,
                         "refused": refused, "unbounded": unbounded,
                         "q_median": float(np.median(qs)) if qs else float("nan"), "scores": scores})
    return rows


def run_cli(csv: Path, splits: list[str], log: Any = print, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every split in the CLI mode (:func:`run_cli_fold` per fold): the held-out figures a
    user gets by running ``infbench`` on the training rows alone, with the built-in profile
    out of the way (``--no-builtin``: it was fitted on every published cell)."""
    from infbench.analysis.profile import build_groups
    from infbench.analysis.validation import TARGETS, summarize
    from infbench.contract.manager import get_plugin_manager
    from infbench.report.lib_import import published_cells, read_lib_csv
    from infbench.store import Store
    from infbench.store.published import file_sha256, import_published

    pm = get_plugin_manager()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        store = Store(tmp / "master.db")
        src = {"file": csv.name, "sha256": file_sha256(csv), "commit": COMMIT}
        results, info = published_cells(read_lib_csv(csv), src, pm)
        run_id = import_published(store, results, src, command="benchmarks/lib_validation.py --cli")
        stored = store.results(run_id=run_id)
        store.close()
        groups, skipped = build_groups(pm, stored)
        parts = _csv_lines(csv)
        doc: dict[str, Any] = {"mode": "cli", "csv": str(csv.resolve().relative_to(ROOT))
                               if csv.resolve().is_relative_to(ROOT) else str(csv), "commit": COMMIT,
                               "rows": info["rows"], "cells": sum(len(g.points) for g in groups),
                               "groups": len(groups),
                               "left_out": [{k: v for k, v in x.items() if k != "cell_ids"} for x in skipped],
                               "targets": {k: list(v) if isinstance(v, tuple) else v for k, v in TARGETS.items()},
                               "splits": {}, "machine": "shared 2-core VM",
                               "commands": ["infbench import --format lib-csv TRAIN.csv --store S",
                                            "infbench predict --calibrate --engine E --store S --no-builtin --json",
                                            "infbench predict -m M -d D --device-label CAMPAIGN -e E --tp T -b .. "
                                            "--input .. --output .. --no-builtin --json"]}
        for split, d in ((previous or {}).get("splits") or {}).items():
            if split not in splits:
                doc["splits"][split] = d
        for split in splits:
            t1 = time.perf_counter()
            rows: list[dict[str, Any]] = []
            for name, train, test in cli_folds(split, groups):
                if not test or not train:
                    continue
                rows += run_cli_fold(name, split, train, test, groups, stored, parts, tmp, log)
            doc["splits"][split] = {"summary": {**summarize(split, rows),
                                                "refused": sum(r.get("refused", 0) for r in rows)},
                                    "rows": _strip(rows), "seconds": time.perf_counter() - t1}
            sm = doc["splits"][split]["summary"]
            log(f"== cli {split}: median {_pct(sm['median'])} p90 {_pct(sm['p90'])} coverage {_pct(sm['coverage'])} "
                f"({sm['groups']} rows, {time.perf_counter() - t1:.0f} s)")
    doc["total_s"] = time.perf_counter() - t0
    return doc


# -- rendering (docs/roofline.md; the docs-numbers convention) ------------------------------

def _pct(x: Any, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:.{digits}f} %"


def _verdict(ok: bool, value: float | None = None, target: float | None = None) -> str:
    """``met`` or ``**missed**``, with the margin in percentage points when given."""
    if value is None or target is None:
        return "met" if ok else "**missed**"
    gap = 100 * abs(value - target)
    return f"met ({gap:.1f} points under)" if ok else f"**missed** by {gap:.1f} points"


def _cov_verdict(cov: float | None, lo: float, hi: float) -> str:
    if cov is None:
        return "-"
    if lo <= cov <= hi:
        return "met"
    return f"**missed** by {100 * (lo - cov if cov < lo else cov - hi):.1f} points"


def _left_out(data: dict[str, Any]) -> str:
    """What the figures leave out of the published file, in one sentence."""
    lo = data.get("left_out") or []
    floor = [x for x in lo if x.get("why") == "below_floor"]
    unknown = [x for x in lo if x.get("why") == "unknown_model"]
    other = [x for x in lo if x.get("why") not in ("below_floor", "unknown_model")]
    parts = []
    if floor:
        parts.append(f"{sum(x['n'] for x in floor)} published cells measured faster than their roofline floor (an "
                     "impossible time for the described device: "
                     + ", ".join(f"{x['device']} / {x['engine']} {x['n']}" for x in floor) + ")")
    if unknown:
        parts.append(f"{sum(x['n'] for x in unknown)} cells of models outside the zoo")
    if other:
        parts.append("; ".join(f"{x['device']} / {x['engine']} ({x['cells']} cells: {x['why']})" for x in other))
    return ("Left out of every figure: " + "; ".join(parts) + ".") if parts else ""


def render(data: dict[str, Any], variant: str | None = None) -> str:
    """Markdown tables of the validation (``variant``: ``summary`` (default), ``random``,
    ``length``, ``lomo``, ``lodo``, ``parameters``, ``engines``, ``stacks``, ``profiles``)."""
    v = variant or "summary"
    sp = data.get("splits", {})
    t = data.get("targets", {})
    if v == "summary":
        lines = ["| split | what is held out | rows | median error | p90 | worst | rows > 20 % | 90 % interval "
                 "coverage | target | |", "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
        what = {"random": "30 % of each (device, engine) group's cells",
                "length": f"2048-token cells; fitted on <= {data.get('length', {}).get('fit_max', 1024)}",
                "lomo": "one model on every device (one row per device and model)",
                "lodo": "one device (every campaign on it); profile + datasheet"}
        for name in ("random", "length", "lomo", "lodo"):
            if name not in sp:
                continue
            s = sp[name]["summary"]
            cov = s.get("coverage")
            lo, hi = t.get("coverage", [0.85, 0.95])
            if not s["groups"]:
                continue
            if name == "random":
                target, val, goal = f"median <= {_pct(t['random_median'], 0)}", s["median"], t["random_median"]
            elif name == "length":
                target, val, goal = f"median <= {_pct(t['length_median'], 0)}", s["median"], t["length_median"]
            elif name == "lomo":
                target, val, goal = f"p90 <= {_pct(t['lomo_p90'], 0)}", s["p90"], t["lomo_p90"]
            else:
                target, val, goal = "", None, None
            lines.append(f"| {name} | {what[name]} | {s['groups']} | {_pct(s['median'])} | {_pct(s['p90'])} | "
                         f"{_pct(s['max'])} | {s['over_20']} | {_pct(cov)} ({_cov_verdict(cov, lo, hi)}) | {target} | "
                         f"{_verdict(val <= goal, val, goal) if target else ''} |")
            if name == "lodo" and (s.get("issue") or {}).get("groups"):
                i = s["issue"]
                lines.append(f"| lodo, the issue's groups | A100, H100, GH200, MI250, MI300X x vLLM, TensorRT-LLM, "
                             f"llama.cpp | {i['groups']} | {_pct(i['median'])} | {_pct(i['p90'])} | {_pct(i['max'])} | "
                             f"{i['over_20']} | {_pct(i['coverage'])} ({_cov_verdict(i['coverage'], lo, hi)}) | "
                             f"median <= {_pct(t['lodo_median'], 0)} | "
                             f"{_verdict(i['median'] <= t['lodo_median'], i['median'], t['lodo_median'])} |")
        d = data.get("defaults") or {}
        unb = sum((sp[n]["summary"].get("unbounded") or 0) for n in sp)
        lines.append("")
        if unb:
            lines.append(f"{unb} held-out measurements had no finite interval (a kind their training cells could "
                         "not calibrate) and count as not covered.")
        lines.append(_left_out(data))
        lines.append(f"{data.get('cells')} cells in {data.get('groups')} (device, engine) groups; uncalibrated "
                     f"generic defaults on the same cells: geometric-mean error {_pct(d.get('geomean'))}. Coverage "
                     f"target: {_pct(t.get('coverage', [0.85])[0], 0)} to {_pct(t.get('coverage', [0, 0.95])[1], 0)} "
                     "of held-out cells inside their 90 % interval.")
        return "\n".join(lines)
    if v in ("random", "length", "lodo"):
        rows = sorted(sp.get(v, {}).get("rows", []), key=lambda r: (r["engine"], r["device"]))
        lines = ["| device (published name) | engine | held-out cells | error | 90 % coverage | median interval |",
                 "|---|---|---:|---:|---:|---:|"]
        for r in rows:
            half = r.get("q_median")
            width = "-" if half is None or not math.isfinite(half) else f"x/ {math.exp(half):.2f}"
            lines.append(f"| {r['device']} | {r['engine']} | {r['n']} | {_pct(r['error'])} | {_pct(r['coverage'])} | "
                         f"{width} |")
        return "\n".join(lines)
    if v == "lomo":
        rows = sp.get("lomo", {}).get("rows", [])
        by: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by.setdefault(r["engine"], []).append(r)
        lines = ["| engine | folds | median | p90 | worst fold | folds > 20 % | 90 % coverage |",
                 "|---|---:|---:|---:|---|---:|---:|"]
        for e, rs in sorted(by.items()):
            errs = [r["error"] for r in rs if r["error"] is not None and math.isfinite(r["error"])]
            worst = max(rs, key=lambda r: r["error"] if math.isfinite(r["error"]) else -1)
            cov = sum(r["covered"] for r in rs) / max(sum(r["measured"] for r in rs), 1)
            lines.append(f"| {e} | {len(errs)} | {_pct(float(np.median(errs)))} | "
                         f"{_pct(float(np.percentile(errs, 90)))} | {worst['model']} on {worst['device']}: "
                         f"{_pct(worst['error'])} | {sum(1 for x in errs if x > 0.2)} | {_pct(cov)} |")
        lines += ["", "The worst folds:", "", "| device | engine | model | cells | error | 90 % coverage |",
                  "|---|---|---|---:|---:|---:|"]
        for r in sorted(rows, key=lambda r: -r["error"] if math.isfinite(r["error"]) else 0)[:12]:
            lines.append(f"| {r['device']} | {r['engine']} | {r['model']} | {r['n']} | {_pct(r['error'])} | "
                         f"{_pct(r['coverage'])} |")
        return "\n".join(lines)
    if v == "parameters":
        lines = ["| engine | devices | models | training cells | coordinates fitted | effective parameters | "
                 "per device: coordinates / cells |", "|---|---:|---:|---:|---:|---:|---|"]
        for e, d in sorted(data.get("engines", {}).items()):
            per = "; ".join(f"{g['device']} {g['coordinates']} / {g['cells']}" for g in d["groups"])
            lines.append(f"| {e} | {d['devices']} | {d['models']} | {d['cells']} | {d['coordinates']} | "
                         f"{d['effective_parameters']:.1f} | {per} |")
        return "\n".join(lines)
    if v == "engines":
        # The engine profiles side by side (value and 90 % range).
        eng = data.get("engines", {})
        names = sorted(eng)
        params = list(next(iter(eng.values()))["profile"]) if eng else []

        def c(p: dict[str, Any]) -> str:
            return f"{p['value']:.3g}" + ("" if p["lo"] is None else f" ({p['lo']:.2g}-{p['hi']:.2g})")

        lines = ["| parameter | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for n in params:
            lines.append(f"| {n} | " + " | ".join(c(eng[e]["profile"][n]) for e in names) + " |")
        return "\n".join(lines)
    if v == "stacks":
        # Per engine run on more than one stack: each device's kernel efficiencies and step
        # overhead, grouped by stack (where CUDA and ROCm differ).
        lines = ["| engine | stack | device | eff_memory | eff_compute | eff_attention | overhead_s (ms) | "
                 "overhead_per_device_s (ms) |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for e, d in sorted(data.get("engines", {}).items()):
            if len({g["stack"] for g in d["groups"]}) < 2:
                continue
            for g in sorted(d["groups"], key=lambda g: (g["stack"], g["device"])):
                p = g["parameters"]
                lines.append(f"| {e} | {g['stack']} | {g['device']} | {p['eff_memory']['value']:.2f} | "
                             f"{p['eff_compute']['value']:.2f} | {p['eff_attention']['value']:.2f} | "
                             f"{1e3 * p['overhead_s']['value']:.2f} | "
                             f"{1e3 * p['overhead_per_device_s']['value']:.2f} |")
        return "\n".join(lines)
    if v == "profiles":
        def cell(p: dict[str, Any]) -> str:
            def f(x: float) -> str:
                return f"{x:.3g}"
            return f(p["value"]) + ("" if p["lo"] is None else f" ({f(p['lo'])}-{f(p['hi'])})")

        lines = []
        for e, d in sorted(data.get("engines", {}).items()):
            cols = ["profile"] + [g["device"] for g in d["groups"]]
            lines += [f"**{e}**: value (90 % range) of the profile, then of each device", "",
                      "| parameter | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
            for n in d["profile"]:
                lines.append(f"| {n} | " + " | ".join([cell(d["profile"][n])]
                                                     + [cell(g["parameters"][n]) for g in d["groups"]]) + " |")
            lines.append("")
        return "\n".join(lines).rstrip()
    if v == "counts":
        # The device-count terms of every engine fitted on all cells.
        lines = ["| engine | device (published name) | devices | factor on every time (90 % range) |",
                 "|---|---|---:|---:|"]
        for e, d in sorted(data.get("engines", {}).items()):
            for key, by_n in sorted((d.get("counts") or {}).items()):
                for n, c in sorted(by_n.items(), key=lambda t: int(t[0])):
                    sd = c.get("sd")
                    rng = "" if sd is None or not math.isfinite(sd) else \
                        f" ({math.exp(c['log'] - 1.645 * sd):.2f}-{math.exp(c['log'] + 1.645 * sd):.2f})"
                    lines.append(f"| {e} | {key} | {n} | x{c['factor']:.2f}{rng} |")
        return "\n".join(lines)
    if v == "cli_summary":
        lines = ["| split | folds | rows | median error | p90 | worst | rows > 20 % | refused | 90 % interval "
                 "coverage | target | |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for name in ("random", "length", "lomo", "lodo"):
            if name not in sp:
                continue
            s_ = sp[name]["summary"]
            lo, hi = t.get("coverage", [0.85, 0.95])
            folds = len({r.get("fold") for r in sp[name]["rows"]})
            if name in ("random", "length"):
                key = f"{name}_median"
                target, val, goal = f"median <= {_pct(t[key], 0)}", s_["median"], t[key]
            elif name == "lomo":
                target, val, goal = f"p90 <= {_pct(t['lomo_p90'], 0)}", s_["p90"], t["lomo_p90"]
            else:
                target, val, goal = f"median <= {_pct(t['lodo_median'], 0)}", s_["median"], t["lodo_median"]
            verdict = _verdict(val is not None and val <= goal, val, goal) if val is not None else "-"
            lines.append(f"| {name} | {folds} | {s_['groups']} | {_pct(s_['median'])} | {_pct(s_['p90'])} | "
                         f"{_pct(s_['max'])} | {s_['over_20']} | {s_.get('refused', 0)} | {_pct(s_['coverage'])} "
                         f"({_cov_verdict(s_['coverage'], lo, hi)}) | {target} | {verdict} |")
            if name == "lodo" and (s_.get("issue") or {}).get("groups"):
                i = s_["issue"]
                lines.append(f"| lodo, the issue's groups | | {i['groups']} | {_pct(i['median'])} | {_pct(i['p90'])} | "
                             f"{_pct(i['max'])} | {i['over_20']} | | {_pct(i['coverage'])} "
                             f"({_cov_verdict(i['coverage'], lo, hi)}) | median <= {_pct(t['lodo_median'], 0)} | "
                             f"{_verdict(i['median'] <= t['lodo_median'], i['median'], t['lodo_median'])} |")
        lines += ["", _left_out(data), f"{data.get('cells')} cells in {data.get('groups')} (device, engine) groups; "
                  "per fold a fresh "
                  "`INFBENCH_HOME` and store with the training rows only, `infbench predict --calibrate --engine E "
                  "--no-builtin`, then `infbench predict --no-builtin --json` for the held-out cells. Refused: "
                  "measured cells the prediction said cannot run (counted as not covered, left out of the error)."]
        return "\n".join(lines)
    if v.startswith("cli_folds"):
        # Fold by fold (cli_folds: every split; cli_folds.SPLIT: one), worst first; for lomo
        # only the folds above 20 % (its target is the p90).
        want = v.split(".", 1)[1] if "." in v else None
        lines = ["| split | fold | device (published name) | engine | model | held-out cells | error | 90 % coverage | "
                 "refused |", "|---|---|---|---|---|---:|---:|---:|---:|"]
        for name in ("random", "length", "lomo", "lodo"):
            if name not in sp or (want and name != want):
                continue
            rows = sorted(sp[name]["rows"], key=lambda r: -(r["error"] if r["error"] is not None and
                                                               math.isfinite(r["error"]) else 9))
            if name == "lomo":  # its target is on the p90: the folds above 20 %
                rows = [r for r in rows if r["error"] is None or not math.isfinite(r["error"]) or r["error"] > 0.2]
            for r in rows:
                lines.append(f"| {name} | {r.get('fold', '')} | {r['device']} | {r['engine']} | {r.get('model', '')} | "
                             f"{r['n']} | {_pct(r['error'])} | {_pct(r.get('coverage'))} | {r.get('refused', 0)} |")
        return "\n".join(lines)
    raise ValueError(f"unknown variant {variant!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "data" / "lib_all_results.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lib_validation.json")
    ap.add_argument("--splits", nargs="*", default=["random", "length", "lomo", "lodo"])
    ap.add_argument("--write-profiles", action="store_true",
                    help="store the all-cells fits as core/infbench/analysis/engine_profiles.json")
    ap.add_argument("--merge", action="store_true", help="keep the splits not run from the existing --out file")
    ap.add_argument("--markdown", action="store_true", help="print the docs/roofline.md tables")
    ap.add_argument("--cli", action="store_true",
                    help="validate the way a user predicts: per fold a fresh INFBENCH_HOME and store with the "
                         "training rows only, `infbench predict --calibrate --engine E --no-builtin`, then "
                         "`infbench predict --json` for the held-out cells (default --out: "
                         "benchmarks/results/lib_validation_cli.json)")
    args = ap.parse_args()
    if args.cli and args.out == ap.get_default("out"):
        args.out = ROOT / "benchmarks" / "results" / "lib_validation_cli.json"
    previous = json.loads(args.out.read_text()) if args.merge and args.out.is_file() else None
    if args.cli:
        doc = run_cli(args.csv, args.splits, previous=previous)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(_dumps(doc) + "\n")
        print(f"wrote {args.out} in {doc['total_s']:.0f} s")
        if args.markdown:
            for v in ("cli_summary", "cli_folds"):
                print(f"\n<!-- {v} -->\n" + render(doc, v))
        return
    doc = run(args.csv, args.splits, args.write_profiles, previous=previous)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_dumps(doc) + "\n")
    print(f"wrote {args.out} in {doc['total_s']:.0f} s")
    if args.markdown:
        for v in ("summary", "random", "length", "lomo", "lodo", "parameters", "engines", "stacks", "profiles"):
            print(f"\n<!-- {v} -->\n" + render(doc, v))


if __name__ == "__main__":
    main()
