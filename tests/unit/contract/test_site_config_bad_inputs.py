"""Problems in the site config (issue 14, section 2), each reported with the file and the value."""

from __future__ import annotations

from tests.support.hostile import (
    DRY,
    cli,
)


def test_site_config_problems(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    monkeypatch.setenv("INFBENCH_SITE_CONFIG", str(site))
    site.write_bytes(b"\x00\xffbinary\x80garbage")
    for args in (["detect"], ["detect", "--json"], DRY):
        r = cli(*args)
        assert str(site) in r.output and "not UTF-8" in r.output
    site.write_text('[cerebas]\nbase_url = "https://x/v1"\n')
    r = " ".join(cli("detect").output.split())
    assert "[cerebas]" in r and "did you mean: cerebras" in r
    assert "[cerebas]" in cli(*DRY).output
    site.write_text('[containers]\nmount_roots = ["/scratch"]\n[sambanova]\napi_key_env = "K"\n')
    cli("detect", code=0)

