"""GuardedChatModel: any chat model's exception, silence or junk becomes a ChatModelError, like an
Ollama failure; tools are checked; the Ollama chat model passes through unchanged."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from navi_memory.config import Settings
from navi_memory.errors import ChatModelError, ChatModelTimeoutError, ConfigError, InvalidInputError
from navi_memory.llm import (
    ChatMessages,
    ChatModel,
    ChatReply,
    ChatTurn,
    GuardedChatModel,
    OllamaChatModel,
    ToolCall,
    ToolChatModel,
    ToolSpec,
    guard_chat_model,
)
from navi_memory.testing import FakeOllama, ScriptedChatModel

TIMEOUT = 0.3
HELLO = [ChatTurn("user", "hello")]
SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "memory_search",
        "description": "Search what was said before.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for"}},
            "required": ["query"],
        },
    },
}


class CompleteOnly:
    """A custom chat model with only ``complete``: answers (or raises) what it is given."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls: list[tuple[list[Any], bool]] = []
        self.closed = 0

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> Any:
        self.calls.append((list(messages), json_format))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    async def aclose(self) -> None:
        self.closed += 1


class WithTools(CompleteOnly):
    """A custom chat model that also implements ``chat``; records the tools it was offered."""

    def __init__(self, answer: object) -> None:
        super().__init__(answer)
        self.tools: list[list[dict[str, Any]] | None] = []

    async def chat(
        self,
        messages: ChatMessages,
        *,
        tools: Sequence[ToolSpec] | None = None,
        json_format: bool = False,
    ) -> Any:
        self.tools.append(None if tools is None else [dict(t) for t in tools])
        return await self.complete(messages, json_format=json_format)


class Hanging:
    """Never answers; records whether it was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")

    async def chat(self, messages: ChatMessages, **options: Any) -> ChatReply:
        return ChatReply(await self.complete(messages))

    async def aclose(self) -> None:
        pass


def guard(inner: object) -> GuardedChatModel:
    return GuardedChatModel(inner, timeout_seconds=TIMEOUT)  # type: ignore[arg-type]


async def ask(model: GuardedChatModel, method: str) -> object:
    if method == "complete":
        return await model.complete(HELLO)
    return await model.chat(HELLO)


METHODS = pytest.mark.parametrize("method", ["complete", "chat"])


# --- text --------------------------------------------------------------------------------------


async def test_a_text_reply_comes_back_from_complete_and_chat() -> None:
    """complete gives the text; chat without tools gives it as a ChatReply with no tool calls."""
    inner = CompleteOnly("hi there")
    model = guard(inner)
    assert await model.complete(HELLO, json_format=True) == "hi there"
    assert await model.chat(HELLO) == ChatReply("hi there", ())
    assert [json_format for _, json_format in inner.calls] == [True, False]
    assert isinstance(model, ToolChatModel)


async def test_the_inner_model_gets_checked_chat_turns() -> None:
    """Dict messages reach the inner model as ChatTurns, JSON-text tool arguments parsed."""
    inner = CompleteOnly("ok")
    await guard(inner).complete(
        [
            {"role": "user", "content": "find my editor"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "function": {"name": "memory", "arguments": '{"action": "list"}'}}
                ],
            },
            {"role": "tool", "content": "preferences: 1", "tool_name": "memory"},
        ]
    )
    ((messages, _),) = inner.calls
    assert messages == [
        ChatTurn("user", "find my editor"),
        ChatTurn("assistant", "", (ToolCall("memory", {"action": "list"}, "c1"),)),
        ChatTurn("tool", "preferences: 1", tool_name="memory"),
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, "returned None instead of text"),
        (42, "returned an int instead of text"),
        (b"bytes", "returned a bytes instead of text"),
        (ChatReply("text"), "returned a ChatReply instead of text"),
        ("", "returned an empty reply"),
        ("  \n", "returned an empty reply"),
    ],
)
@METHODS
async def test_a_reply_that_is_not_text_or_is_blank_is_a_chat_model_error(
    answer: object, expected: str, method: str
) -> None:
    """complete must answer non-blank text; chat falls back to complete for such a model."""
    with pytest.raises(ChatModelError) as caught:
        await ask(guard(CompleteOnly(answer)), method)
    assert str(caught.value) == f"chat model CompleteOnly {expected}"


@pytest.mark.parametrize(
    "messages",
    [[], [{"role": "robot", "content": "x"}], [ChatTurn("user", "x", tool_name="memory")]],
)
@METHODS
async def test_malformed_messages_are_the_callers_error_and_reach_no_model(
    messages: Any, method: str
) -> None:
    """InvalidInputError, not ChatModelError, and the inner model is never called."""
    inner = WithTools("never")
    with pytest.raises(InvalidInputError):
        if method == "complete":
            await guard(inner).complete(messages)
        else:
            await guard(inner).chat(messages)
    assert inner.calls == []


# --- exceptions and silence -------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("connection refused"),
        RuntimeError("model crashed"),
        ValueError("bad things"),
        KeyError("choices"),
        InvalidInputError("a navi_memory error of another kind"),
    ],
    ids=lambda exc: type(exc).__name__,
)
@pytest.mark.parametrize("inner_type", [CompleteOnly, WithTools])
@METHODS
async def test_every_exception_becomes_a_chat_model_error_from_it(
    exc: Exception, inner_type: type[CompleteOnly], method: str
) -> None:
    """Whatever the model raises is a ChatModelError naming its class, chained to the original."""
    with pytest.raises(ChatModelError) as caught:
        await ask(guard(inner_type(exc)), method)
    assert caught.value.__cause__ is exc
    assert str(caught.value).startswith(f"chat model {inner_type.__name__} failed: ")
    assert type(exc).__name__ in str(caught.value)


class Unprintable(Exception):
    """A host's error class whose message cannot be read."""

    def __str__(self) -> str:
        raise ValueError("cannot print me")


@pytest.mark.parametrize("inner_type", [CompleteOnly, WithTools])
@METHODS
async def test_an_exception_whose_message_cannot_be_read_is_still_a_chat_model_error(
    inner_type: type[CompleteOnly], method: str
) -> None:
    """str() of the model's exception raising (a ValueError escaped the guard itself)."""
    exc = Unprintable()
    with pytest.raises(ChatModelError, match="Unprintable whose message cannot be read") as caught:
        await ask(guard(inner_type(exc)), method)
    assert caught.value.__cause__ is exc


class Booby(str):
    """A str subclass whose methods run code of their own."""

    def strip(self, chars: str | None = None) -> str:
        raise RuntimeError("strip broke")


async def test_a_str_subclass_reply_comes_back_as_a_plain_str() -> None:
    """The guard reads a str subclass's characters, never its methods, and hands on a str:
    from complete, from chat falling back to complete, and as a ChatReply's text."""
    answer = Booby("A summary.")
    texts = [
        await guard(CompleteOnly(answer)).complete(HELLO),
        (await guard(CompleteOnly(answer)).chat(HELLO)).text,
        (await guard(WithTools(ChatReply(answer))).chat(HELLO)).text,
    ]
    assert [(type(text), text) for text in texts] == [(str, "A summary.")] * 3


@METHODS
async def test_a_chat_model_error_passes_through_as_it_is(method: str) -> None:
    """The model's own ChatModelError is already the right error: it is not wrapped again."""
    original = ChatModelError("quota exceeded")
    with pytest.raises(ChatModelError) as caught:
        await ask(guard(WithTools(original)), method)
    assert caught.value is original


@METHODS
async def test_a_model_that_never_answers_is_a_chat_model_error_at_the_timeout(
    method: str,
) -> None:
    """A hang ends at timeout_seconds as a ChatModelError that says so; the call is cancelled."""
    inner = Hanging()
    started = time.monotonic()
    with pytest.raises(ChatModelError) as caught:
        await ask(guard(inner), method)
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 1.5
    assert str(caught.value) == (
        "chat model Hanging did not answer within 0.3 s (MEMORY_LLM_TIMEOUT_SECONDS)"
    )
    assert isinstance(caught.value, ChatModelTimeoutError)
    assert isinstance(caught.value, TimeoutError)
    assert inner.cancelled


@METHODS
async def test_cancelling_the_caller_cancels_the_model_and_propagates(method: str) -> None:
    """asyncio cancellation is not turned into a ChatModelError: it reaches the caller."""
    inner = Hanging()
    task = asyncio.create_task(ask(GuardedChatModel(inner, timeout_seconds=30), method))
    await asyncio.wait_for(inner.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inner.cancelled


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)], ids=repr)
async def test_keyboard_interrupt_and_system_exit_propagate(exc: BaseException) -> None:
    """Exceptions that are not errors of the model are never swallowed into a ChatModelError."""
    with pytest.raises(type(exc)) as caught:
        await guard(CompleteOnly(exc)).complete(HELLO)
    assert caught.value is exc


# --- tools -------------------------------------------------------------------------------------


async def test_tools_reach_a_tool_model_and_its_tool_calls_come_back_parsed() -> None:
    """The specs are passed on; a JSON-text arguments string comes back as a dict."""
    inner = WithTools(ChatReply("", (ToolCall("memory_search", '{"query": "editor"}', "call-1"),)))
    reply = await guard(inner).chat(HELLO, tools=[SEARCH_TOOL])
    assert reply == ChatReply("", (ToolCall("memory_search", {"query": "editor"}, "call-1"),))
    assert inner.tools == [[SEARCH_TOOL]]


async def test_text_and_tool_calls_may_come_together() -> None:
    """A reply may say something and call a tool in the same turn."""
    answer = ChatReply("Let me look.", (ToolCall("memory_search", {"query": "x"}),))
    assert await guard(WithTools(answer)).chat(HELLO, tools=[SEARCH_TOOL]) == answer


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ((ToolCall("", {}),), "tool call #0: it names no tool"),
        ((ToolCall(None, {}),), "tool call #0: it names no tool"),  # type: ignore[arg-type]
        ((ToolCall("memory", [1, 2]),), "arguments are a list, not an object"),  # type: ignore[arg-type]
        ((ToolCall("memory", "[1, 2]"),), "arguments are a list, not an object"),
        ((ToolCall("memory", "{not json"),), "arguments are not JSON"),
        ((ToolCall("memory", None),), "arguments are None"),  # type: ignore[arg-type]
        ((ToolCall("memory", {}, 7),), "its id is an int"),  # type: ignore[arg-type]
        ((ToolCall("memory", {}), "memory"), "tool call #1: a str is not a tool call"),
        ("memory", "tool calls that are not a list"),
    ],
)
async def test_a_malformed_tool_call_is_a_chat_model_error(calls: Any, expected: str) -> None:
    """No name, arguments that are neither an object nor its JSON text, a bad id: the reply
    is refused whole, never passed on with the call dropped."""
    with pytest.raises(ChatModelError, match=r"^chat model WithTools returned") as caught:
        await guard(WithTools(ChatReply("text too", calls))).chat(HELLO, tools=[SEARCH_TOOL])
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("plain text", "returned a str instead of a ChatReply"),
        (None, "returned None instead of a ChatReply"),
        ({"text": "hi"}, "returned a dict instead of a ChatReply"),
        (ChatReply(""), "returned an empty reply (no text and no tool calls)"),
        (ChatReply(" "), "returned an empty reply (no text and no tool calls)"),
        (ChatReply(None), "returned reply text of type NoneType"),  # type: ignore[arg-type]
    ],
)
async def test_a_chat_answer_that_is_not_a_usable_reply_is_a_chat_model_error(
    answer: object, expected: str
) -> None:
    """chat must answer a ChatReply holding text or tool calls."""
    with pytest.raises(ChatModelError) as caught:
        await guard(WithTools(answer)).chat(HELLO)
    assert str(caught.value) == f"chat model WithTools {expected}"


async def test_a_model_without_chat_cannot_be_offered_tools() -> None:
    """Offered tools, a complete-only model is a ChatModelError before any call is made."""
    inner = CompleteOnly("would ignore the tools")
    with pytest.raises(ChatModelError, match="cannot be offered tools") as caught:
        await guard(inner).chat(HELLO, tools=[SEARCH_TOOL])
    assert "ToolChatModel" in str(caught.value)
    assert inner.calls == []
    assert await guard(inner).chat(HELLO, tools=[]) == ChatReply("would ignore the tools")


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ("memory", "tools must be a list"),
        ([42], "tool spec #0 is a"),
        ([{"type": "retrieval"}], "only 'function'"),
        ([{"type": "function"}], 'no "function" object'),
        ([{"function": {"description": "x"}}], "no function name"),
        ([{"function": {"name": " "}}], "no function name"),
        ([SEARCH_TOOL, SEARCH_TOOL], "repeats the tool name 'memory_search'"),
        ([{"function": {"name": "x", "description": 5}}], "description that is not text"),
        ([{"function": {"name": "x", "parameters": "{}"}}], "not a JSON-schema object"),
        ([{"function": {"name": "x", "parameters": {"type": "string"}}}], "of type 'string'"),
        (
            [{"function": {"name": "x", "parameters": {"properties": {"q": "string"}}}}],
            "not schemas by name",
        ),
    ],
)
async def test_malformed_tool_specs_are_the_callers_error_and_reach_no_model(
    tools: Any, expected: str
) -> None:
    """A tool spec that is not a function spec is an InvalidInputError; nothing is called."""
    inner = WithTools(ChatReply("unused"))
    with pytest.raises(InvalidInputError) as caught:
        await guard(inner).chat(HELLO, tools=tools)
    assert expected in str(caught.value)
    assert inner.calls == []


async def test_the_scripted_model_is_a_tool_model_behind_the_guard() -> None:
    """ScriptedChatModel implements chat, so the guard passes tools and tool calls through."""
    scripted = ScriptedChatModel()
    scripted.script_chat(tool_calls=[{"name": "memory_search", "arguments": {"query": "x"}}])
    reply = await guard(scripted).chat(HELLO, tools=[SEARCH_TOOL])
    assert reply.tool_calls == (ToolCall("memory_search", {"query": "x"}),)
    assert scripted.calls[0].tools == [SEARCH_TOOL]


# --- wrapping and closing ---------------------------------------------------------------------


async def test_guarding_a_guarded_model_wraps_the_model_once() -> None:
    """A guard around a guard guards the inner model; guard_chat_model returns a guard as is."""
    inner = CompleteOnly("ok")
    once = GuardedChatModel(inner, timeout_seconds=TIMEOUT)
    twice = GuardedChatModel(once, timeout_seconds=2.0)
    assert (twice.inner, twice.timeout_seconds) == (inner, 2.0)
    assert guard_chat_model(once, Settings(_env_file=None)) is once


async def test_guard_chat_model_takes_the_timeout_from_the_settings() -> None:
    """MEMORY_LLM_TIMEOUT_SECONDS bounds each call."""
    settings = Settings(_env_file=None, memory_llm_timeout_seconds=TIMEOUT)
    model = guard_chat_model(Hanging(), settings)
    assert model.timeout_seconds == TIMEOUT
    with pytest.raises(ChatModelError, match=r"within 0\.3 s"):
        await model.complete(HELLO)


async def test_aclose_closes_the_inner_model_and_tolerates_one_without_aclose() -> None:
    """aclose passes through; a model that has no aclose is closed by doing nothing."""
    inner = CompleteOnly("ok")
    await guard(inner).aclose()
    assert inner.closed == 1

    class NoClose:
        async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
            return "fine"

    bare = guard(NoClose())
    await bare.aclose()
    assert await bare.complete(HELLO) == "fine"


@pytest.mark.parametrize("seconds", [0, -1])
def test_a_timeout_that_cannot_work_is_a_config_error(seconds: float) -> None:
    """The guard refuses a non-positive timeout, naming the setting."""
    with pytest.raises(ConfigError, match="MEMORY_LLM_TIMEOUT_SECONDS"):
        GuardedChatModel(ScriptedChatModel(), timeout_seconds=seconds)


# --- the Ollama chat model behind the guard -----------------------------------------------------


SERVER_TIMEOUT = 10.0
"""For calls to the fake server that must succeed: its answer (an HTTP round trip to another
thread) may take more than TIMEOUT on a loaded machine."""


@pytest.fixture
async def ollama_pair(
    fake: FakeOllama, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[OllamaChatModel, GuardedChatModel]]:
    """An OllamaChatModel on the fake, bare and behind a guard with the same timeout: TIMEOUT
    for a test of the stall (its ``mode`` parameter), SERVER_TIMEOUT for the others."""
    params = getattr(request.node, "callspec", None)
    stall = params is not None and params.params.get("mode") == "stall"
    timeout = TIMEOUT if stall else SERVER_TIMEOUT
    bare = OllamaChatModel(fake.url, "llama3.1:8b", timeout=timeout)
    yield bare, GuardedChatModel(bare, timeout_seconds=timeout)
    await bare.aclose()


async def test_ollama_replies_and_tool_calls_pass_through_the_guard(
    fake: FakeOllama, ollama_pair: tuple[OllamaChatModel, GuardedChatModel]
) -> None:
    """Text and tool calls from the server arrive through the guard as they do without it."""
    _, model = ollama_pair
    fake.chat_replies.append("hello back")
    fake.script_chat(tool_calls=[{"name": "memory_search", "arguments": {"query": "port"}}])
    assert await model.complete(HELLO) == "hello back"
    reply = await model.chat(HELLO, tools=[SEARCH_TOOL])
    assert reply == ChatReply("", (ToolCall("memory_search", {"query": "port"}),))
    assert fake.chat_requests[1]["tools"] == [SEARCH_TOOL]
    assert isinstance(ollama_pair[0], ChatModel)


@pytest.mark.parametrize("mode", ["fail", "stall", "junk"])
@METHODS
async def test_ollama_failures_pass_through_the_guard_unchanged(
    fake: FakeOllama,
    ollama_pair: tuple[OllamaChatModel, GuardedChatModel],
    mode: str,
    method: str,
) -> None:
    """A failing, stalling or junk server gives the very message the Ollama model gives
    without the guard: host and model named."""
    fake.mode = mode  # type: ignore[assignment]
    fake.stall_seconds = 5
    messages = []
    for model in ollama_pair:
        with pytest.raises(ChatModelError) as caught:
            if method == "complete":
                await model.complete(HELLO)
            else:
                await model.chat(HELLO, tools=[SEARCH_TOOL])
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert fake.url in messages[1]
    assert "'llama3.1:8b'" in messages[1]


async def test_a_junk_tool_call_from_ollama_is_a_chat_model_error_through_the_guard(
    fake: FakeOllama, ollama_pair: tuple[OllamaChatModel, GuardedChatModel]
) -> None:
    """A tool call without a name, from the server, fails the reply with the server named."""
    _, model = ollama_pair
    fake.script_chat(tool_calls=[{"function": {"arguments": {"query": "x"}}}])
    with pytest.raises(ChatModelError, match="wrong shape") as caught:
        await model.chat(HELLO, tools=[SEARCH_TOOL])
    assert fake.url in str(caught.value)
