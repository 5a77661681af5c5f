"""The memory parts of an agent's prompt as text: the summary message and the facts block
(spec: "Memory injection into agent context"). Pure: the context builder hands in what it read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final

from navi_memory.schemas import Fact

__all__ = [
    "FACTS_BLOCK_HEADER",
    "FACT_LINE_TEXT_MAX_CHARS",
    "MEMORY_MESSAGE_HEADER",
    "fact_age",
    "fact_line",
    "facts_block_text",
    "memory_message_text",
    "prompt_facts",
]

MEMORY_MESSAGE_HEADER: Final = "## What I remember about the user"
"""The spec's memory message starts with this line, then a blank line and the summary."""

FACTS_BLOCK_HEADER: Final = "## Facts about the user"

FACT_LINE_TEXT_MAX_CHARS: Final = 300
"""A fact's value (and key, category) is cut here in the facts block, the cut marked with "…":
the block rides in every prompt, so one 100,000-character value must not take it over. The
whole value is one ``memory`` search away."""

_WHITESPACE = re.compile(r"\s+")


def memory_message_text(summary: str | None) -> str | None:
    """The memory message's content for ``summary``; None when there is no summary to show
    (the message is then left out of the prompt)."""
    if summary is None or not summary.strip():
        return None
    return f"{MEMORY_MESSAGE_HEADER}\n\n{summary.strip()}"


def _verified_at(fact: Fact) -> datetime | None:
    """When the fact was last written or confirmed: the age the block shows and sorts by."""
    return fact.last_verified_at or fact.updated_at or fact.created_at


def _aware(moment: datetime) -> datetime:
    # Every time the package stores carries a zone; a naive one is taken as UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _visible(fact: Fact, now: datetime) -> bool:
    if fact.merged_into is not None:
        return False
    return fact.expires_at is None or _aware(fact.expires_at) > now


def prompt_facts(facts: Iterable[Fact], *, now: datetime) -> list[Fact]:
    """The facts a prompt may show, most recently verified first (then most recently updated,
    then the newest row). Hidden (merged) and expired facts are left out here as well, although
    the read that fetched them already filters them: the block must never show one."""
    now = _aware(now)
    visible = [fact for fact in facts if _visible(fact, now)]
    floor = datetime.min.replace(tzinfo=UTC)

    def order(fact: Fact) -> tuple[datetime, datetime, int]:
        verified = _verified_at(fact)
        updated = fact.updated_at or fact.created_at
        return (
            _aware(verified) if verified else floor,
            _aware(updated) if updated else floor,
            fact.id,
        )

    return sorted(visible, key=order, reverse=True)


def fact_age(fact: Fact, *, now: datetime) -> str:
    """``updated 34d ago``, ``updated today`` (less than a day; a clock ahead of ``now`` too),
    or ``updated ?`` when the fact carries no time at all."""
    moment = _verified_at(fact)
    if moment is None:
        return "updated ?"
    days = (_aware(now) - _aware(moment)).days
    return "updated today" if days < 1 else f"updated {days}d ago"


def _one_line(text: str, limit: int = FACT_LINE_TEXT_MAX_CHARS) -> str:
    # A newline inside a value would start what reads as a new line of the block.
    flat = _WHITESPACE.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def fact_line(fact: Fact, *, now: datetime, text_max_chars: int = FACT_LINE_TEXT_MAX_CHARS) -> str:
    """``• [preferences] editor → neovim (confidence: 90%, updated 34d ago)``; an unknown
    confidence reads ``confidence: ?``. Each text is put on one line and cut at
    ``text_max_chars``, the cut marked with "…"."""
    confidence = "?" if fact.confidence is None else f"{fact.confidence}%"
    category = _one_line(fact.category, text_max_chars)
    key = _one_line(fact.key, text_max_chars)
    value = _one_line(fact.value, text_max_chars)
    return f"• [{category}] {key} → {value} (confidence: {confidence}, {fact_age(fact, now=now)})"


def facts_block_text(
    facts: Sequence[Fact], *, now: datetime, max_facts: int, total: int | None = None
) -> str | None:
    """The facts block: a header that states the cap, then one line a fact, most recently
    verified first, at most ``max_facts`` of them. None when no fact is left to show.

    ``total`` is how many visible facts the user holds when the caller fetched only the first
    ``max_facts`` (the block then says how many more there are); by default ``len(facts)``.
    """
    shown = prompt_facts(facts, now=now)
    if not shown or max_facts < 1:
        return None
    held = max(len(shown), total if total is not None else 0)
    shown = shown[:max_facts]
    lines = [
        FACTS_BLOCK_HEADER,
        "",
        f"Most recently verified first, at most {max_facts} shown (MEMORY_PROMPT_MAX_FACTS). "
        "A low confidence or an old update may mean the fact is stale: verify it before "
        "relying on it.",
        "",
    ]
    lines.extend(fact_line(fact, now=now) for fact in shown)
    hidden = held - len(shown)
    if hidden > 0:
        lines.append(
            f"… and {hidden} more not shown here: look them up with the memory tool "
            '(action "search").'
        )
    return "\n".join(lines)
