"""Calling a plugin's hook with bounds (issue 41): a time limit, its printing captured, and
its attempts to end the process turned into errors.

Every hook of a plugin that is not part of the core is called through :func:`guarded`:

* **a time limit** (:func:`hook_timeout_s`: ``INFBENCH_PLUGIN_TIMEOUT_S``, default 30 s):
  the call runs in a daemon thread; one that has not returned by then is abandoned, and
  :class:`PluginHookError` names the plugin, the hook and the limit. The thread cannot be
  killed, so the plugin is marked hung and its hooks are not called again in this process;
* **no exit**: ``sys.exit()`` / ``raise SystemExit`` and ``os._exit()`` inside a hook become
  :class:`PluginHookError` (``os._exit`` is replaced for the duration of the call);
* **output captured**: what the hook writes to ``sys.stdout`` / ``sys.stderr`` (from its own
  thread) is kept, not printed; :attr:`Outcome.output` holds it, stripped of escape
  sequences and control characters and redacted (:func:`infbench.data.outputs.terminal_text`).

Output written by native code straight to file descriptor 1 or 2 is not seen.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from infbench.data.errors import InfbenchError
from infbench.data.outputs import terminal_text

#: Default seconds a plugin's hook may take (``INFBENCH_PLUGIN_TIMEOUT_S`` overrides).
DEFAULT_TIMEOUT_S = 30.0
#: Most characters of a hook's captured output kept.
MAX_OUTPUT = 4000


class PluginHookError(InfbenchError):
    """A plugin's hook hung, tried to end the process, or raised; ``plugin``, ``hook`` and
    ``kind`` (``timeout``, ``exit``, ``raised``) say which and how."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None, plugin: str = "", hook: str = "",
                 kind: str = "raised"):
        super().__init__(message, hint)
        self.plugin, self.hook, self.kind = plugin, hook, kind


class _PluginExit(BaseException):
    """Raised in place of ``os._exit`` inside a guarded hook."""

    def __init__(self, code: Any):
        super().__init__(code)
        self.code = code


def hook_timeout_s() -> float:
    """The per-hook limit in s: ``INFBENCH_PLUGIN_TIMEOUT_S`` (a finite number > 0), else
    :data:`DEFAULT_TIMEOUT_S`."""
    raw = os.environ.get("INFBENCH_PLUGIN_TIMEOUT_S")
    try:
        v = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return v if 0 < v < 1e6 else DEFAULT_TIMEOUT_S


@dataclass
class Outcome:
    """What one guarded call gave: ``value`` (the hook's answer), ``output`` (what it
    printed, cleaned and redacted; empty when nothing)."""

    value: Any = None
    output: str = ""


class _Router(io.TextIOBase):
    """A ``sys.stdout``/``sys.stderr`` stand-in: writes from a capturing thread go to that
    thread's buffer, every other write to the stream it replaced."""

    def __init__(self, real: Any):
        self.real = real
        self.buffers: dict[int, io.StringIO] = {}

    def write(self, s: str) -> int:  # noqa: D102 - io.TextIOBase's
        buf = self.buffers.get(threading.get_ident())
        if buf is not None:
            if buf.tell() < MAX_OUTPUT * 4:
                buf.write(str(s))
            return len(s)
        return self.real.write(s)

    def flush(self) -> None:  # noqa: D102
        if threading.get_ident() not in self.buffers:
            with contextlib.suppress(Exception):
                self.real.flush()

    def isatty(self) -> bool:  # noqa: D102
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_lock = threading.Lock()
_routers: dict[str, _Router] = {}
_depth = [0]
_real_exit = os._exit


def _raise_exit(code: Any = 0) -> None:
    if threading.get_ident() in _capturing:
        raise _PluginExit(code)
    _real_exit(code)


_capturing: set[int] = set()


@contextlib.contextmanager
def _capture(ident_box: list[int]) -> Iterator[dict[str, io.StringIO]]:
    """Install the routers and the ``os._exit`` stand-in for the duration of one call."""
    with _lock:
        if _depth[0] == 0:
            for name in ("stdout", "stderr"):
                _routers[name] = _Router(getattr(sys, name))
                setattr(sys, name, _routers[name])
            os._exit = _raise_exit  # type: ignore[assignment]  # os._exit's stand-in raises
        _depth[0] += 1
    bufs: dict[str, io.StringIO] = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    try:
        yield bufs
    finally:
        with _lock:
            for name in ("stdout", "stderr"):
                if ident_box:
                    _routers[name].buffers.pop(ident_box[0], None)
            _depth[0] -= 1
            if _depth[0] == 0:
                for name in ("stdout", "stderr"):
                    if getattr(sys, name) is _routers[name]:
                        setattr(sys, name, _routers[name].real)
                if os._exit is _raise_exit:
                    os._exit = _real_exit


def clean_output(text: str) -> str:
    """A hook's printed text as it may be shown: escape sequences and control characters
    removed, secrets redacted, cut to :data:`MAX_OUTPUT` characters."""
    t = terminal_text(text).strip()
    return t[:MAX_OUTPUT] + ("..." if len(t) > MAX_OUTPUT else "")


def guarded(plugin: str, hook: str, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None,
            **kwargs: Any) -> Outcome:
    """Call ``fn(*args, **kwargs)``, a hook of ``plugin``, within the bounds of the module doc.

    Returns:
        :class:`Outcome` with the answer and the cleaned output.

    Raises:
        PluginHookError: the hook did not return within ``timeout_s`` (default
            :func:`hook_timeout_s`; ``kind`` ``timeout``), or called ``sys.exit``/``os._exit``
            (``kind`` ``exit``). Any other exception of the hook is raised as it was, with
            ``__plugin_output__`` set to what it printed.
    """
    limit = hook_timeout_s() if timeout_s is None else timeout_s
    box: dict[str, Any] = {}
    ident: list[int] = []

    with _capture(ident) as bufs:
        def run() -> None:
            me = threading.get_ident()
            ident.append(me)
            with _lock:
                _routers["stdout"].buffers[me] = bufs["stdout"]
                _routers["stderr"].buffers[me] = bufs["stderr"]
                _capturing.add(me)
            try:
                box["value"] = fn(*args, **kwargs)
            except _PluginExit as exc:
                box["exit"] = f"os._exit({exc.code!r})"
            except SystemExit as exc:
                box["exit"] = f"sys.exit({exc.code!r})"
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc
            finally:
                _capturing.discard(me)

        t = threading.Thread(target=run, name=f"infbench-plugin-{plugin}-{hook}", daemon=True)
        t.start()
        t.join(limit)
        printed = bufs["stdout"].getvalue() + bufs["stderr"].getvalue()
    output = clean_output(printed) if printed else ""
    if t.is_alive():
        raise PluginHookError(f"plugin {plugin!r}: {hook} did not return within {limit:g} s; infbench goes on "
                              "without this plugin", hint=f"fix or update the plugin, disable it with "
                              f"INFBENCH_DISABLE_PLUGINS={plugin}, or raise INFBENCH_PLUGIN_TIMEOUT_S",
                              plugin=plugin, hook=hook, kind="timeout")
    if "exit" in box:
        raise PluginHookError(f"plugin {plugin!r}: {hook} called {box['exit']}, trying to end infbench; a hook "
                              "returns its answer (or raises) and never exits the process",
                              hint=f"fix the plugin, or disable it with INFBENCH_DISABLE_PLUGINS={plugin}",
                              plugin=plugin, hook=hook, kind="exit")
    if "error" in box:
        exc = box["error"]
        with contextlib.suppress(AttributeError, TypeError):
            exc.__plugin_output__ = output
        raise exc
    return Outcome(box.get("value"), output)


@dataclass
class HookLog:
    """What guarded calls of one plugin manager saw: the plugins marked hung (name ->
    message) and each hook's printed output (``(plugin, hook)`` -> text)."""

    hung: dict[str, str] = field(default_factory=dict)
    output: dict[tuple[str, str], str] = field(default_factory=dict)
