"""Large sweeps (issue 41, item 3): one above the cell cap is refused before planning, and planning
a large one shows progress."""

from __future__ import annotations

import pytest


def test_a_sweep_above_the_cell_cap_is_refused_before_planning(monkeypatch):
    """5,000 x 200 lengths: refused at once with the count, the cap and how to raise it."""
    from infbench.data.errors import ConfigError
    from infbench.data.schema import Sweep
    from infbench.plan import check_cell_count, planned_cell_count

    sw = Sweep(models=["tiny"], engines=["llama.cpp"], dtypes=["f16"], batch=[1], input_len=list(range(1, 5001)),
               output_len=list(range(1, 201)))
    assert planned_cell_count(sw) == 1_000_000
    with pytest.raises(ConfigError, match="1,000,000 cells.*cap of 50,000") as e:
        check_cell_count(sw)
    assert "INFBENCH_MAX_CELLS" in e.value.hint
    monkeypatch.setenv("INFBENCH_MAX_CELLS", "2000000")
    assert check_cell_count(sw) == 1_000_000


def test_planning_a_large_sweep_shows_progress(pm, cpu):
    from infbench.data.schema import Sweep
    from infbench.plan import plan

    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1, 2],
               input_len=list(range(1, 101)), output_len=list(range(1, 101)))
    lines: list[str] = []
    p = plan(sw, cpu, pm, progress=lines.append)
    assert len(p.cells) == 20_000
    assert lines[0] == "planning 20,000 cells" and "10,000 of at most 20,000" in lines[1]

