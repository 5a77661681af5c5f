"""Freshness of raw excerpts: which ones a newer curated fact overrides, and which predate their
session's current summary. Pure functions over plain data; docs/memory.md has the rule.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from navi_memory.constants import FRESHNESS_MIN_SHARED_WORDS
from navi_memory.text.terms import STOP_WORDS

__all__ = [
    "FRESHNESS_STOP_WORDS",
    "FactVersion",
    "Freshness",
    "RawExcerpt",
    "content_words",
    "mark_freshness",
]

FRESHNESS_STOP_WORDS: Final = STOP_WORDS | frozenset(
    {
        # build_chunks writes every message with one of these prefixes ("User:", "Assistant:",
        # "Tool result (name):", "[Tool call]"): shared by every excerpt, they say nothing.
        "user",
        "assistant",
        "tool",
        "result",
        "call",
        # frequent words that carry no subject
        "all",
        "also",
        "any",
        "just",
        "no",
        "not",
        "now",
        "ok",
        "okay",
        "some",
        "yes",
    }
)
"""Words that never count as shared: the search stop words plus the chunk rendering prefixes."""

# camelCase and PascalCase humps, as text.keys splits them: "serverPort" -> "server Port",
# "HTTPPort" -> "HTTP Port".
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Letters and digits only: `_ - . /` and every other separator split identifiers and paths.
_WORD = re.compile(r"[^\W_]+")


def content_words(*texts: str) -> frozenset[str]:
    """The content words of ``texts``: lowercased (Unicode case folding) words, identifiers
    split on ``_ - . /`` and camelCase (``server_port`` and ``serverPort`` → server, port),
    numbers kept (``8098``), stop words and single letters dropped.

    Every word is a substring of its text case-folded (folding maps each character on its own),
    which lets ``mark_freshness`` skip tokenizing an excerpt no fact can match."""
    words: set[str] = set()
    for text in texts:
        for word in _WORD.findall(_CAMEL_BOUNDARY.sub(" ", text)):
            word = word.casefold()
            if word in FRESHNESS_STOP_WORDS or (len(word) == 1 and not word.isdigit()):
                continue
            words.add(word)
    return frozenset(words)


@dataclass(frozen=True, slots=True)
class FactVersion:
    """A current fact as freshness sees it: whose, its key and value, when it was written."""

    user_id: uuid.UUID | None
    key: str
    value: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class RawExcerpt:
    """A raw chunk as freshness sees it: whose, which session, when it ended, what it says."""

    user_id: uuid.UUID | None
    """None (no owner known) is marked superseded by no fact."""
    session_id: str
    ended_at: datetime
    content: str
    breadcrumbs: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Freshness:
    """The marks of one raw excerpt (both may be set; a marked excerpt is still returned)."""

    superseded_by: str | None = None
    """The key of the newer fact that overrides the excerpt."""
    before_summary: bool = False
    """The excerpt ended before its session's last summary was written."""


def mark_freshness(
    excerpts: Sequence[RawExcerpt],
    facts: Iterable[FactVersion],
    summary_at: Mapping[str, datetime | None],
) -> list[Freshness]:
    """The freshness marks of ``excerpts``, in their order.

    ``superseded_by``: the key of a fact of the excerpt's own user, updated strictly after the
    excerpt's ``ended_at``, sharing at least FRESHNESS_MIN_SHARED_WORDS content words with it
    (fact side: key + value; excerpt side: content + breadcrumbs). Of several, the one sharing
    the most words, then the newest, then the first key in sort order.

    ``before_summary``: the excerpt ended strictly before ``summary_at[session_id]`` (a session
    missing from the mapping, or mapped to None, has no summary).
    """
    fact_words = [(fact, content_words(fact.key, fact.value)) for fact in facts]
    marks: list[Freshness] = []
    for excerpt in excerpts:
        newer = [
            (fact, words_of_fact)
            for fact, words_of_fact in fact_words
            if excerpt.user_id is not None
            and fact.user_id == excerpt.user_id
            and fact.updated_at > excerpt.ended_at
            and len(words_of_fact) >= FRESHNESS_MIN_SHARED_WORDS
        ]
        if newer:
            # A shared word is a substring of the folded excerpt: facts with too few of their
            # words in it cannot qualify, and most excerpts need no tokenizing at all.
            folded = "\n".join((excerpt.content, *excerpt.breadcrumbs)).casefold()
            newer = [
                (fact, words_of_fact)
                for fact, words_of_fact in newer
                if sum(word in folded for word in words_of_fact) >= FRESHNESS_MIN_SHARED_WORDS
            ]
        words = content_words(excerpt.content, *excerpt.breadcrumbs) if newer else frozenset()
        best: tuple[int, datetime, str] | None = None
        for fact, words_of_fact in newer:
            shared = len(words & words_of_fact)
            if shared < FRESHNESS_MIN_SHARED_WORDS:
                continue
            candidate = (shared, fact.updated_at, fact.key)
            if best is None or _ranks_before(candidate, best):
                best = candidate
        boundary = summary_at.get(excerpt.session_id)
        marks.append(
            Freshness(
                superseded_by=None if best is None else best[2],
                before_summary=boundary is not None and excerpt.ended_at < boundary,
            )
        )
    return marks


def _ranks_before(a: tuple[int, datetime, str], b: tuple[int, datetime, str]) -> bool:
    """More shared words first, then the newer fact, then the smaller key."""
    if a[0] != b[0]:
        return a[0] > b[0]
    if a[1] != b[1]:
        return a[1] > b[1]
    return a[2] < b[2]
