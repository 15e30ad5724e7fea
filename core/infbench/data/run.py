"""A run's knobs (:class:`RunOptions`) and what it did (:class:`RunSummary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infbench.data.schema import Cell, CellResult
from infbench.data.scores import PerplexityResult
from infbench.data.warmup import WarmupPolicy


@dataclass
class RunOptions:
    """Knobs of a run that are not part of a cell's identity.

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
