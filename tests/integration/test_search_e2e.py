"""End to end, through the fake Ollama: a port said in a conversation, compressed away with a
KEYS line, then overridden by a newer fact — memory_search shows the fact first and the old
excerpt as outdated, with the embedding model up and with it down (the text path)."""

from __future__ import annotations

import re

import pytest

from navi_memory import Settings, ToolContext, open_memory, request_context
from navi_memory.testing import FakeOllama, ScriptedChatModel
from navi_memory.text.hits import BEFORE_SUMMARY_LINE, OUTDATED_LINE
from tests.integration.factories import new_user, scalar

SUMMARY_REPLY = (
    "The user set the server port for the API; the deploy script comes next.\n"
    "KEYS: server_port, 8098"
)


@pytest.mark.parametrize("embedder", ["up", "down"])
async def test_a_newer_fact_comes_first_and_the_compressed_excerpt_is_marked_outdated(
    settings: Settings, fake_ollama: FakeOllama, embedder: str
) -> None:
    """8098 said, compressed (KEYS: server_port, 8098), then server_port = 8099 saved: the
    search "server port" answers the fact, then the excerpt with the outdated warning."""
    fake_ollama.mode = "ok" if embedder == "up" else "fail"
    chat = ScriptedChatModel([SUMMARY_REPLY])
    async with open_memory(settings, chat_model=chat) as memory:
        uid = await new_user(memory)
        with request_context(user_id=uid, session_id="s1"):
            sessions = memory.sessions
            await sessions.create("s1")
            await sessions.append("s1", "user", "The server port is 8098, please remember it.")
            await sessions.append("s1", "assistant", "Got it: the API server listens on 8098.")
            await sessions.append("s1", "user", "Thanks. Next: the deploy script.")
            result = await sessions.compress("s1", keep_last=1)
            assert result.chunks_written == 1 and not result.used_fallback
            assert result.breadcrumbs[:2] == ["server_port", "8098"]

            await memory.store.upsert_fact("technical", "server_port", "8099")
            answer = await memory.tools.memory_search.call({"query": "server port"}, ToolContext())
            hits = await memory.search.search("server port", current_session_id="s1")

        with_vectors = await scalar(
            memory, "SELECT count(*) FROM memory_chunks WHERE embedding IS NOT NULL"
        )
    assert with_vectors == (1 if embedder == "up" else 0)
    assert [hit.source_type for hit in hits] == ["fact", "raw"]
    if embedder == "down":
        assert {hit.via for hit in hits} == {"text"}

    lines = answer.splitlines()
    assert lines[0] == 'memory_search "server port" (scope=all): 2 hit(s)'
    assert re.fullmatch(
        r"1\. fact \[technical\] · session s1 · updated \d{4}-\d\d-\d\d \d\d:\d\d", lines[2]
    )
    assert lines[3] == "   server_port: 8099"
    assert re.fullmatch(r"2\. raw · session s1 · turn 1–2 · \d{4}-\d\d-\d\d \d\d:\d\d", lines[4])
    # The excerpt is outdated (the newer fact) and predates the session's current summary.
    assert lines[5:8] == [
        f"   {OUTDATED_LINE}",
        f"   {BEFORE_SUMMARY_LINE}",
        "   keys: server_port, 8098",
    ]
    assert lines[8] == "   User: The server port is 8098, please remember it."
    assert hits[1].superseded_by == "server_port" and hits[1].before_summary
