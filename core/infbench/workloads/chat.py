"""Chat conversations from a JSONL file, replayed with forced output lengths.

Each line is one conversation in any of the common formats:

* OpenAI messages: ``{"messages": [{"role": "user", "content": "..."}, ...]}``;
* LMSYS-Chat-1M: ``{"conversation": [{"role": ..., "content": ...}, ...]}``;
* ShareGPT: ``{"conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}``.

Following the "Beyond Throughput" study (and vLLM's ShareGPT sampler), a request is the
conversation up to its **final assistant turn**, which is dropped; the request's output
length is forced to that turn's token count. Earlier turns stay as context. Requests are
filtered by prompt and output length and sampled with a seeded ``random.Random``, so the
same file, filters and seed give the same requests at every site.

Multi-turn replay (``--multi-turn``, :func:`chat_sessions`): a conversation becomes a
session of turns, each a user message and the forced length of the assistant's answer
that followed it in the file; the client sends turn k+1 after the server answered turn k,
with the server's *own* answer in the history.

Token counts for the filter use ``--tokenizer`` if given, else the model's own tokenizer
when the model is a local Hugging Face folder, else one token per whitespace-separated
word (exact for infbench's dummy tokenizer, :mod:`infbench.engines.hf_dummy`). The prompt
length the server really saw is taken from its ``usage`` and stored with each request.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from infbench.data.errors import ConfigError
from infbench.data.inputs import check_size, jsonl
from infbench.workloads.tokenizer import tokenizer_text

#: Largest conversation file read (ShareGPT's JSON is ~0.7 GB; LMSYS-Chat-1M ~2.4 GB as JSONL).
MAX_DATASET_BYTES = 8 << 30

#: Speaker names of the formats above -> OpenAI roles.
ROLES = {"user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant", "chatgpt": "assistant",
         "bard": "assistant", "bing": "assistant", "model": "assistant", "system": "system"}


@dataclass(frozen=True)
class ChatRequest:
    """One replayed request.

    Attributes:
        messages: the OpenAI messages sent (the conversation before its last assistant turn).
        input_len: prompt tokens by the filter's count (message contents, no template).
        output_len: tokens to generate (forced): the dropped assistant turn's count.
        line: 1-based line of the conversation in the file.
    """

    messages: tuple[dict[str, str], ...]
    input_len: int
    output_len: int
    line: int


def _messages(obj: Any, line: int, path: Path) -> list[dict[str, str]]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}:{line}: expected a JSON object per line, got {type(obj).__name__}")
    key = next((k for k in ("messages", "conversation", "conversations") if k in obj), None)
    turns = obj[key] if key else None
    if not isinstance(turns, list):
        raise ConfigError(f"{path}:{line}: no 'messages', 'conversation' or 'conversations' list",
                          hint="each line must be an OpenAI-style {\"messages\": [{\"role\":..., \"content\":...}]}, "
                               "an LMSYS 'conversation' or a ShareGPT 'conversations' object")
    out = []
    for t in turns:
        if not isinstance(t, dict):
            raise ConfigError(f"{path}:{line}: a turn is not an object: {str(t)[:80]}")
        speaker = str(t.get("role", t.get("from", ""))).lower()
        role = ROLES.get(speaker)
        if role is None:
            raise ConfigError(f"{path}:{line}: unknown speaker {speaker[:40]!r}",
                              hint=f"known speakers: {', '.join(sorted(ROLES))}")
        content = t.get("content", t.get("value"))
        if not isinstance(content, str):
            raise ConfigError(f"{path}:{line}: a {role} turn has no text content (multimodal turns are not "
                              "supported)")
        out.append({"role": role, "content": content})
    return out


def read_conversations(path: str | Path) -> list[tuple[int, list[dict[str, str]]]]:
    """``(line number, messages)`` for every non-empty line of a JSONL file, read as
    :mod:`infbench.data.inputs` reads every file: at most :data:`MAX_DATASET_BYTES`, UTF-8,
    strict JSON (no ``NaN``, no duplicate keys, nesting at most 32 deep).

    Raises:
        ConfigError: the file is missing or too large, a line is not UTF-8 or not strict
            JSON, or a turn is malformed (the message names the line).
    """
    p = Path(path)
    out = []
    for i, obj in jsonl(p, "conversation file", MAX_DATASET_BYTES,
                        hint="pass a JSONL file of conversations to --dataset (one JSON object per line)"):
        out.append((i, _messages(obj, i, p)))
    return out


def file_digest(path: str | Path) -> str:
    """First 16 hex digits of the file's SHA-256 (part of a dataset cell's identity).

    Raises:
        ConfigError: not a regular file, or larger than :data:`MAX_DATASET_BYTES`.
    """
    p = check_size(path, "input file", MAX_DATASET_BYTES)  # a regular file: a FIFO would block
    with open(p, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:16]


def word_count(text: str) -> int:
    """Whitespace-separated words: the token count of infbench's dummy tokenizer."""
    return len(text.split())


@lru_cache(maxsize=8)
def _hf_counter(folder: str) -> Callable[[str], int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    return lambda text: len(tok.encode(text, add_special_tokens=False))


def token_counter(model: Any, tokenizer: str | None = None) -> tuple[Callable[[str], int], str]:
    """``(count(text) -> tokens, description)``: ``tokenizer`` (``--tokenizer``) if given,
    else ``model``'s (a ModelShape) if it is a local HF folder with one, else :func:`word_count`.

    Raises:
        ConfigError: ``tokenizer`` cannot be loaded.
    """
    if tokenizer:
        return tokenizer_text(tokenizer).count, f"tokenizer {tokenizer}"
    path = getattr(model, "path", None)
    if path and Path(path).is_dir() and any((Path(path) / f).exists()
                                            for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return _hf_counter(str(path)), f"tokenizer of {path}"
    return word_count, "words (dummy tokenizer)"


def chat_requests(path: str | Path, count: Callable[[str], int], n: int, seed: int = 0, min_input_len: int = 4,
                  max_input_len: int = 1024, min_output_len: int = 4, max_output_len: int = 1024,
                  ) -> list[ChatRequest]:
    """``n`` requests sampled (seeded, without replacement) from the conversations in ``path``.

    Args:
        path: JSONL file (formats in the module docstring).
        count: tokens in a text (:func:`token_counter`).
        n: requests wanted.
        seed: sampling seed.
        min_input_len, max_input_len: keep prompts within these token counts (inclusive).
        min_output_len, max_output_len: keep final assistant turns within these counts.

    Returns:
        ``n`` :class:`ChatRequest`, in sampled order.

    Raises:
        ConfigError: bad file (see :func:`read_conversations`), or fewer than ``n``
            conversations pass the filter (the message gives how many did).
    """
    eligible = []
    convs = read_conversations(path)
    for line, msgs in convs:
        last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=None)
        if last is None or last == 0 or msgs[last - 1]["role"] == "assistant":
            continue
        prompt = msgs[:last]
        n_in = sum(count(m["content"]) for m in prompt)
        n_out = count(msgs[last]["content"])
        if min_input_len <= n_in <= max_input_len and min_output_len <= n_out <= max_output_len:
            eligible.append(ChatRequest(tuple(prompt), n_in, n_out, line))
    if len(eligible) < n:
        raise ConfigError(f"{path}: {len(eligible)} of {len(convs)} conversations pass the length filter "
                          f"(prompt {min_input_len}-{max_input_len}, output {min_output_len}-{max_output_len} "
                          f"tokens), {n} wanted",
                          hint="lower --num-requests or widen --max-input-len/--max-output-len")
    return random.Random(seed).sample(eligible, n)


@dataclass(frozen=True)
class ChatSession:
    """One conversation replayed turn by turn (multi-turn mode).

    Attributes:
        context: messages before the first user turn (system prompts), sent with every turn.
        turns: ``(user message, forced answer length in tokens)`` per turn, in order.
        input_len: the first turn's prompt tokens by the filter's count.
        line: 1-based line of the conversation in the file.
    """

    context: tuple[dict[str, str], ...]
    turns: tuple[tuple[str, int], ...]
    input_len: int
    line: int

    @property
    def output_len(self) -> int:
        """The first turn's forced answer length."""
        return self.turns[0][1]


def session_of(msgs: list[dict[str, str]], count: Callable[[str], int], line: int, min_output_len: int = 1,
               max_output_len: int = 10**9) -> ChatSession | None:
    """A :class:`ChatSession` from a conversation: leading system messages as context, then
    one turn per user message (consecutive user messages joined by a newline) answered by
    an assistant message. The session ends before the first answer outside
    ``min_output_len..max_output_len`` tokens; None if no turn is left."""
    context = []
    i = 0
    while i < len(msgs) and msgs[i]["role"] == "system":
        context.append(msgs[i])
        i += 1
    turns: list[tuple[str, int]] = []
    user: list[str] = []
    for m in msgs[i:]:
        if m["role"] == "user":
            user.append(m["content"])
        elif m["role"] == "assistant" and user:
            n = count(m["content"])
            if not min_output_len <= n <= max_output_len:
                break
            turns.append(("\n".join(user), n))
            user = []
    if not turns:
        return None
    n_in = sum(count(m["content"]) for m in context) + count(turns[0][0])
    return ChatSession(tuple(context), tuple(turns), n_in, line)


def chat_sessions(path: str | Path, count: Callable[[str], int], n: int, seed: int = 0, min_input_len: int = 4,
                  max_input_len: int = 1024, min_output_len: int = 4, max_output_len: int = 1024,
                  ) -> list[ChatSession]:
    """``n`` sessions sampled (seeded, without replacement) from the conversations in
    ``path`` (:func:`session_of`), keeping those whose first prompt has
    ``min_input_len..max_input_len`` tokens.

    Raises:
        ConfigError: bad file, or fewer than ``n`` conversations give a session.
    """
    convs = read_conversations(path)
    eligible = []
    for line, msgs in convs:
        s = session_of(msgs, count, line, min_output_len, max_output_len)
        if s is not None and min_input_len <= s.input_len <= max_input_len:
            eligible.append(s)
    if len(eligible) < n:
        raise ConfigError(f"{path}: {len(eligible)} of {len(convs)} conversations give a session within the length "
                          f"filter (first prompt {min_input_len}-{max_input_len}, answers {min_output_len}-"
                          f"{max_output_len} tokens), {n} wanted",
                          hint="lower --num-requests (sessions, with --multi-turn) or widen --max-input-len/"
                               "--max-output-len")
    return random.Random(seed).sample(eligible, n)
