"""HashedEmbedder and ScriptedChatModel: the in-process doubles behave like the real clients."""

from __future__ import annotations

import pytest

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ChatModelError, EmbeddingError, InvalidInputError
from navi_memory.llm import ChatModel, ChatTurn, Embedder, OllamaEmbedder
from navi_memory.testing import (
    FakeOllama,
    HashedEmbedder,
    ScriptedChatCall,
    ScriptedChatModel,
    hashed_embedding,
)


async def test_hashed_embedder_gives_the_fake_servers_vectors_without_http(
    fake: FakeOllama,
) -> None:
    texts = ["editor is neovim", "lives in Berlin"]
    local = HashedEmbedder()
    remote = OllamaEmbedder(
        fake.url,
        "nomic-embed-text:latest",
        document_prefix="search_document: ",
        query_prefix="search_query: ",
        batch_size=8,
        timeout=5.0,
    )
    try:
        assert await local.embed_documents(texts) == await remote.embed_documents(texts)
        assert await local.embed_query("editor") == await remote.embed_query("editor")
    finally:
        await remote.aclose()
    assert isinstance(local, Embedder)
    assert local.dim == EMBEDDING_DIM


async def test_hashed_embedder_counts_calls_and_can_be_switched_to_fail() -> None:
    embedder = HashedEmbedder(dim=32)
    assert await embedder.embed_documents(["a", "b"]) == [
        hashed_embedding("a", 32),
        hashed_embedding("b", 32),
    ]
    assert await embedder.embed_documents([]) == []
    embedder.failing = True
    with pytest.raises(EmbeddingError):
        await embedder.embed_query("a")
    assert (embedder.calls, embedder.texts_embedded) == (3, 2)


async def test_scripted_chat_model_replies_in_order_then_asks_its_handler() -> None:
    chat = ScriptedChatModel(["one", "two"], handler=lambda messages: messages[-1]["content"])
    assert isinstance(chat, ChatModel)
    replies = [await chat.complete([ChatTurn("user", f"q{i}")]) for i in range(3)]
    assert replies == ["one", "two", "q2"]


async def test_scripted_chat_model_records_calls_and_raises_scripted_errors() -> None:
    chat = ScriptedChatModel([ChatModelError("model is down"), '{"ok": true}'])
    with pytest.raises(ChatModelError, match="model is down"):
        await chat.complete([{"role": "user", "content": "a"}])
    assert await chat.complete([ChatTurn("user", "b")], json_format=True) == '{"ok": true}'
    assert chat.calls == [
        ScriptedChatCall([{"role": "user", "content": "a"}], json_format=False),
        ScriptedChatCall([{"role": "user", "content": "b"}], json_format=True),
    ]


async def test_scripted_chat_model_without_a_reply_or_with_an_empty_one_fails() -> None:
    chat = ScriptedChatModel([" "])
    with pytest.raises(ChatModelError, match="empty reply"):
        await chat.complete([ChatTurn("user", "a")])
    with pytest.raises(ChatModelError, match="no reply scripted"):
        await chat.complete([ChatTurn("user", "a")])


async def test_scripted_chat_model_checks_messages_like_the_real_one() -> None:
    chat = ScriptedChatModel(["unused"])
    with pytest.raises(InvalidInputError, match="role"):
        await chat.complete([{"role": "robot", "content": "a"}])
    assert list(chat.replies) == ["unused"]
