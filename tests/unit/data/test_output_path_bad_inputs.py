"""Output paths that cannot be written (issue 14, section 1): a read-only folder, a missing parent,
/proc; each refused with a clear error."""

from __future__ import annotations

import pytest

from tests.support.hostile import (
    cli,
    make_store,
    readonly_dir,
)


@pytest.mark.parametrize("where", ["readonly", "missing-parent", "proc"])
def test_output_paths(tmp_path, where):
    store = make_store(tmp_path / "s.db")
    with readonly_dir(tmp_path) as ro:
        base = {"readonly": ro, "missing-parent": ro / "no" / "such", "proc": "/proc/infbench-test"}[where]
        for args in (["export", "--format", "csv", "--out", f"{base}/x.csv"],
                     ["export", "--format", "lib-csv", "--out", f"{base}/x.csv"],
                     ["report", "--no-static", "--out", f"{base}/rep"],
                     ["compare", f"{store}", f"{store}", "--out", f"{base}/cmp.html"],
                     ["run", "--model", "tiny", "--write-spec", f"{base}/spec.json"]):
            if args[0] != "run":
                args += ["--store", store] if args[0] != "compare" else []
            r = cli(*args)
            assert "cannot write" in r.output and str(base) in r.output

