"""What ``infbench predict`` takes (issue 22): its flags as one bounded model
(:class:`PredictFlags`), checked before anything is predicted, so a prediction is never
made for what no hardware or model can be (a batch of -4, a negative input length,
``--set memory_bandwidth_tb_s=inf``, a ``peak__tflops`` key, an efficiency above 1).

Device files (``--device-file``) are checked where they are read
(:func:`infbench.detect.devices.load_device_specs`: finite, positive figures within
:data:`infbench.detect.devices.PHYSICAL_LIMITS`, with the line); the ``--set`` figures here hold to
the same limits.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infbench.data.engine_options import Flag, Slots, Tokens
from infbench.data.errors import ConfigError
from infbench.data.flags import split_values
from infbench.data.inputs import Flags, Seconds, checked
from infbench.data.schema import PRECISIONS, SWEEP_LIMITS
from infbench.detect.devices import MAX_PEAK_TFLOPS, MIN_PEAK_TFLOPS, MIN_PEAK_WHY, PHYSICAL_LIMITS, PHYSICAL_MINIMA

#: ``--set`` keys -> (unit, upper bound); every value is a finite number above 0.
SET_LIMITS: dict[str, tuple[str, float]] = {
    "memory_bandwidth_tb_s": ("TB/s", PHYSICAL_LIMITS["bandwidth_tb_s"]),
    "memory_gib": ("GiB", PHYSICAL_LIMITS["memory_gib"]),
    "memory_gb": ("GB", PHYSICAL_LIMITS["memory_gib"] * 1.074),
    "link_bandwidth_gb_s": ("GB/s", PHYSICAL_LIMITS["link_bandwidth_gb_s"]),
    **{f"peak_{p}_tflops": ("TFLOP/s", MAX_PEAK_TFLOPS) for p in PRECISIONS},
}
#: ``--set`` keys -> (lower bound, why): the device files' minima
#: (:data:`infbench.devices.PHYSICAL_MINIMA`, :data:`~infbench.devices.MIN_PEAK_TFLOPS`).
SET_MINIMA: dict[str, tuple[float, str]] = {
    "memory_bandwidth_tb_s": PHYSICAL_MINIMA["bandwidth_tb_s"],
    "memory_gib": PHYSICAL_MINIMA["memory_gib"],
    "memory_gb": (PHYSICAL_MINIMA["memory_gib"][0] * 1.074, PHYSICAL_MINIMA["memory_gib"][1]),
    "link_bandwidth_gb_s": PHYSICAL_MINIMA["link_bandwidth_gb_s"],
    **{f"peak_{p}_tflops": (MIN_PEAK_TFLOPS, MIN_PEAK_WHY) for p in PRECISIONS},
}
#: Upper bounds of the list flags (as ``infbench run``'s sweep bounds them).
LIST_LIMITS = {"batch": ("--batch", SWEEP_LIMITS["batch"]), "input_len": ("--input", SWEEP_LIMITS["input_len"]),
               "output_len": ("--output", SWEEP_LIMITS["output_len"]),
               "tp": ("--tp", SWEEP_LIMITS["tensor_parallel_size"]), "pp": ("--pp", 4096)}
_Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class PredictFlags(Flags):
    """The numeric flags of ``infbench predict`` (list flags as typed, ``--set`` items)."""

    COMMAND: ClassVar[str] = "predict"
    FLAGS: ClassVar[dict[str, str]] = {**Flags.FLAGS, "input_len": "--input", "output_len": "--output",
                                       "set_": "--set", "calibrate_": "--calibrate",
                                       "requirements_": "--requirements"}

    batch: list[str] | None = None
    input_len: list[str] | None = None
    output_len: list[str] | None = None
    tp: list[str] | None = None
    pp: list[str] | None = None
    ep: int = Field(1, ge=1, le=65_536)
    moe_imbalance: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)
    spec_k: int = Field(4, ge=1, le=64)
    acceptance: float = Field(0.7, ge=0, le=1, allow_inf_nan=False)
    slo_ttft: Seconds | None = None
    slo_tpot: Seconds | None = None
    set_: list[str] | None = None
    eff_compute: _Fraction | None = None
    eff_memory: _Fraction | None = None
    overhead_ms: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False)

    @field_validator("batch", "input_len", "output_len", "tp", "pp")
    @classmethod
    def _positive_ints(cls, v: list[str] | None, info: Any) -> list[str] | None:
        flag, hi = LIST_LIMITS[info.field_name]
        for n in split_values(v, flag, int) or []:
            if not 1 <= n <= hi:
                raise ValueError(f"{n} is outside 1..{hi:,}: no model or device runs that")
        return v

    @field_validator("set_")
    @classmethod
    def _sets(cls, v: list[str] | None) -> list[str] | None:
        parse_sets(split_values(v, "--set"))
        return v


def parse_sets(items: list[str] | None) -> dict[str, float]:
    """``["memory_bandwidth_tb_s=8", "peak_bf16_tflops=2500"]`` -> a dict of floats, every
    key one of :data:`SET_LIMITS` and every value a finite number within :data:`SET_MINIMA`
    .. :data:`SET_LIMITS`.

    Raises:
        ConfigError: an item without ``=``, an unknown key (``peak__tflops``,
            ``peak_fp64_tflops``: with the keys there are), or a value that is not a
            finite number within the key's bounds (``1e-300`` TFLOP/s is refused as firmly
            as ``inf``).
    """
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"--set {item[:60]!r} is not KEY=VALUE", hint="e.g. --set memory_bandwidth_tb_s=8")
        if key not in SET_LIMITS:
            raise ConfigError(f"--set: unknown key {key[:60]!r}", hint="keys: " + ", ".join(SET_LIMITS))
        unit, hi = SET_LIMITS[key]
        try:
            v = float(value)
        except ValueError:
            raise ConfigError(f"--set {key}: {value[:40]!r} is not a number") from None
        if not math.isfinite(v) or not 0 < v <= hi:
            raise ConfigError(f"--set {key}={value[:40]}: must be a finite number above 0 and at most {hi:,g} {unit}",
                              hint="no hardware has a zero, negative or unbounded figure")
        lo, why = SET_MINIMA[key]
        if v < lo:
            raise ConfigError(f"--set {key}={value[:40]}: below {lo:g} {unit}, the least any device has ({why})",
                              hint=f"{key} is in {unit}")
        out[key] = v
    return out


def check_predict_flags(flags: dict[str, Any]) -> PredictFlags:
    """:class:`PredictFlags` from ``predict``'s parameters (the other parameters ignored).

    Raises:
        ConfigError: the first bad value, naming its flag.
    """
    given = {k: flags[k] for k in PredictFlags.model_fields if flags.get(k) is not None}
    return checked(PredictFlags, **given)


class PredictOptions(BaseModel):
    """The engine options ``infbench predict`` reads (:meth:`infbench.analysis.predict.Serving.with_options`),
    held to the bounds ``run``'s options models hold them to (issue 41: ``predict`` took
    ``max_num_batched_tokens=-1``). Other keys pass (an engine's own checks them).

    Attributes:
        gpu_memory_utilization: the share of device memory the engine may use, (0, 1].
        max_num_seqs, max_running_requests, max_batch_size, parallel, n_parallel: the most
            sequences one step runs (1..65,536).
        max_num_batched_tokens, n_batch, n_ubatch: tokens per step or chunk (1..1,048,576).
        enable_chunked_prefill, flash_attn: switches.
        split_mode: how layers spread over devices (``layer``, ``row``, ``tensor``, ``none``).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    max_num_seqs: Slots | None = None
    max_running_requests: Slots | None = None
    max_batch_size: Slots | None = None
    parallel: Slots | None = None
    n_parallel: Slots | None = None
    max_num_batched_tokens: Tokens | None = None
    n_batch: Tokens | None = None
    n_ubatch: Tokens | None = None
    enable_chunked_prefill: Flag | None = None
    flash_attn: Flag | None = None
    split_mode: Literal["layer", "row", "tensor", "none"] | None = None
