"""Huge `--adaptive` budgets (issue 33, item 6) are clear errors, not pydantic's ValidationError."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli


# -- item 6: the internal error and the secret of the probe ---------------------------------------
@pytest.mark.parametrize("budget, message", [
    ("99999999999999999999h", "21 characters long (at most 16)"),
    ("999999999h", "at most 10,000,000 s"),
    ("9999999999999m", "at most 10,000,000 s"),
])
def test_huge_adaptive_budgets_are_clear_errors(budget, message):
    """The probe: `--adaptive 99999999999999999999h` raised pydantic's ValidationError
    ("this is a bug in infbench")."""
    r = cli("run", "--model", "tiny", "--batch", "1,2", "--adaptive", budget, "--dry-run")
    assert message in r.output and "bug" not in r.output

