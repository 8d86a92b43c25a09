"""Planted needles: a unique fact written into a user message or a tool output at a depth.

Retention is scored by verbatim presence of the needle's code in what ctxgate forwards at the
end of the session: cheap and deterministic, but it measures retention, not use (eval.md 1.4).
"""

from __future__ import annotations

import random
from itertools import accumulate

from bench.evaluation.corpus import Needle, Session

DEPTHS = (0.1, 0.5, 0.9)
PLACES = ("user", "tool")


def needle_sentence(code: str) -> str:
    return f"The deploy password hint is {code}."


def _candidates(session: Session, place: str, before: int) -> list[int]:
    pool = session.stated if place == "user" else session.observations
    # Index 1 is the session's first request, which ctxgate keeps by design: not a real test.
    return [
        i for i in pool if 1 < i < before and isinstance(session.messages[i].get("content"), str)
    ]


def plant(session: Session, seed: int = 0) -> list[Needle]:
    """Plant one needle per (place, depth) into the nearest eligible message; returns them."""
    rng = random.Random(f"{seed}:{session.name}")
    tokens = session.message_tokens()
    starts = [0, *accumulate(tokens)]
    total = starts[-1]
    last_request = session.points()[-1]
    used: set[int] = set()
    needles: list[Needle] = []
    for place in PLACES:
        for depth in DEPTHS:
            pool = [i for i in _candidates(session, place, last_request) if i not in used]
            if not pool:
                continue
            index = min(pool, key=lambda i: abs(starts[i] - depth * total))
            code = f"NEEDLE-{rng.getrandbits(40):010x}"
            message = session.messages[index]
            message["content"] = f"{message['content']}\n\n{needle_sentence(code)}"
            used.add(index)
            needles.append(Needle(place, depth, starts[index] / total, index, code))
    session.needles = needles
    session.forget_tokens()
    return needles
