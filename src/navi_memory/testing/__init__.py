"""Test doubles shipped with the package, used by the tests and the benchmarks.

A fake Ollama server reached through the real client, its hashed embeddings in-process, and a
scripted chat model. Nothing here stands in for PostgreSQL.
"""

from __future__ import annotations

from navi_memory.testing.fake_ollama import FakeOllama, FakeOllamaMode, RecordedRequest
from navi_memory.testing.hashed_embedder import HashedEmbedder
from navi_memory.testing.hashing import KNOWN_TASK_PREFIXES, hashed_embedding
from navi_memory.testing.scripted_chat import ScriptedChatCall, ScriptedChatModel

__all__ = [
    "KNOWN_TASK_PREFIXES",
    "FakeOllama",
    "FakeOllamaMode",
    "HashedEmbedder",
    "RecordedRequest",
    "ScriptedChatCall",
    "ScriptedChatModel",
    "hashed_embedding",
]
