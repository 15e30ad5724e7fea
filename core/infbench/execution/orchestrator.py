"""``infbench run`` from a :class:`~infbench.data.run_config.RunConfig` to a run:
:func:`prepare` (detect -> default sweep -> grid -> plan, one per device type on a Ray fleet ->
scenario -> run options) returns a :class:`RunPlan`, whose :meth:`RunPlan.run` measures every
scenario (a sweep, ``--find-max``, ``--adaptive``, the frontier) through the executor's
``run``, and :meth:`RunPlan.perplexity` the perplexity after it (``--perplexity``), through the
same executor. :mod:`infbench.cli.run_cmd` turns the flags into the configuration and prints
what comes back; everything it decides is here.

:func:`prepare` is pure: it reads the host (the registry's detection) and the files the
configuration names, and starts, stores and writes nothing; bad input is a
:class:`~infbench.data.errors.ConfigError` (exit 2). The only thing started before the run is
the engine process's head start (:func:`head_start`), which the command line calls just
before :func:`prepare`, so that its imports overlap the planning.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from infbench.analysis.slo_search import SloTarget, check_workload
from infbench.data.engine_options import agreed_flags, check_engine_args
from infbench.data.errors import ConfigError
from infbench.data.groups import Plan
from infbench.data.outputs import WORKER_SPEC, json_text, write_output
from infbench.data.paths import default_store_path
from infbench.data.run import RunOptions
from infbench.data.run_config import PARTS, FindMaxScenario, PerplexityScenario, RayExecutor, RunConfig
from infbench.data.schema import DeviceInfo, Sweep
from infbench.data.worker_spec import make_spec, redacted_doc
from infbench.detect.registry import Registry
from infbench.engines.process import prewarm
from infbench.execution.bookkeeping import provenance, run_state
from infbench.execution.default_sweep import DefaultSweep, default_for_run
from infbench.execution.executors import choose_executor
from infbench.execution.executors.fleet import Fleet, plan_fleet
from infbench.execution.executors.ray import detect_fleet
from infbench.execution.scenarios.adaptive_sweep import adaptive_plan
from infbench.execution.scenarios.find_max import find_max_plan
from infbench.execution.scenarios.scoring import perplexity_plan
from infbench.measure.power import user_power_sampler
from infbench.plan import plan as make_plan
from infbench.plan.applies import refuse_ignored
from infbench.plan.sweeps import build_sweep, load_sweep_file
from infbench.plan.target import choose_device
from infbench.quality.gate import with_gate
from infbench.quality.perplexity import read_text
from infbench.quality.runner import perplexity_requests
from infbench.quality.weights import gguf_native_dtypes
from infbench.store.quality import quality_results


@dataclass
class RunPlan:
    """A run ready to start (see :func:`prepare`).

    Attributes:
        config: the run's configuration (a sweep file's parts merged in).
        registry: the engines, plugins and detection.
        default: the device's default sweep (:class:`~infbench.execution.default_sweep.DefaultSweep`)
            when no ``--preset``/``--sweep`` was given, else None.
        sweep: the validated grid (:class:`~infbench.data.schema.Sweep`).
        plans: one :class:`~infbench.data.groups.Plan` per device type (several on a Ray fleet);
            with ``--find-max`` one plan whose scenario is the search.
        fleet: the Ray fleet (``--executor ray``), else None.
        executor_name: ``auto``, ``inprocess``, ``container`` or ``ray``, as resolved.
        options: the run's measuring knobs (:meth:`RunOptions.of` the resolved configuration).
        warnings: what the plans warn about (positions past the model's context...).
        notes: lines for the user (``--runtime`` is deprecated, ...).
    """

    config: RunConfig
    registry: Registry
    default: DefaultSweep | None
    sweep: Sweep
    plans: list[Plan]
    fleet: Fleet | None
    executor_name: str
    options: RunOptions
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _executor: Any = None

    @property
    def device(self) -> DeviceInfo:
        """The device of the first plan."""
        return self.plans[0].device

    @property
    def pm(self) -> Any:
        """The plugin manager."""
        return self.registry.pm

    @property
    def container_runtime(self) -> str | None:
        """``--container-runtime`` (or what ``--runtime`` implied), or None."""
        return getattr(self.config.executor, "container_runtime", None)

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
        if len(self.plans) > 1:
            raise ConfigError(f"--write-spec writes one device's spec; the sweep is planned for {len(self.plans)} "
                              "device types", hint="pick one with --device")
        spec = make_spec(self.plans[0], self.options)
        out = self.config.output
        assert out.write_spec is not None  # called only with --write-spec
        write_output(out.write_spec, json_text(redacted_doc(spec), redacted=False), WORKER_SPEC,
                     [out.store, default_store_path()])
        return spec

    def executor(self) -> Any:
        """The executor (:func:`infbench.execution.executors.choose_executor`), built once, with the
        user's power source in :attr:`options` (``--power-command``/``--power-watts``); its notes
        go to :attr:`notes`.

        Raises:
            ConfigError: an executor not usable here, or a user power source with an
                executor that measures in another process.
        """
        if self._executor is not None:
            return self._executor

        ex_cfg = self.config.executor
        extra = {"ray_address": ex_cfg.address, "fleet": self.fleet} if self.executor_name == "ray" and \
            isinstance(ex_cfg, RayExecutor) else {}
        prov = provenance(self.registry.detection(), self.pm)
        if self.default is not None:
            prov["default_sweep"] = self.default.provenance()  # the engine chosen, where, and its build
        ex = choose_executor(self.executor_name, self.device, self.sweep.engines, self.pm, prov, self.notes,
                             self.container_runtime, **extra)
        power = self.config.power
        if ex.name != "inprocess" and power.user_source():
            raise ConfigError("--power-command/--power-watts replace the sampler in this process; they do not reach "
                              f"the {ex.name} executor's workers", hint="add --executor inprocess")
        self.options.power_override = user_power_sampler(power.command, power.watts, power.label)
        self._executor = ex
        return ex

    def run(self, store: Any, observer: Any, plan: Plan | None = None) -> Any:
        """Measure the plan's scenario (a sweep, ``--find-max``, ``--adaptive``, the frontier),
        or ``plan`` (the perplexity after it, :meth:`perplexity_plan`), on the executor: its
        ``run`` is the one path of every scenario. Every result is stored as it comes.

        Returns:
            The :class:`~infbench.data.run.RunSummary`.
        """
        if plan is None:
            plan = self.plans if self.fleet is not None else self.plans[0]  # type: ignore[assignment]
        return self.executor().run(plan, store, self.options, observer)

    def find_max(self, store: Any, summary: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """After ``--find-max`` ran: the search's result and its stored probes
        (:func:`find_max_result`)."""
        assert isinstance(self.config.scenario, FindMaxScenario)
        return find_max_result(self.plans[0], store, summary, self.config.scenario.mode)

    def perplexity_plan(self) -> tuple[Plan | None, list[Any], list[str]]:
        """``--perplexity TEXT`` after the cells: the perplexity plan of the run's real-weights
        groups (:func:`perplexity_after_run_plan`), run with :meth:`run`.

        Raises:
            InfbenchError: the text or a model cannot be scored (the run's cells stay stored).
        """
        sc = self.config.scenario
        assert isinstance(sc, PerplexityScenario)
        return perplexity_after_run_plan(self.plans[0], sc.text_path, sc.n_ctx, sc.max_chunks, self.pm)


def _progress_line(text: str) -> None:
    """A planning progress line on stderr (a large sweep says how far it got)."""
    print(f"infbench: {text}", file=sys.stderr, flush=True)


#: The engine part's fields set by a flag that is also an engine option, by flag
#: (:data:`infbench.data.engine_options.FLAG_OPTIONS`).
_FLAG_FIELDS = {"--threads": "threads", "--endpoint": "endpoint", "--base-url": "base_url",
                "--api-key-env": "api_key_env", "--served-model-name": "served_model_name",
                "--prompt-format": "prompt_format"}


def agree_flags(config: RunConfig, args: dict[str, Any] | None) -> RunConfig:
    """``config`` checked against the engine arguments ``args``
    (:func:`~infbench.data.engine_options.agreed_flags`, issue 41): a flag and an engine argument
    that set one option differently are refused; ``base_url``/``api_key_env`` given only as
    engine arguments become the engine part's, so the device and the run's records name the
    endpoint the traffic goes to.

    Raises:
        ConfigError: a flag and its engine argument disagree.
    """
    eng = config.engine
    flags = {f: getattr(eng, k) for f, k in _FLAG_FIELDS.items()}
    flags["--tokenizer"] = config.load.tokenizer
    got = agreed_flags(flags, args)
    update = {k: str(got[f]) for f, k in (("--base-url", "base_url"), ("--api-key-env", "api_key_env"))
              if got[f] is not None and getattr(eng, k) is None}
    return config.model_copy(update={"engine": eng.model_copy(update=update)}) if update else config


def fleet_plans(sweep: Sweep, registry: Registry, device: str | None, ray_address: str | None
                ) -> tuple[Any, list[Plan]]:
    """``--executor ray``: detect the fleet, select its device types (``--device``) and plan
    the sweep once per type.

    Raises:
        ConfigError: a remote-endpoint engine (it runs in-process), no cluster, no node
            with a selected device, or a plan error.
    """
    specs = registry.engines
    if any(e in specs and specs[e].any_model for e in sweep.engines):
        raise ConfigError("a remote endpoint (--engine openai) is driven from the Ray cluster's nodes on its own, "
                          "not in a sweep with engines that run on the nodes",
                          hint="run the endpoint's cells in their own `infbench run --executor ray --engine openai`")
    fleet = detect_fleet(ray_address)
    return fleet, plan_fleet(sweep, fleet.select(device), registry.pm)


def _endpoints_only(sweep: Sweep, specs: dict[str, Any]) -> bool:
    return all(e in specs and specs[e].any_model for e in sweep.engines)


def spread_nodes(config: RunConfig, executor: str, sweep: Sweep, specs: dict[str, Any], notes: list[str]
                 ) -> int | None:
    """The client nodes serving cells' load is sent from (:attr:`RunOptions.load_nodes`):
    ``--load-nodes N``; with ``--executor ray`` and only remote endpoints (``--engine
    openai``), 0 (every alive node) when not given; else None (this process).

    Raises:
        ConfigError: ``--load-nodes`` without a Ray cluster address, or with a container executor.
    """
    ex = config.executor
    load_nodes = ex.load_nodes if isinstance(ex, RayExecutor) else None
    if load_nodes is None:
        if executor == "ray" and _endpoints_only(sweep, specs):
            notes.append("--executor ray with an endpoint: its load is sent from every node of the cluster "
                         "(--load-nodes N for fewer)")
            return 0
        return None
    assert isinstance(ex, RayExecutor)
    if not (ex.address or os.environ.get("RAY_ADDRESS")):
        raise ConfigError("--load-nodes sends load from nodes of a Ray cluster, and none was given",
                          hint="add --ray-address HOST:PORT (or set RAY_ADDRESS); docs/cluster.md shows how to start "
                               "one")
    if executor == "container" or (executor == "ray" and ex.container_runtime):
        raise ConfigError("--load-nodes starts its clients from the process that measures, which then needs Ray; "
                          "a worker image does not have it", hint="drop --container-runtime, or use --executor "
                                                                  "inprocess")
    return load_nodes


def build_grid(config: RunConfig, default: Any) -> Sweep:
    """The grid (:class:`~infbench.data.schema.Sweep`) of a configuration: preset or sweep file,
    the default sweep's fields, then the configuration's (:meth:`RunConfig.grid_fields`); a
    search starts at one in flight (or 1 req/s) when no load is given; on llama.cpp a real GGUF
    runs at its own type (``q4_1``...) unless ``--dtype`` asks for derived precisions.

    Raises:
        ConfigError: a bad sweep file or combination.
    """
    fields = config.grid_fields()
    sc = config.scenario
    if isinstance(sc, FindMaxScenario) and not fields.get("concurrency") and not fields.get("request_rate"):
        fields["concurrency" if sc.mode == "concurrency" else "request_rate"] = [1] if sc.mode == "concurrency" \
            else [1.0]  # the search starts at 1
    s = config.sweep
    engines_now = s.engines or list((default.fields if default else {}).get("engines") or ["llama.cpp"])
    if "dtypes" not in fields and s.file is None and set(engines_now) <= {"llama.cpp", "llama.cpp-server"}:
        native = gguf_native_dtypes(s.models)
        if native is not None:
            fields["dtypes"] = native
    return build_sweep(s.preset, s.file, base=default.fields if default else None, **fields)


def with_sweep_file(config: RunConfig) -> RunConfig:
    """``config`` with the parts its sweep file names (``power:``, ``scenario:``...) under the
    command line's (:meth:`RunConfig.with_file`); the file's grid fields are read by
    :func:`build_grid`.

    Raises:
        ConfigError: an unreadable file or an invalid part.
    """
    if config.sweep.file is None:
        return config

    doc = load_sweep_file(config.sweep.file)
    parts = {k: v for k, v in doc.items() if k in PARTS and isinstance(v, dict)}
    return config.with_file(parts) if parts else config


#: What the head start imports for a default sweep on an accelerator: what every in-process
#: accelerator engine (transformers, vLLM, optimum-habana, MII) imports first.
HEAD_START_MODULES = ["torch", "transformers:AutoModelForCausalLM", "transformers:AutoConfig"]


def head_start(config: RunConfig, registry: Registry) -> bool:
    """Start the engine process's imports while infbench plans
    (:func:`infbench.engines.process.prewarm`; the command line calls it just before
    :func:`prepare`), when this run will start an in-process engine in its own process on this
    machine: ``--engine`` names exactly one in-process engine (its ``EngineSpec.modules``, each
    importable here), or the default sweep runs on a detected accelerator
    (:data:`HEAD_START_MODULES`, when torch is importable). Never for a dry run, a worker spec,
    ``--no-engine-process``, ``--base-url``, or a container or Ray executor; never for the CPU's
    default sweep (its engine is llama.cpp, and a torch import beside planning would slow it).

    Returns:
        True when an engine process was started ahead.
    """
    out, eng = config.output, config.engine
    if out.dry_run or out.write_spec is not None or not eng.process or eng.base_url or \
            config.executor.kind not in ("auto", "inprocess"):
        return False

    def importable(mods: list[str]) -> bool:
        try:
            return all(importlib.util.find_spec(m.partition(":")[0]) is not None for m in mods)
        except (ImportError, ValueError):
            return False

    names = config.sweep.engines
    specs = registry.engines
    if names:
        if len(set(names)) != 1 or names[0] not in specs:
            return False
        spec = specs[names[0]]
        mods = list(spec.modules)
        if spec.serving or spec.factory is None or not mods or not importable(mods):
            return False
        return prewarm(mods)
    if config.sweep.preset is not None or config.sweep.file is not None:
        return False
    if not any(getattr(d, "kind", "cpu") != "cpu" for d in getattr(registry.detection(), "devices", [])):
        return False
    return importable(["torch", "transformers"]) and prewarm(HEAD_START_MODULES)


def prepare(config: RunConfig, registry: Registry) -> RunPlan:
    """Plan a run: detect (the registry's detection), choose the default sweep, build and plan
    the grid, set the scenario (``--find-max``, ``--adaptive``) and the run options. Nothing
    is started, stored or written.

    Raises:
        ConfigError, EngineUnavailable: bad input (exit 2), with what to do; a default sweep
            with no usable engine (unless ``--dry-run``, which shows why).
    """
    notes: list[str] = []
    config = with_sweep_file(config)
    config = agree_flags(config, config.engine.args)  # --base-url vs base_url=...: one value, recorded
    sc, s, eng = config.scenario, config.sweep, config.engine
    if isinstance(sc, FindMaxScenario):
        check_workload(config.load.trace is not None, config.load.stream is False)
    ex = config.executor
    name: str = ex.groups if isinstance(ex, RayExecutor) and ex.groups != "nodes" else ex.kind  # --load-nodes
    det = registry.detection()
    det.raise_config_errors()
    # The device's default sweep (contract 1.4) when no --preset/--sweep: its plugin's grid on the best engine here.
    default = default_for_run(registry.pm, det, s.preset, s.file, s.device, s.engines, name,
                              getattr(config.executor, "container_runtime", None), eng.base_url)
    if default is not None and not default.user_engines and default.chosen is None and not config.output.dry_run:
        raise default.refusal()
    name = default.executor(name) if default is not None else name  # the CPU image: after in-process engines
    if isinstance(sc, PerplexityScenario):
        read_text(sc.text_path)
    sweep = build_grid(config, default)
    agree_flags(config, sweep.engine_args)  # the sweep file's engine arguments agree with the flags too
    specs = registry.engines
    fleet = None
    load_nodes = spread_nodes(config, name, sweep, specs, notes)
    if load_nodes is not None and name == "ray" and _endpoints_only(sweep, specs):
        name = "inprocess"      # the endpoint is measured from here, its load sent from the nodes
    ray_address = config.executor.address if isinstance(config.executor, RayExecutor) else None
    if name == "ray":
        fleet, plans = fleet_plans(sweep, registry, s.device, ray_address)
        endpoint: dict[str, Any] = {"base_url": None, "api_key_env": None}
    else:
        dev, endpoint = choose_device(det, sweep.engines, registry.pm, s.device, eng.base_url, eng.api_key_env)
        plans = [make_plan(sweep, dev, registry.pm, installed_here=name != "container", progress=_progress_line)]
    if isinstance(sc, FindMaxScenario):
        if len(plans) > 1:
            raise ConfigError(f"--find-max searches one device type; the sweep is planned for {len(plans)}",
                              hint="pick one with --device")
        slo = SloTarget(ttft_s=sweep.slo_ttft_s, tpot_s=sweep.slo_tpot_s, goodput=sc.goodput)
        plans = [find_max_plan(plans[0], sc.mode, slo, sc.limit, sc.max_probes)]
    elif sc.kind == "adaptive":
        # no limits, or (with --adaptive-strict) a budget below the corners: refused before the run
        plans = [adaptive_plan(p, sc.budget, registry.pm, strict=sc.strict) for p in plans]
    refuse_ignored(config, name, plans, specs)
    checked = check_engine_args(specs, sweep.engines, sweep.engine_args)  # plan() refused bad ones
    resolved = resolve(config, sweep, checked.values, endpoint, load_nodes, ray_address)
    opts = RunOptions.of(resolved, force=config.output.force)
    warnings = list(dict.fromkeys(w for p in plans for w in p.warnings))
    warnings += [f"host state: {w}" for w in run_state(det, registry.pm)["warnings"]]  # before the run, not after
    return RunPlan(resolved, registry, default, sweep, plans, fleet, name, opts, warnings, notes)


def resolve(config: RunConfig, sweep: Sweep, engine_args: dict[str, Any], endpoint: dict[str, Any],
            load_nodes: int | None, ray_address: str | None) -> RunConfig:
    """The configuration as planned, what the run options and every worker spec are made of:
    the grid's cell limit and SLO (a preset's or a file's included), the engine arguments as
    checked (typed, JSON objects parsed), the endpoint a remote platform gave, and the client
    nodes of a spread load."""
    eng = config.engine.model_copy(update={"args": engine_args or None, **{k: v for k, v in endpoint.items()
                                                                           if v is not None}})
    parts: dict[str, Any] = {
        "sweep": config.sweep.model_copy(update={"cell_timeout_s": sweep.cell_timeout_s}),
        "slo": config.slo.model_copy(update={"ttft_s": sweep.slo_ttft_s, "tpot_s": sweep.slo_tpot_s,
                                             "e2e_s": sweep.slo_e2e_s}),
        "engine": eng,
    }
    if load_nodes is not None:
        ex = config.executor
        parts["executor"] = RayExecutor(address=ray_address, load_nodes=load_nodes,
                                        container_runtime=getattr(ex, "container_runtime", None),
                                        groups=getattr(ex, "groups", "nodes"))
    return config.model_copy(update=parts)


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
            if (r.field("find_max") or {}).get("search_id") == search_id]
    return res, rows


def perplexity_after_run_plan(plan: Plan, text: str, n_ctx: int, chunks: int | None,
                              pm: Any) -> tuple[Plan | None, list[Any], list[str]]:
    """``infbench run --perplexity TEXT``: the perplexity plan of the run's real-weights groups.

    Returns:
        ``(plan, requests, notes)``: the perplexity scenario's plan (None when no group has real
        weights), its :class:`~infbench.data.scores.PerplexityRequest` items and notes for the
        user (groups left out and why).

    Raises:
        InfbenchError: the text or a model cannot be scored (the run's cells stay stored).
    """
    reqs, notes = perplexity_requests(plan, text, n_ctx, chunks, pm)
    return (perplexity_plan(reqs, plan.device) if reqs else None), reqs, notes


def perplexity_rows(store: Any, reqs: list[Any], summary: Any) -> list[dict[str, Any]]:
    """The stored, gated perplexity results of ``reqs`` after their plan ran
    (:func:`infbench.store.quality.quality_results` items with the ``--max-ppl-increase`` gate),
    each with ``skipped`` (already stored, not measured again)."""
    keys = {req.key() for req in reqs}
    skipped = set(summary.quality_skipped)
    return [dict(r, skipped=r["quality_key"] in skipped) for r in with_gate(quality_results(store))
            if r["quality_key"] in keys]
