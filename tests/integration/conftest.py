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
from filelock import FileLock

from infbench import __version__
from infbench.runtimes.docker_runtime import docker_available
from tests.integration.test_cli import infbench
from tests.support.home import session_dir

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
def cpu_image(docker_client, tmp_path_factory):
    """Build the CPU worker image offline with `infbench containers build` (real build), once per
    session: a second pytest-xdist worker waits on the lock and takes the first one's result."""
    done = session_dir(tmp_path_factory) / "cpu_image.json"
    with FileLock(f"{done}.lock"):
        if done.exists():
            return json.loads(done.read_text())
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
        image = {"image": IMAGE, "engine_version": engine_version}
        done.write_text(json.dumps(image))
        return image


def _uses_ray(item: pytest.Item) -> bool:
    """Whether a test starts (or uses) the session's Ray cluster: it names ``ray_cluster``, or it
    is the Ray case of a test run on every executor (``make_executor`` in the executor
    contract, ``where`` in test_scenarios_everywhere: they take the cluster through
    ``request.getfixturevalue``)."""
    if "ray_cluster" in getattr(item, "fixturenames", ()):
        return True
    cs = getattr(item, "callspec", None)
    return cs is not None and "ray" in (cs.params.get("make_executor"), cs.params.get("where"))


#: The group of every test that uses the session's Ray cluster (:func:`_uses_ray`): one worker
#: runs them all, one after another, on one cluster.
RAY_GROUP = "ray"

#: Test groups (a file, or :data:`RAY_GROUP`), longest first: seconds of one pinned worker's
#: time in a run of the parallel stage on this 2-core machine (two CI replicas from nothing,
#: 2026-12-02: test_real_weights 291-419, the Ray group 300-356, test_fault_injection 194-261 with
#: the CPU worker image's build, test_vllm 172-196, test_frontier_servers 136-174, test_first_result
#: 128-150, test_cli 99-216, test_crosscheck 78-89, test_production_serving 65-78,
#: test_accelerator_first 49-82, test_engine_signatures about 50 with the venvs' first imports
#: compiled, test_lib_validation_cli 42-50, test_layers about 30 with the suite's one mypy run,
#: ...). The parallel stage hands groups out in this order, the longest first, so that the two
#: workers end together; groups not listed follow in collection order, then the unit layer.
LONGEST_FIRST = ("test_real_weights.py", RAY_GROUP, "test_fault_injection.py", "test_vllm.py",
                 "test_frontier_servers.py", "test_first_result.py", "test_cli.py", "test_crosscheck.py",
                 "test_production_serving.py", "test_accelerator_first.py", "test_engine_signatures.py",
                 "test_lib_validation_cli.py", "test_layers.py", "test_plugin_entrypoint.py",
                 "test_scenarios_everywhere.py", "test_secrets_paths.py", "test_peer_roundtrip.py", "test_serving.py",
                 "test_executor_contract.py")


def _group(item: pytest.Item) -> str:
    """The test's group: :data:`RAY_GROUP` if it uses the Ray cluster, else its file's name."""
    return RAY_GROUP if _uses_ray(item) else item.path.name


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests by group, :data:`LONGEST_FIRST` (the order within a group kept), the
    unit layer after the integration layer, and under ``--dist loadgroup`` (scripts/test.sh's
    parallel stage) put each
    integration test in its group (``xdist_group``): a file's module fixtures are made once,
    on one worker, and the Ray tests share one cluster on one worker. The Ray tests run one
    after another: the cluster is shut down after the last of them
    (:func:`pytest_runtest_teardown`), not left running beside the tests that follow.
    ``tryfirst``: pytest-xdist reads the groups in its own hook."""
    rank = {g: n for n, g in enumerate(LONGEST_FIRST)}
    # the unit layer last: its tests (each its own unit under loadgroup) fill both workers'
    # ends after the longer integration groups
    items.sort(key=lambda i: rank.get(_group(i), len(rank)) if i.get_closest_marker("integration") else len(rank) + 1)
    # a pytest-xdist worker sees ``--dist loadgroup`` as ``loadgroup`` (its ``dist`` is "no")
    if getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", "no") == "loadgroup":
        for i in items:
            if i.get_closest_marker("integration") and not i.get_closest_marker("xdist_group"):
                i.add_marker(pytest.mark.xdist_group(_group(i)))


#: The session's Ray cluster while it runs (:func:`ray_cluster`).
_RAY: list = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of the Ray group, shut the cluster down: its raylets would otherwise
    share the cores with every later test of this process until the session ends. ``trylast``:
    after the test's own fixtures are torn down."""
    if _RAY and _uses_ray(item) and (nextitem is None or not _uses_ray(nextitem)):
        _RAY.pop().shutdown()


@pytest.fixture(scope="session")
def ray_cluster(cpu_limits_file):
    """A real two-node Ray cluster on 127.0.0.1 (tests/support/ray_cluster.py): the head
    reports the test plugin's ``Raytest Alpha`` accelerator, the worker ``Raytest Beta``;
    both have this host's CPU. Started once per session, on first use; the tests that use it
    run one after another and it is shut down after the last of them
    (:func:`pytest_collection_modifyitems`, :func:`pytest_runtest_teardown`)."""
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
        _RAY.append(c)
        yield c
    finally:
        if c in _RAY:
            _RAY.remove(c)
        c.shutdown()
