"""LIKE patterns from user text: every repository escapes ``%``, ``_`` and ``\\`` the same way.

Patterns here go into arrays (``ILIKE ANY (CAST(:patterns AS text[]))``), which SQLAlchemy's
``autoescape=True`` cannot reach, so they are escaped by hand, with ``\\`` as the escape.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence

__all__ = ["contains_pattern", "escape_like", "spellings", "term_patterns"]


def escape_like(term: str) -> str:
    """``term`` as a literal inside a LIKE pattern (escape character ``\\``)."""
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def contains_pattern(term: str) -> str:
    """A LIKE pattern matching any text that contains ``term``."""
    return f"%{escape_like(term)}%"


def spellings(term: str) -> Iterator[str]:
    """``term``, then its composed (NFC) and decomposed (NFD) forms where they differ from it:
    text an application stored decomposed (a macOS file name, say) holds "e" + a combining
    accent where a query holds "é" (query terms come in NFC: text.terms.query_terms), and
    LIKE compares code points."""
    yield term
    if not term.isascii():
        for form in ("NFC", "NFD"):
            other = unicodedata.normalize(form, term)
            if other != term:
                yield other


def term_patterns(terms: Sequence[str], *, short_terms: bool = False) -> list[str]:
    """The LIKE patterns of ``terms``: each term's, then its other Unicode forms' where it has
    them (``spellings``). A row matching both forms of one term counts it twice: rare (one
    text holding both forms of a word), and never a miss. One-character terms of a parsed
    query (the digit query_terms keeps for the chunk text index: "floor 4") are left out beside
    longer ones: as a substring, "4" is in nearly every row holding a date or a number.
    ``short_terms``: the caller named the terms one by one (``search_values``), so all stay."""
    longer = terms if short_terms else [term for term in terms if len(term) > 1]
    return [contains_pattern(spelling) for term in longer or terms for spelling in spellings(term)]
