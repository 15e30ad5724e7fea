"""The command line against its golden files (tests/golden, issue 40 item 10): every
command's ``--help``, ``infbench run --dry-run --json`` of every example in the run help and
docs/guide.md, and the cell ids of the fixture stores. A difference is either a regression or
an intended change: then re-record (``python -m tests.golden.record``) and review the diff.
How the goldens are made the same on every host: :mod:`tests.golden.harness`."""

from __future__ import annotations

import difflib
import json

import pytest

from tests.golden import harness as h

INDEX = json.loads((h.GOLDEN / "index.json").read_text())

#: Integration: the dry runs import the engine libraries (vLLM, transformers) to plan and check.
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(bool(h.missing_engines()), reason="the goldens assume the test install "
                                 f"(scripts/setup.sh); missing here: {', '.join(h.missing_engines())}")]


def _diff(want: str, got: str, name: str) -> str:
    return "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), f"golden/{name}", "now"))


@pytest.fixture(scope="module")
def host():
    with h.golden_host():
        yield


def test_every_command_and_example_is_recorded(host):
    """A new command or a new example in the run help or docs/guide.md needs its golden file."""
    assert h.command_paths() == INDEX["commands"]
    assert h.run_examples() == INDEX["examples"]


@pytest.mark.parametrize("path", INDEX["commands"], ids=lambda p: " ".join(p) or "infbench")
def test_help(host, path):
    res = h.normalise_result(h.invoke([*path, "--help"]))
    got = (f"$ infbench {' '.join([*path, '--help'])}\nexit {res['exit']}\n{res['stdout']}"
           + (f"--- stderr\n{res['stderr']}" if res["stderr"] else ""))
    name = h.slug(["infbench", *path]) + ".txt"
    want = (h.GOLDEN / "help" / name).read_text()
    assert got == want, _diff(want, got, f"help/{name}")


@pytest.mark.parametrize("example", INDEX["examples"], ids=lambda a: " ".join(a) or "(none)")
def test_dry_run(host, example):
    argv = h.dry_run_argv(example)
    name = h.slug(argv) + ".json"
    got = json.dumps(h.normalise_result(h.invoke(argv)), indent=1) + "\n"
    want = (h.GOLDEN / "dry_run" / name).read_text()
    assert got == want, _diff(want, got, f"dry_run/{name}")


def test_fixture_store_cell_ids_never_change():
    """The fixture stores (written by earlier infbench releases) keep their ids: the ids this
    infbench computes from each stored spec are the stored ones, and the golden file's."""
    now = h.store_cell_ids()
    assert now == json.loads((h.GOLDEN / "store_cell_ids.json").read_text())
    for cells in now.values():
        assert cells and all(c["cell_id"] == c["stored_cell_id"] and c["spec_hash"] == c["stored_spec_hash"]
                             for c in cells)


def test_planned_cell_ids_never_change():
    """Every cell the golden dry runs planned keeps its id when computed by this infbench from
    its spec and device (the paths in the goldens are put back where the examples ran)."""
    from infbench.data.schema import Cell, DeviceInfo

    runs = {p.name: json.loads(p.read_text()) for p in sorted((h.GOLDEN / "dry_run").glob("*.json"))}
    cells = h.planned_cell_ids(runs)
    assert len(cells) > 50
    for c in cells:
        spec = json.loads(json.dumps(c["cell"]).replace("<WORK>", str(h.WORK)))
        assert Cell(**spec).cell_id(DeviceInfo(**c["device"])) == c["cell_id"], spec
