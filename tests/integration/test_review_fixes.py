"""Regressions found in review: tenancy of users and unmerge, the delete/upsert race, vectors a
column cannot hold, unknown users, extraction state ownership, stale backfill vectors."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    Memory,
    MemoryStore,
    NotFoundError,
    PermissionDeniedError,
    request_context,
)
from navi_memory.jobs.backfill import FactBackfill
from navi_memory.repositories.facts import category_lock_scope
from navi_memory.testing import FakeOllama, HashedEmbedder
from navi_memory.unit_of_work import unit_of_work
from tests.conftest import make_settings
from tests.integration.factories import new_session_row, new_user, scalar


async def test_acting_for_one_user_cannot_read_or_delete_another_user(memory: Memory) -> None:
    alice, bob = await new_user(memory, "Alice"), await new_user(memory, "Bob")
    with request_context(user_id=alice):
        with pytest.raises(PermissionDeniedError):
            await memory.users.get(bob)
        with pytest.raises(PermissionDeniedError):
            await memory.users.delete(bob)
        with pytest.raises(PermissionDeniedError):
            await memory.users.ensure(bob, "renamed")
        assert (await memory.users.get(alice)) is not None
    assert await memory.users.get(bob) is not None


async def test_unmerge_acting_for_a_user_never_touches_another_users_row(memory: Memory) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=bob)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=bob, dedupe=True)
    with (
        request_context(user_id=alice, permissions=[PERMISSION_READ_ALL]),
        pytest.raises(NotFoundError),
    ):
        await memory.store.unmerge_fact(old.id)


@asynccontextmanager
async def holding_category_lock(
    memory: Memory, uid: uuid.UUID, category: str
) -> AsyncIterator[None]:
    """A writer holding (uid, category)'s advisory lock, as an upsert does, until the block
    ends (then rolled back)."""
    async with memory.engine.connect() as holder:
        transaction = await holder.begin()
        await holder.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:s, 0))"),
            {"s": category_lock_scope(uid, category)},
        )
        try:
            yield
        finally:
            await transaction.rollback()


async def test_delete_fact_waits_for_a_writer_of_the_same_category(busy_memory: Memory) -> None:
    memory = busy_memory
    uid = await new_user(memory)
    await memory.store.upsert_fact("p", "editor", "vim", user_id=uid)
    async with holding_category_lock(memory, uid, "p"):
        deleting = asyncio.create_task(memory.store.delete_fact("editor", user_id=uid))
        await asyncio.sleep(0.3)
        assert not deleting.done()  # serialised behind the writer holding the category
    assert await deleting == 1


async def test_delete_fact_leaves_a_category_it_did_not_lock(busy_memory: Memory) -> None:
    """delete_fact without a category lists the key's categories, then locks them: a row an
    upsert writes meanwhile into another category is not under its locks, so it stays (that
    upsert counts as after the delete) instead of being deleted under an upsert's feet."""
    memory = busy_memory
    uid = await new_user(memory)
    await memory.store.upsert_fact("p", "editor", "vim", user_id=uid)
    async with holding_category_lock(memory, uid, "p"):
        deleting = asyncio.create_task(memory.store.delete_fact("editor", user_id=uid))
        # Until the delete has listed ["p"] and waits for its lock (or ends, failing below): a
        # deadline, not a count of polls, so a loaded machine's slow delete is waited for.
        async with asyncio.timeout(15):
            while True:
                waiting = await scalar(
                    memory,
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                )
                if waiting or deleting.done():
                    break
                await asyncio.sleep(0.02)
        assert waiting == 1
        # An upsert writes the key into a category the delete did not list.
        await memory.store.upsert_fact("q", "editor", "emacs", user_id=uid)
    assert await deleting == 1
    (left,) = await memory.store.get_all_facts(user_id=uid)
    assert (left.category, left.key, left.value) == ("q", "editor", "emacs")


async def test_concurrent_upserts_and_deletes_of_one_key_never_error(busy_memory: Memory) -> None:
    memory = busy_memory
    uid = await new_user(memory)
    calls: list[Awaitable[object]] = []
    for i in range(12):
        calls.append(memory.store.upsert_fact("p", "editor", f"editor {i}", user_id=uid))
        calls.append(memory.store.delete_fact("editor", user_id=uid))
    await asyncio.gather(*calls)
    assert await memory.store.fact_count(user_id=uid, include_merged=True) <= 1


async def test_deleting_a_user_deletes_their_extraction_state(memory: Memory) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.mark_session_extracted("shared-id", user_id=alice)
    await memory.users.delete(alice)
    assert await scalar(memory, "SELECT count(*) FROM session_memory_state") == 0
    assert await memory.store.get_extracted_at("shared-id", user_id=bob) is None


async def test_extraction_state_for_a_session_kept_outside_the_sessions_table(
    memory: Memory,
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    marked = await memory.store.mark_session_extracted("app-session-7", user_id=alice)
    assert await memory.store.get_extracted_at("app-session-7", user_id=alice) == marked
    assert await memory.store.get_extracted_at("app-session-7", user_id=bob) is None
    with pytest.raises(NotFoundError):
        await memory.store.mark_session_extracted("app-session-7", user_id=bob)
    sid = await new_session_row(memory, bob)
    with pytest.raises(NotFoundError):
        await memory.store.mark_session_extracted(sid, user_id=alice)


class HugeEmbedder(HashedEmbedder):
    """Answers vectors no vector(768) column can hold."""

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1e39] * self.dim for _ in texts]

    async def embed_query(self, text: str) -> list[float]:
        return [float("nan")] * self.dim


async def test_an_embedder_answering_unstorable_vectors_degrades_to_text(memory: Memory) -> None:
    uid = await new_user(memory)
    store = MemoryStore(
        sessionmaker=memory.sessionmaker, settings=memory.settings, embedder=HugeEmbedder()
    )
    fact = await store.upsert_fact("work", "vpn", "WireGuard", user_id=uid)
    assert not fact.has_embedding
    assert [h.via for h in await store.search_facts("WireGuard", user_id=uid)] == ["text"]


async def test_a_malformed_embedding_host_is_refused_before_anything_is_stored(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A host the client cannot parse was once taken, and every fact then stored without a
    vector; it is a bad setting (Settings raises pydantic's ValidationError, a ValueError;
    load_settings a ConfigError naming it), refused before the memory opens."""
    assert memory.settings.database_url is not None
    with pytest.raises(ValidationError, match="embedding_ollama_host") as refused:
        make_settings(
            memory.settings.database_url, fake_ollama, embedding_ollama_host="http://host:abc"
        )
    assert "write it as http://host:11434" in str(refused.value)


async def test_unknown_users_and_invalid_unicode_are_clear_errors(memory: Memory) -> None:
    with pytest.raises(NotFoundError, match=r"users\.ensure"):
        await memory.store.upsert_fact("p", "editor", "vim", user_id=uuid.uuid4())
    uid = await new_user(memory)
    with pytest.raises(InvalidInputError, match="surrogate"):
        await memory.store.upsert_fact("p", "editor", "vim\ud800", user_id=uid)
    with pytest.raises(InvalidInputError, match="surrogate"):
        await memory.kv.set("scratchpad", "k", "v\udfff", user_id=uid)


def draft_dict(content: str, *, naive: bool = False) -> dict[str, object]:
    at = datetime(2026, 11, 1, 12, 0) if naive else datetime.fromisoformat("2026-11-01T12:00Z")
    return {
        "content": content,
        "content_hash": hashlib.sha256(content.encode()).hexdigest(),
        "start_seq": 1,
        "end_seq": 1,
        "started_at": at,
        "ended_at": at,
    }


@pytest.mark.slow
async def test_add_chunks_refuses_malformed_and_naive_chunks_and_takes_many(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    with pytest.raises(InvalidInputError, match="malformed"):
        await memory.store.add_chunks([{"content": "x"}], user_id=uid, session_id="s1")  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="time zone"):
        await memory.store.add_chunks(
            [draft_dict("naive", naive=True)],  # type: ignore[list-item]
            user_id=uid,
            session_id="s1",
        )
    many = [draft_dict(f"chunk number {i}") for i in range(3300)]
    assert await memory.store.add_chunks(many, user_id=uid, session_id="s1") == 3300  # type: ignore[arg-type]


async def test_backfill_never_attaches_a_vector_to_a_value_changed_meanwhile(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    fact = await memory.store.upsert_fact("p", "editor", "vim", user_id=uid)
    async with memory.engine.begin() as conn:
        await conn.execute(text("UPDATE memory_facts SET embedding = NULL"))
    source = FactBackfill()
    async with unit_of_work(memory.sessionmaker) as session:
        batch = await source.next_batch(session, 0, 8)
    vectors = await HashedEmbedder().embed_documents([t for _, t in batch])
    async with memory.engine.begin() as conn:  # a new value lands while the batch embeds
        await conn.execute(
            text("UPDATE memory_facts SET value = 'emacs' WHERE id = :i"), {"i": fact.id}
        )
    async with unit_of_work(memory.sessionmaker) as session:
        await source.store(session, [(i, t, v) for (i, t), v in zip(batch, vectors, strict=True)])
    assert await scalar(memory, "SELECT embedding IS NULL FROM memory_facts") is True
