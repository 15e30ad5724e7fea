"""Secrets never stored, power sources named by executable, control characters never
printed (issue 14, section 4)."""

import pytest

from infbench.data.secrets import (
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


# -- issue 22: one redaction for every stored or printed text ------------------------------
import base64  # noqa: E402

from infbench.data.secrets import is_secret_key, redact, redact_tree, scrub, url_secrets  # noqa: E402

BASIC = base64.b64encode(f"bob:{SECRET}".encode()).decode()


@pytest.mark.parametrize("text", [
    # a URL anywhere in a value, also behind a KEY= whose key names no secret
    f"infbench run --engine-arg 'base_url=http://bob:{SECRET}@host/v1'",
    f"infbench run --engine-arg base_url=http://bob:{SECRET}@host/v1 --model m",
    f"connecting to https://{SECRET}@example.com/v1 failed",
    f"http://bob:p/{SECRET}@host/v1",                                   # an unencoded '/' in the password
    f"GET http://h/v1?token={SECRET}&x=1", f"http://h/?X-Amz-Signature={SECRET}", f"http://h/cb#access_token={SECRET}",
    f'{{"base_url": "http://u:{SECRET}@10.0.0.1:8000/v1?api_key={SECRET}"}}',
    # Authorization of any scheme, and Basic/Bearer wherever they are
    f"Authorization: Basic {BASIC}", f"401: bad credentials Basic {BASIC}", f'{{"auth": "Basic {BASIC}"}}',
    f"Authorization: Bearer {SECRET}xyz", f"Authorization: Digest username=\"bob\", response=\"{SECRET}\"",
    f"Proxy-Authorization: {SECRET}", f"x-api-key: {SECRET}", f"Cookie: session={SECRET}",
    f"header was Bearer {SECRET}abc", f"{{'Authorization': 'Token {SECRET}'}}",
    # KEY=VALUE pairs whose key names a secret
    f"password={SECRET}", f"HF_TOKEN={SECRET}", f'"client_secret": "{SECRET}"', f"api-key: {SECRET}",
])
def test_redact_finds_credentials_wherever_they_occur(text):
    out = redact(text)
    assert SECRET not in out and BASIC not in out, out
    assert REDACTED in out


def test_basic_credentials_are_redacted_with_their_decoded_form():
    out = redact(f"server said: Basic {BASIC} is not valid for bob:{SECRET} ({SECRET})")
    assert SECRET not in out and BASIC not in out and "bob:" not in out
    assert redact("Basic settings are fine") == "Basic settings are fine"      # not base64 of user:password


@pytest.mark.parametrize("token, kept", [
    ("sk-proj-abcdefghij0123456789", "sk-"), ("hf_" + "a1B2" * 9, "hf_"), ("ghp_" + "x" * 36, "ghp_"),
    ("gho_" + "y" * 36, "gho_"), ("github_pat_" + "z1_" * 20, "github_pat_"), ("glpat-" + "a" * 20, "glpat-"),
    ("xoxb-1234567890-abcdef", "xoxb-"), ("AKIA" + "ABCDEFGHIJKLMNOP", "AKIA"), ("AIza" + "b" * 35, "AIza"),
    ("eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "eyJ"),
])
def test_token_shapes(token, kept):
    out = redact(f"the key {token} leaked")
    assert token not in out and f"{kept}{REDACTED}" in out


@pytest.mark.parametrize("text", [
    "Connection refused", "max_tokens=64 max_num_batched_tokens=2048 tokenizer=./tok api_key_env=OPENAI_KEY",
    "https://api.example.com/v1?model=x&stream=true", "http://127.0.0.1:8000/v1/@user", "plain model name",
    "Basic auth is not used", "session ended after 3 s", "scikit-learn sk-learn hf_transfer",
])
def test_redact_keeps_ordinary_text(text):
    assert redact(text) == text


def test_a_short_user_name_does_not_blank_that_letter_everywhere():
    """Issue 22: user ``u`` made "Connection refused" read "Connection ref[redacted]sed"."""
    assert scrub("Connection refused", ["u"]) == "Connection refused"
    assert scrub("error from bob: Connection refused", ["bob"]) == "error from bob: Connection refused"
    assert scrub("wrong pw hunt2 here, hunt2x stays", ["hunt2"]) == f"wrong pw {REDACTED} here, hunt2x stays"
    assert scrub(f"x{SECRET}long{SECRET}", [SECRET + "long"]) == f"x{REDACTED}{SECRET}"
    url = f"http://u:{SECRET}@127.0.0.1:1/v1"
    text = f"cannot reach {url}: Connection refused"
    assert scrub(text, url_secrets(url)) == f"cannot reach http://{REDACTED}@127.0.0.1:1/v1: Connection refused"


def test_url_secrets_include_the_basic_credential_a_client_builds():
    got = url_secrets(f"http://bob:{SECRET}@h/v1?api_key=abcd1234")
    assert SECRET in got and "abcd1234" in got and BASIC in got
    assert url_secrets("http://h/v1") == [] and url_secrets(None) == []


@pytest.mark.parametrize("key, secret", [
    ("hf_token", True), ("HF_TOKEN", True), ("api_key", True), ("apiKey", True), ("X-Amz-Signature", True),
    ("client_secret", True), ("password", True), ("Authorization", True),
    ("api_key_env", False), ("api_key_set", False), ("max_num_batched_tokens", False), ("tokenizer", False),
    ("quantization", False), ("n_keys", False), ("keyfile", False),
])
def test_secret_key_names(key, secret):
    assert is_secret_key(key) is secret


def test_redact_tree_redacts_values_and_urls_at_any_depth():
    tree = {"argv": ["infbench", "--engine-arg", f"base_url=http://bob:{SECRET}@h/v1"],
            "device": {"properties": {"base_url": f"https://h/v1?token={SECRET}", "api_key_env": "K",
                                      "api_key": SECRET}}, "n": 3, "ok": True}
    out = redact_tree(tree)
    assert SECRET not in repr(out)
    assert out["device"]["properties"]["api_key_env"] == "K" and out["n"] == 3 and out["ok"] is True


@pytest.mark.parametrize("key", ["quality_key", "cache_key", "session", "n_keys", "spec_hash"])
def test_ordinary_keys_are_not_secret(key):
    assert not is_secret_key(key)
    assert redact_tree({key: "abc"}) == {key: "abc"}
