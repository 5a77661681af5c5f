"""The ``memory_search`` tool: the read side of memory, one query over facts, raw history and
sketches (spec: "Search tool"). Its spec, its argument rules, and its handler on unified search.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from navi_memory.constants import SEARCH_K_DEFAULT, SEARCH_K_MAX, SEARCH_K_MIN
from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.request_context import current_session_id, current_user_id
from navi_memory.schemas import MemoryHit
from navi_memory.text.hits import SEARCH_SCOPES, SearchScope, clamp_k, format_hits, normalize_scope
from navi_memory.tools.arguments import json_type
from navi_memory.tools.base import Tool, ToolContext
from navi_memory.validation import check_text

__all__ = [
    "MEMORY_SEARCH",
    "MEMORY_SEARCH_DESCRIPTION",
    "MEMORY_SEARCH_PARAMETERS",
    "MemorySearchArguments",
    "Searcher",
    "ShownRecorder",
    "memory_search_tool",
    "parse_memory_search_arguments",
]

logger = logging.getLogger(__name__)

MEMORY_SEARCH: Final = "memory_search"

MEMORY_SEARCH_DESCRIPTION: Final = (
    "Search everything remembered about the user in one query: curated facts, the verbatim "
    "history that dropped out of your conversations with them (this one and earlier ones), "
    "and the scratchpad sketches (this session's first). "
    "Use it when the user refers back to something you can no longer see ('as we discussed', "
    "'the port we picked', 'that file', a name, a number, a link, a decision) before saying "
    "you do not remember. Facts come first; a raw excerpt a newer fact overrides is marked "
    "outdated, and the newer fact wins."
)

MEMORY_SEARCH_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "What to look for: a name, a file, a command, a value, a topic.",
        },
        "scope": {
            "type": "string",
            "enum": list(SEARCH_SCOPES),
            "default": "all",
            "description": (
                "all (default), facts (curated facts), raw (verbatim earlier history) or "
                "sketches (scratchpad notes)."
            ),
        },
        "k": {
            "type": "integer",
            "minimum": SEARCH_K_MIN,
            "maximum": SEARCH_K_MAX,
            "default": SEARCH_K_DEFAULT,
            "description": f"Results per store, {SEARCH_K_MIN}-{SEARCH_K_MAX}.",
        },
    },
    "required": ["query"],
}

_INTEGER_TEXT = re.compile(r"\s*([+-]?)(\d+)\s*")


@dataclass(frozen=True, slots=True)
class MemorySearchArguments:
    """The arguments of one ``memory_search`` call, checked and normalised."""

    query: str
    scope: SearchScope = "all"
    k: int = SEARCH_K_DEFAULT


def parse_memory_search_arguments(arguments: Mapping[str, Any]) -> MemorySearchArguments:
    """Check and normalise decoded arguments (InvalidInputError / InvalidTypeError, with a
    message for the model, when they cannot be used).

    ``query``: required, non-blank text. ``scope``: absent or null is ``all``; an unknown name
    falls back to ``all`` (spec). ``k``: absent or null is 5; clamped to 1–20 (spec); a whole
    number given as a float (``5.0``) or as text (``"5"``) is taken, as models send both.
    Arguments the tool does not know are ignored.
    """
    query = arguments.get("query")
    if query is None:
        raise InvalidInputError(
            "query is required: say what to look for (a name, a file, a command, a value, a topic)"
        )
    if not isinstance(query, str):
        raise InvalidTypeError(f"query must be a string, got {json_type(query)}")
    if not query.strip():
        raise InvalidInputError("query is empty: say what to look for")
    query = check_text("query", query)
    return MemorySearchArguments(
        query=query, scope=_scope(arguments.get("scope")), k=_k(arguments.get("k"))
    )


def _scope(value: Any) -> SearchScope:
    if value is None:
        return "all"
    if not isinstance(value, str):
        raise InvalidTypeError(
            f"scope must be one of {', '.join(SEARCH_SCOPES)}, got {json_type(value)}"
        )
    return normalize_scope(value)


def _k(value: Any) -> int:
    if value is None:
        return SEARCH_K_DEFAULT
    if isinstance(value, int) and not isinstance(value, bool):
        return clamp_k(value)
    if isinstance(value, float) and value.is_integer():
        return clamp_k(int(value))
    if isinstance(value, str) and (whole := _INTEGER_TEXT.fullmatch(value)):
        sign, digits = whole.groups()
        digits = digits.lstrip("0") or "0"
        if len(digits) > 9:  # clamped as an int of that size is, without converting it
            return SEARCH_K_MIN if sign == "-" else SEARCH_K_MAX
        return clamp_k(int(sign + digits))
    raise InvalidTypeError(
        f"k must be a whole number from {SEARCH_K_MIN} to {SEARCH_K_MAX}, got {json_type(value)}"
    )


class Searcher(Protocol):
    """What the tool needs of unified search (``UnifiedMemorySearch`` provides it)."""

    async def search(
        self,
        query: str,
        scope: str = "all",
        k: int = SEARCH_K_DEFAULT,
        *,
        current_session_id: str | None = None,
        summary_at: datetime | None = None,
    ) -> list[MemoryHit]: ...


class ShownRecorder(Protocol):
    """Where the tool records the session's excerpts it showed (``ContextBuilder``)."""

    async def record_shown(self, session_id: str, hits: Sequence[MemoryHit]) -> None: ...


def memory_search_tool(searcher: Searcher, shown: ShownRecorder | None = None) -> Tool:
    """The ``memory_search`` tool on ``searcher``: it searches the context's user, ranks the
    context's session first and takes its last summary as the freshness boundary. With
    ``shown``, the session's raw excerpts it returns go into the session's recall ledger
    (the model has them in its context now: recall must not inject them again)."""

    async def handle(arguments: Mapping[str, Any], context: ToolContext) -> str:
        args = parse_memory_search_arguments(arguments)
        with context.applied():
            hits = await searcher.search(
                args.query, args.scope, args.k, current_session_id=context.session_id
            )
            session_id = current_session_id()  # the context's, applied above
            if shown is not None and session_id is not None and current_user_id() is not None:
                try:
                    await shown.record_shown(session_id, hits)
                except Exception:
                    # The answer stands: at worst recall shows an excerpt twice.
                    logger.warning(
                        "memory_search.ledger_failed: session %s",
                        session_id,
                        exc_info=True,
                        extra={"event": "memory_search.ledger_failed", "session_id": session_id},
                    )
        return format_hits(args.query, args.scope, hits)

    return Tool(
        name=MEMORY_SEARCH,
        description=MEMORY_SEARCH_DESCRIPTION,
        parameters=MEMORY_SEARCH_PARAMETERS,
        handler=handle,
        needs_user=True,
    )
