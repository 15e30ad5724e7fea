"""Secrets never stored, power sources named by executable, control characters never
printed (issue 14, section 4)."""

import pytest

from infbench.secrets import (
    REDACTED,
    SECRET_OPTIONS,
    clean_text,
    command_label,
    command_line,
    printable,
    redact_argv,
    redact_options,
    redact_url,
    strip_control,
    url_has_secrets,
)

SECRET = "hunter2"


@pytest.mark.parametrize("argv, kept", [
    (["infbench", "run", "--power-command", f"ipmitool -H bmc -P {SECRET} dcmi power reading"],
     ["infbench", "run", "--power-command", f"ipmitool {REDACTED}"]),
    (["infbench", "run", f"--power-command=FOO=1 /usr/bin/ipmitool -P {SECRET}"],
     ["infbench", "run", f"--power-command=ipmitool {REDACTED}"]),
    (["infbench", "run", "--base-url", f"http://user:{SECRET}@host:8000/v1?api_key={SECRET}"],
     ["infbench", "run", "--base-url", "http://host:8000/v1"]),
    (["infbench", "run", "--engine-arg", f"hf_token={SECRET}", "--engine-arg", "quantization=fp8"],
     ["infbench", "run", "--engine-arg", f"hf_token={REDACTED}", "--engine-arg", "quantization=fp8"]),
    (["infbench", "containers", "build", f"--build-arg=HF_TOKEN={SECRET}", "--build-arg", "ENGINE_VERSION=1"],
     ["infbench", "containers", "build", f"--build-arg=HF_TOKEN={REDACTED}", "--build-arg", "ENGINE_VERSION=1"]),
    (["infbench", "run", "--model", "tiny", "--power-command"], ["infbench", "run", "--model", "tiny",
                                                                "--power-command"]),
])
def test_redact_argv(argv, kept):
    assert redact_argv(argv) == kept
    assert SECRET not in command_line(argv)


def test_every_secret_option_is_redacted_in_both_spellings():
    for opt in SECRET_OPTIONS:
        value = f"KEY_token={SECRET} x://u:{SECRET}@h/?k={SECRET}"
        assert SECRET not in " ".join(redact_argv(["infbench", opt, value]))
        assert SECRET not in " ".join(redact_argv(["infbench", f"{opt}={value}"]))


@pytest.mark.parametrize("command, label", [
    ("ipmitool -P secret dcmi power reading | awk '{print $4}'", "ipmitool"),
    ("TOKEN=abc /opt/bmc/bin/read-pdu --user x", "read-pdu"),
    ("echo 42", "echo"),
    ("https://u:secret@bmc/power", "power"),
    ("x://u:secret@h/?k=secret", "shell command"),
    ("'unbalanced", "shell command"),
    ("", "shell command"),
])
def test_command_label_is_the_executable_only(command, label):
    assert command_label(command) == label


def test_redact_url_keeps_host_port_path():
    assert redact_url("https://u:p@[::1]:8443/v1/?q=1#f") == "https://[::1]:8443/v1/"
    assert redact_url("http://h/v1") == "http://h/v1"
    assert redact_url("http://h:notaport/v1") == REDACTED
    assert redact_url("user:pass@host/v1") == REDACTED                # no scheme: not understood, not kept


@pytest.mark.parametrize("raw, clean", [
    ("plain text", "plain text"),
    ("\x1b[31mred\x1b[0m", "red"),
    ("\x1b]0;pwned title\x07model", "model"),
    ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("a\x00b\x07c\x7fd\x85e", "abcde"),
    ("csi\x9b2Jx", "csix"),
    ("bell\x9d8;;x\x9chere", "bellhere"),
    ("line1\nline2\tx\r\n", "line1 line2 x "),
    ("\x1bc reset", " reset"),
])
def test_printable_strips_escapes_and_controls(raw, clean):
    assert printable(raw) == clean
    assert printable(None) == ""
    assert printable("a\nb\x1b[2Jc", keep_newlines=True) == "a\nbc"


KEY = "sk-live-0123456789abcdefSECRET"


@pytest.mark.parametrize("url,want", [
    ("http://user:pa%40ss@host:8000/v1?api_key=k&x=1#frag", "http://host:8000/v1"),
    ("https://api.example.com/v1", "https://api.example.com/v1"),
    ("http://[::1]:8080/v1?token=t", "http://[::1]:8080/v1"),
    ("http://tok@host/v1", "http://host/v1"),
])
def test_redact_url_drops_credentials(url, want):
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
