"""Helpers for remote platforms: inference services reached over an OpenAI-compatible API.

A remote platform is "detected" when the site configuration declares it
(:mod:`infbench.contract.site`), not when hardware is found. Vendor plugins for such platforms
(SambaNova, Cerebras) supply their defaults (endpoint, key variable, system name) and use
:class:`RemotePlatform` to validate the site's table, build the
:class:`~infbench.data.schema.DeviceInfo` and the user-supplied power sampler. Nothing here is
vendor-specific.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infbench.contract.hookspecs import DefaultSweepAnswer, hookimpl
from infbench.contract.site import site_config_path, site_location, site_section
from infbench.data.engine import EngineSpec
from infbench.data.errors import ConfigError
from infbench.data.schema import DeviceInfo
from infbench.data.secrets import command_label
from infbench.detect.devices import packaged_specs
from infbench.measure.power import CommandPowerSampler, FixedPowerSampler, NoPower, PowerSampler


class RemotePlatform(BaseModel):
    """One remote platform as a site declares it (a table of ``site.toml``).

    Attributes:
        base_url: the OpenAI-compatible API root (``https://api.cerebras.ai/v1``).
        api_key_env: environment variable holding the API key (never the key itself).
        system: what serves the requests (``CS-3``, ``SN40L-16``), as the device model.
        count: systems (or chips) behind the endpoint, for per-device figures.
        power_w: declared power of the system(s) in W (e.g. the rack's PDU average).
        power_command: a shell command printing the current power in W (PDU/BMC).
        power_label: what the power covers; stored with every cell's energy.
        model: the served model id the default sweep asks for (``llama3.1-8b``).
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(pattern=r"^https?://[^\s/?#]+\S*$", max_length=2000)
    api_key_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    system: str = Field(min_length=1, max_length=200)
    count: int = Field(1, ge=1, le=1_000_000)
    power_w: float | None = Field(None, gt=0, le=1e8, allow_inf_nan=False)
    power_command: str | None = Field(None, max_length=4000)
    power_label: str | None = Field(None, max_length=300)
    model: str | None = Field(None, max_length=300)

    @model_validator(mode="after")
    def _one_power_source(self) -> RemotePlatform:
        if self.power_w is not None and self.power_command:
            raise ValueError("give power_w or power_command, not both")
        return self

    @classmethod
    def from_site(cls, name: str, section: dict[str, Any] | None, defaults: dict[str, Any]) -> RemotePlatform | None:
        """Validate the site's ``[name]`` table over the plugin's ``defaults``.

        Returns:
            None when the site does not declare ``[name]``.

        Raises:
            ConfigError: an unknown key or a bad value, naming the table and the file.
        """
        if section is None:
            return None
        try:
            return cls(**{**defaults, **section})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in exc.errors())
            first = exc.errors()[0]["loc"]
            raise ConfigError(f"[{name}] in {site_location(name, str(first[0]) if first else None)}: {problems}",
                              hint="keys: base_url, api_key_env, system, count, power_w | power_command, "
                                   "power_label, model") from exc

    def device(self, vendor: str) -> DeviceInfo:
        """The platform as a device group (``kind="remote"``); properties carry the
        endpoint, the key variable, whether the key is set, and the power source."""
        return DeviceInfo(
            vendor=vendor, kind="remote", model=self.system, count=self.count, plugin=vendor,
            properties={"base_url": self.base_url, "api_key_env": self.api_key_env,
                        "api_key_set": bool(os.environ.get(self.api_key_env)),
                        "power_source": self.power_description()},
        )

    def power_description(self) -> str:
        """One line saying where energy figures for this platform come from."""
        if self.power_w is not None:
            return self.power_label or f"user-supplied fixed {self.power_w:g} W (not measured)"
        if self.power_command:
            return self.power_label or f"user-supplied power command: {command_label(self.power_command)}"
        return "none: no device power API; set power_w or power_command in the site config"

    def power_sampler(self) -> PowerSampler:
        """The user-supplied power source, labelled, or :class:`NoPower` saying how to add one."""
        if self.power_w is not None:
            label = f"user-supplied: {self.power_label}" if self.power_label else None
            return FixedPowerSampler(self.power_w, label)
        if self.power_command:
            label = f"user-supplied: {self.power_label}" if self.power_label else None
            return CommandPowerSampler(self.power_command, label)
        return NoPower("remote platform without a power API: declare power_w or power_command in "
                       f"{site_config_path()} (e.g. the rack PDU reading) to get tokens per joule")


class RemotePlatformPlugin:
    """A ready-made plugin object for a remote platform: a vendor plugin instantiates it
    with its defaults and exposes the instance as its entry point
    (``cerebras = "infbench_cerebras.hooks:plugin"``).

    Hooks: ``infbench_detect`` (the site's ``[vendor]`` table as a ``remote`` device, or
    ``[]``), ``infbench_power_sampler`` (the site's power source), ``infbench_engines``
    (the core's ``openai`` engine runs on this platform), ``infbench_supported_precisions``,
    ``infbench_device_catalog`` and ``infbench_default_sweep`` (the endpoint's ``model``
    through ``openai``).

    Args:
        vendor: plugin name and ``DeviceInfo.vendor``.
        defaults: default table values (``base_url``, ``api_key_env``, ``system``).
        precisions: what the platform serves (informational: the server picks).
        package: the plugin package holding ``devices.yaml`` (None: no catalog).
    """

    def __init__(self, vendor: str, defaults: dict[str, Any], precisions: list[str], package: str | None = None):
        self.vendor = vendor
        self.defaults = defaults
        self.precisions = precisions
        self.package = package

    def config(self) -> RemotePlatform | None:
        """The validated site table, or None when the site does not declare the platform.

        Raises:
            ConfigError: an invalid table (see :meth:`RemotePlatform.from_site`).
        """
        return RemotePlatform.from_site(self.vendor, site_section(self.vendor), self.defaults)

    @hookimpl
    def infbench_detect(self) -> list[DeviceInfo]:
        """The declared platform as one remote device group; ``[]`` if not declared.
        An invalid table raises ConfigError, which ``infbench detect`` reports."""
        cfg = self.config()
        return [cfg.device(self.vendor)] if cfg else []

    @hookimpl
    def infbench_supported_precisions(self, device: DeviceInfo) -> list[str] | None:
        """The precisions the platform serves (the server decides per model)."""
        return list(self.precisions) if device.vendor == self.vendor else None

    @hookimpl
    def infbench_power_sampler(self, device: DeviceInfo) -> PowerSampler | None:
        """The site's user-supplied power source (labelled), or NoPower saying how to add one."""
        if device.vendor != self.vendor:
            return None
        cfg = self.config()
        return cfg.power_sampler() if cfg else NoPower(f"{self.vendor} is not declared in {site_config_path()}")

    @hookimpl
    def infbench_engines(self) -> list:
        """The core's ``openai`` client runs against this platform."""
        return [EngineSpec("openai", None, [self.vendor])]

    @hookimpl
    def infbench_default_sweep(self, device: DeviceInfo) -> DefaultSweepAnswer | None:
        """The site's endpoint through the core's ``openai`` client: its ``model`` at
        concurrency 1 and 16, input = output in {128, 1024} tokens, 32 requests per cell."""
        if device.vendor != self.vendor:
            return None
        cfg = self.config()
        model = cfg.model if cfg and cfg.model else None
        if model is None:
            raise ConfigError(f"[{self.vendor}] in {site_config_path()} names no model for the default sweep",
                              hint=f"add model = \"...\" to [{self.vendor}], or pass --model")
        return DefaultSweepAnswer(
            engines=["openai"], models=[model], dtypes=["auto"], batch=[1], input_len=[128, 1024],
            output_len=[128, 1024], pair_lengths=True, concurrency=[1, 16], num_requests=32,
            description=f"{self.vendor}'s endpoint through the openai client: {model}, concurrency 1/16, "
                        "input = output 128/1024")

    @hookimpl
    def infbench_device_catalog(self) -> list:
        """The platform's system descriptions from ``devices.yaml``."""
        return list(packaged_specs(self.package)) if self.package else []
