"""The one input boundary: what every file infbench reads and every command flag it takes
hold to (issue 22), so each reader and command says the same things the same way.

**Files** (sweep files, traces, conversation datasets, imported CSVs, device files, the
site config, worker output):

* read with a size bound (:func:`read_bytes`), as UTF-8 (:func:`read_text`: a bad byte is
  named with its line and column);
* JSON strictly (:func:`strict_json`, :func:`jsonl`): no ``NaN``/``Infinity`` (Python's
  parser takes them; JSON does not), no duplicate keys, nesting at most :data:`MAX_DEPTH`;
  YAML with :class:`StrictYamlLoader` (safe, no duplicate keys, bounded depth and alias
  expansion);
* fields checked by kind: :func:`integer` (a real integer: ``true``, ``4.0`` and ``"4"``
  are not), :func:`number` (finite, within a physical range), their text forms for CSV
  cells (:func:`integer_text`, :func:`number_text`), and :func:`finite_tree` for free-form
  trees (a TOML ``nan``);
* every error a :class:`~infbench.data.errors.ConfigError` (exit 2) naming the file and line.

**Flags**: each command's options are one pydantic model (:class:`ResultsFlags`,
:class:`ExportFlags`, :class:`ReportFlags`, :class:`CompareFlags`, :class:`ImportFlags`,
:class:`PerplexityFlags`, :class:`QuantizeFlags`; ``run`` has
:class:`infbench.data.run_config.RunConfig` (its flags generated from it), ``predict``
:class:`infbench.analysis.predict_inputs.PredictFlags`) built from the bounded types below
and checked by :func:`checked` before anything is read, stored or started.
"""

from __future__ import annotations

import codecs
import json
import math
import re
import reprlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infbench.data.errors import ConfigError

#: Deepest nesting of lists and mappings in any file infbench reads (a sweep needs 3, a
#: trace line 2).
MAX_DEPTH = 32
#: Most values a YAML file may expand to once aliases are followed ("billion laughs").
MAX_NODES = 100_000
#: Longest line of a JSON Lines file (a conversation or a trace request).
MAX_LINE_BYTES = 16 << 20

_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxdict, _short.maxlevel = 40, 40, 4, 4, 2


def shown(value: Any) -> str:
    """A short ``repr`` of a value for an error message (at most ~40 characters)."""
    return _short.repr(value)


# -- reading a file ------------------------------------------------------------------------
def read_bytes(path: str | Path, what: str, max_bytes: int, hint: str | None = None) -> bytes:
    """The bytes of ``path``, at most ``max_bytes`` of them.

    Args:
        path: the file.
        what: what the file is, for messages (``trace``, ``device file``).
        max_bytes: the largest file accepted.
        hint: what to pass instead, for the error's hint.

    Raises:
        ConfigError: missing, a folder or not a regular file, unreadable, or larger than
            ``max_bytes``.
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{what} {p} not found", hint=hint)
    if not p.is_file():
        raise ConfigError(f"{what} {p} is not a file", hint=hint)
    try:
        with open(p, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {p}: {exc.strerror or exc}", hint=hint) from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{what} {p} is larger than {_size(max_bytes)}", hint=hint)
    return raw


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def line_col(raw: bytes | str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``raw``."""
    nl = b"\n" if isinstance(raw, bytes) else "\n"
    head = raw[:offset]
    line = head.count(nl) + 1  # type: ignore[arg-type]
    return line, offset - (head.rfind(nl) + 1) + 1  # type: ignore[arg-type]


def decode_utf8(raw: bytes, where: str, hint: str | None = None) -> str:
    """``raw`` as UTF-8 text (a leading BOM dropped).

    Raises:
        ConfigError: not UTF-8, naming the byte, its line and column.
    """
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line, col = line_col(raw, exc.start)
        raise ConfigError(f"{where}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {col})",
                          hint=hint or "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def read_text(path: str | Path, what: str, max_bytes: int, hint: str | None = None) -> str:
    """:func:`read_bytes` decoded by :func:`decode_utf8`.

    Raises:
        ConfigError: see both.
    """
    return decode_utf8(read_bytes(path, what, max_bytes, hint), str(path), hint)


# -- JSON ------------------------------------------------------------------------------------
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (write a finite number or null)")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {shown(k)} (the first value would be silently replaced)")
        out[k] = v
    return out


def depth(obj: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists and mappings in ``obj`` (a scalar is 0), counted up to
    ``limit + 1``."""
    if isinstance(obj, dict):
        items: list[Any] = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    else:
        return 0
    if limit < 0:
        return 1
    return 1 + max((depth(x, limit - 1) for x in items), default=0)


def strict_json(text: str, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` parsed as JSON, strictly.

    Raises:
        ConfigError: invalid JSON, ``NaN``/``Infinity``, a duplicate key, or nesting deeper
            than ``max_depth`` (``where: ...``).
    """
    try:
        obj = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_pairs)
    except RecursionError:
        raise ConfigError(f"{where}: nesting deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON ({str(exc)[:200]})") from None
    if depth(obj, max_depth) > max_depth:
        raise ConfigError(f"{where}: nesting deeper than {max_depth} levels")
    return obj


def check_size(path: str | Path, what: str, max_bytes: int, hint: str | None = None) -> Path:
    """``path`` if it is a regular file of at most ``max_bytes`` (for readers that stream).

    Raises:
        ConfigError: missing, not a file, unreadable or too large.
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{what} {p} not found", hint=hint)
    if not p.is_file():
        raise ConfigError(f"{what} {p} is not a file", hint=hint)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {p}: {exc.strerror or exc}", hint=hint) from None
    if size > max_bytes:
        raise ConfigError(f"{what} {p} is larger than {_size(max_bytes)}", hint=hint)
    return p


def check_utf8(path: str | Path, what: str, hint: str | None = None) -> None:
    """Read ``path`` through once and check that it is UTF-8 throughout (for readers that
    stream it afterwards).

    Raises:
        ConfigError: ``FILE:LINE: not UTF-8 text (byte 0x.. at column C)``.
    """
    dec = codecs.getincrementaldecoder("utf-8")()
    line, tail = 1, b""
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                try:
                    dec.decode(chunk)
                except UnicodeDecodeError as exc:
                    buf = tail + chunk
                    bad = len(tail) + exc.start
                    ln, col = line_col(buf, bad)
                    raise ConfigError(f"{path}:{line + ln - 1}: not UTF-8 text (byte 0x{buf[bad]:02x} at column "
                                      f"{col})", hint=hint or "convert it to UTF-8 (e.g. iconv -t UTF-8)") from None
                line += chunk.count(b"\n")
                tail = chunk[chunk.rfind(b"\n") + 1:] if b"\n" in chunk else tail + chunk
            dec.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}:{line}: not UTF-8 text (the file ends inside a character)", hint=hint) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}", hint=hint) from None


def jsonl(path: str | Path, what: str, max_bytes: int, hint: str | None = None) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSON Lines file (read line
    by line), each parsed by :func:`strict_json`.

    Raises:
        ConfigError: see :func:`check_size`; a line that is not UTF-8, not strict JSON,
            nested too deep, or longer than :data:`MAX_LINE_BYTES` (``FILE:LINE: ...``).
    """
    p = check_size(path, what, max_bytes, hint)
    try:
        f = open(p, "rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {p}: {exc.strerror or exc}", hint=hint) from None
    with f:
        for i, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if not line.strip():
                continue
            where = f"{p}:{i}"
            if len(line) > MAX_LINE_BYTES:
                raise ConfigError(f"{where}: a line longer than {_size(MAX_LINE_BYTES)}", hint=hint)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{where}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                                  f"{exc.start + 1})", hint="convert it to UTF-8 (e.g. iconv -t UTF-8)") from None
            if i == 1:
                text = text.removeprefix("\ufeff")
            yield i, strict_json(text, where)


# -- fields -----------------------------------------------------------------------------------
def integer(value: Any, what: str, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an integer: a real integer (not ``true``, not ``4.0``, not ``"4"``)
    within ``lo..hi``.

    Raises:
        ConfigError: ``where: what must be an integer...``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {what} must be an integer, got {shown(value)}")
    _bounds(value, what, where, lo, hi)
    return value


def number(value: Any, what: str, where: str, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False) -> float:
    """``value`` as a finite number (an integer or a float, not a bool or text) within
    ``lo..hi`` (``lo`` excluded when ``lo_open``).

    Raises:
        ConfigError: ``where: what must be a finite number...``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: {what} must be a finite number, got {shown(value)}")
    _bounds(value, what, where, lo, hi, lo_open)
    return float(value)


def _bounds(v: float, what: str, where: str, lo: float | None, hi: float | None, lo_open: bool = False) -> None:
    low = lo is not None and (v <= lo if lo_open else v < lo)
    if low or (hi is not None and v > hi):
        if lo is not None and hi is not None:
            span = f"({lo:g}, {hi:,g}]" if lo_open else f"{lo:g}..{hi:,g}"
            raise ConfigError(f"{where}: {what} {v:g} is outside {span}")
        if low:
            raise ConfigError(f"{where}: {what} {v:g} must be {'greater than' if lo_open else 'at least'} {lo:g}")
        raise ConfigError(f"{where}: {what} {v:g} is more than {hi:,g}; no hardware or workload has that")


_INT_TEXT = re.compile(r"\s*\+?(\d{1,30})(\.0*)?\s*")
_NUM_TEXT = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,4})?\s*")


def integer_text(text: Any, what: str, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """A CSV cell as an integer: digits (``16``, also ``16.0``), within ``lo..hi``.

    Raises:
        ConfigError: anything else (``1e300``, ``nan``, ``-3``, ``4.5``, ``true``).
    """
    m = _INT_TEXT.fullmatch(str(text)) if isinstance(text, str) else None
    if m is None:
        numeric = isinstance(text, str) and _NUM_TEXT.fullmatch(text) is not None
        raise ConfigError(f"{where}: {what} is {shown(text)}, not a {'whole ' if numeric else ''}number")
    n = int(m.group(1))
    _bounds(n, what, where, lo, hi)
    return n


def number_text(text: Any, what: str, where: str, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False) -> float:
    """A CSV cell as a finite number (decimal or scientific notation) within ``lo..hi``.

    Raises:
        ConfigError: anything else (``nan``, ``inf``, ``1e999``, ``12 ms``).
    """
    if not isinstance(text, str) or _NUM_TEXT.fullmatch(text) is None:
        raise ConfigError(f"{where}: {what} is {shown(text)}, not a number")
    v = float(text)
    if not math.isfinite(v):
        raise ConfigError(f"{where}: {what} is {shown(text)}, not a finite number")
    _bounds(v, what, where, lo, hi, lo_open)
    return v


def finite_tree(obj: Any, where: str, path: str = "") -> None:
    """Check that every number in a parsed tree (TOML, YAML, JSON) is finite.

    Raises:
        ConfigError: ``where: KEY.PATH is nan``.
    """
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ConfigError(f"{where}: {path or 'a value'} is {obj}; numbers must be finite")
    if isinstance(obj, dict):
        for k, v in obj.items():
            finite_tree(v, where, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            finite_tree(v, where, f"{path}[{i}]")


def key_line(text: str, key: str) -> int | None:
    """The 1-based line where ``key`` is assigned in TOML/YAML text (``key =`` or ``key:``),
    or None; for messages about a value the parser does not place."""
    m = re.search(r"(?m)^[ \t]*[\"']?" + re.escape(key) + r"[\"']?\s*[=:]", text)
    return text.count("\n", 0, m.start()) + 1 if m else None


# -- YAML ---------------------------------------------------------------------------------------
class StrictYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what a hand-written file never needs and a hostile one
    uses: duplicate keys (the last would silently win), nesting deeper than
    :data:`MAX_DEPTH` (a recursion error), and aliases expanding to more than
    :data:`MAX_NODES` values (a "billion laughs" bomb)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nesting deeper than {MAX_DEPTH} levels"
                                     f" at line {self.peek_event().start_mark.line + 1}")  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            sizes: dict[int, int] = {}

            def size(n: Any) -> int:
                if id(n) in sizes:
                    return sizes[id(n)]
                total = 1
                if isinstance(n, yaml.SequenceNode):
                    total += sum(size(c) for c in n.value)
                elif isinstance(n, yaml.MappingNode):
                    total += sum(size(k) + size(v) for k, v in n.value)
                sizes[id(n)] = min(total, MAX_NODES + 1)
                return sizes[id(n)]

            if size(node) > MAX_NODES:
                raise yaml.YAMLError(f"it expands to more than {MAX_NODES:,} values through aliases "
                                     "(a YAML alias bomb?); write the values out")
        return node

    #: Scalars that only YAML 1.1 reads as numbers or booleans (issue 41: ``010`` was 8 and
    #: ``1:30`` was 90): refused, so a value has one reading (YAML 1.2 and JSON agree).
    _YAML11_INT = re.compile(r"[-+]?(0[0-7_]+|0b[01_]+|[0-9][0-9_]*(:[0-5]?[0-9])+|[0-9]+_[0-9_]*)")
    _YAML11_BOOL = frozenset({"yes", "no", "on", "off", "y", "n"})

    def construct_yaml_int(self, node: Any) -> Any:
        """An integer as YAML 1.2 reads it; an octal (``010``), binary, sexagesimal
        (``1:30``) or underscored form is refused with its line."""
        text = str(node.value)
        if self._YAML11_INT.fullmatch(text):
            raise yaml.constructor.ConstructorError(
                None, None, f"{text!r} has a YAML 1.1 reading as a number ({super().construct_yaml_int(node)}) that "
                "is not what it says; write the number plainly (10, 90) or quote the text", node.start_mark)
        return super().construct_yaml_int(node)

    def construct_yaml_bool(self, node: Any) -> Any:
        """``true``/``false``; YAML 1.1's ``yes``/``no``/``on``/``off`` are refused with their line."""
        text = str(node.value)
        if text.lower() in self._YAML11_BOOL:
            raise yaml.constructor.ConstructorError(
                None, None, f"{text!r} is a boolean only in YAML 1.1; write true or false (or quote the text)",
                node.start_mark)
        return super().construct_yaml_bool(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                except TypeError:
                    raise yaml.constructor.ConstructorError(None, None, "a mapping key that is a list or mapping",
                                                            key_node.start_mark) from None
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {shown(key)} (the first value would be silently "
                        "replaced)", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def strict_yaml(text: str, where: str, hint: str | None = None) -> Any:
    """``text`` parsed with :class:`StrictYamlLoader`.

    Raises:
        ConfigError: ``where is not valid YAML at line L, column C: ...``.
    """
    try:
        return yaml.load(text, Loader=StrictYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc) if isinstance(exc, yaml.YAMLError) else
                                                    "nested too deeply")
        raise ConfigError(f"{where} is not valid YAML{at}: {str(problem)[:300]}", hint=hint) from None


def strict_yaml_nodes(text: str, where: str, hint: str | None = None) -> tuple[Any, Any]:
    """``(value, node)``: :func:`strict_yaml` plus the composed node tree, whose
    ``start_mark.line`` places each entry for messages (``node.value[i]`` of a list).

    Raises:
        ConfigError: see :func:`strict_yaml`.
    """
    loader = None
    try:
        loader = StrictYamlLoader(text)  # its reader refuses control characters here
        node = loader.get_single_node()
        value = loader.construct_document(node) if node is not None else None
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc) if isinstance(exc, yaml.YAMLError) else
                                                    "nested too deeply")
        raise ConfigError(f"{where} is not valid YAML{at}: {str(problem)[:300]}", hint=hint) from None
    finally:
        if loader is not None:
            loader.dispose()
    return value, node


def node_line(node: Any, key: str | None = None) -> int:
    """1-based line of a YAML node, or of ``key`` inside a mapping node (the node's own line
    when the key is absent)."""
    if key is not None and isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if getattr(k, "value", None) == key:
                return int(k.start_mark.line) + 1
    return int(node.start_mark.line) + 1 if node is not None else 1


# -- command flags --------------------------------------------------------------------------------
#: Bounded flag types, shared by every command's flag model.
Seconds = Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)]
Threads = Annotated[int, Field(ge=1, le=4096)]
Tokens = Annotated[int, Field(ge=1, le=10_000_000)]
Text = Annotated[str, Field(max_length=300)]


class Flags(BaseModel):
    """Base of a command's flag model: unknown fields refused, values frozen; ``FLAGS`` maps
    a field to its flag where it is not ``--`` + the field with dashes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    FLAGS: ClassVar[dict[str, str]] = {"fmt": "--format", "as_json": "--json", "run_id": "--run",
                                       "store_path": "--store"}
    COMMAND: ClassVar[str] = ""

    @classmethod
    def flag_of(cls, field: str) -> str:
        """The command-line flag of ``field``."""
        return cls.FLAGS.get(field, "--" + field.rstrip("_").replace("_", "-"))


def checked(model: type[Flags], **values: Any) -> Any:
    """``model(**values)``, or the first problem as a :class:`ConfigError` naming its flag,
    what it got and what it takes.

    Raises:
        ConfigError: an invalid value (exit 2).
    """
    try:
        return model(**values)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        flag = model.flag_of(field) if field else ""
        msg = str(e["msg"]).removeprefix("Value error, ")
        got = shown(e.get("input"))
        text = f"{flag}: {msg[:1].lower() + msg[1:]} (got {got})" if flag else msg
        raise ConfigError(text, hint=f"see `infbench {model.COMMAND} --help` for {flag}" if flag else None) from None


class ResultsFlags(Flags):
    """``infbench results``."""

    COMMAND: ClassVar[str] = "results"
    fmt: Literal["table", "json", "csv"] = "table"
    status: Literal["ok", "failed", "predicted"] | None = None
    max_ttft: Seconds | None = None
    max_tpot: Seconds | None = None
    max_e2e: Seconds | None = None
    percentile: Literal["mean", "p50", "p90", "p99", "max"] = "p99"


class ExportFlags(Flags):
    """``infbench export``."""

    COMMAND: ClassVar[str] = "export"
    fmt: Literal["lib-csv", "csv", "json", "inferencex", "vllm-bench"] = "lib-csv"


class ReportFlags(Flags):
    """``infbench report``."""

    COMMAND: ClassVar[str] = "report"
    slo_ttft: Seconds | None = None
    slo_tpot: Seconds | None = None
    title: Text = "infbench report"


class CompareFlags(Flags):
    """``infbench compare``."""

    COMMAND: ClassVar[str] = "compare"
    run_a: Text | None = None
    run_b: Text | None = None
    dtypes: Text | None = None
    against: Annotated[str, Field(max_length=300, pattern=r"^imported:[^:]+(:[^:]*){0,2}$")] | None = None


class ImportFlags(Flags):
    """``infbench import``: the layout, and the source's name, URL and version (stored in
    the run's provenance: the URL's credentials are redacted there)."""

    COMMAND: ClassVar[str] = "import"
    fmt: Literal["lib-csv", "vllm-bench", "aiperf", "guidellm", "inference-perf", "inferencex", "mlperf"] = "lib-csv"
    device: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    devices: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    engine: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")] | None = None
    model_name: Annotated[str, Field(min_length=1, max_length=300)] | None = None
    FLAGS: ClassVar[dict[str, str]] = {**Flags.FLAGS, "model_name": "--model"}
    source: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    url: Annotated[str, Field(max_length=2000, pattern=r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")] | None = None
    commit: Annotated[str, Field(max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/+-]*$")] | None = None


class PerplexityFlags(Flags):
    """``infbench perplexity`` (the same bounds as ``run --perplexity``)."""

    COMMAND: ClassVar[str] = "perplexity"
    n_ctx: Annotated[int, Field(ge=4, le=1 << 20)] = 512
    chunks: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    threads: Threads | None = None


class QuantizeFlags(Flags):
    """``infbench quantize``."""

    COMMAND: ClassVar[str] = "quantize"
    threads: Threads | None = None


StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", StrictYamlLoader.construct_yaml_int)
StrictYamlLoader.add_constructor("tag:yaml.org,2002:bool", StrictYamlLoader.construct_yaml_bool)
