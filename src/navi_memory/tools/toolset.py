"""``memory.tools``: the agent tools one Memory hands out, with their function-calling specs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from navi_memory.tools.base import Tool

__all__ = ["MemoryTools"]


@dataclass(frozen=True, slots=True)
class MemoryTools:
    """The tools bound to one Memory; each answers text (``await tool.call(arguments, ctx)``)."""

    memory_search: Tool

    def all(self) -> tuple[Tool, ...]:
        """Every tool, in the order their specs are offered to a model."""
        return (self.memory_search,)

    def specs(self) -> list[dict[str, Any]]:
        """The function-calling specs of every tool (Ollama's and OpenAI's ``tools=``)."""
        return [tool.spec() for tool in self.all()]
