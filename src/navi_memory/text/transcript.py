"""The transcript the extractor shows the model: a session's history as plain text lines.

Pure logic: which messages count, how tool calls and results read, and the overall cut.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Final

from navi_memory.constants import TRANSCRIPT_MAX_CHARS, TRANSCRIPT_TOOL_OUTPUT_MAX_CHARS
from navi_memory.errors import InvalidInputError
from navi_memory.schemas import Message
from navi_memory.text.chunks import elide_middle
from navi_memory.text.terms import query_terms, unspaced

__all__ = ["render_transcript", "says_again", "transcript_line"]

_SKIPPED_KINDS: Final = frozenset({"summary", "marker"})


def transcript_line(
    message: Message, *, tool_output_max_chars: int = TRANSCRIPT_TOOL_OUTPUT_MAX_CHARS
) -> str | None:
    """The text one message contributes to a transcript, or None when it contributes nothing.

    ``User: …`` and ``Assistant: …`` for the conversation, ``[Tool call] name(args)`` (the
    arguments as compact JSON, keys sorted) and ``[Tool result] name: output``, both cut to
    ``tool_output_max_chars``. System messages, compression summaries and markers are not the
    conversation (a summary retells messages the history still holds), and blank messages say
    nothing: all are left out. Whether a message is still in the context does not matter.
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
        args = elide_middle(args, tool_output_max_chars)
        call = f"[Tool call] {message.tool_name or 'unknown'}({args})"
        # The assistant may say something alongside the call; that is conversation too.
        said = message.content.strip()
        return f"Assistant: {said}\n{call}" if said else call
    if message.role == "tool":
        output = elide_middle(message.content, tool_output_max_chars)
        return f"[Tool result] {message.tool_name or 'unknown'}: {output}"
    if not message.content.strip():
        return None
    prefix = "User: " if message.role == "user" else "Assistant: "
    return prefix + message.content


def render_transcript(
    messages: Iterable[Message],
    *,
    max_chars: int = TRANSCRIPT_MAX_CHARS,
    tool_output_max_chars: int = TRANSCRIPT_TOOL_OUTPUT_MAX_CHARS,
) -> str:
    """``messages`` (in the order given) as the extractor's transcript, one line per message.

    Messages demoted by compression are included: they are the session's history, and the
    facts in them are what extraction is for. A transcript longer than ``max_chars`` keeps its
    head and its tail and says how much of the middle was cut (``elide_middle``): the head is
    where a conversation says who and what, the tail where it settles. Empty when no message
    has anything to say.
    """
    if max_chars < 1 or tool_output_max_chars < 1:
        raise InvalidInputError(
            f"transcript sizes must be positive (max_chars={max_chars}, "
            f"tool_output_max_chars={tool_output_max_chars})"
        )
    lines = (transcript_line(m, tool_output_max_chars=tool_output_max_chars) for m in messages)
    return elide_middle("\n".join(line for line in lines if line is not None), max_chars)


def says_again(value: str, said: Iterable[str]) -> bool:
    """Whether one of the user's messages ``said`` states ``value`` again: holds each of its
    words (stop words aside), or the whole value, as words — "Rome" is not in "Chrome", nor
    "2" in "12" — with case and Unicode form ignored; a word of a script written without
    spaces (``unspaced``) is matched inside the letters around it. How the extractor tells a
    user who repeats a fact after forgetting or changing it elsewhere from a conversation that
    only went on (services/extraction.py): a paraphrase ("I live in the Czech capital" for
    "Prague") is not a restatement, and the older word is then left out."""
    wanted = _folded(value)
    if not wanted:
        return False
    whole = _as_word(wanted)
    # Runs of Han, kana or Hangul whole, not as pairs: every word must be found, and pairs
    # found anywhere are not the value ("不喝咖啡" in "我喝咖啡，不喝茶").
    words = [_as_word(term) for term in query_terms(wanted, limit=64, pairs=False)]
    for message in said:
        text = _folded(message)
        if whole.search(text) or (words and all(word.search(text) for word in words)):
            return True
    return False


def _folded(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold().strip()


def _as_word(text: str) -> re.Pattern[str]:
    """``text`` found as a word of its own (not inside a longer word), or anywhere for a word
    of an unspaced script."""
    escaped = re.escape(text)
    return re.compile(escaped if unspaced([text]) else rf"(?<!\w){escaped}(?!\w)")
