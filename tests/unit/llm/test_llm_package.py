"""The llm and testing packages: their public names, and nothing built when they are imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import navi_memory.llm
import navi_memory.testing


@pytest.mark.parametrize(
    ("module", "names"),
    [
        (
            navi_memory.llm,
            {
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
            },
        ),
        (
            navi_memory.testing,
            {
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
            },
        ),
    ],
)
def test_public_names_are_exactly_the_listed_ones(module: object, names: set[str]) -> None:
    exported = module.__all__  # type: ignore[attr-defined]
    assert set(exported) == names
    assert all(hasattr(module, name) for name in exported)


def test_importing_and_configuring_builds_no_client() -> None:
    """``import ollama`` builds the library's default client, so not even that may happen
    before the first call; nor may the local extra's torch load (seconds) unless chosen."""
    code = (
        "import sys\n"
        "import navi_memory.llm, navi_memory.testing\n"
        "from navi_memory.config import Settings\n"
        "from navi_memory.llm import OllamaChatModel, OllamaEmbedder, guard_chat_model, "
        "guard_embedder\n"
        "s = Settings(_env_file=None, ollama_host='http://127.0.0.1:9')\n"
        "guard_embedder(OllamaEmbedder.from_settings(s), s)\n"
        "guard_chat_model(OllamaChatModel.from_settings(s), s)\n"
        "assert 'ollama' not in sys.modules, 'ollama was imported'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'sentence_transformers' not in sys.modules, 'sentence-transformers was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "environment_host",
    [
        "http://127.0.0.1:99999",
        # A fresh interpreter each (2-3 s): the other two forms in make test-slow.
        pytest.param("::::", marks=pytest.mark.slow),
        pytest.param("http://[::1", marks=pytest.mark.slow),
    ],
)
def test_a_malformed_ollama_host_in_the_environment_does_not_break_a_host_given_in_code(
    environment_host: str,
) -> None:
    """``import ollama`` builds a client from OLLAMA_HOST at import: a malformed one there
    failed every call of a client given its host in Settings (docs/config.md: keyword
    arguments win over the environment), first in new_async_client, then again in
    failure_types() while the error was being translated."""
    code = (
        "import asyncio\n"
        "from navi_memory.config import Settings\n"
        "from navi_memory.errors import EmbeddingError\n"
        "from navi_memory.llm import OllamaEmbedder\n"
        "from navi_memory.testing import FakeOllama\n"
        "async def embed(host):\n"
        "    settings = Settings(_env_file=None, ollama_host=host)\n"
        "    async with OllamaEmbedder.from_settings(settings) as embedder:\n"
        "        return await embedder.embed_query('where does Ana live')\n"
        "with FakeOllama() as fake:\n"
        "    assert len(asyncio.run(embed(fake.url))) == 768\n"
        "try:\n"
        "    asyncio.run(embed('http://127.0.0.1:9'))\n"
        "except EmbeddingError as exc:\n"
        "    assert 'could not be reached' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no EmbeddingError')\n"
    )
    environment = dict(os.environ, OLLAMA_HOST=environment_host)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment
    )
    assert result.returncode == 0, result.stderr
