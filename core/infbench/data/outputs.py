"""The one output boundary: every file infbench writes that is not the results store, and
every text it prints (issue 22).

* **Files** (:func:`write_output`): ``export --out``, ``compare --out``, ``report --out``
  (the page and its figures) and ``run --write-spec`` are written by one function. It
  refuses to overwrite an SQLite database (a results store, or anything else SQLite
  wrote: checked by the file's magic bytes, also through a symbolic link) and the paths it
  is told to protect (the store of the command), and any existing file that is not a
  previous output of the same kind (each :class:`OutputKind` recognises its own files by
  their first bytes: a CSV header, a JSON shape, a ``generator`` marker); an empty file may
  be replaced. Only a regular file or an absent path is ever a target (issue 33): a
  device node, FIFO, socket, folder, dangling link or a link to any of these is refused
  (:func:`not_a_file`), by each command before it does any work, and again at the rename.
  The bytes go to a temporary file in the same folder, are flushed to disk and renamed
  over the target, so a reader never sees half a file and a failed write leaves the old
  one whole.
* **CSV** (:func:`csv_cell`, :func:`csv_text`): text cells starting with ``=``, ``+``,
  ``-``, ``@``, a tab or a carriage return are prefixed with ``'`` (OWASP, "CSV
  Injection"), so a spreadsheet shows them instead of evaluating them; numbers are written
  as numbers. Every text cell is also stripped of control characters and redacted.
* **JSON** (:func:`json_text`): strict (no ``NaN`` or ``Infinity``: a non-finite number,
  which input validation never lets in, is written as ``null``), every string redacted;
  :func:`html_json` escapes ``<``, ``>`` and ``&`` (``\\u003c``...) so JSON embedded in a
  page cannot end its ``<script>`` element or open a comment, whatever a model name holds.
* **Terminal** (:class:`SafeConsole`, :func:`terminal_text`): every string rich renders
  (``print``, table cells, titles) passes through :func:`infbench.data.secrets.printable`
  (escape sequences and control characters removed) and
  :func:`infbench.data.secrets.redact` first.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from infbench.data.errors import ConfigError
from infbench.data.secrets import REDACTED, printable, redact, redact_tree
from infbench.data.version import __version__

#: First bytes of an SQLite database file, and of its write-ahead log (either byte order).
SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_MAGICS = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
#: Bytes of an existing file read to recognise it.
HEAD_BYTES = 64 * 1024


class OutputRefused(ConfigError):
    """A write that would destroy something: the results store, an SQLite file, or a file
    that is not a previous output of the same command. Exit status 2, naming the path."""


@dataclass(frozen=True)
class OutputKind:
    """What a command writes, and how to recognise a file it wrote before.

    Attributes:
        what: the output as messages name it (``export --format csv``).
        flag: the option that named the path (``--out``).
        recognise: ``bytes -> bool``: True when an existing file whose first (and, for a
            larger file, last) :data:`HEAD_BYTES` bytes these are is a previous output of
            this kind (it may be replaced).
    """

    what: str
    flag: str
    recognise: Callable[[bytes], bool]


def starts_with(*prefixes: bytes) -> Callable[[bytes], bool]:
    """A recogniser: the file starts with one of ``prefixes`` (after a UTF-8 BOM and blanks)."""
    def check(head: bytes) -> bool:
        h = head.removeprefix(b"\xef\xbb\xbf").lstrip()
        return any(h.startswith(p) for p in prefixes)
    return check


def contains(*markers: bytes) -> Callable[[bytes], bool]:
    """A recogniser: one of ``markers`` occurs in the file's first bytes."""
    return lambda head: any(m in head for m in markers)


#: The ``<meta name="generator">`` infbench writes in every HTML page (how :data:`REPORT_HTML`
#: and :data:`COMPARE_HTML` recognise their files).
GENERATOR = "infbench"


def generator_meta(what: str) -> str:
    """``<meta name="generator" content="infbench report">`` for the page ``what``."""
    return f'<meta name="generator" content="{GENERATOR} {what}">'


def _json_cells(head: bytes) -> bool:
    h = head.lstrip()
    return bool(re.match(rb"\[\s*(\]|\{\s*\"[A-Za-z_]+\"\s*:)", h)) and (h.startswith(b"[]") or b'"cell_id"' in h)


#: Pages and figures name infbench in their first bytes; those written before the marker
#: existed are recognised by what they always held (the report's header line, the compare
#: plot's title, matplotlib's name in a figure of the report's ``figures/`` folder).
REPORT_HTML = OutputKind("report page", "--out", contains(generator_meta("report").encode(),
                                                          b"window.infbench = {"))
COMPARE_HTML = OutputKind("compare plot", "--out", contains(generator_meta("compare").encode(), b"per-cell ratios"))
#: Figures carry ``infbench`` in their metadata (PNG ``Software``, SVG ``Creator``/``dc:creator``).
FIGURE = OutputKind("report figure", "--out", contains(b"infbench report", b"Matplotlib"))
EXPORT_JSON = OutputKind("export --format json", "--out", _json_cells)
WORKER_SPEC = OutputKind("worker spec", "--write-spec",
                         lambda h: h.lstrip().startswith(b"{") and b'"schema_version"' in h and b'"cells"' in h)


def is_sqlite(path: Path) -> bool:
    """True when ``path`` is an SQLite database or write-ahead log (by its first bytes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError:
        return False
    return head.startswith(SQLITE_MAGIC) or head[:4] in WAL_MAGICS


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


#: What a path that is not a regular file is, by its ``st_mode`` test.
_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def not_a_file(path: Path | str) -> str | None:
    """Why ``path`` may not be replaced by a file, or None when it is absent or a regular
    file (symbolic links followed).

    Returns:
        ``"a character device"``, ``"a block device"``, ``"a FIFO (named pipe)"``, ``"a
        socket"``, ``"a folder"``, ``"a symbolic link to X, which does not exist"`` (writing
        through a dangling link would create a file wherever it points), ``"a symbolic
        link that cannot be followed (...)"`` (a loop), each followed by ``" (a symbolic
        link to X)"`` when a link led there; None for an absent path or a regular file.
    """
    p = Path(path)
    try:
        lst = os.lstat(p)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"a path that cannot be examined ({exc.strerror or exc})"
    link = stat.S_ISLNK(lst.st_mode)
    via = f" (a symbolic link to {os.path.realpath(p)})" if link else ""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return f"a symbolic link to {os.readlink(p)}, which does not exist"
    except OSError as exc:
        return f"a symbolic link that cannot be followed ({exc.strerror or exc})"
    for test, what in _FILE_TYPES:
        if test(st.st_mode):
            return what + via
    return None if stat.S_ISREG(st.st_mode) else f"not a regular file{via}"


def check_output(path: Path, kind: OutputKind, protect: Iterable[Path | str | None] = ()) -> Path:
    """The real path :func:`write_output` would write for ``path`` (links followed), after
    every refusal it makes; nothing is written. Call it before any work (reading the store,
    planning), so a refused target costs nothing.

    Raises:
        OutputRefused: ``path`` is a protected path (the store, or its ``-wal``/``-shm``/
            ``-journal`` files), an SQLite database or WAL, anything but a regular file or
            an absent path (a folder, a device node, a FIFO, a socket, a dangling symbolic
            link or a link to any of these; :func:`not_a_file`), or an existing file that
            ``kind`` does not recognise as its own.
    """
    target = Path(os.path.realpath(path))
    hint = f"choose another path for {kind.flag}"
    for p in protect:
        if p is None:
            continue
        store = Path(p)
        for q in (store, *(Path(f"{store}{s}") for s in ("-wal", "-shm", "-journal"))):
            if _same(target, q) or _same(Path(path), q):
                raise OutputRefused(f"{kind.flag} {path} is the results store{'' if q == store else ' ' + q.name}; "
                                    f"infbench never writes its {kind.what} over it", hint=hint)
    special = not_a_file(path)
    if special is not None:
        raise OutputRefused(f"{kind.flag} {path} is {special}; infbench writes its {kind.what} only to a regular file "
                            "or a new path, and leaves this one as it is", hint=hint)
    if target.exists():
        if is_sqlite(target):
            raise OutputRefused(f"{kind.flag} {path} is an SQLite database (a results store?); infbench never "
                                f"writes its {kind.what} over one", hint=hint)
        try:
            with open(target, "rb") as f:
                head = f.read(HEAD_BYTES)
                if len(head) == HEAD_BYTES:  # the recogniser sees the first and the last bytes
                    f.seek(max(HEAD_BYTES, os.fstat(f.fileno()).st_size - HEAD_BYTES))
                    head += b"\n" + f.read(HEAD_BYTES)
        except OSError as exc:
            raise OutputRefused(f"cannot read {path} ({kind.flag}) to check what it is: {exc.strerror or exc}",
                                hint=hint) from None
        if head and not kind.recognise(head):
            raise OutputRefused(f"{kind.flag} {path} exists and is not an earlier {kind.what} of infbench; it is "
                                "left as it is", hint=f"delete it first if it may go, or {hint}")
    return target


def check_folder(path: Path, flag: str, what: str, protect: Iterable[Path | str | None] = (),
                 files: Iterable[str] = ()) -> Path:
    """An output folder (``report --out``, ``worker --out``): refused when it is a protected
    path (the store), or exists and is not a folder (a store, any file, a device node, a
    FIFO, a socket, a dangling link), or when one of ``files`` (names inside it the command
    writes) exists and is not a regular file (:func:`not_a_file`: writing to a FIFO would
    hang, replacing a device node would destroy it).

    Raises:
        OutputRefused: naming the flag and what to do.
    """
    hint = f"pass {flag} a folder (a new name creates one)"
    for p in protect:
        if p is not None and (_same(Path(path), Path(p)) or Path(os.path.realpath(path)) == Path(p).resolve()):
            raise OutputRefused(f"{flag} {path} is the results store; {what} goes in a folder of its own", hint=hint)
    special = not_a_file(path)
    if os.path.lexists(path) and not Path(path).is_dir():
        kind = special or ("an SQLite database (a results store?)" if is_sqlite(Path(path)) else "a file")
        raise OutputRefused(f"{flag} {path} is {kind}, not a folder; infbench does not replace it with {what}",
                            hint=hint)
    for name in files:
        inner = not_a_file(Path(path) / name)
        if inner is not None:
            raise OutputRefused(f"{flag} {path}: {name} in it is {inner}; infbench writes {what} only to regular "
                                "files and leaves this one as it is", hint=f"remove {Path(path) / name}, or {hint}")
    return Path(path)


#: The file that marks a folder as one infbench made for its output (``worker --out``),
#: as a results store is marked by its tables and schema version: a folder holding it may
#: be written again (a resumed worker); an existing folder without it is the user's.
FOLDER_MARK = ".infbench-output.json"
#: Entries an unmarked folder may hold and still be taken: the handoff markers a Ray driver
#: may create before the worker starts (:mod:`infbench.data.handoff`, hex names only).
_TAKEN_DIR, _HEX = "taken", re.compile(r"[0-9a-f]{1,64}")


def folder_mark(path: Path | str) -> dict[str, Any] | None:
    """The mark of an output folder (:data:`FOLDER_MARK`: a JSON object naming what
    infbench wrote there), or None when it has none, or one that is not a regular file or
    not infbench's."""
    mark = Path(path) / FOLDER_MARK
    if not_a_file(mark) is not None or not mark.is_file():
        return None
    try:
        with open(mark, "rb") as f:
            obj = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) and obj.get("written_by") == GENERATOR else None


def _only_handoff(path: Path) -> bool:
    """True when ``path`` holds nothing but an (empty or hex-named) ``taken/`` folder."""
    for entry in os.scandir(path):
        if entry.name != _TAKEN_DIR or not entry.is_dir(follow_symlinks=False):
            return False
        if any(not _HEX.fullmatch(e.name) or not e.is_file(follow_symlinks=False) for e in os.scandir(entry.path)):
            return False
    return True


def check_own_folder(path: Path | str, flag: str, what: str) -> Path:
    """An output folder infbench writes several files into (``worker --out``): absent,
    empty (a container mount point), or marked as infbench's (:data:`FOLDER_MARK`) by an
    earlier run of the same command. An existing folder with anything else in it was not
    made by infbench, and its files are never replaced (issue 41: ``worker --out DIR``
    replaced a user's ``cells.jsonl`` and exited 0). Call :func:`check_folder` first (it
    names special files); this adds the ownership rule.

    Raises:
        OutputRefused: the folder exists, is not empty and has no mark (naming a few
            of its entries), or cannot be listed.
    """
    p = Path(path)
    if not p.is_dir() or folder_mark(p) is not None:
        return p
    try:
        if _only_handoff(p):
            return p
        names = sorted(os.listdir(p))
    except OSError as exc:
        raise OutputRefused(f"cannot list {flag} {path} to check that infbench made it: {exc.strerror or exc}",
                            hint=f"pass {flag} a new folder") from None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise OutputRefused(f"{flag} {path} already exists and holds files infbench did not write there ({shown}); "
                        f"infbench writes {what} only into a new or empty folder, or one an earlier run of this "
                        f"command made (it holds {FOLDER_MARK}), and leaves this one as it is",
                        hint=f"pass {flag} a new folder name (it is created)")


def mark_folder(path: Path | str, what: str) -> None:
    """Create ``path`` (and its parents) if needed and mark it as infbench's output folder
    for ``what`` (:data:`FOLDER_MARK`, written atomically; an existing mark is kept).

    Raises:
        OSError: the folder cannot be created or written.
    """
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    if folder_mark(p) is not None:
        return
    mark = p / FOLDER_MARK
    tmp = p / f".{FOLDER_MARK}.tmp"
    tmp.write_text(json.dumps({"written_by": GENERATOR, "what": what, "infbench_version": __version__}))
    os.replace(tmp, mark)


def write_output(path: Path | str, data: str | bytes, kind: OutputKind,
                 protect: Iterable[Path | str | None] = ()) -> Path:
    """Write ``data`` to ``path`` atomically, after :func:`check_output`'s refusals.

    Args:
        path: the file (its folder is created).
        data: text (written as UTF-8) or bytes.
        kind: what is written (how an earlier such file is recognised).
        protect: paths never to write over (the command's results store).

    Returns:
        The path written (links resolved).

    Raises:
        OutputRefused: see :func:`check_output`.
        OSError: the folder or the file cannot be written (read-only, full disk); the
            target is then unchanged.
    """
    target = check_output(Path(path), kind, protect)
    target.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        special = not_a_file(target)  # once more at the rename: made while the bytes were written
        if special is not None:
            raise OutputRefused(f"{kind.flag} {path} became {special} while it was written; it is left as it is",
                                hint=f"choose another path for {kind.flag}")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- CSV -----------------------------------------------------------------------------------
#: First characters that make a spreadsheet evaluate a cell (OWASP "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A CSV cell: numbers, booleans and None as they are; text stripped of control
    characters (:func:`~infbench.data.secrets.printable`), redacted, and prefixed with ``'``
    when it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else str(value)
    if text[:1] in FORMULA_START:
        text = "'" + text                     # before printable() turns a leading tab into a space
    return printable(redact(text))


def csv_text(rows: Iterable[dict[str, Any]], columns: Sequence[str], lineterminator: str = "\r\n") -> str:
    """CSV text of ``rows`` under a header of ``columns`` (missing keys empty), every cell
    through :func:`csv_cell`."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[csv_cell(c) for c in columns], lineterminator=lineterminator,
                       extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({csv_cell(k): csv_cell(v) for k, v in r.items()})
    return buf.getvalue()


# -- JSON -------------------------------------------------------------------------------------
def finite_tree(obj: Any) -> Any:
    """A copy of a JSON-like value with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_tree(v) for v in obj]
    return obj


def json_text(obj: Any, indent: int | None = 2, redacted: bool = True) -> str:
    """Strict JSON of ``obj``: strings redacted (unless ``redacted`` is False: the caller
    redacted what may hold a secret), NaN and infinities written as ``null``, paths and
    other objects as their ``str()``."""
    def default(o: Any) -> Any:
        return redact(str(o)) if redacted else str(o)
    plain = _plain(obj)
    return json.dumps(finite_tree(redact_tree(plain) if redacted else plain), indent=indent, default=default,
                      allow_nan=False)


def _plain(obj: Any) -> Any:
    """Turn tuples/paths into JSON-ready values before redaction (so their text is redacted)."""
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, str) else k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


_HTML_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                              "\u2029": "\\u2029"})


def html_json(obj: Any) -> str:
    """:func:`json_text` (compact) safe inside an HTML ``<script>`` element: ``<``, ``>``,
    ``&``, U+2028 and U+2029 escaped as ``\\uXXXX`` (still the same JSON)."""
    return json_text(obj, indent=None).translate(_HTML_UNSAFE)


#: Keys of a plotly figure whose strings infbench writes itself, with plotly's own markup
#: (``<br>``, ``<extra>``): left as they are by :func:`plotly_text`.
TEMPLATE_KEYS = frozenset({"hovertemplate", "texttemplate"})
_HTML_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def plotly_text(obj: Any, key: str = "") -> Any:
    """A plotly figure (its ``to_json`` as Python objects) with every string
    HTML-escaped (``&``, ``<``, ``>``), except under :data:`TEMPLATE_KEYS`: plotly renders a
    subset of HTML in names, labels, titles and hover text, so a model name such as ``<a
    href="https://evil.example">CLICK ME</a>`` became a live link in the report (issue 41);
    escaped, plotly shows it literally (it decodes the entities), and no link comes from
    data. Numbers, keys and the figure's structure are unchanged."""
    if isinstance(obj, str):
        return obj if key in TEMPLATE_KEYS else obj.translate(_HTML_TEXT)
    if isinstance(obj, dict):
        return {k: plotly_text(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plotly_text(v, key) for v in obj]
    return obj


def log_ticks(values: Iterable[Any]) -> dict[str, Any]:
    """Tick values and labels of a plotly log axis over ``values``: each decade, or 1, 2 and 5
    of each decade where they span fewer than three, each labelled with its full value
    (``20``, ``0.5``), never plotly's bare minor digit (issue 41). ``{}`` without a
    positive finite value."""
    v = [float(x) for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)
         and math.isfinite(x) and x > 0]
    if not v:
        return {}
    lo, hi = min(v), max(v)
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    subs = (1,) if b - a >= 3 else (1, 2, 5)
    ticks = [m * 10.0 ** k for k in range(a, b + 1) for m in subs if lo / 2.5 <= m * 10.0 ** k <= hi * 2.5]
    return {"tickvals": ticks, "ticktext": [f"{t:,.3g}" if t >= 1 else f"{t:.3g}" for t in ticks]}


# -- the terminal -------------------------------------------------------------------------------
def terminal_text(text: object, keep_newlines: bool = True) -> str:
    """``text`` as it may be printed: redacted, escape sequences and control characters
    removed (newlines and tabs kept unless ``keep_newlines`` is False)."""
    return printable(redact(printable(text, keep_newlines=True)), keep_newlines=keep_newlines)


_MARKUP_REDACTED = re.compile(r"(?<!\\)" + re.escape(REDACTED))


class SafeConsole(Console):
    """A rich console that cleans every string before rendering it: control characters and
    escape sequences removed, credentials redacted (:func:`terminal_text`). Markup written
    by infbench (``[bold]``) keeps working; a redaction is shown literally."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """:meth:`rich.console.Console.render_str` of the cleaned text."""
        clean = terminal_text(text)
        markup = kwargs.get("markup")
        if markup or (markup is None and self._markup):
            clean = _MARKUP_REDACTED.sub(lambda m: "\\" + m.group(0), clean)
        return super().render_str(clean, **kwargs)
