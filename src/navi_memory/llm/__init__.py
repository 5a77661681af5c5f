"""The models navi-memory talks to: an ``Embedder`` for vectors, a ``ChatModel`` for text.

The Ollama implementations reach the server through the ``ollama`` client, created on first use.
"""

from __future__ import annotations

from navi_memory.llm.chat import (
    ChatMessages,
    ChatModel,
    ChatRole,
    ChatTurn,
    OllamaChatModel,
    message_dicts,
)
from navi_memory.llm.embedder import Embedder, OllamaEmbedder, embedding_text_for_fact

__all__ = [
    "ChatMessages",
    "ChatModel",
    "ChatRole",
    "ChatTurn",
    "Embedder",
    "OllamaChatModel",
    "OllamaEmbedder",
    "embedding_text_for_fact",
    "message_dicts",
]
