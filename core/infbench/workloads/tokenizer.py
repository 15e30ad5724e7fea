"""A client-side tokenizer (``--tokenizer PATH|HF-id``) for exact prompt lengths against
endpoints whose vocabulary infbench does not otherwise know.

The tokenizer is loaded with ``transformers.AutoTokenizer`` from a local folder, or from a
Hugging Face id already in the local cache (``local_files_only``: infbench never
downloads). Text prompts are built from the tokenizer's own word pieces so that the text
re-tokenises to the wanted count (vLLM's random dataset does the same decode/encode
round trip). The server's ``usage`` stays the authority for stored counts; the client's
count is kept beside it (``RequestRecord.n_in_client``) and mismatches are reported.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from infbench.data.errors import ConfigError

#: Word-start markers of common vocabularies: SentencePiece / Metaspace, GPT-2 byte-level BPE.
WORD_MARKERS = ("\u2581", "\u0120")


@lru_cache(maxsize=4)
def load_tokenizer(name: str) -> Any:
    """A ``transformers`` tokenizer from a folder or an HF id in the local cache.

    Raises:
        ConfigError: transformers is missing, or no tokenizer can be loaded from ``name``
            without a download (the message says where it looked).
    """
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError("--tokenizer needs transformers", hint="pip install 'infbench[transformers]'") from exc
    p = Path(name).expanduser()
    try:
        if p.exists():
            return AutoTokenizer.from_pretrained(str(p))
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many types here
        raise ConfigError(f"cannot load tokenizer {name!r}: {type(exc).__name__}: {str(exc)[:200]}",
                          hint="pass a folder holding tokenizer.json (or tokenizer.model), or a Hugging Face id "
                               "already in the local cache (HF_HOME); infbench does not download") from None


class TokenizerText:
    """Text of exact token counts in one tokenizer.

    Args:
        tokenizer: a ``transformers`` tokenizer.
        name: how the user named it (for messages).
    """

    def __init__(self, tokenizer: Any, name: str = ""):
        self.tok, self.name = tokenizer, name
        self.pool = self._word_pool()

    def _word_pool(self, sample: int = 20000) -> np.ndarray:
        """Ids of ordinary word pieces (a word-start marker followed by letters), which
        re-tokenise stably when joined; all non-special ids if the vocabulary has too few."""
        n = len(self.tok)
        special = set(self.tok.all_special_ids or [])
        rng = np.random.default_rng(0)
        ids = np.unique(rng.integers(0, n, size=min(sample, n))) if n > sample else np.arange(n)
        pieces = self.tok.convert_ids_to_tokens([int(i) for i in ids])
        words = [int(i) for i, p in zip(ids, pieces) if int(i) not in special and isinstance(p, str)
                 and p[:1] in WORD_MARKERS and p[1:].isalpha() and p.isascii()]
        if len(words) >= 64:
            return np.asarray(words)
        plain = [int(i) for i in ids if int(i) not in special]
        if not plain:
            raise ConfigError(f"tokenizer {self.name!r} has no ordinary tokens to build prompts from")
        return np.asarray(plain)

    def count(self, text: str) -> int:
        """Tokens of ``text`` (no special tokens added)."""
        return len(self.tok.encode(text, add_special_tokens=False))

    def ids(self, n: int, key: Any) -> list[int]:
        """``n`` word-piece ids, the same for the same ``key`` (a seed or a list of ints)."""
        rng = np.random.default_rng(key)
        return rng.choice(self.pool, size=n).tolist()

    def text(self, ids: list[int], n: int | None = None, key: Any = 0) -> str:
        """The text of ``ids``, fixed up so it re-tokenises to ``n`` tokens (default
        ``len(ids)``): longer results are cut in token space, shorter ones extended with
        more word pieces; after 6 rounds the closest text is returned."""
        n = len(ids) if n is None else n
        text = self.tok.decode(ids)
        rng = np.random.default_rng(key)
        for _ in range(6):
            got = self.tok.encode(text, add_special_tokens=False)
            if len(got) == n:
                return text
            if len(got) > n:
                text = self.tok.decode(got[:n])
            else:
                text = self.tok.decode(got + rng.choice(self.pool, size=n - len(got)).tolist())
        return text

    def chat_count(self, messages: list[dict[str, str]]) -> int:
        """Prompt tokens of a chat request: the tokenizer's chat template applied (with the
        generation prompt) when it has one, else the sum over message contents."""
        if getattr(self.tok, "chat_template", None):
            try:
                out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
                if isinstance(out, dict) or hasattr(out, "keys"):
                    out = out["input_ids"]
                return len(out)
            except Exception:  # noqa: BLE001 - a template that fails on these messages: count the contents
                pass
        return sum(self.count(m["content"]) for m in messages)


@lru_cache(maxsize=4)
def tokenizer_text(name: str) -> TokenizerText:
    """The cached :class:`TokenizerText` of ``--tokenizer name``.

    Raises:
        ConfigError: see :func:`load_tokenizer`.
    """
    return TokenizerText(load_tokenizer(name), name)
