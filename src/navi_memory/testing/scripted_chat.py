"""An in-process ``ToolChatModel`` answering scripted replies, for tests that do not need HTTP."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from navi_memory.errors import ChatModelError
from navi_memory.llm.chat import (
    ChatMessages,
    ChatReply,
    ToolCall,
    ToolSpec,
    checked_tool_specs,
    message_dicts,
    reply_tool_calls,
)

__all__ = ["ScriptedChatCall", "ScriptedChatModel", "ScriptedReply"]

_SUBJECT = "ScriptedChatModel"

ScriptedReply: TypeAlias = str | ChatReply | BaseException
"""A reply's text, a whole reply (tool calls included), or the exception the call raises."""


@dataclass(frozen=True, slots=True)
class ScriptedChatCall:
    """One call to ``ScriptedChatModel.complete`` or ``.chat``, as received."""

    messages: list[dict[str, Any]]
    """The conversation as ``message_dicts`` renders it: what Ollama would have been sent."""
    json_format: bool
    tools: list[dict[str, Any]] | None = None
    """The tool specs offered; None for ``complete`` and for ``chat`` without tools."""


class ScriptedChatModel:
    """A ``ToolChatModel`` whose replies are written by the test.

    Each call takes the next entry of ``replies``: a string is the reply's text, a ``ChatReply``
    the whole reply (``script_chat`` builds one with tool calls), an exception is raised (script
    ``ChatModelError(...)`` for a model that is down). With the script used up,
    ``handler(messages)`` answers if given; otherwise the call raises ``ChatModelError``, so a
    forgotten reply fails the test loudly.

    Checked as ``OllamaChatModel`` checks: the messages and tool specs (``InvalidInputError``), a
    reply with neither text nor tool calls, and malformed tool calls (``ChatModelError``). A reply
    with tool calls given to ``complete``, which offers no tools, is a ``ChatModelError`` too:
    the script is wrong.
    """

    def __init__(
        self,
        replies: Iterable[ScriptedReply] = (),
        *,
        handler: Callable[[list[dict[str, Any]]], str | ChatReply] | None = None,
    ) -> None:
        self.replies: collections.deque[ScriptedReply] = collections.deque(replies)
        self.handler = handler
        self.calls: list[ScriptedChatCall] = []

    def script_chat(
        self, content: str = "", *, tool_calls: Iterable[ToolCall | Mapping[str, Any]] = ()
    ) -> None:
        """Queue a reply of ``content`` and ``tool_calls``.

        A tool call is a ``ToolCall`` or ``{"name": ..., "arguments": {...}, "id": ...}``
        (arguments as an object or JSON text, ``id`` optional). Nothing else is checked until
        the reply is given, so a test can script a malformed call and see the ``ChatModelError``.
        """
        calls = tuple(
            call
            if isinstance(call, ToolCall)
            else ToolCall(call["name"], call.get("arguments", {}), call.get("id"))
            for call in tool_calls
        )
        self.replies.append(ChatReply(content, calls))

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The next scripted reply's text; see the class docstring."""
        reply = self._next(ScriptedChatCall(message_dicts(messages), json_format))
        if reply.tool_calls:
            raise ChatModelError(f"{_SUBJECT} was scripted tool calls for complete(), no tools")
        if not reply.text.strip():
            raise ChatModelError(f"{_SUBJECT} returned an empty reply")
        return reply.text

    async def chat(
        self,
        messages: ChatMessages,
        *,
        tools: Sequence[ToolSpec] | None = None,
        json_format: bool = False,
    ) -> ChatReply:
        """The next scripted reply, its tool calls checked; see the class docstring."""
        payload, specs = message_dicts(messages), checked_tool_specs(tools)
        reply = self._next(ScriptedChatCall(payload, json_format, specs or None))
        calls = reply_tool_calls(reply.tool_calls, _SUBJECT)
        if not reply.text.strip() and not calls:
            raise ChatModelError(f"{_SUBJECT} returned an empty reply (no text and no tool calls)")
        return ChatReply(reply.text, calls)

    async def aclose(self) -> None:
        """Nothing to release."""

    def _next(self, call: ScriptedChatCall) -> ChatReply:
        self.calls.append(call)
        reply: str | ChatReply
        if self.replies:
            scripted = self.replies.popleft()
            if isinstance(scripted, BaseException):
                raise scripted
            reply = scripted
        elif self.handler is not None:
            reply = self.handler(call.messages)
        else:
            raise ChatModelError(f"{_SUBJECT} has no reply scripted for this call")
        return ChatReply(reply) if isinstance(reply, str) else reply
