"""A small conversation file for the tests, generated (no downloads): OpenAI-messages,
LMSYS and ShareGPT lines mixed, with known word counts per turn."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = "alpha beta gamma delta model token server stream latency request reply cache batch prompt".split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_conversations(path: Path, n: int = 40, seed: int = 0) -> list[dict]:
    """Write ``n`` conversations; returns, per line, ``{"prompt_words": .., "answer_words": ..}``
    of the final user-assistant exchange as the chat workload must see it."""
    rng = random.Random(seed)
    truth = []
    with open(path, "w") as f:
        for i in range(n):
            turns = rng.randint(1, 3)
            msgs, prompt_words = [], 0
            if i % 5 == 0:
                msgs.append({"role": "system", "content": words(rng, 3)})
                prompt_words += 3
            for t in range(turns):
                u, a = rng.randint(4, 40), rng.randint(4, 30)
                msgs += [{"role": "user", "content": words(rng, u)}, {"role": "assistant", "content": words(rng, a)}]
                prompt_words += u + (a if t < turns - 1 else 0)
            truth.append({"prompt_words": prompt_words, "answer_words": a})
            if i % 3 == 0:
                line = {"messages": msgs}
            elif i % 3 == 1:
                line = {"conversation": msgs, "model": "x"}
            else:
                line = {"conversations": [{"from": {"user": "human", "assistant": "gpt"}.get(m["role"], m["role"]),
                                           "value": m["content"]} for m in msgs]}
            f.write(json.dumps(line) + "\n")
    return truth
