"""The search terms' reading of a plain word and its reuse of earlier readings: the same
terms as reading every identifier in full (storage.rows.terms)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage.rows import terms
from storage.rows.terms import Identifier, Terms, search_terms

# Letters, digits (ASCII and not), the underscore, every separator an identifier may hold,
# and what ends one.
TEXT = st.text(alphabet="abcXYZ019_²٣éß./:@#~+\\- ,()\n", max_size=200)


def full_reading(text: str) -> Terms:
    """Every identifier read through its pieces, none taken for a plain word, none reused."""
    found: list[Identifier] = []
    for match in terms._IDENTIFIER.finditer(text.lower()):
        identifier = match.group()
        segments, ends, words = terms._pieces(identifier)
        parts = terms._others(identifier, [*segments, *ends, *words])
        whole = identifier if terms._kept(identifier) else None
        if whole is not None or parts:
            atoms = terms._others(identifier, [*segments[1:-1], *words])
            found.append(Identifier(whole, parts, atoms))
    return Terms(tuple(found))


@given(TEXT)
def test_terms_equal_the_full_reading(text: str) -> None:
    assert search_terms(text) == full_reading(text)
    assert search_terms(text) == full_reading(text)  # read again: from the kept readings


def test_plain_words_have_no_parts_and_common_ones_are_dropped() -> None:
    found = search_terms("Deploy the Β2 build, then x").identifiers
    assert found == (Identifier("deploy", ()), Identifier("β2", ()), Identifier("build", ()))
    assert search_terms("snake_case").identifiers[0].parts == ("snake", "case")
