"""Start an inference server as a subprocess, wait until it is healthy, stop it cleanly.

Shared by the server engines (llama.cpp server, later ``vllm serve``): the server runs in
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
from pathlib import Path

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
