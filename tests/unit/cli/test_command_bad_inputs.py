"""Bad flags and arguments of the commands (issue 14, sections 1 and 2): each refused with a clear
error, a known engine argument accepted, `compare` sides, run-id prefixes, `results --status`,
and `detect`'s exit status when a plugin fails."""

from __future__ import annotations

import json

import pytest

from infbench.store import Store
from tests.support.hostile import (
    DRY,
    cli,
    make_store,
)


@pytest.mark.parametrize("flags, message", [
    (["--batch", ","], "--batch was given no value"),
    (["--batch", "1e23"], "--batch takes integers"),
    (["--batch", "99999999999"], "at most"),
    (["--threads", "0"], "--threads"),
    (["--engine-arg", "bogus_knob=5"], "bogus_knob"),
    (["--engine-arg", "n_ubatc=5"], "did you mean: n_ubatch"),
    (["--power-interval", "0"], "--power-interval"),
    (["--seed", "-3"], "seed"),
])
def test_bad_flags(flags, message):
    assert message in cli(*DRY, *flags).output


def test_known_engine_arg_is_accepted():
    cli(*DRY, "--engine-arg", "n_ubatch=256", code=0)


# -- section 2: other commands ------------------------------------------------------
@pytest.mark.parametrize("a, b", [("", ""), ("%", "_"), ("'; DROP TABLE cells; --", "x")])
def test_compare_needs_real_sides(tmp_path, a, b):
    p = make_store(tmp_path / "s.db")
    r = cli("compare", a, b, "--store", p)
    assert "neither a run id" in r.output


def test_run_ids_are_prefixes_not_patterns(tmp_path):
    p = make_store(tmp_path / "s.db")
    assert "not a run id" in cli("results", "--store", p, "--run", "%").output
    assert "not a run id" in cli("export", "--store", p, "--run", "_").output
    assert "not a run id" in cli("report", "--store", p, "--run", "").output
    s = Store(p, readonly=True)
    assert s.results(run_id="%") == [] and s.results(run_id="_") == []


def test_results_status_is_checked(tmp_path):
    p = make_store(tmp_path / "s.db")
    r = cli("results", "--store", p, "--status", "bogus")
    assert "unknown status 'bogus'" in r.output and "ok, failed" in r.output
    r = cli("results", "--store", p, "--status", "failed", code=0)
    assert "no results with status failed" in r.output and "run `infbench run` first" not in r.output


def test_detect_exit_status_on_plugin_errors(monkeypatch):
    from infbench import hookimpl
    from infbench.contract.manager import build_plugin_manager

    class Broken:
        @hookimpl
        def infbench_detect(self):
            raise RuntimeError("driver \x1b[31mexploded\x1b[0m")

    pm = build_plugin_manager()
    pm.register(Broken(), name="broken")
    # detect_cmd first: a command module is imported when first used (infbench.cli.COMMANDS), and
    # imported while common's name is patched it would bind the patch for good (undo restores it)
    monkeypatch.setattr("infbench.cli.detect_cmd.plugin_manager", lambda: pm)
    monkeypatch.setattr("infbench.cli.common.plugin_manager", lambda: pm)
    r = cli("detect", code=1)
    assert "plugin broken failed to detect" in r.output and "\x1b" not in r.output
    det = json.loads(cli("detect", "--json", code=1).stdout)
    assert det["errors"][0]["plugin"] == "broken" and det["devices"]

