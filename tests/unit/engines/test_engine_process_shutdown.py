"""The engine process's ends (issue 41, item 3): the child ends quietly when its parent closes
during its start, and the next cell gets a new engine process after one was killed."""

from __future__ import annotations

import os

from infbench.testing import FakeEngine  # HangsOnBatchOne below: importable by the engine process


def test_the_engine_child_ends_quietly_when_its_parent_closes_during_its_start(tmp_path):
    """The measuring process stopped while the engine process started: the child sees its
    connection close and exits 0 without a traceback."""
    import socket
    import subprocess
    import sys

    from infbench.engines.process import _BOOT

    parent, child = socket.socketpair()
    p = subprocess.Popen([sys.executable, "-c", _BOOT, str(child.fileno()), str(os.getpid())],
                         pass_fds=(child.fileno(),), stderr=subprocess.PIPE)
    child.close()
    parent.close()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0 and b"Traceback" not in err, err


def test_a_new_engine_after_a_killed_engine_process(monkeypatch, tmp_path):
    """A cell past --cell-timeout whose engine process had to be killed: the next cell gets
    a new engine process (announced as loading again) and is measured, not stored failed
    without running."""
    from infbench import hookimpl, testing
    from infbench.data.events import Collector, GroupLoading
    from infbench.data.groups import Plan
    from infbench.data.run import RunOptions
    from infbench.engines import process as P
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.store import Store
    from tests.unit.engines.test_engine_process import CPU, cell, group

    monkeypatch.setattr(P, "KILL_GRACE_S", 0.3)

    class Launch:
        @hookimpl(tryfirst=True)
        def infbench_launch_engine(self, engine, device, options):
            return HangsOnBatchOne(device, options) if engine == "fake" else None

    pm = testing.plugin_manager()
    pm.register(Launch(), name="hang-once")
    ev = Collector()
    plan = Plan(CPU, [group(cell(1, 4), cell(2, 4))])
    s = InProcessExecutor(pm, {"host": "test"}).run(plan, Store(tmp_path / "r.db"), RunOptions(cell_timeout_s=0.5),
                                                    ev)
    assert [r.cell.batch for r in s.failed] == [1] and [r.cell.batch for r in s.ok] == [2]
    assert len(ev.of(GroupLoading)) == 2


class HangsOnBatchOne(FakeEngine):
    """An isolated stand-in engine whose batch-1 cell never returns (a hung native call)."""

    isolate = True

    def run(self, cell, prompts, deadline_ns=None):
        if cell.batch == 1:
            import time

            time.sleep(600)
        return super().run(cell, prompts, deadline_ns)

