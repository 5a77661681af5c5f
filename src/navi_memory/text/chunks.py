"""Raw chunks: pack the messages a compression demotes into verbatim, hashable text blocks.

Pure logic: ``build_chunks`` renders and packs; storing and embedding the chunks is the caller's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Final

from navi_memory.constants import (
    DEFAULT_CHUNK_MAX_CHARS,
    DEFAULT_MESSAGE_MAX_CHARS,
    MAX_TEXT_CHARS,
)
from navi_memory.errors import InvalidInputError
from navi_memory.schemas import ChunkDraft, Message

__all__ = [
    "DEFAULT_CHUNK_MAX_CHARS",
    "DEFAULT_MESSAGE_MAX_CHARS",
    "RENDERING_WORDS",
    "WHITESPACE",
    "build_chunks",
    "elide_middle",
    "elided_parts",
    "raw_history_terms",
    "render_message",
]

RENDERING_WORDS: Final = frozenset({"user", "assistant", "tool", "result", "call"})
"""The words render_message writes into every chunk ("User:", "Assistant:", "Tool result
(name):", "[Tool call]"): a query word among them matches every excerpt, whatever it says."""

_RENDERING_FORMS: Final = RENDERING_WORDS | frozenset(f"{word}s" for word in RENDERING_WORDS)


def raw_history_terms(terms: Sequence[str]) -> tuple[str, ...]:
    """``terms`` as the raw history's text search asks for them: without the words every
    chunk holds through its rendering (RENDERING_WORDS, and their plurals, whose stems they
    are), which made "user accounts" a hit of every excerpt on "user" and "users" a
    candidate of every one — unless nothing else is left ("tool results"): then all of them,
    as a query of stop words keeps its stop words."""
    kept = tuple(term for term in terms if term.casefold() not in _RENDERING_FORMS)
    return kept or tuple(terms)


WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Every character ``str.strip()`` removes: a user or assistant message of nothing else is
blank and never rendered. SQL that must agree with ``render_message`` trims exactly these."""

_JOIN: Final = "\n\n"
_SKIPPED_KINDS: Final = frozenset({"summary", "marker"})


def _elision_marker(count: int) -> str:
    return f"\n[… {count} characters elided …]\n"


def elide_middle(text: str, max_chars: int) -> str:
    """Cap ``text`` at ``max_chars`` by cutting its middle and saying how much was cut.

    The head and the tail survive because that is where a message states what it is about and
    what came of it. The result is never longer than ``max_chars``.
    """
    head, cut, tail = elided_parts(text, max_chars)
    return head + _elision_marker(cut) + tail if cut else head


def elided_parts(text: str, max_chars: int) -> tuple[str, int, str]:
    """What ``elide_middle`` keeps of ``text``: (head, characters cut, tail).

    Nothing cut: (text, 0, ""). A cap too small to say anything about the cut keeps the first
    ``max_chars`` characters: (head, characters cut, "") with no note.
    """
    if len(text) <= max_chars:
        return text, 0, ""
    # The marker's length depends on the count it reports: find the digit count that agrees
    # with itself. Sizing for len(text) always fits, so it is the fallback.
    budget = max_chars - len(_elision_marker(len(text)))
    for digits in range(1, len(str(len(text)))):
        candidate = max_chars - len(_elision_marker(10 ** (digits - 1)))
        if len(str(len(text) - candidate)) == digits:
            budget = candidate
            break
    if budget < 2:
        # Too small a cap to say anything about the cut: keep what fits.
        return text[:max_chars], 0, ""
    head = (budget + 1) // 2
    tail = budget - head
    return text[:head], len(text) - head - tail, text[len(text) - tail :]


def _clean(text: str) -> str:
    # A lone surrogate cannot be encoded as UTF-8: it would break the hash and the INSERT.
    # Round-tripping through UTF-16 joins valid pairs and turns strays into U+FFFD.
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def render_message(message: Message) -> str | None:
    """The verbatim line a message contributes to a chunk, or None when it is not history.

    System messages, compression summaries and markers are skipped, and so are user and
    assistant messages with nothing in them. Tool calls render as the assistant's request,
    with their arguments as compact JSON (keys sorted, so the same call always hashes alike),
    after the text the assistant said alongside the call, if any.
    """
    if message.role == "system" or message.kind in _SKIPPED_KINDS:
        return None
    if message.role == "tool_call":
        args = (
            ""
            if message.tool_args is None
            else json.dumps(
                message.tool_args,
                separators=(",", ":"),
                ensure_ascii=False,
                sort_keys=True,
                default=str,
            )
        )
        call = f"[Tool call] {message.tool_name or 'unknown'}({args})"
        # The assistant may say something alongside the call (as in the extractor's
        # transcript): that is conversation, kept verbatim before the call.
        if message.content.strip():
            return _clean(f"Assistant: {message.content}\n{call}")
        return _clean(f"Assistant: {call}")
    if message.role == "tool":
        # An empty tool result is still a result: the call happened and returned nothing.
        name = message.tool_name or "unknown"
        return _clean(f"Tool result ({name}): {message.content}")
    if not message.content.strip():
        return None
    prefix = "User: " if message.role == "user" else "Assistant: "
    return _clean(prefix + message.content)


def _draft(parts: list[tuple[Message, str]]) -> ChunkDraft:
    content = _JOIN.join(text for _, text in parts)
    first, last = parts[0][0], parts[-1][0]
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode("utf-8")).hexdigest(),
        start_seq=first.seq,
        end_seq=last.seq,
        started_at=first.created_at,
        ended_at=last.created_at,
    )


def build_chunks(
    messages: Sequence[Message],
    *,
    max_chars: int = DEFAULT_CHUNK_MAX_CHARS,
    message_max_chars: int = DEFAULT_MESSAGE_MAX_CHARS,
) -> list[ChunkDraft]:
    """Pack ``messages`` (in the order given) into chunks of up to ``max_chars`` characters.

    Each message is rendered by ``render_message`` and capped at ``message_max_chars`` with its
    middle elided; messages in a chunk are joined by a blank line. A message longer than
    ``max_chars`` after capping forms a chunk of its own, so such a chunk may exceed
    ``max_chars`` (never ``message_max_chars``). Breadcrumbs are left empty for the caller.
    """
    if not (1 <= max_chars <= MAX_TEXT_CHARS and 1 <= message_max_chars <= MAX_TEXT_CHARS):
        # A chunk holds at most max(max_chars, message_max_chars): no more than add_chunks
        # stores (MAX_TEXT_CHARS), whose text index entry PostgreSQL can hold.
        raise InvalidInputError(
            f"chunk sizes must be from 1 to {MAX_TEXT_CHARS:,} characters (max_chars="
            f"{max_chars}, message_max_chars={message_max_chars})"
        )
    chunks: list[ChunkDraft] = []
    current: list[tuple[Message, str]] = []
    current_len = 0
    for message in messages:
        rendered = render_message(message)
        if rendered is None:
            continue
        text = elide_middle(rendered, message_max_chars)
        if current and current_len + len(_JOIN) + len(text) > max_chars:
            chunks.append(_draft(current))
            current, current_len = [], 0
        current_len += (len(_JOIN) if current else 0) + len(text)
        current.append((message, text))
    if current:
        chunks.append(_draft(current))
    return chunks
