"""The plugin manager: built-in plugins, entry-point plugins, and safe hook calls.

Built-in plugins (``cpu`` and ``engines``) are part of the core; third-party plugins
are found through the entry-point group ``infbench``. Set ``INFBENCH_DISABLE_PLUGINS``
to a comma-separated list of plugin names to keep them from loading (built-ins too).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata as md
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pluggy

from infbench.contract import hookspecs
from infbench.contract.guard import HookLog, PluginHookError, guarded

ENTRY_POINT_GROUP = "infbench"
BUILTIN_PLUGINS = {
    "cpu": "infbench.detect.platforms.cpu",
    "engines": "infbench.engines.builtin",
}
#: The module of the core's ``trylast`` hook implementations (:class:`CoreDefaults`), the
#: built-in plugin ``core``.
CORE_DEFAULTS = "infbench.detect.platforms.defaults"


@dataclass
class PluginInfo:
    """What ``infbench plugins`` shows about one plugin.

    Attributes:
        name: plugin name (entry-point name, or the built-in's name).
        module: module path of the plugin object.
        distribution: distribution that ships it (``infbench`` for built-ins).
        version: that distribution's version.
        hooks: names of the hooks it implements.
        error: why it failed to load, if it did (then it is not registered).
        disabled: True when ``INFBENCH_DISABLE_PLUGINS`` names it.
        shadows: the name of the plugin loaded first under the same name (a built-in, the
            core, or another distribution's); this one is then not loaded.
    """

    name: str
    module: str
    distribution: str
    version: str
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    disabled: bool = False
    shadows: str | None = None


#: Plugins whose hooks are called directly (the core's own): every other plugin's hooks go
#: through :func:`infbench.contract.guard.guarded` (a time limit, output captured, no exit).
TRUSTED_PLUGINS = frozenset({*BUILTIN_PLUGINS, "core"})


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with the ``infbench`` hook specs and a record of each plugin.

    The hooks of every plugin outside the core (:data:`TRUSTED_PLUGINS`) are called within
    bounds (:mod:`infbench.contract.guard`): a hook that does not return within
    ``INFBENCH_PLUGIN_TIMEOUT_S`` raises :class:`~infbench.contract.guard.PluginHookError`
    naming the plugin and the hook, and that plugin is skipped afterwards (:attr:`log`
    ``.hung``); a hook that exits raises the same error; what a hook prints is kept in
    :attr:`log` ``.output`` and shown cleaned and redacted on stderr.
    """

    def __init__(self) -> None:
        super().__init__("infbench")
        self.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        #: What is built once from the plugins (the engine registry...); cleared when one is
        #: registered or unregistered.
        self.cache: dict[str, Any] = {}
        self.log = HookLog()

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """pluggy's ``register``, clearing :attr:`cache`."""
        self.cache.clear()
        return super().register(plugin, name)

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        """pluggy's ``unregister``, clearing :attr:`cache`."""
        self.cache.clear()
        return super().unregister(plugin, name)

    def guarded_call(self, plugin: str, hook: str, fn: Any, **kwargs: Any) -> Any:
        """``fn(**kwargs)``, a hook of ``plugin``: directly for the core's plugins, else
        through :func:`~infbench.contract.guard.guarded`, recording a hang and the output.

        Raises:
            PluginHookError: the plugin hung (now or earlier), or its hook tried to exit.
        """
        if plugin in TRUSTED_PLUGINS:
            return fn(**kwargs)
        if plugin in self.log.hung:
            raise PluginHookError(self.log.hung[plugin], plugin=plugin, hook=hook, kind="timeout")
        try:
            res = guarded(plugin, hook, fn, **kwargs)
        except PluginHookError as exc:
            if exc.kind == "timeout":
                self.log.hung[plugin] = exc.message
            raise
        except BaseException as exc:
            self._note_output(plugin, hook, getattr(exc, "__plugin_output__", ""))
            raise
        self._note_output(plugin, hook, res.output)
        return res.value

    def _note_output(self, plugin: str, hook: str, text: str) -> None:
        if not text:
            return
        self.log.output[(plugin, hook)] = text
        with contextlib.suppress(Exception):
            sys.stderr.write(f"infbench: plugin {plugin!r} printed during {hook} (shown cleaned): {text}\n")

    def _hookexec(self, hook_name: str, methods: Sequence[Any], kwargs: Mapping[str, object],
                  firstresult: bool) -> Any:
        """pluggy's call of a hook, with each implementation of a plugin outside the core
        called through :meth:`guarded_call`; a plugin marked hung is skipped (its answer
        is missing, as if it did not implement the hook)."""
        if all(m.plugin_name in TRUSTED_PLUGINS for m in methods) or any(
                m.hookwrapper or m.wrapper for m in methods):
            return super()._hookexec(hook_name, methods, kwargs, firstresult)
        results: list[Any] = []
        for impl in reversed(methods):
            if impl.plugin_name in self.log.hung:
                continue
            args = {k: kwargs[k] for k in impl.argnames}
            res = self.guarded_call(impl.plugin_name, hook_name, impl.function, **args)
            if res is not None:
                results.append(res)
                if firstresult:
                    return res
        return None if firstresult else results

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any, BaseException | None]]:
        """Call every implementation of ``hook_name`` separately, isolating failures (a
        hook that hangs, exits or raises is that plugin's error, and the others still answer).

        Returns:
            ``[(plugin_name, result, exception_or_None), ...]`` in pluggy's call order,
            so one broken plugin cannot hide the others (used for detection).
        """
        out: list[tuple[str, Any, BaseException | None]] = []
        caller = getattr(self.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):
            try:
                args = {k: kwargs[k] for k in impl.argnames}
                out.append((impl.plugin_name, self.guarded_call(impl.plugin_name, hook_name, impl.function, **args),
                            None))
            except Exception as exc:  # noqa: BLE001 - a plugin must not break the run
                out.append((impl.plugin_name, None, exc))
        return out


def disabled_plugins() -> set[str]:
    """Names listed in ``INFBENCH_DISABLE_PLUGINS`` (comma separated)."""
    raw = os.environ.get("INFBENCH_DISABLE_PLUGINS", "")
    return {p.strip() for p in raw.split(",") if p.strip()}


def _hooks_of(pm: PluginManager, plugin: object) -> list[str]:
    return sorted(h.name for h in (pm.get_hookcallers(plugin) or []))


def build_plugin_manager() -> PluginManager:
    """Create a fresh :class:`PluginManager` with built-ins and entry-point plugins.

    A plugin that fails to import is recorded with its error (see ``infbench
    plugins``) instead of aborting; a plugin whose hook names are misspelled makes
    :meth:`pluggy.PluginManager.check_pending` raise ``PluginValidationError``.
    """
    pm = PluginManager()
    blocked = disabled_plugins()
    version = md.version("infbench") if _has_dist("infbench") else "unknown"
    for name, modpath in BUILTIN_PLUGINS.items():
        info = PluginInfo(name, modpath, "infbench", version, disabled=name in blocked)
        pm.infos[name] = info
        if info.disabled:
            continue
        module = importlib.import_module(modpath)
        pm.register(module, name=name)
        info.hooks = _hooks_of(pm, module)
    if "core" not in blocked:  # the core's trylast defaults, answering last; loaded by name like the built-ins
        defaults = importlib.import_module(CORE_DEFAULTS).CoreDefaults(pm)
        pm.infos["core"] = PluginInfo("core", CORE_DEFAULTS, "infbench", version)
        pm.register(defaults, name="core")
        pm.infos["core"].hooks = _hooks_of(pm, defaults)
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist else "?"
        ver = ep.dist.version if ep.dist else "?"
        info = PluginInfo(ep.name, ep.value, dist, ver, disabled=ep.name in blocked)
        if ep.name in pm.infos:  # a second plugin of one name: never loaded, never hides the first one's row
            first = pm.infos[ep.name]
            key = f"{ep.name} ({dist})"
            info.error = (f"not loaded: it has the name of the plugin {ep.name!r} of {first.distribution} "
                          f"({first.module}), which it would shadow; rename its entry point")
            info.shadows = ep.name
            pm.infos[key] = info
            continue
        pm.infos[ep.name] = info
        if info.disabled or pm.has_plugin(ep.name):
            continue
        try:  # importing a plugin runs its code: bounded like its hooks (a hang, an exit, printing)
            plugin = pm.guarded_call(ep.name, "import", ep.load)
            pm.register(plugin, name=ep.name)
        except PluginHookError as exc:
            info.error = exc.message
            continue
        except Exception as exc:  # noqa: BLE001 - report, keep the others
            info.error = f"{type(exc).__name__}: {exc}"
            continue
        info.hooks = _hooks_of(pm, plugin)
    pm.check_pending()
    return pm


def _has_dist(name: str) -> bool:
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False


@lru_cache(maxsize=1)
def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager (built once; tests call :func:`build_plugin_manager`)."""
    return build_plugin_manager()


def check_plugin(plugin: object, name: str = "plugin-under-test") -> list[str]:
    """Validate a plugin object against the hook specs, for plugin authors' tests.

    Registers ``plugin`` in a fresh :class:`PluginManager` (pluggy checks that each
    ``@hookimpl``'s arguments are a subset of its spec's) and requires every function
    named ``infbench_*`` to be a marked implementation of a known hook.

    Returns:
        The names of the hooks it implements, sorted.

    Raises:
        pluggy.PluginValidationError: an implementation's arguments do not match its spec,
            or a hook name is unknown (misspelled).
        ValueError: an ``infbench_*`` function lacks ``@hookimpl`` (pluggy would ignore it).
    """
    pm = PluginManager()
    pm.register(plugin, name=name)
    pm.check_pending()
    hooks = _hooks_of(pm, plugin)
    unmarked = sorted(n for n in dir(plugin) if n.startswith("infbench_") and callable(getattr(plugin, n))
                      and n not in hooks)
    if unmarked:
        raise ValueError(f"{', '.join(unmarked)} look like hooks but lack @infbench.contract.hookspecs.hookimpl")
    return hooks
