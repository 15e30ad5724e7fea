"""An `infbench import` is all or nothing (issue 41, item 1)."""

from __future__ import annotations

import pytest


def test_an_import_is_all_or_nothing(tmp_path):
    """A failure part-way through an import commits no cell; the run is marked failed."""
    from infbench.store import Store
    from infbench.store.published import import_published
    from tests.support.hostile import cell_result

    class Breaks(Store):
        n = 0

        def save_cell(self, run_id, r):
            Breaks.n += 1
            if Breaks.n == 3:
                raise KeyboardInterrupt
            return super().save_cell(run_id, r)

    s = Breaks(tmp_path / "s.db")
    with pytest.raises(KeyboardInterrupt):
        import_published(s, [cell_result(b) for b in range(1, 6)], {"name": "x"})
    r = Store(tmp_path / "s.db", readonly=True)
    assert r.results() == [] and r.runs()[0]["status"] == "interrupted"

