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
forces its own output length. A replay's prompts are built when each request is about to
be released (:class:`TraceRequest`), so a long trace never holds every prompt in memory.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from infbench.errors import ConfigError
from infbench.workloads.prompt import Prompt, PromptMaker

#: Tokens per ``hash_ids`` block in the Mooncake traces.
MOONCAKE_BLOCK = 512
#: Longest prompt or output accepted from a trace line (tokens); a larger value is a bad line.
MAX_LEN = 10_000_000


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
        ConfigError: missing or unreadable file, or neither format.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"trace file {p} not found", hint="pass a Mooncake .jsonl or an Azure .csv to --trace")
    try:
        with p.open(encoding="utf-8") as f:
            first = next((line.strip() for line in f if line.strip()), "")
    except UnicodeDecodeError:
        raise ConfigError(f"{p} is not UTF-8 text", hint="--trace takes a Mooncake JSONL or an Azure CSV file") \
            from None
    if first.startswith("{"):
        return "mooncake"
    if "TIMESTAMP" in first and "ContextTokens" in first:
        return "azure"
    raise ConfigError(f"{p}: unknown trace format (first line {first[:80]!r})",
                      hint="Mooncake JSONL lines {\"timestamp\", \"input_length\", \"output_length\", \"hash_ids\"}, "
                           "or an Azure CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens")


def _length(value: Any, what: str, where: str, minimum: int) -> int:
    try:
        n = int(value)
        if n != float(value):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {what} must be an integer, got {str(value)[:40]!r}") from None
    if not minimum <= n <= MAX_LEN:
        raise ConfigError(f"{where}: {what} {n} is outside {minimum}..{MAX_LEN}")
    return n


def _mooncake(p: Path) -> list[TraceRecord]:
    out = []
    with p.open(encoding="utf-8") as f:
        for i, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{p}:{i}"
            try:
                obj = json.loads(raw)
            except ValueError as exc:
                raise ConfigError(f"{where}: not valid JSON ({exc})", hint="one JSON object per line") from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
            if missing:
                raise ConfigError(f"{where}: missing {', '.join(missing)}",
                                  hint="Mooncake lines carry timestamp (ms), input_length, output_length, hash_ids")
            try:
                t = float(obj["timestamp"]) / 1000.0
            except (TypeError, ValueError):
                raise ConfigError(f"{where}: timestamp must be a number of ms, got {obj['timestamp']!r}") from None
            hashes = obj.get("hash_ids") or []
            if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                                       for h in hashes):
                raise ConfigError(f"{where}: hash_ids must be a list of non-negative integers")
            out.append(TraceRecord(t, _length(obj["input_length"], "input_length", where, 1),
                                   _length(obj["output_length"], "output_length", where, 1), tuple(hashes), i))
    return out


def _azure_time(value: str, where: str) -> float:
    v = value.strip()
    try:
        return float(v)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(v).timestamp()
    except ValueError:
        raise ConfigError(f"{where}: TIMESTAMP {v[:40]!r} is neither a date-time nor a number of seconds") from None


def _azure(p: Path) -> list[TraceRecord]:
    out = []
    with p.open(encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f)
        need = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
        if not need <= set(rows.fieldnames or []):
            raise ConfigError(f"{p}: the header must name TIMESTAMP, ContextTokens and GeneratedTokens "
                              f"(got {', '.join(rows.fieldnames or [])})")
        for row in rows:
            where = f"{p}:{rows.line_num}"
            if None in row.values():
                raise ConfigError(f"{where}: too few columns")
            out.append(TraceRecord(_azure_time(row["TIMESTAMP"], where),
                                   _length(row["ContextTokens"], "ContextTokens", where, 1),
                                   _length(row["GeneratedTokens"], "GeneratedTokens", where, 1), (), rows.line_num))
    return out


def read_trace(path: str | Path, fmt: str | None = None) -> list[TraceRecord]:
    """Every request of a trace, in time order, with ``t_s`` from the first request.

    Args:
        path: the file.
        fmt: ``mooncake``, ``azure``, or None to detect.

    Raises:
        ConfigError: unreadable file, unknown format, or a bad line (named by its number).
    """
    p = Path(path)
    fmt = fmt or detect_format(p)
    try:
        recs = _mooncake(p) if fmt == "mooncake" else _azure(p)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    if not recs:
        raise ConfigError(f"{p}: the trace holds no requests")
    recs.sort(key=lambda r: (r.t_s, r.line))
    t0 = recs[0].t_s
    return [TraceRecord(r.t_s - t0, r.input_len, r.output_len, r.hash_ids, r.line) for r in recs]


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
        r, units = self.record, []
        for h in r.hash_ids:
            if len(units) >= r.input_len:
                break
            units += self.maker.block(self.block_tokens, [self.seed, 31, self.block_tokens, h])
        if len(units) < r.input_len:
            units += self.maker.block(r.input_len - len(units), [self.seed, 37, r.line])
        return self.maker.make(units, r.input_len, [self.seed, r.line], output_len=r.output_len)
