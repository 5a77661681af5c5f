"""The extractor's two prompts: facts from a transcript, and the user's summary from the facts.

Both live here, with the code that turns their input into chat messages, so one file holds
everything the model is told.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from navi_memory.constants import SUMMARY_FACT_MAX_CHARS, SUMMARY_MAX_FACTS
from navi_memory.llm.chat import ChatTurn
from navi_memory.schemas import Fact
from navi_memory.text.chunks import elide_middle

__all__ = [
    "EXTRACTION_PROMPT",
    "FACT_SUMMARY_PROMPT",
    "extraction_messages",
    "summary_facts",
    "summary_messages",
]

EXTRACTION_PROMPT: Final = """\
You read a conversation between a user and an AI assistant and extract stable facts about \
the user: things that will still be true, and useful to the assistant, in later conversations.

Worth keeping: the user's preferences and habits (editor, languages, food, style of answers), \
their environment (operating system, hardware, tools and their versions, services they run), \
their projects and work, the people in their life, where they live, lasting plans and \
constraints (allergies, deadlines that stay relevant).
Not facts: the task of the moment, questions the user asked, what the assistant said or \
suggested unless the user confirmed it, guesses, and secrets — never output a password, API \
key, token or private key.
When the user corrects something, output only the corrected value. Output each fact once.

Answer with JSON only, in exactly this shape:
{"facts": [{"category": "...", "key": "...", "value": "...", "source": "...", \
"source_context": "..."}]}
- category: one lower-case word, such as preferences, environment, projects, work, people, \
personal, health, location.
- key: a short snake_case name of what the fact is about (editor, operating_system, \
spouse_name). The same thing always gets the same key.
- value: the fact itself, short and self-contained, as text.
- source: "user_explicit" when the user said it; "tool_call" when a tool result in the \
conversation showed it; "auto_discovery" when the assistant found it on the user's files or \
systems by itself; "conversation" when it is inferred from the conversation.
- source_context: a few words on where in the conversation it was learned.
If nothing is worth keeping, answer {"facts": []}."""

FACT_SUMMARY_PROMPT: Final = """\
You write the short note an assistant reads at the start of every conversation with a user: \
what it remembers about them. You are given the facts on record, most recently confirmed \
first, each with its confidence (0-100).
Write a few sentences of plain prose, at most about 150 words, in the language of the facts: \
who the user is, how they like to work, their environment and projects, the people they \
mention. Where two facts disagree, trust the one listed first. Say "probably" for a fact \
below 80. Invent nothing. Do not list every fact: the assistant sees the facts themselves \
as well; the note is the picture they make together."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def extraction_messages(transcript: str) -> list[ChatTurn]:
    """The conversation to send for fact extraction: the prompt, then the transcript."""
    return [
        ChatTurn("system", EXTRACTION_PROMPT),
        ChatTurn("user", f"The conversation, oldest first:\n\n{transcript}"),
    ]


def _recency(fact: Fact) -> tuple[datetime, int]:
    # Never verified (legacy rows) sorts last; the id keeps equal times in a stable order.
    return (fact.last_verified_at or fact.updated_at or _EPOCH, fact.id)


def summary_facts(facts: Sequence[Fact], *, max_facts: int = SUMMARY_MAX_FACTS) -> list[Fact]:
    """The facts a summary is written from: the ``max_facts`` most recently verified, newest
    first (a user with thousands of facts still gets a prompt of bounded size)."""
    return sorted(facts, key=_recency, reverse=True)[: max(max_facts, 0)]


def _one_line(text: str) -> str:
    # A line break in any part (keys and categories may hold one) would start what reads as
    # another fact of the record.
    return " ".join(elide_middle(text, SUMMARY_FACT_MAX_CHARS).split())


def _fact_line(fact: Fact) -> str:
    confidence = "?" if fact.confidence is None else str(fact.confidence)
    category, key, value = _one_line(fact.category), _one_line(fact.key), _one_line(fact.value)
    return f"- [{category}] {key}: {value} (confidence {confidence})"


def summary_messages(
    facts: Sequence[Fact], *, max_facts: int = SUMMARY_MAX_FACTS
) -> list[ChatTurn]:
    """The conversation to send for the user's summary: the prompt, then one line per fact
    (``summary_facts`` picks and orders them)."""
    lines = "\n".join(_fact_line(fact) for fact in summary_facts(facts, max_facts=max_facts))
    return [
        ChatTurn("system", FACT_SUMMARY_PROMPT),
        ChatTurn("user", f"The facts on record, most recently confirmed first:\n\n{lines}"),
    ]
