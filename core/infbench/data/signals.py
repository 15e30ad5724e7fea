"""SIGTERM handled like Ctrl-C, and writes that a signal cannot cut in half.

Batch schedulers (Slurm, PBS) and ``docker stop`` end a job with SIGTERM, whose default
action kills Python without running ``finally`` blocks: the engine's server keeps
running, the run stays ``running`` in the store. :func:`terminate_as_interrupt` turns
SIGTERM into :class:`Terminated`, a :class:`KeyboardInterrupt`, so every path that
handles Ctrl-C (stop the engine, kill the worker container, mark the run
``interrupted``) handles SIGTERM too.

:func:`deferred` holds SIGINT and SIGTERM back while a finished measurement is being
stored: the signal takes effect right after, so it never interrupts a write half way and
never loses a measured cell.

:func:`dying_with_parent` wraps a child's command line so the child is sent SIGTERM when
this process dies, however it dies (SIGKILL included): ``python -m infbench.data.signals
PARENT_PID -- argv...`` sets Linux's ``PR_SET_PDEATHSIG`` and then ``exec``s the command,
which keeps the setting and the pid.

:func:`c_callback` keeps Ctrl-C and SIGTERM from being lost inside a Python function that
C calls back (llama.cpp's log and progress callbacks): ctypes cannot pass an exception
out of a callback, it prints "Exception ignored" and drops it.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: Exit status of a command ended by SIGTERM (128 + 15), as shells report it.
EXIT_TERMINATED = 128 + signal.SIGTERM
#: Exit status of a command ended by Ctrl-C (128 + 2).
EXIT_INTERRUPTED = 128 + signal.SIGINT

_HELD = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM received (raised where Ctrl-C raises :class:`KeyboardInterrupt`).

    Attributes:
        signum: the signal number.
    """

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def exit_status(exc: BaseException) -> int:
    """143 for :class:`Terminated`, 130 for any other :class:`KeyboardInterrupt`."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While active (main thread only), SIGTERM raises :class:`Terminated`; the previous
    handler is restored after. Elsewhere a no-op."""
    if not _main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


_depth = 0
_pending: list[int] = []
_saved: dict[int, Any] = {}


def _hold(signum: int, frame: Any) -> None:
    _pending.append(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back until the block ends, then act on the first one that
    arrived as its handler would have (raise :class:`KeyboardInterrupt` or
    :class:`Terminated`, or the default action). Nests; a no-op outside the main thread
    (signals are only delivered there)."""
    global _depth
    if not _main_thread():
        yield
        return
    if _depth == 0:
        _pending.clear()
        for s in _HELD:
            _saved[s] = signal.signal(s, _hold)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            for s in _HELD:
                signal.signal(s, _saved.pop(s))
            if _pending:
                _redeliver(_pending[0])


def _redeliver(signum: int) -> None:
    handler = signal.getsignal(signum)
    _pending.clear()
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


def run_event_loop(run: Callable[[Coroutine[Any, Any, T]], T], coro: Coroutine[Any, Any, T]) -> T:
    """``run(coro)`` (``asyncio.run`` or ``uvloop.run``) with SIGTERM turned into cancelling
    the coroutine, then :class:`Terminated` raised once the event loop has ended.

    :func:`terminate_as_interrupt`'s handler raises :class:`Terminated` in whatever frame
    runs when SIGTERM lands. Inside an event loop that is often a protocol's
    ``data_received``, and uvloop (0.23) catches every exception there as "Fatal error on
    transport": it logs it, closes that connection, and the run goes on to exit 0 as if no
    signal had come (seen in ``tests/integration/test_fault_injection.py``). While the
    coroutine runs, SIGTERM's handler raises nothing: it notes the signal and cancels the
    main task through the loop, which unwinds the load like Ctrl-C does under
    ``asyncio.Runner``. The previous handler is back before this returns or raises.

    Only where SIGTERM is :func:`terminate_as_interrupt`'s (main thread); elsewhere exactly
    ``run(coro)``.

    Raises:
        Terminated: SIGTERM came while the coroutine ran (whether or not it then finished).
    """
    import asyncio

    if not _main_thread() or signal.getsignal(signal.SIGTERM) is not _raise_terminated:
        return run(coro)
    caught: list[int] = []

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_term(signum: int, frame: Any) -> None:
            caught.append(signum)
            if task is not None:
                loop.call_soon_threadsafe(task.cancel)

        signal.signal(signal.SIGTERM, on_term)
        try:
            return await coro
        finally:
            signal.signal(signal.SIGTERM, _raise_terminated)

    try:
        out = run(main())
    except asyncio.CancelledError:
        if not caught:
            raise
    if caught:
        raise Terminated(caught[0])
    return out


def c_callback(fn: Callable[..., Any], default: Any = None) -> Callable[..., Any]:
    """``fn`` made safe to run as a ctypes callback (wrap it before ``CFUNCTYPE(...)(...)``).

    A signal's Python handler runs in whatever Python frame the main thread is executing,
    which during a long C call (a model load, a decode) is often a callback. The
    :class:`KeyboardInterrupt` (or :class:`Terminated`) it raises there cannot leave the
    callback: ctypes prints it and drops it, and Ctrl-C or ``docker stop`` is silently
    lost. The wrapper catches it, returns ``default`` to C (``True`` for llama.cpp's
    progress callback, whose ``False`` would abort the load), and delivers the same signal
    again from a helper thread (:func:`_thread.interrupt_main`, 10 ms later) once C has
    given the GIL back, so the exception is raised in Python code when the C call returns.
    Should it land in a callback again, the same happens again.
    """

    def wrapped(*args: Any) -> Any:
        try:
            return fn(*args)
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
            threading.Thread(target=_interrupt_main_later, args=(signum,), daemon=True).start()
            return default

    return wrapped


def _interrupt_main_later(signum: int, delay_s: float = 0.01) -> None:
    # Later, not at once: ``Thread.start`` waits for this thread, and a handler run before
    # the callback has returned would raise inside it again, where it is lost.
    time.sleep(delay_s)
    _thread.interrupt_main(signal.Signals(signum))


#: ``prctl`` option that sends the child a signal when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


def dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` wrapped so the child gets SIGTERM when this process dies (Linux; elsewhere
    ``argv`` unchanged). The wrapper ``exec``s the command: same pid, same process group.

    Note: Linux sends the signal when the *thread* that started the child exits, so start
    long-lived children from the main thread (infbench starts servers there).
    """
    import sys

    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-m", "infbench.data.signals", str(os.getpid()), "--", *argv]


def _exec_with_parent_death(parent: int, argv: list[str]) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before prctl took effect
        raise SystemExit(1)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    import sys

    _args = sys.argv[1:]
    if len(_args) < 3 or _args[1] != "--":
        raise SystemExit("usage: python -m infbench.data.signals PARENT_PID -- COMMAND [ARGS...]")
    _exec_with_parent_death(int(_args[0]), _args[2:])
