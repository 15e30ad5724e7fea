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
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: What a redacted value is replaced with.
REDACTED = "[redacted]"

#: Words that make a ``KEY=VALUE`` key (``--engine-arg``, ``--build-arg``) secret.
SECRET_KEY_WORDS = ("token", "secret", "password", "passwd", "key", "auth", "credential", "cookie", "session")


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


def is_secret_key(key: str) -> bool:
    """True when a ``KEY=VALUE`` key names a secret (see :data:`SECRET_KEY_WORDS`)."""
    k = key.lower().replace("-", "_")
    return any(w in k for w in SECRET_KEY_WORDS)


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
    "--base-url": redact_url,            # user:password@ and ?api_key=
    "--engine-arg": redact_key_value,    # hf_token=..., api_key=...
    "--build-arg": redact_key_value,     # `infbench containers build --build-arg HF_TOKEN=...`
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
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_NO_NL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object, keep_newlines: bool = False) -> str:
    """``text`` as a string safe to print on a terminal or put in a CSV field: escape
    sequences removed whole, other control characters (C0, DEL, C1) dropped.

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


def strip_control(text: str) -> str:
    """``text`` without ANSI/OSC escape sequences and control characters (tab and newline kept)."""
    return _CONTROL.sub("", _ESCAPES.sub("", text))


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret (e.g. the API key) replaced by :data:`REDACTED`, then
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


def redact(text: str) -> str:
    """The one redaction of a text infbench stores or prints, whatever its origin (a command
    line, provenance, a device property, an error, a note): credential-looking fragments
    (URL user info, ``Authorization`` values, ``api_key=``/``token=``-like fields, ``sk-``
    keys) replaced by :data:`REDACTED` (:func:`scrub`)."""
    return scrub(text)


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
