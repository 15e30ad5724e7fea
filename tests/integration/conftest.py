"""Fixtures shared by the integration tests: a real Docker engine and the CPU worker
image built offline (the way CI builds it)."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infbench import __version__
from infbench.runtimes.docker_runtime import docker_available
from tests.integration.test_cli import infbench

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"infbench/cpu-llamacpp:{__version__}"


@pytest.fixture(scope="session")
def docker_client():
    if not docker_available():
        msg = "no Docker engine (scripts/test.sh installs docker.io and starts dockerd)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    import docker

    return docker.from_env()


@pytest.fixture(scope="session")
def cpu_image(docker_client):
    """Build the CPU worker image offline with `infbench containers build` (real build)."""
    p = subprocess.run(["bash", str(ROOT / "containers/cpu/prepare-offline.sh")], capture_output=True, text=True,
                       env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    engine_version = p.stdout.strip().splitlines()[-1]
    assert engine_version == md.version("llama-cpp-python")
    b = infbench("containers", "build", "--vendor", "cpu", "--network", "none", "--json",
                 "--build-arg", "BASE_IMAGE=infbench/debian-python:bookworm", "--build-arg", "PIP_ARGS=--no-index",
                 "--build-arg", f"ENGINE_VERSION={engine_version}")
    res = json.loads(b.stdout)["results"]
    assert [r["ok"] for r in res] == [True], res
    assert res[0]["tags"] == [IMAGE, f"infbench/cpu-llamacpp:{__version__}-llama.cpp{engine_version}"]
    return {"image": IMAGE, "engine_version": engine_version}


def _uses_ray(item: pytest.Item) -> bool:
    """Whether a test starts (or uses) the session's Ray cluster: it names ``ray_cluster``, or it
    is the Ray case of a test run on every executor (``make_executor`` in the executor
    contract, ``where`` in test_scenarios_everywhere: they take the cluster through
    ``request.getfixturevalue``)."""
    if "ray_cluster" in getattr(item, "fixturenames", ()):
        return True
    cs = getattr(item, "callspec", None)
    return cs is not None and "ray" in (cs.params.get("make_executor"), cs.params.get("where"))


#: The longest file of the ``untimed`` stage (about 6 minutes of its 10 on 2 cores): it goes to
#: a worker first, so the other worker runs the rest beside it (pytest-xdist's ``--dist loadfile``
#: hands out files in collection order; in alphabetical order it started late and ran alone at the end).
UNTIMED_FIRST = "test_real_weights.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that use the Ray cluster run last, in their own order: the cluster's raylets
    stay up until the session ends, and on a 2-core machine they would share the cores with
    every timed test after the first one that started them (a CI review found them beside
    the report's, serving's and harness's timed tests). The ``untimed`` tests of
    :data:`UNTIMED_FIRST` come first."""
    first, other, ray = [], [], []
    for i in items:
        if i.path.name == UNTIMED_FIRST and i.get_closest_marker("untimed"):
            first.append(i)
        else:
            (ray if _uses_ray(i) else other).append(i)
    items[:] = first + other + ray


@pytest.fixture(scope="session")
def ray_cluster(cpu_limits_file):
    """A real two-node Ray cluster on 127.0.0.1 (tests/support/ray_cluster.py): the head
    reports the test plugin's ``Raytest Alpha`` accelerator, the worker ``Raytest Beta``;
    both have this host's CPU. Started once per session, on first use; the tests that use it
    run last (:func:`pytest_collection_modifyitems`)."""
    from infbench.data.errors import ConfigError
    from infbench.execution.executors.ray import import_ray

    try:
        import_ray()
    except ConfigError:
        if os.environ.get("CI"):
            pytest.fail("Ray is not installed (scripts/setup.sh installs infbench[ray])")
        pytest.skip("Ray is not installed: pip install 'infbench[ray]'")
    from tests.support.ray_cluster import LocalRayCluster

    c = LocalRayCluster(cpu_limits=cpu_limits_file)
    try:
        c.add_node({"INFBENCH_RAYTEST_DEVICE": "alpha"})
        c.add_node({"INFBENCH_RAYTEST_DEVICE": "beta"})
        c.connect()
        yield c
    finally:
        c.shutdown()
