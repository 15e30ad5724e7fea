"""What ``infbench run`` was asked to do, as one typed object (:class:`RunRequest`): built
from the command line (:mod:`infbench.cli.run_cmd`), checked here before anything is detected,
stored or started, and carried out by :func:`infbench.execution.orchestrator.prepare`.

Every number is bounded and finite (NaN and infinity are refused); list flags may repeat
or take comma lists (``--batch 1,4 --batch 8``), parsed by :func:`split_values`. A bad value
is a :class:`~infbench.data.errors.ConfigError` naming the flag (:func:`checked_request`).
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infbench.data.errors import ConfigError

_short = reprlib.Repr()
_short.maxstring = 60


def split_values(values: list[str] | None, flag: str, cast: type = str) -> list[Any] | None:
    """Flags may repeat or take comma lists: ``["1,4", "8"]`` -> ``[1, 4, 8]``.

    Args:
        values: the raw flag values (None or empty: the flag was not given).
        flag: the flag's name, for the error message.
        cast: ``str``, ``int`` or ``float``.

    Returns:
        The items, or None when the flag was not given.

    Raises:
        ConfigError: an item that is not a number where ``cast`` asks for one.
    """
    if not values:
        return None
    items = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    if not items:
        raise ConfigError(f"{flag} was given no value (got {', '.join(repr(v) for v in values)[:80]})",
                          hint=f"give one or more values, e.g. {flag} 1,16,32, or leave the flag out")
    if cast in (int, float):
        try:
            return [cast(v) for v in items]
        except ValueError:
            kind = "integers" if cast is int else "numbers"
            raise ConfigError(f"{flag} takes {kind}, got {_short.repr(', '.join(items))}",
                              hint=f"e.g. {flag} 1,16,32") from None
    return items


#: Field -> flag, where the flag is not ``--`` + the field name with dashes.
FLAGS = {"store_path": "--store", "sweep_file": "--sweep", "tp": "--tensor-parallel-size", "as_json": "--json",
         "cell_timeout": "--cell-timeout", "served_model_name": "--served-model-name"}


def flag_of(field: str) -> str:
    """The command-line flag of a :class:`RunRequest` field (``input_len`` -> ``--input-len``)."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def _finite(**kw: Any) -> Any:
    return Field(allow_inf_nan=False, **kw)


class RunRequest(BaseModel):
    """Everything ``infbench run`` was given (see ``infbench run --help`` for each flag).

    List fields hold the raw flag values (comma lists, possibly repeated); the typed
    accessors (:meth:`ints`, :meth:`floats`, :meth:`strs`) parse them. Numbers are finite and
    within their physical range; flags that cannot go together are refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- the sweep -------------------------------------------------------------------------
    model: list[str] | None = None
    engine: list[str] | None = None
    dtype: list[str] | None = None
    batch: list[str] | None = None
    input_len: list[str] | None = None
    output_len: list[str] | None = None
    tp: list[str] | None = None
    sweep_file: Path | None = None
    preset: str | None = None
    device: str | None = None
    store_path: Path | None = None
    force: bool = False
    warmup: int | None = Field(None, ge=0, le=1000)
    warmup_tol: float = _finite(default=0.03, gt=0, lt=1)
    warmup_max_s: float | None = _finite(default=None, gt=0, le=1e6)
    rewarm_after_s: float = _finite(default=60.0, ge=0, le=1e7)
    no_remeasure: bool = False
    seed: int | None = None
    cell_timeout: float | None = _finite(default=None, gt=0)
    threads: int | None = Field(None, ge=1, le=4096)
    # -- power ------------------------------------------------------------------------------
    power_interval: float = _finite(default=0.1, gt=0, le=3600)
    power_command: str | None = None
    power_watts: float | None = _finite(default=None, gt=0, le=1e7)
    power_label: str | None = None
    engine_process: bool = True
    # -- serving -----------------------------------------------------------------------------
    concurrency: list[str] | None = None
    request_rate: list[str] | None = None
    burstiness: float | None = _finite(default=None, gt=0)
    num_requests: int | None = Field(None, ge=1)
    duration: float | None = _finite(default=None, gt=0)
    warmup_requests: int | None = Field(None, ge=0)
    request_timeout: float | None = _finite(default=None, gt=0)
    base_url: str | None = None
    api_key_env: str | None = None
    endpoint: str | None = None
    served_model_name: str | None = None
    prompt_format: str | None = None
    engine_arg: list[str] | None = None
    dataset: Path | None = None
    max_input_len: int | None = Field(None, ge=1)
    max_output_len: int | None = Field(None, ge=1)
    trace: Path | None = None
    trace_speed: list[str] | None = None
    multi_turn: bool = False
    think_time: float | None = _finite(default=None, ge=0)
    prefix_len: int | None = Field(None, ge=1)
    num_prefixes: int | None = Field(None, ge=1)
    len_range: float | None = _finite(default=None, gt=0, lt=1)
    len_range_convention: Literal["inferencex", "vllm"] | None = None
    no_stream: bool = False
    tokenizer: str | None = None
    slo_ttft: float | None = _finite(default=None, gt=0)
    slo_tpot: float | None = _finite(default=None, gt=0)
    slo_e2e: float | None = _finite(default=None, gt=0)
    # -- what to do with the plan -------------------------------------------------------------
    dry_run: bool = False
    write_spec: Path | None = None
    executor: Literal["auto", "inprocess", "container", "ray"] | None = None
    container_runtime: Literal["docker", "apptainer"] | None = None
    ray_address: str | None = None
    load_nodes: int | None = Field(None, ge=1, le=100_000)
    runtime: str | None = None
    repeat: int | None = Field(None, ge=1, le=1000)
    price_per_hour: float | None = _finite(default=None, ge=0)
    scrape_interval: float = _finite(default=1.0, ge=0, le=3600)
    # -- the --find-max scenario ----------------------------------------------------------------
    find_max: Literal["rate", "concurrency"] | None = None
    slo_ttft_ms: float | None = _finite(default=None, gt=0)
    slo_tpot_ms: float | None = _finite(default=None, gt=0)
    goodput: float = _finite(default=0.9, gt=0, le=1)
    find_max_limit: float | None = _finite(default=None, gt=0)
    find_max_probes: int = Field(20, ge=1, le=1000)
    # -- the --adaptive scenario ---------------------------------------------------------------
    adaptive: str | None = Field(None, pattern=r"^\s*\d+(\.\d+)?\s*(%|s|m|h)\s*$")
    # -- perplexity after the cells ---------------------------------------------------------------
    perplexity: Path | None = None
    ppl_n_ctx: int = Field(512, ge=4, le=1 << 20)
    ppl_chunks: int | None = Field(None, ge=1)
    as_json: bool = False

    @model_validator(mode="after")
    def _together(self) -> RunRequest:
        for name in ("ttft", "tpot"):
            if getattr(self, f"slo_{name}") is not None and getattr(self, f"slo_{name}_ms") is not None:
                raise ConfigError(f"give --slo-{name} (s) or --slo-{name}-ms, not both")
        if self.adaptive is not None and self.find_max is not None:
            raise ConfigError("--adaptive and --find-max are two ways of choosing what to measure; give one")
        if self.runtime is not None and self.executor is not None:
            raise ConfigError("give --executor, not both --executor and --runtime (its old name)")
        return self

    # -- typed views -----------------------------------------------------------------------
    def ints(self, field: str) -> list[int] | None:
        """A list flag's values as integers (None: not given).

        Raises:
            ConfigError: an item that is not an integer.
        """
        return split_values(getattr(self, field), flag_of(field), int)

    def floats(self, field: str) -> list[float] | None:
        """A list flag's values as numbers (None: not given).

        Raises:
            ConfigError: an item that is not a number.
        """
        return split_values(getattr(self, field), flag_of(field), float)

    def strs(self, field: str) -> list[str] | None:
        """A list flag's values (None: not given).

        Raises:
            ConfigError: a flag given only empty values.
        """
        return split_values(getattr(self, field), flag_of(field))

    def slo_ttft_s(self) -> float | None:
        """The TTFT limit in s, from ``--slo-ttft`` (s) or ``--slo-ttft-ms``."""
        return self.slo_ttft_ms / 1e3 if self.slo_ttft_ms is not None else self.slo_ttft

    def slo_tpot_s(self) -> float | None:
        """The TPOT limit in s, from ``--slo-tpot`` (s) or ``--slo-tpot-ms``."""
        return self.slo_tpot_ms / 1e3 if self.slo_tpot_ms is not None else self.slo_tpot


def checked_request(**values: Any) -> RunRequest:
    """A :class:`RunRequest` from the command line's values.

    Raises:
        ConfigError: the first invalid value, naming its flag, what it got and what it takes.
    """
    try:
        return RunRequest(**values)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        got = _short.repr(e.get("input"))
        raise ConfigError(f"{flag_of(field)}: {e['msg'].lower()} (got {got})" if field else e["msg"],
                          hint=f"see `infbench run --help` for {flag_of(field)}" if field else None) from None
