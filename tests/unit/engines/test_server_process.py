"""Server processes (infbench.engines.server_process, issue 14, section 3): the whole process group
is stopped even after its leader exited, and a server dies with the process that started it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest


def test_server_group_is_killed_even_after_its_leader_exited(tmp_path):
    from infbench.engines.server_process import ServerProcess, _group_alive

    # the leader starts a grandchild and exits: the grandchild must not outlive stop()
    srv = ServerProcess(["sh", "-c", "sleep 60 & echo $! > child.pid; sleep 0.3"], "http://127.0.0.1:9/health",
                        tmp_path / "log")
    srv.proc = subprocess.Popen(srv.argv, cwd=tmp_path, start_new_session=True)
    srv.pgid = srv.proc.pid
    srv.proc.wait(10)
    child = int((tmp_path / "child.pid").read_text())
    assert _group_alive(srv.pgid) and not _zombie(child)    # the leader is gone, its child is not
    srv.stop(grace_s=2)
    for _ in range(50):
        if _zombie(child):
            break
        time.sleep(0.1)
    assert _zombie(child)


def _zombie(pid):
    """True when ``pid`` has exited (gone, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_its_parent(tmp_path):
    """SIGKILL the process that started a server: the kernel sends the server SIGTERM."""
    code = ("import subprocess, sys, time; from infbench.data.signals import dying_with_parent;"
            "p = subprocess.Popen(dying_with_parent(['sleep', '60']), start_new_session=True);"
            "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.3)
    assert not _zombie(child)
    parent.kill()
    parent.wait()
    for _ in range(50):
        if _zombie(child):
            break
        time.sleep(0.1)
    assert _zombie(child), "the server outlived its parent"

