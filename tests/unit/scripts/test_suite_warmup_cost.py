"""scripts/suite_warmup_cost.py sums warm-up, cells measured again and run time per test folder,
each store once (pytest's ``*current`` links point at the numbered folders)."""

from __future__ import annotations

import time

from infbench.data.schema import Cell, CellResult, DeviceInfo
from infbench.store import Store
from tests.unit.scripts import load_script

cost = load_script("suite_warmup_cost")
DEV = DeviceInfo(vendor="cpu", kind="cpu", model="Test CPU")


def _result(warmup_s, wall_s):
    c = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=1, input_len=4, output_len=3)
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status="ok",
                      metrics={"warmup": {"seconds": warmup_s, "converged": True}}, wall_s=wall_s,
                      started_at=time.time(), finished_at=time.time())


def test_per_folder_sums_count_each_store_once(tmp_path, capsys):
    folder = tmp_path / "test_a0"
    folder.mkdir()
    s = Store(folder / "s.db")
    run = s.begin_run({})
    s.save_cell(run, _result(2.5, 1.0))
    s.save_cell(run, _result(0.5, 3.0))   # the same cell measured again
    s.finish_run(run, "completed")
    (tmp_path / "test_acurrent").symlink_to(folder)
    (tmp_path / "test_b0").mkdir()
    (tmp_path / "test_b0" / "broken.db").write_bytes(b"not a database")
    c = cost.folder_costs(tmp_path)
    assert set(c) == {"test_a0"}
    a = c["test_a0"]
    assert (a["warmup_s"], a["wall_s"], a["remeasured_wall_s"], a["cells"]) == (3.0, 4.0, 3.0, 2)
    assert cost.main([str(tmp_path)]) == 0 and "test_a0" in capsys.readouterr().out
