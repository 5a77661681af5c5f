"""Unified search's plain parts: its scopes, the clamp on ``k``, and ``format_hits`` — the text
the ``memory_search`` tool answers with (spec: "Unified search"; docs/memory.md shows it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, Literal, get_args

from navi_memory.constants import (
    HIT_TEXT_MAX_CHARS,
    QUERY_ECHO_MAX_CHARS,
    SEARCH_K_MAX,
    SEARCH_K_MIN,
)
from navi_memory.schemas import MemoryHit

__all__ = [
    "BEFORE_SUMMARY_LINE",
    "OUTDATED_LINE",
    "SEARCH_SCOPES",
    "SearchScope",
    "clamp_k",
    "cut_text",
    "format_hit",
    "format_hits",
    "normalize_scope",
]

SearchScope = Literal["all", "facts", "raw", "sketches"]
SEARCH_SCOPES: Final[tuple[SearchScope, ...]] = get_args(SearchScope)

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


def cut_text(text: str, limit: int = HIT_TEXT_MAX_CHARS) -> str:
    """``text`` up to ``limit`` characters; a longer one is cut there and the cut is marked
    with how many characters were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} … [cut: {len(text) - limit:,} more characters]"


def _when(moment: datetime) -> str:
    # A naive time is taken as UTC already; every time the package stores carries a zone.
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M")


def _indented(text: str) -> list[str]:
    # Blank lines stay empty, so the output carries no trailing blanks.
    return [f"{_INDENT}{line}" if line.strip() else "" for line in text.split("\n")]


def _echo(query: str) -> str:
    one_line = _WHITESPACE.sub(" ", query).strip()
    if len(one_line) > QUERY_ECHO_MAX_CHARS:
        return one_line[:QUERY_ECHO_MAX_CHARS].rstrip() + "…"
    return one_line


def _title(hit: MemoryHit) -> str:
    session = f" · session {hit.session_id}" if hit.session_id else ""
    if hit.source_type == "fact":
        return f"fact [{hit.category}]{session} · updated {_when(hit.timestamp)}"
    if hit.source_type == "raw":
        turns = (
            f"{hit.start_seq}" if hit.start_seq == hit.end_seq else f"{hit.start_seq}–{hit.end_seq}"
        )
        return f"raw{session} · turn {turns} · {_when(hit.timestamp)}"
    return f"sketch{session} · {hit.key}"


def _body(hit: MemoryHit) -> list[str]:
    if hit.source_type == "fact":
        return _indented(f"{hit.key}: {cut_text(hit.text)}")
    if hit.source_type == "sketch":
        return _indented(cut_text(hit.text))
    lines: list[str] = []
    if hit.superseded_by is not None:
        lines.append(_INDENT + OUTDATED_LINE)
    if hit.before_summary:
        lines.append(_INDENT + BEFORE_SUMMARY_LINE)
    if hit.breadcrumbs:
        lines.append(_INDENT + "keys: " + cut_text(", ".join(hit.breadcrumbs)))
    return lines + _indented(cut_text(hit.text))


def format_hits(query: str, scope: str, hits: Sequence[MemoryHit]) -> str:
    """The ``memory_search`` answer: a header, a blank line, one numbered entry per hit (times
    in UTC), in the order given; with no hits, one line saying nothing was found.

    An unknown ``scope`` shows as ``all``, as search treats it. Texts longer than
    HIT_TEXT_MAX_CHARS are cut, and the cut is marked.
    """
    shown = normalize_scope(scope)
    head = f'memory_search "{_echo(query)}" (scope={shown})'
    if not hits:
        return f"{head}: nothing found in {_WHERE[shown]}."
    lines = [f"{head}: {len(hits)} hit(s)", ""]
    lines.extend(format_hit(number, hit) for number, hit in enumerate(hits, start=1))
    return "\n".join(lines)


def format_hit(number: int, hit: MemoryHit) -> str:
    """One numbered entry of ``format_hits`` (its title line, then its indented body); the
    context builder's recall message renders its excerpts with it too."""
    return "\n".join([f"{number}. {_title(hit)}", *_body(hit)])
