"""The typed answers of the plugin hooks that used to return dicts (plugin contract 1.7):

* :class:`DeviceLimits` (``infbench_device_info``): the hardware limits of one device;
* :class:`ContainerSpec` (``infbench_container_spec``): the worker image and how to run it;
* :class:`DefaultSweepAnswer` (``infbench_default_sweep``): what a bare ``infbench run`` measures;
* :class:`DeviceState` (``infbench_device_state``, since 1.10): the settings of a device that
  change what it measures (persistence mode, locked clocks, power limit, ECC, MIG).

A plugin written for an older contract may still return the dict; the core validates it
into the model (:func:`as_model`), so old plugins keep working and a misspelled key is an
error naming the plugin's answer instead of a silent default.
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infbench.data.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class DeviceLimits(BaseModel):
    """The hardware limits of one device, for the roofline and reports (per device, not per
    package: a dual-die package's figures divided by its dies).

    Attributes:
        id: the catalog id (``h100-sxm``, ``cpu``), if any.
        memory_bandwidth_bytes_s: memory bandwidth in B/s (a datasheet's; the CPU's theoretical).
        peak_flops: precision class -> dense peak FLOP/s.
        memory_bytes: memory in B.
        tdp_w: thermal design power in W.
        link_bytes_s: device-to-device bandwidth in B/s, one direction (since 1.2).
        source: where the numbers come from.

    Plugins may add figures of their own (the CPU's attainable rates and bases): they are
    kept as extra fields.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    id: str | None = None
    memory_bandwidth_bytes_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    peak_flops: dict[str, float] = Field(default_factory=dict)
    memory_bytes: int | None = Field(None, gt=0)
    tdp_w: float | None = Field(None, gt=0, allow_inf_nan=False)
    link_bytes_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    source: str | None = None

    def as_info(self) -> dict[str, Any]:
        """The limits as the dict the roofline and reports read (every field, extras included)."""
        return self.model_dump()


class ContainerSpec(BaseModel):
    """The container in which an engine runs on a device: the image and keyword arguments of
    ``docker.containers.run`` (the docker SDK), plus Apptainer options (since 1.3).

    The image must be built from ``plugins/<vendor>/docker/Dockerfile.<name>`` and named
    ``infbench/<vendor>-<name>:<version>``; its ENTRYPOINT runs ``infbench worker``. The
    launcher adds the job and cache mounts, the host user, ``network_mode="none"`` unless
    given, and never ``privileged`` unless given (then the user is told).
    """

    model_config = ConfigDict(extra="allow", frozen=True, arbitrary_types_allowed=True)
    image: str = Field(min_length=1)
    device_requests: list[Any] | None = None
    devices: list[str] | None = None
    runtime: str | None = None
    environment: dict[str, str] | None = None
    ipc_mode: str | None = None
    shm_size: str | int | None = None
    ulimits: list[Any] | None = None
    cap_add: list[str] | None = None
    group_add: list[str] | None = None
    security_opt: list[str] | None = None
    privileged: bool | None = None
    network_mode: str | None = None
    user: str | None = None
    apptainer_options: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _docker_keys(cls, data: Any) -> Any:
        """Other keys must be keyword arguments of ``docker.containers.run`` (a misspelling is an
        error, with the closest name; the launcher announces any that loosens isolation)."""
        if not isinstance(data, dict):
            return data
        from docker.models.containers import RUN_CREATE_KWARGS, RUN_HOST_CONFIG_KWARGS

        known = set(cls.model_fields) | set(RUN_CREATE_KWARGS) | set(RUN_HOST_CONFIG_KWARGS)
        bad = [k for k in data if k not in known]
        if bad:
            close = difflib.get_close_matches(bad[0], sorted(known), n=1)
            raise ValueError(f"{bad[0]!r} is not a container setting" + (f" (did you mean {close[0]!r}?)" if close
                                                                           else ""))
        return data

    def as_dict(self) -> dict[str, Any]:
        """The settings that are given (extra docker settings included), as the container
        runtimes take them."""
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        out.update({k: v for k, v in (self.__pydantic_extra__ or {}).items() if v is not None})
        return out


class DefaultSweepAnswer(BaseModel):
    """What a bare ``infbench run`` measures on a device (since 1.4).

    Attributes:
        preset: a name from :data:`infbench.plan.PRESETS` whose fields the others override.
        description: one line for ``--dry-run``.
        engines: the engines in order of preference: the core takes the first that runs here,
            trying the plugin's image first when it is built and a container runtime answers.

    Any other :class:`~infbench.data.schema.Sweep` field (``models``, ``dtypes``, ``batch``...) may
    be given too; it is validated with the sweep.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    preset: str | None = None
    description: str | None = None
    engines: list[str] | None = None

    def fields(self) -> dict[str, Any]:
        """The answer as sweep fields (unset ones left out), ``preset`` and ``description`` included."""
        return self.model_dump(exclude_none=True)


class DeviceState(BaseModel):
    """The settings of one device that change what it measures, read at the start of a run and
    stored in its provenance (since 1.10; docs/metrics.md, "Steady state"). Every field is
    optional: a plugin gives what its device reports.

    Attributes:
        index: the device's index within its group.
        persistence_mode: True when the driver keeps the device initialised between processes.
        applications_clocks_locked: True when application clocks are set away from their default.
        sm_clock_mhz, max_sm_clock_mhz: the core clock now and its maximum (MHz).
        power_limit_w: the power limit in force (W); default_power_limit_w: the device's default.
        ecc: True when ECC is enabled.
        mig: True when MIG (or another partitioning) is enabled.

    Other figures a plugin reads may be added as extra fields.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    index: int = 0
    persistence_mode: bool | None = None
    applications_clocks_locked: bool | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_limit_w: float | None = Field(None, ge=0)
    default_power_limit_w: float | None = Field(None, ge=0)
    ecc: bool | None = None
    mig: bool | None = None


def as_model(kind: type[M], answer: Any, who: str) -> M | None:
    """A hook's answer as ``kind``: the model itself, or a dict of a plugin written for an
    older contract validated into it; None stays None.

    Raises:
        ConfigError: the answer is neither, or does not validate (naming ``who`` and the field).
    """
    if answer is None or isinstance(answer, kind):
        return answer
    if not isinstance(answer, dict):
        raise ConfigError(f"{who} returned {type(answer).__name__}, not {kind.__name__}",
                          hint="return the model (infbench.data.contract) or its fields as a dict")
    try:
        return kind(**answer)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise ConfigError(f"{who} returned an invalid {kind.__name__}: {'.'.join(str(x) for x in e['loc'])}: "
                          f"{e['msg']}", hint="see docs/plugins.md for the hook's fields") from None
