"""FakeOllama itself: Ollama's JSON on the wire, switches, recording, and a clean stop."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import ollama
import pytest

from navi_memory.testing import FakeOllama, hashed_embedding


def test_health_endpoints_answer(fake: FakeOllama) -> None:
    assert httpx.get(fake.url + "/").text == "Ollama is running"
    assert "version" in httpx.get(fake.url + "/api/version").json()
    assert httpx.get(fake.url + "/api/nothing").status_code == 404


def test_embed_answers_ollama_json_for_a_single_string(fake: FakeOllama) -> None:
    body = httpx.post(fake.url + "/api/embed", json={"model": "m", "input": "hello"}).json()
    assert body["model"] == "m"
    assert body["embeddings"] == [hashed_embedding("hello")]
    assert {"total_duration", "load_duration", "prompt_eval_count"} <= body.keys()


def test_fake_dimension_is_configurable() -> None:
    with FakeOllama(dim=16) as fake:
        body = httpx.post(fake.url + "/api/embed", json={"model": "m", "input": ["a", "b"]})
        assert [len(e) for e in body.json()["embeddings"]] == [16, 16]
        fake.mode = "wrong_dim"
        body = httpx.post(fake.url + "/api/embed", json={"model": "m", "input": ["a"]})
        assert [len(e) for e in body.json()["embeddings"]] == [8]


def test_bad_requests_get_ollama_style_errors(fake: FakeOllama) -> None:
    not_json = httpx.post(fake.url + "/api/embed", content=b"{oops")
    assert not_json.status_code == 400
    assert "error" in not_json.json()
    no_model = httpx.post(fake.url + "/api/chat", json={"messages": []})
    assert no_model.status_code == 400
    assert no_model.json() == {"error": "model is required"}


def test_fail_mode_answers_500_with_an_error_field(fake: FakeOllama) -> None:
    fake.mode = "fail"
    response = httpx.post(fake.url + "/api/chat", json={"model": "m", "messages": []})
    assert response.status_code == 500
    assert set(response.json()) == {"error"}
    assert httpx.get(fake.url + "/api/version").status_code == 200  # health is not switched


def test_an_unknown_mode_is_refused(fake: FakeOllama) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        fake.mode = "sometimes"  # type: ignore[assignment]
    assert fake.mode == "ok"


async def test_streamed_chat_is_answered_as_ndjson_through_the_real_client(
    fake: FakeOllama,
) -> None:
    fake.chat_replies.append("streamed reply")
    client = ollama.AsyncClient(host=fake.url, timeout=5)
    try:
        parts = [
            part
            async for part in await client.chat(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        ]
    finally:
        await client.close()  # type: ignore[no-untyped-call]
    assert "".join(p.message.content or "" for p in parts) == "streamed reply"
    assert parts[-1].done is True


def test_requests_are_recorded_with_headers_and_can_be_cleared(fake: FakeOllama) -> None:
    httpx.post(
        fake.url + "/api/embed",
        json={"model": "m", "input": ["x"]},
        headers={"Authorization": "Bearer k"},
    )
    assert fake.requests == [("/api/embed", {"model": "m", "input": ["x"]})]
    assert fake.recorded[0].headers["authorization"] == "Bearer k"
    assert fake.recorded[0].method == "POST"
    fake.chat_replies.append("left over")
    fake.clear()
    assert fake.requests == []
    assert not fake.chat_replies


def test_a_chat_handler_that_raises_gives_a_500_not_a_hang(fake: FakeOllama) -> None:
    def broken(request: object) -> str:
        raise RuntimeError("bug in test")

    fake.chat_handler = broken
    response = httpx.post(
        fake.url + "/api/chat", json={"model": "m", "messages": [], "stream": False}, timeout=5
    )
    assert response.status_code == 500
    assert "bug in test" in response.json()["error"]


def test_a_stopped_fake_is_unreachable_even_over_a_kept_alive_connection() -> None:
    fake = FakeOllama().start()
    url = fake.url
    with httpx.Client(timeout=2) as client:
        assert client.get(url + "/").status_code == 200
        fake.stop()
        with pytest.raises(httpx.TransportError):
            client.get(url + "/")
    with pytest.raises(RuntimeError, match="not started"):
        _ = fake.url


def test_stop_does_not_wait_for_a_stalled_answer() -> None:
    fake = FakeOllama(mode="stall", stall_seconds=30).start()
    url = fake.url
    outcome: list[object] = []

    def request() -> None:
        try:
            outcome.append(httpx.post(url + "/api/embed", json={"model": "m"}, timeout=10))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=request, daemon=True)
    caller.start()
    deadline = time.monotonic() + 5
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.requests, "the stalled request never arrived"
    started = time.monotonic()
    fake.stop()
    assert time.monotonic() - started < 2
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert isinstance(outcome[0], httpx.TransportError)  # abandoned: it fails, it does not hang


def test_reset_restores_every_switch_and_forgets_everything() -> None:
    with FakeOllama(stall_seconds=3.0, default_chat_reply="default") as fake:
        fake.mode = "stall"
        fake.stall_seconds = 99
        fake.wrong_dim = 5
        fake.junk_body = b"x"
        fake.default_chat_reply = "changed"
        fake.chat_handler = lambda request: "handled"
        fake.chat_replies.append("scripted")
        httpx.get(fake.url + "/")
        fake.reset()
        assert (fake.mode, fake.stall_seconds, fake.wrong_dim) == ("ok", 3.0, 384)
        assert fake.chat_handler is None
        assert fake.junk_body != b"x"
        assert fake.requests == []
        assert not fake.chat_replies
        reply = httpx.post(
            fake.url + "/api/chat", json={"model": "m", "messages": [], "stream": False}
        ).json()
        assert reply["message"]["content"] == "default"


# --- tool calls ---------------------------------------------------------------------------------


def chat(fake: FakeOllama, **body: object) -> dict[str, Any]:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    response = httpx.post(fake.url + "/api/chat", json=request | body, timeout=5)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_script_chat_answers_tool_calls_in_ollamas_wire_shape(fake: FakeOllama) -> None:
    """Each {"name", "arguments"} is sent as {"function": {...}} in the assistant message."""
    fake.script_chat("Looking.", tool_calls=[{"name": "memory", "arguments": {"action": "list"}}])
    message = chat(fake)["message"]
    assert message == {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [{"function": {"name": "memory", "arguments": {"action": "list"}}}],
    }


def test_a_scripted_tool_call_with_a_function_key_is_sent_exactly_as_given(
    fake: FakeOllama,
) -> None:
    """So a test can script the malformed calls a real server might send."""
    junk = {"function": {"arguments": "not an object"}, "extra": 1}
    fake.script_chat(tool_calls=[junk])
    assert chat(fake)["message"]["tool_calls"] == [junk]


def test_a_whole_message_can_be_queued_or_answered_by_the_handler(fake: FakeOllama) -> None:
    """chat_replies and chat_handler take a message dict as well as text; role and content
    default to an assistant's empty text."""
    fake.chat_replies.append({"tool_calls": [{"function": {"name": "a", "arguments": {}}}]})
    fake.chat_handler = lambda request: {"content": f"{len(request['tools'])} tools"}
    first = chat(fake, tools=[])["message"]
    assert first == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "a", "arguments": {}}}],
    }
    assert chat(fake, tools=[{"x": 1}, {"y": 2}])["message"]["content"] == "2 tools"


def test_a_reply_that_is_neither_text_nor_a_message_gives_a_500(fake: FakeOllama) -> None:
    """A test's handler answering junk is reported, not turned into a hang."""
    fake.chat_handler = lambda request: 42  # type: ignore[assignment,return-value]
    response = httpx.post(
        fake.url + "/api/chat", json={"model": "m", "messages": [], "stream": False}, timeout=5
    )
    assert response.status_code == 500
    assert "42" in response.json()["error"]


def test_chat_requests_hold_what_the_client_sent(fake: FakeOllama) -> None:
    """Only /api/chat bodies, oldest first, with their messages and tools."""
    fake.chat_replies.extend(["one", "two"])
    httpx.post(fake.url + "/api/embed", json={"model": "e", "input": ["x"]})
    chat(fake, tools=[{"type": "function", "function": {"name": "t"}}])
    chat(fake, messages=[{"role": "user", "content": "second"}])
    first, second = fake.chat_requests
    assert first["tools"] == [{"type": "function", "function": {"name": "t"}}]
    assert second["messages"] == [{"role": "user", "content": "second"}]
    fake.clear()
    assert fake.chat_requests == []


async def test_streamed_chat_carries_scripted_tool_calls_through_the_real_client(
    fake: FakeOllama,
) -> None:
    """Streaming, the tool calls arrive in a chunk the real client parses."""
    fake.script_chat(tool_calls=[{"name": "memory_search", "arguments": {"query": "port"}}])
    client = ollama.AsyncClient(host=fake.url, timeout=5)
    try:
        parts = [
            part
            async for part in await client.chat(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        ]
    finally:
        await client.close()  # type: ignore[no-untyped-call]
    calls = [call for part in parts for call in part.message.tool_calls or ()]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("memory_search", {"query": "port"})
    ]
    assert parts[-1].done is True
