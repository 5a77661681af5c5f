"""The ``memory`` tool: the write side of memory — save, forget and list the user's curated facts,
and search those facts only (spec: "Memory tool", "memory vs memory_search").

Its function-calling spec and its argument rules; what each action does is the handler's.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol, TypeAlias, get_args

from navi_memory.constants import (
    FACT_CATEGORY_MAX_CHARS,
    FACT_EXPIRES_MAX_DAYS,
    FACT_KEY_MAX_CHARS,
    HIT_TEXT_MAX_CHARS,
    QUERY_ECHO_MAX_CHARS,
    TOOL_EXPIRES_MIN_DAYS,
)
from navi_memory.errors import InvalidInputError
from navi_memory.schemas import Fact, FactHit, ForgetResult
from navi_memory.services.facts import SOURCES
from navi_memory.text.context import fact_line
from navi_memory.text.hits import one_line, recent_only_head
from navi_memory.text.keys import stored_category
from navi_memory.tools.arguments import (
    choice,
    optional_int,
    optional_number,
    optional_text,
    required_text,
)
from navi_memory.tools.base import Tool, ToolContext, tool_error

__all__ = [
    "MEMORY",
    "MEMORY_ACTIONS",
    "MEMORY_DESCRIPTION",
    "MEMORY_PARAMETERS",
    "FactStore",
    "ForgetFact",
    "ListCategories",
    "MemoryAction",
    "MemoryRequest",
    "SaveFact",
    "SearchFacts",
    "memory_tool",
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
            "minimum": TOOL_EXPIRES_MIN_DAYS,
            "maximum": FACT_EXPIRES_MAX_DAYS,
            "description": (
                "save: forget the fact after this many days (from "
                f"{TOOL_EXPIRES_MIN_DAYS:g} to {FACT_EXPIRES_MAX_DAYS}); "
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
            category=_category(
                required_text(
                    arguments,
                    "category",
                    max_chars=FACT_CATEGORY_MAX_CHARS,
                    why="a category such as preferences, personal, technical or work",
                )
            ),
            key=_key(
                required_text(arguments, "key", max_chars=FACT_KEY_MAX_CHARS, why="the fact's name")
            ),
            value=required_text(arguments, "value", why="the fact to remember"),
            source=choice(arguments, "source", SOURCES, default="conversation"),
            confidence=optional_int(arguments, "confidence", minimum=0, maximum=100),
            expires_days=optional_number(
                arguments,
                "expires_days",
                minimum=TOOL_EXPIRES_MIN_DAYS,
                maximum=FACT_EXPIRES_MAX_DAYS,
                unit=" days",
            ),
            source_context=optional_text(arguments, "source_context"),
        )
    if action == "search":
        return SearchFacts(
            query=required_text(arguments, "query", why="keywords to look for among the facts")
        )
    if action == "forget":
        category = optional_text(arguments, "category", max_chars=FACT_CATEGORY_MAX_CHARS)
        return ForgetFact(
            key=_key(
                required_text(
                    arguments,
                    "key",
                    max_chars=FACT_KEY_MAX_CHARS,
                    why="the key of the fact to delete",
                )
            ),
            category=None if category is None else _category(category),
        )
    return ListCategories()


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _category_form(category: str) -> str:
    """A category as the tool stores and compares it: NFC, trimmed, lower-cased. A model writes
    "Preferences" one day and "preferences" the next, or "café" composed one day and as "e" plus
    an accent the next: each pair would be two identical-looking categories, two facts."""
    # NFC again after lower(): a capital can lower to a base letter and a combining mark.
    return _nfc(_nfc(category).strip().lower())


def _within(name: str, sent: str, stored: str, max_chars: int, how: str) -> str:
    """``stored`` (``sent`` as the tool stores it) if it is within ``max_chars``. Normalizing can
    lengthen text ("İ" lowers to "i" and a combining dot): the model hears what it sent."""
    if len(stored) > max_chars:
        raise InvalidInputError(
            f"{name} is {len(sent):,} characters long as sent, {len(stored):,} once {how} "
            f"(some letters, such as 'İ', grow); the limit is {max_chars:,}: use a shorter {name}"
        )
    return stored


def _category(sent: str) -> str:
    form = _category_form(sent)
    return _within("category", sent, form, FACT_CATEGORY_MAX_CHARS, "lower-cased")


def _key(sent: str) -> str:
    """A key as the tool stores it: NFC and trimmed (its case is kept: dedupe folds it)."""
    return _within("key", sent, _nfc(sent).strip(), FACT_KEY_MAX_CHARS, "in Unicode NFC")


# --- the handler ------------------------------------------------------------------------------


class FactStore(Protocol):
    """What the tool needs of ``memory.store`` (``MemoryStore`` provides it)."""

    async def upsert_fact(
        self,
        category: str,
        key: str,
        value: str,
        *,
        source: str = "conversation",
        confidence: int | None = None,
        expires_days: float | None = None,
        source_context: str | None = None,
        user_id: uuid.UUID | str | None = None,
        dedupe: bool = False,
    ) -> Fact: ...

    async def search_facts(
        self, query: str, user_id: uuid.UUID | str | None = None, limit: int = 15
    ) -> list[FactHit]: ...

    async def forget_facts(
        self, key: str, category: str | None = None, user_id: uuid.UUID | str | None = None
    ) -> ForgetResult: ...

    async def fact_categories(
        self, user_id: uuid.UUID | str | None = None
    ) -> list[tuple[str, int]]: ...

    async def get_all_facts(
        self, *, category: str | None = None, search: str | None = None
    ) -> list[Fact]: ...


def memory_tool(store: FactStore) -> Tool:
    """The ``memory`` tool on ``store``: every action acts for the context's user (the request
    context's, when the ToolContext names none); ``save`` writes with ``dedupe=True``, and
    without a confidence takes the store's default for the source."""

    async def handle(arguments: Mapping[str, Any], context: ToolContext) -> str:
        request = parse_memory_arguments(arguments)
        if context.user_id is None and isinstance(request, SaveFact | ForgetFact):
            # read_all with no user (Tool.needs_user let it through): reads cover every user,
            # a write has no user to go to, and no argument can give it one.
            return tool_error(
                MEMORY,
                "this conversation acts for no user (an operator's read-all view): memory can "
                "be searched and listed here, not changed; no argument can change that",
            )
        with context.applied():
            if isinstance(request, SaveFact):
                return await _save(store, request)
            if isinstance(request, SearchFacts):
                return await _search(store, request)
            if isinstance(request, ForgetFact):
                return await _forget(store, request)
            return await _list(store)

    return Tool(
        name=MEMORY,
        description=MEMORY_DESCRIPTION,
        parameters=MEMORY_PARAMETERS,
        handler=handle,
        needs_user=True,
    )


def _spellings(categories: list[str], category: str) -> list[str]:
    """Of ``categories``, those that are ``category`` (in ``_category_form``) but for case and
    Unicode form, in their order: what an application or an operator wrote as "Technical", or
    as a decomposed "Café", is the tool's "technical" and "café"."""
    return [name for name in categories if _category_form(name) == category]


async def _stored_spellings(store: FactStore, category: str) -> list[str]:
    """The user's categories that are ``category`` but for case and Unicode form, the fullest
    first."""
    return _spellings([name for name, _ in await store.fact_categories()], category)


async def _save(store: FactStore, request: SaveFact) -> str:
    # Into the category as the user stores it (text.keys.stored_category).
    categories = [name for name, _ in await store.fact_categories()]

    async def keys_of(name: str) -> list[str]:
        return [fact.key for fact in await store.get_all_facts(category=name)]

    category = await stored_category(request.category, request.key, categories, keys_of)
    if category not in categories:
        # stored_category matches spellings by case only: a category stored in another Unicode
        # form (an application's decomposed "café") is still this one; take the fullest.
        category = next(iter(_spellings(categories, request.category)), category)
    fact = await store.upsert_fact(
        category,
        request.key,
        request.value,
        source=request.source,
        confidence=request.confidence,
        expires_days=request.expires_days,
        source_context=request.source_context,
        dedupe=True,
    )
    line = fact_line(fact, now=datetime.now(UTC), text_max_chars=HIT_TEXT_MAX_CHARS)
    expiry = (
        ""
        if fact.expires_at is None
        else f"; it expires {fact.expires_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    )
    return f"memory: saved\n{line}\nsource: {fact.source}{expiry}"


async def _search(store: FactStore, request: SearchFacts) -> str:
    hits = await store.search_facts(request.query)
    echo = " ".join(request.query.split())[:QUERY_ECHO_MAX_CHARS]
    if not hits:
        return f'memory search "{echo}": no stored fact matches.'
    now = datetime.now(UTC)
    head = recent_only_head(hits, "fact(s)") or f"{len(hits)} fact(s)"
    lines = [f'memory search "{echo}": {head}', ""]
    # Facts of more than one user (a read_all search with no current user): each line names
    # whose it is, as memory_search's hits do, or the model takes another user's fact for
    # this one's ("editor → emacs" beside "editor → neovim").
    show_user = len({hit.user_id for hit in hits}) > 1
    for hit in hits:
        line = fact_line(hit, now=now, text_max_chars=HIT_TEXT_MAX_CHARS)
        lines.append(f"{line} · user {hit.user_id or 'none'}" if show_user else line)
    return "\n".join(lines)


async def _forget(store: FactStore, request: ForgetFact) -> str:
    # The key as the tool reads it (NFC), and decomposed: an application may have stored it
    # so (upsert_fact keeps a key as given), and the model types what it read back.
    # A form longer than a key may be can be no stored key (upsert_fact refuses it).
    keys = [
        key
        for key in dict.fromkeys((request.key, unicodedata.normalize("NFD", request.key)))
        if len(key) <= FACT_KEY_MAX_CHARS
    ]
    # No category: every category, in one call per key (so the forget is remembered in every
    # category); else the category under every case it is stored in (see _save).
    categories: list[str | None] = [None]
    if request.category is not None:
        categories = list(await _stored_spellings(store, request.category) or [request.category])
    removed, expired = await _delete(store, keys, categories)
    if not removed:
        # Not stored as written: under the same key but for case ("EDITOR" for the "Editor" a
        # save kept), if any.
        removed, expired_too = await _delete(
            store, await _keys_but_for_case(store, request, categories), categories
        )
        expired += expired_too
    scope = f" in category {request.category!r}" if request.category is not None else ""
    if not removed and expired:
        # Past its expiry the fact was no longer shown, but its row was there: it is gone now
        # (and the summary with it), which the answer must not deny.
        return (
            f"memory: the fact with the key {request.key!r}{scope} had already expired and was "
            f"no longer shown; its stored row is deleted now ({expired} row(s))."
        )
    if not removed:
        return f"memory: nothing to forget, no stored fact has the key {request.key!r}{scope}."
    # Name what went: a key merged into another (a hidden spelling) deletes that other fact.
    noun = "fact" if len(removed) == 1 else "facts"
    # One line each, as every stored name the tools show: a line break in a name (an
    # application's, a model's save) must not read as a line of the answer.
    names = ", ".join(f"[{one_line(fact.category)}] {one_line(fact.key)}" for fact in removed)
    spelling = ""
    spelled = sum(_nfc(fact.key) != request.key for fact in removed)
    if spelled:
        if spelled == len(removed):
            it = "it" if spelled == 1 else "them"
        else:
            it = "one of them" if spelled == 1 else f"{spelled} of them"
        spelling = f" (the key {request.key!r} is another spelling of {it})"
    return f"memory: forgot {len(removed)} {noun}: {names}{spelling}"


async def _delete(
    store: FactStore, keys: list[str], categories: list[str | None]
) -> tuple[list[Fact], int]:
    """The visible facts deleted, and how many expired rows went with them."""
    removed: list[Fact] = []
    expired = 0
    for category in categories:
        for key in keys:
            result = await store.forget_facts(key, category)
            removed += result.facts
            expired += result.expired
    return removed, expired


async def _keys_but_for_case(
    store: FactStore, request: ForgetFact, categories: list[str | None]
) -> list[str]:
    """The stored keys of visible facts in ``categories`` (None: every category) that are
    ``request.key`` but for case and Unicode form, read through the key's ILIKE. Nothing
    fuzzier: a forget deletes, and "language" must not take main_language with it."""
    wanted = _nfc(request.key).casefold()
    facts: list[Fact] = []
    for category in categories:
        facts += await store.get_all_facts(category=category, search=request.key)
    return sorted({fact.key for fact in facts if _nfc(fact.key).casefold() == wanted})


async def _list(store: FactStore) -> str:
    categories = await store.fact_categories()
    if not categories:
        return "memory: no facts are stored yet."
    total = sum(count for _, count in categories)
    lines = [f"memory: {total} fact(s) in {len(categories)} categories", ""]
    lines.extend(f"• {one_line(category)}: {count}" for category, count in categories)
    return "\n".join(lines)
