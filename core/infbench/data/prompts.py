"""Synthetic prompts of exact token counts: random token ids, seeded (what a cell's
``batch`` x ``input_len`` means when no dataset or trace is given).

Feeding token ids (not text) makes the prompt length exact on every engine, with no
tokenizer round trip (the same approach as vLLM's ``random`` dataset). Ids are drawn
uniformly from ``[low, high)``, which skips the low ids (special and byte tokens in
most vocabularies) and the top of the vocabulary (added special tokens, padding rows).
"""

from __future__ import annotations

import numpy as np


def token_range(vocab_size: int) -> tuple[int, int]:
    """The id range ``[low, high)`` used for a vocabulary of ``vocab_size`` tokens.

    ``low = min(1000, vocab/8)``, ``high = vocab - min(300, vocab/8)``.

    Raises:
        ValueError: for a vocabulary of fewer than 16 tokens.
    """
    if vocab_size < 16:
        raise ValueError(f"vocabulary of {vocab_size} tokens is too small for synthetic prompts")
    return min(1000, vocab_size // 8), vocab_size - min(300, vocab_size // 8)


def synthetic_prompts(batch: int, input_len: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """``batch`` prompts of exactly ``input_len`` token ids each.

    Args:
        batch: number of prompts.
        input_len: tokens per prompt.
        vocab_size: the model's vocabulary size.
        seed: same seed, same prompts (NumPy PCG64).

    Returns:
        A list of ``batch`` lists of ``input_len`` ints. Prompts differ from one another
        so no prefix cache can share work between them.
    """
    low, high = token_range(vocab_size)
    rng = np.random.default_rng([seed, batch, input_len])
    ids: list[list[int]] = rng.integers(low, high, size=(batch, input_len)).tolist()
    return ids
