"""Agent tools in the function-calling shape: a spec for the model and an async handler that
answers text. Built on the facades and services; ``memory.py`` hands them out as
``memory.tools`` (a ``MemoryTools``: ``specs()`` and ``call(name, arguments, context)``).
"""

from __future__ import annotations

from navi_memory.tools.base import Tool, ToolContext, ToolHandler, decode_arguments, tool_error
from navi_memory.tools.dispatcher import MemoryTools
from navi_memory.tools.memory import MEMORY, FactStore, memory_tool, parse_memory_arguments
from navi_memory.tools.memory_search import (
    MEMORY_SEARCH,
    MemorySearchArguments,
    Searcher,
    ShownRecorder,
    memory_search_tool,
    parse_memory_search_arguments,
)
from navi_memory.tools.scratchpad import (
    SCRATCHPAD,
    SketchStore,
    parse_scratchpad_arguments,
    scratchpad_tool,
)

__all__ = [
    "MEMORY",
    "MEMORY_SEARCH",
    "SCRATCHPAD",
    "FactStore",
    "MemorySearchArguments",
    "MemoryTools",
    "Searcher",
    "ShownRecorder",
    "SketchStore",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "decode_arguments",
    "memory_search_tool",
    "memory_tool",
    "memory_tools",
    "parse_memory_arguments",
    "parse_memory_search_arguments",
    "parse_scratchpad_arguments",
    "scratchpad_tool",
    "tool_error",
]


def memory_tools(
    *, store: FactStore, search: Searcher, kv: SketchStore, shown: ShownRecorder | None = None
) -> MemoryTools:
    """The agent's memory tools on the facades, in the order they are offered: ``memory`` on
    ``store``, ``memory_search`` on ``search`` (recording the session's excerpts it shows in
    ``shown``, the context builder's recall ledger), ``scratchpad`` on ``kv``."""
    return MemoryTools([memory_tool(store), memory_search_tool(search, shown), scratchpad_tool(kv)])
