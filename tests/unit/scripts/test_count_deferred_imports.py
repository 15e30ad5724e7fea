"""scripts/count_deferred_imports.py counts each import of infbench's own modules inside a
function body once, and nothing else (issue 40)."""

from __future__ import annotations

from tests.unit.scripts import load_script

counter = load_script("count_deferred_imports")

SAMPLE = '''
from typing import TYPE_CHECKING
import infbench.data
from infbench.data import errors
if TYPE_CHECKING:
    from infbench.store import Store

class A:
    from infbench.data import paths

    def method(self):
        from infbench.data.paths import default_home
        import json
        return default_home

def outer():
    import torch
    from . import sibling

    def inner():
        import infbench.store as s, os
        return s
    return inner, lambda: 0

async def later():
    from infbench.workloads import chat
'''


def test_only_own_imports_inside_functions_count(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SAMPLE)
    found = counter.deferred_imports(path)
    assert [text for _, text in found] == [
        "from infbench.data.paths import default_home", "from . import sibling",
        "import infbench.store as s, os", "from infbench.workloads import chat"]


def test_the_total_and_the_bound(tmp_path, capsys):
    (tmp_path / "m.py").write_text(SAMPLE)
    (tmp_path / "clean.py").write_text("import infbench\n")
    assert counter.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "deferred imports of infbench's own modules: 4"
    assert "clean.py" not in out
    assert counter.main([str(tmp_path), "--max", "4"]) == 0
    assert counter.main([str(tmp_path), "--max", "3"]) == 1
