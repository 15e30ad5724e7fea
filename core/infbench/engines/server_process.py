"""Start an inference server as a subprocess, wait until it is healthy, stop it cleanly.

Shared by the server engines (llama.cpp's and vLLM's, through
:class:`ManagedServerEngine`): the server runs in
its own process group with its output in a log file kept beside the results
(``$INFBENCH_HOME/logs/``), is polled on its health URL, and is terminated (SIGTERM,
then SIGKILL after a grace period) on stop, on error and on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infbench.engines.base import Engine
from infbench.engines.openai import OpenAIEngine
from infbench.errors import EngineUnavailable


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

    def start(self, timeout_s: float = 300.0) -> None:
        """Start the process and wait for health.

        Raises:
            EngineUnavailable: the process exited, or was not healthy within ``timeout_s``;
                the message carries the end of its log.
        """
        import httpx

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed by the child's exit
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **self.env}, start_new_session=True)
        log.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise EngineUnavailable(f"server exited with status {self.proc.returncode} before it was ready:\n"
                                        f"{self.log_tail()}", hint=f"full log: {self.log_path}")
            try:
                if httpx.get(self.health_url, timeout=2).status_code == 200:
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
        """SIGTERM the process group, SIGKILL it after ``grace_s``; safe to call twice."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
        except ProcessLookupError:
            pass


class ManagedServerEngine(OpenAIEngine):
    """An OpenAI-compatible server that infbench starts, drives and stops itself.

    Subclasses build the command line in ``start`` and call :meth:`launch_server`; the
    client side (prompts as token ids, load generation, parsing) is
    :class:`~infbench.engines.openai.OpenAIEngine`'s.
    """

    default_prompt_format = "token_ids"
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
        from infbench.store import default_home

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
