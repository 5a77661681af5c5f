"""An in-process ``ChatModel`` answering scripted replies, for tests that do not need HTTP."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from navi_memory.errors import ChatModelError
from navi_memory.llm.chat import ChatMessages, message_dicts

__all__ = ["ScriptedChatCall", "ScriptedChatModel"]


@dataclass(frozen=True, slots=True)
class ScriptedChatCall:
    """One call to ``ScriptedChatModel.complete``, as received."""

    messages: list[dict[str, str]]
    json_format: bool


class ScriptedChatModel:
    """A ``ChatModel`` whose replies are written by the test.

    Each call takes the next entry of ``replies``: a string is the reply, an exception is raised
    (script ``ChatModelError(...)`` for a model that is down). With the script used up,
    ``handler(messages)`` answers if given; otherwise the call raises ``ChatModelError``, so a
    forgotten reply fails the test loudly. An empty reply is a ``ChatModelError``, as in
    ``OllamaChatModel``. Messages are checked the way ``OllamaChatModel`` checks them.
    """

    def __init__(
        self,
        replies: Iterable[str | BaseException] = (),
        *,
        handler: Callable[[list[dict[str, str]]], str] | None = None,
    ) -> None:
        self.replies: collections.deque[str | BaseException] = collections.deque(replies)
        self.handler = handler
        self.calls: list[ScriptedChatCall] = []

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The next scripted reply; see the class docstring."""
        payload = message_dicts(messages)
        self.calls.append(ScriptedChatCall(payload, json_format))
        if self.replies:
            reply = self.replies.popleft()
            if isinstance(reply, BaseException):
                raise reply
        elif self.handler is not None:
            reply = self.handler(payload)
        else:
            raise ChatModelError("ScriptedChatModel has no reply scripted for this call")
        if not reply.strip():
            raise ChatModelError("ScriptedChatModel returned an empty reply")
        return reply

    async def aclose(self) -> None:
        """Nothing to release."""
