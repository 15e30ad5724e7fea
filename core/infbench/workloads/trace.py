"""Request traces replayed at their own timing (``--trace FILE``, load mode ``trace``).

Two public formats are read:

* **Mooncake** (kvcache-ai/Mooncake, ``FAST25-release/traces``), JSON Lines::

      {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

  ``timestamp`` in ms from the trace's start; ``hash_ids`` name the prompt's blocks of
  512 tokens. Requests with equal ``hash_ids`` get identical prompt blocks (each block's
  content is drawn from a seed made of its hash id), so a server's prefix cache sees the
  same reuse as in production.
* **Azure LLM inference trace** (Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_*.csv``)::

      TIMESTAMP,ContextTokens,GeneratedTokens
      2023-11-16 18:15:46.6805900,374,44

  ``TIMESTAMP`` as a date-time (or a number of seconds); prompts are unique per request.

Each replayed request is released at ``t0 + (timestamp - first timestamp) / speed`` and
forces its own output length. The readers hold to :mod:`infbench.data.inputs`: UTF-8, at most
:data:`MAX_TRACE_BYTES`, strict JSON (no ``NaN``), lengths that are real integers, finite
timestamps spanning at most :data:`MAX_SPAN_S`, a line number in every error; a replay
longer than ``--cell-timeout`` is refused when planned (:func:`check_replay`). A replay's
prompts are built when each request is about to be released (:class:`TraceRequest`), so a
long trace never holds every prompt in memory.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from infbench.data.errors import ConfigError
from infbench.data.inputs import (
    MAX_LINE_BYTES,
    check_size,
    check_utf8,
    decode_utf8,
    integer,
    integer_text,
    jsonl,
    number,
    number_text,
    read_text,
    shown,
)
from infbench.workloads.prompt import Prompt, PromptMaker

#: Tokens per ``hash_ids`` block in the Mooncake traces.
MOONCAKE_BLOCK = 512
#: Longest prompt or output accepted from a trace line (tokens); a larger value is a bad line.
MAX_LEN = 10_000_000
#: Largest trace file read (the public Mooncake traces are a few MB, the week-long Azure
#: traces a few hundred).
MAX_TRACE_BYTES = 2 << 30
#: Longest time a trace may span from its first request to its last (s): eight days, above
#: the week-long Azure traces. A timestamp further out (a typo, a unit error, a hostile
#: file) would make a replay wait for it; it is refused with its line.
MAX_SPAN_S = 8 * 86400.0
#: Largest |timestamp| accepted (ms for Mooncake, s for Azure numbers): any real clock.
MAX_TIMESTAMP = 1e13
#: Most block ids on one Mooncake line (a 10M-token prompt has ~20k blocks of 512).
MAX_HASH_IDS = 100_000
_HINT = ("Mooncake JSONL lines {\"timestamp\" (ms), \"input_length\", \"output_length\", \"hash_ids\"}, or an "
         "Azure CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens")


@dataclass(frozen=True)
class TraceRecord:
    """One request of a trace.

    Attributes:
        t_s: release offset from the trace's first request (s, before ``trace_speed``).
        input_len: prompt tokens.
        output_len: tokens to generate (forced).
        hash_ids: Mooncake block ids (empty for Azure: a unique prompt).
        line: 1-based line in the file.
    """

    t_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0


def detect_format(path: str | Path) -> str:
    """``mooncake`` or ``azure`` from the file's first non-empty line.

    Raises:
        ConfigError: missing, unreadable or too large file, or neither format.
    """
    p = check_size(path, "trace file", MAX_TRACE_BYTES, hint="pass a Mooncake .jsonl or an Azure .csv to --trace")
    try:
        with p.open("rb") as f:
            raw = next((line for line in iter(lambda: f.readline(MAX_LINE_BYTES), b"") if line.strip()), b"")
    except OSError as exc:
        raise ConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    first = decode_utf8(raw, str(p), hint="--trace takes a Mooncake JSONL or an Azure CSV file (UTF-8 text)").strip()
    if first.startswith("{"):
        return "mooncake"
    if "TIMESTAMP" in first and "ContextTokens" in first:
        return "azure"
    raise ConfigError(f"{p}: unknown trace format (first line {first[:80]!r})", hint=_HINT)


def _mooncake(p: Path) -> list[TraceRecord]:
    out = []
    check_utf8(p, "trace file", hint="--trace takes a Mooncake JSONL or an Azure CSV file (UTF-8 text)")
    for i, obj in jsonl(p, "trace file", MAX_TRACE_BYTES, hint=_HINT):
        where = f"{p}:{i}"
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(obj).__name__}", hint=_HINT)
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}",
                              hint="Mooncake lines carry timestamp (ms), input_length, output_length, hash_ids")
        t = number(obj["timestamp"], "timestamp (a number of ms)", where, -MAX_TIMESTAMP, MAX_TIMESTAMP) / 1000.0
        hashes = obj.get("hash_ids", [])
        if hashes is None:
            hashes = []
        if not isinstance(hashes, list) or len(hashes) > MAX_HASH_IDS or not all(
                isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**63 for h in hashes):
            raise ConfigError(f"{where}: hash_ids must be a list of at most {MAX_HASH_IDS:,} non-negative integers "
                              f"(got {shown(hashes)})")
        ids = tuple(hashes)
        out.append(TraceRecord(t, integer(obj["input_length"], "input_length", where, 1, MAX_LEN),
                               integer(obj["output_length"], "output_length", where, 1, MAX_LEN), ids, i))
    return out


def _azure_time(value: str, where: str) -> float:
    v = value.strip()
    try:
        return number_text(v, "TIMESTAMP (s)", where, -MAX_TIMESTAMP, MAX_TIMESTAMP)
    except ConfigError:
        if _looks_numeric(v):
            raise
    try:
        stamp = datetime.fromisoformat(v)
    except ValueError:
        raise ConfigError(f"{where}: TIMESTAMP {v[:40]!r} is neither a date-time nor a number of seconds") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)  # the file's clock; only differences matter
    try:
        return stamp.timestamp()
    except (OverflowError, OSError, ValueError):
        raise ConfigError(f"{where}: TIMESTAMP {v[:40]!r} is not a usable date-time") from None


def _looks_numeric(v: str) -> bool:
    return bool(v) and (v[0].isdigit() or v[0] in "+-.") and not any(c in v for c in ":T ")


def _azure(p: Path) -> list[TraceRecord]:
    text = read_text(p, "trace file", MAX_TRACE_BYTES, hint=_HINT)
    out = []
    rows = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(rows, [])]
        need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
        if not set(need) <= set(header):
            raise ConfigError(f"{p}:1: the header must name TIMESTAMP, ContextTokens and GeneratedTokens "
                              f"(got {', '.join(header)[:200]})", hint=_HINT)
        col = {k: header.index(k) for k in need}
        last = rows.line_num
        for row in rows:
            first, last = last + 1, rows.line_num
            if not row or not any(c.strip() for c in row):
                continue
            where = f"{p}:{first}"
            if last > first:
                raise ConfigError(f"{where}: a quoted field runs over lines {first}-{last}; a trace row is one line")
            if len(row) < len(header):
                raise ConfigError(f"{where}: too few columns ({len(row)} for {len(header)})")
            out.append(TraceRecord(_azure_time(row[col["TIMESTAMP"]], where),
                                   integer_text(row[col["ContextTokens"]], "ContextTokens", where, 1, MAX_LEN),
                                   integer_text(row[col["GeneratedTokens"]], "GeneratedTokens", where, 1, MAX_LEN),
                                   (), first))
    except csv.Error as exc:
        raise ConfigError(f"{p}:{rows.line_num}: not a CSV row ({exc})", hint=_HINT) from None
    return out


def read_trace(path: str | Path, fmt: str | None = None) -> list[TraceRecord]:
    """Every request of a trace, in time order, with ``t_s`` from the first request.

    Args:
        path: the file.
        fmt: ``mooncake``, ``azure``, or None to detect.

    Raises:
        ConfigError: unreadable, too large or not UTF-8 file, unknown format, a bad line
            (named by its number: a length that is not an integer in 1..:data:`MAX_LEN`,
            ``true``, ``NaN``, a timestamp that is not a finite number), or a request more
            than :data:`MAX_SPAN_S` after the first (a replay would wait for it).
    """
    p = Path(path)
    fmt = fmt or detect_format(p)
    try:
        recs = _mooncake(p) if fmt == "mooncake" else _azure(p)
    except OSError as exc:
        raise ConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    if not recs:
        raise ConfigError(f"{p}: the trace holds no requests")
    recs.sort(key=lambda r: (r.t_s, r.line))
    t0 = recs[0].t_s
    far = recs[-1]
    if far.t_s - t0 > MAX_SPAN_S:
        raise ConfigError(f"{p}:{far.line}: this request comes {(far.t_s - t0) / 86400:,.1f} days after the first "
                          f"(line {recs[0].line}); a replay would wait for it. A trace may span at most "
                          f"{MAX_SPAN_S / 86400:g} days",
                          hint="check the timestamps' unit (Mooncake: ms from the start; Azure: date-times or s), "
                               "or cut the trace")
    return [TraceRecord(r.t_s - t0, r.input_len, r.output_len, r.hash_ids, r.line) for r in recs]


def check_replay(records: list[TraceRecord], speed: float = 1.0, cell_timeout_s: float | None = None,
                 path: str | Path = "--trace") -> float:
    """The replay's length in s (the last selected request's release over ``speed``), checked
    against ``--cell-timeout``.

    Raises:
        ConfigError: the cell would time out before its last request is even sent (the
            requests after the timeout would be silently dropped).
    """
    span = (records[-1].t_s / speed) if records else 0.0
    if cell_timeout_s is not None and span >= cell_timeout_s:
        late = sum(1 for r in records if r.t_s / speed >= cell_timeout_s)
        raise ConfigError(f"{path}: the replay releases its last request {span:,.1f} s in (at --trace-speed "
                          f"{speed:g}), after --cell-timeout {cell_timeout_s:g} s: {late} of its {len(records)} "
                          "requests would never be sent",
                          hint="raise --cell-timeout above the replay, or cut the trace with --duration or "
                               "--num-requests, or speed it up with --trace-speed")
    return span


def select(records: list[TraceRecord], n: int | None = None, duration_s: float | None = None,
           speed: float = 1.0) -> list[TraceRecord]:
    """The records a replay sends: the first ``n`` (all if None) that fall within
    ``duration_s`` of replayed time (after dividing by ``speed``)."""
    out = records if n is None else records[:n]
    if duration_s is not None:
        out = [r for r in out if r.t_s / speed < duration_s]
    return out


@dataclass(frozen=True)
class TraceRequest:
    """A trace record whose prompt is built on demand (:meth:`materialize`)."""

    record: TraceRecord
    maker: PromptMaker
    seed: int = 0
    block_tokens: int = MOONCAKE_BLOCK

    def materialize(self) -> Prompt:
        """The prompt: one block per hash id (the same block for the same id), then a unique
        tail if the hash ids cover fewer tokens than ``input_len``, cut to ``input_len``."""
        r = self.record
        units: list[int] = []
        for h in r.hash_ids:
            if len(units) >= r.input_len:
                break
            units += self.maker.block(self.block_tokens, [self.seed, 31, self.block_tokens, h])
        if len(units) < r.input_len:
            units += self.maker.block(r.input_len - len(units), [self.seed, 37, r.line])
        return self.maker.make(units, r.input_len, [self.seed, r.line], output_len=r.output_len)
