"""The plugin conformance kit: call each hook a plugin implements, the way the core will, and
check what comes back against the contract (docs/plugins.md). Plugins' tests import it from
:mod:`infbench.testing.conformance`; ``infbench plugins check`` runs it on installed plugins.

For plugin authors and for ``infbench plugins check [NAME]``::

    from infbench.testing.conformance import assert_conforms
    from infbench_acme import hooks

    def test_acme_plugin_conforms():
        assert_conforms(hooks)

What is checked, hook by hook (a hook the plugin does not implement is skipped):

* the hook functions themselves: each ``infbench_*`` function is a marked ``@hookimpl`` of a
  known hook with the spec's arguments (:func:`infbench.contract.manager.check_plugin`);
* ``infbench_detect`` returns a list of :class:`~infbench.data.schema.DeviceInfo` and does
  not raise (a plugin on a host without its hardware returns ``[]``); each device has a
  count of at least 1;
* every hook is called within bounds (:mod:`infbench.contract.guard`): one that hangs past
  ``INFBENCH_PLUGIN_TIMEOUT_S``, calls ``sys.exit``/``os._exit`` or prints to the terminal
  fails, with the reason (its output shown cleaned and redacted);
* ``infbench_detect`` reports no impossible device group (a count below 1 or above
  65,536, memory of 0 bytes or less);
* per device the plugin reported, *and* per stand-in device built from each of its catalog
  entries (a generic device of its vendor when it has none), so a plugin is checked on a
  host without its hardware too (or each of ``devices`` given):
  ``infbench_supported_precisions`` returns None or known precision names
  (:data:`~infbench.data.schema.PRECISIONS`); ``infbench_device_info`` returns None or a
  :class:`~infbench.contract.hookspecs.DeviceLimits`; ``infbench_power_sampler`` returns None
  or a :class:`~infbench.measure.power.PowerSampler` whose readings over ``sample_s`` are
  finite, non-negative (W, J), with non-decreasing ``perf_counter_ns`` times and device
  indexes inside the device's count; ``infbench_default_sweep`` returns None or a
  :class:`~infbench.contract.hookspecs.DefaultSweepAnswer`; ``infbench_container_spec``
  returns None or a :class:`~infbench.contract.hookspecs.ContainerSpec` for each engine;
* ``infbench_device_catalog`` returns :class:`~infbench.data.schema.DeviceSpec` entries with
  unique ids, of the plugin's vendor;
* ``infbench_engines`` returns :class:`~infbench.data.engine.EngineSpec` entries with unique
  names, each dtype mapped to a precision the core plans with (what ``infbench run --dry-run``
  needs); an entry may name no platform (the registry merges the platforms that every plugin
  declares for an engine).

The kit calls the hooks directly (not through the core's fallbacks and adapters), so an
answer the core would have to repair is reported here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from infbench.contract.guard import PluginHookError, guarded
from infbench.contract.hookspecs import ContainerSpec, DefaultSweepAnswer, DeviceLimits
from infbench.contract.manager import check_plugin
from infbench.data.engine import EngineSpec, takes_typed
from infbench.data.schema import PRECISIONS, DeviceInfo, DeviceSpec, PowerReading, impossible_device
from infbench.measure.power import PowerSampler


@dataclass(frozen=True)
class Finding:
    """One check of one hook.

    Attributes:
        hook: the hook's name (``infbench_detect``...) or ``hooks`` for the functions themselves.
        ok: whether the answer keeps to the contract.
        message: what was checked and, if not ``ok``, what was wrong and how to fix it.
    """

    hook: str
    ok: bool
    message: str


class NonConformingPlugin(AssertionError):
    """Raised by :func:`assert_conforms`: the plugin broke the contract (the failed findings)."""


class _Calls:
    """The kit's calls of one plugin's hooks, each bounded (:func:`~infbench.contract.guard.guarded`:
    a time limit, output captured, no exit), with what went wrong beyond the answer: the
    hooks that printed, exited or hung (each becomes a failed finding)."""

    def __init__(self, plugin: object, name: str, timeout_s: float | None):
        self.plugin, self.name, self.timeout_s = plugin, name, timeout_s
        self.printed: list[tuple[str, str, str]] = []
        self.hung = False
        self.exercised: dict[str, list[str]] = {}

    def __call__(self, hook: str, *args: Any, label: str = "") -> tuple[bool, Any]:
        """``(True, answer)``, or ``(False, "Type: message")`` when the hook raised, exited
        or did not return in time (a hung plugin's later hooks are not called)."""
        self.exercised.setdefault(hook, [])
        if label and label not in self.exercised[hook]:
            self.exercised[hook].append(label)
        if self.hung:
            return False, "PluginHookError: not called: an earlier hook of this plugin did not return"
        try:
            res = guarded(self.name, hook, getattr(self.plugin, hook), *args, timeout_s=self.timeout_s)
        except PluginHookError as exc:
            self.hung = self.hung or exc.kind == "timeout"
            return False, f"PluginHookError: {exc.message}"
        except Exception as exc:  # noqa: BLE001 - a raising hook is a finding, not a crash of the kit
            self._printed(hook, label, getattr(exc, "__plugin_output__", ""))
            return False, f"{type(exc).__name__}: {exc}"
        self._printed(hook, label, res.output)
        return True, res.value

    def method(self, obj: object, hook: str, method: str, label: str) -> Any:
        """``obj.method()`` (a sampler's ``read``/``close``) within the same bounds; its
        printing is reported under ``hook``.

        Raises:
            PluginHookError: it hung or tried to exit (with the hook's name).
        """
        res = guarded(self.name, f"{hook}: {method}()", getattr(obj, method), timeout_s=self.timeout_s)
        self._printed(hook, label, res.output)
        return res.value

    def _printed(self, hook: str, label: str, text: str) -> None:
        if text:
            self.printed.append((hook, label, text))


def stand_in_devices(vendor: str, catalog: list[DeviceSpec], kind: str = "gpu") -> list[DeviceInfo]:
    """Devices to call the per-device hooks on where the plugin's hardware is absent: one
    per catalog entry (its name as the model, its memory), or one generic device of
    ``vendor`` when the catalog is empty. Each is marked ``properties["stand_in"]``."""
    out = [DeviceInfo(vendor=s.vendor, kind=kind, model=s.name, count=1,
                      memory_bytes=s.per_device()["memory_bytes"], properties={"stand_in": True})
           for s in catalog]
    return out or [DeviceInfo(vendor=vendor, kind=kind, model=f"{vendor} stand-in device",
                              count=1, properties={"stand_in": True})]


def _bad(label: str, ok: bool, ans: Any, expected: str) -> str:
    """The message of a wrong answer: what the hook raised or returned, and what it should."""
    got = f"raised {ans}" if not ok else f"returned {type(ans).__name__}"
    return f"{label}: {got} ({expected})"


def _as(model: type, value: Any) -> Any:
    """``value`` as ``model`` (a pydantic model or a dict it validates from), or None."""
    if isinstance(value, model):
        return value
    if isinstance(value, dict) and hasattr(model, "model_validate"):
        try:
            return model.model_validate(value)
        except Exception:  # noqa: BLE001 - reported by the caller as the wrong type
            return None
    return None


def _readings_ok(readings: Any, device: DeviceInfo) -> str | None:
    """What is wrong with one ``read()`` answer, or None."""
    if not isinstance(readings, list) or not all(isinstance(r, PowerReading) for r in readings):
        return f"read() returned {type(readings).__name__}, not a list of PowerReading"
    for r in readings:
        for field in ("power_w", "energy_j"):
            v = getattr(r, field)
            if v is not None and (not math.isfinite(v) or v < 0):
                unit = "W" if field == "power_w" else "J"
                return (f"read() gave {field}={v} {unit} for device {r.device_index}: power and energy are finite "
                        "and never below 0 (a counter that wraps sets energy_range_j)")
        if not 0 <= r.device_index < max(1, device.count):
            return f"read() gave device_index {r.device_index} for a group of {device.count}"
    return None


def _check_sampler(sampler: PowerSampler, device: DeviceInfo, sample_s: float, calls: _Calls | None = None,
                   label: str = "") -> Finding:
    hook = "infbench_power_sampler"
    what = f"{label or device.model}: sampler {getattr(sampler, 'name', '?')!r}"

    def call(method: str) -> Any:
        return getattr(sampler, method)() if calls is None else calls.method(sampler, hook, method, label)
    try:
        if not sampler.available:
            return Finding(hook, True, f"{what}: no power here ({getattr(sampler, 'reason', 'no reason given')})")
        if sampler.source not in ("power", "energy_counter"):
            return Finding(hook, False, f"{what}: source {sampler.source!r} is neither 'power' nor 'energy_counter'")
        times: list[int] = []
        end = time.monotonic() + sample_s
        n = 0
        while True:
            readings = call("read")
            bad = _readings_ok(readings, device)
            if bad:
                return Finding(hook, False, f"{what}: {bad}")
            times += [r.t_ns for r in readings if r.device_index == 0]
            n += 1
            if time.monotonic() >= end:
                break
            time.sleep(min(0.1, sample_s))
        if any(b < a for a, b in zip(times, times[1:])):
            return Finding(hook, False, f"{what}: reading times go backwards (t_ns is time.perf_counter_ns())")
        return Finding(hook, True, f"{what}: {n} reads over {sample_s:g} s, finite and non-negative")
    except Exception as exc:  # noqa: BLE001
        return Finding(hook, False, f"{what}: raised {type(exc).__name__}: {exc}")
    finally:
        try:
            call("close")
        except Exception as exc:  # noqa: BLE001
            return Finding(hook, False, f"{what}: close() raised {type(exc).__name__}: {exc}")  # noqa: B012


def check_conformance(plugin: object, devices: list[DeviceInfo] | None = None, sample_s: float = 0.3,
                      name: str = "plugin-under-test", timeout_s: float | None = None) -> list[Finding]:
    """Every check of the module doc on ``plugin`` (a module or object with hook functions).

    Each hook is called within bounds (:func:`~infbench.contract.guard.guarded`): a hook
    that does not return within ``timeout_s`` (default ``INFBENCH_PLUGIN_TIMEOUT_S`` or 30 s),
    that calls ``sys.exit``/``os._exit``, or that prints fails, with the reason (what it
    printed is shown cleaned and redacted).

    Args:
        plugin: the plugin (its ``hooks`` module, as registered under the entry point).
        devices: the devices to ask the per-device hooks about; default: what the plugin's
            own ``infbench_detect`` reported, and a stand-in device per entry of its
            catalog (:func:`stand_in_devices`; a generic one of its vendor when it has
            neither a catalog nor a device here), so a plugin is checked on a host without
            its hardware too.
        sample_s: how long to read a power sampler for, s.
        name: the plugin's name in messages.
        timeout_s: the limit of each hook call, s.

    Returns:
        The findings, in hook order, ending with which hooks were exercised on what; a
        plugin conforms when every ``ok`` is True.
    """
    out: list[Finding] = []
    try:
        hooks = check_plugin(plugin, name)
    except Exception as exc:  # noqa: BLE001 - pluggy's validation error or the unmarked-hook ValueError
        return [Finding("hooks", False, f"{type(exc).__name__}: {exc}")]
    out.append(Finding("hooks", True, f"{len(hooks)} hooks, each a marked implementation of a known hook"))
    _call = _Calls(plugin, name, timeout_s)
    found: list[DeviceInfo] = []
    if "infbench_detect" in hooks:
        ok, ans = _call("infbench_detect", label="this host")
        impossible = [w for d in ans if isinstance(d, DeviceInfo) and (w := impossible_device(d))] \
            if ok and isinstance(ans, list) else []
        if not ok:
            out.append(Finding("infbench_detect", False, f"raised {ans}: detect returns [] when the hardware or its "
                                                         "driver library is absent, never raises"))
        elif not isinstance(ans, list) or not all(isinstance(d, DeviceInfo) for d in ans):
            got = type(ans).__name__ if not isinstance(ans, list) else \
                f"a list holding {', '.join(sorted({type(d).__name__ for d in ans}))}"
            out.append(Finding("infbench_detect", False, f"returned {got}: a list of DeviceInfo"))
        elif impossible:
            out.append(Finding("infbench_detect", False, f"impossible device group(s): {'; '.join(impossible[:3])}"))
        else:
            found = ans
            out.append(Finding("infbench_detect", True, f"{len(ans)} device group(s)" if ans else
                               "no devices here (an empty list, as it should be without the hardware)"))
    engines: list[EngineSpec] = []
    if "infbench_engines" in hooks:
        ok, ans = _call("infbench_engines", label="no device")
        if not ok or not isinstance(ans, list) or not all(isinstance(e, EngineSpec) for e in ans):
            out.append(Finding("infbench_engines", False, f"{'raised ' + ans if not ok else 'returned ' + repr(ans)}"
                                                          ": a list of EngineSpec"))
        else:
            names = [e.name for e in ans]
            dup = sorted({n for n in names if names.count(n) > 1})
            odd = sorted(f"{e.name}: {d} -> {c}" for e in ans for d, c in e.dtypes.items()
                         if c not in PRECISIONS and c != "auto")
            bad = (f"engine names repeat: {dup}" if dup else
                   f"dtypes mapped to no precision the core knows ({', '.join(PRECISIONS)}, or auto): {odd}"
                   if odd else None)
            out.append(Finding("infbench_engines", bad is None, bad or f"{len(ans)} engine(s): {', '.join(names)}"))
            engines = ans if bad is None else []
            for e in engines:
                if e.factory is not None:
                    typed = takes_typed(e)
                    out.append(Finding("infbench_engines", typed, f"{e.name}: the factory takes its typed options "
                                       "(contract 2.0)" if typed else f"{e.name}: the factory takes its options as "
                                       "a dict (contract 1.x, deprecated: it gets a dict with a DeprecationWarning "
                                       "until 2.1); annotate its options parameter with the engine's options model "
                                       "(EngineSpec.options_model, else infbench.plugin.EngineOptions)"))
    catalog: list[DeviceSpec] = []
    if "infbench_device_catalog" in hooks:
        ok, ans = _call("infbench_device_catalog", label="no device")
        if not ok or not isinstance(ans, (list, tuple)) or not all(isinstance(s, DeviceSpec) for s in ans):
            out.append(Finding("infbench_device_catalog", False,
                               f"{'raised ' + ans if not ok else 'returned ' + type(ans).__name__}: a list of "
                               "DeviceSpec (packaged_specs reads the plugin's devices.yaml)"))
        else:
            ids = [s.id for s in ans]
            dup = sorted({i for i in ids if ids.count(i) > 1})
            out.append(Finding("infbench_device_catalog", not dup,
                               f"ids repeat: {dup}" if dup else f"{len(ans)} catalog entries"))
            catalog = list(ans)
    if devices is None:
        kind = found[0].kind if found else "gpu"
        vendor = found[0].vendor if found else (catalog[0].vendor if catalog else name)
        devices = found + (stand_in_devices(vendor, catalog, kind) if catalog or not found else [])
    for dev in devices:
        label = f"{dev.model} x{dev.count}" + (" (stand-in)" if dev.properties.get("stand_in") else "")
        if "infbench_supported_precisions" in hooks:
            ok, ans = _call("infbench_supported_precisions", dev, label=label)
            unknown = sorted(set(ans) - set(PRECISIONS)) if ok and isinstance(ans, list) else []
            good = ok and not unknown and (ans is None or isinstance(ans, list))
            expected = f"None or names from {', '.join(PRECISIONS)}"
            out.append(Finding("infbench_supported_precisions", good,
                               f"{label}: {ans}" if good else
                               f"{label}: unknown precisions {unknown} ({expected})" if unknown else
                               _bad(label, ok, ans, expected)))
        for hook, model in (("infbench_device_info", DeviceLimits), ("infbench_default_sweep", DefaultSweepAnswer)):
            if hook in hooks:
                ok, ans = _call(hook, dev, label=label)
                if not ok and hook == "infbench_default_sweep" and str(ans).startswith("ConfigError: "):
                    # a stated need for site configuration (a remote platform's model) is an answer: the
                    # core shows its message and hint, as for any ConfigError
                    need = str(ans)[13:].splitlines()[0]
                    out.append(Finding(hook, True, f"{label}: asks for configuration ({need})"))
                    continue
                good = ok and (ans is None or _as(model, ans) is not None)
                out.append(Finding(hook, good, f"{label}: {'none' if ans is None else type(ans).__name__}" if good
                                   else _bad(label, ok, ans, f"None or {model.__name__}")))
        if "infbench_container_spec" in hooks:
            for e in engines or [EngineSpec(name="llama.cpp", factory=None, platforms=[dev.vendor])]:
                ok, ans = _call("infbench_container_spec", dev, e.name, label=label)
                good = ok and (ans is None or _as(ContainerSpec, ans) is not None)
                out.append(Finding("infbench_container_spec", good,
                                   f"{label}, {e.name}: {'none' if ans is None else 'a ContainerSpec'}" if good
                                   else _bad(f"{label}, {e.name}", ok, ans, "None or ContainerSpec")))
        if "infbench_power_sampler" in hooks:
            ok, ans = _call("infbench_power_sampler", dev, label=label)
            if not ok:
                out.append(Finding("infbench_power_sampler", False,
                                   f"{label}: raised {ans} (return NoPower(reason) when power cannot be read)"))
            elif ans is None:
                out.append(Finding("infbench_power_sampler", True, f"{label}: none (another plugin's device)"))
            elif not isinstance(ans, PowerSampler):
                out.append(Finding("infbench_power_sampler", False,
                                   f"{label}: returned {type(ans).__name__}, not a PowerSampler"))
            else:
                out.append(_check_sampler(ans, dev, sample_s, _call, label))
    for hook, where, text in _call.printed:
        out.append(Finding(hook, False, f"{where + ': ' if where else ''}printed to the terminal during the hook "
                                        f"(shown cleaned and redacted): {text[:300]!r}; a hook returns its answer "
                                        "and leaves printing to infbench (use logging)"))
    done = "; ".join(f"{h.removeprefix('infbench_')} on {', '.join(w) or '-'}" for h, w in _call.exercised.items())
    out.append(Finding("exercised", True, f"hooks called: {done or 'none'}"))
    return out


def assert_conforms(plugin: object, devices: list[DeviceInfo] | None = None, sample_s: float = 0.3) -> list[Finding]:
    """:func:`check_conformance`, for a plugin's own tests.

    Returns:
        The findings (all ok).

    Raises:
        NonConformingPlugin: a finding is not ok (the message lists each).
    """
    findings = check_conformance(plugin, devices, sample_s)
    bad = [f for f in findings if not f.ok]
    if bad:
        raise NonConformingPlugin("the plugin breaks the contract:\n" + "\n".join(f"- {f.hook}: {f.message}"
                                                                                  for f in bad))
    return findings
