"""Prompts for serving cells in one of three forms, built from seeded blocks so that equal
keys give identical blocks (what makes shared prefixes and trace ``hash_ids`` reach a
server's prefix cache):

* ``token_ids``: token ids of a known vocabulary (the servers infbench starts): exact;
* ``text``: common English words, about one token per word, the real count from the
  server's usage;
* tokenizer text (``--tokenizer``): word pieces of a given tokenizer, fixed up to
  re-tokenise to the exact count (:class:`~infbench.workloads.tokenizer.TokenizerText`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infbench.data.prompts import token_range
from infbench.workloads.synthetic import WORDS
from infbench.workloads.tokenizer import TokenizerText


@dataclass(frozen=True)
class Prompt:
    """One completions request's prompt.

    Attributes:
        content: text or token ids, sent as ``prompt``.
        output_len: tokens to generate (forced); None: the cell's ``output_len``.
        n_in: prompt tokens by the client's count when it is exact (token ids, or a
            ``--tokenizer``), else None.
    """

    content: str | list[int]
    output_len: int | None = None
    n_in: int | None = None


class PromptMaker:
    """Builds prompts in one form from seeded blocks.

    Args:
        fmt: ``token_ids`` or ``text``.
        vocab_size: the model's vocabulary (``token_ids``).
        tokenizer: a client-side tokenizer; text prompts are then exact.
        text_map: applied to word text before it is sent (llama.cpp's dummy vocabulary
            maps words onto its own, :func:`~infbench.engines.gguf_dummy.dummy_text`).

    Raises:
        ValueError: ``token_ids`` without a vocabulary size.
    """

    def __init__(self, fmt: str, vocab_size: int | None = None, tokenizer: TokenizerText | None = None,
                 text_map: Callable[[str], str] | None = None):
        if fmt == "token_ids" and not vocab_size:
            raise ValueError("token-id prompts need the vocabulary size")
        self.fmt, self.vocab_size, self.tokenizer, self.text_map = fmt, vocab_size, tokenizer, text_map

    def block(self, n: int, key: Any) -> list[Any]:
        """``n`` units (token ids, or words for plain text), identical for equal ``key``
        (an int or a list of ints, a NumPy seed)."""
        if n <= 0:
            return []
        rng = np.random.default_rng(key)
        if self.fmt == "token_ids":
            low, high = token_range(int(self.vocab_size or 0))
            return rng.integers(low, high, size=n).tolist()
        if self.tokenizer is not None:
            return rng.choice(self.tokenizer.pool, size=n).tolist()
        return [WORDS[j] for j in rng.integers(0, len(WORDS), size=n)]

    def make(self, units: Sequence[Any], n: int, key: Any = 0, output_len: int | None = None) -> Prompt:
        """A :class:`Prompt` of the first ``n`` units (ids or words)."""
        units = list(units[:n])
        if self.fmt == "token_ids":
            return Prompt(units, output_len, len(units))
        if self.tokenizer is not None:
            text = self.tokenizer.text(units, n, key)
            return Prompt(text, output_len, self.tokenizer.count(text))
        text = " ".join(units)
        return Prompt(self.text_map(text) if self.text_map else text, output_len, None)

    def prompts(self, count: int, input_len: int, seed: int = 0) -> list[Prompt]:
        """``count`` distinct prompts of ``input_len`` tokens (no shared blocks)."""
        return [self.make(self.block(input_len, [seed, 11, count, input_len, i]), input_len, [seed, i])
                for i in range(count)]

    def ranged(self, input_lens: Sequence[int], output_lens: Sequence[int], seed: int = 0) -> list[Prompt]:
        """One distinct prompt per request of ``input_lens[i]`` tokens, forced to generate
        ``output_lens[i]`` (``--len-range``; :func:`infbench.data.prompts.range_lengths`).

        Raises:
            ValueError: the two lists differ in length.
        """
        if len(input_lens) != len(output_lens):
            raise ValueError(f"{len(input_lens)} input lengths for {len(output_lens)} output lengths")
        count = len(input_lens)
        return [Prompt(p.content, int(o), p.n_in) for p, o in
                ((self.make(self.block(int(i), [seed, 31, count, int(i), k]), int(i), [seed, k]), o)
                 for k, (i, o) in enumerate(zip(input_lens, output_lens, strict=True)))]

    def shared_prefix(self, count: int, input_len: int, prefix_len: int, num_prefixes: int,
                      seed: int = 0) -> list[Prompt]:
        """``count`` prompts of ``input_len`` tokens, each one of ``num_prefixes`` shared
        prefixes of ``prefix_len`` tokens (picked by a seeded draw) followed by a unique part.

        Raises:
            ValueError: ``prefix_len`` > ``input_len``.
        """
        if prefix_len > input_len:
            raise ValueError(f"prefix_len {prefix_len} exceeds input_len {input_len}")
        prefixes = [self.block(prefix_len, [seed, 17, prefix_len, k]) for k in range(num_prefixes)]
        which = np.random.default_rng([seed, 19, count]).integers(0, num_prefixes, size=count)
        return [self.make(prefixes[int(which[i])] + self.block(input_len - prefix_len, [seed, 23, input_len, i]),
                          input_len, [seed, i]) for i in range(count)]
