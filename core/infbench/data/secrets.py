"""Keeping secrets out of what infbench stores and prints, and terminal escapes out of
what it prints.

Three rules, each applied at the one place the data leaves infbench's hands:

* **Stored command lines are redacted** (:func:`redact_argv`): ``runs.command`` and the
  provenance's ``argv`` keep every argument except the *values* of the options listed in
  :data:`SECRET_OPTIONS`, the one table of secret-bearing options. Each entry names how
  its value is redacted: a shell command keeps only its executable's name
  (``--power-command 'ipmitool -P hunter2 ...'`` is stored as ``--power-command
  'ipmitool [redacted]'``), a URL loses its user info and query, a ``KEY=VALUE`` item
  loses its value when the key names a secret (``token``, ``key``, ``password``...).
* **Power sources are labelled by the executable's name only** (:func:`command_label`):
  ``user-supplied power command: ipmitool``, never the command line.
* **Text that came from outside is printed without control characters**
  (:func:`printable`): model names, errors and labels read from an ingested folder or a
  server, and every field of CSV output. ANSI/OSC escape sequences (colour, cursor
  moves, terminal title, hyperlinks) are removed whole, other C0/C1 control characters
  dropped; newlines and tabs are kept only where asked.
* **URLs are used in full only to connect** (:func:`redact_url`, :func:`redact_options`):
  device names, cell ids, ``engine.base_url``, worker specs and /metrics notes hold the URL
  without user info, query and fragment.
* **Text from a server is cleaned before it is stored** (:func:`clean_text`): control
  characters stripped, known secrets and credential-looking fragments scrubbed, *then* cut
  to a length, so no key prefix survives a cut.
* **Every text that is stored or printed goes through one redaction** (:func:`redact`,
  :func:`redact_tree`), whatever its origin: a URL anywhere in it loses its user info and
  the values of secret query parameters (also inside ``KEY=VALUE`` items whose key names
  no secret); ``Authorization`` values of any scheme, and ``Basic``/``Bearer`` credentials
  anywhere (a ``Basic`` one's decoded ``user:password`` too); ``KEY=VALUE`` / ``"key":
  "value"`` pairs whose key names a secret; and the shapes of well-known tokens (``sk-``,
  ``hf_``, ``ghp_``, ``github_pat_``, ``glpat-``, ``xox?-``, AWS ``AKIA``, Google ``AIza``,
  JWTs). The store applies it to every run, cell and measurement it writes, and the
  terminal, JSON and CSV writers to everything they print.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

#: What a redacted value is replaced with.
REDACTED = "[redacted]"

#: Words that make a ``KEY=VALUE`` key (``--engine-arg``, ``--build-arg``), a JSON key or a
#: URL query parameter secret, when one of the key's words (split at ``_``, ``-``, ``.``
#: and case changes) is one of them: ``hf_token``, ``client_secret``, ``X-Amz-Signature``,
#: but not ``max_num_batched_tokens`` or ``tokenizer``.
SECRET_KEY_WORDS = ("token", "secret", "password", "passwd", "pwd", "passphrase", "apikey", "auth",
                    "authorization", "credential", "credentials", "cookie", "sessionid", "sig", "signature",
                    "bearer", "jwt")
#: Words before ``key`` that make it a secret (``api_key``, ``X-Api-Key``, ``private_key``);
#: ``key`` alone is one too, ``quality_key`` or ``cache_key`` are not.
SECRET_KEY_QUALIFIERS = ("api", "access", "secret", "private", "auth", "client", "master", "subscription",
                         "license", "signing", "encryption", "ssh", "account", "service", "user", "app")
#: Last words of a key that names *where* a secret is, not the secret (``api_key_env``,
#: ``ssl_key_file``, ``api_key_set``): such a key's value is kept.
_NOT_SECRET_SUFFIXES = ("env", "var", "file", "path", "set", "name", "id_env", "source")


def command_label(command: str) -> str:
    """The executable's name of a shell command line, nothing else: ``"ipmitool"`` for
    ``"FOO=1 /usr/bin/ipmitool -H bmc -P hunter2 dcmi power reading | awk '{print $4}'"``.

    Leading ``VAR=value`` assignments are skipped; a line that cannot be split (unbalanced
    quotes), is empty, or whose first word is not a plain file name (a URL...) gives
    ``"shell command"``.
    """
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        return "shell command"
    for w in words:
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w):
            continue
        name = os.path.basename(w.rstrip("/")) or w
        # an executable's name is a plain word; anything else (a URL, key=value) is not shown
        return name[:64] if re.fullmatch(r"[A-Za-z0-9._+-]+", name) else "shell command"
    return "shell command"


def redact_command(command: str) -> str:
    """``"ipmitool [redacted]"``: the executable's name, the rest of the line redacted."""
    return f"{command_label(command)} {REDACTED}"


def redact_url(url: str | None) -> str | None:
    """The URL without user info, query and fragment (``http://u:p@h/v1?api_key=x`` ->
    ``http://h/v1``); a value that is not a URL with a scheme and a host is redacted whole.
    None stays None."""
    if url is None:
        return None
    try:
        u = urlsplit(url)
        host = u.hostname or ""
        port = u.port
    except ValueError:
        return REDACTED
    if not u.scheme or not host or any(c.isspace() for c in url):
        return REDACTED  # not a URL: nothing in it is known to be safe
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    return urlunsplit((u.scheme, netloc, u.path, "", ""))


def url_has_secrets(url: str | None) -> bool:
    """True if ``url`` carries user info, a query string or a fragment (what
    :func:`redact_url` drops)."""
    if not url:
        return False
    try:
        u = urlsplit(url)
    except ValueError:
        return False
    return bool(u.username or u.password or u.query or u.fragment)


#: Engine options whose value is a URL (credentials dropped when options are written out).
URL_ENGINE_OPTIONS: tuple[str, ...] = ("base_url",)


def redact_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of engine options safe to write to a file (a worker spec): URL options
    through :func:`redact_url`. A worker then authenticates with ``api_key_env`` only."""
    out = dict(options or {})
    for k in URL_ENGINE_OPTIONS:
        if isinstance(out.get(k), str):
            out[k] = redact_url(out[k])
    return out


def _key_words(key: str) -> list[str]:
    """``"X-Amz-Signature"`` -> ``["x", "amz", "signature"]``; ``"apiKey"`` -> ``["api", "key"]``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def is_secret_key(key: str) -> bool:
    """True when a ``KEY=VALUE`` key, a JSON key or a query parameter names a secret: one of
    its words is in :data:`SECRET_KEY_WORDS` (``hf_token``, ``client_secret``) or is ``key``
    after a word of :data:`SECRET_KEY_QUALIFIERS` (``api-key``, ``apiKey``), and its last
    word does not say where the secret lives (``api_key_env`` names an environment variable
    and is kept)."""
    words = _key_words(key)
    if not words or words[-1] in _NOT_SECRET_SUFFIXES:
        return False
    if any(w in SECRET_KEY_WORDS for w in words):
        return True
    return words == ["key"] or any(w == "key" and i and words[i - 1] in SECRET_KEY_QUALIFIERS
                                   for i, w in enumerate(words))


def redact_key_value(item: str) -> str:
    """``api_key=abc`` -> ``api_key=[redacted]``; an item whose key names no secret
    (``quantization=fp8``) is kept."""
    key, sep, _ = item.partition("=")
    return f"{key}={REDACTED}" if sep and is_secret_key(key) else item


#: The secret-bearing options of every infbench command, and how each one's value is
#: redacted before it is stored or printed. Add an option here and every stored command
#: line and provenance ``argv`` redacts it.
SECRET_OPTIONS: dict[str, Callable[[str], str | None]] = {
    "--power-command": redact_command,   # a shell command line: BMC passwords, tokens
    "--base-url": lambda v: redact_url(v) or REDACTED,   # user:password@ and ?api_key=
    "--engine-arg": redact_key_value,    # hf_token=..., api_key=...
    "--build-arg": redact_key_value,     # `infbench containers build --build-arg HF_TOKEN=...`
    "--ray-address": lambda v: redact_address(v),  # user:password@HOST:PORT, ray://user:password@... (below)
}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every option in :data:`SECRET_OPTIONS` redacted, in both
    spellings (``--opt value`` and ``--opt=value``). Other arguments are kept as given.

    Args:
        argv: a command line (``sys.argv``).

    Returns:
        A new list of the same length.
    """
    out: list[str] = []
    pending: Callable[[str], str | None] | None = None
    for a in argv:
        a = str(a)
        if pending is not None:
            out.append(pending(a) or REDACTED)
            pending = None
            continue
        opt, eq, value = a.partition("=")
        if opt in SECRET_OPTIONS:
            if eq:
                out.append(f"{opt}={SECRET_OPTIONS[opt](value) or REDACTED}")
            else:
                out.append(a)
                pending = SECRET_OPTIONS[opt]
            continue
        out.append(a)
    return out


def command_line(argv: Sequence[str]) -> str:
    """The redacted command line as one shell-quoted string (what ``runs.command`` stores)."""
    return shlex.join(redact_argv(argv))


#: ESC-introduced sequences: CSI (``ESC [ ... final``), OSC/DCS/PM/APC/SOS strings up to
#: BEL or ST, and two-character escapes; also the 8-bit CSI/OSC introducers.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"                      # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"     # OSC, DCS, SOS, PM, APC (to BEL or ST)
    r"|\x9b[0-?]*[ -/]*[@-~]"                       # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x9c]*[\x07\x9c]?"  # 8-bit OSC, DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"                            # other escapes (ESC c, ESC ( B...)
)
#: Unicode bidirectional controls (embeddings, overrides, isolates, marks): a right-to-left
#: override in a model name reorders what a terminal or a CSV viewer shows ("Trojan
#: Source", CVE-2021-42574), so they are removed like control characters (issue 41).
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}]")
_CONTROL_NO_NL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}]")


def printable(text: object, keep_newlines: bool = False) -> str:
    """``text`` as a string safe to print on a terminal or put in a CSV field: escape
    sequences removed whole, other control characters (C0, DEL, C1) and Unicode
    bidirectional controls (:data:`BIDI_CONTROLS`) dropped.

    Args:
        text: anything (``str()`` is applied; None gives ``""``).
        keep_newlines: keep ``\\n`` and ``\\t`` (multi-line messages); otherwise they
            become spaces.

    Returns:
        The cleaned string (same text when there was nothing to remove).
    """
    if text is None:
        return ""
    s = str(text)
    if s.isprintable():
        return s
    s = _ESCAPES.sub("", s)
    if keep_newlines:
        return _CONTROL.sub("", s.replace("\r\n", "\n"))
    return _CONTROL_NO_NL.sub("", s.replace("\r\n", " ").replace("\n", " ").replace("\t", " "))


#: A URL anywhere in a text: scheme, ``://``, then everything up to whitespace, a quote or
#: a bracket (user info, host, path, query and fragment).
_URL_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,15}://)([^\s\"'<>`\\]+)")
#: A query (or fragment) parameter: separator, name, value.
_PARAM = re.compile(r"([?&;#])([^=&;#?]+)=([^&;#]*)")
#: ``Authorization:`` / ``Proxy-Authorization=`` (header, JSON key, log field), an optional
#: scheme word, and the credentials: up to the end of the token for token schemes, else to
#: the end of the line or the closing quote (Digest and other schemes with parameters).
_AUTH_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*([\"'])?)"
                          r"(?:(basic|bearer|token|apikey|api-key|key|sso-key|ssws|pat)\s+([^\s\"',;}\]]+)"
                          r"|([A-Za-z][\w-]*\s+)?((?(2)[^\r\n\"'}\]]+|[^\r\n]+)))")
#: ``Cookie:`` and ``Set-Cookie:`` header values, to the end of the line or quote.
_COOKIE_HEADER = re.compile(r"(?i)\b((?:set-)?cookie[\"']?\s*[:=]\s*[\"']?)[^\r\n\"'}\]]+")
#: A ``Basic`` credential anywhere (an echoed header without its name): base64 of ``user:password``.
_BASIC = re.compile(r"\b(Basic)\s+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])", re.IGNORECASE)
#: A ``Bearer`` credential anywhere.
_BEARER = re.compile(r"\b(Bearer)\s+([A-Za-z0-9._~+/-]{6,}=*)", re.IGNORECASE)
#: ``KEY=VALUE`` / ``KEY: VALUE`` / ``"KEY": "VALUE"`` whose key's last word names a secret.
_SECRET_PAIR = re.compile(
    r"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]+[_.-])*(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key"
    r"|token|secret|password|passwd|pwd|passphrase|credentials?|signature|sig)[\"']?\s*[=:]\s*[\"']?)"
    r"(?!\[redacted\])([^\s&\"',;}\]]+)")
#: Well-known token shapes, each kept as its prefix and :data:`REDACTED`.
_TOKENS = (
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}"), r"\1-"),                 # OpenAI, Anthropic, Stripe-like
    (re.compile(r"\b(hf)_[A-Za-z0-9]{30,}"), r"\1_"),                        # Hugging Face
    (re.compile(r"\b(gh[pousr])_[A-Za-z0-9]{30,}"), r"\1_"),                 # GitHub
    (re.compile(r"\b(github_pat)_[A-Za-z0-9_]{30,}"), r"\1_"),               # GitHub fine-grained
    (re.compile(r"\b(glpat)-[A-Za-z0-9_-]{20,}"), r"\1-"),                   # GitLab
    (re.compile(r"\b(xox[abposr])-[A-Za-z0-9-]{10,}"), r"\1-"),              # Slack
    (re.compile(r"\b(npm)_[A-Za-z0-9]{36,}"), r"\1_"),                       # npm
    (re.compile(r"\b(pypi)-[A-Za-z0-9_-]{50,}"), r"\1-"),                    # PyPI
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), r"\1"),                     # AWS access key id
    (re.compile(r"\b(AIza)[0-9A-Za-z_-]{35}"), r"\1"),                       # Google API key
    (re.compile(r"\b(eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), r"\1"),  # JWT
)
#: User info before a ``HOST:PORT`` written without a scheme (a Ray address
#: ``user:s3cret@10.0.0.1:6379``): ``NAME:SECRET@`` right before a host and a port (not an
#: image digest, ``python:3.11@sha256:...``).
_USERINFO_HOSTPORT = re.compile(
    r"(?<![\w.%+~/@:-])[A-Za-z0-9._~%+-]{1,128}:[^\s@/\"'<>`]{1,256}@"
    r"(?!(?:sha|md|blake)\d*:)(?=(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*):\d{1,5}(?![\w.]))")
#: What every pattern above needs somewhere in a text (a cheap test before running them).
_MAYBE = re.compile(r"[:=]|basic|bearer|sk-|pk-|rk-|hf_|gh[pousr]_|github_pat_|glpat-|xox|npm_|pypi-|akia|asia|aiza|"
                    r"eyj", re.IGNORECASE)
#: Shortest known secret replaced wherever it occurs; shorter ones only as a whole word,
#: and none shorter than :data:`_MIN_SECRET` (a one-letter user name is no secret, and
#: replacing it would blank that letter in every word).
_SUBSTRING_SECRET = 8
_MIN_SECRET = 4


def _url_in_text(m: re.Match[str]) -> str:
    """One URL found in a text: user info and secret parameter values redacted."""
    scheme, rest = m.group(1), m.group(2)
    cut = re.search(r"[/?#]", rest)
    authority, tail = (rest[:cut.start()], rest[cut.start():]) if cut else (rest, "")
    if "@" in authority:
        authority = REDACTED + "@" + authority.rsplit("@", 1)[1]
    elif "@" in tail and re.match(r"[^:@]+:(?!\d+(?:/|$))[^@\s]*@", rest):
        # a password holding an unencoded '/', '?' or '#': ``http://bob:p/w@host``
        authority, tail = REDACTED + "@" + rest.split("@", 1)[1], ""
        cut = re.search(r"[/?#]", authority[len(REDACTED) + 1:])
        if cut:
            k = len(REDACTED) + 1 + cut.start()
            authority, tail = authority[:k], authority[k:]

    def param(p: re.Match[str]) -> str:
        name = unquote(p.group(2))
        if p.group(3) and p.group(3) != REDACTED and is_secret_key(name):
            return f"{p.group(1)}{p.group(2)}={REDACTED}"
        return p.group(0)

    return scheme + authority + _PARAM.sub(param, tail)


def _basic_decoded(token: str) -> str | None:
    """The ``user:password`` a Basic credential encodes, or None when it is not one."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return text if ":" in text and text.isprintable() else None


def _auth_header(m: re.Match[str]) -> str:
    head, scheme, simple = m.group(1), m.group(3), m.group(4)
    if (simple or m.group(6) or "").startswith(REDACTED[:-1]):
        return m.group(0)                  # already redacted (a Basic credential found first)
    if scheme is not None:
        return f"{head}{scheme} {REDACTED}"
    word = m.group(5) or ""
    known = word.strip().lower() in ("digest", "negotiate", "ntlm", "hoba", "mutual", "aws4-hmac-sha256", "dpop",
                                     "vapid", "scram-sha-256", "gnap")
    return f"{head}{word if known else ''}{REDACTED}"


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret (e.g. the API key) replaced by :data:`REDACTED`, then
    credential-looking fragments redacted (:func:`redact`).

    A known secret of :data:`_SUBSTRING_SECRET` characters or more is replaced wherever it
    occurs; a shorter one only where it stands as a whole word; one shorter than
    :data:`_MIN_SECRET` is not searched for (it cannot be told apart from ordinary text:
    a user name ``u`` must not blank every ``u`` of "Connection refused")."""
    for s in secrets:
        if not s or len(s) < _MIN_SECRET:
            continue
        if len(s) >= _SUBSTRING_SECRET:
            text = text.replace(s, REDACTED)
        else:
            text = re.sub(r"(?<![A-Za-z0-9])" + re.escape(s) + r"(?![A-Za-z0-9])", REDACTED, text)
    return redact(text)


def strip_control(text: str) -> str:
    """``text`` without ANSI/OSC escape sequences and control characters (tab and newline kept)."""
    return _CONTROL.sub("", _ESCAPES.sub("", text))


def clean_text(text: str | bytes, secrets: Iterable[str | None] = (), limit: int | None = 300) -> str:
    """Text from outside made safe to store and print: decoded (bytes, invalid UTF-8
    replaced), control characters stripped, secrets scrubbed, and only then cut to
    ``limit`` characters (``...`` marks a cut; None: no limit)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = scrub(strip_control(text), secrets)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text


#: The secrets this process holds (:func:`remember`): replaced by :func:`redact` wherever
#: they occur, whatever surrounds them (issue 41: a server's 401 body echoed the bearer
#: token of an ``extra_headers`` value without its ``Bearer`` word, and it was printed and
#: stored). Values only, never written anywhere.
_KNOWN: set[str] = set()
_KNOWN_RE: list[re.Pattern[str] | None] = [None]
#: Request headers that never carry a credential: their values are not remembered.
PLAIN_HEADERS = frozenset({"accept", "accept-encoding", "accept-language", "accept-charset", "content-type",
                           "content-encoding", "content-language", "user-agent", "cache-control", "connection",
                           "pragma", "te", "dnt", "x-request-id", "x-correlation-id", "traceparent", "tracestate",
                           "openai-beta", "anthropic-version", "x-stainless-lang"})


def credential_like(value: str) -> bool:
    """True for a string shaped like a credential: a known token shape (:func:`redact`
    changes it), or one word of 8 or more characters mixing letters and digits (random
    keys), not a plain word or a MIME type (``application/json``, ``infbench``)."""
    v = value.strip()
    if not v:
        return False
    if redact(v) != v:
        return True
    return (len(v) >= _SUBSTRING_SECRET and not any(c.isspace() for c in v)
            and any(c.isdigit() for c in v) and any(c.isalpha() for c in v))


def remember(*values: str | None) -> None:
    """Add secrets this process holds to the redaction set (:func:`redact` replaces each
    by :data:`REDACTED` wherever it occurs): an API key, a header's value, a URL's user
    info. Each value is remembered with its parts a server may echo apart: the credential
    after an ``Authorization`` scheme word (``Bearer X`` -> ``X``), a ``Basic``
    credential's decoded ``user:password`` and password, percent-decoded forms. Values
    shorter than 4 characters are not remembered (see :func:`scrub`)."""
    added = False
    for v in values:
        if not isinstance(v, str):
            continue
        forms = {v, v.strip(), unquote(v)}
        words = v.split()
        if len(words) == 2:  # "Bearer X", "Basic X", "Token X"
            forms.add(words[1])
            pair = _basic_decoded(words[1]) if words[0].lower() == "basic" else None
            if pair is not None:
                forms.update({pair, pair.partition(":")[2]})
        for f in forms:
            if len(f) >= _MIN_SECRET and f != REDACTED and f not in _KNOWN:
                _KNOWN.add(f)
                added = True
    if added:
        _KNOWN_RE[0] = None


def remember_options(options: dict[str, Any] | None) -> None:
    """:func:`remember` every secret engine options hold: the values of ``extra_headers``
    (except :data:`PLAIN_HEADERS`; a header not named as a credential only when its value
    is :func:`credential_like`), the values of ``extra_body`` keys that name a secret and
    its credential-like strings (at any depth), the user info and query values of
    ``base_url`` (:func:`url_secrets`), and the key in the variable ``api_key_env`` names."""
    if not isinstance(options, dict):
        return
    headers = options.get("extra_headers")
    if isinstance(headers, dict):
        for k, v in headers.items():
            name = str(k).lower()
            if name in PLAIN_HEADERS or not isinstance(v, str):
                continue
            if is_secret_key(name) or name in ("cookie", "proxy-authorization") or credential_like(v):
                remember(v)

    def body(obj: Any, secret: bool = False, depth: int = 0) -> None:
        if depth > 64:
            return
        if isinstance(obj, str):
            if secret or credential_like(obj):
                remember(obj)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                body(v, secret or (isinstance(k, str) and is_secret_key(k)), depth + 1)
        elif isinstance(obj, list):
            for v in obj:
                body(v, secret, depth + 1)

    body(options.get("extra_body"))
    url = options.get("base_url")
    if isinstance(url, str):
        remember(*url_secrets(url))
    env = options.get("api_key_env")
    if isinstance(env, str) and env:
        remember(os.environ.get(env))


def forget_all() -> None:
    """Empty the redaction set of :func:`remember` (tests)."""
    _KNOWN.clear()
    _KNOWN_RE[0] = None


def _known_pattern() -> re.Pattern[str] | None:
    """One pattern for every remembered secret, longest first: a secret of
    :data:`_SUBSTRING_SECRET` characters or more wherever it occurs, a shorter one as a
    whole word."""
    if not _KNOWN:
        return None
    if _KNOWN_RE[0] is None:
        alts = [re.escape(s) if len(s) >= _SUBSTRING_SECRET else r"(?<![A-Za-z0-9])" + re.escape(s) +
                r"(?![A-Za-z0-9])" for s in sorted(_KNOWN, key=len, reverse=True)]
        _KNOWN_RE[0] = re.compile("|".join(alts))
    return _KNOWN_RE[0]


def redact(text: str) -> str:
    """The one redaction of a text infbench stores or prints, whatever its origin (a command
    line, provenance, a device property, an error, a note), with every credential replaced
    by :data:`REDACTED`:

    * every secret this process holds (:func:`remember`: header values, credential-like
      ``extra_body`` values, the API key, URL user info), by exact match wherever it
      occurs;

    * a URL anywhere in the text (also the value of a ``KEY=VALUE`` item whose key names no
      secret, ``base_url=http://bob:pw@host/v1``): its user info, and the values of its
      query and fragment parameters whose name is secret (:func:`is_secret_key`:
      ``?api_key=``, ``&token=``, ``#access_token=``, ``X-Amz-Signature=``);
    * the user info of a ``HOST:PORT`` address written without a scheme (a Ray address
      ``user:pw@10.0.0.1:6379`` -> ``[redacted]@10.0.0.1:6379``);
    * ``Authorization`` / ``Proxy-Authorization`` values of any scheme (the scheme word is
      kept), ``Cookie`` values, and ``Basic``/``Bearer`` credentials wherever they occur; a
      ``Basic`` credential's decoded ``user:password`` (and the password alone) is removed
      from the whole text too;
    * ``KEY=VALUE``, ``KEY: VALUE`` and ``"KEY": "VALUE"`` pairs whose key ends with a secret
      word (``api_key``, ``hf_token``, ``client_secret``, ``password``);
    * well-known token shapes (``sk-...``, ``hf_...``, ``ghp_...``, ``github_pat_...``,
      ``glpat-...``, Slack, npm, PyPI, AWS ``AKIA...``, Google ``AIza...``, JWTs).

    Text without any of these is returned unchanged.
    """
    if not text:
        return text
    known = _known_pattern()
    if known is not None:
        text = known.sub(REDACTED, text)
    if not _MAYBE.search(text):
        return text
    decoded: list[str] = []

    def basic(m: re.Match[str]) -> str:
        pair = _basic_decoded(m.group(2))
        if pair is None:
            return m.group(0)
        decoded.append(pair)
        return f"{m.group(1)} {REDACTED}"

    text = _BASIC.sub(basic, text)
    text = _AUTH_HEADER.sub(_auth_header, text)
    text = _COOKIE_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(0) if m.group(2) == REDACTED else f"{m.group(1)} {REDACTED}", text)
    text = _URL_IN_TEXT.sub(_url_in_text, text)
    text = _USERINFO_HOSTPORT.sub(REDACTED + "@", text)
    text = _SECRET_PAIR.sub(lambda m: m.group(1) + REDACTED, text)
    for pattern, prefix in _TOKENS:
        text = pattern.sub(prefix + REDACTED, text)
    for pair in decoded:
        user, _, password = pair.partition(":")
        text = text.replace(pair, REDACTED)
        if len(password) >= _MIN_SECRET:
            text = re.sub(r"(?<![A-Za-z0-9])" + re.escape(password) + r"(?![A-Za-z0-9])", REDACTED, text)
    return text


def redact_address(addr: str) -> str:
    """A cluster address as it may be stored: a URL (``ray://u:pw@h:10001?x=y``) without
    user info, query and fragment (:func:`redact_url`); a ``HOST:PORT`` without a scheme
    with its user info redacted (:func:`redact`, ``[redacted]@h:6379``); anything with
    blanks, or that is neither, redacted whole."""
    if not addr or any(c.isspace() for c in addr):
        return REDACTED
    if "://" in addr:
        return redact_url(addr) or REDACTED
    return redact(addr.split("?", 1)[0].split("#", 1)[0])


def url_secrets(url: str | None) -> list[str]:
    """What a URL carries that must never be stored, for :func:`scrub` and :func:`clean_text`:
    its password (raw and percent-decoded), user name, query values of 4 characters or more,
    and the ``Basic`` credential a client builds from its user info (base64 of
    ``user:password``)."""
    if not url:
        return []
    try:
        u = urlsplit(url)
        user, password = u.username, u.password
        query = parse_qsl(u.query)
    except ValueError:
        return []
    out = [s for s in (password, unquote(password or ""), user, unquote(user or "")) if s]
    out += [v for _, v in query if len(v) >= _MIN_SECRET]
    if user is not None:
        out.append(base64.b64encode(f"{unquote(user)}:{unquote(password or '')}".encode()).decode())
    return out


def redact_tree(obj: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples, strings, numbers) with every
    string passed through :func:`redact`, and every value of a secret-named key
    (:func:`is_secret_key`: ``api_key``, ``token``...) replaced by :data:`REDACTED`.
    Used on every run's provenance and command line where the store writes them
    (:meth:`infbench.store.Store.begin_run`), so no path can store a secret it forgot."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_key(k) and isinstance(v, str) and v
                    else redact_tree(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_tree(v) for v in obj]
    return obj
