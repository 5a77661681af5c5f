"""``memory.tools``: the agent's memory tools behind one dispatcher — their specs for the model,
and one ``call`` that runs whatever tool call the model made and always answers text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from navi_memory.errors import InvalidInputError, NotFoundError
from navi_memory.tools.base import Tool, ToolContext, tool_error
from navi_memory.tools.memory import MEMORY
from navi_memory.tools.memory_search import MEMORY_SEARCH
from navi_memory.tools.scratchpad import SCRATCHPAD
from navi_memory.validation import check_text

__all__ = ["TOOL_NAME_ECHO_MAX_CHARS", "MemoryTools"]

logger = logging.getLogger(__name__)

TOOL_NAME_ECHO_MAX_CHARS: Final = 80
"""An unknown tool's name is echoed back to the model cut to this length."""


class MemoryTools:
    """The memory tools (``memory``, ``memory_search``, ``scratchpad``) as one unit: ``specs()``
    to offer them to a model, ``call()`` to run a call it made."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise InvalidInputError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        """The tools' names, in the order ``specs()`` lists them."""
        return list(self._tools)

    def all(self) -> tuple[Tool, ...]:
        """Every tool, in the order their specs are offered to a model."""
        return tuple(self._tools.values())

    def tool(self, name: str) -> Tool:
        """The tool called ``name`` (NotFoundError when there is none)."""
        name = check_text("name", name)
        try:
            return self._tools[name]
        except KeyError:
            raise NotFoundError(f"there is no tool {name!r}") from None

    @property
    def memory(self) -> Tool:
        """The ``memory`` tool: save, search, forget and list curated facts."""
        return self.tool(MEMORY)

    @property
    def memory_search(self) -> Tool:
        """The ``memory_search`` tool: one read over facts, raw history and sketches."""
        return self.tool(MEMORY_SEARCH)

    @property
    def scratchpad(self) -> Tool:
        """The ``scratchpad`` tool: the current session's notes."""
        return self.tool(SCRATCHPAD)

    def specs(self) -> list[dict[str, Any]]:
        """Every tool in the function-calling shape Ollama and OpenAI accept (fresh copies:
        a caller may change them)."""
        return [tool.spec() for tool in self._tools.values()]

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        context: ToolContext | None = None,
    ) -> str:
        """The answer to one tool call: the tool's text, or one line of tool-error text — an
        unknown tool or action, missing or mistyped arguments, numbers out of range, NUL bytes,
        a ``user_id`` argument, a refusal, a storage failure. Never raises for any of them, and
        a call that is refused writes nothing.

        ``arguments`` is the object the model sent, or its JSON text. The user (and session)
        come from ``context``, else from ``navi_memory.request_context``; never from arguments.
        """
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            shown = repr(name)[:TOOL_NAME_ECHO_MAX_CHARS]
            known = ", ".join(self._tools)
            return tool_error("tools", f"there is no tool {shown}; the tools are {known}")
        try:
            return await tool.call(arguments, context)
        except Exception:
            # A bug in a tool must not end the agent's turn: the model is told, the log keeps it.
            logger.exception(
                "tools.crashed: %s", name, extra={"event": "tools.crashed", "tool": name}
            )
            return tool_error(name, "the tool failed unexpectedly; the error is logged")
