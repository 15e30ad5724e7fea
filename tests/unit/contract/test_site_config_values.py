"""Site config values and size (issue 22): each bad value refused with its message, the file's size bounded."""

from __future__ import annotations

import pytest

from tests.support.hostile import cli


@pytest.mark.parametrize("content, message", [
    ('[cerebras]\nbase_url = "https://x/v1"\npower_w = nan\n', ":3: cerebras.power_w is nan"),
    ('[cerebras]\nbase_url = "https://x/v1"\npower_w = inf\n', "power_w is inf"),
    ('[cerebras]\nbase_url = "ftp://x/v1"\n', ":2: base_url"),
    ('[cerebras]\nbase_url = "https://x/v1"\ncount = 99999999999\n', "count"),
    ("a = " + "[" * 50 + "]" * 50 + "\n", "nested"),
])
def test_site_config_values(tmp_path, monkeypatch, content, message):
    site = tmp_path / "site.toml"
    site.write_text(content)
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    r = cli("detect", "--no-engines")
    assert message in " ".join(r.output.split()), r.output


def test_site_config_size_is_bounded(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text("# " + "x" * (2 << 20) + "\n")
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    assert "larger than 1 MiB" in cli("detect", "--no-engines").output

