"""A real multi-node Ray cluster on this machine for the Ray executor's tests: every
node is a raylet of ``ray.cluster_utils.Cluster`` bound to 127.0.0.1 (nothing listens on
or talks to another address), with 1 CPU, a small object store and no dashboard.

Each node gets its own environment, given to its raylet and so to its Ray workers: its
own ``INFBENCH_HOME`` (no shared caches: dummy GGUFs are built per node), this checkout
on ``PYTHONPATH``, and whatever the test adds (``INFBENCH_RAYTEST_DEVICE`` for the test
plugin of :mod:`tests.support.raytest_plugin`).

Ray resolves 127.0.0.1 to the host's routable address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its "single-host" switch, which `ray start`
refuses for worker nodes but ``Cluster`` does not check); the cluster sets it for this
process and its children, and drivers started from here (``infbench run``) inherit it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_SRC = Path(__file__).with_name("raytest_plugin.py")
#: Fast failure detection: a killed raylet is declared dead in about 1.5 s.
SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                 "health_check_initial_delay_ms": 0}
OBJECT_STORE_BYTES = 80 * 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _amdsmi_broken() -> bool:
    """An amdsmi binding without ROCm's library raises KeyError on import (see
    :func:`infbench.execution.executors.ray.import_ray`); Ray's processes then need it hidden."""
    import sys

    if "amdsmi" in sys.modules and sys.modules["amdsmi"] is None:
        return True  # import_ray() already hid it
    try:
        import amdsmi  # noqa: F401
    except ImportError:
        return False
    except Exception:  # noqa: BLE001
        return True
    return False


class LocalRayCluster:
    """Head + worker raylets on 127.0.0.1 (see the module doc).

    Args:
        root: nothing; a short folder under /tmp is made (Unix socket paths are short).
        cpu_limits: a measured ``cpu_limits.json`` linked into every node's home.
    """

    def __init__(self, cpu_limits: Path | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="ibray-", dir="/tmp"))
        (self.root / "ray").mkdir()
        self.cpu_limits = cpu_limits
        self._saved_env = {k: os.environ.get(k) for k in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_TMPDIR",
                                                          "RAY_ADDRESS")}
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ["RAY_TMPDIR"] = str(self.root)
        os.environ.pop("RAY_ADDRESS", None)
        from infbench.execution.executors.ray import import_ray

        ray = import_ray()
        import ray._private.ray_constants as rc
        from ray.cluster_utils import Cluster

        rc.ENABLE_RAY_CLUSTER = False  # this process resolves 127.0.0.1 to itself too
        self.ray = ray
        plugin = self.root / "plugin"
        (plugin / "infbench_raytest-0.0.1.dist-info").mkdir(parents=True)
        shutil.copy(PLUGIN_SRC, plugin / "infbench_raytest.py")
        (plugin / "infbench_raytest-0.0.1.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: infbench-raytest\nVersion: 0.0.1\n")
        (plugin / "infbench_raytest-0.0.1.dist-info" / "entry_points.txt").write_text(
            "[infbench]\nraytest = infbench_raytest\n")
        shim = self.root / "shim"
        if _amdsmi_broken():
            (shim / "amdsmi").mkdir(parents=True)
            (shim / "amdsmi" / "__init__.py").write_text("raise ImportError('amdsmi hidden: no libamd_smi.so here')\n")
        self.plugin_dir, self.shim_dir = plugin, shim
        self.nodes: list[Any] = []
        self.homes: dict[str, Path] = {}
        self.cluster = Cluster()
        self._n = 0

    def pythonpath(self, plugin: bool = True) -> str:
        """The nodes' PYTHONPATH: the amdsmi shim, the test plugin, this checkout's code."""
        parts = [str(self.shim_dir)] + ([str(self.plugin_dir)] if plugin else [])
        return os.pathsep.join(parts + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
                               + [str(ROOT / "core")])

    def add_node(self, env: dict[str, str] | None = None, num_cpus: int = 1) -> Any:
        """Start a raylet (the first one is the head) with ``env`` on top of this
        process's environment and its own ``INFBENCH_HOME``; returns Ray's node handle."""
        self._n += 1
        home = self.root / f"home{self._n}"
        (home / "cache").mkdir(parents=True)
        if self.cpu_limits is not None and self.cpu_limits.exists():
            os.symlink(self.cpu_limits, home / "cpu_limits.json")
        node_env = {"INFBENCH_HOME": str(home), "PYTHONPATH": self.pythonpath(), **(env or {})}
        saved = {k: os.environ.get(k) for k in node_env}
        os.environ.update(node_env)
        try:
            args: dict[str, Any] = {"node_ip_address": "127.0.0.1", "num_cpus": num_cpus, "num_gpus": 0,
                                    "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False,
                                    "dashboard_agent_listen_port": _free_port()}
            if not self.nodes:
                args.update(temp_dir=str(self.root / "ray"), _system_config=SYSTEM_CONFIG,
                            gcs_server_port=_free_port())
            node = self.cluster.add_node(**args)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.nodes.append(node)
        self.homes[node.node_id] = home
        return node

    @property
    def address(self) -> str:
        """The head's GCS address (``127.0.0.1:PORT``)."""
        return self.cluster.address

    def env(self) -> dict[str, str]:
        """Environment for a driver process (``infbench run --executor ray``)."""
        return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": str(self.root),
                "PYTHONPATH": self.pythonpath()}

    def connect(self) -> None:
        """Connect this process as a driver (idempotent)."""
        if not self.ray.is_initialized():
            self.ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")

    def kill(self, node: Any) -> None:
        """Kill every process of a worker node at once (SIGKILL): a node lost.

        Ray's ``remove_node`` kills the node's own processes (raylet, object store, ...) but
        not the Ray workers they started, which notice the raylet's death only later. Seen
        here: a task pinned to the node streamed one more item to the driver after its raylet
        was killed, and its process was alive 1.7 s later; a worker still measuring cells
        could send them on (the likely cause of the node-loss test's two CI failures). A lost
        machine takes them all, so they are killed first, with every process under them
        (infbench's worker subprocess)."""
        import psutil

        doomed: list[psutil.Process] = []
        for infos in node.all_processes.values():
            for info in infos:
                with contextlib.suppress(psutil.Error, AttributeError):
                    top = psutil.Process(info.process.pid)
                    doomed += [top, *top.children(recursive=True)]
        for proc in doomed:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        self.cluster.remove_node(node, allow_graceful=False)
        self.nodes.remove(node)

    def shutdown(self) -> None:
        """Disconnect, stop every node, remove the folder, restore the environment."""
        with contextlib.suppress(Exception):
            self.ray.shutdown()
        with contextlib.suppress(Exception):
            self.cluster.shutdown()
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.root, ignore_errors=True)
