"""A run's measuring knobs (:class:`RunOptions`, made from its
:class:`~infbench.data.run_config.RunConfig`) and what it did (:class:`RunSummary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infbench.data.run_config import (
    AutoExecutor,
    EnginePart,
    LoadPart,
    PowerPart,
    RayExecutor,
    RunConfig,
    SloPart,
    SweepPart,
    WarmupPart,
)
from infbench.data.schema import Cell, CellResult
from infbench.data.scores import PerplexityResult
from infbench.data.warmup import WarmupPolicy


@dataclass
class RunOptions:
    """Knobs of a run that are not part of a cell's identity: the measuring view of a
    :class:`~infbench.data.run_config.RunConfig` (:meth:`of`, the same on the host and in every
    worker), with the user's power sampler once built.

    Attributes:
        force: re-run cells that already have a stored ok result.
        cell_timeout_s: abort a cell after this many seconds (stored as failed).
        power_interval_s: power sampling interval in s.
        engine_options: passed to the engine adapters (``n_threads``...).
        slo: per-request limits for goodput (``Sweep.slo()``): ``{"ttft_s", "tpot_s", "e2e_s"}`` in s.
        power_override: a :class:`~infbench.measure.power.PowerSampler` replacing the
            device plugin's (``--power-command`` / ``--power-watts``: a PDU or chassis
            reading, or a declared wattage).
        server_metrics_interval_s: seconds between scrapes of a server engine's
            Prometheus ``/metrics`` (0: no scraping).
        price_per_hour: USD per hour of the measured machine (``--price-per-hour``);
            every cell then gets ``usd_per_mtok``.
        load_nodes: send each serving cell's load from this many nodes of a Ray cluster
            (``--load-nodes``; :mod:`infbench.execution.executors.spread`); None: from this process.
        ray_address: the Ray cluster of ``load_nodes`` (``--ray-address``; default
            ``RAY_ADDRESS``).
        engine_process: run each in-process engine (an adapter whose ``isolate`` is True:
            transformers, llama.cpp's bindings, vLLM's ``LLM``...) in a process of its own
            (:class:`infbench.engines.process.EngineProcess`), apart from infbench's
            samplers and display (default). False (``--no-engine-process``) measures it in
            this process, beside them, and flags its cells ``suspect``.
        warmup: how cells warm up, and whether a drifting group is measured again
            (:class:`~infbench.data.warmup.WarmupPolicy`: ``--warmup-tol``, ``--warmup-max-s``,
            ``--rewarm-after-s``, ``--no-remeasure``).
        config: the configuration these knobs were made of (what a worker spec carries);
            None for knobs set directly (the library's callers, tests).
    """

    force: bool = False
    cell_timeout_s: float | None = None
    power_interval_s: float = 0.1
    engine_options: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] | None = None
    power_override: Any = None
    server_metrics_interval_s: float = 1.0
    price_per_hour: float | None = None
    load_nodes: int | None = None
    ray_address: str | None = None
    engine_process: bool = True
    warmup: WarmupPolicy = field(default_factory=WarmupPolicy)
    config: RunConfig | None = None

    @classmethod
    def of(cls, config: RunConfig, force: bool = False) -> RunOptions:
        """The knobs of a planned configuration (:func:`infbench.execution.orchestrator.resolve`:
        the grid's cell limit and SLO in it): the engines' options are the named flags (the
        tokenizer included) under the checked ``--engine-arg`` values, the spread load the Ray
        executor's ``load_nodes``."""
        eng, ex = config.engine, config.executor
        named = {**eng.named(), **({"tokenizer": config.load.tokenizer} if config.load.tokenizer else {})}
        ray = ex if isinstance(ex, RayExecutor) else None
        return cls(force=force, cell_timeout_s=config.sweep.cell_timeout_s, power_interval_s=config.power.interval_s,
                   engine_options={**named, **(eng.args or {})}, slo=config.slo.as_dict(),
                   server_metrics_interval_s=config.load.scrape_interval_s, price_per_hour=config.power.price_per_hour,
                   load_nodes=ray.load_nodes if ray else None, ray_address=ray.address if ray else None,
                   warmup=config.warmup.policy(),
                   engine_process=eng.process, config=config)

    def as_config(self) -> RunConfig:
        """The configuration these knobs come from (:attr:`config`), or one made of them
        (knobs set directly): what a worker spec carries."""
        if self.config is not None:
            return self.config
        slo = self.slo or {}
        ex: Any = RayExecutor(address=self.ray_address, load_nodes=self.load_nodes, groups="inprocess") \
            if self.load_nodes is not None else AutoExecutor()
        return RunConfig(sweep=SweepPart(cell_timeout_s=self.cell_timeout_s), warmup=WarmupPart.of(self.warmup),
                         load=LoadPart(scrape_interval_s=self.server_metrics_interval_s),
                         slo=SloPart(**{k: v for k, v in slo.items() if k in ("ttft_s", "tpot_s", "e2e_s")}),
                         engine=EnginePart(args=dict(self.engine_options) or None, process=self.engine_process),
                         power=PowerPart(interval_s=self.power_interval_s, price_per_hour=self.price_per_hour),
                         executor=ex)


@dataclass
class RunSummary:
    """What a run did: its id, the cells stored ok, failed and skipped, and its status
    (``running``, then ``completed``, ``completed_with_failures``, ``interrupted`` or
    ``failed``).

    Attributes:
        claimed: the skipped cells that another live process was measuring (or stored
            ok while this run went), as ``(cell, who)``; also in ``skipped``.
        journaled: the measured cells (also in ``ok``/``failed``) the store refused,
            kept in the journal file ``journal`` (:mod:`infbench.store.journal`).
        journal_stored: True when they reached the store after all as the run ended.
        predicted: cells an adaptive sweep stored as ``predicted`` (not measured; never
            ``ok``, never counted as failed either).
        quality: perplexity measurements stored by the run (ok and failed).
        quality_skipped: quality keys already stored ok, not measured again.
        not_reached: cells a frontier sweep did not measure: their series stopped below them
            (a doubling added too little throughput, or the SLO broke); not stored.
        scenario: what the scenario concluded (``--find-max``: the knee and why the
            search stopped), also stored in the run's provenance under ``scenario``.
    """

    run_id: str
    ok: list[CellResult] = field(default_factory=list)
    failed: list[CellResult] = field(default_factory=list)
    skipped: list[Cell] = field(default_factory=list)
    status: str = "running"
    claimed: list[tuple[Cell, str]] = field(default_factory=list)
    journaled: list[CellResult] = field(default_factory=list)
    journal: str | None = None
    journal_stored: bool = False
    predicted: list[CellResult] = field(default_factory=list)
    quality: list[PerplexityResult] = field(default_factory=list)
    quality_skipped: list[str] = field(default_factory=list)
    not_reached: list[Cell] = field(default_factory=list)
    scenario: dict[str, Any] = field(default_factory=dict)
