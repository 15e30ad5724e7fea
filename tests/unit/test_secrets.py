"""Secrets never stored or printed: URL credentials, argv, server error text (issue 14)."""

import pytest

from infbench.secrets import clean_text, redact_argv, redact_options, redact_url, strip_control, url_has_secrets

KEY = "sk-live-0123456789abcdefSECRET"


@pytest.mark.parametrize("url,want", [
    ("http://user:pa%40ss@host:8000/v1?api_key=k&x=1#frag", "http://host:8000/v1"),
    ("https://api.example.com/v1", "https://api.example.com/v1"),
    ("http://[::1]:8080/v1?token=t", "http://[::1]:8080/v1"),
    ("http://tok@host/v1", "http://host/v1"),
])
def test_redact_url(url, want):
    assert redact_url(url) == want
    assert url_has_secrets(url) == (url != want)


def test_redact_url_of_a_non_url_scrubs_what_looks_like_credentials():
    assert "hunter2" not in redact_url("password=hunter2")
    assert redact_url(None) is None


def test_redact_argv_both_spellings_and_nothing_else():
    argv = ["infbench", "run", "--base-url", "http://u:pw@h/v1?api_key=K", "--model", "m",
            "--base-url=https://a:b@h2/v1?k=v", "--endpoint", "chat"]
    out = redact_argv(argv)
    assert out == ["infbench", "run", "--base-url", "http://h/v1", "--model", "m", "--base-url=https://h2/v1",
                   "--endpoint", "chat"]
    assert argv[3] == "http://u:pw@h/v1?api_key=K"            # a copy


def test_redact_options_for_worker_specs():
    opts = {"base_url": "http://u:pw@h/v1?api_key=K", "n_threads": 2}
    assert redact_options(opts) == {"base_url": "http://h/v1", "n_threads": 2}
    assert opts["base_url"].startswith("http://u:pw")


def test_scrubbed_before_it_is_cut():
    """A key straddling the cut must not leave its prefix behind."""
    text = "x" * 290 + f" Authorization: Bearer {KEY} trailing"
    out = clean_text(text, [KEY], limit=300)
    assert KEY[:6] not in out and "sk-live" not in out
    assert len(out) <= 303
    # without knowing the key, the Authorization pattern still catches it
    assert "sk-live" not in clean_text(text, [], limit=300)


def test_generic_credential_patterns():
    t = clean_text('GET http://bob:s3cr3t@h/x?api_key=abc123 {"api_key": "zzz999"} password=pw1', limit=None)
    for s in ("s3cr3t", "abc123", "zzz999", "pw1"):
        assert s not in t


def test_control_characters_and_escapes_are_stripped():
    evil = "ok \x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ bell\x07 \x9b31m"
    out = strip_control(evil)
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "red" in out and "link" in out and "title" not in out
    assert strip_control("line1\n\tline2") == "line1\n\tline2"
    assert clean_text(b"\xff\xfe bad utf8 \x1b[2J") == "\ufffd\ufffd bad utf8 "
