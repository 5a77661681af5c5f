"""Agent tools in the function-calling shape: a spec for the model and an async handler that
answers text. Built on the facades and services; ``memory.py`` hands them out as
``memory.tools`` (a ``MemoryTools``: ``specs()`` and ``call(name, arguments, context)``).
"""

from __future__ import annotations

from navi_memory.tools.base import Tool, ToolContext, ToolHandler, decode_arguments, tool_error
from navi_memory.tools.dispatcher import MemoryTools
from navi_memory.tools.memory import MEMORY, FactStore, memory_tool, parse_memory_arguments
from navi_memory.tools.scratchpad import (
    SCRATCHPAD,
    SketchStore,
    parse_scratchpad_arguments,
    scratchpad_tool,
)

__all__ = [
    "MEMORY",
    "SCRATCHPAD",
    "FactStore",
    "MemoryTools",
    "SketchStore",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "decode_arguments",
    "memory_tool",
    "memory_tools",
    "parse_memory_arguments",
    "parse_scratchpad_arguments",
    "scratchpad_tool",
    "tool_error",
]


def memory_tools(*, store: FactStore, kv: SketchStore) -> MemoryTools:
    """The agent's memory tools on the facades: ``memory`` on ``store`` and ``scratchpad`` on
    ``kv``."""
    return MemoryTools([memory_tool(store), scratchpad_tool(kv)])
