"""Keeping secrets and terminal escapes out of everything infbench stores or prints.

* :func:`redact_url`: a URL without its userinfo (``user:password@``), query and fragment,
  for storing, printing, hashing or naming (device names, cell ids, ``engine.base_url``).
  The full URL is used only to connect.
* :func:`redact_argv`: a command line with the values of secret-bearing options
  redacted, for ``runs.command`` and ``provenance.argv`` (extend :data:`URL_OPTIONS` /
  :data:`SECRET_OPTIONS` for new options).
* :func:`clean_text`: text that came from outside (a server's error body): control
  characters and ANSI/OSC escape sequences stripped, known secrets and credential-looking
  fragments scrubbed, *then* cut to a length, so no key prefix survives a cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: Options whose value is a URL that may carry credentials: userinfo and query are dropped.
URL_OPTIONS: tuple[str, ...] = ("--base-url",)
#: Options whose whole value is secret: replaced by ``***``.
SECRET_OPTIONS: tuple[str, ...] = ()

REDACTED = "***"

#: ANSI CSI (``ESC [ ... final``), OSC (``ESC ] ... BEL|ESC \\``), other two-byte ESC
#: sequences, and C0/C1 control characters except tab and newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?"
                      r"|\x9b[0-?]*[ -/]*[@-~]|\x9d[^\x07\x1b\x9c]*(?:\x07|\x9c)?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Credential-looking fragments: URL userinfo, ``Authorization:`` header values, key-like
#: query parameters and JSON fields.
_CREDENTIALS = (
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), r"\1" + REDACTED + "@"),
    (re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token)\s+)?"
                r"[^\s\"',;]+"), lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED),
    (re.compile(r"(?i)\b((?:x-)?(?:api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password|passwd)[\"']?\s*[=:]\s*"
                r"[\"']?)[^\s&\"',;}]+"), r"\1" + REDACTED),
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}"), r"\1-" + REDACTED),
)


def redact_url(url: str | None) -> str | None:
    """``url`` without userinfo, query and fragment: ``http://u:p@h:8000/v1?api_key=k`` ->
    ``http://h:8000/v1``. None stays None; a string that is not a URL is returned with
    credential-looking fragments scrubbed (:func:`scrub`)."""
    if url is None:
        return None
    try:
        u = urlsplit(url)
        host = u.hostname or ""
        port = u.port
    except ValueError:
        return scrub(url)
    if not u.scheme or not u.netloc:
        return scrub(url)
    if ":" in host:                      # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    return urlunsplit((u.scheme, netloc, u.path, "", ""))


def url_has_secrets(url: str | None) -> bool:
    """True if ``url`` carries userinfo or a query string (what :func:`redact_url` drops)."""
    if not url:
        return False
    try:
        u = urlsplit(url)
    except ValueError:
        return False
    return bool(u.username or u.password or u.query or u.fragment)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of ``argv`` with secret-bearing option values redacted: URL options
    (:data:`URL_OPTIONS`, ``--opt VALUE`` and ``--opt=VALUE``) through :func:`redact_url`,
    secret options (:data:`SECRET_OPTIONS`) replaced by ``***``. Other items are kept."""
    out: list[str] = []
    pending: str | None = None
    for a in argv:
        a = str(a)
        if pending is not None:
            out.append(_redact_value(pending, a))
            pending = None
            continue
        name, eq, value = a.partition("=")
        if name in URL_OPTIONS or name in SECRET_OPTIONS:
            if eq:
                out.append(f"{name}={_redact_value(name, value)}")
            else:
                out.append(a)
                pending = name
            continue
        out.append(a)
    return out


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


def _redact_value(option: str, value: str) -> str:
    if option in SECRET_OPTIONS:
        return REDACTED
    return redact_url(value) or value


def strip_control(text: str) -> str:
    """``text`` without ANSI/OSC escape sequences and control characters (tab and newline kept)."""
    return _ESCAPES.sub("", text)


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret (e.g. the API key) replaced by ``***``, then
    credential-looking fragments (URL userinfo, ``Authorization`` values, ``api_key=``)
    redacted."""
    for s in secrets:
        if s:
            text = text.replace(s, REDACTED)
    for pattern, repl in _CREDENTIALS:
        text = pattern.sub(repl, text)
    return text


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
