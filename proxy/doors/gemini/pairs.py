"""Putting rendered pieces back into Gemini contents, and keeping calls paired (pure).

    contents = repaired(merged(pieces))

Pieces of one wire content go back into one content, their parts in the order they came;
ctxgate's own pieces of one role form one content. Then every call the next content does not
answer, and every answer to no call of the content before, is removed (pairs match by chat id:
the call's `id`, else its position), so the upstream always receives valid pairs; a step whose
signed first call was removed keeps Google's dummy signature on the first call left.
"""

from __future__ import annotations

from typing import Final, TypedDict, cast

from proxy.doors.gemini.contents import (
    Part,
    Template,
    WireContent,
    is_answer,
    is_call,
    is_model,
    is_thought,
)

DUMMY_SIGNATURE = "skip_thought_signature_validator"  # Google's documented stand-in
SIGNATURE: Final = "thoughtSignature"
REMOVED_CALL_TEXT = "(tool call removed)"
REMOVED_RESULT_TEXT = "(tool result removed)"
EMPTY_TEXT = "(empty)"


class Piece(TypedDict):
    role: str  # "user" or "model"
    parts: list[Part]
    at: list[float]  # each part's position in its content
    keys: list[str | None]  # each call's or answer's chat id (None for other parts)
    template: Template
    group: object  # the wire content it came from (None: written by ctxgate)
    written: bool


Keyed = tuple[WireContent, list[str | None]]  # a content and each part's chat id


def merged(pieces: list[Piece]) -> list[Keyed]:
    """One content per run of pieces of one wire content (or of ctxgate's own, of one role),
    the parts in the order they came."""
    out: list[Keyed] = []
    run: list[Piece] = []
    for piece in pieces:
        if run and (piece["role"] != run[0]["role"] or piece["group"] != run[0]["group"]):
            out.append(_content(run))
            run = []
        run.append(piece)
    if run:
        out.append(_content(run))
    return out


def _content(run: list[Piece]) -> Keyed:
    first = run[0]
    placed = [
        (at, part, key)
        for piece in run
        for at, part, key in zip(piece["at"], piece["parts"], piece["keys"], strict=True)
    ]
    if first["group"] is not None:
        placed.sort(key=lambda item: item[0])
    parts = [part for _, part, _ in placed]
    keys = [key for _, _, key in placed]
    if not parts:
        parts, keys = [{"text": EMPTY_TEXT}], [None]
    content = cast(WireContent, dict(first["template"]))
    content["role"] = first["role"]
    content["parts"] = parts
    return content, keys


def repaired(keyed: list[Keyed]) -> list[WireContent]:
    """Drop calls the next content does not answer, and answers to no call of the content
    before; a content left without parts says what was removed."""
    out: list[WireContent] = []
    for index, (content, keys) in enumerate(keyed):
        parts = content["parts"]
        if is_model(content) and index + 1 < len(keyed):
            answered = _answers(keyed[index + 1])
            kept = [p for p, k in zip(parts, keys, strict=True) if not is_call(p) or k in answered]
            out.append(_with_parts(content, _signed(kept, parts), REMOVED_CALL_TEXT))
        elif not is_model(content) and any(is_answer(p) for p in parts):
            asked = _calls_of(keyed[index - 1]) if index > 0 else set()
            kept = [p for p, k in zip(parts, keys, strict=True) if not is_answer(p) or k in asked]
            out.append(_with_parts(content, kept, REMOVED_RESULT_TEXT))
        else:
            out.append(content)
    return out


def _answers(keyed: Keyed) -> set[str | None]:
    content, keys = keyed
    if is_model(content):
        return set()
    return {k for p, k in zip(content["parts"], keys, strict=True) if is_answer(p)}


def _calls_of(keyed: Keyed) -> set[str | None]:
    content, keys = keyed
    if not is_model(content):
        return set()
    return {k for p, k in zip(content["parts"], keys, strict=True) if is_call(p)}


def _signed(kept: list[Part], parts: list[Part]) -> list[Part]:
    """A step's first call carries its signature: when a signed call was removed, the first
    call left gets the dummy."""
    kept_ids = {id(p) for p in kept}
    removed = [p for p in parts if is_call(p) and id(p) not in kept_ids]
    calls = [p for p in kept if is_call(p)]
    if not removed or not calls or SIGNATURE in calls[0]:
        return kept
    if not any(SIGNATURE in p for p in removed):
        return kept
    first = calls[0]
    return [{**p, SIGNATURE: DUMMY_SIGNATURE} if p is first else p for p in kept]


def _with_parts(content: WireContent, kept: list[Part], note: str) -> WireContent:
    parts = content["parts"]
    if len(kept) == len(parts) and all(a is b for a, b in zip(kept, parts, strict=True)):
        return content
    if not [p for p in kept if not is_thought(p)]:
        kept = [*kept, {"text": note}]
    changed = content.copy()
    changed["parts"] = kept
    return changed
