"""OllamaChatModel through the real ollama client against FakeOllama: scripted replies, JSON
format, settings, and every failure turned into a ChatModelError."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from navi_memory.config import Settings
from navi_memory.errors import ChatModelError, ChatModelTimeoutError, ConfigError, InvalidInputError
from navi_memory.llm import ChatModel, ChatTurn, OllamaChatModel
from navi_memory.testing import FakeOllama

CHAT_MODEL = "llama3.1:8b"
HELLO = [{"role": "user", "content": "hello"}]

MakeChat = Callable[..., OllamaChatModel]


@pytest.fixture
async def make_chat() -> AsyncIterator[MakeChat]:
    made: list[OllamaChatModel] = []

    def make(host: str, **overrides: Any) -> OllamaChatModel:
        params: dict[str, Any] = {"model": CHAT_MODEL, "timeout": 5.0} | overrides
        model = OllamaChatModel(host, **params)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


async def test_the_scripted_reply_comes_back(fake: FakeOllama, make_chat: MakeChat) -> None:
    fake.chat_replies.append("hi there")
    assert await make_chat(fake.url).complete(HELLO) == "hi there"


async def test_the_request_carries_model_messages_and_no_stream(
    fake: FakeOllama, make_chat: MakeChat
) -> None:
    fake.chat_replies.append("ok")
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "bye"},
    ]
    await make_chat(fake.url).complete(messages)
    (request,) = fake.requests_to("/api/chat")
    assert request.json["model"] == CHAT_MODEL
    assert request.json["messages"] == messages
    assert request.json["stream"] is False
    assert "format" not in request.json


async def test_json_format_asks_ollama_for_json(fake: FakeOllama, make_chat: MakeChat) -> None:
    fake.chat_replies.append('{"facts": []}')
    assert await make_chat(fake.url).complete(HELLO, json_format=True) == '{"facts": []}'
    assert fake.requests_to("/api/chat")[0].json["format"] == "json"


async def test_chat_turns_are_sent_as_role_content_dicts(
    fake: FakeOllama, make_chat: MakeChat
) -> None:
    fake.chat_replies.extend(["one", "two"])
    chat = make_chat(fake.url)
    await chat.complete([ChatTurn("system", "rules"), ChatTurn("user", "hello")])
    await chat.complete(
        [{"role": "system", "content": "rules"}, {"role": "user", "content": "hello"}]
    )
    first, second = (r.json["messages"] for r in fake.requests_to("/api/chat"))
    assert (
        first
        == second
        == [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "hello"},
        ]
    )


async def test_scripted_replies_are_used_in_order_then_the_handler(
    fake: FakeOllama, make_chat: MakeChat
) -> None:
    fake.chat_replies.extend(["first", "second"])
    fake.chat_handler = lambda request: "echo: " + request["messages"][-1]["content"]
    chat = make_chat(fake.url)
    replies = [await chat.complete([{"role": "user", "content": f"m{i}"}]) for i in range(3)]
    assert replies == ["first", "second", "echo: m2"]


@pytest.mark.slow
async def test_settings_choose_host_key_model_and_timeout(fake: FakeOllama) -> None:
    settings = Settings(
        _env_file=None,
        ollama_host=fake.url,
        ollama_api_key="cloud-key",
        memory_llm_model="qwen3:4b",
        # Long enough for the first call's answer on a loaded machine; the stall (10 s) is cut
        # at it, as the message says.
        memory_llm_timeout_seconds=3.0,
        embedding_ollama_host="http://embeddings.example.invalid:11434",
        embedding_ollama_api_key="local-key",
    )
    fake.chat_replies.append("ok")
    async with OllamaChatModel.from_settings(settings) as chat:
        assert isinstance(chat, ChatModel)
        assert await chat.complete(HELLO) == "ok"
        fake.mode = "stall"
        fake.stall_seconds = 10
        started = time.monotonic()
        with pytest.raises(ChatModelError, match=r"did not answer within 3 s \(timeout\)"):
            await chat.complete(HELLO)
        assert time.monotonic() - started < 9
    first = fake.requests_to("/api/chat")[0]
    assert first.headers["authorization"] == "Bearer cloud-key"
    assert first.json["model"] == "qwen3:4b"


async def test_every_call_asks_for_the_context_window_of_the_settings(fake: FakeOllama) -> None:
    """MEMORY_LLM_NUM_CTX goes out as Ollama's num_ctx option on every call, complete and
    chat alike: left to Ollama's default (2-4k tokens), a long extraction prompt loses its
    head without an error."""
    settings = Settings(_env_file=None, ollama_host=fake.url, memory_llm_num_ctx=16384)
    fake.chat_replies.extend(["one", "two", "three"])
    async with OllamaChatModel.from_settings(settings) as chat:
        await chat.complete(HELLO)
        await chat.complete(HELLO, json_format=True)
        await chat.chat(HELLO)
    requests = fake.requests_to("/api/chat")
    assert [r.json["options"] for r in requests] == [{"num_ctx": 16384}] * 3


async def test_without_a_setting_the_context_window_is_8192(
    fake: FakeOllama, make_chat: MakeChat
) -> None:
    fake.chat_replies.append("ok")
    await make_chat(fake.url).complete(HELLO)
    assert fake.requests_to("/api/chat")[0].json["options"] == {"num_ctx": 8192}


async def test_without_a_key_no_authorization_is_sent(
    fake: FakeOllama, make_chat: MakeChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_API_KEY", "from-the-environment")
    fake.chat_replies.append("ok")
    await make_chat(fake.url).complete(HELLO)
    assert "authorization" not in fake.recorded[0].headers


@pytest.mark.parametrize(
    ("mode", "seconds", "expected"),
    [
        # Only the stall is about time: the others get a timeout a loaded machine (CI, four
        # workers on two cores) cannot reach before the answer, which 0.3 s once was.
        ("fail", 10.0, "answered HTTP 500"),
        ("stall", 0.3, "did not answer within 0.3 s"),
        ("junk", 10.0, "not JSON"),
    ],
)
async def test_each_failure_mode_is_a_chat_model_error_naming_host_and_model(
    fake: FakeOllama, make_chat: MakeChat, mode: str, seconds: float, expected: str
) -> None:
    fake.mode = mode  # type: ignore[assignment]
    fake.stall_seconds = 5
    fake.chat_replies.append("never delivered")
    started = time.monotonic()
    with pytest.raises(ChatModelError) as caught:
        await make_chat(fake.url, api_key="secret-key", timeout=seconds).complete(HELLO)
    message = str(caught.value)
    assert expected in message
    assert fake.url in message
    assert repr(CHAT_MODEL) in message
    assert "secret-key" not in message
    assert caught.value.__cause__ is not None
    assert time.monotonic() - started < 4  # the stall is cut at 0.3 s, not after its 5 s
    # A stall, and only a stall, is also a TimeoutError: ``except TimeoutError`` catches it.
    assert isinstance(caught.value, TimeoutError) is (mode == "stall")
    assert isinstance(caught.value, ChatModelTimeoutError) is (mode == "stall")


@pytest.mark.parametrize("reply", ["", "  \n "])
async def test_an_empty_reply_is_a_chat_model_error(
    fake: FakeOllama, make_chat: MakeChat, reply: str
) -> None:
    fake.chat_replies.append(reply)
    with pytest.raises(ChatModelError, match="empty reply"):
        await make_chat(fake.url).complete(HELLO)


async def test_an_unscripted_turn_is_an_empty_reply(fake: FakeOllama, make_chat: MakeChat) -> None:
    with pytest.raises(ChatModelError, match="empty reply"):
        await make_chat(fake.url).complete(HELLO)


async def test_a_reply_of_the_wrong_shape_is_a_chat_model_error(
    fake: FakeOllama, make_chat: MakeChat
) -> None:
    fake.mode = "junk"
    fake.junk_body = b'{"model": "m", "done": true}'
    with pytest.raises(ChatModelError, match="wrong shape"):
        await make_chat(fake.url).complete(HELLO)


async def test_a_reply_nested_past_the_json_decoders_stack_is_a_chat_model_error(
    fake: FakeOllama, make_chat: MakeChat
) -> None:
    fake.mode = "junk"
    fake.junk_body = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ChatModelError, match="JSON nested too deeply"):
        await make_chat(fake.url).complete(HELLO)


async def test_server_not_listening_is_a_chat_model_error(
    unused_url: str, make_chat: MakeChat
) -> None:
    with pytest.raises(ChatModelError, match="could not be reached") as caught:
        await make_chat(unused_url, timeout=2).complete(HELLO)
    assert unused_url in str(caught.value)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], "at least one message"),
        ([{"role": "function", "content": "x"}], "role 'function'"),
        ([{"content": "no role"}], "role ''"),
        ([{"role": "user", "content": 42}], "content"),
    ],
)
async def test_malformed_messages_are_refused_before_any_request(
    fake: FakeOllama, make_chat: MakeChat, messages: Any, expected: str
) -> None:
    with pytest.raises(InvalidInputError, match=expected):
        await make_chat(fake.url).complete(messages)
    assert fake.requests == []


@pytest.mark.parametrize(
    ("host", "model", "timeout", "setting"),
    [
        ("", CHAT_MODEL, 1.0, "OLLAMA_HOST"),
        ("http://127.0.0.1:11434", "", 1.0, "MEMORY_LLM_MODEL"),
        ("http://127.0.0.1:11434", CHAT_MODEL, 0.0, "MEMORY_LLM_TIMEOUT_SECONDS"),
    ],
)
def test_bad_configuration_is_a_config_error(
    host: str, model: str, timeout: float, setting: str
) -> None:
    with pytest.raises(ConfigError, match=setting):
        OllamaChatModel(host, model, timeout=timeout)


@pytest.mark.parametrize("num_ctx", [0, 1024, 2**20 + 1, True, 8192.0, "8192"])
def test_a_context_window_out_of_bounds_is_a_config_error(num_ctx: Any) -> None:
    with pytest.raises(ConfigError, match="MEMORY_LLM_NUM_CTX"):
        OllamaChatModel("http://127.0.0.1:11434", CHAT_MODEL, timeout=1.0, num_ctx=num_ctx)
