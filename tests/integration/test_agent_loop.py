"""examples/agent_loop.py run end to end on the fake Ollama with scripted tool calls: the model
saves a fact through the memory tool, the session is compressed, a later prompt recalls the
dropped excerpt, and memory_search answers the fact before the outdated excerpt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from examples.agent_loop import SYSTEM_PROMPT, agent_turn
from navi_memory import Memory, OllamaChatModel, open_memory, request_context
from navi_memory.constants import MESSAGE_MAX_CHARS
from navi_memory.testing import FakeOllama
from navi_memory.text.recall import RECALL_HEADER
from tests.conftest import make_settings
from tests.integration.factories import new_user

# Each over half of CHUNK_MAX_CHARS (200), so the two land in raw chunks of their own.
PORT = (
    "Our API server port is 8098 for now; the metrics exporter sits next to it on the same "
    "box, and we may move both of them later on."
)
DEPLOY = (
    "The deploy script lives in /opt/navi/deploy.sh and it must run as root, always from a "
    "clean checkout of the main branch, never from a laptop."
)
MOVED = "We moved the API: the server port is 8099 now. Remember that."
QUESTION = "Where does the deploy script live again? And which server port do we use?"
# The KEYS line's breadcrumbs go with every excerpt of the compression, and the freshness rule
# reads them: naming server_port there would mark the deploy excerpt outdated as well.
SUMMARY = "The user runs an API and a deploy script.\nKEYS: /opt/navi/deploy.sh"


@pytest.fixture
async def memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    # Small chunks, so each exchange of the dropped history is an excerpt of its own.
    settings = make_settings(db_url, fake_ollama, chunk_max_chars=200, memory_compress_keep_last=4)
    async with open_memory(settings) as opened:
        yield opened


@pytest.fixture
async def model(fake_ollama: FakeOllama) -> AsyncIterator[OllamaChatModel]:
    agent = OllamaChatModel(fake_ollama.url, "agent-model", timeout=10)
    yield agent
    await agent.aclose()


def system_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "system"]


async def test_the_agent_loop_remembers_across_compression(
    memory: Memory, model: OllamaChatModel, fake_ollama: FakeOllama
) -> None:
    """Save through the tool, compress, recall the dropped excerpt, search: fact first."""
    uid = await new_user(memory)
    fake = fake_ollama
    with request_context(user_id=uid):
        session = await memory.sessions.create()
        sid = session.id

        fake.script_chat("Noted: 8098.")
        assert await agent_turn(memory, model, sid, PORT, compress_at=6) == "Noted: 8098."
        fake.script_chat("Got it.")
        await agent_turn(memory, model, sid, DEPLOY, compress_at=6)

        # Turn 3: the model saves the new port through the memory tool, then answers; the
        # context has grown past 6 messages, so the loop compresses (the summary is scripted).
        fake.script_chat(
            tool_calls=[
                {
                    "name": "memory",
                    "arguments": {
                        "action": "save",
                        "category": "technical",
                        "key": "server_port",
                        "value": "8099",
                        "source": "user_explicit",
                    },
                }
            ]
        )
        fake.script_chat("Saved: the server port is 8099.")
        fake.chat_replies.append(SUMMARY)
        await agent_turn(memory, model, sid, MOVED, compress_at=6)

        facts = await memory.store.get_all_facts()
        assert [(f.category, f.key, f.value, f.source) for f in facts] == [
            ("technical", "server_port", "8099", "user_explicit")
        ]
        history = await memory.sessions.history(sid)
        assert any(m.kind == "summary" for m in history)
        assert not any(m.content.startswith(f"{PORT}") for m in await memory.sessions.context(sid))

        # Turn 4: the prompt recalls the dropped deploy excerpt (never the outdated port one),
        # and the model's memory_search puts the curated fact before the outdated excerpt.
        asked = len(fake.chat_requests)
        fake.script_chat(
            tool_calls=[{"name": "memory_search", "arguments": {"query": "server port"}}]
        )
        fake.script_chat("The script is /opt/navi/deploy.sh and the port is 8099.")
        fake.chat_replies.append(SUMMARY)  # the context grew again: a second compression
        answer = await agent_turn(memory, model, sid, QUESTION, compress_at=6)
    assert answer == "The script is /opt/navi/deploy.sh and the port is 8099."

    first, second = fake.chat_requests[asked], fake.chat_requests[asked + 1]
    assert first["model"] == "agent-model"
    assert {tool["function"]["name"] for tool in first["tools"]} == {
        "memory",
        "memory_search",
        "scratchpad",
    }
    systems = system_texts(first)
    assert systems[0] == SYSTEM_PROMPT
    [recall] = [text for text in systems if text.startswith(RECALL_HEADER)]
    assert "/opt/navi/deploy.sh" in recall and "server port is 8098" not in recall
    assert first["messages"][-1] == {"role": "user", "content": QUESTION}

    result = [m for m in second["messages"] if m["role"] == "tool"][-1]
    assert result["tool_name"] == "memory_search"
    search = result["content"]
    assert search.startswith('memory_search "server port" (scope=all):')
    fact_at = search.index("1. fact [technical]")
    raw_at = search.index("raw · session")
    assert fact_at < raw_at
    assert "server_port: 8099" in search
    outdated = search[raw_at:]
    assert "⚠ outdated: a newer curated fact overrides this" in outdated
    assert "8098" in outdated


async def test_junk_from_the_model_is_answered_and_stored_and_the_turn_completes(
    memory: Memory, model: OllamaChatModel, fake_ollama: FakeOllama
) -> None:
    """NUL bytes in a tool call's arguments and in the reply, a tool name past what a session
    row holds: the tools answer the model with an error text, the session keeps a storable
    copy of each message, and the turn ends with the model's answer (not an exception that
    leaves the user's message alone in the session)."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        sid = (await memory.sessions.create()).id
        fake_ollama.script_chat(
            tool_calls=[
                {"name": "memory_search", "arguments": {"query": "port\u0000"}},
                {"name": "x" * 300, "arguments": {}},
            ]
        )
        fake_ollama.script_chat("hello\u0000world")
        answer = await agent_turn(memory, model, sid, "hi")
        history = await memory.sessions.history(sid)
    assert answer == "hello\u0000world"
    assert [(m.role, m.tool_name) for m in history] == [
        ("user", None),
        ("tool_call", "memory_search"),
        ("tool", "memory_search"),
        ("tool_call", "unknown_tool"),
        ("tool", "unknown_tool"),
        ("assistant", None),
    ]
    assert history[1].tool_args == {"query": "port"}
    assert "NUL" in history[2].content  # the tool's error text, as the model read it
    assert "there is no tool" in history[4].content
    assert history[-1].content == "helloworld"


async def test_lone_surrogates_and_oversized_arguments_are_stored_cleaned(
    memory: Memory, model: OllamaChatModel, fake_ollama: FakeOllama
) -> None:
    """A lone surrogate (the legal JSON escape "\\ud800") in a tool call's argument values and
    names and in the reply, and a tool call's arguments and a reply over what a session row
    holds: the session keeps U+FFFD for each surrogate, the big arguments as a placeholder
    saying they were cut, the reply cut with a note, and the turn ends with the model's answer
    (the turn, cleaned alike, went back to the model)."""
    uid = await new_user(memory)
    huge = "v" * MESSAGE_MAX_CHARS
    with request_context(user_id=uid):
        sid = (await memory.sessions.create()).id
        fake_ollama.script_chat(
            tool_calls=[
                {
                    "name": "memory",
                    "arguments": {"action": "list", "note": ["a\ud800b"], "\udc00x": 1},
                },
                {"name": "memory", "arguments": {"action": "save", "key": "k", "value": huge}},
            ]
        )
        fake_ollama.script_chat("bad \udc00 reply " + huge)
        answer = await agent_turn(memory, model, sid, "hi")
        history = await memory.sessions.history(sid)
    assert answer == "bad \udc00 reply " + huge
    assert [m.role for m in history] == ["user", *["tool_call", "tool"] * 2, "assistant"]
    assert history[1].tool_args == {"action": "list", "note": ["a\ufffdb"], "\ufffdx": 1}
    cut = history[3].tool_args
    assert cut is not None and set(cut) == {"cut", "text"}
    assert "cut" in cut["cut"] and f"{MESSAGE_MAX_CHARS:,}" in cut["cut"]
    assert cut["text"].startswith('{"action": "save", "key": "k", "value": "vvv')
    reply = history[-1].content
    assert reply.startswith("bad \ufffd reply vvv") and len(reply) == MESSAGE_MAX_CHARS
    assert reply.endswith(f"cut: {len(answer):,} characters, over the limit of 1,000,000]")
