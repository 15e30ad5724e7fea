"""In-process engines in a process of their own: nothing of infbench shares their interpreter.

On a real NVIDIA H100 (docs/hardware-runs.md) the transformers engine ran a Llama-3-8B
``generate()`` 2.9-3.9x slower inside infbench than in a bare script, and the cell was
stored ok. At small batches an engine like transformers is bound by its host thread (the
Python that launches each step's kernels), and inside infbench that thread shared its
interpreter with infbench's own threads: the power and telemetry sampler (10 Hz), the
noisy-neighbour monitor and the progress display. Whatever the exact mechanism (the GIL
hand-offs, the samplers' driver calls, or both), the one design that excludes all of it
for every engine is that the engine's host thread has an interpreter to itself.

:class:`EngineProcess` is that: an :class:`~infbench.data.engine.Engine` whose ``start``
sends the unstarted adapter (pickled) to a new Python process (``python -m
infbench.engines.process``) and forwards every call (``start``, ``verify_device``,
``make_prompts``, ``warmup``, ``run``, ``describe``, perplexity scoring, ``stop``) to it
over a socket pair. That process runs only the adapter; infbench's samplers, the
contention monitor and the display stay in the measuring process, whose main thread
waits on the socket (no interpreter lock held) while a cell runs. Every
:class:`~infbench.data.schema.RequestRecord` keeps its ``perf_counter_ns`` stamps: on Linux
that clock is ``CLOCK_MONOTONIC``, one clock for every process of the host, so the
records, the power readings and the telemetry of both processes share one time axis.

What else the process gives:

* **An account of the timed part** (:attr:`RunOutput.process <infbench.data.engine.RunOutput.process>`):
  the engine process's CPU seconds, its engine thread's, and the Python threads other
  than the engine's that were alive in it; :mod:`infbench.measure.harness` turns it into
  the cell's ``harness_share``.
* **A stop from outside**: Ctrl-C or SIGTERM in infbench kills the engine process
  (SIGTERM, then SIGKILL), even inside a native call that would never return to Python
  (a huge context allocation, a model load). A cell that runs past ``--cell-timeout``
  and does not stop is killed the same way (:data:`KILL_GRACE_S` after its deadline).
* **Crash isolation**: a segmentation fault or an abort in the engine fails the cell
  with the signal's name, and the sweep goes on.
* **Death with its parent**: the process asks Linux for SIGKILL when infbench dies
  (``PR_SET_PDEATHSIG``), so no engine outlives a killed run.
* **A head start** (:func:`prewarm`): ``infbench run`` may start one engine process before it
  detects and plans, which imports the engine's libraries (torch, transformers) meanwhile;
  the first :class:`EngineProcess` of the run takes it. On the H100 the first timed cell came
  22 s after ``infbench run`` started: 8 s of detection and planning, then the engine
  process's imports, CUDA start and the 7 s build, one after the other.

An adapter that cannot be pickled (a plugin that holds a live handle before ``start``)
is refused with :class:`EngineProcessError`; ``--no-engine-process`` measures it in the
measuring process instead, and its cells are then flagged ``suspect`` when infbench's
threads ran beside it (:func:`infbench.measure.harness.harness_reasons`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from infbench.data.engine import Engine, RunOutput
from infbench.data.errors import CellTimeout, InfbenchError, describe_error
from infbench.data.signals import PR_SET_PDEATHSIG

#: Seconds a cell may run past its ``--cell-timeout`` deadline before its engine process
#: is killed from outside (the adapter's own deadline check normally stops it first).
KILL_GRACE_S = 30.0
#: Seconds ``stop`` waits for the engine to free its model and exit before killing it.
STOP_TIMEOUT_S = 60.0
#: Seconds between liveness checks of the engine process while waiting for its answer.
POLL_S = 0.25


#: The engine process started ahead of need (:func:`prewarm`): (process, connection, interpreter,
#: environment at its start), taken by the next :class:`EngineProcess` of the same interpreter.
_WARM: tuple[subprocess.Popen[bytes], Connection, str, dict[str, str]] | None = None


#: How the engine process starts: Ctrl-C ignored before anything is imported (the terminal
#: sends it to the whole process group; a KeyboardInterrupt in an import printed a traceback,
#: issue 41), then ``infbench.engines.process`` run as ``__main__``.
_BOOT = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); import runpy; "
         "runpy.run_module('infbench.engines.process', run_name='__main__', alter_sys=True)")


def _popen(python: str) -> tuple[subprocess.Popen[bytes], Connection]:
    """Start ``python -m infbench.engines.process`` on a new socket pair.

    Raises:
        OSError: the interpreter could not be started.
    """
    parent, child = socket.socketpair()
    try:
        proc = subprocess.Popen([python, "-c", _BOOT, str(child.fileno()), str(os.getpid())],
                                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=2, close_fds=True)
    except OSError:
        parent.close()
        raise
    finally:
        child.close()
    return proc, Connection(parent.detach())


def prewarm(modules: list[str], python: str | None = None) -> bool:
    """Start an engine process now and have it import ``modules`` while this process goes on
    (detection, planning); the next :class:`EngineProcess` started with the same interpreter
    and environment takes it instead of starting one.

    Args:
        modules: module names to import there (``"pkg"`` or ``"pkg:Attr"``, the attribute read
            to trigger a lazy import, e.g. ``"transformers:AutoModelForCausalLM"``); an import
            that fails is ignored there (the adapter's own start reports it).
        python: the interpreter (default ``sys.executable``).

    Returns:
        True when a process was started; False when one is already waiting or none could start.
    """
    global _WARM
    if _WARM is not None or not modules:
        return False
    python = python or sys.executable
    try:
        proc, conn = _popen(python)
        conn.send(("preload", list(modules)))
    except OSError:
        return False
    _WARM = (proc, conn, python, dict(os.environ))

    atexit.register(discard_prewarmed)
    return True


def discard_prewarmed() -> None:
    """End the prewarmed engine process if no :class:`EngineProcess` took it."""
    global _WARM
    if _WARM is None:
        return
    proc, conn, _, _ = _WARM
    _WARM = None
    with contextlib.suppress(OSError):
        conn.close()
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(5)


def _take_prewarmed(python: str) -> tuple[subprocess.Popen[bytes], Connection] | None:
    """The prewarmed process, when it runs ``python`` in this very environment and is alive."""
    global _WARM
    if _WARM is None:
        return None
    proc, conn, py, env = _WARM
    if py != python or env != dict(os.environ) or proc.poll() is not None:
        discard_prewarmed()
        return None
    _WARM = None
    return proc, conn


class EngineProcessError(InfbenchError):
    """The engine's own process could not be started, died, or could not send its answer
    back; the message says which (a signal by name, the exit status, the unpicklable value)."""


class _RemoteError(Exception):
    """An engine error whose exception could not be pickled: its type name and description."""


def _pickles(obj: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(obj))
        return True
    except Exception:  # noqa: BLE001 - anything that does not round-trip
        return False


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the kernel's OOM killer, or a kill from outside)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {code}"


class EngineProcess(Engine):
    """An in-process engine adapter run in a Python process of its own (see the module doc).

    Args:
        engine: the adapter, created and not started (it is pickled to the new process at
            :meth:`start`; the parent keeps this copy only for its name, device and options).
        python: the interpreter to run (default ``sys.executable``).

    Attributes:
        inner: the unstarted adapter.
        pid: the engine process's PID while it runs, else None.
        dead: why the engine process is gone (it died or was killed), or None.
    """

    isolate = False  # already isolated

    def __init__(self, engine: Engine, python: str | None = None):
        super().__init__(engine.device, engine.options)
        self.inner = engine
        self.name = engine.name
        self.python = python or sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.dead: str | None = None
        self._backends = getattr(engine, "backends", None)

    @property
    def backends(self) -> Any:
        """The device's backends (set on the inner adapter too, before it is sent)."""
        return self._backends

    @backends.setter
    def backends(self, value: Any) -> None:
        self._backends = value
        self.inner.backends = value

    @property
    def pid(self) -> int | None:
        """The engine process's PID, or None when it is not running."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    # -- the process --------------------------------------------------------------------
    def _spawn(self) -> None:
        """Start ``python -m infbench.engines.process`` and send it the adapter.

        Raises:
            EngineProcessError: the adapter cannot be pickled, or the process did not start.
        """
        if type(self.inner).__module__ == "__main__":
            raise EngineProcessError(
                f"the {self.name} adapter's class {type(self.inner).__name__} is defined in the script being run "
                "(__main__), which the engine process cannot import",
                hint="define the adapter in an importable module, or run with --no-engine-process")
        if not _pickles(self.inner):
            raise EngineProcessError(
                f"the {self.name} adapter cannot be sent to a process of its own (it does not pickle)",
                hint="make the adapter picklable before start(), or run with --no-engine-process (its cells are then "
                     "flagged when infbench's threads ran beside the engine)")
        warm = _take_prewarmed(self.python)
        if warm is not None:
            self.proc, self.conn = warm
        else:
            try:
                self.proc, self.conn = _popen(self.python)
            except OSError as exc:
                raise EngineProcessError(f"could not start the {self.name} engine process: {exc}") from exc
        self.dead = None
        self.conn.send(("path", list(sys.path)))
        self.conn.send(("engine", self.inner))

    def _kill(self, why: str) -> None:
        """End the engine process now (SIGTERM, SIGKILL after 2 s) and remember why."""
        proc, self.proc = self.proc, None
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
            self.conn = None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.terminate()
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
        self.dead = self.dead or why

    def _call(self, op: str, *args: Any, kill_at_ns: int | None = None,
              on_progress: Callable[[Any], None] | None = None) -> Any:
        """Run ``op(*args)`` in the engine process and return its answer.

        Args:
            op: the operation (``start``, ``verify_device``, ``make_prompts``, ``warmup``,
                ``run``, ``describe``, ``score``, ``stop``).
            kill_at_ns: ``perf_counter_ns`` after which the process is killed and
                :class:`~infbench.data.errors.CellTimeout` raised (a cell that does not stop).
            on_progress: called with each progress message the operation sends.

        Raises:
            EngineProcessError: the process is gone or died while answering.
            CellTimeout: ``kill_at_ns`` passed.
            KeyboardInterrupt: Ctrl-C or SIGTERM here (the engine process is killed first).
            Exception: whatever the adapter raised (its type, message and hint).
        """
        if self.conn is None or self.proc is None:
            raise EngineProcessError(f"the {self.name} engine process is not running"
                                     + (f": it {self.dead}" if self.dead else ""))
        try:
            self.conn.send((op, args))
            while True:
                while not self.conn.poll(POLL_S):
                    code = self.proc.poll()
                    if code is not None:
                        self._kill(f"{_describe_exit(code)} during {op}")
                        raise EngineProcessError(f"the {self.name} engine process {self.dead}",
                                                 hint="see the engine's messages above; run with -v for more")
                    if kill_at_ns is not None and time.perf_counter_ns() > kill_at_ns:
                        self._kill(f"was killed: {op} ran {KILL_GRACE_S:g} s past the cell's time limit")
                        raise CellTimeout(f"cell ran past its time limit (--cell-timeout) and the engine did not "
                                          f"stop; its process was killed {KILL_GRACE_S:g} s later")
                kind, value = self.conn.recv()
                if kind == "progress":
                    if on_progress is not None:
                        on_progress(value)
                    continue
                if kind == "ok":
                    return value
                raise value
        except KeyboardInterrupt:
            self._kill("was stopped by an interrupt")
            raise
        except (EOFError, OSError) as exc:
            code = None
            if self.proc is not None:  # the socket closes as the process dies: give it a moment to be reaped
                try:
                    code = self.proc.wait(2.0)
                except subprocess.TimeoutExpired:
                    code = None
            self._kill(f"{_describe_exit(code)} during {op}" if code is not None else f"lost its connection ({exc})")
            raise EngineProcessError(f"the {self.name} engine process {self.dead}") from None

    # -- the Engine interface -----------------------------------------------------------
    def start(self, group: Any) -> None:
        """Start the engine process and load the group's model there.

        Raises:
            EngineProcessError: see :meth:`_spawn` and :meth:`_call`.
            Exception: whatever the adapter's ``start`` raised.
        """
        self._spawn()
        self._call("start", group)

    def verify_device(self, group: Any) -> dict[str, Any]:
        """The adapter's own device proof, made in the engine process, with its PID."""
        proof = dict(self._call("verify_device", group))
        proof["engine_process"] = self.pid
        return proof

    def make_prompts(self, cell: Any, model: Any) -> list[Any]:
        """The adapter's prompts for ``cell`` (made in the engine process)."""
        return self._call("make_prompts", cell, model)

    def warmup(self, cell: Any, prompts: list[Any]) -> RunOutput | None:
        """The adapter's warm-up block, in the engine process, with its records (or None)."""
        return self._call("warmup", cell, prompts)

    def run(self, cell: Any, prompts: list[Any], deadline_ns: int | None = None) -> RunOutput:
        """The adapter's timed run in the engine process; the answer carries the process's
        own account of it (:attr:`RunOutput.process <infbench.data.engine.RunOutput.process>`).

        Raises:
            CellTimeout: past ``deadline_ns`` (the adapter's own check), or
                :data:`KILL_GRACE_S` later (the process is then killed).
        """
        kill_at = deadline_ns + int(KILL_GRACE_S * 1e9) if deadline_ns is not None else None
        return self._call("run", cell, prompts, deadline_ns, kill_at_ns=kill_at)

    def score(self, req: Any, res: Any, on_chunks: Callable[[int], None] | None = None) -> Any:
        """:func:`infbench.quality.perplexity.score_loaded` run in the engine process; the
        filled ``res`` comes back (``on_chunks`` is called here with the chunk count)."""
        res = self._call("score", req, res, on_progress=on_chunks)
        res.engine_info = {**(res.engine_info or {}), "device_proof": self.device_proof,
                           "engine_process": "own process"}
        return res

    def describe(self) -> dict[str, Any]:
        """The adapter's description (made in the engine process), with ``engine_process``:
        how it ran (``"own process"``)."""
        d = dict(self._call("describe")) if self.conn is not None else {"name": self.name}
        d["engine_process"] = "own process"
        return d

    def stop(self) -> None:
        """Stop the adapter in its process (it frees the model), then end the process; safe
        twice and after the process died."""
        if self.proc is None:
            return
        try:
            if self.conn is not None and self.proc.poll() is None:
                self.conn.send(("stop", ()))
                if self.conn.poll(STOP_TIMEOUT_S):
                    self.conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            pass
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
        self._kill("was stopped")


# -- the engine process's side ----------------------------------------------------------

def _python_threads() -> list[str]:
    """Names of the Python threads alive in this process other than the main one."""
    main = threading.main_thread()
    return sorted(t.name for t in threading.enumerate() if t is not main)


def timed_run(engine: Engine, cell: Any, prompts: list[Any], deadline_ns: int | None) -> RunOutput:
    """``engine.run`` with this process's account of it (:attr:`RunOutput.process`):
    CPU seconds of the whole process (``resource.getrusage``: user + system) and of the
    calling thread (``time.thread_time``), the call's wall seconds, and the other Python
    threads alive before or after it (``infbench_threads``: those whose name starts with
    ``infbench``)."""
    before = set(_python_threads())
    r0, c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time(), time.perf_counter()
    out = engine.run(cell, prompts, deadline_ns=deadline_ns)
    r1, c1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time(), time.perf_counter()
    threads = sorted(before | set(_python_threads()))
    out.process = {"pid": os.getpid(), "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                   "thread_cpu_s": c1 - c0, "wall_s": w1 - w0, "python_threads": threads,
                   "infbench_threads": [t for t in threads if t.startswith("infbench")]}
    return out


def _answer(conn: Connection, kind: str, value: Any) -> None:
    try:
        conn.send((kind, value))
    except Exception as exc:  # noqa: BLE001 - an answer that does not pickle
        if kind == "ok":
            err: BaseException = EngineProcessError(f"the engine's answer could not be sent back: "
                                                     f"{type(exc).__name__}: {exc}")
        else:
            err = _RemoteError(getattr(value, "remote_description", None) or describe_error(value))
        conn.send(("error", err))


def _serve(conn: Connection) -> None:
    """The engine process's loop: (import what a ``preload`` message names,) receive the
    adapter, then answer calls until ``stop``."""
    kind, path = conn.recv()
    if kind == "preload":
        _preload(path)
        kind, path = conn.recv()
    sys.path[:] = path
    try:
        kind, engine = conn.recv()
    except Exception as exc:  # noqa: BLE001 - the adapter's class cannot be imported here
        _answer(conn, "error", EngineProcessError(f"the engine process could not load the adapter: "
                                                  f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            op, args = conn.recv()
        except EOFError:  # the measuring process is gone
            with contextlib.suppress(Exception):
                engine.stop()
            return
        try:
            if op == "run":
                value: Any = timed_run(engine, *args)
            elif op == "score":
                from infbench.quality.perplexity import score_loaded  # noqa: PLC0415 - start-up: the engine process; only a perplexity cell needs it

                req, res = args
                score_loaded(engine, req, res, on_chunks=lambda n: conn.send(("progress", n)))
                value = res
            elif op == "stop":
                engine.stop()
                _answer(conn, "ok", None)
                return
            elif op in ("start", "verify_device", "make_prompts", "warmup", "describe"):
                value = getattr(engine, op)(*args)
            else:
                raise EngineProcessError(f"unknown engine-process operation {op!r}")
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - every error goes back to the measuring process
            # (a KeyboardInterrupt here was raised by the adapter itself: SIGINT is ignored in this
            # process; it arrives as one in the measuring process, which then ends this one)
            text = describe_error(exc)
            setattr(exc, "remote_description", text)  # noqa: B010 - an attribute the exception types do not declare
            _answer(conn, "error", exc if _pickles(exc) else _RemoteError(text))
            continue
        _answer(conn, "ok", value)


def _preload(modules: list[str]) -> None:
    """Import each ``"pkg"`` or ``"pkg:Attr"`` (then read the attribute); failures are ignored."""
    for m in modules:
        name, _, attr = m.partition(":")
        try:
            mod = importlib.import_module(name)
            if attr:
                getattr(mod, attr)
        except Exception:  # noqa: BLE001, S112 - the adapter's own start reports what is missing
            continue


def _die_with_parent(parent: int) -> None:
    """Ask Linux for SIGKILL when the measuring process dies; exit if it already has."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        raise SystemExit(1)


def main(argv: list[str]) -> None:
    """Entry point of ``python -m infbench.engines.process FD PARENT_PID``.

    Ctrl-C is ignored here (the terminal sends it to the whole process group; infbench
    decides what happens to the engine), SIGTERM keeps its default action (end now). A
    connection closed by the measuring process while this one starts (it was stopped)
    ends it quietly, without a traceback."""
    fd, parent = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    try:
        _serve(Connection(fd))
    except (EOFError, ConnectionError, KeyboardInterrupt):
        # the measuring process closed the connection (it was stopped while this one started): end quietly
        raise SystemExit(0) from None


if __name__ == "__main__":
    main(sys.argv[1:])
