"""``infbench predict``: analytical TTFT/TPOT/E2E/throughput (GenZ roofline plus the engine's
scheduling), calibration per (device, engine), platform requirements for a use case."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from infbench.analysis import predict as P
from infbench.analysis.calibration import (
    MIN_DEVICE_CELLS,
    calibrate,
    fit_engine_profile,
    resolve_basis,
    save_device_calibration,
    save_profile,
)
from infbench.analysis.intervals import INTERVAL_METRICS, interval
from infbench.analysis.predict import engine_family
from infbench.analysis.predict_inputs import PredictOptions, check_predict_flags
from infbench.analysis.profile import build_groups, stack_of, vendor_of
from infbench.analysis.requirements import custom_limits, devices_meeting, parse_sets, requirements
from infbench.analysis.roofline import Limits, RooflineError
from infbench.cli.common import JSON_HELP, need, open_store, out, plugin_manager, print_json, read_results, split
from infbench.contract.registry import engine_specs
from infbench.data.engine_options import check_values
from infbench.data.errors import ConfigError
from infbench.data.models import resolve
from infbench.data.paths import default_home
from infbench.detect.devices import catalog, load_device_specs
from infbench.engines.options import parse_engine_args
from infbench.plan import PRESETS, context_length

if TYPE_CHECKING:
    from infbench.contract.manager import PluginManager
    from infbench.data.stored import StoredCell


Opt = typer.Option
ListOpt = list[str] | None


def predict(
    model: Annotated[ListOpt, Opt("--model", "-m", help="Zoo model(s) (`infbench models`).")] = None,
    device: Annotated[ListOpt, Opt("--device", "-d", help="Described device id(s) (`infbench devices`), or cpu "
                                   "for this host's measured CPU.")] = None,
    engine: Annotated[str, Opt("--engine", "-e", help="Engine whose scheduling is modelled: vllm, trtllm-serve, "
                               "llama.cpp, transformers, deepspeed-mii, deepspeed, or generic.")] = "generic",
    batch: Annotated[ListOpt, Opt("--batch", "-b", help="Batch size(s) / concurrency.")] = None,
    input_len: Annotated[ListOpt, Opt("--input", "--input-len", help="Input length(s) in tokens.")] = None,
    output_len: Annotated[ListOpt, Opt("--output", "--output-len", help="Output length(s) in tokens.")] = None,
    tp: Annotated[ListOpt, Opt("--tp", "--tensor-parallel-size", help="Devices per model instance (tensor "
                                                                       "parallel; llama.cpp: layer split).")] = None,
    pp: Annotated[ListOpt, Opt("--pp", "--pipeline-parallel-size", help="Pipeline stages.")] = None,
    ep: Annotated[int, Opt("--ep", "--expert-parallel-size", help="Expert-parallel devices (MoE models).")] = 1,
    moe_imbalance: Annotated[float, Opt("--moe-imbalance", help="Expert load: 0 = even routing, 1 = GenZ's worst "
                                        "case (all active experts on one device).")] = 0.0,
    dtype: Annotated[str, Opt("--dtype", help="Precision class or engine dtype (bf16, fp16, fp8, "
                              "q8_0...).")] = "bf16",
    engine_arg: Annotated[ListOpt, Opt("--engine-arg", help="Engine option KEY=VALUE that changes the schedule: "
                                       "enable_chunked_prefill=true with max_num_batched_tokens=N; the server's slots "
                                       "(max_num_seqs, max_running_requests, max_batch_size or llama.cpp's "
                                       "parallel: a batch above them runs in waves); gpu_memory_utilization, "
                                       "n_batch/n_ubatch, flash_attn.")] = None,
    draft_model: Annotated[str | None, Opt("--draft-model", help="Speculative decoding: the draft model.")] = None,
    spec_k: Annotated[int, Opt("--spec-k", help="Speculative decoding: tokens drafted per step.")] = 4,
    acceptance: Annotated[float, Opt("--acceptance", help="Speculative decoding: token acceptance rate.")] = 0.7,
    calibrate_: Annotated[bool, Opt("--calibrate", help="Fit the factors to this device's stored cells (local and "
                                    "imported), one fit per engine (or --engine), held-out error reported; later "
                                    "predictions for that (device, engine) use them. With --engine and no --device: "
                                    "fit the engine's profile over every device with stored cells of it, used for "
                                    "devices without cells of their own.")] = False,
    no_builtin: Annotated[bool, Opt("--no-builtin", help="Ignore the built-in engine profiles (fitted on "
                                    "LLM-Inference-Bench's published cells) and their intervals entirely: fit, "
                                    "calibrate and predict from this home's own calibrations only (a leak-free "
                                    "check of your own cells).")] = False,
    device_label: Annotated[str | None, Opt("--device-label", help="When several campaigns map to one catalog "
                                            "device (published hardware names, e.g. 'Intel PVC GPU' and 'Intel Max "
                                            "1550'): --calibrate -d fits only this one's cells, and predictions use "
                                            "its device terms.")] = None,
    store_path: Annotated[Path | None, Opt("--store", help="Results database (for --calibrate).")] = None,
    run_id: Annotated[str | None, Opt("--run", help="Calibrate on this run's cells only (id prefix).")] = None,
    requirements_: Annotated[bool, Opt("--requirements", help="Compute, bandwidth and capacity needed to meet the "
                                       "--preset's TTFT/TPOT SLOs (GenZ Sec. VI).")] = False,
    preset: Annotated[str | None, Opt("--preset", help="Use case for --requirements: genz-qa, genz-chat, genz-rag, "
                                      "genz-summarization, genz-codegen.")] = None,
    slo_ttft: Annotated[float | None, Opt("--slo-ttft", help="TTFT limit in s (overrides the preset's).")] = None,
    slo_tpot: Annotated[float | None, Opt("--slo-tpot", help="TPOT limit in s (overrides the preset's).")] = None,
    device_file: Annotated[Path | None, Opt("--device-file", help="A devices.yaml-style file describing hardware "
                                            "that is not in the catalog (its first entry).")] = None,
    set_: Annotated[ListOpt, Opt("--set", help="What-if figure KEY=VALUE: memory_bandwidth_tb_s, memory_gib, "
                                 "link_bandwidth_gb_s, peak_PRECISION_tflops (fp32 ... int4).")] = None,
    eff_compute: Annotated[float | None, Opt("--eff-compute", help="Override: fraction of peak FLOP/s reached "
                                             "(0-1].")] = None,
    eff_memory: Annotated[float | None, Opt("--eff-memory", help="Override: fraction of peak bandwidth reached "
                                            "(0-1].")] = None,
    overhead_ms: Annotated[float | None, Opt("--overhead-ms", help="Override: fixed time per forward step "
                                             "(ms).")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Predict TTFT, TPOT, E2E, batch duration and throughput analytically: GenZ's
    per-operator roofline with efficiency factors, plus what the engine does (KV-cache
    capacity and waves, per-step overheads, chunked prefill, flash attention or not) and
    the parallelism (tensor, pipeline, expert) with link efficiency. Method: docs/roofline.md.

    Examples:

    `infbench predict -m llama-3-8b -d h100-sxm -e vllm -b 1,16,64 --input 1024 --output 128`

    `infbench predict -m llama-2-7b -d a100-40gb -e vllm -b 64 --input 2048 --output 2048`
    (64 x 4096 tokens do not fit beside the weights: the batch runs in waves)

    `infbench predict -m mixtral-8x7b -d h100-sxm --tp 1 --ep 8 -b 64 --moe-imbalance 1`

    `infbench predict -m llama-3-70b -d h100-sxm --draft-model llama-3-8b --spec-k 4 --acceptance 0.7`

    `infbench predict --calibrate -d a100-40gb -e vllm` (after `infbench import --format lib-csv FILE`)

    `infbench predict --calibrate -e vllm` (vLLM's profile over every device with its cells), then
    `infbench predict -m llama-3-8b -d h200 -e vllm` (a device without cells: profile + datasheet)

    `infbench predict --requirements -m llama-3-70b --preset genz-chat -b 16`

    `infbench predict -m llama-3-70b --set memory_bandwidth_tb_s=8 --set peak_bf16_tflops=2500`
    """
    flags = dict(locals())  # issue 22: every flag checked first (infbench.analysis.predict_inputs)

    pm = plugin_manager()
    home = default_home()
    report_cal: list[dict[str, Any]] = []
    profile_report: dict[str, Any] | None = None
    check_predict_flags(flags)
    sets = parse_sets(split(set_, "--set"))
    profile_only = calibrate_ and engine != "generic" and not device and not sets and not device_file
    devices_ = split(device, "--device") or ([] if (sets or device_file or profile_only) else ["cpu"])
    limits = {d: P.limits_for_id(pm, d) for d in devices_}
    stacks: dict[str, str | None] = {lim.id: stack_of(vendor_of(pm, d)) for d, lim in limits.items()}
    what_if: set[str] = set()
    if sets or device_file:
        file_vendor = _file_vendor(device_file)
        if limits:
            new = {}
            for v in limits.values():
                lim = custom_limits(v, sets)
                new[lim.id] = lim
                stacks[lim.id] = stacks.get(v.id)
            limits = new
        else:
            lim = custom_limits(None, sets, device_file)
            limits = {lim.id: lim}
            stacks[lim.id] = stack_of(file_vendor) if file_vendor else None
        what_if = set(limits)
    options = predict_engine_args(pm, engine, parse_engine_args(split(engine_arg, "--engine-arg") or []))
    shapes = [resolve(m) for m in (split(model, "--model") or [])]
    check_predict_context(shapes, split(input_len, "--input", int) or [1024],
                          split(output_len, "--output", int) or [128])
    if requirements_:
        _requirements(pm, home, shapes, limits, stacks, preset, slo_ttft, slo_tpot,
                      split(batch, "--batch", int) or [1], dtype, engine, as_json)
        return
    builtin = not no_builtin
    if device_label is not None and not devices_:
        raise ConfigError("--device-label chooses a campaign of the --device given",
                          hint="e.g. --device max-1550 --device-label 'Intel PVC GPU'")
    if calibrate_ and profile_only:
        profile_report = _calibrate_profile(pm, home, engine, store_path, run_id, builtin)
    elif calibrate_:
        report_cal = _calibrate(pm, home, limits, stacks, engine, store_path, run_id, builtin, device_label)
        fitted = {c["engine"] for c in report_cal}
        if engine == "generic" and len(fitted) == 1:
            engine = fitted.pop()  # the only engine measured there: predict as it schedules
    if not shapes and not calibrate_:
        raise ConfigError("give --model (and --device), or --calibrate, or --requirements",
                          hint="e.g. infbench predict --model llama-3-8b --device h100-sxm --engine vllm")
    bases: dict[str, Any] = {}
    for d, lim in limits.items():
        b = resolve_basis(home, lim.id.split("+")[0], engine, stacks.get(d), what_if=d in what_if,
                          builtin=builtin, label=device_label)
        if eff_compute or eff_memory or overhead_ms is not None:
            eff = b.efficiency_for(engine, lim, None)
            eff = P.Efficiency.from_dict({**eff.__dict__, "eff_compute": eff_compute or eff.eff_compute,
                                          "eff_memory": eff_memory or eff.eff_memory,
                                          "overhead_s": overhead_ms / 1e3 if overhead_ms is not None
                                          else eff.overhead_s, "source": "command line"})
            b = replace(b, used="command line", detail="--eff-compute/--eff-memory/--overhead-ms over "
                        + b.detail, fit=None, efficiency=eff, key=None)
        bases[d] = b
    spec = P.Speculative(resolve(draft_model), spec_k, acceptance) if draft_model else None
    if spec is not None:
        P.expected_tokens(spec_k, acceptance)  # validates k and the rate
    rows_ = P.predict_grid(shapes, limits, split(batch, "--batch", int) or [1],
                           split(input_len, "--input", int) or [1024], split(output_len, "--output", int) or [128],
                           split(tp, "--tp", int) or [1], dtype,
                           lambda d, m: bases[d].efficiency_for(engine, limits[d], m), engine=engine,
                           pp=split(pp, "--pp", int) or [1], ep=ep, options=options, speculative=spec,
                           moe_imbalance=moe_imbalance)
    add_intervals(rows_, bases, engine)
    if as_json:
        print_json({"predictions": rows_, "calibrations": report_cal,
                    **({"profile": profile_report} if profile_report is not None else {})})
        return
    if profile_report is not None:
        _print_profile(profile_report)
    _print_calibrations(report_cal)
    if rows_:
        _print_predictions(rows_)


def predict_engine_args(pm: Any, engine: str, options: dict[str, Any]) -> dict[str, Any]:
    """``--engine-arg`` values held to the bounds ``run`` holds them to (issue 41:
    ``predict`` took ``max_num_batched_tokens=-1``): the options predict reads against
    :class:`~infbench.analysis.predict_inputs.PredictOptions`, then against ``engine``'s
    options model when it is an engine infbench knows, else each value against the model of
    every engine that declares its key (an option no engine declares passes, as before).

    Returns:
        The typed values (JSON objects parsed).

    Raises:
        ConfigError: a value an engine's options model refuses (exit 2).
    """
    if not options:
        return options
    options = {**options, **check_values(engine, PredictOptions, options)}  # what predict itself reads
    specs = engine_specs(pm)
    own = getattr(specs.get(engine), "options_model", None)
    if own is not None:
        return {**options, **check_values(engine, own, options)}
    out = dict(options)
    for name, spec in specs.items():
        model = getattr(spec, "options_model", None)
        mine = {k: v for k, v in options.items() if model is not None and k in model.model_fields}
        if mine and model is not None:
            out.update(check_values(name, model, mine))
    return out


def check_predict_context(shapes: list[Any], inputs: list[int], outputs: list[int]) -> None:
    """Refuse a prediction whose longest request (input + output tokens) exceeds a model's
    context, as ``run`` refuses to plan it (issue 41: ``--input 20000`` on an 8,192-token
    model answered "fits: yes").

    Raises:
        ConfigError: naming the model, its context and the request.
    """
    longest = max(inputs) + max(outputs)
    for shape in shapes:
        ctx = context_length(shape)
        if ctx is not None and longest > ctx:
            raise ConfigError(f"{shape.name}: a request of {max(inputs):,} input + {max(outputs):,} output tokens "
                              f"({longest:,} together) exceeds the model's context of {ctx:,} tokens",
                              hint=f"keep --input + --output within {ctx:,} tokens, or predict a model with a longer "
                                   "context")


def _file_vendor(device_file: Path | None) -> str | None:
    """The vendor of the first device of a ``--device-file`` (None without one)."""
    if device_file is None:
        return None

    specs = load_device_specs(device_file)
    return specs[0].vendor if specs else None


def add_intervals(rows: list[dict[str, Any]], bases: dict[str, Any], engine: str) -> None:
    """Give every prediction row its 90 % intervals (``interval``: metric -> ``[lo, hi]``),
    the kinds of extrapolation they are calibrated for (``interval_kinds``), where each
    kind's residuals come from (``interval_source``: kind -> source, None for a kind no
    table holds: then there is no interval, and ``notes`` says why) and the calibration it
    used (``calibration``), in place."""
    for r in rows:
        b = bases[r["device"]]
        kinds = b.kinds(engine, r["model"], r["input_len"], r["output_len"])
        r["calibration"] = b.describe()
        r["interval_kinds"] = sorted(kinds) or ["random"]
        iv: dict[str, list[float | None]] = {}
        sources: dict[str, str | None] = {}
        for m in INTERVAL_METRICS:
            q, src = b.explain(engine, kinds, m)
            iv[m] = interval(r.get(m), q)
            for k, v in src.items():
                if sources.get(k) is None:
                    sources[k] = v
        r["interval"] = iv
        r["interval_source"] = sources
        missing = sorted(k for k, v in sources.items() if v is None)
        if missing:
            r.setdefault("notes", []).append(
                f"no interval: the calibration used has no held-out residuals of kind {', '.join(missing)} "
                "(a model, device or length it never held out); fit a profile on cells of several models and "
                "devices (`--calibrate --engine E`)")


def _campaigns(rows: list[StoredCell]) -> dict[str, list[StoredCell]]:
    """Stored rows of one catalog device by campaign: the published hardware name of
    imported cells (two campaigns of one device stay apart), ``local`` for this site's."""
    out: dict[str, list[StoredCell]] = {}
    for r in rows:
        label = ((r.device or {}).get("properties") or {}).get("published_name") or "local"
        out.setdefault(str(label), []).append(r)
    return out


def _calibrate(pm: PluginManager, home: Path, limits: dict[str, Any], stacks: dict[str, str | None], engine: str,
               store_path: Path | None, run_id: str | None, builtin: bool = True,
               device_label: str | None = None) -> list[dict[str, Any]]:
    """One calibration per (device, engine family) found among the stored cells (only
    ``engine``'s unless it is ``generic``), against the engine's profile; saved, and
    returned as dicts.

    Cells of one catalog device from several campaigns (``Intel PVC GPU`` and ``Intel Max
    1550`` both map to ``max-1550``) are not merged: ``device_label`` chooses one, and
    without it several are refused with their names.

    Raises:
        ConfigError: no cells, several campaigns and no ``device_label`` (or an unknown one),
            too few cells, or a home that cannot be written.
    """
    rows = read_results(open_store(store_path, readonly=True), run_id=run_id)
    report = []
    for d, lim in limits.items():
        mine = P.rows_of_device(pm, rows, d)
        camps = _campaigns(mine)
        if device_label is not None:
            chosen = {k: v for k, v in camps.items() if k.lower() == device_label.lower()}
            if not chosen:
                raise ConfigError(f"no cells of {d} from campaign {device_label!r}",
                                  hint="campaigns of this device in the store: " + (", ".join(sorted(camps))
                                                                                     or "none"))
            camps = chosen
        engines_here = {P.engine_family((r.spec or {}).get("engine") or "generic") for r in mine}
        wanted_e = [P.engine_family(engine)] if engine != "generic" else sorted(engines_here)
        for e in wanted_e:
            with_e = {k: [r for r in v if P.engine_family((r.spec or {}).get("engine") or "generic") == e]
                      for k, v in camps.items()}
            with_e = {k: v for k, v in with_e.items() if v}
            if len(with_e) > 1:
                raise ConfigError(f"the store has cells of {d} / {e} from {len(with_e)} campaigns: "
                                  + ", ".join(f"{k!r} ({len(v)} cells)" for k, v in sorted(with_e.items()))
                                  + "; one calibration would merge devices that disagree",
                                  hint="choose one with --device-label NAME")
        pts = P.measured_points([r for v in camps.values() for r in v])
        by_engine: dict[str, list[dict[str, Any]]] = {}
        for p in pts:
            by_engine.setdefault(P.engine_family(p["engine"]), []).append(p)
        wanted = [P.engine_family(engine)] if engine != "generic" else sorted(by_engine)
        if not wanted:
            raise ConfigError(f"no measured cells of {d} in the store",
                              hint="run a sweep there, or import published results (`infbench import`)")
        for e in wanted:
            try:
                cal = calibrate(by_engine.get(e, []), lim, engine=e, stack=stacks.get(d), home=home,
                                builtin=builtin)
            except ImportError as exc:
                raise need("report", exc) from None
            if device_label is not None:
                cal.campaign = next(iter(camps))
            path = save_device_calibration(home, cal)
            d_ = cal.to_dict()
            d_.pop("fit", None)  # the terms stay in the saved file; the report shows the parameters
            report.append({**d_, "saved": str(path)})
    return report


def _calibrate_profile(pm: PluginManager, home: Path, engine: str, store_path: Path | None,
                       run_id: str | None, builtin: bool = True) -> dict[str, Any]:
    """Fit ``engine``'s profile over every device with stored cells of it
    (:func:`infbench.analysis.calibration.fit_engine_profile`); saved beside the per-device
    calibrations; returned as a dict with what it was fitted on and what was left out.

    Raises:
        ConfigError: fewer usable cells than the profile has free parameters, or a home that
            cannot be written.
    """
    e = engine_family(engine)
    rows = read_results(open_store(store_path, readonly=True), run_id=run_id)
    groups, skipped = build_groups(pm, rows, engines={e}, min_cells=1)
    try:
        fit, table = fit_engine_profile(groups, e, home, builtin=builtin)
    except ImportError as exc:
        raise need("report", exc) from None
    small = [g for g in groups if len(g.points) < MIN_DEVICE_CELLS]
    skipped += [{"device": g.key, "catalog_id": g.device_id, "engine": e, "cells": len(g.points),
                 "why": f"{len(g.points)} usable cells (< {MIN_DEVICE_CELLS})"} for g in small]
    groups = [g for g in groups if len(g.points) >= MIN_DEVICE_CELLS]
    path = save_profile(home, e, fit, table, groups)
    return {"engine": e, "saved": str(path), "cells": sum(len(g.points) for g in groups),
            "devices": [{"device": g.key, "catalog_id": g.device_id, "stack": g.stack, "cells": len(g.points),
                         "parameters": fit.parameters(e, g.stack, g.key)} for g in groups],
            "parameters": fit.parameters(e), "stacks": sorted({g.stack for g in groups}),
            "free_parameters": len(fit.parameters(e)), "n_params": fit.n_params, "dof": fit.dof,
            "prior": "built-in profile" if builtin else "generic priors (--no-builtin)",
            "device_count_terms": fit.count_report(e),
            "intervals": table.to_dict(), "left_out": skipped}


def _requirements(pm: PluginManager, home: Path, shapes: list[Any], limits: dict[str, Any],
                  stacks: dict[str, str | None],
                  preset: str | None, slo_ttft: float | None, slo_tpot: float | None, batches: list[int], dtype: str,
                  engine: str, as_json: bool) -> None:
    """``--requirements``: what one model instance needs to meet a preset's SLOs, with the
    efficiency factors of the calibration :func:`~infbench.analysis.profile.resolve_basis`
    picks for the first device (none given: the engine's profile without device terms)."""
    if not shapes:
        raise ConfigError("--requirements needs --model", hint="e.g. --requirements --model llama-3-70b "
                                                               "--preset genz-chat")
    p = PRESETS.get(preset or "genz-chat")
    if p is None:
        raise ConfigError(f"unknown preset {preset!r}", hint="genz-qa, genz-chat, genz-rag, genz-summarization, "
                                                             "genz-codegen")
    ttft = slo_ttft or p.get("slo_ttft_s")
    tpot = slo_tpot or p.get("slo_tpot_s")
    if not ttft or not tpot:
        raise ConfigError(f"preset {preset!r} sets no TTFT/TPOT SLO", hint="give --slo-ttft and --slo-tpot")
    cat = {}
    for s in catalog(pm):
        try:
            cat[s.id] = Limits.from_info(s.per_device())
        except RooflineError:
            continue
    ident = next(iter(limits), "")
    basis = resolve_basis(home, ident.split("+")[0], engine, stacks.get(ident), what_if=not ident or "+" in ident)
    lim = limits.get(ident) or Limits("required", 1.0, {"bf16": 1.0})
    results = []
    for m in shapes:
        eff = basis.efficiency_for(engine, lim, m.name) if basis.fit is not None or ident else None
        for b in batches:
            for n_in in p["input_len"]:
                for n_out in p["output_len"]:
                    r = requirements(m, b, n_in, n_out, ttft, tpot, dtype, eff, engine, ident)
                    r["preset"] = preset or "genz-chat"
                    r["calibration"] = basis.describe()
                    r["devices_meeting"] = devices_meeting(r, cat, P._precision(dtype))[:6]
                    results.append(r)
    if as_json:
        print_json({"requirements": results})
        return
    t = Table(title="Platform requirements to meet the SLOs (GenZ Sec. VI; docs/roofline.md)", header_style="bold")
    for c in ("model", "batch", "in", "out", "TTFT SLO s", "TPOT SLO ms", "compute PFLOP/s", "bandwidth TB/s",
              "capacity GB", "check TTFT/TPOT", "fewest described devices"):
        t.add_column(c, justify="left" if c in ("model", "fewest described devices") else "right")
    for r in results:
        chk = r["check"]
        t.add_row(r["model"], str(r["batch"]), str(r["input_len"]), str(r["output_len"]), f"{r['slo_ttft_s']:g}",
                  f"{r['slo_tpot_s'] * 1e3:g}", _num(r["compute_pflop_s"], 3), _num(r["bandwidth_tb_s"], 2),
                  f"{r['capacity_gb']:,.1f}",
                  "-" if not chk else f"{chk['ttft_s']:.3f} s / {chk['tpot_s'] * 1e3:.2f} ms",
                  ", ".join(f"{d['devices']}x {d['device']}" for d in r["devices_meeting"][:4]) or "-")
    out.print(t)
    out.print("[dim]compute from the prefill FLOPs over the TTFT, bandwidth from the last decode step's bytes over the "
              "TPOT, capacity = weights + KV cache of the batch; efficiency factors: "
              f"{results[0]['efficiency']['source'] if results else ''}[/]")
    out.print(f"[dim]calibration used: {basis.used} ({basis.detail})[/]")


def _num(v: float | None, digits: int) -> str:
    return "[red]overheads exceed the SLO[/]" if v is None else f"{v:,.{digits}f}"


def _pct(v: Any) -> str:
    if isinstance(v, dict):
        v = v.get("error")
    return "-" if v is None or v != v else f"{100 * v:.1f} %"


def _print_calibrations(report_cal: list[dict[str, Any]]) -> None:
    for c in report_cal:
        out.print(f"[dim]{c['device_id']} / {c['engine']}: starting from the {c.get('prior') or 'generic priors'}"
                  + ("" if "stored engine profile" in (c.get("prior") or "") else
                     f" (fit your own first with `infbench predict --calibrate --engine {c['engine']}`, or pass "
                     "--no-builtin)") + "[/]")
        unknown = (c.get("excluded") or {}).get("unknown_model") or []
        if unknown:
            out.print(f"  [yellow]{len(unknown)} cells left out: models outside the zoo (no shape to predict "
                      "from)[/]")
        et, ed, e = c["error_test"], c["error_default"], c["efficiency"]
        out.print(f"[bold]calibrated {c['device_id']} / {c['engine']}[/] on {c['n_train']} cells "
                  f"({c['sources'].get('published', 0)} published), {c['n_test']} held out: "
                  f"eff_compute {e['eff_compute']:.3f}, eff_memory {e['eff_memory']:.3f}, "
                  f"step overhead {e['overhead_s'] * 1e3:.2f} ms + {e['overhead_per_seq_s'] * 1e6:.1f} us/seq")
        parts = [f"{k} {_pct(et[k])} (n={et[k]['n']}; default {_pct(ed[k])})" for k in et if et[k]["n"]]
        out.print("  held-out geometric-mean error: " + "; ".join(parts) + f"; saved {c['saved']}")
        bad = c.get("excluded", {}).get("below_floor") or []
        if bad:
            out.print(f"  [yellow]{len(bad)} cells left out: measured below the device's roofline floor[/]")


def _print_profile(p: dict[str, Any]) -> None:
    """The fitted engine profile: its parameters with 90 % ranges, per device the cells."""
    out.print(f"[bold]engine profile {p['engine']}[/] fitted on {p['cells']} cells of "
              + ", ".join(f"{d['device']} ({d['cells']})" for d in p["devices"])
              + f"; {p['free_parameters']} free parameters in the profile, {p['n_params']} coordinates in all, "
              f"{p['dof']:.1f} effective; prior: {p['prior']}; saved {p['saved']}")
    for s in p.get("left_out") or []:
        out.print(f"  [yellow]left out: {s['device']} / {s['engine']}: {s.get('n', s['cells'])} cells "
                  f"({s['why']})[/]")
    for key, terms in (p.get("device_count_terms") or {}).items():
        by_n = sorted(terms.items(), key=lambda t: int(t[0]))
        out.print(f"  device-count terms of {key}: " + ", ".join(f"{n} devices x{v['factor']:.2f}" for n, v in by_n))
    t = Table(title="Engine profile (90 % ranges; docs/roofline.md)", header_style="bold")
    for c in ("parameter", "value", "90 % range", "bounds"):
        t.add_column(c, justify="left" if c == "parameter" else "right")
    for name, v in p["parameters"].items():
        rng = "-" if v["lo"] is None else f"{v['lo']:.3g} - {v['hi']:.3g}"
        t.add_row(name, f"{v['value']:.3g}", rng, f"{v['bound'][0]:g} - {v['bound'][1]:g}")
    out.print(t)


def _factor(r: dict[str, Any], metric: str = "e2e_s") -> str:
    """The 90 % interval of a row's metric as a factor: ``x/ 1.13`` (``-`` without one)."""
    v = r.get(metric)
    lo, hi = (r.get("interval") or {}).get(metric) or (None, None)
    if not v or lo is None or hi is None:
        return "-"
    return f"x/ {(hi / v):.2f}"


def _print_predictions(rows: list[dict[str, Any]]) -> None:
    t = Table(title="Predicted (analytical; docs/roofline.md)", header_style="bold")
    for c in ("model", "device", "engine", "dtype", "tp", "pp", "batch", "in", "out", "TTFT ms", "TPOT ms", "E2E s",
              "batch s", "out tok/s", "total tok/s", "90 %", "waves", "fits"):
        t.add_column(c, justify="left" if c in ("model", "device", "engine", "dtype") else "right")
    def num(v: float | None, scale: float, fmt: str) -> str:
        return "[red]refused[/]" if v is None else format(v * scale, fmt)

    for r in rows:
        t.add_row(r["model"], r["device"], r["engine"], r["dtype"], str(r["tp"]), str(r["pp"]), str(r["batch"]),
                  str(r["input_len"]), str(r["output_len"]), num(r["ttft_s"], 1e3, ",.2f"),
                  num(r["tpot_s"], 1e3, ",.3f"), num(r["e2e_s"], 1, ",.3f"), num(r["duration_s"], 1, ",.3f"),
                  num(r["output_tok_s"], 1, ",.1f"), num(r["total_tok_s"], 1, ",.1f"), _factor(r),
                  "-" if r.get("waves") is None else f"{r['waves']:.2g}",
                  {True: "yes", False: "[red]no[/]", None: "?"}[r["fits_memory"]])
    out.print(t)
    out.print("[dim]90 %: the E2E's 90 % interval as a factor (value x/ f spans value / f to value x f), from held-out "
              "residuals of the calibration; --json gives every metric's interval[/]")
    notes = dict.fromkeys(n for r in rows for n in r.get("notes") or [])
    for n in notes:
        out.print(f"[yellow]note:[/] {n}")
    seen = set()
    for r in rows:
        cal = r.get("calibration") or {}
        key = (r["device"], cal.get("used"), cal.get("detail"))
        if key in seen:
            continue
        seen.add(key)
        out.print(f"[dim]{r['device']} / {r['engine']}: calibration used: [bold]{cal.get('used', '?')}[/bold] "
                  f"({cal.get('detail', r['efficiency']['source'])}); intervals for: "
                  f"{', '.join(r.get('interval_kinds') or ['-'])}, from "
                  + "; ".join(f"{k}: {v or 'none'}" for k, v in (r.get("interval_source") or {}).items()) + "[/]")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command()(predict)
