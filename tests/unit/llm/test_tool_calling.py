"""Tool calling through the real ollama client against FakeOllama: the tools sent, the tool calls
returned, conversations carrying tool calls and results, and every failure a ChatModelError."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from navi_memory.errors import ChatModelError, InvalidInputError
from navi_memory.llm import (
    ChatReply,
    ChatTurn,
    OllamaChatModel,
    ToolCall,
    ToolChatModel,
    message_dicts,
)
from navi_memory.testing import FakeOllama

MODEL = "llama3.1:8b"
HELLO = [ChatTurn("user", "which editor do I use?")]
MEMORY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "memory",
        "description": "Save, search, forget or list facts about the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["save", "search", "forget", "list"]},
                "key": {"type": "string", "description": "the fact's key"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["action"],
        },
    },
}
SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "memory_search",
        "description": "Search the conversation's history.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@pytest.fixture
async def model(fake: FakeOllama) -> AsyncIterator[OllamaChatModel]:
    chat = OllamaChatModel(fake.url, MODEL, timeout=2.0)
    yield chat
    await chat.aclose()


# --- what goes out ---------------------------------------------------------------------------


async def test_the_tools_arrive_in_the_request_json(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """Specs in the function-calling shape reach /api/chat as the client's ``tools`` field."""
    fake.chat_replies.append("no tool needed")
    assert await model.chat(HELLO, tools=[MEMORY_TOOL, SEARCH_TOOL]) == ChatReply("no tool needed")
    (request,) = fake.chat_requests
    assert request["tools"] == [MEMORY_TOOL, SEARCH_TOOL]
    assert request["model"] == MODEL
    assert request["stream"] is False
    assert isinstance(model, ToolChatModel)


async def test_schema_keywords_the_client_does_not_model_are_dropped_on_the_way(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """The ollama client forwards type/description/enum/items/required only: bounds such as
    minimum never reach the server, so tools must check their arguments themselves."""
    tool = json.loads(json.dumps(MEMORY_TOOL))
    tool["function"]["parameters"]["properties"]["confidence"] = {
        "type": "integer",
        "minimum": 0,
        "maximum": 100,
    }
    tool["function"]["parameters"]["additionalProperties"] = False
    fake.chat_replies.append("ok")
    await model.chat(HELLO, tools=[tool])
    sent = fake.chat_requests[0]["tools"][0]["function"]["parameters"]
    assert sent["properties"]["confidence"] == {"type": "integer"}
    assert "additionalProperties" not in sent
    assert sent["properties"]["action"]["enum"] == ["save", "search", "forget", "list"]


async def test_without_tools_none_are_offered(fake: FakeOllama, model: OllamaChatModel) -> None:
    """complete, and chat with no or empty tools, offer none: the client sends ``tools: []``."""
    fake.chat_replies.extend(["a", "b", "c"])
    await model.complete(HELLO)
    await model.chat(HELLO)
    await model.chat(HELLO, tools=[], json_format=True)
    assert [r.get("tools") for r in fake.chat_requests] == [[], [], []]
    assert fake.chat_requests[2]["format"] == "json"


async def test_a_conversation_with_tool_calls_and_results_is_sent_in_ollamas_shape(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """Assistant turns carry ``tool_calls`` ({"function": {"name", "arguments"}}) and tool
    turns ``tool_name``; the client drops the call ids Ollama does not take."""
    call = ToolCall("memory", {"action": "search", "key": "editor"}, "call-1")
    conversation: list[ChatTurn | dict[str, Any]] = [
        ChatTurn("system", "You remember things."),
        ChatTurn("user", "which editor do I use?"),
        ChatTurn("assistant", "", (call,)),
        ChatTurn.tool_result(call, "preferences / editor: neovim"),
        ChatTurn("assistant", "Let me also check the history.", (ToolCall("memory_search", {}),)),
        {"role": "tool", "content": "no excerpt found", "tool_name": "memory_search"},
    ]
    fake.chat_replies.append("You use neovim.")
    reply = await model.chat(conversation, tools=[MEMORY_TOOL, SEARCH_TOOL])
    assert reply == ChatReply("You use neovim.")
    assert fake.chat_requests[0]["messages"] == [
        {"role": "system", "content": "You remember things."},
        {"role": "user", "content": "which editor do I use?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"function": {"name": "memory", "arguments": {"action": "search", "key": "editor"}}}
            ],
        },
        {"role": "tool", "content": "preferences / editor: neovim", "tool_name": "memory"},
        {
            "role": "assistant",
            "content": "Let me also check the history.",
            "tool_calls": [{"function": {"name": "memory_search", "arguments": {}}}],
        },
        {"role": "tool", "content": "no excerpt found", "tool_name": "memory_search"},
    ]


async def test_openai_style_dict_messages_are_normalised_before_sending(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """A history whose tool calls hold JSON-text arguments (as OpenAI-style APIs store them)
    goes out with objects, which is what Ollama takes."""
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "remember neovim"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "memory", "arguments": '{"action": "save"}'},
                }
            ],
        },
        {"role": "tool", "content": "saved", "tool_name": "memory", "tool_call_id": "call_9"},
    ]
    fake.chat_replies.append("Saved.")
    await model.chat(history, tools=[MEMORY_TOOL])
    sent = fake.chat_requests[0]["messages"]
    assert sent[1]["tool_calls"] == [
        {"function": {"name": "memory", "arguments": {"action": "save"}}}
    ]
    assert sent[2] == {"role": "tool", "content": "saved", "tool_name": "memory"}


def test_message_dicts_keep_call_ids_for_models_that_use_them() -> None:
    """Rendered for any model, a tool call keeps its id and a result its tool_call_id."""
    call = ToolCall("memory", '{"action": "list"}', "c1")
    assert message_dicts([ChatTurn("assistant", "", (call,)), ChatTurn.tool_result(call, "2")]) == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "memory", "arguments": {"action": "list"}}, "id": "c1"}
            ],
        },
        {"role": "tool", "content": "2", "tool_name": "memory", "tool_call_id": "c1"},
    ]


# --- what comes back -------------------------------------------------------------------------


async def test_scripted_tool_calls_come_back_as_tool_call_objects(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """Each tool call of the server's message is a ToolCall with a dict of arguments."""
    fake.script_chat(
        tool_calls=[
            {"name": "memory", "arguments": {"action": "search", "key": "editor"}},
            {"name": "memory_search", "arguments": {"query": "editor", "limit": 3}},
        ]
    )
    reply = await model.chat(HELLO, tools=[MEMORY_TOOL, SEARCH_TOOL])
    assert reply == ChatReply(
        "",
        (
            ToolCall("memory", {"action": "search", "key": "editor"}),
            ToolCall("memory_search", {"query": "editor", "limit": 3}),
        ),
    )
    assert all(call.id is None for call in reply.tool_calls)


async def test_text_and_tool_calls_come_back_together(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """A message with content and tool calls keeps both."""
    fake.script_chat("Checking.", tool_calls=[{"name": "memory", "arguments": {}}])
    reply = await model.chat(HELLO, tools=[MEMORY_TOOL])
    assert (reply.text, reply.tool_calls) == ("Checking.", (ToolCall("memory", {}),))


async def test_a_tool_loop_round_trip_sends_back_what_the_model_asked_and_the_result(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """The reply's as_turn and ChatTurn.tool_result make the next request's last two messages."""
    fake.script_chat(tool_calls=[{"name": "memory", "arguments": {"action": "list"}}])
    fake.chat_replies.append("You have 2 preferences saved.")
    conversation: list[ChatTurn] = list(HELLO)
    reply = await model.chat(conversation, tools=[MEMORY_TOOL])
    conversation.append(reply.as_turn())
    conversation.extend(ChatTurn.tool_result(call, "preferences: 2") for call in reply.tool_calls)
    final = await model.chat(conversation, tools=[MEMORY_TOOL])
    assert final == ChatReply("You have 2 preferences saved.")
    assert fake.chat_requests[1]["messages"][-2:] == [
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "memory", "arguments": {"action": "list"}}}],
        },
        {"role": "tool", "content": "preferences: 2", "tool_name": "memory"},
    ]


async def test_a_call_to_a_tool_that_was_not_offered_comes_back_for_the_dispatcher(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """The model layer does not judge tool names: the dispatcher answers an unknown tool."""
    fake.script_chat(tool_calls=[{"name": "rm_rf", "arguments": {}}])
    reply = await model.chat(HELLO, tools=[MEMORY_TOOL])
    assert reply.tool_calls == (ToolCall("rm_rf", {}),)


# --- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool_call",
    [
        {"function": {"arguments": {"action": "list"}}},
        {"function": {"name": "memory", "arguments": '{"action": "list"}'}},
        {"function": {"name": "memory", "arguments": ["list"]}},
        {"function": {"name": "memory", "arguments": None}},
        {"function": "memory"},
        {"name": "memory"},
    ],
    ids=["no-name", "string-args", "list-args", "null-args", "function-string", "no-function"],
)
async def test_a_malformed_tool_call_from_the_server_is_a_chat_model_error(
    fake: FakeOllama, model: OllamaChatModel, tool_call: dict[str, Any]
) -> None:
    """Ollama always sends a name and an arguments object; anything else fails the whole reply
    (the client refuses it), never a dropped call."""
    fake.chat_replies.append({"content": "", "tool_calls": [tool_call]})
    with pytest.raises(ChatModelError, match="wrong shape") as caught:
        await model.chat(HELLO, tools=[MEMORY_TOOL])
    assert fake.url in str(caught.value)


async def test_a_tool_call_with_an_empty_name_is_a_chat_model_error(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """A name the client lets through but that names nothing is refused by our own check."""
    fake.script_chat(tool_calls=[{"name": " ", "arguments": {}}])
    with pytest.raises(ChatModelError, match="malformed tool call #0: it names no tool"):
        await model.chat(HELLO, tools=[MEMORY_TOOL])


async def test_a_reply_with_neither_text_nor_tool_calls_is_a_chat_model_error(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """An empty message is a failure of the model, as it is for complete."""
    fake.script_chat("", tool_calls=[])
    with pytest.raises(ChatModelError, match="empty reply"):
        await model.chat(HELLO, tools=[MEMORY_TOOL])


@pytest.mark.parametrize(
    ("mode", "expected"), [("fail", "HTTP 500"), ("stall", "timeout"), ("junk", "not JSON")]
)
async def test_server_failures_during_a_tool_chat_are_chat_model_errors(
    fake: FakeOllama, mode: str, expected: str
) -> None:
    """A failing, stalling or junk server is a ChatModelError naming host and model."""
    fake.mode = mode  # type: ignore[assignment]
    fake.stall_seconds = 5
    # Only the stall is about time; a loaded machine must not turn the others into timeouts.
    chat = OllamaChatModel(fake.url, MODEL, timeout=0.3 if mode == "stall" else 10.0)
    try:
        with pytest.raises(ChatModelError, match=expected) as caught:
            await chat.chat(HELLO, tools=[MEMORY_TOOL])
    finally:
        await chat.aclose()
    assert fake.url in str(caught.value)
    assert repr(MODEL) in str(caught.value)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([ChatTurn("user", "x", (ToolCall("memory", {}),))], "only an assistant turn makes them"),
        ([{"role": "assistant", "content": "", "tool_calls": "memory"}], "not a list"),
        ([ChatTurn("assistant", "", (ToolCall("", {}),))], "tool call #0: it names no tool"),
        (
            [ChatTurn("assistant", "", (ToolCall("memory", "{oops"),))],
            "arguments are not JSON",
        ),
        (
            [ChatTurn("assistant", "", (ToolCall("memory", "[" * 100_000),))],
            "arguments are not JSON",
        ),
        ([ChatTurn("assistant", "x", tool_name="memory")], "only a tool turn carries one"),
        ([{"role": "user", "content": "x", "tool_call_id": "c1"}], "only a tool turn"),
        ([{"role": "tool", "content": "x", "tool_name": 5}], "tool_name that is not text"),
        ("hello", "must be a list of messages"),
        ([42], "message #0 is an int"),
    ],
)
async def test_malformed_conversations_are_refused_before_any_request(
    fake: FakeOllama, model: OllamaChatModel, messages: Any, expected: str
) -> None:
    """The caller's malformed tool turns are InvalidInputError, and nothing is sent."""
    with pytest.raises(InvalidInputError) as caught:
        await model.chat(messages, tools=[MEMORY_TOOL])
    assert expected in str(caught.value)
    assert fake.requests == []


async def test_malformed_tool_specs_are_refused_before_any_request(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    """A spec the client would choke on is an InvalidInputError from us, not a server error."""
    bad = {"type": "function", "function": {"name": "x", "parameters": {"type": "array"}}}
    with pytest.raises(InvalidInputError, match="parameters of type 'array'"):
        await model.chat(HELLO, tools=[bad])
    assert fake.requests == []
