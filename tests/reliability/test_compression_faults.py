"""Compression when its models or its chunk writes fail: demoted messages never end up in no
chunk (#9 defect 3, compression side), the documented degradation holds whatever model is
plugged in, and the history repair finds every demoted message that no chunk holds."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from navi_memory import Memory, StorageError, open_memory
from navi_memory.schemas import ChunkHit, Message
from navi_memory.testing import FakeOllama, ScriptedChatModel
from tests.conftest import make_settings
from tests.integration.factories import execute, refuse_inserts
from tests.reliability.models import BrokenChatModel, BrokenEmbedder, ChatFault, EmbedderFault
from tests.reliability.snapshot import changed_tables, table_contents

SUMMARY = "They settled on port 8099.\nKEYS: 8099"
COMPRESS_DEADLINE = 5.0
"""No compression in these tests may take longer (the model timeouts are 1 s)."""


async def seeded_session(memory: Memory, uid: uuid.UUID, count: int = 8) -> str:
    await memory.users.ensure(uid)
    sid = (await memory.sessions.create(user_id=uid)).id
    for i in range(1, count + 1):
        role = "user" if i % 2 else "assistant"
        await memory.sessions.append(sid, role, f"m{i:03d} about port 80{i:02d}", user_id=uid)
    return sid


async def stored_chunks(memory: Memory, uid: uuid.UUID, sid: str) -> list[ChunkHit]:
    """Every chunk of the session, through the public read path (an empty query lists them)."""
    return await memory.store.search_chunks("", user_id=uid, session_id=sid, limit=1000)


def unindexed(history: list[Message], chunks: list[ChunkHit]) -> list[int]:
    """Seqs of demoted conversation messages that no chunk's seq range holds."""
    covered = {seq for c in chunks for seq in range(c.start_seq, c.end_seq + 1)}
    return [
        m.seq
        for m in history
        if not m.is_context and m.kind == "message" and m.role != "system" and m.seq not in covered
    ]


async def compress_outcome(memory: Memory, uid: uuid.UUID, sid: str) -> BaseException | None:
    try:
        await asyncio.wait_for(
            memory.sessions.compress(sid, keep_last=2, user_id=uid), COMPRESS_DEADLINE
        )
    except Exception as exc:
        return exc
    return None


# --- the invariant: no demoted message in no chunk ------------------------------------------


async def _never_unindexed(
    settings_url: str, fake: FakeOllama, *, embedder: Any = None, chat: Any = None
) -> None:
    settings = make_settings(
        settings_url, fake, embedding_timeout_seconds=1.0, memory_llm_timeout_seconds=1.0
    )
    async with open_memory(settings, embedder=embedder, chat_model=chat) as memory:
        uid = uuid.uuid4()
        sid = await seeded_session(memory, uid)
        before = await table_contents(memory.engine)
        error = await compress_outcome(memory, uid, sid)
        if isinstance(embedder, BrokenEmbedder):
            embedder.healthy = True  # reading the chunks back must not depend on the fault
        history = await memory.sessions.history(sid, user_id=uid)
        assert unindexed(history, await stored_chunks(memory, uid, sid)) == []
        if error is not None:
            after = await table_contents(memory.engine)
            assert after == before, changed_tables(before, after)


async def test_an_embedder_raising_connection_error_leaves_no_demoted_message_unindexed(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A custom embedder raising ConnectionError while compress indexes: whatever compress
    does, every demoted message is in a chunk (or nothing was demoted)."""
    await _never_unindexed(
        db_url, fake_ollama, embedder=BrokenEmbedder("raises"), chat=ScriptedChatModel([SUMMARY])
    )


async def test_an_embedder_returning_none_leaves_no_demoted_message_unindexed(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A custom embedder answering None: every demoted message is in a chunk, or none left."""
    await _never_unindexed(
        db_url, fake_ollama, embedder=BrokenEmbedder("none"), chat=ScriptedChatModel([SUMMARY])
    )


async def test_a_chat_model_raising_runtime_error_leaves_no_demoted_message_unindexed(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A custom chat model raising RuntimeError: every demoted message is in a chunk, or none
    left the context."""
    await _never_unindexed(db_url, fake_ollama, chat=BrokenChatModel("raises"))


async def test_a_failed_chunk_write_rolls_the_compression_back(memory: Memory) -> None:
    """When the chunk rows cannot be written, compress raises StorageError and the context is
    as it was: the demotion, the summary and the chunks land together or not at all."""
    uid = uuid.uuid4()
    sid = await seeded_session(memory, uid)
    await refuse_inserts(memory, "memory_chunks")
    before = await table_contents(memory.engine)
    with pytest.raises(StorageError):
        await memory.sessions.compress(sid, keep_last=2, user_id=uid)
    after = await table_contents(memory.engine)
    assert after == before, changed_tables(before, after)
    await refuse_inserts(memory, "memory_chunks", refuse=False)
    result = await memory.sessions.compress(sid, keep_last=2, user_id=uid)
    assert result.demoted == 6 and result.chunks_written > 0


# --- the documented degradation, whatever model is plugged in --------------------------------


@pytest.mark.parametrize("fault", ["raises", "none", "hangs"])
async def test_compress_with_a_broken_custom_embedder_stores_chunks_without_vectors(
    db_url: str, fake_ollama: FakeOllama, fault: EmbedderFault
) -> None:
    """As with Ollama down: the compression happens, its chunks land without vectors (backfill
    embeds them later), and no error reaches the caller."""
    embedder = BrokenEmbedder(fault)
    settings = make_settings(db_url, fake_ollama, embedding_timeout_seconds=1.0)
    async with open_memory(
        settings, embedder=embedder, chat_model=ScriptedChatModel([SUMMARY])
    ) as memory:
        uid = uuid.uuid4()
        sid = await seeded_session(memory, uid)
        result = await asyncio.wait_for(
            memory.sessions.compress(sid, keep_last=2, user_id=uid), COMPRESS_DEADLINE
        )
        assert result.demoted == 6 and not result.used_fallback
        chunks = await stored_chunks(memory, uid, sid)
        assert chunks and not any(c.has_embedding for c in chunks)
        history = await memory.sessions.history(sid, user_id=uid)
        assert unindexed(history, chunks) == []


@pytest.mark.parametrize("fault", ["raises", "none", "not_text", "hangs"])
async def test_compress_with_a_broken_custom_chat_model_falls_back_to_truncation(
    db_url: str, fake_ollama: FakeOllama, fault: ChatFault
) -> None:
    """As with Ollama down: the truncation note replaces the summary, and the demoted messages
    are indexed all the same."""
    settings = make_settings(db_url, fake_ollama, memory_llm_timeout_seconds=1.0)
    async with open_memory(settings, chat_model=BrokenChatModel(fault)) as memory:
        uid = uuid.uuid4()
        sid = await seeded_session(memory, uid)
        result = await asyncio.wait_for(
            memory.sessions.compress(sid, keep_last=2, user_id=uid), COMPRESS_DEADLINE
        )
        assert result.demoted == 6 and result.used_fallback
        assert result.summary is not None and "truncated" in result.summary.content
        history = await memory.sessions.history(sid, user_id=uid)
        assert unindexed(history, await stored_chunks(memory, uid, sid)) == []


async def test_a_chat_reply_with_nul_and_surrogates_is_cleaned_not_fatal(memory: Memory) -> None:
    """A custom chat model answering text PostgreSQL cannot hold (NUL, lone surrogates): the
    summary is stored cleaned, and nothing raises."""
    settings = memory.settings
    async with open_memory(settings, chat_model=BrokenChatModel("nul_and_surrogates")) as m:
        uid = uuid.uuid4()
        sid = await seeded_session(m, uid)
        result = await m.sessions.compress(sid, keep_last=2, user_id=uid)
        assert result.summary is not None and not result.used_fallback
        assert "\x00" not in result.summary.content
        result.summary.content.encode("utf-8")  # no lone surrogate survives


# --- the repair: index_dropped_history (make backfill) ---------------------------------------


async def test_the_repair_indexes_demoted_messages_of_a_session_without_a_summary(
    memory: Memory,
) -> None:
    """Messages out of the context with no summary at all (an older version, or SQL of the
    application's own) are found and indexed by index_dropped_history."""
    uid = uuid.uuid4()
    sid = await seeded_session(memory, uid)
    await execute(
        memory,
        "UPDATE session_messages SET is_context = false WHERE session_id = :s AND seq <= 4",
        s=sid,
    )
    assert await memory.sessions.index_dropped_history() > 0
    history = await memory.sessions.history(sid, user_id=uid)
    assert unindexed(history, await stored_chunks(memory, uid, sid)) == []


async def test_the_repair_indexes_a_session_compressed_a_moment_ago(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A compression made while MEMORY_SEARCH_ENABLED was false indexed nothing; with search
    on, the repair indexes it at once instead of waiting ten minutes."""
    uid = uuid.uuid4()
    async with open_memory(make_settings(db_url, fake_ollama, memory_search_enabled=False)) as m:
        sid = await seeded_session(m, uid)
        assert (await m.sessions.compress(sid, keep_last=2, user_id=uid)).chunks_written == 0
    async with open_memory(make_settings(db_url, fake_ollama)) as memory:
        assert await memory.sessions.index_dropped_history() > 0
        history = await memory.sessions.history(sid, user_id=uid)
        assert unindexed(history, await stored_chunks(memory, uid, sid)) == []
