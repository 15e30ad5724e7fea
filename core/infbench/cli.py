"""The ``infbench`` command line (typer + rich).

Commands follow the flow of a run: ``detect`` -> ``run`` (plan, launch, measure, store)
-> ``results``; ``models`` and ``plugins`` list what is available. Every command that
prints a table also takes ``--json``. Exit status: 0 ok, 1 error, 2 bad input,
3 some cells failed (their errors are stored), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from infbench import __version__
from infbench.errors import ConfigError, InfbenchError, suggest
from infbench.schema import Sweep

app = typer.Typer(
    name="infbench",
    help="Benchmark LLM inference the same way on any accelerator.\n\n"
         "Start with `infbench detect`, then `infbench run` (a quick default sweep on the detected "
         "device), then `infbench results`.",
    no_args_is_help=True, add_completion=False, rich_markup_mode="markdown",
)
# Wide tables when piped (rich falls back to 80 columns without a terminal).
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _fail(exc: InfbenchError) -> None:
    err.print(f"[bold red]error:[/] {escape(exc.message)}")
    if exc.hint:
        err.print(f"[yellow]hint:[/] {escape(exc.hint)}")
    raise typer.Exit(exc.exit_code)


def _pm():
    from infbench.plugins import get_plugin_manager

    return get_plugin_manager()


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


@contextlib.contextmanager
def _stdout_to_stderr(active: bool):
    """While active, file descriptor 1 points at stderr, so engines and their child processes
    (vLLM's engine core, servers) cannot write into a ``--json`` document on stdout."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _version(value: bool) -> None:
    if value:
        out.print(f"infbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log engine messages (debug).")] = False,
) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")


# --- detect ---------------------------------------------------------------------------

#: DeviceInfo properties shown in the `detect` table's details column.
DETAIL_KEYS = ("arch", "physical_cores", "logical_cpus", "compute_capability", "mig_mode", "gfx_version",
               "base_url", "api_key_set", "power_source", "uuids")


@app.command()
def detect(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """Find the devices on this host: the PCI bus plus every plugin's detect hook.

    Accelerators seen on the PCI bus whose plugin is missing are listed with the
    package to install (e.g. `pip install infbench-nvidia`).
    """
    from infbench.detect import detect as do_detect

    det = do_detect(_pm())
    if as_json:
        _json(det.to_dict())
        return
    t = Table(title="Detected devices", header_style="bold")
    for c in ("vendor", "kind", "model", "count", "memory", "driver", "details", "plugin"):
        t.add_column(c)
    for d in det.devices:
        mem = f"{d.memory_bytes / 2**30:,.1f} GiB" if d.memory_bytes else "-"
        p = d.properties
        details = ", ".join(f"{k}={v}" for k, v in p.items() if k in DETAIL_KEYS)
        t.add_row(d.vendor, d.kind, d.model, str(d.count), mem, d.driver or "-", details or "-", d.plugin)
    out.print(t)
    from infbench.devices import device_limits
    from infbench.plan import device_precisions

    for d in det.devices:
        out.print(f"{d.vendor}: precisions {', '.join(device_precisions(_pm(), d))}")
        try:
            lim = device_limits(_pm(), d)
        except InfbenchError as exc:
            lim = None
            err.print(f"[yellow]note:[/] device descriptions: {exc}")
        if lim:
            bw = lim.get("memory_bandwidth_bytes_s")
            out.print(f"{d.vendor}: described as {lim.get('id', '?')}"
                      + (f", {bw / 1e12:.2f} TB/s" if bw else "")
                      + (f", TDP {lim['tdp_w']:g} W" if lim.get("tdp_w") else "") + " (see `infbench devices`)")
        if d.properties.get("isa_flags"):
            out.print(f"{d.vendor}: ISA flags {' '.join(d.properties['isa_flags'])}")
    for m in det.missing:
        err.print(f"[yellow]note:[/] {m.message()}")
    for plugin, e in det.errors:
        err.print(f"[red]plugin {plugin} failed to detect:[/] {escape(e)}")


# --- run -------------------------------------------------------------------------------

def _split(values: list[str] | None, flag: str, cast: type = str) -> list[Any] | None:
    """Flags may repeat or take comma lists: `--batch 1,4 --batch 8` -> [1, 4, 8]."""
    if not values:
        return None
    items = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    if cast is int:
        try:
            return [int(v) for v in items]
        except ValueError:
            raise ConfigError(f"{flag} takes integers, got {', '.join(items)}",
                              hint=f"e.g. {flag} 1,16,32") from None
    return items


def _validation_message(exc: ValidationError, source: str) -> ConfigError:
    fields = list(Sweep.model_fields)
    lines = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            s = suggest(str(e["loc"][0]), fields)
            lines.append(f"unknown field {loc!r}" + (f" ({s})" if s else ""))
        elif e["type"] == "missing":
            lines.append(f"field {loc!r} is required")
        else:
            lines.append(f"field {loc!r}: {e['msg']} (got {e.get('input')!r})")
    return ConfigError(f"invalid sweep in {source}: " + "; ".join(lines),
                       hint="allowed fields: " + ", ".join(fields))


def load_sweep_file(path: Path) -> dict[str, Any]:
    """Read a sweep YAML file into a dict (validated later with the flags merged in).

    Raises:
        ConfigError: missing file, malformed YAML, or not a mapping.
    """
    if not path.is_file():
        raise ConfigError(f"sweep file {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}",
                          hint="see docs/sweeps.md for the file format") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sweep fields, got {type(data).__name__}",
                          hint="e.g. `models: [smollm2-135m]` on its own line")
    return data


def build_sweep(preset: str | None, sweep_file: Path | None, **flags: Any) -> Sweep:
    """The sweep of `infbench run`: a preset (default `quick`) is the base; a YAML file's
    fields replace the preset's (the file may name its own base with `preset:`), and each
    axis given on the command line replaces both.

    Raises:
        ConfigError: unknown preset, bad file, or a field that fails validation.
    """
    from infbench.plan import PRESETS

    source = "command-line flags"
    if sweep_file is not None:
        data = load_sweep_file(sweep_file)
        source = str(sweep_file)
        p = data.pop("preset", preset or "quick")
        if p not in PRESETS:
            raise ConfigError(f"unknown preset {p!r} in {sweep_file}", hint=f"choose one of: {', '.join(PRESETS)}")
        data = {**PRESETS[p], **data}
    else:
        name = preset or "quick"
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}", hint=f"choose one of: {', '.join(PRESETS)}")
        data = dict(PRESETS[name])
    data.update({k: v for k, v in flags.items() if v not in (None, [])})
    try:
        return Sweep(**data)
    except ValidationError as exc:
        raise _validation_message(exc, source) from None


def user_power_sampler(command: str | None, watts: float | None, label: str | None):
    """The sampler of ``--power-command`` / ``--power-watts`` (labelled user-supplied), or None.

    Raises:
        ConfigError: both given, or a non-positive wattage.
    """
    from infbench.measure.power import CommandPowerSampler, FixedPowerSampler

    if command and watts is not None:
        raise ConfigError("give --power-command or --power-watts, not both")
    if watts is not None:
        if watts <= 0:
            raise ConfigError(f"--power-watts must be > 0, got {watts}")
        return FixedPowerSampler(watts, f"user-supplied: {label}" if label else None)
    if command:
        return CommandPowerSampler(command, f"user-supplied: {label}" if label else None)
    return None


def parse_engine_args(items: list[str]) -> dict[str, Any]:
    """``["quantization=fp8", "enforce_eager=true"]`` -> ``{"quantization": "fp8", "enforce_eager": True}``
    (values read as YAML scalars: numbers, true/false, null; dashes in keys become underscores).

    Raises:
        ConfigError: an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--engine-arg {item!r} is not KEY=VALUE", hint="e.g. --engine-arg max_num_batched_tokens=8192")
        try:
            v = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            v = value
        out[key.strip().replace("-", "_")] = v if isinstance(v, (str, int, float, bool)) or v is None else value
    return out


RUN_HELP = """Run a sweep of cells and store every result.

With no arguments: the `quick` preset (smollm2-135m with dummy weights on llama.cpp,
batch 1/4/8, input 128/512, output 64) on the detected device, a minute or two on 2 CPU cores.

**Examples**

    infbench run
    infbench run --model qwen2.5-0.5b --engine llama.cpp,transformers --dtype fp16 --batch 1,8
    infbench run --preset paper --model tinyllama-1.1b
    infbench run --sweep my-sweep.yaml --force
    infbench run --engine vllm --model tiny --batch 1,8          # vLLM offline, batch mode
    infbench run --engine vllm-server --concurrency 1,16,64 --num-requests 200
    infbench run --engine vllm-server --dataset chats.jsonl --request-rate 2,4 --slo-ttft 0.5
    infbench run --engine openai --base-url http://127.0.0.1:8000/v1 --model my-model --concurrency 8
    infbench run --runtime docker                                  # inside the worker image

**Where cells run** (`--runtime`): `auto` runs in-process on the CPU and, on vendor
hardware, inside the plugin's worker image when a Docker engine (or apptainer) is
present; `docker` / `apptainer` force a container (build images with `infbench
containers build`); `none` forces in-process. Container results are stored like
in-process ones, with the image in the run's provenance.

Cells already stored with status ok are skipped (re-run to resume an interrupted sweep;
`--force` measures again). A failed cell (OOM, crash, timeout) is stored with its error
and the sweep goes on.
"""


@app.command(help=RUN_HELP)
def run(
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Zoo name, HF id, HF folder or .gguf file. Repeat or comma list.")] = None,
    engine: Annotated[list[str] | None, typer.Option("--engine", "-e", help="Engine(s): llama.cpp, transformers, vllm (batch mode); llama.cpp-server, vllm-server, openai (serving mode). See `infbench plugins`.")] = None,
    dtype: Annotated[list[str] | None, typer.Option("--dtype", help="Engine dtype (f16, q8_0, bfloat16...) or class (fp16, bf16, int8).")] = None,
    batch: Annotated[list[str] | None, typer.Option("--batch", "-b", help="Prompts submitted together.")] = None,
    input_len: Annotated[list[str] | None, typer.Option("--input-len", help="Prompt length in tokens.")] = None,
    output_len: Annotated[list[str] | None, typer.Option("--output-len", help="Generated tokens per request (forced).")] = None,
    tp: Annotated[list[str] | None, typer.Option("--tensor-parallel-size", "--tp", help="Devices per model instance.")] = None,
    sweep_file: Annotated[Path | None, typer.Option("--sweep", help="YAML sweep file (fields of `Sweep`).")] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="quick (default), paper (LLM-Inference-Bench grid), genz-qa, genz-chat, genz-rag, genz-summarization, genz-codegen (GenZ use cases with SLOs).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="Device vendor to run on (cpu, nvidia...). Default: first accelerator, else cpu.")] = None,
    store_path: Annotated[Path | None, typer.Option("--store", help="Results database. Default: $INFBENCH_HOME/results.db (~/.infbench).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Measure cells again even if stored ok.")] = False,
    warmup: Annotated[int | None, typer.Option("--warmup", help="Warm-up passes per cell (default 1).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the synthetic prompts.")] = None,
    cell_timeout: Annotated[float | None, typer.Option("--cell-timeout", help="Seconds before a cell is stopped and stored as failed.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="CPU threads for the engine.")] = None,
    power_interval: Annotated[float, typer.Option("--power-interval", help="Power sampling interval (s).")] = 0.1,
    power_command: Annotated[str | None, typer.Option("--power-command", help="Replace the device's power sampler by a shell command that prints watts (a PDU or BMC reading); energy is then labelled user-supplied.")] = None,
    power_watts: Annotated[float | None, typer.Option("--power-watts", help="Replace the device's power sampler by a declared constant power in W (not measured; labelled so).")] = None,
    power_label: Annotated[str | None, typer.Option("--power-label", help="What --power-command/--power-watts covers, stored with the energy (e.g. 'rack PDU, 8 nodes').")] = None,
    concurrency: Annotated[list[str] | None, typer.Option("--concurrency", "-c", help="Serving mode: requests kept in flight (server engines).")] = None,
    request_rate: Annotated[list[str] | None, typer.Option("--request-rate", "-r", help="Serving mode: mean arrivals per s (Poisson; see --burstiness).")] = None,
    burstiness: Annotated[float | None, typer.Option("--burstiness", help="Gamma shape of inter-arrival times: 1 = Poisson, <1 burstier.")] = None,
    num_requests: Annotated[int | None, typer.Option("--num-requests", "-n", help="Serving mode: timed requests per cell.")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="Serving mode: seconds to offer requests per cell.")] = None,
    warmup_requests: Annotated[int | None, typer.Option("--warmup-requests", help="Serving mode: untimed requests first (default 1).")] = None,
    request_timeout: Annotated[float | None, typer.Option("--request-timeout", help="Serving mode: per-request limit in s.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="--engine openai: the server, e.g. http://127.0.0.1:8000/v1.")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Name of the environment variable holding the API key (never stored).")] = None,
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="completions (default) or chat.")] = None,
    served_model_name: Annotated[str | None, typer.Option("--served-model-name", help="Model name sent to the server (default: --model).")] = None,
    prompt_format: Annotated[str | None, typer.Option("--prompt-format", help="token_ids (exact lengths, zoo model served with dummy weights) or text.")] = None,
    engine_arg: Annotated[list[str] | None, typer.Option("--engine-arg", help="KEY=VALUE passed to the engine as its own argument (vLLM: any EngineArgs name, e.g. quantization=fp8, gpu_memory_utilization=0.85). Repeat for more.")] = None,
    dataset: Annotated[Path | None, typer.Option("--dataset", help="Serving mode: replay chat conversations from a JSONL file (OpenAI messages, ShareGPT or LMSYS); each request's output is forced to its dropped final assistant turn's length.")] = None,
    max_input_len: Annotated[int | None, typer.Option("--max-input-len", help="--dataset: skip conversations whose prompt is longer (tokens; default 1024).")] = None,
    max_output_len: Annotated[int | None, typer.Option("--max-output-len", help="--dataset: skip conversations whose final assistant turn is longer (tokens; default 1024).")] = None,
    slo_ttft: Annotated[float | None, typer.Option("--slo-ttft", help="TTFT limit (s) for goodput.")] = None,
    slo_tpot: Annotated[float | None, typer.Option("--slo-tpot", help="TPOT limit (s) for goodput.")] = None,
    slo_e2e: Annotated[float | None, typer.Option("--slo-e2e", help="E2E limit (s) for goodput.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the planned cells and exit.")] = False,
    write_spec: Annotated[Path | None, typer.Option("--write-spec", help="Write the planned cells as a worker spec (for `infbench worker --spec FILE --out DIR` elsewhere, then `infbench ingest DIR`) and exit.")] = None,
    runtime: Annotated[str, typer.Option("--runtime", help="auto, none (in-process), docker or apptainer (the plugin's worker image). auto: in-process on the CPU, the image on vendor hardware when a container runtime is present.")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary instead of tables.")] = False,
) -> None:
    from infbench.detect import detect as do_detect
    from infbench.plan import plan as make_plan
    from infbench.run import RunOptions, provenance, resolve_remote_device, run_plan, select_device
    from infbench.store import Store

    try:
        sweep = build_sweep(
            preset, sweep_file, models=_split(model, "--model"), engines=_split(engine, "--engine"),
            dtypes=_split(dtype, "--dtype"), batch=_split(batch, "--batch", int),
            input_len=_split(input_len, "--input-len", int), output_len=_split(output_len, "--output-len", int),
            tensor_parallel_size=_split(tp, "--tensor-parallel-size", int), warmup=warmup, seed=seed,
            cell_timeout_s=cell_timeout, concurrency=_split(concurrency, "--concurrency", int),
            request_rate=_split(request_rate, "--request-rate", float), burstiness=burstiness,
            num_requests=num_requests, duration_s=duration, warmup_requests=warmup_requests,
            request_timeout_s=request_timeout, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, slo_e2e_s=slo_e2e,
            dataset=str(dataset) if dataset else None, dataset_max_input_len=max_input_len,
            dataset_max_output_len=max_output_len)
        pm = _pm()
        det = do_detect(pm)
        from infbench.plan import engine_specs

        specs = engine_specs(pm)
        remote = [e for e in sweep.engines if e in specs and specs[e].any_model]
        if remote:
            if len(remote) != len(sweep.engines):
                raise ConfigError("a remote endpoint (--engine openai) runs in a sweep of its own",
                                  hint="run the local engines in a separate `infbench run`")
            dev = resolve_remote_device(det, device, base_url)
            base_url = base_url or dev.properties.get("base_url")
            api_key_env = api_key_env or dev.properties.get("api_key_env")
        else:
            dev = select_device(det, device)
        the_plan = make_plan(sweep, dev, pm)
        for w in the_plan.warnings:
            err.print(f"[yellow]warning:[/] {w}")
        cells = the_plan.cells
        if write_spec is not None:
            from infbench.worker import write_spec as _write_spec

            wspec = _write_spec(the_plan, write_spec, RunOptions(
                cell_timeout_s=sweep.cell_timeout_s, power_interval_s=power_interval, slo=sweep.slo(),
                engine_options={k: v for k, v in {"n_threads": threads, "base_url": base_url, "api_key_env": api_key_env,
                                                  "endpoint": endpoint, "served_model": served_model_name,
                                                  "prompt_format": prompt_format, **parse_engine_args(engine_arg or [])
                                                  }.items() if v is not None}))
            if as_json:
                _json({"spec": str(write_spec), "spec_hash": wspec.spec_hash(), "cells": len(cells)})
            else:
                out.print(f"wrote worker spec {write_spec} ({len(cells)} cells, spec hash {wspec.spec_hash()})")
            return
        if dry_run:
            rows = [{"cell_id": c.cell_id(dev), **c.model_dump()} for c in cells]
            if as_json:
                _json({"device": dev.model_dump(), "cells": rows})
            else:
                out.print(f"{len(cells)} cell(s) on {dev.vendor} ({dev.model}):")
                for g in the_plan.groups:
                    out.print(f"  [bold]{g.label()}[/]")
                    for c in g.cells:
                        out.print(f"    {c.cell_id(dev)}  b{c.batch} i{c.input_len} o{c.output_len}")
            return
        from infbench.runtimes import choose_runtime

        rt_notes: list[str] = []
        rt = choose_runtime(runtime, dev, sweep.engines, pm, rt_notes)
        for n in rt_notes:
            err.print(f"[yellow]note:[/] {escape(n)}")
        if rt is not None and (power_command or power_watts is not None):
            raise ConfigError("--power-command/--power-watts replace the sampler in this process; they do not reach "
                              f"a worker container (--runtime {rt.name})", hint="add --runtime none")
        store = Store(store_path)
    except InfbenchError as exc:
        _fail(exc)
        return
    eopts = {"n_threads": threads, "base_url": base_url, "api_key_env": api_key_env, "endpoint": endpoint,
             "served_model": served_model_name, "prompt_format": prompt_format}
    try:
        eopts.update(parse_engine_args(engine_arg or []))
    except ConfigError as exc:
        _fail(exc)
        return
    try:
        override = user_power_sampler(power_command, power_watts, power_label)
    except ConfigError as exc:
        _fail(exc)
        return
    opts = RunOptions(force=force, cell_timeout_s=sweep.cell_timeout_s, power_interval_s=power_interval,
                      engine_options={k: v for k, v in eopts.items() if v is not None}, slo=sweep.slo(),
                      power_override=override)
    prov = provenance(det, pm)
    if not as_json:
        where = f", in {rt.name} worker containers" if rt is not None else ""
        out.print(f"infbench {__version__}: {len(cells)} cell(s) on {dev.vendor} ({dev.model}){where}, store {store.path}")
    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err,
                        disable=as_json)
    task = progress.add_task("starting", total=len(cells))

    def on_event(kind: str, payload: Any) -> None:
        if kind == "group":
            progress.update(task, description=f"loading {payload.label()}")
        elif kind == "cell_start":
            progress.update(task, description=payload.label())
        elif kind in ("cell_done", "cell_skipped"):
            progress.advance(task)
            if kind == "cell_done" and payload.status != "ok":
                progress.console.print(f"[red]failed[/] {payload.cell.label()}: {escape(str(payload.error))}")
        elif kind == "note":
            progress.console.print(f"[yellow]note:[/] {escape(payload)}")
        elif kind == "log":
            logging.getLogger("infbench.worker").debug("%s", payload)

    summary = None
    try:
        with progress, _stdout_to_stderr(as_json):
            if rt is None:
                summary = run_plan(the_plan, store, pm, prov, opts, on_event)
            else:
                from infbench.runtimes.launcher import run_plan_in_containers

                summary = run_plan_in_containers(the_plan, store, pm, rt, prov, opts, on_event)
    except InfbenchError as exc:
        _fail(exc)
        return
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/] finished cells are stored; run the same command again to resume.")
        raise typer.Exit(130) from None
    rows = store.results(run_id=summary.run_id)
    if as_json:
        from infbench.report.tables import results_json

        _json({"run_id": summary.run_id, "status": summary.status, "store": str(store.path),
               "ok": len(summary.ok), "failed": len(summary.failed), "skipped": len(summary.skipped),
               "cells": results_json(rows)})
    else:
        from infbench.report.tables import results_table

        if rows:
            out.print(results_table(rows, title=f"run {summary.run_id}"))
        if summary.skipped:
            out.print(f"{len(summary.skipped)} cell(s) skipped: already stored ok (use --force to measure again).")
        notes = {r["power_note"] for r in rows if r["power_note"]}
        for n in notes:
            out.print(f"[dim]energy: {n}[/]")
        out.print(f"run {summary.run_id}: {len(summary.ok)} ok, {len(summary.failed)} failed, "
                  f"{len(summary.skipped)} skipped. See `infbench results`.")
    if summary.failed:
        raise typer.Exit(3)


# --- results ---------------------------------------------------------------------------

@app.command()
def results(
    store_path: Annotated[Path | None, typer.Option("--store", help="Results database.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json or csv.")] = "table",
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run (id prefix).")] = None,
    all_attempts: Annotated[bool, typer.Option("--all", help="Every attempt, not just the newest per cell.")] = False,
    status: Annotated[str | None, typer.Option("--status", help="Only ok or failed cells.")] = None,
    best: Annotated[bool, typer.Option("--best", help="Per model and device, the cell with the highest output tok/s per device that meets the --max-* limits.")] = False,
    max_ttft: Annotated[float | None, typer.Option("--max-ttft", help="TTFT limit in s (with --best).")] = None,
    max_tpot: Annotated[float | None, typer.Option("--max-tpot", help="TPOT limit in s (with --best).")] = None,
    max_e2e: Annotated[float | None, typer.Option("--max-e2e", help="E2E limit in s (with --best), e.g. 25.6 as in Perplexity's A100/H100 study.")] = None,
    percentile: Annotated[str, typer.Option("--percentile", help="Statistic that must meet the limits: mean, p50, p90, p99, max.")] = "p99",
) -> None:
    """Show stored results: the newest attempt of every cell.

    `--best --max-e2e 25.6` keeps the cells whose p99 E2E latency is within 25.6 s and
    shows, per model and device, the one with the highest output throughput per device.

    `--format json` gives each cell's spec, device, engine versions and metrics
    (latency summaries with mean/p50/p90/p99/max and the request count behind them);
    `--format csv` flattens them (`ttft_s_p50`, `ttft_s_count`, ...).
    """
    from infbench.report.tables import results_csv, results_json, results_table
    from infbench.store import Store

    if fmt not in ("table", "json", "csv"):
        _fail(ConfigError(f"unknown format {fmt!r}", hint="use table, json or csv"))
    try:
        store = Store(store_path)
    except InfbenchError as exc:
        _fail(exc)
    rows = store.results(run_id=run_id, all_attempts=all_attempts)
    if status:
        rows = [r for r in rows if r["status"] == status]
    limits = {k: v for k, v in (("ttft_s", max_ttft), ("tpot_s", max_tpot), ("e2e_s", max_e2e)) if v is not None}
    if limits and not best:
        _fail(ConfigError("--max-ttft/--max-tpot/--max-e2e select with --best", hint="add --best"))
    if best:
        from infbench.report.select import best as pick

        try:
            rows = pick(rows, limits, percentile)
        except ValueError as exc:
            _fail(ConfigError(str(exc), hint="e.g. infbench results --best --max-e2e 25.6"))
        if not rows and fmt == "table":
            err.print(f"no ok cell meets {limits} at {percentile}")
            raise typer.Exit(1)
    if fmt == "json":
        _json(results_json(rows))
    elif fmt == "csv":
        sys.stdout.write(results_csv(rows) if rows else "")
    elif not rows:
        err.print(f"no results in {store.path}; run `infbench run` first")
    else:
        out.print(results_table(rows, title=f"results in {store.path}"))


# --- worker ------------------------------------------------------------------------------

@app.command()
def worker(
    spec: Annotated[Path, typer.Option("--spec", help="Worker spec (`infbench run --write-spec FILE` writes one).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for provenance.json, cells.jsonl and worker.db.")],
) -> None:
    """Run the cells of a worker spec here and write raw results and provenance to --out.

    This is what a vendor image runs (`ENTRYPOINT ["infbench", "worker"]`), with --out
    mounted from the host; a batch job on another node runs it the same way. Bring the
    results back with `infbench ingest DIR`. Each finished cell is appended to
    cells.jsonl at once, so a killed worker loses only the cell it was running. A spec
    from an infbench with another store schema is refused (exit 2).
    """
    from infbench.worker import run_worker

    def on_event(kind: str, payload: Any) -> None:
        # One plain line per event on stderr (never wrapped): what a host's launcher parses
        # (infbench.runtimes.launcher) to move its progress display and store finished cells.
        if kind == "group":
            line = f"loading {payload.label()}"
        elif kind == "cell_start":
            line = f"cell {payload.spec_hash()} {payload.label()}"
        elif kind == "cell_done":
            line = f"done {payload.spec_hash} {payload.cell_id} {payload.status}" + (
                f" {' '.join(str(payload.error).split())}" if payload.error else "")
        else:
            return
        print(f"infbench-worker: {line}", file=sys.stderr, flush=True)

    try:
        prov = run_worker(spec, out_dir, on_event)
    except InfbenchError as exc:
        _fail(exc)
        return
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/] finished cells are in cells.jsonl")
        raise typer.Exit(130) from None
    out.print(f"worker {prov['status']}: results in {out_dir}")
    if prov["status"] not in ("completed",):
        raise typer.Exit(3)


@app.command()
def ingest(
    out_dir: Annotated[Path, typer.Argument(help="A worker's --out folder.")],
    store_path: Annotated[Path | None, typer.Option("--store", help="Results database.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Store a worker's results (its --out folder) as one run, with the worker's provenance.

    Cell ids and spec hashes are kept as the worker computed them, so the same workload
    run in another image or on another site compares cell by cell (`infbench compare`).
    """
    from infbench.worker import ingest as do_ingest

    store = _open_store(store_path)
    try:
        res = do_ingest(out_dir, store, command=" ".join(sys.argv))
    except InfbenchError as exc:
        _fail(exc)
        return
    cells = res.pop("cells")
    if as_json:
        _json({**res, "cell_ids": [c.cell_id for c in cells]})
        return
    out.print(f"run {res['run_id']}: {res['ok']} ok, {res['failed']} failed ingested from {out_dir} "
              f"(worker status {res['status']}" + (f"; {res['skipped_lines']} incomplete line(s) skipped" if res["skipped_lines"] else "") + ")")


# --- containers ------------------------------------------------------------------------
containers_app = typer.Typer(
    help="Worker images: build the vendor plugins' images (`containers/cpu/Dockerfile.*`, "
         "`plugins/<vendor>/docker/Dockerfile.*`) and list what is built. `infbench run --runtime docker` "
         "runs cells in them.", no_args_is_help=True, rich_markup_mode="markdown")
app.add_typer(containers_app, name="containers")


def _build_args(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise ConfigError(f"--build-arg {it!r} is not KEY=VALUE", hint="e.g. --build-arg BASE_IMAGE=python:3.11-slim")
        out[k] = v
    return out


@containers_app.command("build")
def containers_build(
    vendor: Annotated[list[str] | None, typer.Option("--vendor", help="Only these vendors (cpu, nvidia, amd, intel, habana). Repeat or comma list. Default: all.")] = None,
    image: Annotated[list[str] | None, typer.Option("--image", help="Only these recipes by Dockerfile suffix (vllm, trtllm, llamacpp).")] = None,
    build_arg: Annotated[list[str] | None, typer.Option("--build-arg", help="KEY=VALUE for the Dockerfile (BASE_IMAGE, ENGINE_VERSION, PIP_ARGS...). Repeat for more.")] = None,
    network: Annotated[str | None, typer.Option("--network", help="Network of the RUN steps: none (offline builds), host, or the engine's default.")] = None,
    context: Annotated[Path | None, typer.Option("--context", help="The infbench source tree (default: the checkout infbench runs from).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Build worker images with the docker SDK, tagged infbench/<vendor>-<name>:<infbench version>
    and :<infbench version>-<engine><engine version>.

    A recipe whose base image cannot be pulled fails with the reason and the others go on
    (exit 1 if any failed). Offline hosts: build the base locally and pass it, e.g.
    `bash containers/cpu/prepare-offline.sh` then `infbench containers build --vendor cpu
    --build-arg BASE_IMAGE=infbench/debian-python:bookworm --build-arg PIP_ARGS=--no-index --network none`.
    """
    from infbench.runtimes import images as im

    try:
        root = im.source_root(context)
        args = _build_args(build_arg or [])
        recipes = im.find_recipes(root)
        vendors = _split(vendor, "--vendor")
        names = _split(image, "--image")
        chosen = [r for r in recipes if (not vendors or r.vendor in vendors) and (not names or r.name in names)]
        if not chosen:
            raise ConfigError(f"no image recipe matches vendor={vendors} image={names}",
                              hint="known: " + ", ".join(f"{r.vendor}/{r.name}" for r in recipes))
        im.docker_client()  # a Docker engine answers, before any build
    except InfbenchError as exc:
        _fail(exc)
        return
    results = []
    for r in chosen:
        status = err.status(f"building {r.repository} from {r.dockerfile}") if not as_json else contextlib.nullcontext()
        t0 = time.perf_counter()
        with status as st:
            def line(ln: str, st=st, r=r) -> None:
                logging.getLogger("infbench.build").debug("%s", ln)
                if st is not None:
                    st.update(f"building {r.repository}: {escape(ln[:100])}")
            try:
                tags = im.build(r, root, args, network, line)
                results.append({"recipe": f"{r.vendor}/{r.name}", "dockerfile": r.dockerfile, "ok": True, "tags": tags,
                                "seconds": round(time.perf_counter() - t0, 1)})
            except InfbenchError as exc:
                results.append({"recipe": f"{r.vendor}/{r.name}", "dockerfile": r.dockerfile, "ok": False,
                                "error": exc.message, "hint": exc.hint})
        if not as_json:
            res = results[-1]
            if res["ok"]:
                out.print(f"[green]built[/] {', '.join(res['tags'])} ({res['seconds']} s)")
            else:
                out.print(f"[red]failed[/] {res['recipe']} ({r.dockerfile}): {escape(res['error'])}")
    if as_json:
        _json({"context": str(root), "results": results})
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)


@containers_app.command("list")
def containers_list(
    context: Annotated[Path | None, typer.Option("--context", help="The infbench source tree, for the recipes.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the image recipes and the infbench images built on this Docker engine
    (engine and its version, infbench version, store schema: images with another schema
    are refused by `infbench run` until rebuilt)."""
    from infbench.runtimes import images as im

    try:
        built = im.list_images()
    except InfbenchError as exc:
        _fail(exc)
        return
    try:
        recipes = im.find_recipes(im.source_root(context))
    except ConfigError:
        recipes = []
    tags = {t for b in built for t in b["tags"]}
    missing = [{"recipe": f"{r.vendor}/{r.name}", "dockerfile": r.dockerfile, "image": r.tags()[0]}
               for r in recipes if r.tags()[0] not in tags]
    if as_json:
        _json({"images": built, "not_built": missing})
        return
    t = Table(title="infbench worker images")
    for col in ("image", "vendor", "engine", "infbench", "schema", "size", "base"):
        t.add_column(col)
    for b in built:
        schema = b["schema_version"] if b["compatible"] else f"[red]{b['schema_version']} (rebuild)[/]"
        t.add_row("\n".join(b["tags"]) or b["id"], b["vendor"], f"{b['engine']} {b['engine_version']}".strip(),
                  b["infbench_version"], schema, f"{(b['size_bytes'] or 0) / 2**20:,.0f} MiB", b["base_image"] or "")
    out.print(t)
    for m in missing:
        out.print(f"[dim]not built: {m['image']} ({m['dockerfile']}): `infbench containers build --vendor "
                  f"{m['recipe'].split('/')[0]} --image {m['recipe'].split('/')[1]}`[/]")


# --- report, export, compare, predict -------------------------------------------------

def _open_store(store_path: Path | None):
    from infbench.store import Store

    try:
        return Store(store_path)
    except InfbenchError as exc:
        _fail(exc)


def _select_rows(rows: list[dict[str, Any]], model: list[str] | None, device: list[str] | None,
                 engine: list[str] | None) -> list[dict[str, Any]]:
    """Keep rows whose model / engine is listed and whose device vendor or model name
    contains one of ``device`` (case-insensitive)."""
    models, engines = _split(model, "--model"), _split(engine, "--engine")
    devs = [d.lower() for d in (_split(device, "--device") or [])]
    return [r for r in rows
            if (not models or r["spec"]["model"] in models) and (not engines or r["spec"]["engine"] in engines)
            and (not devs or any(d in f"{r['device']['vendor']} {r['device']['model']}".lower() for d in devs))]


def _need(extra: str, exc: ImportError) -> None:
    _fail(ConfigError(f"this command needs {exc.name or 'an optional package'}",
                      hint=f"pip install 'infbench[{extra}]'"))


@app.command()
def report(
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for index.html and figures/.")] = Path("infbench-report"),
    store_path: Annotated[Path | None, typer.Option("--store", help="Results database.")] = None,
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run (id prefix).")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Only these models.")] = None,
    device: Annotated[list[str] | None, typer.Option("--device", help="Only devices whose vendor or name contains this.")] = None,
    engine: Annotated[list[str] | None, typer.Option("--engine", "-e", help="Only these engines.")] = None,
    static: Annotated[bool, typer.Option("--static/--no-static", help="Also write PNG and SVG figures for papers (matplotlib).")] = True,
    title: Annotated[str, typer.Option("--title", help="Page title.")] = "infbench report",
    slo_ttft: Annotated[float | None, typer.Option("--slo-ttft", help="TTFT p99 limit (s) marked in the trade-off figure (editable in the page).")] = None,
    slo_tpot: Annotated[float | None, typer.Option("--slo-tpot", help="TPOT p99 limit (s) marked in the trade-off figure.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Write an interactive HTML report of stored results (one self-contained file that
    works offline) and, with `--static`, PNG/SVG figures.

    Figures: throughput vs batch size, an input x output heatmap, TTFT and ITL bars,
    power and tokens per joule, the latency-throughput trade-off with its Pareto front and
    the SLO-meeting cells, and measured latency against the roofline floor. The page has
    filters (device, engine, model, precision, batch, lengths, tp, run) and axis
    selectors. Example: `infbench report --out report && xdg-open report/index.html`.
    """
    from infbench.report.data import flat_row, limits_resolver

    store = _open_store(store_path)
    rows = _select_rows(store.results(run_id=run_id), model, device, engine)
    if not rows:
        err.print(f"no results to report in {store.path}" + (" for these filters" if (run_id or model or device or engine) else "; run `infbench run` first"))
        raise typer.Exit(1)
    resolve = limits_resolver(_pm())
    flat = [flat_row(r, resolve) for r in rows]
    try:
        from infbench.report.html import write_report

        page = write_report(flat, out_dir, title, slo_ttft * 1e3 if slo_ttft else None,
                            slo_tpot * 1e3 if slo_tpot else None)
        figs = []
        if static:
            from infbench.report.static import write_figures

            figs = write_figures(flat, out_dir / "figures")
    except ImportError as exc:
        _need("report", exc)
        return
    backfilled = sum(1 for f in flat if f["roofline_backfilled"])
    if as_json:
        _json({"html": str(page), "figures": [str(p) for p in figs], "cells": len(flat),
               "roofline_backfilled": backfilled})
        return
    out.print(f"[green]wrote[/] {page} ({len(flat)} cells" + (f"; roofline computed now for {backfilled} older cells" if backfilled else "") + ")")
    if figs:
        out.print(f"[green]wrote[/] {len(figs)} figure files in {out_dir / 'figures'}")


@app.command()
def export(
    fmt: Annotated[str, typer.Option("--format", "-f", help="lib-csv (LLM-Inference-Bench's CSV columns), csv or json.")] = "lib-csv",
    out_file: Annotated[Path | None, typer.Option("--out", "-o", help="File to write (default: stdout).")] = None,
    store_path: Annotated[Path | None, typer.Option("--store", help="Results database.")] = None,
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run (id prefix).")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Only these models.")] = None,
    device: Annotated[list[str] | None, typer.Option("--device", help="Only devices whose vendor or name contains this.")] = None,
    engine: Annotated[list[str] | None, typer.Option("--engine", "-e", help="Only these engines.")] = None,
) -> None:
    """Export stored results for other tools.

    `--format lib-csv` writes LLM-Inference-Bench's columns (Hardware, Num of Hardware,
    Framework, Model, Input Output Length, Batch Size, Latency, Throughput, then Input
    Length, Output Length, TTFT Latency, end_latency, avg_power in mW) for ok batch-mode
    cells, so its dashboard (InferenceGraphPlotter) and notebooks read infbench results.
    """
    import csv
    import io

    from infbench.report.data import lib_rows
    from infbench.report.tables import results_csv, results_json

    if fmt not in ("lib-csv", "csv", "json"):
        _fail(ConfigError(f"unknown format {fmt!r}", hint="use lib-csv, csv or json"))
    store = _open_store(store_path)
    rows = _select_rows(store.results(run_id=run_id), model, device, engine)
    if fmt == "json":
        text = json.dumps(results_json(rows), indent=2, default=str) + "\n"
    elif fmt == "csv":
        text = results_csv(rows) if rows else ""
    else:
        lib = lib_rows(rows)
        buf = io.StringIO()
        cols = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency",
                "Throughput", "Input Length", "Output Length", "TTFT Latency", "end_latency", "avg_power"]
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(lib)
        text = buf.getvalue()
        if not lib:
            err.print("[yellow]no ok batch-mode cells to export[/] (LLM-Inference-Bench's layout has no serving-mode columns)")
    if out_file:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text)
        err.print(f"wrote {out_file}")
    else:
        sys.stdout.write(text)


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="Side A: run id (prefix), results .db file, or FILE.db:RUN.")],
    run_b: Annotated[str, typer.Argument(help="Side B, the same forms.")],
    store_path: Annotated[Path | None, typer.Option("--store", help="Database for run ids.")] = None,
    html_out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write a plot of the ratios (HTML).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Compare two sets of results cell by cell: ratios B / A of throughput, latency,
    power and tokens per joule, for cells with the same workload (spec hash).

    Examples: `infbench compare 3f2a 9c1d` (two runs in the store);
    `infbench compare siteA.db siteB.db` (two sites); `--out ratios.html` plots them.
    """
    from infbench.report.compare import COMPARED, compare_rows, load_side, write_compare_html

    try:
        la, a = load_side(run_a, store_path)
        lb, b = load_side(run_b, store_path)
    except InfbenchError as exc:
        _fail(exc)
        return
    res = compare_rows(a, b)
    if html_out:
        try:
            write_compare_html(res, la, lb, html_out)
        except ImportError as exc:
            _need("report", exc)
    if as_json:
        _json({"a": la, "b": lb, **res})
        return
    if not res["pairs"]:
        err.print(f"no cell is ok on both sides ({res['only_a']} only in A, {res['only_b']} only in B)")
        raise typer.Exit(1)
    t = Table(title=f"B / A  (A = {la}, B = {lb})", header_style="bold")
    t.add_column("cell")
    keys = [k for k in COMPARED if any(p["ratio"][k] is not None for p in res["pairs"])]
    for k in keys:
        t.add_column(COMPARED[k][0], justify="right")

    def cell(v: float | None, higher_better: bool) -> str:
        if v is None:
            return "-"
        good = (v > 1.02) if higher_better else (v < 0.98)
        bad = (v < 0.98) if higher_better else (v > 1.02)
        return f"[green]{v:.3f}[/]" if good else (f"[red]{v:.3f}[/]" if bad else f"{v:.3f}")

    for p in res["pairs"]:
        t.add_row(escape(p["label"]), *[cell(p["ratio"][k], COMPARED[k][1]) for k in keys])
    t.add_row("[bold]geometric mean[/]", *[cell(res["geomean"][k], COMPARED[k][1]) for k in keys])
    out.print(t)
    out.print(f"{len(res['pairs'])} matched cells; {res['only_a']} only in A, {res['only_b']} only in B "
              "(matched by workload spec hash; green = B better)")
    if html_out:
        out.print(f"[green]wrote[/] {html_out}")


def _predict_limits(pm, ident: str):
    """Limits of a described device id, or of this host's CPU for ``cpu``."""
    from infbench.analysis.roofline import Limits, RooflineError
    from infbench.devices import catalog, find_spec

    try:
        if ident.lower() == "cpu":
            from infbench.platforms.cpu import cpu_device
            from infbench.run import device_roofline_limits

            lim, why = device_roofline_limits(pm, cpu_device())
            if lim is None:
                raise ConfigError(f"no limits for this CPU: {why}")
            return lim
        return Limits.from_info(find_spec(catalog(pm), ident).per_device())
    except RooflineError as exc:
        raise ConfigError(f"cannot predict on {ident}: {exc}", hint="see `infbench devices --json`") from exc


def _rows_of_device(pm, rows: list[dict[str, Any]], ident: str) -> list[dict[str, Any]]:
    from infbench.devices import catalog, match_device
    from infbench.schema import DeviceInfo

    specs = catalog(pm)
    keep = []
    for r in rows:
        d = DeviceInfo(**r["device"])
        if ident.lower() == "cpu":
            if d.vendor == "cpu":
                keep.append(r)
        else:
            s = match_device(specs, d)
            if s is not None and s.id.lower() == ident.lower():
                keep.append(r)
    return keep


@app.command()
def predict(
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Zoo model(s) (`infbench models`).")] = None,
    device: Annotated[list[str] | None, typer.Option("--device", "-d", help="Described device id(s) (`infbench devices`), or cpu for this host's measured CPU.")] = None,
    batch: Annotated[list[str] | None, typer.Option("--batch", "-b", help="Batch size(s) / concurrency.")] = None,
    input_len: Annotated[list[str] | None, typer.Option("--input", "--input-len", help="Input length(s) in tokens.")] = None,
    output_len: Annotated[list[str] | None, typer.Option("--output", "--output-len", help="Output length(s) in tokens.")] = None,
    tp: Annotated[list[str] | None, typer.Option("--tp", "--tensor-parallel-size", help="Devices per model instance.")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Precision class or engine dtype (bf16, fp16, fp8, q8_0...).")] = "bf16",
    calibrate_: Annotated[bool, typer.Option("--calibrate", help="Fit the efficiency factors to this device's stored cells (held-out error reported) and keep them for later predictions.")] = False,
    store_path: Annotated[Path | None, typer.Option("--store", help="Results database (for --calibrate).")] = None,
    eff_compute: Annotated[float | None, typer.Option("--eff-compute", help="Override: fraction of peak FLOP/s reached (0-1].")] = None,
    eff_memory: Annotated[float | None, typer.Option("--eff-memory", help="Override: fraction of peak bandwidth reached (0-1].")] = None,
    overhead_ms: Annotated[float | None, typer.Option("--overhead-ms", help="Override: fixed time per forward pass (ms).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Predict TTFT, TPOT, E2E and throughput analytically (GenZ's per-operator roofline
    with efficiency factors, plus the tensor-parallel all-reduce).

    Example: `infbench predict --model llama-3-8b --device h100-sxm --batch 16 --input 1024
    --output 128 --tp 1 --dtype bf16`. Lists (`--batch 1,16,64`) predict a grid at once.
    `--calibrate` fits the factors to the stored cells of the device and prints the
    geometric-mean error on held-out cells; later predictions for that device use them.
    Method and formulas: docs/roofline.md.
    """
    import numpy as np

    from infbench.analysis import predict as P
    from infbench.analysis.roofline import RooflineError
    from infbench.models import resolve
    from infbench.store import default_home

    pm = _pm()
    devices_ = _split(device, "--device") or ["cpu"]
    home = default_home()
    report_cal: list[dict[str, Any]] = []
    try:
        limits = {d: _predict_limits(pm, d) for d in devices_}
        if calibrate_:
            store = _open_store(store_path)
            rows = store.results()
            for d, lim in limits.items():
                pts = P.measured_points(_rows_of_device(pm, rows, d))
                try:
                    cal = P.calibrate(pts, lim)
                except ImportError as exc:
                    _need("report", exc)
                    return
                path = P.save_calibration(home, cal)
                report_cal.append({**cal.to_dict(), "saved": str(path)})
        shapes = [resolve(m) for m in (_split(model, "--model") or [])]
        grid = [np.asarray(_split(v, flag, int) or [dflt], dtype=float) for v, flag, dflt in
                ((batch, "--batch", 1), (input_len, "--input", 1024), (output_len, "--output", 128), (tp, "--tp", 1))]
    except InfbenchError as exc:
        _fail(exc)
        return
    if not shapes and not calibrate_:
        _fail(ConfigError("give --model (and --device), or --calibrate", hint="e.g. infbench predict --model llama-3-8b --device h100-sxm"))
    gb, gi, go, gt = np.meshgrid(*grid, indexing="ij")
    results_: list[dict[str, Any]] = []
    for d, lim in limits.items():
        cal = P.load_calibration(home, lim.id)
        eff = cal.efficiency if cal else P.Efficiency()
        if eff_compute or eff_memory or overhead_ms is not None:
            eff = P.Efficiency(eff_compute or eff.eff_compute, eff_memory or eff.eff_memory,
                             overhead_ms / 1e3 if overhead_ms is not None else eff.overhead_s, source="command line")
        for m in shapes:
            try:
                pr = P.predict(m, lim, gb, gi, go, gt, dtype, eff)
            except RooflineError as exc:
                _fail(ConfigError(f"cannot predict {m.name} on {d}: {exc}"))
            for idx in np.ndindex(gb.shape):
                results_.append({
                    "model": m.name, "device": d, "dtype": dtype, "batch": int(gb[idx]), "input_len": int(gi[idx]),
                    "output_len": int(go[idx]), "tp": int(gt[idx]),
                    **{k: P.finite(float(v[idx])) for k, v in pr.items()},
                    "fits_memory": bool(pr["memory_bytes"][idx] <= lim.memory_bytes) if lim.memory_bytes else None,
                    "efficiency": eff.__dict__})
    if as_json:
        _json({"predictions": results_, "calibrations": report_cal})
        return
    for c in report_cal:
        et, ed = c["error_test"], c["error_default"]

        def pct(v: float | None) -> str:
            return "-" if v is None or v != v else f"{100 * v:.1f} %"

        e = c["efficiency"]
        out.print(f"[bold]calibrated {c['device_id']}[/] on {c['n_train']} cells, {c['n_test']} held out: "
                  f"eff_compute {e['eff_compute']:.3f}, eff_memory {e['eff_memory']:.3f}, overhead {e['overhead_s'] * 1e3:.2f} ms")
        out.print(f"  held-out geometric-mean error: TTFT {pct(et['ttft_s'])}, TPOT {pct(et['tpot_s'])}, "
                  f"E2E {pct(et['e2e_s'])}, output tok/s {pct(et['output_tok_s'])} "
                  f"(uncalibrated defaults: TTFT {pct(ed['ttft_s'])}, TPOT {pct(ed['tpot_s'])}); saved {c['saved']}")
    if not results_:
        return
    t = Table(title="Predicted (analytical; docs/roofline.md)", header_style="bold")
    for c in ("model", "device", "dtype", "tp", "batch", "in", "out", "TTFT ms", "TPOT ms", "E2E s", "out tok/s",
              "total tok/s", "fits"):
        t.add_column(c, justify="left" if c in ("model", "device", "dtype") else "right")
    for r in results_:
        t.add_row(r["model"], r["device"], r["dtype"], str(r["tp"]), str(r["batch"]), str(r["input_len"]),
                  str(r["output_len"]), f"{r['ttft_s'] * 1e3:,.2f}", f"{r['tpot_s'] * 1e3:,.3f}", f"{r['e2e_s']:,.3f}",
                  f"{r['output_tok_s']:,.1f}", f"{r['total_tok_s']:,.1f}",
                  {True: "yes", False: "[red]no[/]", None: "?"}[r["fits_memory"]])
    out.print(t)
    src = {r["device"]: r["efficiency"]["source"] for r in results_}
    for d, s in src.items():
        out.print(f"[dim]{d}: efficiency factors {s}[/]")


# --- models, devices, plugins ----------------------------------------------------------

@app.command()
def devices(
    vendor: Annotated[str | None, typer.Option("--vendor", help="Only this vendor (nvidia, amd, ...).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output (base units: B, B/s, FLOP/s, W).")] = False,
) -> None:
    """List the device descriptions the installed plugins publish: memory, bandwidth,
    dense peak TFLOP/s per precision and TDP, with their sources.

    They are what the roofline (MBU/MFU per cell) and `infbench predict` read. Install a
    vendor plugin (e.g. `pip install infbench-nvidia`) to get its devices.
    """
    from infbench.devices import catalog

    try:
        specs = [s for s in catalog(_pm()) if vendor is None or s.vendor == vendor]
    except InfbenchError as exc:
        _fail(exc)
        return
    if as_json:
        _json([{**s.model_dump(), "per_device": s.per_device()} for s in specs])
        return
    if not specs:
        err.print("no device descriptions" + (f" for {vendor}" if vendor else "")
                  + ": install a vendor plugin (pip install infbench-nvidia ...)")
        raise typer.Exit(1)
    t = Table(title="Device descriptions (dense peaks, per package)", header_style="bold")
    for c in ("id", "vendor", "name", "memory", "TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "int8 TOPS", "TDP"):
        t.add_column(c, justify="left" if c in ("id", "vendor", "name") else "right")

    def f(v: float | None, fmt: str = "{:,.1f}") -> str:
        return fmt.format(v) if v else "-"

    for s in sorted(specs, key=lambda s: (s.vendor, s.id)):
        t.add_row(s.id, s.vendor, s.name, f(s.memory_gib, "{:g} GiB"), f(s.bandwidth_tb_s, "{:g}"),
                  f(s.peak_tflops.get("bf16")), f(s.peak_tflops.get("fp8")), f(s.peak_tflops.get("int8")),
                  f(s.tdp_w, "{:g} W"))
    out.print(t)
    out.print("[dim]sources: `infbench devices --json`; notes on each entry there.[/]")


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List the model zoo: parameters, attention type and KV-cache bytes per token.

    Any of these names (or its HF id) works with `--model`; engines build random weights
    from the shape, which is valid for speed because output lengths are forced.
    """
    from infbench.models import zoo

    rows = [m.summary() for m in zoo().values()]
    if as_json:
        _json(rows)
        return
    t = Table(title="Model zoo", header_style="bold")
    for c in ("name", "hf_id", "params", "active", "layers", "hidden", "heads/kv", "attention", "vocab",
              "KV bytes/token (fp16)"):
        t.add_column(c, justify="left" if c in ("name", "hf_id", "attention") else "right")
    for r in rows:
        t.add_row(r["name"], r["hf_id"] or "-", f"{r['params'] / 1e9:.2f}B", f"{r['active_params'] / 1e9:.2f}B",
                  str(r["layers"]), str(r["hidden_size"]), f"{r['heads']}/{r['kv_heads']}", r["attention"],
                  str(r["vocab_size"]), f"{r['kv_bytes_per_token_fp16']:,}")
    out.print(t)


@app.command()
def plugins(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List plugins: name, distribution and version, and the hooks each implements.

    Plugins load from the entry-point group `infbench`; set INFBENCH_DISABLE_PLUGINS=a,b
    to keep some from loading. See docs/plugins.md to write one.
    """
    from infbench.plan import engine_specs

    pm = _pm()
    infos = list(pm.infos.values())
    specs = engine_specs(pm)
    if as_json:
        _json({"plugins": [i.__dict__ for i in infos],
               "engines": [{"name": s.name, "platforms": s.platforms, "dtypes": s.dtypes,
                            "installed": s.factory is not None and not s.missing(),
                            "install": s.install} for s in specs.values()]})
        return
    t = Table(title="Plugins", header_style="bold")
    for c in ("name", "distribution", "version", "module", "hooks", "status"):
        t.add_column(c)
    for i in infos:
        st = "[red]" + i.error + "[/]" if i.error else ("disabled" if i.disabled else "[green]loaded[/]")
        t.add_row(i.name, i.distribution, i.version, i.module, "\n".join(h.removeprefix("infbench_") for h in i.hooks)
                  or "-", st)
    out.print(t)
    e = Table(title="Engines", header_style="bold")
    for c in ("engine", "platforms", "dtypes", "installed"):
        e.add_column(c)
    for s in specs.values():
        miss = s.missing()
        e.add_row(s.name, ", ".join(s.platforms), ", ".join(s.dtypes),
                  "[green]yes[/]" if s.factory and not miss else f"[yellow]no[/] ({s.install})")
    out.print(e)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
