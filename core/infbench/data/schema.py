"""Data shapes shared by the core, the plugins and the results store (pydantic v2).

These models are the plugin contract's vocabulary: a plugin returns :class:`DeviceInfo`
from its detect hook, the core plans :class:`Cell` objects from a :class:`Sweep`, an
engine returns one :class:`RequestRecord` per request, and the store keeps a
:class:`CellResult` per cell. Times are integers from ``time.perf_counter_ns()``
(one clock per process, docs/metrics.md) unless a field name says otherwise.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from infbench.data.prompts import len_bounds

#: Precision classes, independent of how an engine spells its dtype. Device plugins
#: report these from ``infbench_supported_precisions``; engines map their own dtype
#: names onto them (llama.cpp ``f16`` and transformers ``float16`` are both ``fp16``).
PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
Precision = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4"]


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` to JSON with sorted keys and no whitespace (stable for hashing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def engine_args_label(args: Any) -> str:
    """Engine arguments (a cell's ``engine_args``) as ``n_ubatch=4 extra_body={"top_k":5}``:
    sorted by name, structures as compact JSON; empty for None, ``{}`` or a non-dict."""
    if not isinstance(args, dict):
        return ""
    return " ".join(f"{k}={v if isinstance(v, str) else canonical_json(v)}" for k, v in sorted(args.items()))


def short_hash(obj: Any, n: int = 16) -> str:
    """First ``n`` hex digits of the SHA-256 of :func:`canonical_json` of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:n]


class DeviceInfo(BaseModel):
    """A group of identical devices one plugin sees on this host.

    Attributes:
        vendor: short vendor key, the plugin's name by convention (``cpu``, ``nvidia``, ``amd``...).
        kind: ``cpu``, ``gpu``, ``accelerator`` (Gaudi, ...) or ``remote`` (an API endpoint).
        model: marketing name as the driver reports it (``NVIDIA H100 80GB HBM3``).
        count: number of identical devices (GPUs, CPU sockets).
        memory_bytes: memory per device in bytes (host RAM for the CPU), if known.
        driver: driver or firmware version string, if known.
        pci_ids: PCI addresses (``0000:17:00.0``) of the devices, if any.
        plugin: name of the plugin that reported it (filled by the core).
        properties: anything else the plugin knows (ISA flags, compute capability, UUIDs...).
    """

    model_config = ConfigDict(extra="forbid")

    vendor: str
    kind: Literal["cpu", "gpu", "accelerator", "remote"]
    model: str
    count: int = Field(1, ge=1)
    memory_bytes: int | None = None
    driver: str | None = None
    pci_ids: list[str] = Field(default_factory=list)
    plugin: str = ""
    properties: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        """Short selector used by ``--device``: the vendor (``cpu``, ``nvidia``...)."""
        return self.vendor

    def signature(self) -> dict[str, Any]:
        """The part of the device that identifies a measurement: vendor, model, count."""
        return {"vendor": self.vendor, "model": self.model, "count": self.count}

    def label(self) -> str:
        """``nvidia NVIDIA H100 80GB HBM3``: the vendor key and the model, as messages name a device."""
        return f"{self.vendor} {self.model}"


#: Most devices one group may hold (the largest tensor-parallel degree a sweep takes).
MAX_DEVICE_COUNT = 65_536
#: Most memory one device may have, bytes (10^6 GiB, as for the device catalog).
MAX_DEVICE_MEMORY_BYTES = 2**50


def impossible_device(d: DeviceInfo) -> str | None:
    """Why a detected device group cannot be real, or None: a count below 1 or above
    :data:`MAX_DEVICE_COUNT`, memory of 0 bytes or less or above
    :data:`MAX_DEVICE_MEMORY_BYTES` (issue 41: a plugin's detect reported 10^12 devices
    with memory -1 and "conformed")."""
    if not isinstance(d.count, int) or not 1 <= d.count <= MAX_DEVICE_COUNT:
        return f"{d.label()}: a count of {d.count} (a group holds 1 to {MAX_DEVICE_COUNT:,} devices)"
    m = d.memory_bytes
    if m is not None and (not isinstance(m, int) or not 0 < m <= MAX_DEVICE_MEMORY_BYTES):
        return f"{d.label()}: memory_bytes {m} (a device has more than 0 and at most 2^50 bytes; None when unknown)"
    return None


class PowerReading(BaseModel):
    """One reading of a power sampler, for one device.

    Attributes:
        t_ns: ``perf_counter_ns`` when the reading was taken.
        device_index: index of the device (or CPU package) within its group.
        power_w: instantaneous (or driver-averaged) power in W, if the source gives it.
        energy_j: cumulative energy counter in J, if the source has one (preferred).
        energy_range_j: value at which ``energy_j`` wraps around to 0 (RAPL
            ``max_energy_range_uj``), or None if it never wraps.
    """

    t_ns: int
    device_index: int = 0
    power_w: float | None = None
    energy_j: float | None = None
    energy_range_j: float | None = None


class ChannelReading(BaseModel):
    """Extra telemetry of one device, read with its power (``PowerSampler.read_channels``;
    plugin contract 1.5).

    Attributes:
        t_ns: ``perf_counter_ns`` when the reading was taken.
        device_index: index of the device (or CPU package; 0 = the whole CPU) within its group.
        values: channel name -> value, in the units the name carries
            (:data:`infbench.measure.telemetry.CHANNELS`: ``util_pct``, ``mem_util_pct``,
            ``clock_mhz``, ``mem_clock_mhz``, ``temp_c``, ``mem_temp_c``); a channel the
            device cannot read is left out, not set to 0.
        throttle: names of the clock-limiting reasons active now, as the vendor names them
            (NVML ``sw_power_cap``, ``hw_thermal_slowdown``...); empty when none is.
    """

    t_ns: int
    device_index: int = 0
    values: dict[str, float] = Field(default_factory=dict)
    throttle: list[str] = Field(default_factory=list)


class Load(BaseModel):
    """How requests are offered to a server engine (serving mode; docs/metrics.md).

    Attributes:
        mode: ``batch`` (all requests at once), ``concurrency`` (a fixed number in
            flight), ``rate`` (arrivals at ``request_rate`` per s, Poisson, or gamma
            with ``burstiness``) or ``trace`` (each request released at its time in the
            cell's :class:`Trace`, divided by ``trace_speed``).
        concurrency: requests in flight (mode ``concurrency``; optional cap in ``rate``
            and ``trace``). With multi-turn sessions: sessions in flight.
        request_rate: mean arrivals per s (mode ``rate``).
        burstiness: gamma shape of the inter-arrival times; 1.0 is Poisson, < 1 burstier
            (vLLM ``benchmarks/serve.py`` semantics).
        num_requests: timed requests to send.
        duration_s: stop offering new requests after this many seconds.
        warmup_requests: untimed requests sent first, excluded from the figures (and, in
            ``trace`` mode, from the trace's timing).
        timeout_s: per-request limit in s; a request past it is stored as failed (None:
            :data:`infbench.measure.loadgen.DEFAULT_REQUEST_TIMEOUT_S`).
        trace_speed: mode ``trace``: 2.0 replays the trace twice as fast, 0.5 at half speed.
        stream: False sends non-streaming requests (E2E and throughput only; TTFT, TPOT
            and ITL are not measured). None (the default) streams; True is stored as None.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["batch", "concurrency", "rate", "trace"] = "concurrency"
    concurrency: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0)
    burstiness: float = Field(1.0, gt=0)
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    warmup_requests: int = Field(0, ge=0)
    timeout_s: float | None = Field(None, gt=0)
    trace_speed: float | None = Field(None, gt=0)
    stream: bool | None = None

    @field_validator("stream")
    @classmethod
    def _stream_default(cls, v: bool | None) -> bool | None:
        return None if v is True else v

    @model_validator(mode="after")
    def _trace_speed_only_for_traces(self) -> Load:
        if self.mode != "trace" and self.trace_speed is not None:
            raise ValueError("trace_speed applies to mode 'trace' only")
        return self

    def label(self) -> str:
        """``c16``, ``r2.5``, ``trace x2``, ``batch`` (``nostream`` appended for non-streaming)."""
        return load_label(self.model_dump())


def load_label(load: dict[str, Any] | None) -> str:
    """The label of a load given as a stored dict (``Load.model_dump()``; tolerant of
    missing keys): ``c16``, ``r2.5 burst0.5``, ``trace x2``, ``batch``."""
    if not load:
        return "batch"
    mode = load.get("mode", "concurrency")
    if mode == "rate":
        b = load.get("burstiness", 1.0) or 1.0
        s = f"r{load.get('request_rate') or 0:g}" + (f" burst{b:g}" if b != 1 else "")
    elif mode == "trace":
        s = f"trace x{load.get('trace_speed') or 1.0:g}"
    elif mode == "concurrency":
        s = f"c{load.get('concurrency')}"
    else:
        s = "batch"
    if mode in ("rate", "trace") and load.get("concurrency"):
        s += f" c{load['concurrency']}"
    return s + (" nostream" if load.get("stream") is False else "")


class Dataset(BaseModel):
    """A conversation file replayed by a serving cell (:mod:`infbench.workloads.chat`).

    Attributes:
        path: the JSONL file.
        sha256: first 16 hex digits of its SHA-256; a changed file is a different workload.
        n: conversations sampled (timed + warm-up requests).
        min_input_len, max_input_len, min_output_len, max_output_len: the length filter
            in tokens (prompt, and the final assistant turn that sets the output length;
            with ``multi_turn``: the first turn's prompt, and every assistant turn).
        multi_turn: replay each conversation turn by turn as a session (each user turn
            sent after the server's own answer to the previous one); ``n`` then counts
            sessions. None: single-turn (the conversation up to its last assistant turn).
        think_time_s: multi-turn: pause between an answer and the next user turn (s).
        tokenizer: the tokenizer that counted lengths for the filter (``--tokenizer``;
            None: the model's own, or one token per word).
        max_total_len: multi-turn: the longest session's context at its last answer
            (tokens, with an allowance for the chat template), to size a server's context.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str
    n: int = Field(ge=1)
    min_input_len: int = Field(4, ge=0)
    max_input_len: int = Field(1024, ge=1)
    min_output_len: int = Field(4, ge=1)
    max_output_len: int = Field(1024, ge=1)
    multi_turn: bool | None = None
    think_time_s: float | None = Field(None, ge=0)
    tokenizer: str | None = None
    max_total_len: int | None = Field(None, ge=1)

    @field_validator("multi_turn")
    @classmethod
    def _single_turn_default(cls, v: bool | None) -> bool | None:
        return v or None


class Trace(BaseModel):
    """A timestamped request trace replayed by a serving cell (:mod:`infbench.workloads.trace`).

    Attributes:
        path: the trace file: Mooncake JSONL (``timestamp`` ms, ``input_length``,
            ``output_length``, ``hash_ids``) or the Azure LLM inference trace CSV
            (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``).
        sha256: first 16 hex digits of the file's SHA-256.
        format: ``mooncake`` or ``azure``.
        n: trace records replayed (the first ``n`` in time order).
        block_tokens: tokens per ``hash_ids`` block (Mooncake: 512).
        max_total_len: the longest replayed request, input + output tokens.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str
    format: Literal["mooncake", "azure"]
    n: int = Field(ge=1)
    block_tokens: int = Field(512, ge=1)
    max_total_len: int = Field(1, ge=1)


class Cell(BaseModel):
    """One point of a sweep: a workload on one engine configuration.

    A cell's identity is its canonical JSON: :meth:`spec_hash` identifies the workload
    across sites, :meth:`cell_id` adds the device so a re-run on the same hardware
    finds (and skips) a finished cell.

    Attributes:
        model: zoo name (``smollm2-135m``), HF id, or a local path (HF folder or ``.gguf``).
        engine: engine adapter name (``llama.cpp``, ``transformers``).
        dtype: the engine's own dtype name (``f16``, ``float16``, ``q8_0``...).
        batch: number of prompts submitted together (batch mode).
        input_len: prompt length in tokens.
        output_len: generated tokens per request (forced: min = max, EOS ignored).
        tensor_parallel_size: devices one model instance is split over.
        seed: seed of the synthetic prompts.
        warmup: warm-up blocks before the timed part (:mod:`infbench.data.warmup`: the cell's
            batch or load with its output shortened), excluded from the figures; None (the
            default): blocks until the engine is stable (``--warmup N``: exactly N).
        load: serving-mode load (server engines); None for in-process batch mode.
        dataset: conversations replayed instead of synthetic prompts; ``input_len`` and
            ``output_len`` are then the sample's mean lengths, each request forcing its own.
        trace: a request trace replayed (load mode ``trace``); ``input_len`` and
            ``output_len`` are the replayed records' mean lengths, each request forcing its own.
        prefix_len, num_prefixes: shared-prefix synthetic prompts: each prompt starts
            with one of ``num_prefixes`` shared prefixes of ``prefix_len`` tokens (a
            system prompt reused across requests) and ends with a unique part, for
            ``input_len`` tokens in all.
        len_range, len_range_convention: each synthetic request's input and output
            lengths drawn around ``input_len`` and ``output_len`` (``--len-range R``,
            :func:`infbench.data.prompts.len_bounds`; convention ``inferencex``
            (default, left None) or ``vllm``); None: every request exactly ``input_len``
            and ``output_len``.
        repeat: which measurement of the same workload this is (``--repeat N``: 2..N; the
            first measurement has none, so its id is that of an unrepeated cell).
        engine_args: the engine arguments that change what is measured (``--engine-arg
            n_ubatch=4``, a sweep file's ``engine_args``), as the engine's options model
            checked them and with secrets redacted (:mod:`infbench.data.engine_options`);
            None when none is given, so a cell without them keeps the id it always had.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    engine: str
    dtype: str
    batch: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    seed: int = 0
    warmup: int | None = Field(None, ge=0)
    load: Load | None = None
    dataset: Dataset | None = None
    trace: Trace | None = None
    prefix_len: int | None = Field(None, ge=1)
    num_prefixes: int | None = Field(None, ge=1)
    len_range: float | None = Field(None, gt=0, lt=1)
    len_range_convention: Literal["inferencex", "vllm"] | None = None
    repeat: int | None = Field(None, ge=2)
    engine_args: dict[str, Any] | None = None

    @field_validator("engine_args")
    @classmethod
    def _no_empty_args(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return v or None  # {} is "none given": the same id as a cell without them

    def __hash__(self) -> int:
        return hash(canonical_json(self.model_dump(mode="json")))

    @model_validator(mode="after")
    def _prefix_fits(self) -> Cell:
        if self.prefix_len is not None and self.prefix_len > self.input_len:
            raise ValueError(f"prefix_len {self.prefix_len} exceeds input_len {self.input_len}")
        if self.len_range_convention is not None and self.len_range is None:
            raise ValueError("len_range_convention applies to len_range")
        return self

    def length_bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """``((input low, high), (output low, high))`` of this cell's synthetic requests (tokens):
        ``input_len`` and ``output_len`` exactly, or their ``--len-range`` bounds."""
        if self.len_range is None:
            return (self.input_len, self.input_len), (self.output_len, self.output_len)

        conv = self.len_range_convention or "inferencex"
        return (len_bounds(self.input_len, self.len_range, conv), len_bounds(self.output_len, self.len_range, conv))

    def spec(self) -> dict[str, Any]:
        """The workload fields that define what is measured (warm-up excluded; unset
        optional fields are left out so adding one never changes existing ids)."""
        d = self.model_dump(exclude={"warmup"}, exclude_none=True)
        if not d.get("engine_args"):
            d.pop("engine_args", None)  # {} is "none given" (also on a copy that skipped validation)
        if self.load is not None:
            d["load"] = self.load.model_dump(exclude={"warmup_requests", "timeout_s"}, exclude_none=True)
        return d

    def longest(self) -> int:
        """The longest request of the cell, prompt + output tokens (to size a server's
        context): ``input_len + output_len``, or for a trace or dataset its longest record
        (a single-turn dataset: its filter's bounds)."""
        if self.trace is not None:
            return max(self.trace.max_total_len, self.input_len + self.output_len)
        if self.dataset is not None:
            d = self.dataset
            return d.max_total_len or (d.max_input_len + d.max_output_len + 16)
        (_, ih), (_, oh) = self.length_bounds()
        return ih + oh

    def spec_hash(self) -> str:
        """Stable 16-hex-digit hash of :meth:`spec`: same workload, same hash, on any site."""
        return short_hash(self.spec())

    def cell_id(self, device: DeviceInfo) -> str:
        """Stable id of this workload on this device (spec + device signature)."""
        return short_hash({"spec": self.spec(), "device": device.signature()})

    def group_key(self) -> tuple[Any, ...]:
        """Cells with the same key share one loaded model: (model, engine, dtype, tp), and
        the engine arguments in the cell's identity when it has any (an engine configuration
        of ``engine_configs`` is a server started of its own)."""
        base: tuple[Any, ...] = (self.model, self.engine, self.dtype, self.tensor_parallel_size)
        return base + (canonical_json(self.engine_args),) if self.engine_args else base

    def label(self) -> str:
        """Short human label: ``smollm2-135m llama.cpp f16 b4 i128 o64``."""
        tp = f" tp{self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else ""
        size = self.load.label() if self.load is not None and self.load.mode != "batch" else f"b{self.batch}"
        data = f" {Path(self.dataset.path).name}" if self.dataset is not None else ""
        if self.dataset is not None and self.dataset.multi_turn:
            data += " multi-turn"
        if self.trace is not None:
            data += f" {Path(self.trace.path).name}"
        if self.prefix_len:
            data += f" prefix{self.prefix_len}x{self.num_prefixes or 1}"
        if self.len_range:
            data += f" len-range{self.len_range:g}" + (f"-{self.len_range_convention}" if self.len_range_convention
                                                       else "")
        rep = f" #{self.repeat}" if self.repeat else ""
        args = f" [{self.args_label()}]" if self.engine_args else ""
        return (f"{self.model} {self.engine} {self.dtype}{tp} {size}{data} i{self.input_len} "
                f"o{self.output_len}{rep}{args}")

    def args_label(self) -> str:
        """The engine arguments as ``n_ubatch=4 extra_body={"top_k":5}`` (sorted; empty
        when none): what tells two cells of the same workload apart."""
        return engine_args_label(self.engine_args)


#: Upper bounds of a sweep's numbers: far above any real run, low enough that a typo
#: (``batch: [1e23]``) is refused before it reaches an engine or numpy.
SWEEP_LIMITS: dict[str, int | float] = {
    "batch": 1_000_000, "input_len": 10_000_000, "output_len": 10_000_000, "tensor_parallel_size": 65_536,
    "seed": 2**63 - 1, "warmup": 1_000, "cell_timeout_s": 1e7, "concurrency": 1_000_000, "request_rate": 1e6,
    "burstiness": 1e6, "num_requests": 10_000_000, "duration_s": 1e7, "warmup_requests": 1_000_000,
    "request_timeout_s": 1e7, "slo_ttft_s": 1e7, "slo_tpot_s": 1e7, "slo_e2e_s": 1e7,
    "dataset_min_input_len": 10_000_000, "dataset_max_input_len": 10_000_000, "dataset_min_output_len": 10_000_000,
    "dataset_max_output_len": 10_000_000,
}


def _as_list(v: Any) -> Any:
    if v is None:
        return v
    if isinstance(v, (str, int)):
        return [v]
    return v


class Sweep(BaseModel):
    """A grid of cells: the cartesian product of its lists (YAML or CLI flags).

    Attributes:
        models, engines, dtypes: names (see ``infbench models``, ``infbench plugins``);
            ``dtypes`` may use any engine's spelling or a precision class (``fp16``).
        batch, input_len, output_len: sizes in prompts and tokens.
        pair_lengths: pair ``input_len[i]`` with ``output_len[i]`` (both lists the same
            length) instead of crossing them: LLM-Inference-Bench's "Input Output Length"
            grid, where input = output.
        tensor_parallel_size: list of TP degrees.
        seed, warmup: copied into every cell (``warmup`` None: until stable, the default;
            an int: exactly that many warm-up blocks).
        cell_timeout_s: a cell running longer is stopped and stored as failed.
        concurrency, request_rate: serving-mode load levels (server engines only).
        burstiness, num_requests, duration_s, warmup_requests, request_timeout_s:
            the rest of each :class:`Load`.
        slo_ttft_s, slo_tpot_s, slo_e2e_s: per-request limits in s; each cell then gets
            ``goodput_req_s`` (requests meeting all of them per s, DistServe).
        dataset: a JSONL conversation file replayed instead of synthetic prompts (server
            engines); ``input_len``/``output_len`` are then ignored.
        dataset_min_input_len, dataset_max_input_len, dataset_min_output_len,
            dataset_max_output_len: its length filter in tokens.
        multi_turn: replay ``dataset`` conversations turn by turn as sessions.
        think_time_s: multi-turn: pause between an answer and the next user turn (s).
        trace: a Mooncake JSONL or Azure CSV trace replayed at its own timing (server
            engines); ``input_len``/``output_len``/``concurrency``/``request_rate`` are then
            ignored (a ``concurrency`` caps requests in flight).
        trace_speed: time compression of the trace (2 = twice as fast); a list sweeps it.
        prefix_len, num_prefixes: shared-prefix synthetic prompts (see :class:`Cell`).
        len_range, len_range_convention: per-request lengths drawn around the cell's
            (``--len-range``, see :class:`Cell`).
        stream: False sends non-streaming requests (E2E and throughput only).
        tokenizer: a tokenizer folder or a Hugging Face id in the local cache, used for
            exact prompt lengths (text prompts, the dataset filter); the server's usage
            stays the authority for counts.
        repeat: measure every cell this many times (``--repeat``); results then give the
            mean and 95 % t-interval across the repeats (:mod:`infbench.analysis.repeats`).
        engine_args: engine options by name (``--engine-arg KEY=VALUE``, which wins over the
            file's), checked against each engine's options when planned; those that change
            what is measured enter each cell's identity (:attr:`Cell.engine_args`).
        engine_configs: engine configurations to measure side by side (each a dict of engine
            arguments over ``engine_args``, for example ``[{parallel: 4}, {parallel: 16}]``):
            one group (one server start) per configuration, its arguments in its cells'
            identity. The throughput-interactivity front pools them (docs/report.md).
        frontier: the frontier sweep (``--preset frontier``, docs/report.md): serving cells
            over doubling ``concurrency``, each with ``num_requests`` = max(32, 10 x
            concurrency) (unless given) and 2 x concurrency warm-up requests; the
            :class:`~infbench.data.scenarios.FrontierScenario` stops a configuration's series
            when a doubling adds less than 5 % throughput or the SLO is broken.
        frontier_stop: False: the frontier sweep measures every concurrency of every series
            (a reference front; with ``--adaptive`` it does not apply).

    Types are strict (``batch: [true]`` or ``batch: ["4"]`` is an error, not batch 1 or
    4), numbers must be finite, and sizes have upper bounds (:data:`SWEEP_LIMITS`) so a
    typo such as ``batch: [1e23]`` is refused here instead of failing deep in an engine.

    Raises:
        pydantic.ValidationError: on unknown fields, wrong types or values out of range;
            the CLI turns it into a message that names the field and its allowed values.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    models: list[str] = Field(min_length=1)
    engines: list[str] = Field(min_length=1)
    dtypes: list[str] = Field(min_length=1)
    batch: list[int] = Field(min_length=1)
    input_len: list[int] = Field(min_length=1)
    output_len: list[int] = Field(min_length=1)
    pair_lengths: bool = False
    tensor_parallel_size: list[int] = Field(default_factory=lambda: [1])
    seed: int = Field(0, ge=0)
    warmup: int | None = Field(None, ge=0)
    cell_timeout_s: float | None = Field(None, gt=0)
    concurrency: list[int] | None = None
    request_rate: list[float] | None = None
    burstiness: float = Field(1.0, gt=0)
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    warmup_requests: int = Field(1, ge=0)
    request_timeout_s: float | None = Field(None, gt=0)
    slo_ttft_s: float | None = Field(None, gt=0)
    slo_tpot_s: float | None = Field(None, gt=0)
    slo_e2e_s: float | None = Field(None, gt=0)
    dataset: str | None = None
    dataset_min_input_len: int = Field(4, ge=0)
    dataset_max_input_len: int = Field(1024, ge=1)
    dataset_min_output_len: int = Field(4, ge=1)
    dataset_max_output_len: int = Field(1024, ge=1)
    multi_turn: bool = False
    think_time_s: float | None = Field(None, ge=0)
    trace: str | None = None
    trace_speed: list[float] | None = None
    prefix_len: int | None = Field(None, ge=1)
    num_prefixes: int | None = Field(None, ge=1)
    len_range: float | None = Field(None, gt=0, lt=1)
    len_range_convention: Literal["inferencex", "vllm"] | None = None
    stream: bool = True
    tokenizer: str | None = None
    repeat: int = Field(1, ge=1)
    engine_args: dict[str, Any] | None = None
    engine_configs: list[dict[str, Any]] | None = Field(None, min_length=1, max_length=64)
    frontier: bool = False
    frontier_stop: bool = True

    def slo(self) -> dict[str, float] | None:
        """The per-request limits for goodput (``{"ttft_s": .., "tpot_s": .., "e2e_s": ..}``)."""
        d = {k: v for k, v in (("ttft_s", self.slo_ttft_s), ("tpot_s", self.slo_tpot_s),
                               ("e2e_s", self.slo_e2e_s)) if v is not None}
        return d or None

    _coerce = field_validator(
        "models", "engines", "dtypes", "batch", "input_len", "output_len", "tensor_parallel_size",
        "concurrency", "request_rate", "trace_speed", mode="before",
    )(_as_list)

    def lengths(self) -> list[tuple[int, int]]:
        """The (input, output) token lengths of the grid: paired element-wise when
        :attr:`pair_lengths`, else every input with every output; sorted, no repeats."""
        if self.pair_lengths:
            return sorted(set(zip(self.input_len, self.output_len)))
        return sorted({(i, o) for i in self.input_len for o in self.output_len})

    @model_validator(mode="after")
    def _paired_same_length(self) -> Sweep:
        if self.pair_lengths and len(self.input_len) != len(self.output_len):
            raise ValueError(f"pair_lengths needs as many input_len as output_len values, got {self.input_len} "
                             f"and {self.output_len}")
        return self

    def loads(self) -> list[Load]:
        """Serving-mode loads: one per concurrency level and per request rate; empty when
        neither is given (server engines then run batch mode over ``batch``). With a
        ``trace``: one ``trace`` load per ``trace_speed`` (default 1), each capped by the
        first ``concurrency`` if given."""
        common = dict(num_requests=self.num_requests, duration_s=self.duration_s,
                      warmup_requests=self.warmup_requests, timeout_s=self.request_timeout_s,
                      stream=None if self.stream else False)
        if self.trace:
            cap = self.concurrency[0] if self.concurrency else None
            return [Load(mode="trace", trace_speed=x, concurrency=cap, **common) for x in self.trace_speed or [1.0]]
        if self.frontier:  # InferenceX's benchmark_lib.sh: 10 x concurrency prompts, 2 x concurrency warm-up
            out = [Load(mode="concurrency", concurrency=c, **{**common, "num_requests": self.num_requests or
                                                             max(32, 10 * c), "warmup_requests": 2 * c})
                   for c in sorted(set(self.concurrency or []))]
            return out
        out = [Load(mode="concurrency", concurrency=c, **common) for c in self.concurrency or []]
        out += [Load(mode="rate", request_rate=r, burstiness=self.burstiness, **common)
                for r in self.request_rate or []]
        return out

    @field_validator("batch", "input_len", "output_len", "tensor_parallel_size", "concurrency", "request_rate",
                     "trace_speed")
    @classmethod
    def _positive(cls, v: list[int] | None) -> list[int] | None:
        bad = [x for x in v or [] if not (x > 0 and math.isfinite(x))]  # NaN is not > 0 either
        if bad:
            raise ValueError(f"must be positive finite numbers, got {bad}")
        return v

    @field_validator("models")
    @classmethod
    def _model_names(cls, v: list[str]) -> list[str]:
        """A model is a zoo name, a Hugging Face id or a path: at most 4,096 bytes, each
        ``/``-separated part at most 255 (what a file system takes; issue 41: a longer
        name ended in ``OSError: File name too long``), without NUL or line breaks."""
        for name in v:
            raw = name.encode("utf-8", "surrogatepass")
            if not name.strip() or len(raw) > 4096 or any(len(part) > 255 for part in raw.split(b"/")) \
                    or any(c in name for c in "\0\n\r"):
                shown = name[:60] + ("..." if len(name) > 60 else "")
                raise ValueError(f"model {shown!r} is not a model name or path (empty, a NUL or line break, over "
                                 "4,096 bytes, or a part over 255 bytes)")
        return v

    @field_validator(*SWEEP_LIMITS)
    @classmethod
    def _bounded(cls, v: Any, info: Any) -> Any:
        limit = SWEEP_LIMITS[info.field_name]
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, float) and not math.isfinite(x):
                raise ValueError(f"must be a finite number, got {x}")
            if x is not None and x > limit:
                raise ValueError(f"must be at most {limit:,}, got {x:,}")
        return v


class RequestRecord(BaseModel):
    """Raw timestamps of one request (docs/metrics.md, "Raw record per request").

    Attributes:
        t_send_ns: request handed to the engine (``perf_counter_ns``).
        t_tokens_ns: arrival time of each output token; a chunk carrying k tokens
            gives k entries at its arrival time. ``len(t_tokens_ns) == n_out`` for a
            complete request.
        n_in: prompt tokens, as the engine counted them.
        n_out: generated tokens, as the engine counted them.
        n_out_source: ``engine`` (the engine's own count), ``usage`` (a server's usage
            field), ``client_tokenizer`` (a client-side re-tokenisation) or ``chunks``
            (one token per streamed text chunk); the last two are flagged estimates.
        error: why the request failed, or None.
        t_sched_ns: when the load generator released the request; ``t_send_ns -
            t_sched_ns`` is the time it waited in the client's own queue (kept apart
            from TTFT).
        server: what the server reported about the request itself (llama.cpp
            ``timings``, Cerebras ``time_info``, finish reason), if anything.

    Client-side details (serving mode; stored together, see :data:`CLIENT_FIELDS`):

    Attributes:
        streamed: False for a non-streaming request: ``t_tokens_ns`` then holds one entry,
            the arrival of the whole response, and TTFT/TPOT/ITL are not defined.
        t_first_reasoning_ns: arrival of the first reasoning token (``reasoning_content``
            / ``reasoning`` deltas, or text inside ``<think>...</think>``), if any.
        t_first_answer_ns: arrival of the first answer (non-reasoning) token, if any.
        n_reasoning: reasoning tokens among ``n_out`` (answer tokens: ``n_out -
            n_reasoning``); ``n_reasoning_source`` says whether the server's usage
            (``completion_tokens_details.reasoning_tokens``) or the streamed deltas
            (``chunks``, an estimate) gave it.
        session, turn: multi-turn replay: the session's index and the turn's (1-based).
        n_in_client: prompt tokens by the client's tokenizer (``--tokenizer``, or the
            exact length of synthetic token-id prompts), to compare with ``n_in``.
        client_node: the client node that sent it when a cell's load is spread over
            several nodes (``--load-nodes``; the node id's first 12 hex digits, the node
            listed in the cell's ``metrics["client"]["nodes"]``); None: this process.
        n_in_source: ``estimate`` when the server gave no prompt count (no ``usage``) and
            ``n_in`` is the prompt's known length (its words, or its token ids); None:
            the engine's or server's count.
        n_out_extra: tokens the server streamed beyond the request's ``max_tokens``; they
            are left out of ``n_out`` and ``t_tokens_ns`` (not counted as throughput) and
            make the cell suspect (:func:`infbench.analysis.physics.token_reasons`).
    """

    t_send_ns: int
    t_tokens_ns: list[int] = Field(default_factory=list)
    n_in: int = 0
    n_out: int = 0
    n_out_source: Literal["engine", "usage", "client_tokenizer", "chunks"] = "engine"
    error: str | None = None
    t_sched_ns: int | None = None
    server: dict[str, Any] | None = None
    streamed: bool = True
    t_first_reasoning_ns: int | None = None
    t_first_answer_ns: int | None = None
    n_reasoning: int | None = None
    n_reasoning_source: Literal["usage", "chunks"] | None = None
    session: int | None = None
    turn: int | None = None
    n_in_client: int | None = None
    client_node: str | None = None
    n_in_source: Literal["estimate"] | None = None
    n_out_extra: int | None = None

    def client(self) -> dict[str, Any] | None:
        """The client-side details that differ from their defaults (what the store keeps
        in ``requests.client``), or None."""
        d = {k: getattr(self, k) for k in CLIENT_FIELDS if getattr(self, k) != CLIENT_DEFAULTS[k]}
        return d or None


#: The :class:`RequestRecord` fields stored together as ``requests.client`` (JSON).
CLIENT_FIELDS = ("streamed", "t_first_reasoning_ns", "t_first_answer_ns", "n_reasoning", "n_reasoning_source",
                 "session", "turn", "n_in_client", "client_node", "n_in_source", "n_out_extra")
CLIENT_DEFAULTS = {k: RequestRecord.model_fields[k].default for k in CLIENT_FIELDS}


class CellResult(BaseModel):
    """What the store keeps for one attempt at one cell, ok or failed.

    Attributes:
        cell_id, spec_hash: see :class:`Cell`.
        cell: the cell spec.
        device: the device group it ran on.
        status: ``ok``, ``failed``, or ``predicted`` (not measured: the prediction an
            adaptive sweep stores for a cell it left out; never counted as measured).
        error: the error (type and message) of a failed cell.
        metrics: derived metrics (:func:`infbench.measure.derive.cell_metrics`).
        records: raw per-request records.
        power: raw power readings taken during the timed part.
        power_note: why energy is unavailable, if it is.
        telemetry: extra device channels read with the power (utilisation, clocks,
            temperature, throttle reasons), when the device's sampler has them.
        server_metrics: the server's own Prometheus view of the cell
            (:func:`infbench.measure.server_metrics.ServerMetricsScraper.result`): its
            time series and its counter and histogram deltas; None for in-process engines.
        engine: engine name and library versions (``Engine.describe()``).
        wall_s: time the harness spent on the cell (s), warm-up excluded.
        engine_s: time spent inside the engine's generate/decode calls (s).
        started_at, finished_at: UNIX times (s).
    """

    cell_id: str
    spec_hash: str
    cell: Cell
    device: DeviceInfo
    status: Literal["ok", "failed", "predicted"]
    error: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    records: list[RequestRecord] = Field(default_factory=list)
    power: list[PowerReading] = Field(default_factory=list)
    power_note: str | None = None
    telemetry: list[ChannelReading] = Field(default_factory=list)
    server_metrics: dict[str, Any] | None = None
    engine: dict[str, Any] = Field(default_factory=dict)
    wall_s: float | None = None
    engine_s: float | None = None
    started_at: float
    finished_at: float


class DeviceSpec(BaseModel):
    """Published limits of one device model, for the roofline and reports.

    Vendor plugins ship these in a ``devices.yaml`` (see :mod:`infbench.detect.devices`) and
    return them from ``infbench_device_catalog``. Figures are the vendor's datasheet
    numbers for dense math (no structured sparsity); ``sources`` says where each came from.

    Attributes:
        id: short name used on the command line (``h100-sxm``).
        name: full marketing name.
        vendor: the plugin's vendor key (``nvidia``).
        match: lower-case substrings of the model name the driver reports
            (``"h100 80gb hbm3"``); the longest match wins.
        memory_gib: memory per package in GiB (HBM capacity is binary).
        bandwidth_tb_s: peak memory bandwidth per package in TB/s (10^12 B/s).
        peak_tflops: dense peak per precision class in TFLOP/s (int8: TOPS).
        tdp_w: board/module power limit in W.
        link_bandwidth_gb_s: device-to-device bandwidth in GB/s, one direction (NVLink
            900 GB/s total is 450 each way), for the tensor-parallel all-reduce of
            ``infbench predict``; None if not described.
        devices_per_package: devices the driver shows per package (MI250: 2 GCDs);
            :meth:`per_device` divides by it.
        sources: datasheet URLs or documents.
        notes: caveats (what the TDP covers, unknown figures).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    vendor: str
    match: list[str] = Field(default_factory=list)
    memory_gib: float | None = None
    bandwidth_tb_s: float | None = None
    peak_tflops: dict[Precision, float] = Field(default_factory=dict)
    tdp_w: float | None = None
    link_bandwidth_gb_s: float | None = None
    devices_per_package: int = Field(1, ge=1)
    sources: list[str] = Field(min_length=1)
    notes: str | None = None

    def per_device(self) -> dict[str, Any]:
        """The ``infbench_device_info`` dict for one device as the driver shows it.

        Returns:
            ``{"id", "memory_bytes" (B), "memory_bandwidth_bytes_s" (B/s), "peak_flops"
            (precision -> FLOP/s), "tdp_w" (W), "link_bytes_s" (B/s, one direction),
            "source"}``, each divided by ``devices_per_package`` (the link excepted);
            unknown figures are None.
        """
        k = self.devices_per_package
        return {
            "id": self.id,
            "memory_bytes": int(self.memory_gib * 2**30 / k) if self.memory_gib else None,
            "memory_bandwidth_bytes_s": self.bandwidth_tb_s * 1e12 / k if self.bandwidth_tb_s else None,
            "peak_flops": {p: v * 1e12 / k for p, v in self.peak_tflops.items()},
            "tdp_w": self.tdp_w / k if self.tdp_w else None,
            "link_bytes_s": self.link_bandwidth_gb_s * 1e9 if self.link_bandwidth_gb_s else None,
            "source": "; ".join(self.sources),
        }


class DeviceBackends(BaseModel):
    """What a device needs from each engine library, as its plugin declares it
    (``infbench_device_backends``, contract 1.4), in the libraries' own vocabulary.

    The core checks the installed libraries against it (``infbench detect``'s engine
    table, the default sweep's engine choice) and every adapter proves with it that it
    runs on the device before the first timed request
    (:meth:`infbench.data.engine.Engine.verify_device`).

    Attributes:
        label: the device's compute stack for messages (``CUDA``, ``ROCm``, ``CPU``).
        torch: the PyTorch build and device: ``cuda`` (a CUDA build, device ``cuda``),
            ``hip`` (a ROCm build, device ``cuda``), ``xpu``, ``hpu`` or ``cpu``; None when
            transformers does not run on the device.
        vllm: the vLLM platform (``current_platform.device_name``): ``cuda``, ``rocm``,
            ``xpu``, ``hpu``, ``cpu``; None when vLLM does not run on it.
        ggml: ggml backend names that run on the device (``["CUDA", "Vulkan"]``; ``["CPU"]``);
            empty when llama.cpp does not.
        install: per library (``torch``, ``vllm``, ``llama_cpp``, ``xllamacpp``), the exact
            command that installs a build for this device, shown when it is missing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    torch: Literal["cuda", "hip", "xpu", "hpu", "cpu"] | None = None
    vllm: str | None = None
    ggml: list[str] = Field(default_factory=list)
    install: dict[str, str] = Field(default_factory=dict)
