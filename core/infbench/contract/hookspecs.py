"""The plugin contract: the hooks a vendor plugin may implement (pluggy project ``infbench``).

A plugin is a module (or object) with functions named like the specs below, marked
with ``@infbench.hookimpl``, registered through the entry-point group ``infbench``::

    [project.entry-points.infbench]
    nvidia = "infbench_nvidia"

Rules every hook follows (see docs/plugins.md):

* Hooks are data-shaped: they take and return :mod:`infbench.data.schema` models or plain
  values, never touch the store, the CLI or another plugin.
* A hook that gets a ``device`` it does not own returns ``None`` (for ``firstresult``
  hooks the core then asks the next plugin).
* A hook must not raise on a machine without its hardware or its vendor library:
  ``infbench_detect`` returns ``[]`` there.

The contract is versioned by :data:`CONTRACT_VERSION`; a minor version may add hooks
(every hook is optional to implement) or optional keyword arguments, never remove one.

History: 1.0 first release; 1.1 adds ``infbench_device_catalog``; 1.2 adds the optional
``link_bytes_s`` key of ``infbench_device_info`` and ``DeviceSpec.link_bandwidth_gb_s``;
1.3 adds the optional ``apptainer_options`` key of ``infbench_container_spec`` and the image
recipe convention (``plugins/<vendor>/docker/Dockerfile.<name>`` with ``ARG ENGINE`` and
``ARG ENGINE_VERSION``); 1.4 adds ``infbench_default_sweep`` (what a bare ``infbench run``
does on a device, engines in order of preference), ``infbench_device_backends`` (which
torch, vLLM and ggml builds run on a device, and the commands installing them) and the
optional ``check`` field of :class:`~infbench.data.engine.EngineSpec`; 1.5 adds the
optional ``PowerSampler.read_channels()`` (telemetry channels read with power: utilisation,
clocks, temperature, throttle reasons, as :class:`~infbench.data.schema.ChannelReading`) and lets
a ``StreamSampler`` line parser return channel readings; 1.6 adds the optional ``options`` and
``native_options`` of ``EngineSpec`` (the ``--engine-arg`` keys an adapter reads; unknown
keys are refused); 1.7 types the three hooks that returned dicts (``infbench_device_info`` ->
:class:`~infbench.data.contract.DeviceLimits`, ``infbench_container_spec`` ->
:class:`~infbench.data.contract.ContainerSpec`, ``infbench_default_sweep`` ->
:class:`~infbench.data.contract.DefaultSweepAnswer`; a dict with the same fields is still
accepted and validated), and makes the core's defaults ``trylast`` implementations inside
pluggy (:mod:`infbench.detect.platforms.defaults`: launch from the engine's factory, the catalog's
limits, every precision, no power source); 1.8 adds the optional ``options_model`` of
``EngineSpec`` (a pydantic model of the engine's options: types and bounds checked before a
run, :mod:`infbench.data.engine_options`), and engine arguments become part of a cell's
identity (``Cell.engine_args``); 1.10 adds ``infbench_device_state`` (persistence mode, locked
clocks, power limit against its default, ECC, MIG: stored with each run, known-bad states warned
about before it, :class:`~infbench.data.contract.DeviceState`); 2.0 hands every engine its typed
options: ``EngineSpec.factory(device, options)`` and ``infbench_launch_engine(engine, device,
options)`` receive the engine's options model (``options_model``, else
:class:`~infbench.data.engine_options.OpenOptions`), defaults in the model, read as attributes
(:mod:`infbench.engines.options`). For one minor version a 1.x factory (its ``options`` not
annotated with a pydantic model, and ``EngineSpec.typed_options``
not set) still gets the given options as a dict, and an adapter may still read its options as
a dict (``options.get(key)``), each with a ``DeprecationWarning``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from infbench.data.contract import ContainerSpec, DefaultSweepAnswer, DeviceLimits, DeviceState

__all__ = ["CONTRACT_VERSION", "ContainerSpec", "DefaultSweepAnswer", "DeviceLimits", "DeviceState", "hookimpl",
           "hookspec"]

if TYPE_CHECKING:  # pragma: no cover
    from infbench.data.engine import Engine, EngineSpec
    from infbench.data.schema import DeviceBackends, DeviceInfo, DeviceSpec
    from infbench.measure.power import PowerSampler

#: Version of this contract (major.minor). Plugins may check it at import time.
CONTRACT_VERSION = "2.0"

hookspec = pluggy.HookspecMarker("infbench")
hookimpl = pluggy.HookimplMarker("infbench")


@hookspec
def infbench_detect() -> list[DeviceInfo]:
    """Report the devices this plugin sees on this host.

    Returns:
        A list of :class:`~infbench.data.schema.DeviceInfo`, one per group of identical
        devices (e.g. 8 x H100 is one entry with ``count=8``); ``[]`` when the
        hardware or its management library is absent. Must not raise for that.
    """


@hookspec
def infbench_device_catalog() -> list[DeviceSpec]:
    """Descriptions of the device models this plugin knows, detected here or not
    (memory, bandwidth, dense peak FLOP/s per precision, TDP, sources); used by the
    roofline and ``infbench devices``. Load them from a
    ``devices.yaml`` with :func:`infbench.detect.devices.load_device_specs`. Since 1.1.
    """


@hookspec(firstresult=True)
def infbench_device_info(device: DeviceInfo) -> DeviceLimits | None:
    """Describe the hardware limits of ``device`` for the roofline and reports.

    A plugin with a catalog need not implement this: the core's ``trylast`` default matches
    ``device.model`` against every plugin's catalog (:mod:`infbench.detect.platforms.defaults`).

    Returns:
        A :class:`~infbench.data.contract.DeviceLimits` (``memory_bandwidth_bytes_s`` in B/s,
        ``peak_flops`` precision class -> dense FLOP/s, ``memory_bytes`` in B, ``tdp_w`` in W,
        ``link_bytes_s`` device-to-device B/s one direction, ``source``; since 1.7, a dict of
        those fields before), or ``None`` if the plugin does not own ``device`` or does not
        know it.
    """


@hookspec(firstresult=True)
def infbench_supported_precisions(device: DeviceInfo) -> list[str] | None:
    """Precision classes (:data:`infbench.data.schema.PRECISIONS`) ``device`` can run.

    Example: an A100 gives ``["fp32", "fp16", "bf16", "int8"]``, an H100 adds ``"fp8"``.
    Return ``None`` for a device this plugin does not own.
    """


@hookspec(firstresult=True)
def infbench_power_sampler(device: DeviceInfo) -> PowerSampler | None:
    """A power sampler for ``device``, or ``None`` if the plugin does not own it.

    Returns:
        An :class:`~infbench.measure.power.PowerSampler` (``read()`` returns
        :class:`~infbench.data.schema.PowerReading` objects; energy counters are preferred
        over instantaneous power). When the device has no readable power source,
        return :class:`~infbench.measure.power.NoPower` with the reason, so the
        results say why energy is missing. The core drives the sampler from its own
        thread at ``--power-interval`` (default 0.1 s). Since 1.5 the sampler may also
        implement ``read_channels()`` (utilisation, clocks, temperature, throttle
        reasons; :data:`infbench.measure.telemetry.CHANNELS`), read on the same thread;
        a ``NoPower`` may carry channels too.
    """


@hookspec
def infbench_engines() -> list[EngineSpec]:
    """Engine adapters this plugin provides, or supports on its hardware.

    Returns:
        A list of :class:`~infbench.data.engine.EngineSpec`. Specs with the same
        ``name`` are merged: a vendor plugin may return a spec with ``factory=None``
        to say an engine provided elsewhere runs on its ``platforms``.
    """


@hookspec(firstresult=True)
def infbench_launch_engine(engine: str, device: DeviceInfo, options: Any) -> Engine | None:
    """Create (not yet start) the engine adapter ``engine`` for ``device``.

    The core's own implementation runs last (``trylast``, :mod:`infbench.detect.platforms.defaults`)
    and builds the adapter from its :class:`~infbench.data.engine.EngineSpec`; a plugin implements this hook only to
    customise the adapter for its hardware (environment, device selection). Return
    ``None`` to leave the choice to the next plugin.

    Args:
        engine: engine name (``llama.cpp``, ``transformers``...).
        device: the device group the cells run on.
        options: the engine's typed options (contract 2.0: its options model; ``n_threads``...).
    """


@hookspec(firstresult=True)
def infbench_container_spec(device: DeviceInfo, engine: str) -> ContainerSpec | None:
    """The container in which ``engine`` runs on ``device``, for the docker SDK.

    Returns:
        A :class:`~infbench.data.contract.ContainerSpec` (since 1.7; before, a dict of its
        fields) with ``image`` and any of ``device_requests``, ``devices``, ``runtime``,
        ``environment``, ``ipc_mode``, ``shm_size``, ``ulimits``, ``cap_add``,
        ``group_add``, ``security_opt``, ``privileged``, ``network_mode``, ``user``
        (keyword arguments of ``docker.containers.run``), and optionally
        ``apptainer_options`` (extra ``apptainer exec`` options, e.g. device binds, used
        only by ``--executor container --container-runtime apptainer``; since contract 1.3), or ``None`` if this plugin
        does not own ``device`` or has no image for ``engine``. The image must be built
        from a recipe ``plugins/<vendor>/docker/Dockerfile.<name>`` and named
        ``infbench/<vendor>-<name>:<version>`` (``infbench containers build``); its
        ENTRYPOINT runs ``infbench worker``. The launcher adds the job and cache mounts,
        the host user, ``network_mode="none"`` unless given, and never ``privileged``
        unless given (then the user is told).
    """


@hookspec(firstresult=True)
def infbench_default_sweep(device: DeviceInfo) -> DefaultSweepAnswer | None:
    """What a bare ``infbench run`` measures on ``device`` (since 1.4).

    Returns:
        A :class:`~infbench.data.contract.DefaultSweepAnswer` (since 1.7; before, a dict) of
        :class:`~infbench.data.schema.Sweep` fields, optionally with ``preset``
        (a name from :data:`infbench.plan.PRESETS` whose fields the others override) and
        ``description`` (one line for ``--dry-run``). ``engines`` lists the engines in
        order of preference: the core takes the first one that runs here, trying the
        plugin's image first (``infbench_container_spec``) when it is built and a
        container runtime answers, then each engine in-process; on a CPU the image comes
        after the in-process engines (:func:`infbench.execution.default_sweep.default_sweep`). ``None`` for a device
        this plugin does not own. Example (the GPU plugins)::

            DefaultSweepAnswer(preset="lib-corner", engines=["vllm", "transformers", "llama.cpp"],
                               dtypes=["bf16"], description="LLM-Inference-Bench corner")
    """


@hookspec(firstresult=True)
def infbench_device_backends(device: DeviceInfo) -> DeviceBackends | dict[str, Any] | None:
    """Which builds of the engine libraries run on ``device`` (since 1.4).

    Returns:
        A :class:`~infbench.data.schema.DeviceBackends` (or its fields as a dict): the
        PyTorch build (``cuda``, ``hip``, ``xpu``, ``hpu``), the vLLM platform, the ggml
        backends, and the command installing each library's build for the device. The
        core uses it to list each engine as usable, not installed, or installed without
        support for the device (``infbench detect``), to pick the default sweep's engine,
        and in every adapter's device check before the first timed request; an adapter
        refuses an accelerator whose plugin does not answer. ``None`` for a device this
        plugin does not own.
    """


@hookspec(firstresult=True)
def infbench_device_state(device: DeviceInfo) -> list[DeviceState] | None:
    """The settings of ``device``'s devices that change what they measure (since 1.10): one
    :class:`~infbench.data.contract.DeviceState` per device of the group (persistence mode,
    application clocks, power limit and its default, ECC, MIG), read once at the start of a
    run. Stored in the run's provenance; the core warns before a run on the known-bad ones
    (:func:`infbench.measure.hoststate.state_warnings`). ``None``: not this plugin's device,
    or nothing to report. A dict per device with the same fields is accepted too.
    """
