"""``infbench perplexity`` (quality per precision, stored beside throughput) and
``infbench quantize`` (precisions derived from one GGUF)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from infbench.cli.common import (
    JSON_HELP,
    err,
    out,
    plugin_manager,
    print_json,
    split,
    stdout_to_stderr,
    store_for_writing,
)
from infbench.cli.flags import sharing_config_options
from infbench.contract.registry import engine_specs
from infbench.data import events as ev
from infbench.data import signals
from infbench.data.engine_options import check_engine_args
from infbench.data.errors import ConfigError, InfbenchError
from infbench.data.inputs import PerplexityFlags, QuantizeFlags, checked
from infbench.data.models import resolve
from infbench.data.paths import cache_dir
from infbench.data.run import RunOptions
from infbench.data.run_config import RunConfig
from infbench.data.secrets import printable
from infbench.detect import detect
from infbench.engines.options import engine_options
from infbench.execution.bookkeeping import provenance
from infbench.execution.executors import choose_executor
from infbench.execution.orchestrator import perplexity_rows
from infbench.execution.scenarios.scoring import perplexity_plan
from infbench.plan.target import select_device
from infbench.quality.gate import parse_increase, with_gate
from infbench.quality.perplexity import plan_perplexity
from infbench.quality.quantize import derive, hf_folder, normalize_dtype
from infbench.quality.weights import weights_info
from infbench.report.tables import quality_json, quality_table
from infbench.store.quality import quality_results

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager
    from infbench.store import Store

Opt = typer.Option

PERPLEXITY_HELP = """Measure perplexity exactly as llama.cpp's `llama-perplexity` does, on
llama.cpp, transformers or vLLM, and store it beside the throughput of the same precision.

The text is tokenized with the model's own tokenizer (BOS first where the model adds one),
cut into non-overlapping chunks of `--n-ctx` tokens (BOS first in each), and the second
half of each chunk is scored. Output: perplexity, its uncertainty (llama.cpp's `+/-`) and
the tokens scored. Random (dummy) weights are refused: pass a `.gguf` file or a Hugging
Face folder with weights.

On llama.cpp `--dtype` may name any precision (`f16,q8_0,q4_0,q4_K_M,q2_K`): it is derived
from the GGUF and cached (see `infbench quantize`). `--max-ppl-increase 1%` flags the
precisions whose perplexity exceeds the highest precision measured by more than 1 %
(Perplexity's A100-vs-H100 rule).

**Examples**

    infbench perplexity --model SmolLM2-135M-Instruct.Q4_1.gguf --text wiki.test.raw
    infbench perplexity -m model.gguf --dtype f16,q8_0,q4_0,q4_K_M,q2_K --text wiki.test.raw --max-ppl-increase 1%
    infbench perplexity -m model.gguf --engine transformers --dtype float32 --text wiki.test.raw --chunks 20
    infbench perplexity -m ./hf-folder --engine vllm --text wiki.test.raw --json

Measurements already stored (same model and weights, engine, dtype, text, n_ctx and
chunks) are shown again, not re-run, unless `--force`.
"""


#: The options ``infbench perplexity`` shares with ``infbench run`` (the run's configuration:
#: :mod:`infbench.cli.flags`), in its words.
_SHARED_HELP = {
    "engine": "llama.cpp (default), transformers, vllm. Comma list or repeat.",
    "dtype": "Engine dtype(s) or class(es). Default: the GGUF's own type on llama.cpp, float32 on transformers and "
             "vLLM.",
    "device": "Device vendor to run on. Default: first accelerator, else cpu.",
    "engine_arg": "KEY=VALUE passed to the engine (vLLM EngineArgs names...).",
    "executor": "Where the engines run: inprocess (default), container (the plugin's worker image) or ray (a Ray "
                "cluster's node with the device; the model and text must exist at the same path there).",
    "container_runtime": "--executor container: docker or apptainer (default: Docker when an engine answers).",
    "ray_address": "--executor ray: the cluster (HOST:PORT of the head; default $RAY_ADDRESS).",
    "store_path": "Results database.",
    "force": "Measure again even if stored.",
    "as_json": JSON_HELP,
}


@sharing_config_options(["model", "text", "engine", "dtype", "n_ctx", "chunks", "device", "threads", "engine_arg",
                         "max_ppl_increase", "baseline", "executor", "container_runtime", "ray_address", "store_path",
                         "force", "as_json"], _SHARED_HELP)
def perplexity(
    model: Annotated[str, Opt("--model", "-m", help="A .gguf file or a Hugging Face folder with weights.")],
    text: Annotated[Path, Opt("--text", help="UTF-8 text to score (e.g. WikiText-2's wiki.test.raw).")],
    n_ctx: Annotated[int, Opt("--n-ctx", help="Tokens per chunk (llama-perplexity's -c).")] = 512,
    chunks: Annotated[int | None, Opt("--chunks", help="Score only the first N chunks (llama-perplexity's "
                                      "--chunks).")] = None,
    max_ppl_increase: Annotated[str | None, Opt("--max-ppl-increase", help="Flag precisions whose perplexity "
                                                "exceeds the baseline's by more than this (e.g. 1%).")] = None,
    baseline: Annotated[str | None, Opt("--baseline", help="dtype to compare with (default: the highest "
                                        "precision measured).")] = None,
    **shared: Any,
) -> None:
    checked(PerplexityFlags, n_ctx=n_ctx, chunks=chunks)
    config = RunConfig.from_flags(shared)  # the run's parts: engines, engine options, executor, output
    sweep, eng, out_ = config.sweep, config.engine, config.output
    pm = plugin_manager()
    gate = parse_increase(max_ppl_increase)
    reqs = plan_perplexity(model, sweep.engines or ["llama.cpp"], sweep.dtypes, text, n_ctx, chunks, pm)
    det = detect(pm)
    dev = select_device(det, sweep.device)
    engines = list(dict.fromkeys(r.engine for r in reqs))
    args = check_engine_args(engine_specs(pm), engines, eng.args or {})  # before any run
    eopts = engine_options(checked=args.values, n_threads=eng.threads)
    plan = perplexity_plan(reqs, dev)
    ex = scenario_executor(shared.get("executor") or "inprocess", getattr(config.executor, "container_runtime", None),
                           getattr(config.executor, "address", None), plan, pm, provenance(det, pm))
    store = store_for_writing(out_.store)
    force, as_json = out_.force, out_.as_json
    summary = _run_quality(lambda observer: ex.run(plan, store, RunOptions(force=force, engine_options=eopts),
                                                        observer), as_json)
    keys = [req.key() for req in reqs]
    skipped = set(summary.quality_skipped)
    everything = with_gate(quality_results(store), gate, baseline)
    rows = [dict(r, skipped=r["quality_key"] in skipped) for r in everything if r["quality_key"] in keys]
    if as_json:
        print_json(quality_json(rows))
    else:
        out.print(quality_table(rows, title=f"perplexity ({store.path})", max_increase=gate))
        if skipped:
            out.print(f"{len(skipped)} measurement(s) already stored (use --force to measure again).")
        flagged = [r for r in rows if r.get("beyond_gate")]
        if flagged and gate is not None:
            out.print(f"[red]{len(flagged)} precision(s) beyond the {gate * 100:g} % gate:[/] "
                      + ", ".join(f"{r['engine']} {r['dtype']}" for r in flagged))
    if any(q.status != "ok" for q in summary.quality) or summary.status in ("failed", "interrupted"):
        raise typer.Exit(3)


def scenario_executor(name: str | None, container_runtime: str | None, ray_address: str | None, plan: Any,
                      pm: PluginManager, provenance: dict[str, Any]) -> Any:
    """The executor a scenario command (``perplexity``) runs on: ``inprocess`` by default,
    the plugin's worker image (``container``) or a Ray cluster (``ray``).

    Raises:
        ConfigError: an unknown executor, or one that is not usable here.
    """
    notes: list[str] = []
    kwargs = {"ray_address": ray_address} if name == "ray" else {}
    ex = choose_executor(name or "inprocess", plan.device, sorted({g.engine for g in plan.groups}), pm, provenance,
                         notes, container_runtime, **kwargs)
    for n in notes:
        err.print(f"[yellow]note:[/] {escape(n)}")
    return ex


def _run_quality(run: Any, as_json: bool, prefix: str = "") -> Any:
    """Run a perplexity plan (``run(observer)``: an executor's ``run``) with a status line;
    failed measurements and warnings printed as they come. Returns the run's summary.

    Raises:
        typer.Exit: Ctrl-C (130).
    """
    with err.status(f"{prefix}starting") as status, stdout_to_stderr(as_json):
        def observer(e: Any) -> None:
            if isinstance(e, ev.GroupLoading):
                status.update(f"{prefix}loading {escape(e.group.label())}")
            elif isinstance(e, ev.ScoreProgress):
                status.update(f"{prefix}scoring {e.chunks} chunks of {e.n_ctx} tokens")
            elif isinstance(e, ev.ScoreFinished) and e.result.status != "ok":
                r = e.result
                err.print(f"[red]failed[/] {escape(printable(r.model))} on {r.engine} ({r.dtype}): "
                          f"{escape(printable(r.error))}")
            elif isinstance(e, ev.ScoreFinished) and (e.result.weights.get("sample") or {}).get("coherent") is False:
                r = e.result
                err.print(f"[yellow]warning:[/] {r.engine} ({r.dtype}) answered {r.weights['sample']['question']!r} "
                          f"with {escape(printable(repr(r.weights['sample']['answer'][:80])))}: are the weights "
                          "loaded right?")
            elif isinstance(e, ev.Note):
                err.print(f"[yellow]note:[/] {escape(printable(e.text))}")

        try:
            with signals.terminate_as_interrupt():
                return run(observer)
        except KeyboardInterrupt as exc:
            err.print("[yellow]interrupted:[/] the measurements finished so far are stored")
            raise typer.Exit(signals.exit_status(exc)) from None


def perplexity_after_run(prep: Any, store: Store, as_json: bool) -> list[dict[str, Any]]:
    """``infbench run --perplexity TEXT``: the perplexity plan of the run's real-weights groups
    (:meth:`~infbench.execution.orchestrator.RunPlan.perplexity_plan`) run on the run's executor
    (:meth:`~infbench.execution.orchestrator.RunPlan.run`) with a status line; returns the
    stored, gated rows (:func:`infbench.execution.orchestrator.perplexity_rows`)."""
    try:
        pplan, reqs, notes = prep.perplexity_plan()
    except InfbenchError as exc:
        err.print(f"[red]perplexity not measured:[/] {escape(exc.message)}")
        return []
    for n in notes:
        err.print(f"[yellow]note:[/] {escape(n)}")
    if pplan is None:
        return []
    summary = _run_quality(lambda observer: prep.run(store, observer, pplan), as_json, "perplexity: ")
    return perplexity_rows(store, reqs, summary)


def quantize(
    model: Annotated[Path, Opt("--model", "-m", help="A real .gguf file (any type).")],
    to: Annotated[list[str], Opt("--to", help="Target dtypes, comma list: f16, q8_0, q6_K, q5_K_M, q4_K_M, q4_0, "
                                 "q2_K...; `hf` writes a Hugging Face folder (safetensors) for vLLM and "
                                 "transformers.")],
    threads: Annotated[int | None, Opt("--threads", help="llama.cpp quantization threads.")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Derive precisions (f16, q8_0, q4_K_M...) from one GGUF file, cached with their provenance.

    The file is dequantized to f16 with the `gguf` package, then quantized with llama.cpp's
    `llama_model_quantize`. The files go to
    `$INFBENCH_HOME/cache/quantized/<parent sha256>/` with a JSON provenance beside each
    (parent path and SHA-256, method, versions, tensor types); `infbench run` and `infbench
    perplexity` with `--dtype` use them. `--to hf` writes the weights as a Hugging Face folder
    (transformers dequantizes the GGUF; float16 safetensors, config, tokenizer with its chat
    template), which vLLM and transformers load as `--model FOLDER`.

    Example: `infbench quantize --model SmolLM2-135M-Instruct.Q4_1.gguf --to q8_0,q4_0,q4_K_M,q2_K`
    """

    checked(QuantizeFlags, threads=threads)
    if model.suffix != ".gguf" or not model.is_file():
        raise ConfigError(f"--model {model} is not a .gguf file", hint="quantize works on GGUF files")
    targets = [d.lower() if d.lower() == "hf" else normalize_dtype(d) for d in split(to, "--to") or []]
    if not targets:
        raise ConfigError("--to names no dtype", hint="e.g. --to q8_0,q4_0")

    info = weights_info(resolve(str(model)))
    if not info.real:
        err.print(f"[yellow]note:[/] {escape(info.reason or 'dummy weights')}: speed only, no quality")
    done = []
    with err.status("quantizing") as status, stdout_to_stderr(as_json):
        for d in targets:
            status.update(f"{model.name} -> {d}")
            try:
                done.append(hf_folder(model) if d == "hf" else derive(model, d, threads=threads))
            except OSError as exc:  # an unwritable or full cache
                raise ConfigError(f"cannot write the {d} precision of {model.name} under {cache_dir()}: "
                                  f"{exc.strerror or exc}",
                                  hint="free disk space, or set INFBENCH_HOME to a writable folder") from None
    if as_json:
        print_json([{"dtype": x.dtype, "path": str(x.path), "created": x.created, "seconds": round(x.seconds, 3),
                     "provenance": x.provenance} for x in done])
        return
    t = Table(title=f"precisions of {model.name} (sha256 {info.sha256[:12] if info.sha256 else '-'})",
              header_style="bold")
    for c in ("dtype", "file", "MiB", "sha256", "tensor types", ""):
        t.add_column(c, justify="right" if c == "MiB" else "left")
    for x in done:
        prov = x.provenance or {}
        types = ", ".join(f"{k} {v}" for k, v in (prov.get("tensor_types") or {}).items())
        size = sum(f.stat().st_size for f in x.path.iterdir()) if x.path.is_dir() else x.path.stat().st_size
        t.add_row(x.dtype, str(x.path), f"{size / 2**20:,.1f}", (prov.get("sha256") or "parent")[:12],
                  types or "-", f"new ({x.seconds:.1f} s)" if x.created else ("cached" if prov else "the file itself"))
    out.print(t)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command(help=PERPLEXITY_HELP)(perplexity)
    app.command()(quantize)
