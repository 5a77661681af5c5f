"""The ``memory`` tool: the write side of memory — save, forget and list the user's curated facts,
and search those facts only (spec: "Memory tool", "memory vs memory_search").

Its function-calling spec and its argument rules; what each action does is the handler's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, get_args

from navi_memory.constants import (
    FACT_CATEGORY_MAX_CHARS,
    FACT_EXPIRES_MAX_DAYS,
    FACT_KEY_MAX_CHARS,
)
from navi_memory.services.facts import SOURCES
from navi_memory.tools.arguments import (
    choice,
    optional_int,
    optional_number,
    optional_text,
    required_text,
)

__all__ = [
    "MEMORY",
    "MEMORY_ACTIONS",
    "MEMORY_DESCRIPTION",
    "MEMORY_PARAMETERS",
    "ForgetFact",
    "ListCategories",
    "MemoryAction",
    "MemoryRequest",
    "SaveFact",
    "SearchFacts",
    "parse_memory_arguments",
]

MEMORY: Final = "memory"

MemoryAction: TypeAlias = Literal["save", "search", "forget", "list"]
MEMORY_ACTIONS: Final[tuple[MemoryAction, ...]] = get_args(MemoryAction)

MEMORY_DESCRIPTION: Final = (
    "Curated facts about the user: save, search, forget or list them. "
    'action="save" stores one fact (category, key, value); saving a key again replaces its '
    "value. Say where it came from (source) and how sure you are (confidence 0-100: tool output "
    "95, user statement 80, web 50, guess 30; left out, the source decides). "
    'action="search" finds stored facts only, by keyword (query). '
    'action="forget" deletes a fact by key (optionally only in one category): only when the '
    "user asks, or when a stored fact is clearly wrong or outdated. "
    'action="list" shows the categories that hold facts, with how many each, not the facts. '
    "This tool writes memory. To read everything remembered — facts, the earlier conversation "
    "that is no longer in view, scratchpad notes — use memory_search instead."
)

MEMORY_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": list(MEMORY_ACTIONS),
            "description": "save, search, forget or list.",
        },
        "category": {
            "type": "string",
            "description": (
                "save (required): the fact's category, e.g. preferences, personal, technical, "
                "work. forget: only delete the key in this category."
            ),
        },
        "key": {
            "type": "string",
            "description": "save and forget (required): the fact's name, e.g. editor, home_city.",
        },
        "value": {
            "type": "string",
            "description": "save (required): the fact itself, e.g. neovim.",
        },
        "source": {
            "type": "string",
            "enum": list(SOURCES),
            "description": (
                "save: where the fact came from; user_explicit when the user said it should be "
                "remembered, tool_call when a tool's output showed it. Default conversation."
            ),
        },
        "confidence": {
            "type": "integer",
            "minimum": 0,
            "maximum": 100,
            "description": (
                "save: how sure, 0-100 (tool output 95, user statement 80, web 50, guess 30). "
                "Left out, the source decides."
            ),
        },
        "expires_days": {
            "type": "number",
            "description": (
                f"save: forget the fact after this many days (at most {FACT_EXPIRES_MAX_DAYS}); "
                "leave out for a lasting fact."
            ),
        },
        "source_context": {
            "type": "string",
            "description": "save: where it was learned, in a few words.",
        },
        "query": {
            "type": "string",
            "description": "search (required): keywords to look for among the facts.",
        },
    },
    "required": ["action"],
}


@dataclass(frozen=True, slots=True)
class SaveFact:
    category: str
    key: str
    value: str
    source: str = "conversation"
    confidence: int | None = None
    expires_days: float | None = None
    source_context: str | None = None


@dataclass(frozen=True, slots=True)
class SearchFacts:
    query: str


@dataclass(frozen=True, slots=True)
class ForgetFact:
    key: str
    category: str | None = None


@dataclass(frozen=True, slots=True)
class ListCategories:
    pass


MemoryRequest: TypeAlias = SaveFact | SearchFacts | ForgetFact | ListCategories


def parse_memory_arguments(arguments: Mapping[str, Any]) -> MemoryRequest:
    """The action a ``memory`` call asks for, with its arguments checked; an
    ``InvalidInputError`` / ``InvalidTypeError`` worded for the model otherwise.

    Arguments that belong to another action are ignored; those of the action must be usable:
    text without NUL bytes and within the store's limits, a known source, a confidence from 0
    to 100, an expiry from 0 (exclusive) to 36500 days.
    """
    action = choice(arguments, "action", MEMORY_ACTIONS)
    if action == "save":
        return SaveFact(
            category=required_text(
                arguments,
                "category",
                max_chars=FACT_CATEGORY_MAX_CHARS,
                why="a category such as preferences, personal, technical or work",
            ).strip(),
            key=required_text(
                arguments, "key", max_chars=FACT_KEY_MAX_CHARS, why="the fact's name"
            ).strip(),
            value=required_text(arguments, "value", why="the fact to remember"),
            source=choice(arguments, "source", SOURCES, default="conversation"),
            confidence=optional_int(arguments, "confidence", minimum=0, maximum=100),
            expires_days=optional_number(
                arguments, "expires_days", above=0, maximum=FACT_EXPIRES_MAX_DAYS
            ),
            source_context=optional_text(arguments, "source_context"),
        )
    if action == "search":
        return SearchFacts(
            query=required_text(arguments, "query", why="keywords to look for among the facts")
        )
    if action == "forget":
        return ForgetFact(
            key=required_text(
                arguments, "key", max_chars=FACT_KEY_MAX_CHARS, why="the key of the fact to delete"
            ).strip(),
            category=_optional_stripped(
                optional_text(arguments, "category", max_chars=FACT_CATEGORY_MAX_CHARS)
            ),
        )
    return ListCategories()


def _optional_stripped(value: str | None) -> str | None:
    return None if value is None else value.strip()
