"""Freshness of raw excerpts: which ones a newer curated fact overrides, and which predate their
session's current summary. Pure functions over plain data; docs/memory.md has the rule.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypeAlias

from navi_memory.constants import FRESHNESS_EXCERPT_WORDS, FRESHNESS_MIN_SHARED_WORDS
from navi_memory.errors import InvalidInputError
from navi_memory.text.chunks import RENDERING_WORDS
from navi_memory.text.terms import STOP_WORDS, combining_marks

__all__ = [
    "FRESHNESS_STOP_WORDS",
    "ExcerptWords",
    "FactVersion",
    "FactWords",
    "Freshness",
    "RawExcerpt",
    "content_words",
    "fact_words",
    "mark_freshness",
]

FRESHNESS_STOP_WORDS: Final = (
    STOP_WORDS
    # build_chunks writes every message with one of these prefixes ("User:", "Assistant:",
    # "Tool result (name):", "[Tool call]"): shared by every excerpt, they say nothing.
    | RENDERING_WORDS
    | frozenset(
        {
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
)
"""Words that never count as shared: the search stop words plus the chunk rendering prefixes."""

# camelCase and PascalCase humps, as text.keys splits them: "serverPort" -> "server Port",
# "HTTPPort" -> "HTTP Port".
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@functools.cache
def _word_pattern() -> re.Pattern[str]:
    """A word: letters, digits and combining marks (``[^\\W_]`` leaves the marks out, and
    Devanagari, Thai, Arabic with its vowel signs… write letters with them); ``_ - . /`` and
    every other separator split identifiers and paths. Built on the first non-ASCII text
    (text.terms.combining_marks, a table walk of about 0.1 s, shared with query terms)."""
    marks = combining_marks()
    return re.compile(rf"(?:[^\W_]|[{marks}])+")


# The same for ASCII text: the character before each seam, and the words of lowered text.
_ASCII_SEAM = re.compile(r"[a-z0-9](?=[A-Z])|[A-Z](?=[A-Z][a-z])")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
# Every ASCII character that is not a letter or a digit, to a space.
_ASCII_SEPARATORS: Final = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalnum()})
_SINGLE_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyz")


def content_words(*texts: str) -> frozenset[str]:
    """The content words of ``texts``: NFKC-normalized, lowercased (Unicode case folding)
    words of letters, digits and combining marks, identifiers split on ``_ - . /`` and
    camelCase (``server_port`` and ``serverPort`` → server, port), numbers kept (``8098``),
    stop words and single letters dropped."""
    words: set[str] = set()
    ascii_only = True
    for text in texts:
        if text.isascii():
            words.update(_ascii_words(text))
        else:
            ascii_only = False
            words.update(_folded_words(text))
    if ascii_only:
        # Set differences in C: an ASCII word of one character is a letter or a digit.
        return frozenset(words - FRESHNESS_STOP_WORDS - _SINGLE_LETTERS)
    return frozenset(
        word
        for word in words
        if word not in FRESHNESS_STOP_WORDS and (len(word) > 1 or word.isdigit())
    )


def _ascii_words(text: str) -> set[str]:
    """The words of ASCII text (nearly every chunk), folding being lowercasing here. The text
    is cut at separators by one ``translate`` and ``split`` (C passes); a token without a
    capital (most of them) is a word as it is, since a camelCase seam needs a capital, and
    only the others go through the seam regex. Twice as fast as running the regex over the
    whole text, which was most of unified search's Python on 2-4 KB excerpts."""
    words: set[str] = set()
    capitalised: list[str] = []
    for token in set(text.translate(_ASCII_SEPARATORS).split()):
        if token.islower() or token.isdigit():
            words.add(token)
        else:
            capitalised.append(token)
    if capitalised:
        # Joined by spaces: a seam is between two adjacent characters, never across one.
        marked = _ASCII_SEAM.sub(r"\g<0> ", " ".join(capitalised))
        words.update(_ASCII_WORD.findall(marked.lower()))
    return words


def _folded_words(text: str) -> set[str]:
    word = _word_pattern()
    words: set[str] = set()
    # One form for one word: composed or decomposed accents, full-width letters and digits.
    # Each distinct token once; only tokens with capitals can hide a camelCase seam, and a
    # seam never crosses a separator.
    for token in set(word.findall(unicodedata.normalize("NFKC", text))):
        parts = [token] if token.islower() or token.isdigit() else _split_camel(token)
        for part in parts:
            folded = unicodedata.normalize("NFKC", part.casefold())
            if word.fullmatch(folded):
                words.add(folded)
            else:  # folding made a separator (rare compatibility forms): split there too
                words.update(word.findall(folded))
    return words


def _split_camel(token: str) -> list[str]:
    return _CAMEL_BOUNDARY.sub(" ", token).split(" ")


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
    chunk_id: int | None = None
    """The stored chunk's id: its words may then come from ExcerptWords (None: tokenized)."""


@dataclass(frozen=True, slots=True)
class Freshness:
    """The marks of one raw excerpt (both may be set; a marked excerpt is still returned)."""

    superseded_by: str | None = None
    """The key of the newer fact that overrides the excerpt."""
    before_summary: bool = False
    """The excerpt ended before its session's last summary was written."""


@dataclass(frozen=True, slots=True)
class FactWords:
    """Facts with their content words (key and value), made once for many excerpts."""

    facts: tuple[tuple[FactVersion, frozenset[str]], ...]


_Key: TypeAlias = tuple[int, int, int]

SEEN_ONCE_MAX: Final = 4096
"""Excerpts ExcerptWords remembers as marked once (a key each, no words): their next marking
keeps their words."""


class ExcerptWords:
    """The content words of the excerpts marked lately, by chunk: the most recently used, up to
    ``max_words`` words in all (0: none kept). A stored chunk never changes, and recall marks
    the current session's excerpts again every turn; tokenizing one (1-4 KB) costs about
    50 µs, looking it up about 1 µs.

    An excerpt's words are kept once it has been marked twice, or as soon as marking it took
    tokenizing it anyway: the first time, with few fact words to look for, finding them in the
    text is cheaper than tokenizing it, and most excerpts a search returns are never marked
    again (unified search over random queries: none of 1,404 in the benchmark). The excerpts
    marked once are remembered apart (SEEN_ONCE_MAX keys, no words), so they never push out
    kept words. An entry is keyed by the chunk's id and a hash of the text it was made from,
    so a reused id (a table emptied and filled again) never finds another text's words. The
    bound is in words, not excerpts, so long chunks cannot multiply the memory it takes.
    Not shared between threads (one per search service, on its event loop)."""

    __slots__ = ("_kept", "_seen", "_words", "hits", "max_words", "misses")

    def __init__(self, max_words: int = FRESHNESS_EXCERPT_WORDS) -> None:
        if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 0:
            raise InvalidInputError(
                f"ExcerptWords max_words must be an int, 0 or more; got {max_words!r}"
            )
        self.max_words = max_words
        self._kept: OrderedDict[_Key, frozenset[str]] = OrderedDict()
        self._seen: OrderedDict[_Key, None] = OrderedDict()
        self._words = 0
        self.hits = 0
        """Excerpts whose words were found kept."""
        self.misses = 0
        """Excerpts whose words were not kept (found in the text, or tokenized)."""

    def __len__(self) -> int:
        """Excerpts whose words are kept."""
        return len(self._kept)

    @property
    def words(self) -> int:
        """Words kept, in all (each excerpt's counted)."""
        return self._words

    def shared(self, chunk_id: int, text: str, wanted: set[str]) -> set[str]:
        """Which of ``wanted`` (content words) are content words of ``text``, chunk
        ``chunk_id``'s (content and breadcrumbs as mark_freshness joins them)."""
        key = (chunk_id, len(text), hash(text))
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
            self.hits += 1
            return wanted & found
        self.misses += 1
        if not self.max_words:
            return _words_in(text, wanted)
        if self._seen.pop(key, False) is False and not _tokenizes(text, wanted):
            self._seen[key] = None
            if len(self._seen) > SEEN_ONCE_MAX:
                self._seen.popitem(last=False)
            return _words_in(text, wanted)
        words = content_words(text)
        self._keep(key, words)
        return wanted & words

    def _keep(self, key: _Key, words: frozenset[str]) -> None:
        if len(words) > self.max_words:
            return
        self._kept[key] = words
        self._words += len(words)
        while self._words > self.max_words:
            _, gone = self._kept.popitem(last=False)
            self._words -= len(gone)

    def clear(self) -> None:
        """Forget every excerpt and reset the counts."""
        self._kept.clear()
        self._seen.clear()
        self._words = self.hits = self.misses = 0


def fact_words(facts: Iterable[FactVersion]) -> FactWords:
    """``facts`` with their content words, for mark_freshness (unified search makes them as
    soon as the facts are read, while the raw history may still be on its way)."""
    return FactWords(tuple((fact, content_words(fact.key, fact.value)) for fact in facts))


def mark_freshness(
    excerpts: Sequence[RawExcerpt],
    facts: Iterable[FactVersion] | FactWords,
    summary_at: Mapping[str, datetime | None],
    *,
    known: ExcerptWords | None = None,
) -> list[Freshness]:
    """The freshness marks of ``excerpts``, in their order.

    ``superseded_by``: the key of a fact of the excerpt's own user, updated strictly after the
    excerpt's ``ended_at``, sharing at least FRESHNESS_MIN_SHARED_WORDS content words with it
    (fact side: key + value; excerpt side: content + breadcrumbs). Of several, the one sharing
    the most words, then the newest, then the first key in sort order. ``facts`` may come as
    fact_words made beforehand.

    ``before_summary``: the excerpt ended strictly before ``summary_at[session_id]`` (a session
    missing from the mapping, or mapped to None, has no summary).

    ``known``: where the words of excerpts with a ``chunk_id`` are kept between calls (the
    marks are the same with or without it).
    """
    if not isinstance(facts, FactWords):
        facts = fact_words(facts)
    prepared = facts.facts
    marks: list[Freshness] = []
    for excerpt in excerpts:
        newer = [
            (fact, words_of_fact)
            for fact, words_of_fact in prepared
            if excerpt.user_id is not None
            and fact.user_id == excerpt.user_id
            and fact.updated_at > excerpt.ended_at
            and len(words_of_fact) >= FRESHNESS_MIN_SHARED_WORDS
        ]
        best: tuple[int, datetime, str] | None = None
        if newer:
            # A separator of its own: no word crosses from the text into a breadcrumb.
            text = "\n".join((excerpt.content, *excerpt.breadcrumbs))
            wanted = set().union(*(words for _, words in newer))
            if known is not None and excerpt.chunk_id is not None:
                shared_words = known.shared(excerpt.chunk_id, text, wanted)
            else:
                shared_words = _words_in(text, wanted)
            for fact, words_of_fact in newer:
                shared = len(words_of_fact & shared_words)
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


FIND_WORDS_MAX: Final = 40
"""Up to this many fact words are looked up in an excerpt one by one; more, it is tokenized."""


def _words_in(text: str, words: set[str]) -> set[str]:
    """Which of ``words`` (content words) are content words of ``text`` too.

    With few words and ASCII text (nearly every chunk) the text is not tokenized: each word is
    looked up with ``str.find`` and kept where it stands as a whole part of a token —
    separators or camelCase seams on both sides, no seam inside — which is exactly where
    ``content_words`` would have cut it. Measured on 2–4 KB chunks, FIND_WORDS_MAX finds cost
    about what tokenizing the chunk costs. Other text is tokenized (case folding is not
    per-position there)."""
    if _tokenizes(text, words):
        return words & content_words(text)
    lowered = text.lower()
    found: set[str] = set()
    for word in words:
        start = lowered.find(word)
        while start >= 0:
            if _whole_part(text, start, start + len(word)):
                found.add(word)
                break
            start = lowered.find(word, start + 1)
    return found


def _tokenizes(text: str, words: set[str]) -> bool:
    """_words_in tokenizes ``text`` to find ``words`` (rather than looking each one up)."""
    return len(words) > FIND_WORDS_MAX or not text.isascii()


def _whole_part(text: str, start: int, end: int) -> bool:
    """``text[start:end]`` is one part of a token: bounded by a separator or a seam on each
    side, and no seam inside (ASCII text)."""
    if start > 0 and text[start - 1].isalnum() and not _seam(text, start):
        return False
    if end < len(text) and text[end].isalnum() and not _seam(text, end):
        return False
    piece = text[start:end]
    return (
        piece.islower()
        or piece.isdigit()
        or not any(_seam(text, at) for at in range(start + 1, end))
    )


def _seam(text: str, at: int) -> bool:
    """A camelCase seam between ``text[at - 1]`` and ``text[at]``, as _CAMEL_BOUNDARY finds."""
    before, here = text[at - 1], text[at]
    if not here.isupper():
        return False
    if before.islower() or before.isdigit():
        return True
    return before.isupper() and at + 1 < len(text) and text[at + 1].islower()


def _ranks_before(a: tuple[int, datetime, str], b: tuple[int, datetime, str]) -> bool:
    """More shared words first, then the newer fact, then the smaller key."""
    if a[0] != b[0]:
        return a[0] > b[0]
    if a[1] != b[1]:
        return a[1] > b[1]
    return a[2] < b[2]
