"""The way into the layers (issue 40): from the ``infbench run`` command to the engine's ``run``,
counted as the review counted it (file:function hops on the call stack, infbench's own
frames), at most 20; and the registry built once per process."""

from __future__ import annotations

import traceback
from pathlib import Path

from typer.testing import CliRunner

from infbench.contract.hookspecs import hookimpl
from infbench.testing import FakeEngine, plugin_manager

#: Most file:function hops from the command to the engine's run (issue 40's target).
MAX_HOPS = 20


def run_path(stack: list[traceback.FrameSummary]) -> list[str]:
    """The infbench frames of ``stack`` (taken inside the engine's ``run``) from the ``run``
    command to the engine's ``run``, as ``file:function``: library frames between them (click's,
    typer's, contextlib's) left out, the engine's ``run`` last."""
    hops = [f"{Path(f.filename).name}:{f.name}" for f in stack[:-1] if "/infbench/" in f.filename]
    start = hops.index("run_cmd.py:run")
    return [*hops[start:], "engine:run"]


def test_infbench_run_reaches_the_engine_in_at_most_20_hops(tmp_path, monkeypatch):
    stacks: list[list[traceback.FrameSummary]] = []

    class Recording(FakeEngine):
        def run(self, cell, prompts, deadline_ns=None):
            if cell.output_len == 4:  # the timed call, not the warm-up's
                stacks.append(traceback.extract_stack())
            return super().run(cell, prompts, deadline_ns)

    class Launch:
        @hookimpl(tryfirst=True)
        def infbench_launch_engine(self, engine, device, options):
            return Recording(device, options) if engine == "fake" else None

    pm = plugin_manager()
    pm.register(Launch(), name="recording")
    monkeypatch.setattr("infbench.detect.registry.get_plugin_manager", lambda: pm)
    from infbench.cli import app

    res = CliRunner().invoke(app, ["run", "--engine", "fake", "--model", "tiny", "--batch", "1", "--input-len", "8",
                                   "--output-len", "4", "--dtype", "f16", "--store", str(tmp_path / "r.db"),
                                   "--json"])
    assert res.exit_code == 0, res.output
    hops = list(dict.fromkeys(run_path(stacks[0])))
    assert hops[0] == "run_cmd.py:run" and "orchestrator.py:run" in hops
    assert len(hops) <= MAX_HOPS, "\n".join(hops)


def test_the_registry_is_built_once_per_process(monkeypatch):
    """``registry()`` and the engine registry are built once and kept (issue 40: the review
    counted at least 6 rebuilds in one run)."""
    from infbench.contract.registry import engine_specs
    from infbench.detect.registry import registry

    pm = plugin_manager()
    monkeypatch.setattr("infbench.detect.registry.get_plugin_manager", lambda: pm)
    calls = []
    real = pm.hook.infbench_engines

    class Counting:
        def __call__(self, *a, **kw):
            calls.append(1)
            return real(*a, **kw)

    monkeypatch.setattr(pm.hook, "infbench_engines", Counting())
    reg = registry()
    assert reg.engines is engine_specs(pm) is registry().engines
    assert len(calls) == 1
    pm.register(type("Other", (), {})(), name="other")  # a new plugin: built again, once
    assert "fake" in engine_specs(pm) and engine_specs(pm) is engine_specs(pm)
    assert len(calls) == 2
