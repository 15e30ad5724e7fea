"""The node side of the Ray executor without Ray: a group whose real model path is not on
the node is refused before any worker starts, with a message naming the node."""

from __future__ import annotations

from infbench.data.groups import Group, Plan
from infbench.data.schema import Cell
from infbench.data.worker_spec import make_spec
from infbench.execution.executors.raynode import group_events


def test_missing_model_refused_before_any_worker(cpu, tmp_path, infbench_home):
    ghost = str(tmp_path / "weights" / "model.gguf")
    c = Cell(model=ghost, engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=2)
    spec = make_spec(Plan(cpu, [Group(None, "llama.cpp", "f16", 1, [c])]))
    events = list(group_events(spec.model_dump_json(), "job-1", node={"node_id": "n" * 56, "hostname": "gpu-07"}))
    assert [e["event"] for e in events] == ["node", "refused"]
    assert events[0]["hostname"] == "gpu-07" and events[0]["job"] == str(infbench_home / "jobs" / "job-1")
    assert f"model {ghost} not found on node gpu-07" in events[1]["error"]
    assert not (infbench_home / "jobs" / "job-1" / "spec.json").exists()  # nothing ran
