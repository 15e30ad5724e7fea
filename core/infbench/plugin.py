"""The public plugin API: everything a vendor plugin may import from infbench, in one module.

A plugin (``pip install infbench-VENDOR``, registered under the ``infbench`` entry-point
group) writes ``from infbench.plugin import ...`` and nothing else from infbench. The names
below are stable under :data:`CONTRACT_VERSION`: a minor version may add names and hooks, a
name is removed only in a major version, after a release in which importing it warns. The
rest of infbench (its module paths included) may change in any release; CI checks that the
bundled plugins keep to this module (import-linter's "plugins import only infbench.plugin"
contract in pyproject.toml), and :mod:`infbench.testing.conformance` checks a plugin's
answers (``infbench plugins check NAME``).

What is here, by the hook it serves (docs/plugins.md shows each in use):

* the hooks: :data:`hookimpl` (decorate each hook function), :data:`CONTRACT_VERSION`;
* ``infbench_detect``, ``infbench_supported_precisions``: :class:`DeviceInfo`;
  ``infbench_device_catalog``: :class:`DeviceSpec`, :func:`packaged_specs` (read the plugin's
  own ``devices.yaml``), :func:`match_device`; ``infbench_device_backends``:
  :class:`DeviceBackends`;
* ``infbench_power_sampler``: :class:`PowerSampler` (subclass it), :class:`StreamSampler`
  (a vendor tool that prints readings), :class:`CommandPowerSampler`,
  :class:`FixedPowerSampler`, :class:`NoPower`, :class:`PowerReading`,
  :class:`ChannelReading` (clocks, temperature, throttle reasons), :func:`now_ns`;
* ``infbench_engines``, ``infbench_launch_engine``: :class:`EngineSpec`, :class:`Engine` (an in-process adapter),
  :class:`ManagedServerEngine` (a server infbench starts and talks to over the OpenAI API),
  :class:`RunOutput`, :class:`RequestRecord`, :class:`Cell`, :data:`CLIENT_OPTIONS`, the options
  models an adapter receives (contract 2.0: :class:`EngineOptions`, :class:`OpenAIOptions`,
  :class:`ServerOptions`; subclass one for an engine's own options),
  :func:`slots_needed`, :func:`dummy_hf_dir` (a config-only Hugging Face folder for
  ``load_format=dummy``), :func:`default_home`;
* ``infbench_container_spec``, ``infbench_default_sweep``, ``infbench_device_info``:
  :class:`ContainerSpec`, :class:`DefaultSweepAnswer`, :class:`DeviceLimits`;
* remote platforms (an endpoint infbench reaches over the network):
  :class:`RemotePlatformPlugin`;
* errors a plugin raises: :class:`ConfigError` (the user's input is wrong; give a hint),
  :class:`EngineUnavailable` (the engine or its library is missing here),
  :class:`DeviceMismatch` (the engine did not run on the device asked for);
* :func:`device_label` (how infbench names a device in messages).

Example, a plugin's ``hooks.py``::

    from infbench.plugin import DeviceInfo, hookimpl

    @hookimpl
    def infbench_detect() -> list[DeviceInfo]:
        return [DeviceInfo(vendor="acme", kind="accelerator", model="Acme X1", count=8)]
"""

from __future__ import annotations

from infbench.contract.hookspecs import (
    CONTRACT_VERSION,
    ContainerSpec,
    DefaultSweepAnswer,
    DeviceLimits,
    DeviceState,
    hookimpl,
)
from infbench.data.engine import Engine, EngineSpec, RunOutput
from infbench.data.engine_options import EngineOptions, OpenAIOptions, ServerOptions
from infbench.data.errors import ConfigError, DeviceMismatch, EngineUnavailable, InfbenchError
from infbench.data.paths import default_home
from infbench.data.schema import (
    Cell,
    ChannelReading,
    DeviceBackends,
    DeviceInfo,
    DeviceSpec,
    PowerReading,
    RequestRecord,
)
from infbench.detect.devices import match_device, packaged_specs
from infbench.detect.platforms.remote import RemotePlatformPlugin
from infbench.engines.availability import device_label
from infbench.engines.hf_dummy import dummy_hf_dir
from infbench.engines.server_process import CLIENT_OPTIONS, ManagedServerEngine, slots_needed
from infbench.measure.power import (
    CommandPowerSampler,
    FixedPowerSampler,
    NoPower,
    PowerSampler,
    StreamSampler,
    now_ns,
)

__all__ = [
    "CLIENT_OPTIONS",
    "CONTRACT_VERSION",
    "Cell",
    "ChannelReading",
    "CommandPowerSampler",
    "ConfigError",
    "ContainerSpec",
    "DefaultSweepAnswer",
    "DeviceBackends",
    "DeviceInfo",
    "DeviceLimits",
    "DeviceMismatch",
    "DeviceSpec",
    "DeviceState",
    "Engine",
    "EngineOptions",
    "EngineSpec",
    "EngineUnavailable",
    "FixedPowerSampler",
    "InfbenchError",
    "ManagedServerEngine",
    "NoPower",
    "OpenAIOptions",
    "PowerReading",
    "PowerSampler",
    "RemotePlatformPlugin",
    "RequestRecord",
    "RunOutput",
    "ServerOptions",
    "StreamSampler",
    "default_home",
    "device_label",
    "dummy_hf_dir",
    "hookimpl",
    "match_device",
    "now_ns",
    "packaged_specs",
    "slots_needed",
]
