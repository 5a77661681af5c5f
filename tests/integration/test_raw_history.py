"""The raw-history path end to end through open_memory(): append, compress with the real Ollama
client against the fake server, index, search, freshness boundary, delete."""

from __future__ import annotations

from sqlalchemy import text

from navi_memory import Memory, request_context
from navi_memory.testing import FakeOllama
from navi_memory.text import render_message
from tests.integration.factories import new_user, scalar

CONVERSATION = [
    ("user", "The API should listen on port 8099, 8098 clashes with the metrics exporter."),
    ("assistant", "Agreed: port 8099 it is. I'll put it in /etc/navi/api.toml."),
    ("user", "We decided to use PostgreSQL 18 with pgvector for the memory store."),
    ("assistant", "Noted the decision: PostgreSQL 18 + pgvector."),
    ("user", "Ticket #4512 tracks the migration."),
    ("assistant", "I'll link #4512 in the README."),
]


async def test_compressing_twice_indexes_every_demoted_message_exactly_once(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    fake_ollama.chat_replies.append("We chose port 8099.\nKEYS: port 8099, api.toml")
    fake_ollama.chat_replies.append("Port 8099, PostgreSQL 18.\nKEYS: PostgreSQL 18, #4512")
    with request_context(user_id=uid, session_id="s1"):
        await memory.sessions.create("s1")
        for role, content in CONVERSATION[:4]:
            await memory.sessions.append("s1", role, content)
        first = await memory.sessions.compress("s1", keep_last=1)
        for role, content in CONVERSATION[4:]:
            await memory.sessions.append("s1", role, content)
        second = await memory.sessions.compress("s1", keep_last=1)

        assert (first.used_fallback, second.used_fallback) == (False, False)
        assert first.summary is not None and "KEYS" not in first.summary.content
        assert "port 8099" in first.breadcrumbs and "/etc/navi/api.toml" in first.breadcrumbs
        assert "#4512" in second.breadcrumbs
        context = await memory.sessions.context("s1")
        assert context[0].kind == "summary"
        assert [m.content for m in context[1:]] == [CONVERSATION[-1][1]]

        history = await memory.sessions.history("s1")
        demoted = [m for m in history if m.kind == "message" and not m.is_context]
        chunks = await memory.store.search_chunks("", limit=50)
        joined = "\n\n".join(c.content for c in sorted(chunks, key=lambda c: c.start_seq))
        for message in demoted:
            rendered = render_message(message)
            assert rendered is not None
            assert joined.count(rendered) == 1
        assert len(demoted) == len(CONVERSATION) - 1

        hits = await memory.store.search_chunks("which port did we pick")
        assert hits
        assert "8099" in hits[0].content
        assert await memory.store.latest_summary_at("s1") == second.summary.created_at  # type: ignore[union-attr]

        assert await memory.sessions.delete("s1") is True
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0
    async with memory.engine.connect() as conn:
        left = (await conn.execute(text("SELECT count(*) FROM session_messages"))).scalar()
    assert left == 0
