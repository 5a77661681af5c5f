"""The models navi-memory talks to: an ``Embedder`` for vectors, a ``ChatModel`` for text and
tool calls, the Ollama implementations of both, and the guards that make any model fail like them.

The Ollama implementations reach the server through the ``ollama`` client, created on first use.
"""

from __future__ import annotations

from navi_memory.llm.chat import (
    ChatMessages,
    ChatModel,
    ChatReply,
    ChatRole,
    ChatTurn,
    OllamaChatModel,
    ToolCall,
    ToolChatModel,
    ToolSpec,
    message_dicts,
)
from navi_memory.llm.embedder import (
    Embedder,
    OllamaEmbedder,
    embedder_from_settings,
    embedding_model_name,
    embedding_text_for_fact,
)
from navi_memory.llm.guard import (
    GuardedChatModel,
    GuardedEmbedder,
    guard_chat_model,
    guard_embedder,
)
from navi_memory.llm.local import LocalEmbedder
from navi_memory.llm.vectors import storable_vector, storable_vectors

__all__ = [
    "ChatMessages",
    "ChatModel",
    "ChatReply",
    "ChatRole",
    "ChatTurn",
    "Embedder",
    "GuardedChatModel",
    "GuardedEmbedder",
    "LocalEmbedder",
    "OllamaChatModel",
    "OllamaEmbedder",
    "ToolCall",
    "ToolChatModel",
    "ToolSpec",
    "embedder_from_settings",
    "embedding_model_name",
    "embedding_text_for_fact",
    "guard_chat_model",
    "guard_embedder",
    "message_dicts",
    "storable_vector",
    "storable_vectors",
]
