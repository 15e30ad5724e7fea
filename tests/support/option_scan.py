"""The scan of every ``infbench run`` option against every mode (issue 33, item 4): which
options do nothing in which mode.

For each mode (:data:`MODES`: a batch sweep, serving cells, ``--find-max``, ``--adaptive``,
``--perplexity``) and each option of ``infbench run`` (read from the command itself, so a
new option cannot be forgotten), the run is prepared as ``infbench run`` prepares it
(:func:`infbench.execution.orchestrator.prepare`, then the executor and the user's power source),
once without the option and once with a value of it (:data:`VALUES`). The two are compared
by :func:`effect`, a summary of everything the run will do: the executor, every planned
cell (its spec, warm-up and load), the scenario (a search's settings, an adaptive budget),
the options each engine of the sweep reads (an engine option no engine declares is read by
none), what the load generator, the scraper and the power source get (only where a serving
cell or a power source uses them), the Ray cluster (only where something runs on it) and
the perplexity measured after the cells.

Each (option, mode) pair is then ``applies`` (the run changed), ``refused`` (a usage error,
exit 2, whose message says why) or ``ignored`` (accepted, and nothing changed): the last
is what issue 33 forbids.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infbench.data.errors import InfbenchError

#: The modes of ``infbench run``: the flags each adds to a small sweep of the tiny model.
MODES: dict[str, dict[str, Any]] = {
    "batch": {"engine": ["llama.cpp"], "batch": ["1"]},
    "serving": {"engine": ["llama.cpp-server"], "concurrency": ["1"]},
    "find-max": {"engine": ["llama.cpp-server"], "find_max": "concurrency", "slo_ttft_ms": 1000.0},
    "adaptive": {"engine": ["llama.cpp"], "batch": ["1,2,4,8"], "adaptive": "50%"},
    "perplexity": {"engine": ["llama.cpp"], "batch": ["1"], "perplexity": "{text}"},
}
#: Flags every mode shares.
BASE: dict[str, Any] = {"model": ["tiny"], "input_len": ["8"], "output_len": ["3"]}

#: Options that choose what to do with the plan or where results go, never how a cell is
#: measured: each applies in every mode by what it is (and is not scanned).
ALWAYS = {
    "store_path": "the results store", "force": "re-measure stored cells", "dry_run": "print the plan",
    "write_spec": "write the plan as a worker spec", "as_json": "print JSON", "device": "choose the device",
    "executor": "choose where cells run", "runtime": "the old name of --executor", "engine": "defines the sweep",
    "model": "defines the sweep", "sweep_file": "defines the sweep", "preset": "defines the sweep",
}


def files(tmp: Path) -> dict[str, str]:
    """The files the scan's values name: two texts to score, a chat dataset and a trace."""
    text = tmp / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog " * 200)
    other = tmp / "other.txt"
    other.write_text("a second text to score, long enough for a few chunks " * 200)
    data = tmp / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": "hello " * 8},
                                                     {"role": "assistant", "content": "hi " * 6}]}) + "\n"
                            for _ in range(8)))
    trace = tmp / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 8, "output_length": 3,
                                         "hash_ids": [i]}) + "\n" for i in range(4)))
    return {"text": str(text), "other_text": str(other), "dataset": str(data), "trace": str(trace)}


def values(f: dict[str, str]) -> dict[str, dict[str, Any]]:
    """For each scanned option, the flags that give it (the option, and what it needs
    beside it to mean anything: ``--load-nodes`` a Ray address, ``--think-time``
    ``--multi-turn``...). The scan compares the run with all of them against the run with
    the companions only."""
    return {
        "dtype": {"dtype": ["f32"]}, "batch": {"batch": ["3"]}, "input_len": {"input_len": ["16"]},
        "output_len": {"output_len": ["4"]}, "tp": {"tp": ["2"]},
        "warmup": {"warmup": 3}, "warmup_tol": {"warmup_tol": 0.05}, "warmup_max_s": {"warmup_max_s": 10.0},
        "rewarm_after_s": {"rewarm_after_s": 5.0}, "remeasure": {"remeasure": False},
        "seed": {"seed": 7}, "cell_timeout": {"cell_timeout": 100.0},
        "threads": {"threads": 2},
        "power_interval": {"power_interval": 0.5}, "power_command": {"power_command": "echo 5"},
        "power_watts": {"power_watts": 100.0}, "power_label": {"power_label": "the PDU"},
        "concurrency": {"concurrency": ["2"]}, "request_rate": {"request_rate": ["2"]},
        "burstiness": {"burstiness": 0.5},
        "num_requests": {"num_requests": 3}, "duration": {"duration": 5.0}, "warmup_requests": {"warmup_requests": 2},
        "request_timeout": {"request_timeout": 30.0}, "base_url": {"base_url": "http://127.0.0.1:9/v1"},
        "api_key_env": {"api_key_env": "HOME"}, "endpoint": {"endpoint": "chat"},
        "served_model_name": {"served_model_name": "other"}, "prompt_format": {"prompt_format": "text"},
        "engine_arg": {"engine_arg": ["n_threads=2"]}, "dataset": {"dataset": f["dataset"]},
        "max_input_len": {"max_input_len": 100}, "max_output_len": {"max_output_len": 100},
        "trace": {"trace": f["trace"]}, "trace_speed": {"trace_speed": ["2"]}, "multi_turn": {"multi_turn": True},
        "think_time": {"think_time": 1.0}, "prefix_len": {"prefix_len": 4}, "num_prefixes": {"num_prefixes": 2},
        "len_range": {"len_range": 0.5}, "len_range_convention": {"len_range": 0.5, "len_range_convention": "vllm"},
        "no_stream": {"no_stream": True}, "tokenizer": {"tokenizer": "HuggingFaceTB/SmolLM2-135M"},
        "slo_ttft": {"slo_ttft": 1.0}, "slo_tpot": {"slo_tpot": 0.5}, "slo_e2e": {"slo_e2e": 2.0},
        "container_runtime": {"container_runtime": "docker"}, "ray_address": {"ray_address": "127.0.0.1:1"},
        "load_nodes": {"load_nodes": 2, "ray_address": "127.0.0.1:1"}, "repeat": {"repeat": 2},
        "price_per_hour": {"price_per_hour": 3.0}, "scrape_interval": {"scrape_interval": 0.5},
        "find_max": {"find_max": "rate"}, "slo_ttft_ms": {"slo_ttft_ms": 500.0},
        "slo_tpot_ms": {"slo_tpot_ms": 50.0}, "goodput": {"goodput": 0.8}, "find_max_limit": {"find_max_limit": 64.0},
        "find_max_probes": {"find_max_probes": 5}, "adaptive": {"adaptive": "25%"},
        "adaptive_strict": {"adaptive": "25%", "adaptive_strict": True},
        "perplexity": {"perplexity": f["other_text"]}, "ppl_n_ctx": {"ppl_n_ctx": 64}, "ppl_chunks": {"ppl_chunks": 2},
        # --no-engine-process arrives with the engine-process change; scanned where the command has it
        "engine_process": {"engine_process": False},
    }


#: Companions: flags an option needs beside it to mean anything; the run without the option
#: keeps them.
COMPANIONS = {"load_nodes": ("ray_address",)}


def run_options() -> list[str]:
    """The parameter names of ``infbench run``, read from the command."""
    import click
    import typer.main

    from infbench.cli import app

    cmd = typer.main.get_command(app)
    run = cmd.get_command(click.Context(cmd), "run")  # type: ignore[attr-defined]
    assert run is not None
    return [p.name for p in run.params if p.name]


def flag(name: str) -> str:
    """``--load-nodes`` for ``load_nodes`` (the first spelling of the option)."""
    import click
    import typer.main

    from infbench.cli import app

    cmd = typer.main.get_command(app)
    run = cmd.get_command(click.Context(cmd), "run")  # type: ignore[attr-defined]
    return next(p.opts[0] for p in run.params if p.name == name)


def effect(prep: Any) -> dict[str, Any]:
    """What a prepared run will do (see the module doc), as plain data to compare."""
    from infbench.contract.registry import engine_specs

    specs = engine_specs(prep.pm)
    cells = [c for p in prep.plans for c in p.cells]
    serving = any(c.load is not None for c in cells)
    engines = {c.engine for c in cells}
    declared: set[str] | None = set()
    for e in engines:
        names = getattr(specs.get(e), "options", None)
        if names is None:
            declared = None
            break
        assert declared is not None
        declared |= set(names)
    o = prep.options
    opts = {k: v for k, v in vars(o).items() if k not in ("power_override", "config")}
    eopts = {k: v for k, v in (opts.pop("engine_options") or {}).items() if declared is None or k in declared}
    power = o.power_override
    out = {
        "executor": prep.executor_name,
        "container_runtime": prep.container_runtime if prep.executor_name in ("container", "ray") else None,
        # every cell warms up in blocks (issue 38: serving cells too), until stable or --warmup N
        "cells": [json.loads(c.model_dump_json()) for c in cells],
        "warmup": opts["warmup"].model_dump() if hasattr(opts["warmup"], "model_dump") else opts["warmup"],
        # a search's id is new each time it is planned: what it searches is the rest
        "scenario": [json.loads(p.scenario.model_dump_json(exclude={"search_id"})) if p.scenario is not None
                     else None for p in prep.plans],
        "engine_options": eopts,
        "force": opts["force"], "cell_timeout_s": opts["cell_timeout_s"], "slo": opts["slo"],
        "price_per_hour": opts["price_per_hour"],
        "power_interval_s": opts["power_interval_s"],
        "power": None if power is None else {"type": type(power).__name__, "label": power.label,
                                             **{k: getattr(power, k, None) for k in ("watts", "command")}},
        "server_metrics_interval_s": opts["server_metrics_interval_s"] if serving else None,
        "load_nodes": opts["load_nodes"] if serving else None,
        "ray_address": opts["ray_address"] if prep.executor_name == "ray" or (serving and opts["load_nodes"]) else None,
        # where an in-process engine runs (its own process or this one): only in-process cells have one
        "engine_process": opts.get("engine_process") if any(c.load is None for c in cells) else None,
        "perplexity": None if prep.config.scenario.kind != "perplexity" else
        (str(prep.config.scenario.text_path), prep.config.scenario.n_ctx, prep.config.scenario.max_chunks),
    }
    return out


def prepared_effect(flags: dict[str, Any], pm: Any) -> tuple[str, Any]:
    """``("ok", effect)`` for a run given ``flags`` (``infbench run``'s parameters, as the
    command line passes them to :meth:`~infbench.data.run_config.RunConfig.from_flags`), or
    ``("refused", message)`` when infbench refuses it as a usage error."""
    from infbench.data.run_config import RunConfig
    from infbench.detect.registry import Registry
    from infbench.execution.orchestrator import prepare

    try:
        prep = prepare(RunConfig.from_flags(flags), Registry(pm))
        prep.executor()
        return "ok", effect(prep)
    except InfbenchError as exc:
        return "refused", exc.message + (f" ({exc.hint})" if getattr(exc, "hint", None) else "")


def scan(tmp: Path, pm: Any, options: list[str] | None = None, modes: list[str] | None = None,
         progress: Callable[[str], None] | None = None) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(option, mode): (verdict, detail)}`` for every scanned option and mode: verdict
    ``applies``, ``refused`` (detail: the message) or ``ignored``."""
    f = files(tmp)
    vals = values(f)
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for mode in modes or list(MODES):
        base = {**BASE, **{k: (v.format(**f) if isinstance(v, str) else v) for k, v in MODES[mode].items()}}
        cache: dict[str, tuple[str, Any]] = {}
        for name in options or [n for n in run_options() if n not in ALWAYS and n in vals]:
            given = vals[name]
            companions = {k: v for k, v in given.items() if k != name}
            without = {**base, **companions}
            key = json.dumps(without, sort_keys=True, default=str)
            if key not in cache:
                cache[key] = prepared_effect(without, pm)
            before = cache[key]
            after = prepared_effect({**without, **given}, pm)
            if after[0] == "refused":
                verdict = ("refused", after[1])
            elif before[0] == "refused":
                verdict = ("applies", f"without it: {before[1]}")
            elif after[1] != before[1]:
                verdict = ("applies", "")
            else:
                verdict = ("ignored", "")
            out[(name, mode)] = verdict
            if progress is not None:
                progress(f"{mode:10s} {flag(name):22s} {verdict[0]} {verdict[1][:100]}")
    return out
