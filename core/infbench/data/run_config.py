"""One typed configuration of a run, from the command line to the engine and back (issue 40).

:class:`RunConfig` is what ``infbench run`` was asked to do, in parts:

* :class:`SweepPart`: the sweep's axes (models, engines, dtypes, batch, lengths, TP), the
  preset or sweep file they start from, the device, warm-up, seed, repeats, the cell limit;
* :class:`LoadPart`: the serving load (server engines only): concurrency, request rate,
  requests, datasets, traces, shared prefixes, length ranges, streaming, scraping;
* :class:`SloPart`: per-request limits (goodput, ``--find-max``, the frontier);
* :class:`EnginePart`: what the engines receive: threads, the engine process, the
  OpenAI-compatible client's flags and ``--engine-arg``; each engine gets them as its own
  typed options model (:func:`infbench.engines.options.typed_options`);
* :class:`PowerPart`: the power source and sampling, and the price of the machine;
* the executor, a tagged choice (:data:`ExecutorPart`): ``auto``, ``inprocess``,
  ``container`` or ``ray`` (``--ray-address`` and ``--load-nodes`` exist only there);
* the scenario, a tagged choice (:data:`infbench.data.scenarios.ScenarioSpec`): a sweep,
  ``--find-max`` (with ``--goodput``), ``--adaptive``, the frontier, ``--perplexity``;
* :class:`OutputPart`: the store, ``--force``, ``--dry-run``, ``--write-spec``, ``--json``.

The same model is the sweep file (a file's top-level keys that name a part are read as that
part; the others are the grid's fields, as before) and travels in the worker spec
(:class:`infbench.data.worker_spec.WorkerSpec`) to the container and Ray executors: one schema.

Every flag is declared once, on its field (:func:`infbench.data.flags.flag`: names, help,
unit, bounds); :meth:`RunConfig.from_flags` reads the command line into the model, and an
error names the flag. Numbers are bounded and finite (NaN and infinity are refused). Options
that apply only somewhere live only there (the find-max options in the find-max scenario,
the Ray options in the Ray executor); the rest say where they apply (``applies``) and are
refused elsewhere once the cells are planned (:func:`infbench.plan.applies.refuse_ignored`).
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo

from infbench.data.engine_options import parse_engine_args
from infbench.data.errors import ConfigError
from infbench.data.flags import FlagSpec, also, flag, flags_of, split_values
from infbench.data.scenarios import (
    AdaptiveScenario,
    FindMaxScenario,
    FrontierScenario,
    PerplexityScenario,
    ScenarioSpec,
    SweepScenario,
)
from infbench.data.warmup import DEFAULT_REWARM_AFTER_S, DEFAULT_WARMUP_TOL, WarmupPolicy

_short = reprlib.Repr()
_short.maxstring = 60


class Part(BaseModel):
    """A part of :class:`RunConfig`: unknown fields refused, values frozen.

    ``GRID``: the prefix its fields take among the grid's fields
    (:class:`~infbench.data.schema.Sweep`), None when they are not grid fields.
    ``PANEL``: the ``--help`` panel of its flags.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    GRID: ClassVar[str | None] = None
    PANEL: ClassVar[str | None] = None

    def given(self) -> dict[str, Any]:
        """The fields set explicitly (on the command line or in a file)."""
        return {k: getattr(self, k) for k in self.model_fields_set}


class SweepPart(Part):
    """The sweep's axes and the grid they start from (``--preset``, ``--sweep``, else the
    device's default sweep). A list holds the values of one axis; each given axis replaces the
    file's and the preset's."""

    GRID: ClassVar[str | None] = ""
    PANEL: ClassVar[str | None] = "Sweep"

    models: list[str] | None = flag("--model", "-m", param="model", cli_type="list[str]",
                                    help="Zoo name, HF id, HF folder or .gguf file. Repeat or comma list.")
    engines: list[str] | None = flag("--engine", "-e", param="engine", cli_type="list[str]",
                                     help="Engine(s): llama.cpp, transformers, vllm (batch mode); llama.cpp-server, "
                                          "vllm-server, openai (serving mode). See `infbench plugins`.")
    dtypes: list[str] | None = flag("--dtype", param="dtype", cli_type="list[str]",
                                    help="Engine dtype (f16, q8_0, bfloat16...) or class (fp16, bf16, int8).")
    batch: list[int] | None = flag("--batch", "-b", cli_type="list[int]", help="Prompts submitted together.",
                                   applies="batch_cells", where="batch mode (all prompts at once); a load "
                                   "(--concurrency, --request-rate, --trace) sets how many requests are in flight "
                                   "instead")
    input_len: list[int] | None = flag("--input-len", cli_type="list[int]", unit="tokens",
                                       help="Prompt length in tokens.")
    output_len: list[int] | None = flag("--output-len", cli_type="list[int]", unit="tokens",
                                        help="Generated tokens per request (forced).")
    tensor_parallel_size: list[int] | None = flag("--tensor-parallel-size", "--tp", param="tp", cli_type="list[int]",
                                                  help="Devices per model instance.")
    file: Path | None = flag("--sweep", param="sweep_file", cli_type="path",
                             help="YAML sweep file (fields of `Sweep`).")
    preset: str | None = flag("--preset", help="quick (the CPU's default), lib-corner (the GPUs' default), paper "
                              "(LLM-Inference-Bench grid), genz-qa, genz-chat, genz-rag, genz-summarization, "
                              "genz-codegen (GenZ use cases with SLOs). Default: the device's default sweep.")
    device: str | None = flag("--device", help="Device vendor to run on (cpu, nvidia...). Default: first "
                              "accelerator, else cpu.")
    warmup: int | None = flag("--warmup", cli_type="int", ge=0, le=1000,
                              help="Warm-up blocks per cell, exactly N (a block: the cell's batch, or 2 x concurrency "
                                   "requests, with 16 output tokens). Default: blocks until the last 3 agree "
                                   "(docs/metrics.md, steady state).")
    seed: int | None = flag("--seed", cli_type="int", help="Seed of the synthetic prompts.")
    cell_timeout_s: float | None = flag("--cell-timeout", param="cell_timeout", cli_type="float", unit="s", gt=0,
                                        help="Seconds before a cell is stopped and stored as failed.")
    repeat: int | None = flag("--repeat", cli_type="int", ge=1, le=1000,
                              help="Measure every cell N times; results give the mean and 95 % t-interval across "
                                   "repeats (`infbench results --repeats`). How many a difference of X % needs: "
                                   "docs/metrics.md#repeatability.")


class WarmupPart(Part):
    """How cells reach steady state before they are timed, and what a group's sentinel does
    when the host changed state (:class:`~infbench.data.warmup.WarmupPolicy`; docs/metrics.md,
    "Steady state"). ``--warmup N`` (the sweep's, a cell's field) runs exactly N blocks instead
    of warming up until stable."""

    PANEL: ClassVar[str | None] = "Warm-up and steady state"

    tol: float = flag("--warmup-tol", param="warmup_tol", cli_type="float", default=DEFAULT_WARMUP_TOL, gt=0, lt=1,
                      help="Warm-up until stable: how close the last 3 blocks' TPOT medians must be (a fraction; "
                           "default 0.03).")
    max_s: float | None = flag("--warmup-max-s", param="warmup_max_s", cli_type="float", unit="s", gt=0, le=1e6,
                               help="Warm-up until stable: at most this many seconds per cell, then the cell is "
                                    "flagged not-warm. Default: 30 on a CPU, 120 on an accelerator.")
    rewarm_after_s: float = flag("--rewarm-after-s", cli_type="float", unit="s", default=DEFAULT_REWARM_AFTER_S, ge=0,
                                 le=1e7, help="A cell starting this many seconds after the engine last ran warms up "
                                              "until stable again (default 60).")
    remeasure: bool = flag("--remeasure/--no-remeasure", param="remeasure", cli_type="bool", default=True,
                           help="When a group's sentinel shows the host changed state, measure the cells taken in "
                                "the slower state again as new attempts (default); --no-remeasure flags them "
                                "(drift) only.")

    def policy(self) -> WarmupPolicy:
        """The :class:`~infbench.data.warmup.WarmupPolicy` the engine session applies."""
        return WarmupPolicy(tol=self.tol, max_s=self.max_s, rewarm_after_s=self.rewarm_after_s,
                            remeasure=self.remeasure)

    @classmethod
    def of(cls, policy: WarmupPolicy) -> WarmupPart:
        """The part of a policy, only its fields that differ from the defaults given."""
        want = {"tol": policy.tol, "max_s": policy.max_s, "rewarm_after_s": policy.rewarm_after_s,
                "remeasure": policy.remeasure}
        return cls(**{k: v for k, v in want.items() if v != cls.model_fields[k].default})


class LoadPart(Part):
    """The serving load of server engines (serving mode), and its workload: datasets,
    traces, shared prefixes, length ranges, streaming."""

    GRID: ClassVar[str | None] = ""
    PANEL: ClassVar[str | None] = "Serving load (server engines)"

    concurrency: list[int] | None = flag("--concurrency", "-c", cli_type="list[int]",
                                         help="Serving mode: requests kept in flight (server engines).")
    request_rate: list[float] | None = flag("--request-rate", "-r", cli_type="list[float]", unit="1/s",
                                            help="Serving mode: mean arrivals per s (Poisson; see --burstiness).")
    burstiness: float | None = flag("--burstiness", cli_type="float", gt=0, applies="rate_cells",
                                    where="--request-rate loads (the gamma shape of their arrivals)",
                                    help="Gamma shape of inter-arrival times: 1 = Poisson, <1 burstier.")
    num_requests: int | None = flag("--num-requests", "-n", cli_type="int", ge=1, applies="load_cells",
                                    where="serving loads of a server engine (--concurrency, --request-rate, --trace)",
                                    help="Serving mode: timed requests per cell.")
    duration_s: float | None = flag("--duration", param="duration", cli_type="float", unit="s", gt=0,
                                    applies="load_cells", where="serving loads of a server engine (--concurrency, "
                                    "--request-rate, --trace)",
                                    help="Serving mode: seconds to offer requests per cell.")
    warmup_requests: int | None = flag("--warmup-requests", cli_type="int", ge=0, applies="server_cells",
                                       where="serving cells of a server engine (e.g. --engine llama.cpp-server)",
                                       help="Serving mode: untimed requests first (default 1).")
    request_timeout_s: float | None = flag("--request-timeout", param="request_timeout", cli_type="float", unit="s",
                                           gt=0, applies="server_cells", where="serving cells of a server engine "
                                           "(e.g. --engine llama.cpp-server)",
                                           help="Serving mode: per-request limit in s (default 600); a request past "
                                                "it is stored as failed, and a cell stops offering requests once as "
                                                "many have timed out as are in flight with none completed.")
    dataset: Path | None = flag("--dataset", cli_type="path",
                                help="Serving mode: replay chat conversations from a JSONL file (OpenAI messages, "
                                     "ShareGPT or LMSYS); each request's output is forced to its dropped final "
                                     "assistant turn's length.")
    dataset_min_input_len: int | None = Field(None, ge=0)
    dataset_max_input_len: int | None = flag("--max-input-len", param="max_input_len", cli_type="int", ge=1,
                                             unit="tokens", help="--dataset: skip conversations whose prompt is "
                                             "longer (tokens; default 1024).")
    dataset_min_output_len: int | None = Field(None, ge=1)
    dataset_max_output_len: int | None = flag("--max-output-len", param="max_output_len", cli_type="int", ge=1,
                                              unit="tokens", help="--dataset: skip conversations whose final "
                                              "assistant turn is longer (tokens; default 1024).")
    trace: Path | None = flag("--trace", cli_type="path",
                              help="Serving mode: replay a request trace at its own timing: Mooncake JSONL "
                                   "(timestamp ms, input_length, output_length, hash_ids: equal ids give identical "
                                   "512-token prompt blocks) or the Azure LLM inference CSV (TIMESTAMP, "
                                   "ContextTokens, GeneratedTokens). Output lengths are forced; "
                                   "--num-requests/--duration cut it; --concurrency caps it.")
    trace_speed: list[float] | None = flag("--trace-speed", cli_type="list[float]",
                                           help="--trace: time compression, 2 = twice as fast; a list sweeps it "
                                                "(default 1).")
    multi_turn: bool | None = flag("--multi-turn", cli_type="bool",
                                   help="--dataset: replay each conversation turn by turn as a session, each user "
                                        "turn sent after the server's own answer (TTFT per turn index); "
                                        "--num-requests then counts sessions, --concurrency sessions in flight.")
    think_time_s: float | None = flag("--think-time", param="think_time", cli_type="float", unit="s", ge=0,
                                      help="--multi-turn: seconds between an answer and the next user turn.")
    prefix_len: int | None = flag("--prefix-len", cli_type="int", ge=1, unit="tokens",
                                  help="Serving mode: synthetic prompts start with one of --num-prefixes shared "
                                       "prefixes of this many tokens (a system prompt reused across requests; part "
                                       "of --input-len).")
    num_prefixes: int | None = flag("--num-prefixes", cli_type="int", ge=1,
                                    help="--prefix-len: distinct shared prefixes (default 1).")
    len_range: float | None = flag("--len-range", cli_type="float", gt=0, lt=1,
                                   help="Serving mode: draw each synthetic request's input and output lengths, "
                                        "uniform integers, around --input-len and --output-len: with R = 0.8, from "
                                        "[0.8 L, L] (InferenceX's --random-range-ratio; vLLM's current one with "
                                        "--len-range-convention vllm). Each request's output is still forced to its "
                                        "own length.")
    len_range_convention: Literal["inferencex", "vllm"] | None = flag(
        "--len-range-convention", help="--len-range: inferencex (default: [floor(R L), L], vLLM <= 0.8 and "
        "InferenceX) or vllm ([floor(L (1-R)), ceil(L (1+R))], vLLM's random dataset today).")
    stream: bool | None = flag("--no-stream", param="no_stream", cli_type="bool", negate=True,
                               help="Serving mode: non-streaming requests; E2E and throughput only (TTFT, TPOT and "
                                    "ITL are not measured).")
    tokenizer: str | None = flag("--tokenizer", help="Serving mode: a tokenizer folder or a Hugging Face id in the "
                                 "local cache, for text prompts of exact token counts against any endpoint; the "
                                 "server's usage stays the authority, mismatches are reported.")
    scrape_interval_s: float = flag("--scrape-interval", param="scrape_interval", cli_type="float", default=1.0,
                                    unit="s", ge=0, le=3600, applies="server_cells",
                                    where="serving cells of a server engine (e.g. --engine llama.cpp-server)",
                                    help="Seconds between scrapes of a server engine's Prometheus /metrics (0: off).")

    @model_validator(mode="after")
    def _dataset_filter(self) -> LoadPart:
        if self.dataset is None:
            given = [f for f in ("dataset_max_input_len", "dataset_max_output_len") if getattr(self, f) is not None]
            if given:
                raise ConfigError("option(s) that would do nothing in this run: " + "; ".join(
                    f"{flag_name(LoadPart, f)} applies to --dataset FILE (its length filter)" for f in given),
                    hint="drop them, or add what they apply to")
        return self


class SloPart(Part):
    """Per-request limits in s: each cell gets ``goodput_req_s``; ``--find-max`` searches
    for the highest load meeting them; the frontier stops a series that breaks them."""

    GRID: ClassVar[str | None] = "slo_"
    PANEL: ClassVar[str | None] = "SLO"

    ttft_s: float | None = flag("--slo-ttft", param="slo_ttft", cli_type="float", unit="s", gt=0,
                                help="TTFT limit (s) for goodput.",
                                also=(also("--slo-ttft-ms", param="slo_ttft_ms", cli_type="float", scale=1e-3,
                                           unit="ms", help="TTFT limit per request in ms (goodput, --find-max)."),))
    tpot_s: float | None = flag("--slo-tpot", param="slo_tpot", cli_type="float", unit="s", gt=0,
                                help="TPOT limit (s) for goodput.",
                                also=(also("--slo-tpot-ms", param="slo_tpot_ms", cli_type="float", scale=1e-3,
                                           unit="ms", help="TPOT limit per request in ms (goodput, --find-max)."),))
    e2e_s: float | None = flag("--slo-e2e", param="slo_e2e", cli_type="float", unit="s", gt=0,
                               help="E2E limit (s) for goodput.")

    def as_dict(self) -> dict[str, float] | None:
        """The limits given, ``{"ttft_s", "tpot_s", "e2e_s"}`` in s, or None."""
        d = {k: v for k, v in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s), ("e2e_s", self.e2e_s))
             if v is not None}
        return d or None


class EnginePart(Part):
    """What the engines receive. Each engine gets these as its own options model
    (:func:`infbench.engines.options.typed_options`: ``--threads`` as ``n_threads``, the
    client's flags as the OpenAI options, ``--engine-arg`` checked against its fields)."""

    GRID: ClassVar[str | None] = "engine_"
    PANEL: ClassVar[str | None] = "Engine"

    threads: int | None = flag("--threads", cli_type="int", cli_min=1, ge=1, le=4096,
                               help="CPU threads for the engine.")
    process: bool = flag("--engine-process/--no-engine-process", param="engine_process", cli_type="bool",
                         default=True, help="Run in-process engines (transformers, llama.cpp, vLLM's LLM...) in a "
                         "process of their own, apart from infbench's samplers and display (default). "
                         "--no-engine-process measures them beside infbench's threads, as before, and flags their "
                         "cells suspect: for diagnosis only.")
    base_url: str | None = flag("--base-url", applies="reads:base_url",
                                help="--engine openai: the server, e.g. http://127.0.0.1:8000/v1. Credentials in it "
                                     "(user:password@, ?api_key=) are used to connect but never stored or printed.")
    api_key_env: str | None = flag("--api-key-env", applies="reads:api_key_env",
                                   help="Name of the environment variable holding the API key (never stored).")
    endpoint: str | None = flag("--endpoint", applies="reads:endpoint", help="completions (default) or chat.")
    served_model_name: str | None = flag("--served-model-name", applies="reads:served_model",
                                         help="Model name sent to the server (default: --model).")
    prompt_format: str | None = flag("--prompt-format", applies="reads:prompt_format",
                                     help="token_ids (exact lengths, zoo model served with dummy weights) or text.")
    args: dict[str, Any] | None = flag("--engine-arg", param="engine_arg", cli_type="list[str]",
                                       help="KEY=VALUE passed to the engine as its own argument (vLLM: any EngineArgs "
                                            "name, e.g. quantization=fp8, gpu_memory_utilization=0.85). Repeat for "
                                            "more.")
    configs: list[dict[str, Any]] | None = Field(None, min_length=1, max_length=64)

    def named(self) -> dict[str, Any]:
        """The named flags as engine option names (``n_threads``, ``served_model``...), the
        ones given."""
        d = {"n_threads": self.threads, "base_url": self.base_url, "api_key_env": self.api_key_env,
             "endpoint": self.endpoint, "served_model": self.served_model_name, "prompt_format": self.prompt_format}
        return {k: v for k, v in d.items() if v is not None}


class PowerPart(Part):
    """Where the energy comes from (the device's sampler, or a command or a constant of
    yours), how often it is read, and the price of the machine."""

    PANEL: ClassVar[str | None] = "Power and cost"

    interval_s: float = flag("--power-interval", param="power_interval", cli_type="float", default=0.1, unit="s",
                             gt=0, le=3600, help="Power sampling interval (s).")
    command: str | None = flag("--power-command", param="power_command",
                               help="Replace the device's power sampler by a shell command that prints watts (a PDU or "
                                    "BMC reading); energy is then labelled user-supplied.")
    watts: float | None = flag("--power-watts", param="power_watts", cli_type="float", unit="W", gt=0, le=1e7,
                               help="Replace the device's power sampler by a declared constant power in W (not "
                                    "measured; labelled so).")
    label: str | None = flag("--power-label", param="power_label",
                             help="What --power-command/--power-watts covers, stored with the energy (e.g. "
                                  "'rack PDU, 8 nodes').")
    price_per_hour: float | None = flag("--price-per-hour", cli_type="float", unit="USD/h", ge=0,
                                        help="USD per hour of the measured machine: every cell gets usd_per_mtok (USD "
                                             "per million output tokens).")

    @model_validator(mode="after")
    def _label_needs_source(self) -> PowerPart:
        if self.label is not None and self.command is None and self.watts is None:
            raise ConfigError("option(s) that would do nothing in this run: --power-label applies to --power-command "
                              "or --power-watts (what their readings cover)",
                              hint="drop them, or add what they apply to")
        return self

    def user_source(self) -> bool:
        """Whether a power source of the user's replaces the device's sampler."""
        return self.command is not None or self.watts is not None


_EXECUTOR = flag("--executor", param="executor", selects=True, default="auto",
                 help="auto (default), inprocess, container (the plugin's worker image) or ray. auto: in-process on "
                      "the CPU, the image on vendor hardware when a container runtime is present.")
_RUNTIME = flag("--container-runtime", param="container_runtime",
                help="--executor container: docker or apptainer (default: Docker when an engine answers). With "
                     "--executor ray: run each group in the plugin's image with this runtime on its node (default: "
                     "in-process there).")


class AutoExecutor(Part):
    """``--executor auto`` (the default): in-process on the CPU and for endpoints, the
    plugin's worker image on vendor hardware when a container runtime answers."""

    PANEL: ClassVar[str | None] = "Executor"
    kind: Literal["auto"] = _EXECUTOR
    container_runtime: Literal["docker", "apptainer"] | None = _RUNTIME


class InProcessExecutor(Part):
    """``--executor inprocess``: every cell in this process."""

    PANEL: ClassVar[str | None] = "Executor"
    kind: Literal["inprocess"] = "inprocess"


class ContainerExecutor(Part):
    """``--executor container``: every group in the plugin's worker image."""

    PANEL: ClassVar[str | None] = "Executor"
    kind: Literal["container"] = "container"
    container_runtime: Literal["docker", "apptainer"] | None = _RUNTIME


class RayExecutor(Part):
    """``--executor ray``: the groups spread over a Ray cluster's nodes; or, with
    ``--load-nodes`` on another executor (``groups: here``), the cells measured here and
    their serving load sent from the cluster's nodes.

    Attributes:
        address: the cluster (``HOST:PORT`` of its head; None: ``$RAY_ADDRESS``).
        load_nodes: nodes each serving cell's load is sent from (0: every alive node).
        groups: ``nodes`` (each group on a node with its device), or the executor that
            measures the cells here while their load comes from the nodes (``auto``,
            ``inprocess``: ``--load-nodes`` without ``--executor ray``).
    """

    PANEL: ClassVar[str | None] = "Executor"
    kind: Literal["ray"] = "ray"
    container_runtime: Literal["docker", "apptainer"] | None = _RUNTIME
    address: str | None = flag("--ray-address", param="ray_address",
                               help="--executor ray: the Ray cluster (HOST:PORT of the head; default $RAY_ADDRESS). "
                                    "With it, --device takes device types of the fleet: a comma list, or all.")
    load_nodes: int | None = flag("--load-nodes", cli_type="int", ge=0, le=100_000, applies="spread_cells",
                                  where="serving loads (--concurrency, --request-rate, --trace) sent from Ray nodes",
                                  help="Send each serving cell's load from N nodes of the Ray cluster (--ray-address "
                                       "or $RAY_ADDRESS), merged into one cell: a rate as N Poisson streams, a "
                                       "concurrency in N shares, a trace by request (docs/cluster.md).")
    groups: Literal["nodes", "auto", "inprocess"] = "nodes"


#: Where the cells run (tagged by ``kind``).
ExecutorPart = Annotated[AutoExecutor | InProcessExecutor | ContainerExecutor | RayExecutor,
                         Field(discriminator="kind")]
#: ``--runtime`` (deprecated) -> (executor, container runtime).
RUNTIME_ALIASES = {"auto": ("auto", None), "none": ("inprocess", None), "docker": ("container", "docker"),
                   "apptainer": ("container", "apptainer")}
#: The deprecated ``--runtime`` flag (read by :meth:`RunConfig.from_flags` into the executor).
RUNTIME_FLAG = FlagSpec(("--runtime",), "Deprecated: use --executor (none = inprocess, docker/apptainer = container).",
                        param="runtime", hidden=True, panel="Executor")


class OutputPart(Part):
    """Where results go and what to do with the plan."""

    PANEL: ClassVar[str | None] = "Output"

    store: Path | None = flag("--store", param="store_path", cli_type="path",
                              help="Results database. Default: $INFBENCH_HOME/results.db (~/.infbench).")
    force: bool = flag("--force", cli_type="bool", default=False, help="Measure cells again even if stored ok.")
    dry_run: bool = flag("--dry-run", cli_type="bool", default=False, help="Print the planned cells and exit.")
    write_spec: Path | None = flag("--write-spec", cli_type="path",
                                   help="Write the planned cells as a worker spec (for `infbench worker --spec FILE "
                                        "--out DIR` elsewhere, then `infbench ingest DIR`) and exit.")
    as_json: bool = flag("--json", param="as_json", cli_type="bool", default=False,
                      help="Print a JSON summary instead of tables.")


#: The parts of :class:`RunConfig`, in the order of ``infbench run --help``'s panels.
PARTS = ("sweep", "warmup", "load", "slo", "engine", "power", "executor", "scenario", "output")


class RunConfig(BaseModel):
    """Everything a run was asked to do, in typed parts (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sweep: SweepPart = Field(default_factory=SweepPart)
    warmup: WarmupPart = Field(default_factory=WarmupPart)
    load: LoadPart = Field(default_factory=LoadPart)
    slo: SloPart = Field(default_factory=SloPart)
    engine: EnginePart = Field(default_factory=EnginePart)
    power: PowerPart = Field(default_factory=PowerPart)
    executor: ExecutorPart = Field(default_factory=AutoExecutor)
    scenario: ScenarioSpec = Field(default_factory=SweepScenario)
    output: OutputPart = Field(default_factory=OutputPart)

    @model_validator(mode="after")
    def _warmup_applies(self) -> RunConfig:
        """The warm-up options that would do nothing: the until-stable ones beside ``--warmup N``,
        ``--no-remeasure`` in a search (which only flags a drifted cell)."""
        given, problems = self.warmup.model_fields_set, []
        if self.sweep.warmup is not None:
            # given and not the default: a worker spec carries every field, defaults included
            problems += [f"{flag_name(WarmupPart, f)} applies to the warm-up until stable (the default); --warmup N "
                         "runs exactly N blocks" for f in ("tol", "max_s")
                         if f in given and getattr(self.warmup, f) != WarmupPart.model_fields[f].default]
        search = getattr(self.scenario, "kind", "sweep") in ("find_max", "adaptive", "frontier") \
            or self.sweep.preset == "frontier"
        if "remeasure" in given and not self.warmup.remeasure and search:
            problems.append("--no-remeasure applies to a plain sweep, whose sentinel measures a drifted cell again; a "
                            "search (--find-max, --adaptive, the frontier) only flags it")
        if problems:
            raise ConfigError("option(s) that would do nothing in this run: " + "; ".join(problems),
                              hint="drop them, or add what they apply to")
        return self

    # -- reading the command line ---------------------------------------------------------
    @classmethod
    def from_flags(cls, values: dict[str, Any], notes: list[str] | None = None) -> RunConfig:
        """The configuration of ``infbench run``'s flags: ``values`` by parameter name
        (:func:`flag_table`), as the command line parsed them; a value equal to its default
        is "not given".

        Raises:
            ConfigError: a bad value (naming the flag, what it got and what it takes), two
                flags that cannot go together, or an option given where it does nothing.
        """
        parts: dict[str, dict[str, Any]] = {}
        given: dict[str, Flag] = {}
        for f in flag_table():
            raw = values.get(f.param)
            if f.spec.cli_type == "bool":
                if raw is None or bool(raw) == (f.info.default if isinstance(f.info.default, bool) else False):
                    continue
            elif raw is None or raw == [] or (f.default is not None and raw == f.default):
                continue
            given[f.param] = f
        _refuse_together(given)
        problems: list[str] = []
        ex_kind, runtime = _executor_kind(values, given, notes)
        sc_kind = _scenario_kind(given)
        for f in given.values():
            if f.part == "executor":
                if f.field in ("kind", "runtime"):
                    continue
                if f.variant is not None and ex_kind not in f.variants:
                    problems.append(f"{f.spec.name} applies to {_EX_WHERE.get(f.field, '--executor ray')}")
                    continue
            if f.part == "scenario" and f.variants and sc_kind not in f.variants:
                problems.append(f"{f.spec.name} applies to {_SCENARIO_WHERE[f.variants[0]]}")
                continue
            parts.setdefault(f.part, {})[f.field] = f.read(values[f.param])
        if problems:
            raise ConfigError("option(s) that would do nothing in this run: " + "; ".join(problems),
                              hint="drop them, or add what they apply to")
        ex = parts.setdefault("executor", {})
        if runtime is not None and "container_runtime" not in ex:
            ex["container_runtime"] = runtime
        ex["kind"] = ex_kind
        if ex_kind == "ray" and (values.get("executor") or "auto") != "ray":
            ex["groups"] = values.get("executor") or "auto"  # --load-nodes elsewhere: cells here, load from nodes
        if "load_nodes" in given and values["load_nodes"] < 1:
            raise ConfigError(f"--load-nodes: input should be greater than or equal to 1 (got {values['load_nodes']})",
                              hint="see `infbench run --help` for --load-nodes")
        parts.setdefault("scenario", {})["kind"] = sc_kind
        return cls.checked(parts)

    @classmethod
    def checked(cls, doc: dict[str, Any]) -> RunConfig:
        """:meth:`model_validate` with the first problem as a :class:`ConfigError` naming its flag.

        Raises:
            ConfigError: the first invalid value.
        """
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            e = exc.errors()[0]
            name = _flag_at(tuple(str(x) for x in e["loc"]))
            got = _short.repr(e.get("input"))
            msg = e["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{name}: {msg[:1].lower()}{msg[1:]} (got {got})" if name else msg,
                              hint=f"see `infbench run --help` for {name}" if name else None) from None

    def with_file(self, doc: dict[str, Any]) -> RunConfig:
        """This configuration under a sweep file's parts (``doc``: the file's keys that name a
        part): a field the command line set wins over the file's; a tagged part (executor,
        scenario) is the command line's when it chose one (``--executor ray``, ``--find-max``),
        else the file's.

        Raises:
            ConfigError: an invalid part in the file.
        """
        merged: dict[str, Any] = {}
        for name in PARTS:
            mine = getattr(self, name)
            own = mine.model_dump(exclude_unset=True)
            part = doc.get(name)
            theirs: dict[str, Any] = part if isinstance(part, dict) else {}
            kind = getattr(mine, "kind", None)
            if kind is None:
                merged[name] = {**theirs, **own}
            elif kind in ("auto", "sweep") and theirs:
                merged[name] = theirs if set(own) <= {"kind"} else {**theirs, **own, "kind": theirs.get("kind", kind)}
            else:
                merged[name] = {**own, "kind": kind}
        return RunConfig.checked(merged)

    # -- what the plan is built from --------------------------------------------------------
    def grid_fields(self) -> dict[str, Any]:
        """The grid's fields (:class:`~infbench.data.schema.Sweep`) this configuration sets:
        each part's given fields under its prefix (the SLO's ``ttft_s`` is the grid's
        ``slo_ttft_s``), paths as text; the sweep's ``file``, ``preset`` and ``device`` are
        not grid fields."""
        out: dict[str, Any] = {}
        for name in ("sweep", "load", "slo", "engine"):
            part = getattr(self, name)
            for k, v in part.given().items():
                if name == "sweep" and k in ("file", "preset", "device"):
                    continue
                if name == "engine" and k not in ("args", "configs"):
                    continue
                if name == "load" and k == "scrape_interval_s":
                    continue
                out[f"{part.GRID}{k}"] = str(v) if isinstance(v, Path) else v
        return out


# -- the flag table ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Flag:
    """One flag of ``infbench run``: where its value goes and how it is read.

    Attributes:
        param: the generated parameter's name.
        part, field: where the value goes (``load``, ``concurrency``).
        spec: the flag (:class:`~infbench.data.flags.FlagSpec`).
        info: the field.
        variants: for a tagged part, the ``kind`` of each variant that has the field.
        panel: its ``--help`` panel.
    """

    param: str
    part: str
    field: str
    spec: FlagSpec
    info: FieldInfo
    variants: tuple[str, ...] = ()
    panel: str = ""

    @property
    def variant(self) -> str | None:
        return self.variants[0] if self.variants else None

    @property
    def default(self) -> Any:
        """The flag's default as the command line shows it (None: not shown)."""
        if self.spec.scale is not None or self.spec.negate:
            return None
        d = self.info.default
        return d if isinstance(d, (bool, int, float, str)) and not isinstance(d, type(None)) else None

    def read(self, raw: Any) -> Any:
        """The field's value from the flag's raw value.

        Raises:
            ConfigError: a list item of the wrong kind, a malformed ``--engine-arg``.
        """
        t = self.spec.cli_type
        if t.startswith("list["):
            cast = {"list[int]": int, "list[float]": float}.get(t, str)
            items = split_values(raw, self.spec.name, cast)
            if self.field == "args":
                return parse_engine_args(raw)
            return items
        if t == "path" and self.info.annotation is str:
            return str(raw)  # a path kept as text (the perplexity scenario's, in every worker spec)
        if self.spec.negate:
            return False
        if self.spec.scale is not None:
            return raw * self.spec.scale
        return raw


def _variants(ann: Any) -> list[type[BaseModel]]:
    if get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    args = get_args(ann)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)] if args else [ann]


def _walk() -> Iterator[Flag]:
    seen: dict[str, Flag] = {}
    for part in PARTS:
        ann = RunConfig.model_fields[part].annotation
        for cls in _variants(ann):
            kind = getattr(cls.model_fields.get("kind"), "default", None)
            panel = getattr(cls, "PANEL", None) or _SCENARIO_PANEL
            for name, info in cls.model_fields.items():
                for spec in flags_of(info):
                    param = spec.param or name
                    if param in seen:
                        prev = seen[param]
                        seen[param] = Flag(param, part, name, prev.spec, prev.info,
                                           (*prev.variants, kind) if kind else prev.variants, prev.panel)
                        continue
                    seen[param] = Flag(param, part, name, spec, info, (kind,) if kind and part in
                                       ("executor", "scenario") else (), spec.panel or panel)
    yield from seen.values()


_TABLE: list[Flag] = []


def flag_table() -> list[Flag]:
    """Every flag of ``infbench run``, generated from :class:`RunConfig`'s fields, in panel
    order (the deprecated ``--runtime`` last, hidden)."""
    if not _TABLE:
        _TABLE.extend(_walk())
        _TABLE.append(Flag("runtime", "executor", "runtime", RUNTIME_FLAG, FieldInfo(default=None), (), "Executor"))
    return _TABLE


def flag_name(model: type[BaseModel], field: str) -> str:
    """The flag of ``model.field`` (``--max-input-len``), or the field's name when it has none."""
    specs = flags_of(model.model_fields[field])
    return specs[0].name if specs else field


def _flag_at(loc: tuple[str, ...]) -> str:
    """The flag of a validation error's location (``("load", "concurrency", 0)``)."""
    if not loc:
        return ""
    part = loc[0]
    rest = [x for x in loc[1:] if not x.isdigit()]
    for f in flag_table():
        if f.part == part and rest and (f.field in rest):
            return f.spec.name
    return ".".join(loc)


def _refuse_together(given: dict[str, Flag]) -> None:
    """Two flags that set the same field (``--slo-ttft`` and ``--slo-ttft-ms``)."""
    by_field: dict[tuple[str, str], list[Flag]] = {}
    for f in given.values():
        by_field.setdefault((f.part, f.field), []).append(f)
    for fs in by_field.values():
        if len(fs) > 1 and fs[0].part == "slo":
            unit = fs[0].field.removesuffix("_s")
            raise ConfigError(f"give --slo-{unit} (s) or --slo-{unit}-ms, not both")


_EX_WHERE = {"container_runtime": "cells run in worker images (--executor container, or --executor ray with images); "
                                  "here they run in this process",
             "address": "--executor ray and --load-nodes; this run uses no Ray cluster",
             "load_nodes": "serving cells on Ray: a server engine with --concurrency/--request-rate/--trace, and "
                           "--ray-address"}
_SCENARIO_WHERE = {"find_max": "--find-max (the SLO search)", "adaptive": "--adaptive",
                   "perplexity": "--perplexity TEXT (the perplexity measured after the cells)",
                   "frontier": "--preset frontier", "sweep": "a sweep"}
_SCENARIO_PANEL = "Scenario"


def _executor_kind(values: dict[str, Any], given: dict[str, Flag], notes: list[str] | None) -> tuple[str, str | None]:
    """``--executor`` (or the deprecated ``--runtime``, with a note) and the container runtime
    ``--runtime`` implies; ``ray`` when ``--load-nodes`` is given on another executor.

    Raises:
        ConfigError: both ``--executor`` and ``--runtime``, or an unknown ``--runtime``.
    """
    name, runtime = values.get("executor"), values.get("runtime")
    if runtime is not None:
        if name is not None:
            raise ConfigError("give --executor, not both --executor and --runtime (its old name)")
        if runtime not in RUNTIME_ALIASES:
            raise ConfigError(f"unknown runtime {runtime!r}", hint=f"choose one of: {', '.join(RUNTIME_ALIASES)}")
        name, rt = RUNTIME_ALIASES[runtime]
        new = f"--executor {name}" + (f" --container-runtime {rt}" if rt else "")
        if notes is not None:
            notes.append(f"--runtime {runtime} is deprecated; it means `{new}`")
    else:
        rt = None
    name = name or "auto"
    if name not in ("auto", "inprocess", "container", "ray"):
        raise ConfigError(f"--executor: input should be 'auto', 'inprocess', 'container' or 'ray' (got {name!r})",
                          hint="see `infbench run --help` for --executor")
    if "load_nodes" in given and name in ("auto", "inprocess"):
        if "container_runtime" in given and name == "auto":
            pass
        return "ray", rt
    return name, rt


def _scenario_kind(given: dict[str, Flag]) -> str:
    """The scenario the flags select: ``--find-max``, ``--adaptive`` or ``--perplexity``
    (at most one), else a sweep.

    Raises:
        ConfigError: two of them.
    """
    chosen = [f for f in given.values() if f.part == "scenario" and f.spec.selects]
    if len(chosen) > 1:
        names = {f.variant for f in chosen}
        if names == {"adaptive", "find_max"}:
            raise ConfigError("--adaptive and --find-max are two ways of choosing what to measure; give one")
        raise ConfigError(f"{' and '.join(f.spec.name for f in chosen)} are two scenarios of a run; give one",
                          hint="run them one after the other on the same store")
    return chosen[0].variant if chosen else "sweep"  # type: ignore[return-value]


__all__ = ["PARTS", "RUNTIME_ALIASES", "AdaptiveScenario", "AutoExecutor", "ContainerExecutor", "EnginePart",
           "ExecutorPart", "FindMaxScenario", "Flag", "FrontierScenario", "InProcessExecutor", "LoadPart",
           "OutputPart", "PerplexityScenario", "PowerPart", "RayExecutor", "RunConfig", "SloPart", "SweepPart",
           "flag_name", "flag_table", "split_values"]
