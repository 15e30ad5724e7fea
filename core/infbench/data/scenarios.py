"""What a run measures next: the typed specs of the scenarios.

A scenario decides the next unit of work from the results so far; an executor runs it
wherever the engine is (this process, a worker container, a Ray node), through the one
engine session (:mod:`infbench.execution.session`). The spec travels inside the worker contract
(:class:`infbench.execution.worker.WorkerSpec`), so every field is plain data, validated here:

* :class:`SweepScenario`: every planned cell once (``infbench run``);
* :class:`FindMaxScenario`: the highest load meeting an SLO (``infbench run --find-max``);
* :class:`PerplexityScenario`: the perplexity of a text per engine and dtype
  (``infbench perplexity``, ``infbench run --perplexity``);
* :class:`AdaptiveScenario`: a designed subset of the cells measured, the rest predicted
  (``infbench run --adaptive 25%``);
* :class:`FrontierScenario`: concurrency doubling per configuration until it stops paying
  (``infbench run --preset frontier``).

The logic of each lives in :mod:`infbench.execution.scenarios`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infbench.data.flags import flag


class SweepScenario(BaseModel):
    """Measure every planned cell once (cells stored ok are skipped unless forced).

    Attributes:
        handoff: the host may hand cells of this worker's part to another worker while it
            runs (the Ray executor's group splitting): the worker takes each cell through
            :mod:`infbench.data.handoff` before measuring it, and skips a cell handed off.
            None (the default): every cell is this worker's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["sweep"] = "sweep"
    handoff: bool | None = None


class KnownProbe(BaseModel):
    """A probe of a search measured before the search moved (to another worker after a crash).

    Attributes:
        load: requests in flight (concurrency) or arrivals per s (rate).
        passed: whether it met the SLO (and did not saturate).
        fraction: share of its requests meeting the SLO, in [0, 1].
        saturated: the saturation reason, if any.
        cell_id: the stored cell.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    load: float = Field(gt=0, allow_inf_nan=False)
    passed: bool
    fraction: float = Field(ge=0, le=1, allow_inf_nan=False)
    saturated: str | None = None
    cell_id: str = ""


class FindMaxScenario(BaseModel):
    """Bracket then bisect for the highest load at which ``goodput`` of the requests meet the
    SLO (:mod:`infbench.analysis.slo_search`), each probe a stored cell.

    Attributes:
        mode: ``rate`` (arrivals per s) or ``concurrency`` (requests in flight).
        ttft_s, tpot_s: the SLO per request in s (at least one).
        goodput: fraction of requests that must meet it, in (0, 1].
        limit: the highest load tried (None: 512 in flight, 1000 req/s).
        max_probes: most probes (cells) to measure, >= 1.
        rel_tol: rate mode converges when (fail - pass) <= rel_tol x pass.
        search_id: id shared by the probes' ``metrics.find_max``.
        known: probes already measured (a search resumed on another worker).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["find_max"] = "find_max"
    mode: Literal["rate", "concurrency"] = flag(
        "--find-max", param="find_max", selects=True, default=..., help="rate or concurrency: search for the "
        "highest load meeting the SLO (--slo-ttft-ms/--slo-tpot-ms, --goodput).")
    ttft_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tpot_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    goodput: float = flag("--goodput", cli_type="float", default=0.9, gt=0, le=1, allow_inf_nan=False,
                          help="--find-max: fraction of requests that must meet the SLO.")
    limit: float | None = flag("--find-max-limit", param="find_max_limit", cli_type="float", gt=0,
                               allow_inf_nan=False, help="--find-max: highest load tried (default 512 in flight, "
                               "1000 req/s).")
    max_probes: int = flag("--find-max-probes", param="find_max_probes", cli_type="int", default=20, ge=1, le=1000,
                           help="--find-max: most probes (cells) to measure.")
    rel_tol: float = Field(default=0.1, gt=0, le=1, allow_inf_nan=False)
    search_id: str = Field("", max_length=64)
    known: list[KnownProbe] = Field(default_factory=list)


class PerplexityItem(BaseModel):
    """One perplexity measurement to make: a real model on an engine at a dtype.

    Attributes:
        model: the ``.gguf`` file or Hugging Face folder (absolute path).
        engine: ``llama.cpp``, ``transformers`` or ``vllm``.
        dtype: the engine's dtype spelling.
        weights_sha256: SHA-256 of the weights the host planned with (the worker refuses
            other weights at that path).
        key: the measurement's identity (:func:`infbench.data.scores.quality_key`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(min_length=1)
    engine: str = Field(min_length=1)
    dtype: str = Field(min_length=1)
    weights_sha256: str = ""
    key: str = ""


class PerplexityScenario(BaseModel):
    """Score one text with llama.cpp's ``llama-perplexity`` method per item
    (:mod:`infbench.quality.perplexity`).

    Attributes:
        text_path: the UTF-8 text (absolute path). text_sha256: SHA-256 of its bytes.
        n_ctx: tokens per chunk (>= 4). max_chunks: score only the first chunks (None: all).
        items: the measurements, one engine load each.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["perplexity"] = "perplexity"
    text_path: str = flag("--perplexity", param="perplexity", cli_type="path", selects=True, default=...,
                          min_length=1, help="After the cells, measure the perplexity of this text for each group "
                          "with real weights (`infbench perplexity`; stored beside the throughput).")
    text_sha256: str = ""
    n_ctx: int = flag("--ppl-n-ctx", param="ppl_n_ctx", cli_type="int", default=512, ge=4, le=1 << 20,
                      help="--perplexity: tokens per chunk.")
    max_chunks: int | None = flag("--ppl-chunks", param="ppl_chunks", cli_type="int", ge=1,
                                  help="--perplexity: score only the first N chunks.")
    items: list[PerplexityItem] = Field(default_factory=list)


class AdaptiveScenario(BaseModel):
    """Measure a designed subset of the planned cells and predict the rest
    (``infbench run --adaptive``; :mod:`infbench.analysis.adaptive`).

    Attributes:
        budget: a share of the planned cells (``25%``) or a measuring time (``10m``, ``90s``, ``1h``).
        known: results measured by an earlier worker of this sweep (``Store.results()``-like
            rows: ``cell_id``, ``status``, ``spec``, ``metrics``, ``wall_s``), which count
            against the budget and calibrate the predictions.
        objective: ``grid`` (every cell predicted well: the widest interval next) or
            ``front`` (``--preset frontier --adaptive``: the cells that can move the
            throughput-interactivity front, :mod:`infbench.analysis.adaptive`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["adaptive"] = "adaptive"
    budget: str = flag("--adaptive", param="adaptive", selects=True, default=...,
                       pattern=r"^\s*\d+(\.\d+)?\s*(%|s|m|h)\s*$",
                       help="Measure only a designed share of the planned cells (25%) or for a time (10m, 90s), grid "
                            "corners first, then the cells whose predicted interval is widest; store the rest as "
                            "`predicted` cells with 90 % intervals (never ok: a later run measures them). With "
                            "--preset frontier: each series' lowest and highest concurrency first, then the cells "
                            "that could still move the throughput-interactivity front.")
    strict: bool = flag("--adaptive-strict", param="adaptive_strict", cli_type="bool", default=False,
                        help="With --preset frontier: refuse a budget below the series' corners (each configuration's "
                             "lowest and highest concurrency) instead of raising it to them (the default, stated "
                             "before the run).")
    known: list[dict[str, Any]] = Field(default_factory=list)
    objective: Literal["grid", "front"] = "grid"


class FrontierScenario(BaseModel):
    """The frontier sweep (``infbench run --preset frontier``): each series of cells that differ
    only in concurrency (one engine configuration, one shape) is measured from the lowest
    concurrency up, and stops when a doubling adds less than ``min_gain`` of total throughput
    or a cell breaks the SLO; the cells not reached are not measured (and not stored).

    Attributes:
        min_gain: the smallest relative gain in ``total_tok_s`` a doubling must bring to go on
            (0.05: 5 %).
        stop: False measures every concurrency of every series (a sweep file's
            ``frontier_stop: false``: a reference front, as benchmarks/adaptive_frontier.py uses).
        ttft_s: the SLO's TTFT limit on the cell's p50, s (None: none).
        tpot_s: the SLO's TPOT limit on the cell's p50, s (None: none).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["frontier"] = "frontier"
    min_gain: float = Field(0.05, ge=0, le=10, allow_inf_nan=False)
    stop: bool = True
    ttft_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    tpot_s: float | None = Field(None, gt=0, allow_inf_nan=False)


#: Any scenario spec (tagged by ``kind``).
ScenarioSpec = Annotated[SweepScenario | FindMaxScenario | PerplexityScenario | AdaptiveScenario | FrontierScenario,
                         Field(discriminator="kind")]
