"""``infbench perplexity`` (quality per precision, stored beside throughput) and
``infbench quantize`` (precisions derived from one GGUF)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from infbench.cli.common import (
    JSON_HELP,
    err,
    fail,
    out,
    plugin_manager,
    print_json,
    split,
    stdout_to_stderr,
    store_for_writing,
)
from infbench.errors import ConfigError, InfbenchError

Opt = typer.Option
ListOpt = list[str] | None

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


def perplexity(
    model: Annotated[str, Opt("--model", "-m", help="A .gguf file or a Hugging Face folder with weights.")],
    text: Annotated[Path, Opt("--text", help="UTF-8 text to score (e.g. WikiText-2's wiki.test.raw).")],
    engine: Annotated[ListOpt, Opt("--engine", "-e", help="llama.cpp (default), transformers, vllm. Comma list "
                                   "or repeat.")] = None,
    dtype: Annotated[ListOpt, Opt("--dtype", help="Engine dtype(s) or class(es). Default: the GGUF's own type on "
                                  "llama.cpp, float32 on transformers and vLLM.")] = None,
    n_ctx: Annotated[int, Opt("--n-ctx", help="Tokens per chunk (llama-perplexity's -c).")] = 512,
    chunks: Annotated[int | None, Opt("--chunks", help="Score only the first N chunks (llama-perplexity's "
                                      "--chunks).")] = None,
    device: Annotated[str | None, Opt("--device", help="Device vendor to run on. Default: first accelerator, "
                                      "else cpu.")] = None,
    threads: Annotated[int | None, Opt("--threads", help="CPU threads for the engine.")] = None,
    engine_arg: Annotated[ListOpt, Opt("--engine-arg", help="KEY=VALUE passed to the engine (vLLM EngineArgs "
                                       "names...).")] = None,
    max_ppl_increase: Annotated[str | None, Opt("--max-ppl-increase", help="Flag precisions whose perplexity "
                                                "exceeds the baseline's by more than this (e.g. 1%).")] = None,
    baseline: Annotated[str | None, Opt("--baseline", help="dtype to compare with (default: the highest "
                                        "precision measured).")] = None,
    store_path: Annotated[Path | None, Opt("--store", help="Results database.")] = None,
    force: Annotated[bool, Opt("--force", help="Measure again even if stored.")] = False,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    from infbench.detect import detect
    from infbench.engines.options import engine_options
    from infbench.quality.gate import parse_increase, with_gate
    from infbench.quality.perplexity import plan_perplexity
    from infbench.quality.runner import measure_and_store
    from infbench.report.tables import quality_json, quality_table
    from infbench.store.quality import quality_results
    from infbench.target import select_device

    try:
        pm = plugin_manager()
        gate = parse_increase(max_ppl_increase)
        reqs = plan_perplexity(model, split(engine, "--engine") or ["llama.cpp"], split(dtype, "--dtype"), text,
                               n_ctx, chunks, pm)
        dev = select_device(detect(pm), device)
        eopts = engine_options(engine_arg, n_threads=threads)
    except InfbenchError as exc:
        fail(exc)
    store = store_for_writing(store_path)
    failed = 0

    with err.status("starting") as status, stdout_to_stderr(as_json):
        def on_event(kind: str, payload: Any) -> None:
            nonlocal failed
            if kind == "loading":
                status.update(f"loading {escape(payload)}")
            elif kind == "chunks":
                status.update(f"scoring {payload} chunks of {n_ctx} tokens")
            elif kind == "done" and payload.status != "ok":
                failed += 1
                err.print(f"[red]failed[/] {escape(payload.model)} on {payload.engine} ({payload.dtype}): "
                          f"{escape(str(payload.error))}")
            elif kind == "done" and (payload.weights.get("sample") or {}).get("coherent") is False:
                err.print(f"[yellow]warning:[/] {payload.engine} ({payload.dtype}) answered "
                          f"{payload.weights['sample']['question']!r} with "
                          f"{escape(repr(payload.weights['sample']['answer'][:80]))}: are the weights loaded right?")

        try:
            done = measure_and_store(reqs, store, dev, eopts, pm, force, on_event)
        except InfbenchError as exc:
            fail(exc)
    keys = [req.key() for req, _, _ in done]
    skipped = {req.key() for req, was_skipped, _ in done if was_skipped}
    everything = with_gate(quality_results(store), gate, baseline)
    rows = [dict(r, skipped=r["quality_key"] in skipped) for r in everything if r["quality_key"] in keys]
    if as_json:
        print_json(quality_json(rows))
    else:
        out.print(quality_table(rows, title=f"perplexity ({store.path})", max_increase=gate))
        if skipped:
            out.print(f"{len(skipped)} measurement(s) already stored (use --force to measure again).")
        flagged = [r for r in rows if r.get("beyond_gate")]
        if flagged:
            out.print(f"[red]{len(flagged)} precision(s) beyond the {gate * 100:g} % gate:[/] "
                      + ", ".join(f"{r['engine']} {r['dtype']}" for r in flagged))
    if failed:
        raise typer.Exit(3)


def perplexity_after_run(plan: Any, text: Path, store: Any, pm: Any, options: dict[str, Any], n_ctx: int,
                         chunks: int | None, force: bool, as_json: bool) -> list[dict[str, Any]]:
    """``infbench run --perplexity TEXT``: the perplexity of each real-weights group of the
    run's plan (:func:`infbench.quality.runner.perplexity_for_plan`), with a status line;
    returns the stored rows (:func:`infbench.store.quality.quality_results` items, gated)."""
    from infbench.quality.gate import with_gate
    from infbench.quality.runner import perplexity_for_plan
    from infbench.store.quality import quality_results

    with err.status("perplexity") as status, stdout_to_stderr(as_json):
        def on_event(kind: str, payload: Any) -> None:
            if kind == "loading":
                status.update(f"perplexity: loading {escape(payload)}")
            elif kind == "chunks":
                status.update(f"perplexity: scoring {payload} chunks of {n_ctx} tokens")

        try:
            done, notes = perplexity_for_plan(plan, str(text), store, n_ctx, chunks, options, pm, force, on_event)
        except InfbenchError as exc:
            err.print(f"[red]perplexity not measured:[/] {escape(exc.message)}")
            return []
    for n in notes:
        err.print(f"[yellow]note:[/] {escape(n)}")
    keys = {req.key() for req, _, _ in done}
    skipped = {req.key() for req, was_skipped, _ in done if was_skipped}
    return [dict(r, skipped=r["quality_key"] in skipped) for r in with_gate(quality_results(store))
            if r["quality_key"] in keys]


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
    from rich.table import Table

    from infbench.quality.quantize import derive, hf_folder, normalize_dtype
    from infbench.quality.weights import weights_info

    try:
        if model.suffix != ".gguf" or not model.is_file():
            raise ConfigError(f"--model {model} is not a .gguf file", hint="quantize works on GGUF files")
        targets = [d.lower() if d.lower() == "hf" else normalize_dtype(d) for d in split(to, "--to") or []]
        if not targets:
            raise ConfigError("--to names no dtype", hint="e.g. --to q8_0,q4_0")
        from infbench.models import resolve

        info = weights_info(resolve(str(model)))
    except InfbenchError as exc:
        fail(exc)
    if not info.real:
        err.print(f"[yellow]note:[/] {escape(info.reason or 'dummy weights')}: speed only, no quality")
    done = []
    with err.status("quantizing") as status, stdout_to_stderr(as_json):
        for d in targets:
            status.update(f"{model.name} -> {d}")
            try:
                done.append(hf_folder(model) if d == "hf" else derive(model, d, threads=threads))
            except InfbenchError as exc:
                fail(exc)
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
