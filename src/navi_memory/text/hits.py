"""Unified search's plain parts: its scopes, the clamp on ``k``, and ``format_hits`` — the text
the ``memory_search`` tool answers with (spec: "Unified search"; docs/memory.md shows it).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal, get_args

from navi_memory.constants import (
    HIT_TEXT_MAX_CHARS,
    QUERY_ECHO_MAX_CHARS,
    SEARCH_K_MAX,
    SEARCH_K_MIN,
)
from navi_memory.errors import InvalidTypeError
from navi_memory.schemas import FactHit, MemoryHit
from navi_memory.text.terms import query_terms

__all__ = [
    "BEFORE_SUMMARY_LINE",
    "OUTDATED_LINE",
    "SEARCH_SCOPES",
    "SearchScope",
    "SeqCoverage",
    "clamp_k",
    "cut_text",
    "format_hit",
    "format_hits",
    "normalize_scope",
    "one_line",
    "recent_only_head",
]

SearchScope = Literal["all", "facts", "raw", "sketches"]
SEARCH_SCOPES: Final[tuple[SearchScope, ...]] = get_args(SearchScope)


@dataclass(slots=True)
class SeqCoverage:
    """The messages (seq ranges, per session) of the excerpts kept so far, to leave out an
    excerpt that holds no message they do not: a host's own chunk of seqs 1–2 beside
    compression's chunks of 1 and of 2 shows the messages twice. An excerpt with the very
    range of a kept one is not left out (another text filed under it: a host's pieces of one
    long message). ``group``: whose seqs they are (a session; of a user, where several users'
    excerpts meet)."""

    _spans: set[tuple[Hashable, int, int]] = field(default_factory=set)
    _merged: dict[Hashable, list[tuple[int, int]]] = field(default_factory=dict)

    def covers(self, group: Hashable, start: int | None, end: int | None) -> bool:
        """Whether the kept excerpts of ``group`` hold every message of ``start``–``end``
        and none has that very range (False for an excerpt without a range)."""
        if start is None or end is None or end < start or (group, start, end) in self._spans:
            return False
        return any(a <= start and end <= b for a, b in self._merged.get(group, ()))

    def add(self, group: Hashable, start: int | None, end: int | None) -> None:
        """Keep ``start``–``end`` of ``group`` (nothing for an excerpt without a range)."""
        if start is None or end is None or end < start:
            return
        self._spans.add((group, start, end))
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self._merged.get(group, ()), (start, end)]):
            if merged and a <= merged[-1][1] + 1:  # overlapping or adjacent: 1–2, 3–4 hold 1–4
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self._merged[group] = merged


OUTDATED_LINE: Final = "⚠ outdated: a newer curated fact overrides this"
"""Shown under a raw excerpt marked ``superseded_by`` (the spec's wording)."""

BEFORE_SUMMARY_LINE: Final = (
    "before summary: a verbatim record from before this session's latest summary"
)
"""Shown under a raw excerpt marked ``before_summary``: the summary now in the session's
context is newer than this excerpt and may have changed what it says."""

_INDENT: Final = "   "
_WHERE: Final[dict[SearchScope, str]] = {
    "all": "facts, raw history or sketches",
    "facts": "facts",
    "raw": "raw history",
    "sketches": "sketches",
}
_WHITESPACE = re.compile(r"\s+")
# Every line break ``str.splitlines`` knows (``\r\n`` as one): stored text may hold any of
# them, and a reader (a model, a terminal) may take any of them for a new line.
_LINE_BREAK_CHARS: Final = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile(rf"\r\n|[{_LINE_BREAK_CHARS}]")


def normalize_scope(scope: str) -> SearchScope:
    """``scope`` as one of SEARCH_SCOPES, case and surrounding blanks ignored; anything unknown
    is ``all`` (spec)."""
    folded = scope.strip().lower()
    for known in SEARCH_SCOPES:
        if folded == known:
            return known
    return "all"


def clamp_k(k: int) -> int:
    """Hits per store, clamped to SEARCH_K_MIN..SEARCH_K_MAX (spec: never an error)."""
    return max(SEARCH_K_MIN, min(SEARCH_K_MAX, k))


def cut_text(text: str, limit: int = HIT_TEXT_MAX_CHARS, terms: Sequence[str] = ()) -> str:
    """``text`` up to ``limit`` characters; a longer one is cut, and each cut is marked with
    how many characters were left out.

    The part shown is the start, unless ``terms`` (the query's words, case ignored) occur
    further on: then it is the stretch of ``limit`` characters holding the most distinct
    terms (the earliest such), from the start of the line (or word) a little before the
    first of them. A chunk holds up to CHUNK_MAX_CHARS (4,000): cut at the start only, the
    excerpt a search found for its last lines would show everything but them."""
    if len(text) <= limit:
        return text
    start = _window_start(text, limit, terms) if terms else 0
    if start == 0:
        return f"{text[:limit].rstrip()} … [cut: {len(text) - limit:,} more characters]"
    end = min(len(text), start + limit)
    shown = text[start:end].rstrip()
    after = f" … [cut: {len(text) - end:,} more characters]" if end < len(text) else ""
    return f"[cut: {start:,} characters before] … {shown}{after}"


_WINDOW_LEAD: Final = 200
"""How much of what comes before the first term a window shows (context for the match)."""


def _window_start(text: str, limit: int, terms: Sequence[str]) -> int:
    """Where the shown part of ``text`` starts (see cut_text): 0 when the start already holds
    as many distinct terms as any stretch of ``limit`` characters. Each term is looked for as
    a whole word first ("cat", not the one in "concatenated"), else at the start of a word
    ("zebra" in "zebras"), else anywhere."""
    distinct = {term.casefold(): term for term in reversed(terms) if term.strip()}
    matches = sorted(
        found for key, term in distinct.items() for found in _occurrences(text, term, key)
    )
    if not matches:
        return 0
    head = len({word for begin, end, word in matches if end <= limit})
    # The stretch (first match to last, within limit - lead) with the most distinct terms.
    span = max(1, limit - _WINDOW_LEAD)
    best_count, best_first = 0, 0
    counts: dict[str, int] = {}
    left = 0
    for right, (_, end, word) in enumerate(matches):
        counts[word] = counts.get(word, 0) + 1
        # Never past the match just counted: a term longer than the span is a stretch alone.
        while left < right and end - matches[left][0] > span:
            gone = matches[left][2]
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
            left += 1
        if len(counts) > best_count:
            best_count, best_first = len(counts), matches[left][0]
    if best_count <= head:
        return 0
    start = max(0, min(best_first - _WINDOW_LEAD, len(text) - limit))
    # From the start of a line, else of a word, when one is near: not from inside a word.
    near = min(best_first, start + _WINDOW_LEAD)
    line = text.find("\n", start, near)
    if line >= 0:
        return line + 1
    blank = text.find(" ", start, near)
    return blank + 1 if blank >= 0 else start


def _occurrences(text: str, term: str, key: str) -> list[tuple[int, int, str]]:
    """(start, end, ``key``) of each occurrence of ``term`` (case ignored) in ``text``: as a
    whole word, else at the start of a word, else anywhere — the first of these that finds
    any. Every occurrence counts: a common word's thousands never hide a rare one."""
    escaped = re.escape(term)
    for pattern in (rf"(?<!\w){escaped}(?!\w)", rf"(?<!\w){escaped}", escaped):
        found = [
            (match.start(), match.end(), key) for match in re.finditer(pattern, text, re.IGNORECASE)
        ]
        if found:
            return found
    return []


def _when(moment: datetime) -> str:
    # A naive time is taken as UTC already; every time the package stores carries a zone.
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    # Not strftime: its %Y leaves years below 1000 unpadded (glibc).
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}"
    )


def _indented(text: str) -> list[str]:
    # Every line, whatever breaks it, is indented: stored text never reaches the margin,
    # where it could read as an entry of its own. Blank lines stay empty, so the output
    # carries no trailing blanks.
    return [f"{_INDENT}{line}" if line.strip() else "" for line in _LINE_BREAK.split(text)]


def one_line(text: str) -> str:
    """``text`` for a line that must stay one line (a title, a key): each line break, with the
    blanks around it, becomes one space (a split, not a regex over the blanks: linear)."""
    lines = _LINE_BREAK.split(text)
    if len(lines) == 1:
        return text
    return " ".join(stripped for stripped in (line.strip() for line in lines) if stripped)


def _echo(query: str) -> str:
    one_line = _WHITESPACE.sub(" ", query).strip()
    if len(one_line) > QUERY_ECHO_MAX_CHARS:
        return one_line[:QUERY_ECHO_MAX_CHARS].rstrip() + "…"
    return one_line


def _title(hit: MemoryHit, *, show_user: bool = False) -> str:
    # Stored names (a session id, a category, a sketch's section) may hold line breaks (a
    # model names scratchpad sections): on the title line they are spaces. A part the hit
    # does not have (a hit made by hand needs only source_type, text and timestamp) is left
    # out, never shown as "None" or an empty name.
    session = f" · session {one_line(hit.session_id)}" if hit.session_id else ""
    if show_user:  # hits of several users (a read_all search): whose each one is
        session = f" · user {hit.user_id or 'none'}{session}"
    if hit.source_type == "fact":
        category = _name(hit.category)
        shown = f" [{category}]" if category else ""
        return f"fact{shown}{session} · updated {_when(hit.timestamp)}"
    if hit.source_type == "raw":
        return f"raw{session}{_turns(hit.start_seq, hit.end_seq)} · {_when(hit.timestamp)}"
    key = _name(hit.key)
    return f"sketch{session} · {key}" if key else f"sketch{session}"


def _name(value: str | None) -> str:
    """A stored name for the title line or a fact's key: one line, without outer blanks
    (empty when the hit has none)."""
    return one_line(value).strip() if value else ""


def _turns(start: int | None, end: int | None) -> str:
    """`` · turn 12–14``, `` · turn 12`` for one message (or one end known), nothing
    when neither is known."""
    if start is None or end is None or start == end:
        known = start if start is not None else end
        return "" if known is None else f" · turn {known}"
    return f" · turn {start}–{end}"


def _body(hit: MemoryHit, terms: Sequence[str] = ()) -> list[str]:
    if hit.source_type == "fact":
        key = _name(hit.key)
        value = cut_text(hit.text, terms=terms)
        return _indented(f"{key}: {value}" if key else value)
    if hit.source_type == "sketch":
        return _indented(cut_text(hit.text, terms=terms))
    lines: list[str] = []
    if hit.superseded_by is not None:
        lines.append(_INDENT + OUTDATED_LINE)
    if hit.before_summary:
        lines.append(_INDENT + BEFORE_SUMMARY_LINE)
    if hit.breadcrumbs:
        keys = ", ".join(one_line(crumb) for crumb in hit.breadcrumbs)
        lines.append(_INDENT + "keys: " + cut_text(keys))
    return lines + _indented(cut_text(hit.text, terms=terms))


def format_hits(query: str, scope: str, hits: Sequence[MemoryHit]) -> str:
    """The ``memory_search`` answer: a header, a blank line, one numbered entry per hit (times
    in UTC), in the order given; with no hits, one line saying nothing was found. When every
    hit is a recent item (``via="recent"``: the query held no word to search for), the header
    says so rather than counting hits. Hits of more than one user (a read_all search) name
    their user on the title line (`` · user <id>``, before the session).

    An unknown ``scope`` shows as ``all``, as search treats it. Texts longer than
    HIT_TEXT_MAX_CHARS are cut around the query's words (cut_text), and the cut is marked.
    Whatever a stored text holds, each entry starts one numbered line: names on the title line
    (a session, a category, a section) and breadcrumbs show their line breaks as spaces, and
    every line of a body is indented.
    A ``query`` or ``scope`` that is not a str, or ``hits`` that are not MemoryHits, is an
    InvalidTypeError.
    """
    _check_arguments(query, scope, hits)
    shown = normalize_scope(scope)
    head = f'memory_search "{_echo(query)}" (scope={shown})'
    if not hits:
        return f"{head}: nothing found in {_WHERE[shown]}."
    recent = recent_only_head(hits, "item(s)")
    lines = [f"{head}: {recent or f'{len(hits)} hit(s)'}", ""]
    # Hits of more than one user (a search across every user, read_all): each names whose
    # it is, or the model would take another user's fact for this one's.
    show_user = len({hit.user_id for hit in hits}) > 1
    terms = query_terms(query)
    lines.extend(
        format_hit(number, hit, show_user=show_user, terms=terms)
        for number, hit in enumerate(hits, start=1)
    )
    return "\n".join(lines)


def _check_arguments(query: object, scope: object, hits: object) -> None:
    if not isinstance(query, str):
        raise InvalidTypeError(f"query must be a str, got {type(query).__name__}")
    if not isinstance(scope, str):
        raise InvalidTypeError(f"scope must be a str, got {type(scope).__name__}")
    if not isinstance(hits, Sequence) or isinstance(hits, str):
        raise InvalidTypeError(f"hits must be a sequence of MemoryHit, got {type(hits).__name__}")
    for hit in hits:
        if not isinstance(hit, MemoryHit):
            raise InvalidTypeError(
                f"hits must be MemoryHit objects (memory.search's), got {type(hit).__name__}"
            )


def recent_only_head(hits: Sequence[MemoryHit | FactHit], noun: str) -> str | None:
    """What a search answer's header says when every hit is a recent item (``via="recent"``:
    the query held no word to search for, so they match nothing; said so, or the model takes
    them for matches); None when there is a real hit."""
    if not hits or any(hit.via != "recent" for hit in hits):
        return None
    return f"the query has no word to search for; here are the {len(hits)} most recent {noun}"


def format_hit(
    number: int, hit: MemoryHit, *, show_user: bool = False, terms: Sequence[str] = ()
) -> str:
    """One numbered entry of ``format_hits`` (its title line, then its indented body); the
    context builder's recall message renders its excerpts with it too. ``show_user``: the
    title names the hit's user too. ``terms``: the query's words, which a long text is cut
    around (cut_text)."""
    return "\n".join([f"{number}. {_title(hit, show_user=show_user)}", *_body(hit, terms)])
