"""Test doubles shipped with the package, used by the tests and the benchmarks.

A fake Ollama server reached through the real client (embeddings, chat, tool calls), its hashed
embeddings in-process, and a scripted chat model that can call tools. Nothing here stands in
for PostgreSQL.
"""

from __future__ import annotations

from navi_memory.testing.fake_ollama import (
    FakeChatReply,
    FakeOllama,
    FakeOllamaMode,
    RecordedRequest,
)
from navi_memory.testing.hashed_embedder import HashedEmbedder
from navi_memory.testing.hashing import KNOWN_TASK_PREFIXES, hashed_embedding
from navi_memory.testing.scripted_chat import ScriptedChatCall, ScriptedChatModel, ScriptedReply

__all__ = [
    "KNOWN_TASK_PREFIXES",
    "FakeChatReply",
    "FakeOllama",
    "FakeOllamaMode",
    "HashedEmbedder",
    "RecordedRequest",
    "ScriptedChatCall",
    "ScriptedChatModel",
    "ScriptedReply",
    "hashed_embedding",
]
