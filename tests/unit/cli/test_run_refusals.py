"""`infbench run` refusals (issue 41, items 4 and 6): the probe's internal errors are clear errors,
and `--adaptive` on a remote endpoint is refused before a run begins."""

from __future__ import annotations

from tests.support.hostile import DRY, cli


def test_internal_errors_of_the_probe_are_clear_errors():
    assert "model" in cli(*DRY, "--model", "x" * 300).output
    r = cli(*DRY, "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--trace-speed", "nan")
    assert "finite" in r.output or "trace" in r.output


def test_adaptive_on_a_remote_endpoint_is_refused_before_a_run_begins(tmp_path):
    from infbench.store import Store

    store = tmp_path / "s.db"
    r = cli("run", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency",
            "1,2,4", "--adaptive", "50%", "--store", store)
    assert "--adaptive predicts from the device's limits" in " ".join(r.output.split())
    assert not store.exists() or Store(store, readonly=True).runs() == []

