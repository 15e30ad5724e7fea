"""Synthetic prompts of exact token counts: random token ids, seeded (what a cell's
``batch`` x ``input_len`` means when no dataset or trace is given).

Feeding token ids (not text) makes the prompt length exact on every engine, with no
tokenizer round trip (the same approach as vLLM's ``random`` dataset). Ids are drawn
uniformly from ``[low, high)``, which skips the low ids (special and byte tokens in
most vocabularies) and the top of the vocabulary (added special tokens, padding rows).
"""

from __future__ import annotations

import math

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


#: How ``--len-range R`` draws each request's lengths around the cell's ``L`` (input or
#: output), integers uniform over the closed range:
#:
#: * ``inferencex``: ``[floor(R * L), L]``, the random dataset of vLLM's benchmark_serving.py
#:   up to v0.8, which InferenceX's ``bench_serving`` copies and runs with ``R = 0.8``
#:   (``np.random.randint(int(input_len * range_ratio), input_len + 1)``);
#: * ``vllm``: ``[floor(L * (1 - R)), ceil(L * (1 + R))]``, vLLM's current random dataset
#:   (``vllm/benchmarks/datasets/utils.py``; outputs at least 1).
LEN_RANGE_CONVENTIONS = ("inferencex", "vllm")


def len_bounds(length: int, ratio: float, convention: str = "inferencex") -> tuple[int, int]:
    """The closed range ``(low, high)`` of one length under ``--len-range ratio``
    (:data:`LEN_RANGE_CONVENTIONS`), each at least 1.

    Raises:
        ValueError: ``ratio`` outside (0, 1), or an unknown convention.
    """
    if not 0 < ratio < 1:
        raise ValueError(f"--len-range must be between 0 and 1 (exclusive), got {ratio}")
    if convention == "inferencex":
        low, high = int(length * ratio), length
    elif convention == "vllm":
        low, high = math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))
    else:
        raise ValueError(f"unknown --len-range convention {convention!r}: use one of "
                         f"{', '.join(LEN_RANGE_CONVENTIONS)}")
    return max(1, low), max(1, high)


def range_lengths(n: int, input_len: int, output_len: int, ratio: float, convention: str = "inferencex",
                  seed: int = 0) -> tuple[list[int], list[int]]:
    """Each of ``n`` requests' input and output lengths (tokens), drawn independently and
    uniformly over :func:`len_bounds` of ``input_len`` and ``output_len``; the same seed
    gives the same lengths.

    Returns:
        ``(input_lens, output_lens)``, two lists of ``n`` ints.

    Raises:
        ValueError: see :func:`len_bounds`.
    """
    (il, ih), (ol, oh) = len_bounds(input_len, ratio, convention), len_bounds(output_len, ratio, convention)
    rng = np.random.default_rng([seed, 29, n])
    return ([int(x) for x in rng.integers(il, ih + 1, size=n)], [int(x) for x in rng.integers(ol, oh + 1, size=n)])
