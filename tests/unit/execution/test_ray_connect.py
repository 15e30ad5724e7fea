"""``connect`` in a process already connected to a Ray cluster: an address that names another
cluster (or one that cannot be compared, ``ray://``) is probed and connected to, never
answered by the open connection. CI found the ``ray://`` case: a unit test run after the
integration layer's Ray cluster got that cluster's devices for ``ray://...:18604``."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from infbench.data.errors import ConfigError
from infbench.execution.executors import ray as rayx


class _ConnectedRay:
    """Stands in for the ``ray`` module of a process connected to the GCS at ``gcs``."""

    def __init__(self, gcs: str | None):
        self.gcs, self.calls = gcs, []

    def is_initialized(self):
        return True

    def get_runtime_context(self):
        if self.gcs is None:
            raise RuntimeError("a Ray Client connection has no GCS address")
        return SimpleNamespace(gcs_address=self.gcs)

    def shutdown(self):
        self.calls.append("shutdown")

    def init(self, **kw):
        self.calls.append(("init", kw["address"]))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("gcs", ["127.0.0.1:6379", None])
@pytest.mark.parametrize("scheme", ["ray://", ""])
def test_another_address_is_probed_not_answered_by_the_open_connection(monkeypatch, gcs, scheme):
    fake = _ConnectedRay(gcs)
    monkeypatch.setattr(rayx, "import_ray", lambda: fake)
    addr = f"{scheme}127.0.0.1:{_closed_port()}"
    with pytest.raises(ConfigError, match="cannot connect to the Ray cluster at"):
        rayx.connect(addr, timeout_s=2)
    assert fake.calls == []  # the open connection is kept when the other address fails


@pytest.mark.parametrize("asked", ["127.0.0.1:6379", "auto", None])
def test_the_same_cluster_keeps_the_open_connection(monkeypatch, asked):
    fake = _ConnectedRay("127.0.0.1:6379")
    monkeypatch.setattr(rayx, "import_ray", lambda: fake)
    assert rayx.connect(asked, timeout_s=2) is False and fake.calls == []
