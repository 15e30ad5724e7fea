"""Start an inference server as a subprocess, wait until it is healthy, stop it cleanly.

Shared by the server engines (llama.cpp's and vLLM's, through
:class:`ManagedServerEngine`): the server runs in
its own process group with its output in a log file kept beside the results
(``$INFBENCH_HOME/logs/``), is polled on its health URL, and its whole process group is
terminated (SIGTERM, then SIGKILL after a grace period) on every exit path: stop, error,
Ctrl-C, SIGTERM (:mod:`infbench.data.signals` turns it into an interrupt), and interpreter
exit (an ``atexit`` hook). If infbench itself is killed (SIGKILL, the OOM killer) the
server gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``, :func:`infbench.data.signals.dying_with_parent`)
and no server outlives the run.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infbench.data.engine import Engine
from infbench.data.engine_options import ServerOptions
from infbench.data.errors import EngineUnavailable
from infbench.data.paths import default_home
from infbench.data.signals import dying_with_parent
from infbench.engines.openai import OpenAIEngine


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released; the usual small race applies)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server subprocess with a log file.

    Args:
        argv: the command line.
        health_url: polled until it answers HTTP 200.
        log_path: where stdout and stderr go.
        env: extra environment variables.
    """

    def __init__(self, argv: list[str], health_url: str, log_path: Path, env: dict[str, str] | None = None):
        self.argv = argv
        self.health_url = health_url
        self.log_path = log_path
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None

    def start(self, timeout_s: float = 300.0) -> None:
        """Start the process and wait for health.

        Raises:
            EngineUnavailable: the process exited, or was not healthy within ``timeout_s``;
                the message carries the end of its log.
        """
        import httpx

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed by the child's exit

        self.proc = subprocess.Popen(dying_with_parent(self.argv), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**os.environ, **self.env}, start_new_session=True)
        self.pgid = self.proc.pid  # its own session: the group id is its pid
        _live.add(self)
        log.close()
        end = time.monotonic() + timeout_s
        # One client for every poll: httpx.get makes a client, and with it an SSL context
        # (46 ms of CPU loading the CA bundle), per call: 5 s of this process's CPU over a vLLM
        # server's start on one core, taken from the server it waited for.
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    raise EngineUnavailable(f"server exited with status {self.proc.returncode} before it was "
                                            f"ready:\n{self.log_tail()}", hint=f"full log: {self.log_path}")
                try:
                    if client.get(self.health_url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
        self.stop()
        raise EngineUnavailable(f"server not healthy after {timeout_s:.0f} s:\n{self.log_tail()}",
                                hint=f"full log: {self.log_path}")

    def log_tail(self, n: int = 20) -> str:
        """The last ``n`` lines of the server log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``; safe to call twice.
        The group is signalled even when the server itself has exited, so processes it
        started (vLLM's engine core) do not outlive it."""
        p, self.proc = self.proc, None
        pgid, self.pgid = self.pgid, None
        _live.discard(self)
        if p is None or pgid is None:
            return
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            p.poll()
            return
        end = time.monotonic() + grace_s
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        while _group_alive(pgid) and time.monotonic() < end:  # the rest of the group, after the leader
            time.sleep(0.05)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass


#: Servers started by this process and not stopped yet (stopped at interpreter exit).
_live: set[ServerProcess] = set()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        server.stop(grace_s=2.0)


#: Options of a managed server's adapter that configure infbench's OpenAI client, not the
#: server: they are never passed on as the engine's own arguments. An engine whose server has
#: an argument of the same name (vLLM's ``tokenizer``) passes that one on; the others add it.
CLIENT_OPTIONS = frozenset({"n_threads", "base_url", "api_key_env", "endpoint", "served_model", "prompt_format",
                            "startup_timeout_s", "force_output", "extra_body", "extra_headers", "event_loop",
                            "metrics_url"})


def slots_needed(cells: Any) -> int:
    """Server slots (concurrent sequences: vLLM's ``max_num_seqs``, SGLang's
    ``max_running_requests``, llama.cpp's ``--parallel``) a group needs: the largest batch
    (batch cells), concurrency (serving cells; 16 for an open-loop rate without a cap) among
    ``cells`` (an iterable of :class:`~infbench.data.schema.Cell`), at least 1."""
    n = 1
    for c in cells:
        ld = c.load
        if ld is None or ld.mode == "batch":
            n = max(n, c.batch)
        else:
            n = max(n, ld.concurrency or 16)
    return n


class ManagedServerEngine(OpenAIEngine):
    """An OpenAI-compatible server that infbench starts, drives and stops itself.

    Subclasses build the command line in ``start`` and call :meth:`launch_server`; the
    client side (prompts as token ids, load generation, parsing) is
    :class:`~infbench.engines.openai.OpenAIEngine`'s.
    """

    default_prompt_format = "token_ids"
    options_model: type[ServerOptions] = ServerOptions
    options: ServerOptions
    #: Seconds between SIGTERM and SIGKILL on stop.
    stop_grace_s = 10.0

    def __init__(self, device, options=None):
        super().__init__(device, options)
        self.server: ServerProcess | None = None
        #: The server's Prometheus endpoint (read by :mod:`infbench.measure.server_metrics`).
        self.metrics_url: str | None = None

    def launch_server(self, argv: Callable[[int], list[str]], timeout_s: float,
                      env: dict[str, str] | None = None) -> int:
        """Start ``argv(port)`` on a free port of 127.0.0.1, wait for ``/health``, point the
        client at ``/v1`` and :attr:`metrics_url` at ``/metrics``; the log goes to
        ``$INFBENCH_HOME/logs/<engine>-<time>-<port>.log``.

        Returns:
            The port.

        Raises:
            EngineUnavailable: the server exited or was not healthy within ``timeout_s``.
        """
        port = free_port()
        log = default_home() / "logs" / f"{self.name}-{time.strftime('%Y%m%d-%H%M%S')}-{port}.log"
        self.server = ServerProcess(argv(port), f"http://127.0.0.1:{port}/health", log, env=env)
        self.server.start(timeout_s)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"
        return port

    def verify_device(self, group) -> dict[str, Any]:
        """Servers prove their device from their own log (the llama.cpp and vLLM servers
        override this); a server without such a check gets :class:`Engine`'s default:
        accepted on the CPU, refused on an accelerator."""
        return Engine.verify_device(self, group)

    def stop(self) -> None:
        """Stop the server process group (SIGTERM, then SIGKILL); safe to call twice."""
        if self.server is not None:
            self.server.stop(self.stop_grace_s)

    def describe(self) -> dict[str, Any]:
        """The client's description plus the server log kept beside the results."""
        d = super().describe()
        d.update(name=self.name, server_log=str(self.server.log_path) if self.server else None)
        return d
