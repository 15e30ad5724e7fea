"""``infbench run`` from a :class:`~infbench.data.request.RunRequest` to a started run:
detect -> default sweep -> sweep -> plan (one per device type on a Ray fleet) -> scenario
(a sweep, ``--find-max``) -> run options -> executor. :mod:`infbench.cli.run_cmd` turns the
flags into the request and prints what comes back; everything it decides is here.

:func:`prepare` checks everything it can before anything is stored or started and raises
:class:`~infbench.data.errors.ConfigError` (exit 2) for bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infbench.contract.manager import PluginManager
from infbench.data.errors import ConfigError
from infbench.data.groups import Plan
from infbench.data.request import RunRequest, flag_of
from infbench.data.run import RunOptions
from infbench.data.schema import DeviceInfo, Sweep


@dataclass
class PreparedRun:
    """A run ready to start (see :func:`prepare`).

    Attributes:
        request: what was asked.
        pm: the plugin manager.
        detection: this host's :class:`~infbench.detect.Detection`.
        default: the device's default sweep (:class:`~infbench.execution.default_sweep.DefaultSweep`)
            when no ``--preset``/``--sweep`` was given, else None.
        sweep: the validated :class:`~infbench.data.schema.Sweep`.
        plans: one :class:`~infbench.data.groups.Plan` per device type (several on a Ray fleet);
            with ``--find-max`` one plan whose scenario is the search.
        fleet: the Ray fleet (``--executor ray``), else None.
        executor_name: ``auto``, ``inprocess``, ``container`` or ``ray``.
        container_runtime: ``docker``, ``apptainer`` or None.
        options: the run's knobs (everything but ``power_override``, set by :meth:`executor`).
        warnings: what the plans warn about (positions past the model's context...).
        notes: lines for the user (``--runtime`` is deprecated, ...).
    """

    request: RunRequest
    pm: PluginManager
    detection: Any
    default: Any
    sweep: Sweep
    plans: list[Plan]
    fleet: Any
    executor_name: str
    container_runtime: str | None
    options: RunOptions
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        """The first (on one host: the only) plan."""
        return self.plans[0]

    @property
    def device(self) -> DeviceInfo:
        """The device of the first plan."""
        return self.plans[0].device

    def cells(self) -> list[Any]:
        """Every planned cell, in run order."""
        return [c for p in self.plans for c in p.cells]

    def refused(self) -> bool:
        """Whether the default sweep found no engine that runs on the device here."""
        d = self.default
        return d is not None and not d.user_engines and d.chosen is None

    def write_spec(self) -> Any:
        """Write the worker spec of the plan to ``--write-spec`` (atomically, refusing the
        store's path) and return it (:class:`~infbench.data.worker_spec.WorkerSpec`).

        Raises:
            ConfigError: a sweep planned for several device types.
        """
        from infbench.data.outputs import WORKER_SPEC, json_text, write_output
        from infbench.data.paths import default_store_path
        from infbench.data.secrets import redact_tree
        from infbench.data.worker_spec import make_spec

        if len(self.plans) > 1:
            raise ConfigError(f"--write-spec writes one device's spec; the sweep is planned for {len(self.plans)} "
                              "device types", hint="pick one with --device")
        spec = make_spec(self.plan, self.options)
        doc = spec.model_dump(mode="json")
        doc.update(device=redact_tree(doc["device"]), options=redact_tree(doc["options"]))  # cells untouched: ids
        assert self.request.write_spec is not None  # called only with --write-spec
        write_output(self.request.write_spec, json_text(doc, redacted=False), WORKER_SPEC,
                     [self.request.store_path, default_store_path()])
        return spec

    def executor(self) -> Any:
        """The executor (:func:`infbench.execution.executors.choose_executor`), with the user's power
        source in :attr:`options` (``--power-command``/``--power-watts``); its notes go to
        :attr:`notes`.

        Raises:
            ConfigError: an executor not usable here, or a user power source with an
                executor that measures in another process.
        """
        from infbench.execution.bookkeeping import provenance
        from infbench.execution.executors import choose_executor
        from infbench.measure.power import user_power_sampler

        r = self.request
        extra = {"ray_address": r.ray_address, "fleet": self.fleet} if self.executor_name == "ray" else {}
        prov = provenance(self.detection, self.pm)
        if self.default is not None:
            prov["default_sweep"] = self.default.provenance()  # the engine chosen, where, and its build
        ex = choose_executor(self.executor_name, self.device, self.sweep.engines, self.pm, prov, self.notes,
                             self.container_runtime, **extra)
        if ex.name != "inprocess" and (r.power_command or r.power_watts is not None):
            raise ConfigError("--power-command/--power-watts replace the sampler in this process; they do not reach "
                              f"the {ex.name} executor's workers", hint="add --executor inprocess")
        self.options.power_override = user_power_sampler(r.power_command, r.power_watts, r.power_label)
        return ex


def executor_name(r: RunRequest, notes: list[str]) -> tuple[str, str | None]:
    """``--executor`` and ``--container-runtime``, with the deprecated ``--runtime`` mapped
    onto them (a note says so).

    Raises:
        ConfigError: an unknown ``--runtime``.
    """
    from infbench.execution.executors import RUNTIME_ALIASES

    if r.runtime is None:
        return r.executor or "auto", r.container_runtime
    if r.runtime not in RUNTIME_ALIASES:
        raise ConfigError(f"unknown runtime {r.runtime!r}", hint=f"choose one of: {', '.join(RUNTIME_ALIASES)}")
    name, rt = RUNTIME_ALIASES[r.runtime]
    new = f"--executor {name}" + (f" --container-runtime {rt}" if rt else "")
    notes.append(f"--runtime {r.runtime} is deprecated; it means `{new}`")
    return name, rt or r.container_runtime


def _progress_line(text: str) -> None:
    """A planning progress line on stderr (a large sweep says how far it got)."""
    import sys

    print(f"infbench: {text}", file=sys.stderr, flush=True)


#: ``infbench run``'s flags that set an engine option, and their :class:`RunRequest` fields.
_FLAG_FIELDS = {"--threads": "threads", "--endpoint": "endpoint", "--base-url": "base_url",
                "--api-key-env": "api_key_env", "--served-model-name": "served_model_name",
                "--prompt-format": "prompt_format", "--tokenizer": "tokenizer"}


def agree_flags(r: RunRequest, args: dict[str, Any] | None) -> RunRequest:
    """``r`` checked against the engine arguments ``args``
    (:func:`~infbench.data.engine_options.agreed_flags`): a flag and an engine argument that
    set one option differently are refused; ``base_url``/``api_key_env`` given only as
    engine arguments become ``--base-url``/``--api-key-env``, so the device and the run's
    records name the endpoint the traffic goes to.

    Raises:
        ConfigError: a flag and its engine argument disagree.
    """
    from infbench.data.engine_options import agreed_flags

    got = agreed_flags({f: getattr(r, k) for f, k in _FLAG_FIELDS.items()}, args)
    update = {k: str(got[f]) for f, k in (("--base-url", "base_url"), ("--api-key-env", "api_key_env"))
              if got[f] is not None and getattr(r, k) is None}
    return r.model_copy(update=update) if update else r


def build_request_sweep(r: RunRequest, default: Any) -> Sweep:
    """The :class:`~infbench.data.schema.Sweep` of a request: preset or sweep file, the default
    sweep's fields, then the flags; on llama.cpp a real GGUF runs at its own type (``q4_1``...)
    unless ``--dtype`` asks for derived precisions.

    Raises:
        ConfigError: a bad flag value, sweep file or combination.
    """
    from infbench.data.engine_options import parse_engine_args
    from infbench.plan.sweeps import build_sweep, serving_workload_flags
    from infbench.quality.weights import gguf_native_dtypes

    concurrency, request_rate = r.strs("concurrency"), r.strs("request_rate")
    if r.find_max == "concurrency" and not concurrency and not request_rate:
        concurrency = ["1"]                      # the search starts at 1 in flight
    elif r.find_max == "rate" and not request_rate and not concurrency:
        request_rate = ["1"]
    dtypes = r.strs("dtype")
    engines_now = r.strs("engine") or list((default.fields if default else {}).get("engines") or ["llama.cpp"])
    if dtypes is None and r.sweep_file is None and set(engines_now) <= {"llama.cpp", "llama.cpp-server"}:
        dtypes = gguf_native_dtypes(r.strs("model"))
    from infbench.data.request import split_values

    return build_sweep(
        r.preset, r.sweep_file, base=default.fields if default else None, models=r.strs("model"),
        engines=r.strs("engine"), dtypes=dtypes, batch=r.ints("batch"), input_len=r.ints("input_len"),
        output_len=r.ints("output_len"), tensor_parallel_size=r.ints("tp"), warmup=r.warmup, seed=r.seed,
        cell_timeout_s=r.cell_timeout, concurrency=split_values(concurrency, "--concurrency", int),
        request_rate=split_values(request_rate, "--request-rate", float), burstiness=r.burstiness,
        num_requests=r.num_requests, duration_s=r.duration, warmup_requests=r.warmup_requests,
        request_timeout_s=r.request_timeout, slo_ttft_s=r.slo_ttft_s(), slo_tpot_s=r.slo_tpot_s(),
        slo_e2e_s=r.slo_e2e, dataset=str(r.dataset) if r.dataset else None, dataset_max_input_len=r.max_input_len,
        dataset_max_output_len=r.max_output_len, repeat=r.repeat,
        engine_args=parse_engine_args(r.engine_arg) if r.engine_arg else None, **serving_workload_flags(
            r.trace, r.floats("trace_speed"), r.multi_turn, r.think_time, r.prefix_len, r.num_prefixes,
            r.no_stream, r.tokenizer, r.len_range, r.len_range_convention))


def fleet_plans(sweep: Sweep, pm: PluginManager, device: str | None, ray_address: str | None
                ) -> tuple[Any, list[Plan]]:
    """``--executor ray``: detect the fleet, select its device types (``--device``) and plan
    the sweep once per type.

    Raises:
        ConfigError: a remote-endpoint engine (it runs in-process), no cluster, no node
            with a selected device, or a plan error.
    """
    from infbench.contract.registry import engine_specs
    from infbench.execution.executors.fleet import plan_fleet
    from infbench.execution.executors.ray import detect_fleet

    specs = engine_specs(pm)
    if any(e in specs and specs[e].any_model for e in sweep.engines):
        raise ConfigError("a remote endpoint (--engine openai) is driven from the Ray cluster's nodes on its own, "
                          "not in a sweep with engines that run on the nodes",
                          hint="run the endpoint's cells in their own `infbench run --executor ray --engine openai`")
    fleet = detect_fleet(ray_address)
    return fleet, plan_fleet(sweep, fleet.select(device), pm)


def _endpoints_only(sweep: Sweep, pm: PluginManager) -> bool:
    from infbench.contract.registry import engine_specs

    specs = engine_specs(pm)
    return all(e in specs and specs[e].any_model for e in sweep.engines)


def spread_nodes(r: RunRequest, executor: str, sweep: Sweep, pm: PluginManager, notes: list[str]) -> int | None:
    """The client nodes serving cells' load is sent from (:attr:`RunOptions.load_nodes`):
    ``--load-nodes N``; with ``--executor ray`` and only remote endpoints (``--engine
    openai``), 0 (every alive node) when not given; else None (this process).

    Raises:
        ConfigError: ``--load-nodes`` without a Ray cluster address, or with a container executor.
    """
    import os

    if r.load_nodes is None:
        if executor == "ray" and _endpoints_only(sweep, pm):
            notes.append("--executor ray with an endpoint: its load is sent from every node of the cluster "
                         "(--load-nodes N for fewer)")
            return 0
        return None
    if not (r.ray_address or os.environ.get("RAY_ADDRESS")):
        raise ConfigError("--load-nodes sends load from nodes of a Ray cluster, and none was given",
                          hint="add --ray-address HOST:PORT (or set RAY_ADDRESS); docs/cluster.md shows how to start "
                               "one")
    if executor == "container" or (executor == "ray" and r.container_runtime):
        raise ConfigError("--load-nodes starts its clients from the process that measures, which then needs Ray; "
                          "a worker image does not have it", hint="drop --container-runtime, or use --executor "
                                                                  "inprocess")
    return r.load_nodes


#: Options of ``infbench run`` read as engine options, by the option each engine declares.
_ENGINE_FLAGS = {"base_url": "base_url", "api_key_env": "api_key_env", "endpoint": "endpoint",
                 "served_model_name": "served_model", "prompt_format": "prompt_format"}


def refuse_ignored(r: RunRequest, executor: str, plans: list[Plan], specs: dict[str, Any]) -> None:
    """Refuse an option that does nothing in the run it was given with (issue 33): each
    applies to some cells or scenarios only, and given elsewhere it would be silently
    ignored. The message names the option and where it applies. The scan of every option
    against every mode that found these is ``tests/unit/test_option_scan.py``.

    Args:
        r: the request (an option is "given" when its value is not the default).
        executor: ``--executor`` as resolved so far (``auto`` before the executor is built).
        plans: the planned cells (with ``--find-max``, the search's starting cell).
        specs: the engine registry (which engine reads which option).

    Raises:
        ConfigError: naming each ignored option and where it applies (exit 2).
    """
    cells = [c for p in plans for c in p.cells]
    server = [c for c in cells if c.load is not None]
    loads = [c for c in server if c.load is not None and c.load.mode != "batch"]
    engines = sorted({c.engine for c in cells})
    defaults = RunRequest.model_fields
    problems: list[str] = []

    def given(field: str) -> bool:
        v = getattr(r, field)
        return v not in (None, False, []) and v != defaults[field].default

    def refuse(field: str, where: str) -> None:
        if given(field):
            problems.append(f"{flag_of(field)} applies to {where}")

    if not any(c.load is None or c.load.mode == "batch" for c in cells):
        refuse("batch", "batch mode (all prompts at once); a load (--concurrency, --request-rate, --trace) sets "
                        "how many requests are in flight instead")
    if not any(c.load is None for c in cells):
        refuse("warmup", "in-process batch cells; server engines warm up with --warmup-requests")
    if not any(c.load is not None and c.load.mode == "rate" for c in cells):
        refuse("burstiness", "--request-rate loads (the gamma shape of their arrivals)")
    if not loads:
        for f in ("num_requests", "duration"):
            refuse(f, "serving loads of a server engine (--concurrency, --request-rate, --trace)")
    if not server:
        for f in ("warmup_requests", "request_timeout", "scrape_interval"):
            refuse(f, "serving cells of a server engine (e.g. --engine llama.cpp-server)")
        refuse("load_nodes", "serving cells on Ray: a server engine with --concurrency/--request-rate/--trace, "
                             "and --ray-address")
    elif not loads:
        refuse("load_nodes", "serving loads (--concurrency, --request-rate, --trace) sent from Ray nodes")
    for f, opt in _ENGINE_FLAGS.items():
        readers = [e for e in engines if getattr(specs.get(e), "options", None) is None
                   or opt in (specs[e].options or ())]
        if not readers:
            who = sorted(n for n, s in specs.items() if s.options is not None and opt in s.options)
            refuse(f, f"engines that read {opt} ({', '.join(who[:6])}); {', '.join(engines)} "
                      f"{'does' if len(engines) == 1 else 'do'} not")
    if r.dataset is None:
        for f in ("max_input_len", "max_output_len"):
            refuse(f, "--dataset FILE (its length filter)")
    if r.power_command is None and r.power_watts is None:
        refuse("power_label", "--power-command or --power-watts (what their readings cover)")
    if executor == "inprocess" or (executor == "auto" and all(p.device.vendor == "cpu" or p.device.kind == "remote"
                                                              for p in plans)):
        refuse("container_runtime", "cells run in worker images (--executor container, or --executor ray with "
                                    "images); here they run in this process")
    if executor != "ray" and r.load_nodes is None:
        refuse("ray_address", "--executor ray and --load-nodes; this run uses no Ray cluster")
    if r.find_max is None:
        for f in ("goodput", "find_max_limit", "find_max_probes"):
            refuse(f, "--find-max (the SLO search)")
    if r.perplexity is None:
        for f in ("ppl_n_ctx", "ppl_chunks"):
            refuse(f, "--perplexity TEXT (the perplexity measured after the cells)")
    # --no-engine-process (the engine-process change, where RunRequest gains the field): only
    # in-process engines have a process of their own to give up; server engines always do.
    if getattr(r, "engine_process", True) is False and not any(c.load is None for c in cells):
        problems.append("--no-engine-process applies to in-process engines (llama.cpp, transformers, vllm); "
                        "a server engine runs in its own process anyway")
    if problems:
        raise ConfigError("option(s) that would do nothing in this run: " + "; ".join(problems),
                          hint="drop them, or add what they apply to")


#: What the head start imports for a default sweep on an accelerator: what every in-process
#: accelerator engine (transformers, vLLM, optimum-habana, MII) imports first.
HEAD_START_MODULES = ["torch", "transformers:AutoModelForCausalLM", "transformers:AutoConfig"]


def head_start(r: RunRequest, specs: dict[str, Any], det: Any, executor: str) -> bool:
    """Start the engine process's imports while infbench plans
    (:func:`infbench.engines.process.prewarm`), when this run will start an in-process engine in
    its own process on this machine: ``--engine`` names exactly one in-process engine (its
    ``EngineSpec.modules``, each importable here), or the default sweep runs on a detected
    accelerator (:data:`HEAD_START_MODULES`, when torch is importable). Never for a dry run, a
    worker spec, ``--no-engine-process``, ``--base-url``, or a container or Ray executor; never
    for the CPU's default sweep (its engine is llama.cpp, and a torch import beside planning
    would slow it).

    Returns:
        True when an engine process was started ahead.
    """
    import importlib.util

    from infbench.engines.process import prewarm

    if r.dry_run or r.write_spec is not None or not r.engine_process or r.base_url or executor not in ("auto",
                                                                                                     "inprocess"):
        return False

    def importable(mods: list[str]) -> bool:
        try:
            return all(importlib.util.find_spec(m.partition(":")[0]) is not None for m in mods)
        except (ImportError, ValueError):
            return False

    names = r.strs("engine")
    if names:
        if len(set(names)) != 1 or names[0] not in specs:
            return False
        spec = specs[names[0]]
        mods = list(spec.modules)
        if spec.serving or spec.factory is None or not mods or not importable(mods):
            return False
        return prewarm(mods)
    if r.preset is not None or r.sweep_file is not None:
        return False
    if not any(getattr(d, "kind", "cpu") != "cpu" for d in getattr(det, "devices", [])):
        return False
    return importable(["torch", "transformers"]) and prewarm(HEAD_START_MODULES)


def prepare(r: RunRequest, pm: PluginManager) -> PreparedRun:
    """Detect, choose the default sweep, build and plan the sweep, and set the scenario
    (``--find-max``) and the run options; nothing is stored or started.

    Raises:
        ConfigError, EngineUnavailable: bad input (exit 2), with what to do; a default sweep
            with no usable engine (unless ``--dry-run``, which shows why).
    """
    from infbench.analysis.slo_search import SloTarget, check_workload
    from infbench.contract.registry import engine_specs
    from infbench.data.engine_options import check_engine_args, parse_engine_args
    from infbench.detect import detect
    from infbench.engines.options import engine_options
    from infbench.execution.default_sweep import default_for_run
    from infbench.execution.scenarios.find_max import find_max_plan
    from infbench.plan import plan as make_plan
    from infbench.plan.target import choose_device

    notes: list[str] = []
    r = agree_flags(r, parse_engine_args(r.engine_arg or []))  # --base-url vs base_url=...: one value, recorded
    if r.find_max is not None:
        check_workload(r.trace is not None, r.no_stream)
    name, container_runtime = executor_name(r, notes)
    det = detect(pm)
    det.raise_config_errors()
    head_start(r, engine_specs(pm), det, name)
    # The device's default sweep (contract 1.4) when no --preset/--sweep: its plugin's grid on the best engine here.
    default = default_for_run(pm, det, r.preset, r.sweep_file, r.device, r.strs("engine"), name, container_runtime,
                              r.base_url)
    if default is not None and not default.user_engines and default.chosen is None and not r.dry_run:
        raise default.refusal()
    name = default.executor(name) if default is not None else name  # the CPU image: after in-process engines
    if r.perplexity is not None:
        from infbench.quality.perplexity import read_text

        read_text(r.perplexity)
    sweep = build_request_sweep(r, default)
    agree_flags(r, sweep.engine_args)  # the sweep file's engine arguments agree with the flags too
    fleet = None
    load_nodes = spread_nodes(r, name, sweep, pm, notes)
    if load_nodes is not None and name == "ray" and _endpoints_only(sweep, pm):
        name = "inprocess"      # the endpoint is measured from here, its load sent from the nodes
    if name == "ray":
        fleet, plans = fleet_plans(sweep, pm, r.device, r.ray_address)
        endpoint_opts: dict[str, Any] = {"base_url": None, "api_key_env": None}
    else:
        dev, endpoint_opts = choose_device(det, sweep.engines, pm, r.device, r.base_url, r.api_key_env)
        plans = [make_plan(sweep, dev, pm, installed_here=name != "container", progress=_progress_line)]
    if r.find_max is not None:
        if len(plans) > 1:
            raise ConfigError(f"--find-max searches one device type; the sweep is planned for {len(plans)}",
                              hint="pick one with --device")
        slo = SloTarget(ttft_s=r.slo_ttft_s(), tpot_s=r.slo_tpot_s(), goodput=r.goodput)
        plans = [find_max_plan(plans[0], r.find_max, slo, r.find_max_limit, r.find_max_probes)]
    if r.adaptive is not None:
        from infbench.execution.scenarios.adaptive_sweep import adaptive_plan

        plans = [adaptive_plan(p, r.adaptive, pm) for p in plans]  # a device without limits: refused before the run
    refuse_ignored(r, name, plans, engine_specs(pm))
    checked = check_engine_args(engine_specs(pm), sweep.engines, sweep.engine_args)  # plan() refused bad ones
    eopts = engine_options(checked=checked.values, n_threads=r.threads, endpoint=r.endpoint,
                           served_model=r.served_model_name, prompt_format=r.prompt_format, tokenizer=r.tokenizer,
                           **endpoint_opts)
    opts = RunOptions(force=r.force, cell_timeout_s=sweep.cell_timeout_s, power_interval_s=r.power_interval,
                      engine_options=eopts, slo=sweep.slo(), server_metrics_interval_s=r.scrape_interval,
                      price_per_hour=r.price_per_hour, load_nodes=load_nodes, ray_address=r.ray_address,
                      engine_process=r.engine_process)
    warnings = list(dict.fromkeys(w for p in plans for w in p.warnings))
    return PreparedRun(r, pm, det, default, sweep, plans, fleet, name, container_runtime, opts, warnings, notes)


def find_max_result(plan: Plan, store: Any, summary: Any, mode: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """After ``--find-max``'s plan (:func:`infbench.execution.scenarios.find_max.find_max_plan`)
    ran: the search's result and its stored probes.

    Args:
        plan: the search's plan (its ``scenario.search_id`` names the probes).
        store: the :class:`~infbench.store.Store` the run wrote.
        summary: the run's :class:`~infbench.data.run.RunSummary`.
        mode: ``concurrency`` or ``rate`` (for the empty result when nothing was measured).

    Returns:
        ``(result, probes)``: the scenario's ``find_max`` record (``knee``, ``first_fail``,
        ``probes``, ``stopped``, ``slo``), or an empty one saying "nothing measured"; and the
        stored rows of the search's probes, every attempt.
    """
    search_id = plan.scenario.search_id  # type: ignore[union-attr]  # a find-max plan has its scenario
    res = (summary.scenario or {}).get("find_max") or {"search_id": search_id, "mode": mode, "knee": None,
                                                       "first_fail": None, "probes": [],
                                                       "stopped": "nothing measured", "slo": None}
    rows = [r for r in store.results(run_id=summary.run_id, all_attempts=True)
            if ((r.get("metrics") or {}).get("find_max") or {}).get("search_id") == search_id]
    return res, rows


def perplexity_after_run_plan(plan: Plan, text: str, n_ctx: int, chunks: int | None,
                              pm: PluginManager) -> tuple[Plan | None, list[Any], list[str]]:
    """``infbench run --perplexity TEXT``: the perplexity plan of the run's real-weights groups.

    Returns:
        ``(plan, requests, notes)``: the perplexity scenario's plan (None when no group has real
        weights), its :class:`~infbench.data.scores.PerplexityRequest` items and notes for the
        user (groups left out and why).

    Raises:
        InfbenchError: the text or a model cannot be scored (the run's cells stay stored).
    """
    from infbench.execution.scenarios.scoring import perplexity_plan
    from infbench.quality.runner import perplexity_requests

    reqs, notes = perplexity_requests(plan, text, n_ctx, chunks, pm)
    return (perplexity_plan(reqs, plan.device) if reqs else None), reqs, notes


def perplexity_rows(store: Any, reqs: list[Any], summary: Any) -> list[dict[str, Any]]:
    """The stored, gated perplexity results of ``reqs`` after their plan ran
    (:func:`infbench.store.quality.quality_results` items with the ``--max-ppl-increase`` gate),
    each with ``skipped`` (already stored, not measured again)."""
    from infbench.quality.gate import with_gate
    from infbench.store.quality import quality_results

    keys = {req.key() for req in reqs}
    skipped = set(summary.quality_skipped)
    return [dict(r, skipped=r["quality_key"] in skipped) for r in with_gate(quality_results(store))
            if r["quality_key"] in keys]
