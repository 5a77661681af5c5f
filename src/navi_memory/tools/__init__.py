"""Agent tools in the function-calling shape: a spec for the model and an async handler that
answers text. Built on the facades and services; ``memory.py`` hands them out.
"""

from __future__ import annotations

from navi_memory.tools.base import Tool, ToolContext, ToolHandler, decode_arguments, tool_error
from navi_memory.tools.memory_search import (
    MEMORY_SEARCH,
    MemorySearchArguments,
    Searcher,
    memory_search_tool,
    parse_memory_search_arguments,
)
from navi_memory.tools.toolset import MemoryTools

__all__ = [
    "MEMORY_SEARCH",
    "MemorySearchArguments",
    "MemoryTools",
    "Searcher",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "decode_arguments",
    "memory_search_tool",
    "parse_memory_search_arguments",
    "tool_error",
]
