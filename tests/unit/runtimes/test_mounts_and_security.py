"""Container mounts and settings (issue 14, section 5): cache symlinks are never followed into a
writable mount, the allowed mount roots come from the site config and the environment, and every
loosened container setting is announced."""

from __future__ import annotations

import os

import pytest


# -- section 5: containers -----------------------------------------------------------
def test_cache_symlinks_are_never_followed_into_a_writable_mount(tmp_path):
    from infbench.runtimes.mounts import cache_link_mounts

    cache, private = tmp_path / "cache", tmp_path / "private"
    cache.mkdir()
    (tmp_path / "models").mkdir()
    os.symlink("/etc", cache / "evil")
    os.symlink(tmp_path / "models", cache / "models")
    os.symlink("/nonexistent/x", cache / "dangling")
    (cache / "plain").mkdir()
    mounts, notes = cache_link_mounts(cache, private, [], "/job/home/cache")
    assert all(host.startswith(str(private)) and mode == "rw" for host, _, mode in mounts)
    assert {d for _, d, _ in mounts} == {"/job/home/cache/evil", "/job/home/cache/models", "/job/home/cache/dangling"}
    assert any("/etc" in n and "not mounted" in n for n in notes)
    mounts, notes = cache_link_mounts(cache, private, [(tmp_path / "models").resolve()], "/job/home/cache")
    assert (str((tmp_path / "models").resolve()), "/job/home/cache/models", "ro") in mounts
    assert not any(h == "/etc" for h, _, _ in mounts)


def test_allowed_mount_roots_from_site_and_env(tmp_path, monkeypatch):
    from infbench.data.errors import ConfigError
    from infbench.runtimes.mounts import allowed_mount_roots

    site = tmp_path / "site.toml"
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    site.write_text('[containers]\nmount_roots = ["/scratch/models"]\n')
    monkeypatch.setenv("INFBENCH_MOUNT_ROOTS", f"/data{os.pathsep}/other")
    assert [str(p) for p in allowed_mount_roots()] == ["/scratch/models", "/data", "/other"]
    site.write_text('[containers]\nmount_roots = "/scratch"\n')
    with pytest.raises(ConfigError, match="must be a list"):
        allowed_mount_roots()


def test_every_loosened_container_setting_is_announced(pm):
    from infbench.contract.registry import container_spec
    from infbench.data.schema import DeviceInfo
    from infbench.runtimes.docker_runtime import security_notes

    def spec(vendor):
        return container_spec(pm, DeviceInfo(vendor=vendor, kind="gpu", model="x"), "vllm").as_dict()

    amd = " | ".join(security_notes(spec("amd"), "img"))
    assert "seccomp=unconfined" in amd and "IPC namespace" in amd
    habana = " | ".join(security_notes(spec("habana"), "img"))
    assert "SYS_NICE" in habana and "IPC namespace" in habana
    notes = security_notes({"privileged": True, "pid_mode": "host", "network_mode": "host",
                            "device_cgroup_rules": ["c 189:* rmw"], "user": "0:0", "sysctls": {"a.b": 1},
                            "userns_mode": "host"}, "img")
    assert len(notes) == 7 and any("privileged" in n for n in notes) and any("189" in n for n in notes)
    assert security_notes({"network_mode": "none", "ipc_mode": "private", "user": "1000:1000"}, "img") == []



def test_a_pinned_infbench_gives_its_cpus_to_the_worker_container(monkeypatch, tmp_path):
    """The Docker daemon starts the worker container, so it does not inherit infbench's CPU
    affinity: ``DockerRuntime.start`` passes it as ``cpuset_cpus`` where it is narrower than the
    host's (recorded with the run's settings), a spec's own ``cpuset_cpus`` wins, and an unpinned
    infbench passes none."""
    from types import SimpleNamespace

    from infbench.runtimes import docker_runtime as dr

    runs = []
    client = SimpleNamespace(
        images=SimpleNamespace(get=lambda image: SimpleNamespace(id="sha256:1", labels={})),
        containers=SimpleNamespace(run=lambda image, **kw: runs.append(kw) or SimpleNamespace(id="c1")))
    rt = dr.DockerRuntime(client)
    (tmp_path / "spec.json").write_text("{}")

    def start(spec):
        return rt.start({"image": "infbench/cpu-llamacpp:x", **spec}, tmp_path, tmp_path / "home",
                        tmp_path / "cache", "w1")

    monkeypatch.setattr(dr.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(dr.os, "sched_getaffinity", lambda pid: {5, 2})
    w = start({})
    assert runs[-1]["cpuset_cpus"] == "2,5" and w.description["run"]["cpuset_cpus"] == "2,5"
    start({"cpuset_cpus": "7"})
    assert runs[-1]["cpuset_cpus"] == "7"                          # the plugin's spec wins
    monkeypatch.setattr(dr.os, "sched_getaffinity", lambda pid: set(range(8)))
    start({})
    assert "cpuset_cpus" not in runs[-1]                           # all of the host's: nothing to pass
