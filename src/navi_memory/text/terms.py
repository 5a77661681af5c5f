"""Query terms for the text search paths: the words a row must contain, stop words left out."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_QUERY_TERMS", "STOP_WORDS", "query_terms"]

MAX_QUERY_TERMS: Final = 16
"""More terms than this add SQL, not recall."""

# Words that match almost every row as substrings and say nothing about what is wanted.
# fmt: off
STOP_WORDS: Final = frozenset(
    {
        "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could",
        "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how",
        "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she",
        "so",
        "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
        "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "who", "why",
        "will", "with", "would", "you", "your", "yours",
    }
)
# fmt: on

# A term is a run of word characters, keeping the inner punctuation of identifiers, paths,
# versions and addresses together: "server_port", "v1.2.3", "/etc/nginx.conf", "a@b.c".
_TERM = re.compile(r"[\w][\w.\-/@:#]*[\w]|[\w]", re.UNICODE)


def query_terms(query: str, *, limit: int = MAX_QUERY_TERMS) -> list[str]:
    """Distinct terms of ``query`` (case-insensitive, first spelling kept), stop words dropped.

    One-letter terms are dropped unless nothing else is left; when every word is a stop word the
    stop words are kept, so a query is never silently empty.
    """
    words = _TERM.findall(query)
    seen: set[str] = set()
    terms: list[str] = []
    for word in words:
        folded = word.casefold()
        if folded in seen:
            continue
        seen.add(folded)
        terms.append(word)
    useful = [t for t in terms if t.casefold() not in STOP_WORDS and len(t) > 1]
    chosen = useful or [t for t in terms if len(t) > 1] or terms
    return chosen[:limit]
