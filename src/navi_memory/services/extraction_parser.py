"""Reading the extractor's model replies: fact drafts out of whatever JSON a model returns.

Models asked for JSON answer in many shapes. Everything readable is taken, every unusable item
is skipped and counted. A failure is a reply with no JSON in it at all, or one cut off before its
first complete fact (parse_extracted_facts).
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from navi_memory.constants import (
    EXTRACTION_MAX_FACTS,
    FACT_CATEGORY_MAX_CHARS,
    FACT_KEY_MAX_CHARS,
    FACT_SUMMARY_MAX_CHARS,
    MAX_TEXT_CHARS,
)
from navi_memory.errors import ExtractionError
from navi_memory.services.facts import SOURCES, confidence_for_source
from navi_memory.text.chunks import elide_middle
from navi_memory.text.keys import normalize_key
from navi_memory.validation import is_blank

__all__ = [
    "DEFAULT_CATEGORY",
    "FactDraft",
    "ParsedFacts",
    "parse_extracted_facts",
    "parse_summary",
]

DEFAULT_CATEGORY: Final = "general"
"""The category of a fact the model gave none."""

DEFAULT_SOURCE: Final = "conversation"
"""The source of a fact whose source is missing or not one of ``SOURCES``."""

# Where a JSON value may start: "[" before a value or "]", "{" before a key or "}". Brackets in
# prose ("[as requested]", "{name}") do not qualify, so they are never mistaken for the reply.
_START: Final = re.compile(r"\[(?=\s*[\[{\"\]\d\-tfn])|\{(?=\s*[\"}])")
_ARRAY_START: Final = re.compile(r"\[(?=\s*[\[{\"\]\d\-tfn])")
_FENCE: Final = re.compile(r"```[\w+-]*[^\S\n]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_INT_DIGITS_MAX: Final = 4000
"""Longer integer literals stay text: Python refuses to convert more than 4,300 digits (a
plain ValueError, not a JSONDecodeError), and a model's 5,000-digit "number" is an identifier
at best."""


def _parse_int(digits: str) -> int | str:
    return int(digits) if len(digits) <= _INT_DIGITS_MAX else digits


_DECODER: Final = json.JSONDecoder(parse_int=_parse_int)
_NEXT_ELEMENT: Final = re.compile(r",\s*\{")
_MAX_BROKEN_STARTS: Final = 20
"""Broken JSON starts tried before giving up: each try reads on to the end of the reply, so
an unbounded number would make a hostile reply quadratic."""
_MAX_FENCES: Final = 20
"""Code fences read before the reply as a whole."""
_MAX_BROKEN_ITEMS: Final = 100
"""Broken items of an array read past before giving up on the rest: each costs a pass over
the reply up to it (the decoder's error works out its line number), so an unbounded number
would make a long reply of broken items quadratic (10 s for 2 MB)."""

# Wrapper names a model puts around the list; any other name of a list or object is a category.
_WRAPPERS: Final = frozenset(
    {
        "facts",
        "fact",
        "items",
        "data",
        "result",
        "results",
        "memories",
        "memory",
        "extracted_facts",
        "stable_facts",
        "user_facts",
        "output",
        "response",
    }
)
_FACT_FIELDS: Final = frozenset({"key", "value"})


@dataclass(frozen=True, slots=True)
class FactDraft:
    """A fact read from a reply, ready for ``upsert_fact``: text fields cleaned and within the
    store's limits, ``source`` one of ``SOURCES``, ``confidence`` from the source."""

    category: str
    key: str
    value: str
    source: str
    confidence: int
    source_context: str | None


@dataclass(frozen=True, slots=True)
class ParsedFacts:
    """What one reply held: the usable facts, in reply order, and the items skipped."""

    facts: tuple[FactDraft, ...]
    skipped: int
    truncated: bool = False
    """The JSON was cut off (or broken) part-way; the complete items before the break count."""


def _clean(text: str) -> str:
    # PostgreSQL text holds neither NUL nor lone surrogates; JSON escapes can produce both.
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


# --- finding the JSON ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Found:
    value: Any
    truncated: bool = False
    lost: int = 0
    """Items seen but unreadable while salvaging a broken array."""
    opened_at: tuple[str, int] | None = None
    """Where salvaged JSON started (the text, the index): ``cut_off`` reads from there."""
    more: tuple[Any, ...] = ()
    """Complete values holding facts that follow ``value`` in the reply ("Preferences: [...]
    Environment: [...]"): read too, not dropped uncounted."""

    @property
    def cut_off(self) -> bool:
        """The salvaged JSON was still open where the reply ended (a string or a bracket not
        closed): the model stopped mid-answer, not "broken JSON" such as a bad escape. Read
        on demand: a pass over the rest of the reply, for the one JSON value kept."""
        return self.opened_at is not None and _ends_open(*self.opened_at)


# A JSON string (closed, or running to the end of the text) or a bracket: what decides whether
# the text ends inside an open value. Strings are matched whole, so brackets in them do not
# count; one regex pass, C speed even over a runaway reply.
_OPEN_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*(")?|[\[\]{}]', re.DOTALL)


def _ends_open(text: str, start: int) -> bool:
    """Whether the JSON value starting at ``start`` is still open where ``text`` ends."""
    depth = 0
    for token in _OPEN_TOKEN.finditer(text, start):
        lexeme = token.group()
        if lexeme[0] == '"':
            if token.group(1) is None:  # no closing quote (an escaped one is not)
                return True  # a string running to the end of the text
        elif lexeme in "[{":
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return False  # the value closed (what follows is prose, or another value)
    return depth > 0


def _holds_facts(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and (not value or any(isinstance(v, dict) for v in value))


def _python_literal(text: str, start: int) -> Any:
    """A Python-literal reading of the bracketed text at ``start`` (single quotes, True/None,
    trailing commas: what a model imitating a Python repr writes), or None."""
    closing = "]" if text[start] == "[" else "}"
    end = text.rfind(closing)
    if end <= start:
        return None
    try:
        return ast.literal_eval(text[start : end + 1])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _skip_separators(text: str, pos: int) -> int:
    while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
        pos += 1
    return pos


def _salvage_array(text: str, start: int) -> _Found:
    """The complete items of the array opening at ``start``, reading on past broken ones
    (resuming at the next object) until the text ends: a reply cut off by the model's length
    limit keeps every item it finished."""
    items: list[Any] = []
    lost = 0
    pos = start + 1
    while True:
        pos = _skip_separators(text, pos)
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            item, pos = _DECODER.raw_decode(text, pos)
        except RecursionError:
            # Nested deeper than Python's stack: junk, and nothing after it can be trusted.
            lost += 1
            break
        except json.JSONDecodeError as exc:
            lost += 1
            if lost >= _MAX_BROKEN_ITEMS:
                break
            if not items and text[pos] != "{":
                # Not an array of objects at all ("[to be done]" in prose): give it up, so
                # the JSON after it is found whole.
                break
            # Resume where the next element starts (an object after a comma).
            resume = _NEXT_ELEMENT.search(text, max(exc.pos, pos + 1))
            if resume is None:
                break
            pos = resume.end() - 1
            continue
        items.append(item)
    return _Found(items, truncated=True, lost=lost, opened_at=(text, start))


def _salvage(text: str, start: int) -> _Found:
    if text[start] == "[":
        return _salvage_array(text, start)
    # A broken object: the list inside it (``{"facts": [...``) is what can be saved. One
    # search for it: stepping through every "{" on the way made each broken start as slow
    # as a Python loop over the rest of the reply.
    inner = _ARRAY_START.search(text, start + 1)
    if inner is None:
        return _Found([], truncated=True, lost=1, opened_at=(text, start))
    return _salvage_array(text, inner.start())


def _find_json(text: str) -> _Found | None:
    """The reply's JSON: the first value that can hold facts, else the first value at all,
    else what can be salvaged from broken JSON; None when there is no JSON in ``text``."""
    fallback: _Found | None = None
    broken: _Found | None = None
    attempts = 0
    pos = 0
    while (match := _START.search(text, pos)) is not None:
        start = match.start()
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            literal = _python_literal(text, start)
            if _holds_facts(literal):
                return _Found(literal)
            salvaged = _salvage(text, start)
            if any(isinstance(v, dict) for v in salvaged.value):
                return salvaged
            broken = broken or salvaged
            attempts += 1
            if attempts >= _MAX_BROKEN_STARTS:
                break
            pos = start + 1
            continue
        if _holds_facts(value):
            more, lost = _more_facts(text, end)
            return _Found(value, lost=lost, more=more)
        fallback = fallback or _Found(value)
        pos = end
    return fallback or broken


def _more_facts(text: str, pos: int) -> tuple[tuple[Any, ...], int]:
    """The JSON values after ``pos`` that are lists of objects or fact objects, and how many
    items of theirs were lost: an array cut off or broken keeps its complete items (as the
    first one does), and the values end there (the rest is prose or junk)."""
    more = []
    lost = 0
    while (match := _START.search(text, pos)) is not None:
        try:
            value, pos = _DECODER.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):
            if text[match.start()] == "[":
                salvaged = _salvage_array(text, match.start())
                if any(isinstance(v, dict) for v in salvaged.value):
                    more.append(salvaged.value)
                    lost += salvaged.lost
            break
        if _holds_more_facts(value):
            more.append(value)
    return tuple(more), lost


def _holds_more_facts(value: Any) -> bool:
    return (isinstance(value, list) and any(isinstance(v, dict) for v in value)) or (
        _looks_like_fact(value)
    )


def _fenced_more(fences: Sequence[str]) -> tuple[tuple[Any, ...], int]:
    """The facts of the fenced blocks after the one read ("```json [...]```" twice)."""
    more: list[Any] = []
    lost = 0
    for fence in fences:
        try:
            value = _DECODER.decode(fence)
        except (json.JSONDecodeError, RecursionError):
            found = _find_json(fence)
            if found is not None and _holds_more_facts(found.value):
                more += [found.value, *found.more]
                lost += found.lost
            continue
        if _holds_more_facts(value):
            more.append(value)
    return tuple(more), lost


def _locate(reply: str) -> _Found | None:
    reply = reply.strip().lstrip("\ufeff")
    try:
        return _Found(_DECODER.decode(reply))
    except (json.JSONDecodeError, RecursionError):
        pass
    # Fenced blocks first (the first few: a reply of thousands is junk, and each costs a
    # search), the prose around them may hold brackets of its own.
    fences = [m.group(1).strip() for m in itertools.islice(_FENCE.finditer(reply), _MAX_FENCES)]
    best: _Found | None = None
    for index, candidate in enumerate([*fences, reply]):
        try:
            found: _Found | None = _Found(_DECODER.decode(candidate))
        except (json.JSONDecodeError, RecursionError):
            found = _find_json(candidate)
        if found is not None and not found.truncated:
            if index < len(fences) - 1:  # the fences after it may hold facts too
                more, lost = _fenced_more(fences[index + 1 :])
                found = replace(found, more=found.more + more, lost=found.lost + lost)
            return found
        best = best or found
    return best


# --- from JSON to items -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Item:
    raw: Any
    category: str | None = None
    """The category the reply's shape implies (a list under ``"preferences"``), if any."""


def _lower_keys(value: Mapping[Any, Any]) -> dict[str, Any]:
    return {k.strip().lower(): v for k, v in value.items() if isinstance(k, str)}


def _looks_like_fact(value: Any) -> bool:
    return isinstance(value, dict) and bool(_FACT_FIELDS & _lower_keys(value).keys())


def _items(value: Any, *, depth: int = 0) -> tuple[list[_Item], int]:
    """The fact items in a reply's JSON, and how many parts of it were no item at all."""
    if value is None:
        return [], 0
    if isinstance(value, list):
        return [_Item(v) for v in value], 0
    if isinstance(value, str):
        # Some models return the JSON as a JSON string.
        inner = _find_json(value) if depth == 0 else None
        if inner is None:
            return [], 1
        unwrapped, stray = _items(inner.value, depth=depth + 1)
        return unwrapped, stray + inner.lost
    if not isinstance(value, dict):
        return [], 1
    if _looks_like_fact(value):
        return [_Item(value)], 0
    items: list[_Item] = []
    stray = 0
    # Beside a list or an object, a plain value is the reply's metadata ("count": 3), not a
    # fact. A flat mapping of plain values ({"error": "none"}) is not read as facts either: a
    # guessed fact does more harm than a missed one.
    structured = any(isinstance(part, list | dict) for part in value.values())
    for name, part in value.items():
        category = None if str(name).strip().lower() in _WRAPPERS else str(name)
        if isinstance(part, list):
            items.extend(_Item(v, category) for v in part)
        elif _looks_like_fact(part):
            items.append(_Item(part, category))
        elif isinstance(part, dict) and category is not None:
            # {"preferences": {"editor": "neovim"}}: categories holding key -> value.
            items.extend(
                _Item({"key": k, **v} if isinstance(v, dict) else {"key": k, "value": v}, category)
                for k, v in part.items()
            )
        elif isinstance(part, dict):
            nested, nested_stray = _items(part, depth=depth + 1) if depth < 2 else ([], 1)
            items.extend(nested)
            stray += nested_stray
        elif part is not None and not structured:
            stray += 1
    return items, stray


def _text(value: Any) -> str | None:
    """A field as clean, non-blank text: strings, numbers and lists of them; else None."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, str):
        text = _clean(value).strip()
        return None if is_blank(text) else text
    if isinstance(value, list) and value and len(value) <= 100:
        parts = [_text(v) if not isinstance(v, list | dict) else None for v in value]
        if all(p is not None for p in parts):
            return ", ".join(p for p in parts if p is not None)
    return None


def _name(text: str) -> str:
    """A category or key: cleaned, each run of whitespace (a newline, a tab) one space; ""
    when nothing of it shows (zero-width characters alone)."""
    name = " ".join(_clean(text).split())
    return "" if is_blank(name) else name


def _source(value: Any) -> str:
    if not isinstance(value, str):
        return DEFAULT_SOURCE
    source = re.sub(r"[\s-]+", "_", value.strip().lower())
    return source if source in SOURCES else DEFAULT_SOURCE


def _draft(item: _Item) -> FactDraft | None:
    if not isinstance(item.raw, dict):
        return None
    fields = _lower_keys(item.raw)
    raw_category = fields.get("category")
    if raw_category is None or raw_category == "":
        raw_category = item.category
    if raw_category is not None and not isinstance(raw_category, str):
        return None
    category = _name(raw_category or "").lower() or DEFAULT_CATEGORY
    raw_key = fields.get("key")
    key = _name(raw_key) if isinstance(raw_key, str) else ""
    value = _text(fields.get("value"))
    if not key or value is None:
        return None
    if len(category) > FACT_CATEGORY_MAX_CHARS or len(key) > FACT_KEY_MAX_CHARS:
        return None
    if len(value) > MAX_TEXT_CHARS:
        return None
    source = _source(fields.get("source"))
    context = _text(fields.get("source_context"))
    if context is not None and len(context) > MAX_TEXT_CHARS:
        context = None
    return FactDraft(
        category=category,
        key=key,
        value=value,
        source=source,
        confidence=confidence_for_source(source),
        source_context=context,
    )


def parse_extracted_facts(reply: str, *, max_facts: int = EXTRACTION_MAX_FACTS) -> ParsedFacts:
    """The facts in a model's extraction reply, and how many items were skipped.

    Accepted: a JSON array of fact objects; an object holding one (``{"facts": [...]}``, or
    lists under category names); a single fact object; categories mapping keys to values; any of
    these inside code fences, with prose around them, as a JSON string, or written as a Python
    literal; and arrays of facts or fact objects that follow the first, in order. JSON cut off
    part-way keeps its complete items. Per item: ``key`` and ``value`` are required (a number, a
    boolean or a list of them becomes text); ``category`` defaults to "general" and is
    lower-cased; whitespace runs in a category or key become one space; an unknown ``source``
    becomes "conversation"; extra fields are ignored. An item that is not an object, lacks a
    field, has a field of the wrong type or beyond the store's limits is skipped and counted; so
    is every item past ``max_facts``. An item repeating an earlier one (the same category, key
    and value; models do repeat themselves) is left out uncounted: writing it again would only
    re-verify the fact. Not when a fact of another value for the key, or for another spelling of
    it, came in between: written after that, the item changes the fact back, as the reply's
    order says, so it is kept. Raises ``ExtractionError`` when the reply holds no JSON at all,
    or was cut off before its first complete fact (it ends inside an open string or bracket: the
    model ran out of room, which is not an answer of "nothing to remember", as ``[]`` is; JSON
    that is broken but closed, a bad escape say, is an unusable item counted). Items that are
    all unusable are counted, not a failure: asked again, a model gives the same shape.
    """
    found = _locate(reply)
    if found is None:
        raise ExtractionError(
            f"the model's reply holds no JSON: {elide_middle(reply.strip(), 200)!r}"
        )
    items, skipped = _items(found.value)
    for value in found.more:
        more, stray = _items(value)
        items += more
        skipped += stray
    skipped += found.lost
    facts: list[FactDraft] = []
    # The last fact kept for each (category, key spelling): an item is a repeat only when it
    # writes what that one wrote. After a fact of another value for the key (or for another
    # spelling of it, which the upsert's dedupe merges), it changes the fact back: kept.
    latest: dict[tuple[str, str], tuple[str, str]] = {}
    for item in items:
        draft = _draft(item)
        if draft is None:
            skipped += 1
            continue
        slot = (draft.category, normalize_key(draft.key))
        if latest.get(slot) == (draft.key, draft.value):
            continue  # a repeat: written again it would only re-verify the fact
        if len(facts) >= max_facts:
            skipped += 1
            continue
        latest[slot] = (draft.key, draft.value)
        facts.append(draft)
    if not facts and found.cut_off:
        # The model ran out of room before its first fact was complete: an answer cut off,
        # not "nothing to remember" (the session is left for the next run). Broken JSON that
        # is complete (a bad escape, a bracket in prose) is not: asked again, the same.
        raise ExtractionError(
            "the model's reply was cut off before its first complete fact: "
            f"{elide_middle(reply.strip(), 200)!r}"
        )
    return ParsedFacts(tuple(facts), skipped, truncated=found.truncated)


_SUMMARY_FENCE: Final = re.compile(r"\A```[\w-]*[^\S\n]*\n(.*?)\n?```\Z", re.DOTALL)


def parse_summary(reply: str, *, max_chars: int = FACT_SUMMARY_MAX_CHARS) -> str:
    """The summary text of a model's reply: cleaned, unfenced, cut to ``max_chars``.

    Raises ``ExtractionError`` when no word is left: the old summary is better than none.
    """
    text = _clean(reply).strip()
    fenced = _SUMMARY_FENCE.match(text)
    if fenced is not None:
        text = fenced.group(1).strip()
    if not text:
        raise ExtractionError("the model's summary reply is empty")
    if not any(character.isalnum() for character in text):
        # Punctuation alone, or what cleaning left of NUL bytes and lone surrogates ("?").
        raise ExtractionError("the model's summary reply holds no word")
    return elide_middle(text, max_chars)
