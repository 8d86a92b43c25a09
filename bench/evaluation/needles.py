"""Planted needles: a unique fact written into a user message or a tool output at a depth.

Retention is scored by verbatim presence of the needle's code in what ctxgate forwards at the
end of the session: cheap and deterministic, but it measures retention, not use (eval.md 1.4).
Use is scored by the probe phase of a replay (bench/evaluation/recall.py): each needle has its
own subject, so its question ("What is the access code for the north gate?") has one answer.
"""

from __future__ import annotations

import random
from itertools import accumulate

from bench.evaluation.corpus import Needle, Session
from tests.simulator.recall_model import fact_sentence

DEPTHS = (0.1, 0.5, 0.9)
PLACES = ("user", "tool")
LABEL = "access code"
SUBJECTS = {
    ("user", 0.1): "the north gate",
    ("user", 0.5): "the east gate",
    ("user", 0.9): "the south gate",
    ("tool", 0.1): "the staging vault",
    ("tool", 0.5): "the build server",
    ("tool", 0.9): "the backup router",
}


def needle_key(place: str, depth: float) -> str:
    return f"{place}@{round(depth * 100)}%"


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
            subject = SUBJECTS[place, depth]
            message["content"] = f"{message['content']}\n\n{fact_sentence(LABEL, subject, code)}"
            used.add(index)
            needles.append(Needle(place, depth, starts[index] / total, index, code, LABEL, subject))
    session.needles = needles
    session.forget_tokens()
    return needles
