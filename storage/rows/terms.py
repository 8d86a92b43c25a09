"""Search terms: the one normaliser the archive's full-text index uses on both sides (pure).

A message is indexed, and a query is searched, as the terms `search_terms` finds in its text:
identifiers keep the punctuation inside them and lose what surrounds them, so `ID-7:` and
`(src/app/config.py).` read as `id-7` and `src/app/config.py`. Beside each such whole term go
its parts: the segments between `/`, `:`, `@`, `#` or `\\` (`config.py`) and the words between
any punctuation (`config`, `py`), and what it starts or ends with up to a separator
(`src/app`, `app/config.py`). A query's identifier is looked for as a term of its own, which
it is in whatever holds it whole or at either end: `config.py` finds `src/app/config.py`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# A word, or words joined by punctuation that names things: paths, dotted names, ids, urls.
_IDENTIFIER = re.compile(r"\w+(?:[./:@#~+\\-]+\w+)*")
_SEGMENT_SEPARATORS = re.compile(r"[/:@#\\]+")
_WORD = re.compile(r"[^\W_]+")
_INNER = ".~+-"  # what a segment may end with once split (`a./b`)
_SEPARATOR_RUN = re.compile(r"[./:@#~+\\-]+")
# A query names a file by its last components more often than by its first ones.
_MAX_SUFFIXES = 8
_MAX_PREFIXES = 4
MAX_TERM = 96  # longer "identifiers" are blobs (base64, minified code): their words still count
# Words too common to tell messages apart; PostgreSQL's ts_rank has no document frequency
# to weigh them down, so they would rank any long message first.
STOP_WORDS = frozenset(
    """a an and are as at be but by do does did for from has have how i if in into is it its
    me my no not of on or our so than that the their them then there these they this to was
    we were what when where which who why will with you your""".split()
)


@dataclass(frozen=True, slots=True)
class Identifier:
    """One word or identifier of a text: itself (None when too long or too common to search
    by) and its parts (none for a plain word). `atoms`: the parts that a longer identifier
    holding it between punctuation holds too, its inner segments and its words
    (`part03/sect_c.7` inside `doc/part03/sect_c.7.html#t1` shares `part03`, `sect` and `7`,
    not the suffix `c.7` nor the segment `sect_c.7`: a first or last segment may be cut)."""

    whole: str | None
    parts: tuple[str, ...]
    atoms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Terms:
    """What a text is searched by, lower case, in the order the text holds it."""

    identifiers: tuple[Identifier, ...]

    @property
    def whole(self) -> tuple[str, ...]:
        """Each word or identifier, surrounding punctuation stripped."""
        return tuple(i.whole for i in self.identifiers if i.whole is not None)

    @property
    def parts(self) -> tuple[str, ...]:
        """The segments and words of the identifiers that hold punctuation."""
        return tuple(p for i in self.identifiers for p in i.parts)

    def distinct(self) -> tuple[str, ...]:
        """Each term once, whole ones first."""
        return tuple(dict.fromkeys((*self.whole, *self.parts)))

    def __bool__(self) -> bool:
        return bool(self.identifiers)


def search_terms(text: str) -> Terms:
    """The terms of `text`; the same function reads messages and queries."""
    found: list[Identifier] = []
    for match in _IDENTIFIER.finditer(text.lower()):
        identifier = _identifier(match.group())
        if identifier is not None:
            found.append(identifier)
    return Terms(tuple(found))


# Indexing an archive reads the same words over and over: each is read once (Identifier is
# immutable, so one instance serves every text holding it).
@functools.lru_cache(maxsize=1 << 16)
def _identifier(identifier: str) -> Identifier | None:
    """`identifier`'s whole term, parts and atoms; None when nothing of it is searched by."""
    if identifier.isalnum():
        # A plain word (\w less the underscore is exactly str.isalnum): no segments, no
        # ends, one word that is itself, so no parts.
        return Identifier(identifier, ()) if _kept(identifier) else None
    segments, ends, words = _pieces(identifier)
    parts = _others(identifier, [*segments, *ends, *words])
    whole = identifier if _kept(identifier) else None
    if whole is None and not parts:
        return None
    return Identifier(whole, parts, _others(identifier, [*segments[1:-1], *words]))


def _pieces(identifier: str) -> tuple[list[str], list[str], list[str]]:
    """The identifier's segments (when it has more than one), what it ends and starts with up
    to a separator (`app/config.py`, `config.py`, `src/app`), and its words."""
    segments = [s.strip(_INNER) for s in _SEGMENT_SEPARATORS.split(identifier)]
    segments = [s for s in segments if s] if len(segments) > 1 else []
    cuts = list(_SEPARATOR_RUN.finditer(identifier))
    prefixes = [identifier[: c.start()] for c in cuts[:_MAX_PREFIXES]]
    suffixes = [identifier[c.end() :] for c in cuts[-_MAX_SUFFIXES:]]
    return segments, [*suffixes, *prefixes], _WORD.findall(identifier)


def _others(identifier: str, pieces: list[str]) -> tuple[str, ...]:
    """`pieces` each once, without the identifier itself or what is not searched by."""
    return tuple(p for p in dict.fromkeys(pieces) if p != identifier and _kept(p))


def _kept(term: str) -> bool:
    if len(term) > MAX_TERM or term in STOP_WORDS:
        return False
    # A lone letter (the s of "it's") matches everything; a lone digit may be an id's part.
    return len(term) > 1 or term.isdigit()
