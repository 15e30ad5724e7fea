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
out of a callback, it prints "Exception ignored" and drops it; :func:`terminate_as_interrupt`
does the same for an interrupt that lands in a finalizer (``sys.unraisablehook``), and
:func:`run_event_loop` keeps signals from raising inside the event loop's own code.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import ctypes
import os
import select
import signal
import sys
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


#: ``time.monotonic()`` when a Python-level handler of infbench last ran (the main thread
#: was running Python then): :func:`native_call_watchdog` reads it.
_python_saw = [0.0]


def _raise_terminated(signum: int, frame: Any) -> None:
    _python_saw[0] = time.monotonic()
    raise Terminated(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While active (main thread only), SIGTERM raises :class:`Terminated`, and an
    interrupt that a finalizer swallowed is delivered again (:func:`_redeliver_unraisable`);
    the previous handler and hook are restored after. Elsewhere a no-op."""
    if not _main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    old_hook = sys.unraisablehook
    if not getattr(old_hook, "_infbench_redelivers", False):  # nested: the outer one's hook does it
        sys.unraisablehook = _redeliver_unraisable(old_hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        sys.unraisablehook = old_hook


def _redeliver_unraisable(previous: Callable[[Any], Any]) -> Callable[[Any], None]:
    """A :data:`sys.unraisablehook` that delivers a lost Ctrl-C or SIGTERM again.

    A signal's handler runs in whatever Python frame the main thread is executing. When
    that frame is a finalizer (``__del__``, a weakref or garbage-collector callback, an
    unawaited coroutine's warning), Python cannot raise out of it: it reports the
    :class:`KeyboardInterrupt` (or :class:`Terminated`) to ``sys.unraisablehook``
    ("Exception ignored in ...") and goes on, and the run would carry on as if no signal had
    come. This hook reports it as ``previous`` does, then sends the same signal again 10 ms
    later from a helper thread, so it is raised in ordinary code (as :func:`c_callback`
    does for ctypes callbacks). Other exceptions go to ``previous`` unchanged.
    """

    def hook(unraisable: Any) -> None:
        exc = getattr(unraisable, "exc_value", None)
        if isinstance(exc, KeyboardInterrupt):
            # _thread, not threading: a finalizer may run while threading holds its own locks
            _thread.start_new_thread(_interrupt_main_later, (exc.signum if isinstance(exc, Terminated)
                                                             else signal.SIGINT,))
        previous(unraisable)

    hook._infbench_redelivers = True  # type: ignore[attr-defined]
    return hook


_depth = 0
_pending: list[int] = []
_saved: dict[int, Any] = {}

#: Seconds the main thread may stay inside one native call (llama.cpp's prefill in the
#: measuring process, ``--no-engine-process``) after SIGTERM or a second Ctrl-C before
#: :func:`native_call_watchdog` ends the process itself.
HARD_EXIT_GRACE_S = 3.0
_hard_exit_hooks: list[Callable[[], None]] = []


@contextlib.contextmanager
def on_hard_exit(fn: Callable[[], None]) -> Iterator[None]:
    """Run ``fn`` (from the watchdog's thread, before the process ends) should
    :func:`native_call_watchdog` end the process while the block runs: a run marks itself
    ``interrupted`` there. ``fn`` must not need the main thread (it is stuck)."""
    _hard_exit_hooks.append(fn)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _hard_exit_hooks.remove(fn)


def _main_state(ident: int) -> tuple[int, int] | None:
    """Where the main thread is in Python: its top frame and instruction, or None."""
    frame = sys._current_frames().get(ident)
    return None if frame is None else (id(frame), frame.f_lasti)


def _hard_exit(code: int, why: str) -> None:
    for fn in list(_hard_exit_hooks):
        with contextlib.suppress(Exception):
            fn()
    with contextlib.suppress(Exception):
        assert sys.__stderr__ is not None
        sys.__stderr__.write(f"infbench: {why}; finished cells are stored, the cell being measured is lost; "
                             f"exiting now (status {code})\n")
        sys.__stderr__.flush()
    os._exit(code)


def _watch(fd: int, stop: threading.Event, grace_s: float, main_ident: int) -> None:
    """The watchdog's loop (see :func:`native_call_watchdog`)."""
    ints, code, why = 0, 0, ""
    state, since, armed = None, 0.0, 0.0
    while not stop.is_set():
        try:
            ready = select.select([fd], [], [], 0.05)[0]
            data = os.read(fd, 512) if ready else b""
        except OSError:
            return
        now = time.monotonic()
        for b in data:
            if b == signal.SIGTERM and not code:
                code, why, armed = EXIT_TERMINATED, "SIGTERM arrived", now
            elif b == signal.SIGINT:
                ints += 1
                if ints >= 2 and not code:
                    code, why, armed = EXIT_INTERRUPTED, "Ctrl-C came twice", now
        if not code:
            continue
        if _python_saw[0] >= armed - 0.2:  # its handler ran: the main thread is not stuck, the run ends its way
            code, ints = 0, 0
            continue
        st = _main_state(main_ident)
        if st != state or _depth:  # the main thread runs Python (or is storing a cell): not stuck
            state, since = st, now
        elif now - since >= grace_s and now - armed >= grace_s:
            _hard_exit(code, f"{why} while the engine was inside a native call that did not return within "
                             f"{grace_s:g} s")


@contextlib.contextmanager
def native_call_watchdog(enabled: bool = True, grace_s: float = HARD_EXIT_GRACE_S) -> Iterator[None]:
    """Bound how long SIGTERM and a second Ctrl-C wait for a native call (issue 41).

    An engine run in the measuring process (``--no-engine-process``) spends seconds to
    minutes inside one C call (a llama.cpp prefill); Python runs a signal's handler only
    when that call returns, so SIGTERM took 48.5 s and Ctrl-C twice 26.3 s. While this is
    active (main thread only), the C-level signal handler also writes each signal's number
    to a pipe (:func:`signal.set_wakeup_fd`) that a daemon thread reads. After SIGTERM, or
    a second SIGINT, it waits for a Python-level handler of infbench to run (SIGTERM's,
    SIGINT's, :func:`deferred`'s, :func:`run_event_loop`'s): if none has run and the main
    thread's Python frame has not moved for ``grace_s`` seconds, and no cell is being stored
    (:func:`deferred`), the main thread is stuck in native code, and the process ends
    itself: the :func:`on_hard_exit` hooks run (the run is marked ``interrupted``), a line
    says why on stderr, and ``os._exit`` gives
    143 (SIGTERM) or 130 (Ctrl-C). A main thread that handles the signal in time is never
    cut short. Finished cells are already stored (each in its own transaction); SQLite
    keeps the store consistent however a process ends.

    ``enabled=False`` (an engine in its own process, whose waits Python interrupts) or
    another thread than the main one: a no-op.
    """
    if not enabled or not _main_thread():
        yield
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        yield
        return
    prev_int = signal.getsignal(signal.SIGINT)

    def on_int(signum: int, frame: Any) -> None:  # Ctrl-C as before, noted as handled in Python
        _python_saw[0] = time.monotonic()
        if callable(prev_int):
            prev_int(signum, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_int)
    stop = threading.Event()
    t = threading.Thread(target=_watch, args=(r, stop, grace_s, threading.main_thread().ident),
                         name="infbench-signal-watchdog", daemon=True)
    t.start()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(old)
        if signal.getsignal(signal.SIGINT) is on_int:
            signal.signal(signal.SIGINT, prev_int)
        stop.set()
        t.join(1.0)
        for fd in (r, w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _hold(signum: int, frame: Any) -> None:
    _python_saw[0] = time.monotonic()
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


#: Seconds after the first SIGTERM or Ctrl-C that the event loop may take to wind down (the load
#: cancelled, the loop closed) before the signal is raised there all the same, and again after each
#: such wait while the loop has not ended (a repeat from outside is raised at once).
ESCALATE_AFTER_S = 5.0


def run_event_loop(run: Callable[[Coroutine[Any, Any, T]], T], coro: Coroutine[Any, Any, T]) -> T:
    """``run(coro)`` (``asyncio.run`` or ``uvloop.run``) with SIGTERM turned into cancelling
    the coroutine, then :class:`Terminated` raised once the event loop has ended.

    :func:`terminate_as_interrupt`'s handler raises :class:`Terminated` in whatever frame
    runs when SIGTERM lands. Inside an event loop that frame belongs to the loop, and the
    loop cannot take an exception everywhere:

    * in a protocol's ``data_received`` uvloop (0.23) catches every exception as "Fatal error
      on transport": it logs it, closes that connection, and the run goes on to exit 0 as if
      no signal had come (seen in ``tests/integration/test_fault_injection.py``);
    * while uvloop starts or stops its loop (``asyncio.Runner`` creating it, running the main
      task, cancelling what is left, closing it), an exception raised there leaves the loop
      marked running: closing it then fails with ``RuntimeError: this event loop is already
      running`` / ``Cannot close a running event loop``, which replaces the
      :class:`Terminated`; the cell was stored failed with that error and the sweep went on
      (CI, stop 47: exit 3 instead of 143). Sent at each profile event of one short run, the
      signal gave that ``RuntimeError`` at the 110th event (uvloop), and was lost at the 138th
      (asyncio: the run returned).

    So for the whole of ``run(...)``, loop set-up and tear-down included, the first SIGTERM
    or Ctrl-C raises nothing: its handler notes it and, while the coroutine runs, cancels the
    main task through the loop, which unwinds the load like Ctrl-C does under
    ``asyncio.Runner``; a signal noted before the coroutine starts keeps it from starting.
    Once the loop has ended, :class:`Terminated` (or :class:`KeyboardInterrupt`) is raised.
    A repeat of the signal (a second Ctrl-C, a second SIGTERM), or the first one still
    pending after :data:`ESCALATE_AFTER_S` (a load or a tear-down that does not wind down;
    raised again after each such wait: an exception raised inside asyncio's own code can lose
    a callback its tear-down then waits for), is raised at once where it lands, with both
    previous handlers put back first; should the loop's tear-down then replace it with another
    exception, the interrupt is raised all the same (:func:`_interrupt_in`). Infbench's own SIGINT handler keeps
    ``asyncio.Runner`` from installing its one. The previous handlers are back before this
    returns or raises.

    Only where SIGTERM is :func:`terminate_as_interrupt`'s (main thread); elsewhere exactly
    ``run(coro)``.

    Raises:
        Terminated: SIGTERM came while the event loop ran (whether or not the coroutine then
            finished, or failed).
        KeyboardInterrupt: Ctrl-C came while it ran (likewise).
    """
    if not _main_thread() or signal.getsignal(signal.SIGTERM) is not _raise_terminated:
        return run(coro)
    caught: list[int] = []
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []  # while ``main`` runs
    over = threading.Event()  # wakes the escalation's waits when run(...) has ended
    prev_int = signal.getsignal(signal.SIGINT)

    main_ident = threading.main_thread().ident
    assert main_ident is not None

    ended = [False]  # set first thing once run(...) is over: no signal is sent after it
    ending = threading.Lock()  # a signal being sent is sent before the run's end goes on

    def escalate_later(signum: int) -> None:
        # each time a real signal to the main thread: it also ends a wait in select() (a
        # simulated one, _thread.interrupt_main, would not run until the wait ends by itself)
        while not over.wait(ESCALATE_AFTER_S):
            with ending:
                if ended[0]:
                    return
                signal.pthread_kill(main_ident, signum)

    def on_signal(signum: int, frame: Any) -> None:
        _python_saw[0] = time.monotonic()
        if signum in caught:  # the repeat: now, where it lands
            _put_back(prev_int)
            if signum == signal.SIGTERM:
                _raise_terminated(signum, frame)
            elif callable(prev_int):
                prev_int(signum, frame)
            return
        caught.append(signum)
        for loop, task in running:
            with contextlib.suppress(RuntimeError):  # the loop is closing: the signal is raised after it
                loop.call_soon_threadsafe(task.cancel)
        _thread.start_new_thread(escalate_later, (signum,))

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        running.append((asyncio.get_running_loop(), task))
        try:
            if caught:  # the signal came while the loop started: the load is not begun
                coro.close()
                raise asyncio.CancelledError
            return await coro
        finally:
            running.clear()

    out: list[T] = []
    try:
        try:
            signal.signal(signal.SIGTERM, on_signal)
            if callable(prev_int):  # Ctrl-C raises here (not ignored, not Python's default action)
                signal.signal(signal.SIGINT, on_signal)
            out.append(run(main()))
        finally:
            ended[0] = True  # first, before anything a pending handler could raise in
            with ending:
                over.set()
            late = _put_back(prev_int)
            if asyncio._get_running_loop() is not None:  # none ran before (run() refuses to start
                asyncio._set_running_loop(None)  # inside one): a raise inside asyncio left it set
            if late is not None:
                raise late
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        lost = _interrupt_in(exc)
        if not caught and lost is None:
            raise
        cause = None if isinstance(exc, asyncio.CancelledError) else exc
        if signal.SIGTERM in caught or isinstance(lost, Terminated):
            raise Terminated(signal.SIGTERM) from cause
        raise KeyboardInterrupt from cause
    if signal.SIGTERM in caught:
        raise Terminated(signal.SIGTERM)
    if caught:
        raise KeyboardInterrupt
    return out[0]


def _put_back(prev_int: Any) -> KeyboardInterrupt | None:
    """Put SIGINT's handler (``prev_int``, when callable) and SIGTERM's
    (:func:`_raise_terminated`) back; the interrupt a handler already put back raises
    meanwhile is kept and returned, so it cannot stop the other one being put back (a
    Ctrl-C landing between the two left SIGTERM with a handler that raises nothing)."""
    late: KeyboardInterrupt | None = None
    for _ in range(4):  # one more try per signal that can land here
        try:
            if callable(prev_int) and signal.getsignal(signal.SIGINT) is not prev_int:
                signal.signal(signal.SIGINT, prev_int)
            if signal.getsignal(signal.SIGTERM) is not _raise_terminated:
                signal.signal(signal.SIGTERM, _raise_terminated)
            break
        except KeyboardInterrupt as exc:
            late = late or exc
    return late


def _interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The :class:`KeyboardInterrupt` among ``exc``'s causes and contexts (both followed), or None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return None


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
            _thread.start_new_thread(_interrupt_main_later, (signum,))
            return default

    return wrapped


def _interrupt_main_later(signum: int, delay_s: float = 0.01) -> None:
    # Later, not at once: a handler run before the callback (or finalizer) has returned would
    # raise inside it again, where it is lost.
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
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-m", "infbench.data.signals", str(os.getpid()), "--", *argv]


def _exec_with_parent_death(parent: int, argv: list[str]) -> None:
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
