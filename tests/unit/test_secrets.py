"""Secrets never stored, power sources named by executable, control characters never
printed (issue 14, section 4)."""

import pytest

from infbench.secrets import (
    REDACTED,
    SECRET_OPTIONS,
    command_label,
    command_line,
    printable,
    redact_argv,
    redact_url,
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
