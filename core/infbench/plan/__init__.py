"""Step 2 of a run: turn a :class:`~infbench.data.schema.Sweep` into validated cells,
grouped so that each model loads once per group.

Everything a user can get wrong (unknown model, engine, dtype, a precision the device
cannot run, an engine that is not installed) is checked here, before anything runs,
and raised as a :class:`~infbench.data.errors.ConfigError` naming the bad value and the
allowed ones.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infbench.analysis.repeats import repeat_cell
from infbench.contract.manager import PluginManager
from infbench.contract.registry import device_precisions, engine_specs, require_engine
from infbench.data.engine_options import check_engine_args
from infbench.data.errors import ConfigError
from infbench.data.groups import Group, Plan
from infbench.data.models import ModelShape, resolve
from infbench.data.scenarios import FrontierScenario
from infbench.data.schema import Cell, Dataset, DeviceInfo, Load, Sweep, Trace
from infbench.workloads.chat import chat_requests, chat_sessions, file_digest, token_counter
from infbench.workloads.trace import check_replay, detect_format, read_trace, select

#: Named sweeps. ``quick`` is what ``infbench run`` does with no arguments: one small
#: model on llama.cpp, a few minutes on 2 CPU cores (a GPU plugin's default sweep replaces
#: it on its devices: :mod:`infbench.execution.default_sweep`). ``paper`` is the LLM-Inference-Bench
#: grid (input/output 128..2048, batch 1/16/32/64) for the model(s) you pass. ``genz-*``
#: are GenZ's use cases (question answering, chat, RAG, summarisation, code generation):
#: their input/output lengths and TTFT/TPOT SLOs, which give each cell its goodput.
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"models": ["smollm2-135m"], "engines": ["llama.cpp"], "dtypes": ["f16"],
              "batch": [1, 4, 8], "input_len": [128, 512], "output_len": [64]},
    # LLM-Inference-Bench's corner (Chitty-Venkata et al., SC'24 workshops, their Llama-3-8B
    # cells): batch 1/16/64, input = output in {128, 1024}, dummy weights. The default sweep
    # of the GPU plugins (``infbench_default_sweep``), which pick the engine and dtype.
    "lib-corner": {"models": ["llama-3-8b"], "engines": ["vllm"], "dtypes": ["bf16"], "batch": [1, 16, 64],
                   "input_len": [128, 1024], "output_len": [128, 1024], "pair_lengths": True},
    "paper": {"models": ["smollm2-135m"], "engines": ["llama.cpp"], "dtypes": ["f16"],
              "batch": [1, 16, 32, 64], "input_len": [128, 256, 512, 1024, 2048],
              "output_len": [128, 256, 512, 1024, 2048]},
    # GenZ use cases (Bambhaniya et al., "Demystifying AI Platform Design for Distributed
    # Inference of Next-Generation LLMs", Table of use cases): lengths and SLOs.
    "genz-qa": {"input_len": [1000], "output_len": [200], "slo_ttft_s": 0.2, "slo_tpot_s": 0.010},
    "genz-chat": {"input_len": [3000], "output_len": [1000], "slo_ttft_s": 0.2, "slo_tpot_s": 0.010},
    "genz-rag": {"input_len": [10000], "output_len": [200], "slo_ttft_s": 0.4, "slo_tpot_s": 0.010},
    "genz-summarization": {"input_len": [15000], "output_len": [1000], "slo_ttft_s": 2.0, "slo_tpot_s": 0.020},
    "genz-codegen": {"input_len": [20000], "output_len": [50], "slo_ttft_s": 0.5, "slo_tpot_s": 0.020},
    # The throughput-interactivity frontier (InferenceX's sweep: concurrency doubling from 1,
    # 10 x concurrency prompts, 2 x concurrency warm-up; docs/report.md). Lengths sized for a
    # CPU; on an accelerator pass InferenceX's 1024/1024, 1024/8192 or 8192/1024.
    "frontier": {"models": ["smollm2-135m"], "engines": ["llama.cpp-server"], "dtypes": ["f16"], "batch": [1],
                 "input_len": [256], "output_len": [64], "concurrency": [1, 2, 4, 8, 16, 32, 64, 128, 256],
                 "frontier": True},
}
#: What the presets a default sweep names are, for ``infbench run --dry-run``.
PRESET_DESCRIPTIONS = {
    "quick": "the quick preset: smollm2-135m (dummy weights), batch 1/4/8, input 128/512, output 64",
    "lib-corner": "LLM-Inference-Bench's corner: llama-3-8b (dummy weights), batch 1/16/64, input = output 128/1024",
    "frontier": "the throughput-interactivity frontier: concurrency 1, 2, 4 ... 256 per engine configuration, "
                "stopping when a doubling adds under 5 % throughput",
}
#: Presets that set only lengths and SLOs take the rest from ``quick``.
for _name, _p in PRESETS.items():
    if "models" not in _p:
        PRESETS[_name] = {**PRESETS["quick"], **_p}


def _resolve(name: str, lenient: bool) -> ModelShape:
    """Zoo/path lookup; for engines that serve any model (remote endpoints) an unknown
    name is the server's model id, with no known shape."""
    try:
        return resolve(name)
    except ConfigError:
        if lenient:
            return ModelShape(name=name, config={})
        raise


def _dataset(sweep: Sweep, model: ModelShape, batch: int, load: Load | None) -> tuple[Dataset, int, int]:
    """The :class:`Dataset` of a conversation-replay cell and its mean input/output lengths.

    Conversations sampled: the load's ``num_requests`` (batch mode: ``batch``; default 64)
    plus its warm-up requests. Raises :class:`ConfigError` for a bad file or too few
    conversations passing the filter."""
    timed = load.num_requests if load is not None and load.num_requests else (
        batch if load is None or load.mode == "batch" else 64)
    n = timed + (load.warmup_requests if load is not None else 0)
    path = str(Path(str(sweep.dataset)).resolve())
    args = (path, token_counter(model, sweep.tokenizer)[0], n, sweep.seed, sweep.dataset_min_input_len,
            sweep.dataset_max_input_len, sweep.dataset_min_output_len, sweep.dataset_max_output_len)
    data = Dataset(path=path, sha256=file_digest(path), n=n, min_input_len=sweep.dataset_min_input_len,
                   max_input_len=sweep.dataset_max_input_len, min_output_len=sweep.dataset_min_output_len,
                   max_output_len=sweep.dataset_max_output_len, multi_turn=sweep.multi_turn,
                   think_time_s=sweep.think_time_s if sweep.multi_turn else None, tokenizer=sweep.tokenizer)
    if sweep.multi_turn:
        sessions = chat_sessions(*args)
        count = args[1]
        longest = max(sum(count(m["content"]) for m in s.context) + sum(count(u) + o for u, o in s.turns)
                      + 8 * (len(s.context) + 2 * len(s.turns)) for s in sessions)
        data = data.model_copy(update={"max_total_len": longest})
        mean_in = round(sum(s.input_len for s in sessions) / n)
        outs = [o for s in sessions for _, o in s.turns]
        mean_out = round(sum(outs) / len(outs))
    else:
        reqs = chat_requests(*args)
        mean_in = round(sum(r.input_len for r in reqs) / n)
        mean_out = round(sum(r.output_len for r in reqs) / n)
    return data, max(1, mean_in), max(1, mean_out)


def _trace(sweep: Sweep, load: Load) -> tuple[Trace, int, int]:
    """The :class:`Trace` of a trace-replay cell and its replayed records' mean input/output
    lengths: the first ``num_requests`` records (all by default) within ``duration_s`` of
    replayed time. Raises :class:`ConfigError` for a bad file or an empty selection."""
    path = str(Path(str(sweep.trace)).resolve())
    fmt = detect_format(path)
    recs = select(read_trace(path, fmt), load.num_requests, load.duration_s, load.trace_speed or 1.0)
    if not recs:
        raise ConfigError(f"{path}: no trace record falls within --duration {load.duration_s:g} s at "
                          f"--trace-speed {load.trace_speed:g}", hint="raise --duration or --trace-speed")
    check_replay(recs, load.trace_speed or 1.0, sweep.cell_timeout_s, path)  # none left unsent at the timeout
    data = Trace(path=path, sha256=file_digest(path), format=fmt, n=len(recs),
                 max_total_len=max(r.input_len + r.output_len for r in recs))
    mean_in = round(sum(r.input_len for r in recs) / len(recs))
    mean_out = round(sum(r.output_len for r in recs) / len(recs))
    return data, max(1, mean_in), max(1, mean_out)


def _check_serving_workload(sweep: Sweep) -> None:
    """The serving-only workload flags that do not go together.

    Raises:
        ConfigError: naming the flags and what to do.
    """
    if sweep.trace and sweep.dataset:
        raise ConfigError("--trace and --dataset are two workloads; give one", hint="run them as separate sweeps")
    if sweep.trace and sweep.request_rate:
        raise ConfigError("--trace releases requests at the trace's own times; --request-rate does not apply",
                          hint="use --trace-speed to compress or stretch the trace")
    if sweep.trace_speed and not sweep.trace:
        raise ConfigError("--trace-speed needs --trace FILE")
    if sweep.multi_turn and not sweep.dataset:
        raise ConfigError("--multi-turn replays --dataset conversations turn by turn; give --dataset FILE")
    if sweep.think_time_s is not None and not sweep.multi_turn:
        raise ConfigError("--think-time applies to --multi-turn sessions")
    if (sweep.prefix_len or sweep.num_prefixes) and (sweep.trace or sweep.dataset):
        raise ConfigError("--prefix-len/--num-prefixes shape synthetic prompts; a trace or a dataset brings its own",
                          hint="drop --prefix-len, or the --trace/--dataset")
    if sweep.len_range and (sweep.trace or sweep.dataset):
        raise ConfigError("--len-range draws synthetic requests' lengths; a trace or a dataset brings its own",
                          hint="drop --len-range, or the --trace/--dataset")
    if sweep.len_range and sweep.prefix_len:
        raise ConfigError("--len-range and --prefix-len do not go together (a shared prefix needs a known prompt "
                          "length)", hint="drop one of them")
    if sweep.len_range_convention and not sweep.len_range:
        raise ConfigError("--len-range-convention applies to --len-range R")
    if sweep.num_prefixes and not sweep.prefix_len:
        raise ConfigError("--num-prefixes needs --prefix-len N (tokens of each shared prefix)")
    if sweep.prefix_len and sweep.prefix_len > min(sweep.input_len):
        raise ConfigError(f"--prefix-len {sweep.prefix_len} exceeds --input-len {min(sweep.input_len)}",
                          hint="the shared prefix is part of the prompt: make it at most --input-len")


def context_length(model: ModelShape) -> int | None:
    """The model's context in tokens: ``max_position_embeddings`` of its config (a GGUF's
    ``context_length``), None when the config does not say."""
    v = model.config.get("max_position_embeddings")
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


def check_context(g: Group) -> None:
    """Refuse a group whose longest request (prompt + output tokens together,
    :meth:`~infbench.data.schema.Cell.longest`) exceeds the model's context: an engine would size
    its KV cache for it (llama.cpp grew to 10.7 GB for ``--output-len 10000000`` and ignored
    SIGTERM while it allocated) or generate past the positions it was trained on. A dataset
    cell is checked when its sample's longest conversation is known.

    Raises:
        ConfigError: naming the model, its context and the longest request (exit 2).
    """
    ctx = context_length(g.model)
    if ctx is None:
        return
    cells = [c for c in g.cells if c.dataset is None or c.dataset.max_total_len]
    worst = max(cells, key=lambda c: c.longest(), default=None)
    if worst is not None and worst.longest() > ctx:
        raise ConfigError(f"{g.model.name}: a request of {worst.input_len:,} input + {worst.output_len:,} output "
                          f"tokens ({worst.longest():,} together) exceeds the model's context of {ctx:,} tokens",
                          hint=f"keep input + output within {ctx:,} tokens (--input-len/--output-len), or use a model "
                               "with a longer context")


#: Most cells one sweep may plan (``INFBENCH_MAX_CELLS`` raises it): a grid of 5,000 x
#: 200 values planned for minutes in silence (issue 41); 50,000 cells of even 1 s each
#: take 14 h.
MAX_PLANNED_CELLS = 50_000
#: Cells planned between two progress lines (a sweep this large says how far it got).
PROGRESS_EVERY = 10_000


def max_planned_cells() -> int:
    """The cell cap: ``INFBENCH_MAX_CELLS`` (a positive integer) or :data:`MAX_PLANNED_CELLS`."""
    raw = os.environ.get("INFBENCH_MAX_CELLS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_PLANNED_CELLS


def planned_cell_count(sweep: Sweep) -> int:
    """How many cells ``sweep`` plans at most, computed from the lengths of its lists
    without building them: models x engines x dtypes x TP degrees x loads (or batch sizes)
    x length pairs x engine configurations x repeats."""
    loads = len(sweep.trace_speed or [1]) if sweep.trace else \
        len(set(sweep.concurrency or [])) + len(set(sweep.request_rate or []))
    shapes = loads or len(set(sweep.batch))
    if sweep.dataset or sweep.trace:
        pairs = 1
    elif sweep.pair_lengths:
        pairs = len(set(zip(sweep.input_len, sweep.output_len)))
    else:
        pairs = len(set(sweep.input_len)) * len(set(sweep.output_len))
    return (len(set(sweep.models)) * len(set(sweep.engines)) * len(set(sweep.dtypes))
            * len(set(sweep.tensor_parallel_size)) * shapes * pairs * max(1, len(sweep.engine_configs or []))
            * sweep.repeat)


def check_cell_count(sweep: Sweep) -> int:
    """:func:`planned_cell_count`, refused above :func:`max_planned_cells`.

    Raises:
        ConfigError: naming the count, its factors, the cap and how to raise it.
    """
    n, cap = planned_cell_count(sweep), max_planned_cells()
    if n > cap:
        raise ConfigError(f"the sweep plans {n:,} cells (models x engines x dtypes x TP x loads or batch sizes x "
                          f"lengths x configurations x repeats), more than the cap of {cap:,}",
                          hint="split it into smaller sweeps, or raise the cap with INFBENCH_MAX_CELLS=N if you "
                               "mean to measure them all")
    return n


def plan(sweep: Sweep, device: DeviceInfo, pm: PluginManager, installed_here: bool = True,
         progress: Callable[[str], None] | None = None) -> Plan:
    """Expand ``sweep`` into cells on ``device``, validated and grouped.

    ``installed_here=False`` (cells measured in a worker image, ``--executor container``)
    skips the check that each engine's modules import in this process: the image has them.
    ``progress`` receives a line every :data:`PROGRESS_EVERY` cells of a large sweep.

    Raises:
        ConfigError: more cells than the cap (:func:`check_cell_count`, before any is
            built), unknown model/engine/dtype, a precision the device does not
            support, an engine that does not run on the device, TP larger than the
            device count, input + output longer than the model's context, or an engine
            argument no engine reads or of the wrong type.
        EngineUnavailable: an engine whose Python package is not installed.
    """
    total = check_cell_count(sweep)
    built = [0]

    def tick(n: int = 1) -> None:
        before = built[0]
        built[0] += n
        if progress is not None and built[0] // PROGRESS_EVERY > before // PROGRESS_EVERY:
            progress(f"planning: {built[0]:,} of at most {total:,} cells")

    if progress is not None and total >= PROGRESS_EVERY:
        progress(f"planning {total:,} cells")
    specs = engine_specs(pm)
    precisions = device_precisions(pm, device)
    warnings: list[str] = []
    engine_dtypes: dict[str, list[str]] = {}
    for e in sweep.engines:
        spec = require_engine(specs, e, device, installed_here)
        engine_dtypes[e] = []
        if spec.dtypes == {"auto": "auto"}:  # a remote server decides its own precision
            engine_dtypes[e] = ["auto"]
            continue
        for d in sweep.dtypes:
            native = spec.resolve_dtype(d)
            if native is None:
                raise ConfigError(f"dtype {d!r} is not available on engine {e!r}",
                                  hint=f"{e} dtypes: {', '.join(spec.dtypes)}")
            if spec.dtypes[native] not in precisions:
                raise ConfigError(
                    f"precision {spec.dtypes[native]} ({e} dtype {native!r}) is not supported on "
                    f"{device.model}",
                    hint=f"this device supports: {', '.join(precisions)}")
            engine_dtypes[e].append(native)
    args = check_engine_args(specs, sweep.engines, sweep.engine_args)  # unknown keys, bad values: exit 2
    configs = [check_engine_args(specs, sweep.engines, {**(sweep.engine_args or {}), **cfg})
               for cfg in sweep.engine_configs or []]
    lenient = all(specs[e].any_model for e in sweep.engines)
    models = {m: _resolve(m, lenient) for m in sweep.models}
    loads = sweep.loads()
    batch_only = [e for e in sweep.engines if not specs[e].serving]
    if sweep.dataset and batch_only:
        serving = sorted(n for n, s in specs.items() if s.serving)
        raise ConfigError(f"--dataset replays chat conversations through a server; {', '.join(batch_only)} runs "
                          "batch mode on synthetic prompts only", hint=f"server engines: {', '.join(serving)}")
    if loads and batch_only:
        serving = sorted(n for n, s in specs.items() if s.serving)
        raise ConfigError(f"--concurrency/--request-rate/--trace need a server engine; {', '.join(batch_only)} runs "
                          "batch mode only", hint=f"server engines: {', '.join(serving)}")
    serving_only = [flag for flag, on in (("--prefix-len", sweep.prefix_len), ("--len-range", sweep.len_range),
                                          ("--no-stream", not sweep.stream),
                                          ("--tokenizer", sweep.tokenizer), ("--multi-turn", sweep.multi_turn))
                    if on]
    if serving_only and batch_only:
        serving = sorted(n for n, s in specs.items() if s.serving)
        raise ConfigError(f"{', '.join(serving_only)} shape(s) requests to a server; {', '.join(batch_only)} runs "
                          "batch mode only", hint=f"server engines: {', '.join(serving)}")
    _check_serving_workload(sweep)
    for tp in sweep.tensor_parallel_size:
        if tp > device.count:
            raise ConfigError(f"tensor_parallel_size {tp} exceeds the {device.count} {device.vendor} device(s) "
                              "detected", hint=f"use tensor_parallel_size <= {device.count}")
    groups: dict[tuple, Group] = {}
    for mname, e, tp in itertools.product(sweep.models, sweep.engines, sweep.tensor_parallel_size):
        for d in dict.fromkeys(engine_dtypes[e]):
            key = (mname, e, d, tp)
            g = groups.setdefault(key, Group(models[mname], e, d, tp))
            shapes: list[tuple[int, Load | None]]
            if loads:
                shapes = [(1, ld) for ld in loads]
            elif specs[e].serving:
                shapes = [(b, Load(mode="batch", warmup_requests=sweep.warmup_requests,
                                   timeout_s=sweep.request_timeout_s, stream=None if sweep.stream else False))
                          for b in sorted(set(sweep.batch))]
            else:
                shapes = [(b, None) for b in sorted(set(sweep.batch))]
            if sweep.dataset:
                for b, ld in shapes:
                    data, i, o = _dataset(sweep, models[mname], b, ld)
                    g.cells.append(Cell(model=models[mname].name, engine=e, dtype=d, batch=b, input_len=i,
                                        output_len=o, tensor_parallel_size=tp, seed=sweep.seed,
                                        warmup=sweep.warmup, load=ld, dataset=data))
                continue
            if sweep.trace:
                for b, ld in shapes:
                    if ld is None:
                        raise ConfigError("--trace needs a server engine and a load")
                    tr, i, o = _trace(sweep, ld)
                    g.cells.append(Cell(model=models[mname].name, engine=e, dtype=d, batch=b, input_len=i,
                                        output_len=o, tensor_parallel_size=tp, seed=sweep.seed,
                                        warmup=sweep.warmup, load=ld, trace=tr))
                continue
            prefix: dict[str, Any] = dict(prefix_len=sweep.prefix_len, num_prefixes=sweep.num_prefixes or 1) \
                if sweep.prefix_len else {}
            if sweep.len_range:
                prefix.update(len_range=sweep.len_range, len_range_convention=sweep.len_range_convention)
            for (b, ld), (i, o) in itertools.product(shapes, sweep.lengths()):
                g.cells.append(Cell(model=models[mname].name, engine=e, dtype=d, batch=b, input_len=i,
                                    output_len=o, tensor_parallel_size=tp, seed=sweep.seed,
                                    warmup=sweep.warmup, load=ld, **prefix))
                tick()
    for g in groups.values():
        check_context(g)
    if configs:  # one group per engine configuration, its arguments in its cells' identity
        split: list[Group] = []
        for g in groups.values():
            for cfg in configs:
                ident = cfg.identity.get(g.engine)
                split.append(g.with_cells([c.model_copy(update={"engine_args": ident}) for c in g.cells]))
        groups = {g.key(): g for g in split}  # configurations an engine reads identically are one
    elif args.identity:  # the engine arguments that change what is measured: part of each cell's id
        for g in groups.values():
            if args.identity.get(g.engine):
                g.cells = [c.model_copy(update={"engine_args": args.identity[g.engine]}) for c in g.cells]
    if sweep.repeat > 1:  # whole rounds of the group, so slow drift spreads over every cell
        for g in groups.values():
            g.cells = g.cells + [repeat_cell(c, r) for r in range(2, sweep.repeat + 1) for c in g.cells]
    result = Plan(device=device, groups=list(groups.values()), warnings=warnings)
    if sweep.frontier:
        if not loads or any(ld.mode != "concurrency" for ld in loads) or batch_only:
            raise ConfigError("the frontier sweep doubles concurrency on a server engine",
                              hint="--engine llama.cpp-server, vllm-server, sglang-server, deepspeed-mii-server, "
                                   "trtllm-serve or openai (--base-url), with --concurrency 1,2,4,... (the preset's)")
        result.scenario = FrontierScenario(ttft_s=sweep.slo_ttft_s, tpot_s=sweep.slo_tpot_s, stop=sweep.frontier_stop)
    return result
