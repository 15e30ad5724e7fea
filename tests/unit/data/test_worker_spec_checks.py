"""A worker spec is checked against its hash and bounds (issue 41, item 3)."""

from __future__ import annotations

import json

import pytest


def test_a_worker_spec_is_checked_against_its_hash_and_bounds(tmp_path):
    """A spec edited to output_len 10000000 is refused before anything runs: its cells no
    longer hash to what was written; one without a hash is refused too; a cell beyond the
    bounds is named."""
    from infbench.data.errors import ConfigError
    from infbench.data.groups import Group, Plan
    from infbench.data.models import resolve
    from infbench.data.schema import Cell
    from infbench.data.worker_spec import read_spec, write_spec
    from tests.support.hostile import DEV

    c = Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=4)
    g = Group(resolve("tiny-random-llama"), "llama.cpp", "f16", 1)
    g.cells.append(c)
    path = tmp_path / "spec.json"
    spec = write_spec(Plan(device=DEV, groups=[g]), path)
    assert read_spec(path).workload_hash == spec.spec_hash()
    raw = json.loads(path.read_text())
    raw["cells"][0]["output_len"] = 10_000_000
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="edited after it was written"):
        read_spec(path)
    del raw["workload_hash"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="no workload_hash"):
        read_spec(path)
    raw["cells"][0]["batch"] = 2_000_000
    from infbench.data.worker_spec import WorkerSpec

    raw["workload_hash"] = WorkerSpec(**raw).spec_hash()
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="batch 2,000,000 is above the bound"):
        read_spec(path)

