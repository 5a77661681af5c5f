"""HashedEmbedder and ScriptedChatModel: the in-process doubles behave like the real clients."""

from __future__ import annotations

import pytest

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ChatModelError, EmbeddingError, InvalidInputError
from navi_memory.llm import (
    ChatModel,
    ChatReply,
    ChatTurn,
    Embedder,
    OllamaEmbedder,
    ToolCall,
    ToolChatModel,
)
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


# --- ScriptedChatModel and tools ----------------------------------------------------------------

MEMORY_TOOL = {"type": "function", "function": {"name": "memory", "description": "facts"}}


async def test_scripted_chat_model_answers_scripted_tool_calls_and_records_the_tools() -> None:
    """script_chat queues tool calls; chat returns them parsed and records the specs offered."""
    chat = ScriptedChatModel()
    chat.script_chat(
        "Saving.", tool_calls=[{"name": "memory", "arguments": '{"action": "save"}', "id": "c1"}]
    )
    chat.script_chat(tool_calls=[ToolCall("memory", {"action": "list"})])
    assert isinstance(chat, ToolChatModel)
    first = await chat.chat([ChatTurn("user", "remember vim")], tools=[MEMORY_TOOL])
    assert first == ChatReply("Saving.", (ToolCall("memory", {"action": "save"}, "c1"),))
    conversation = [ChatTurn("user", "remember vim"), first.as_turn()]
    conversation.append(ChatTurn.tool_result(first.tool_calls[0], "saved"))
    second = await chat.chat(conversation, tools=[MEMORY_TOOL], json_format=True)
    assert second.tool_calls == (ToolCall("memory", {"action": "list"}),)
    assert [call.tools for call in chat.calls] == [[MEMORY_TOOL], [MEMORY_TOOL]]
    assert chat.calls[1].json_format is True
    assert chat.calls[1].messages[1:] == [
        {
            "role": "assistant",
            "content": "Saving.",
            "tool_calls": [
                {"function": {"name": "memory", "arguments": {"action": "save"}}, "id": "c1"}
            ],
        },
        {"role": "tool", "content": "saved", "tool_name": "memory", "tool_call_id": "c1"},
    ]


async def test_scripted_text_and_handler_replies_serve_chat_too() -> None:
    """A scripted string is a text reply to chat; the handler may answer a whole ChatReply."""
    chat = ScriptedChatModel(
        ["plain"], handler=lambda messages: ChatReply("", (ToolCall("memory", {}),))
    )
    assert await chat.chat([ChatTurn("user", "a")]) == ChatReply("plain")
    assert (await chat.chat([ChatTurn("user", "b")])).tool_calls == (ToolCall("memory", {}),)
    assert [call.tools for call in chat.calls] == [None, None]


async def test_scripted_junk_tool_calls_and_empty_replies_fail_like_the_real_model() -> None:
    """A call with no name or non-object arguments, or a reply of nothing: ChatModelError."""
    chat = ScriptedChatModel()
    chat.script_chat(tool_calls=[{"name": "", "arguments": {}}])
    chat.script_chat(tool_calls=[{"name": "memory", "arguments": "[1]"}])
    chat.script_chat("")
    for expected in ("names no tool", "arguments are a list", "empty reply"):
        with pytest.raises(ChatModelError, match=expected):
            await chat.chat([ChatTurn("user", "a")], tools=[MEMORY_TOOL])


async def test_a_tool_call_scripted_for_complete_is_a_script_error() -> None:
    """complete offers no tools, so a scripted tool call there fails the test loudly."""
    chat = ScriptedChatModel()
    chat.script_chat("text", tool_calls=[{"name": "memory", "arguments": {}}])
    with pytest.raises(ChatModelError, match="tool calls for complete"):
        await chat.complete([ChatTurn("user", "a")])


async def test_scripted_chat_model_checks_tool_specs_before_using_a_reply() -> None:
    """A malformed tool spec is InvalidInputError, and the scripted reply stays queued."""
    chat = ScriptedChatModel(["unused"])
    with pytest.raises(InvalidInputError, match="no function name"):
        await chat.chat([ChatTurn("user", "a")], tools=[{"function": {}}])
    assert list(chat.replies) == ["unused"]
    assert chat.calls == []
