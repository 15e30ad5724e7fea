"""The secret in a Ray address (issue 33, item 6) is never printed, and one redaction covers
addresses without a scheme."""

from __future__ import annotations

import pytest

from tests.support.hostile import assert_no_secret, cli

RAY_SECRET = "s3cretPW"


@pytest.mark.parametrize("address", [f"user:{RAY_SECRET}@127.0.0.1:18604", f"ray://user:{RAY_SECRET}@127.0.0.1:18604"])
def test_the_ray_address_secret_is_never_printed(tmp_path, address):
    """The probe: `run --executor ray --ray-address 'user:s3cretPW@127.0.0.1:18604'` printed
    the password in the error and in the suggested `ray status --address ...` command."""
    pytest.importorskip("ray")
    outs = {}
    r = cli("run", "--model", "tiny", "--batch", "1", "--input-len", "8", "--output-len", "3", "--executor", "ray",
            "--ray-address", address, "--store", tmp_path / "s.db", env={"INFBENCH_RAY_CONNECT_TIMEOUT": "5"})
    outs["run"] = r.output
    assert "ray status --address" in r.output and "127.0.0.1:18604" in r.output
    outs["detect"] = cli("detect", "--ray-address", address, code=None,
                         env={"INFBENCH_RAY_CONNECT_TIMEOUT": "5"}).output
    assert_no_secret(outs, RAY_SECRET)


def test_one_redaction_covers_scheme_less_addresses():
    from infbench.data.secrets import redact, redact_argv

    assert redact(f"at user:{RAY_SECRET}@10.0.0.1:6379 now") == "at [redacted]@10.0.0.1:6379 now"
    assert RAY_SECRET not in " ".join(redact_argv(["infbench", "run", "--ray-address", f"u:{RAY_SECRET}@h:6379"]))
    for keep in ("python:3.11@sha256:12345", "ubuntu:22.04@sha256:0123abcd", "user@host:22", "12:30 at 10.0.0.1:80"):
        assert redact(keep) == keep

