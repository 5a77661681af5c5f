"""The chunk vector index off the write path: queue, indexer, and search over both tables (the
text index: test_chunk_text_index.py)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from navi_memory import PERMISSION_READ_ALL, Memory, StorageError, open_memory, request_context
from navi_memory.db import vector_binary
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.queue_indexer import RETRY_DELAYS
from navi_memory.repositories.chunks import ChunkRepository, ChunkSearchRepository, IndexedBatch
from navi_memory.schemas import ChunkDraft
from navi_memory.testing import FakeOllama
from navi_memory.testing.hashing import hashed_embedding
from tests.conftest import make_settings
from tests.integration.factories import chunk_draft as draft
from tests.integration.factories import (
    execute,
    near_tie,
    new_user,
    refuse_inserts,
    scalar,
    sleeping_statements,
    slow_trigger,
    wait_for_a_sleeping_statement,
)

TOPICS = (
    "the staging database runs on port 5433 behind pgbouncer",
    "deploys go out through the blue green pipeline on fridays",
    "the invoice total for october was 4,120 euros",
    "Berlin office moves to the new building in march",
    "the nightly backup job writes to /srv/backups/nightly",
    "ticket #4411 tracks the flaky login test",
    "the search service answers in 12 ms at p50",
    "we chose PostgreSQL 18 with pgvector for the memory store",
)


def drafts(prefix: str, count: int = len(TOPICS)) -> list[ChunkDraft]:
    return [draft(f"User: {prefix} note {i}: {TOPICS[i % len(TOPICS)]}", i) for i in range(count)]


@pytest.fixture
async def manual(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory with background indexing off: the test decides when the queue is drained."""
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
    async with open_memory(settings) as opened:
        yield opened


async def counts(memory: Memory) -> tuple[object, object]:
    return (
        await scalar(memory, "SELECT count(*) FROM memory_chunk_vector_queue"),
        await scalar(memory, "SELECT count(*) FROM memory_chunk_vectors"),
    )


async def ranked(memory: Memory, query: str, user_id: uuid.UUID) -> list[tuple[int, str]]:
    return [(h.id, h.via) for h in await memory.store.search_chunks(query, user_id=user_id)]


QUERIES = TOPICS[:4]
"""Whole topic sentences: the hashed test embedder puts them within 0.45 of their chunks."""


async def test_written_chunks_are_queued_then_indexed_and_search_gives_the_same_hits(
    manual: Memory,
) -> None:
    uid = await new_user(manual)
    assert await manual.store.add_chunks(drafts("a", 24), user_id=uid, session_id="s1") == 24
    assert await counts(manual) == (24, 0)
    assert await manual.store.pending_chunk_count() == 24
    before = {q: await ranked(manual, q, uid) for q in QUERIES}
    distances = {
        q: [h.distance for h in await manual.store.search_chunks(q, user_id=uid)] for q in QUERIES
    }
    assert all(before[q] and before[q][0][1] == "vector" for q in QUERIES)

    assert await manual.store.index_pending_chunks() == 24
    assert await counts(manual) == (0, 24)
    assert await manual.store.index_pending_chunks() == 0
    for q in QUERIES:
        assert await ranked(manual, q, uid) == before[q], q
        # The index finds the rows; the distance reported is the full-precision one.
        after = [h.distance for h in await manual.store.search_chunks(q, user_id=uid)]
        assert after == pytest.approx(distances[q], abs=1e-6)


async def test_the_index_holds_unit_halfvecs_of_the_stored_vectors(manual: Memory) -> None:
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("n", 4), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    worst = await scalar(
        manual,
        "SELECT max(abs(l2_norm(v.embedding) - 1)) + max(c.embedding <=> v.embedding::vector) "
        "FROM memory_chunk_vectors v JOIN memory_chunks c ON c.id = v.chunk_id",
    )
    assert isinstance(worst, float) and worst < 1e-3


async def test_a_mix_of_indexed_and_queued_chunks_is_searched_whole(manual: Memory) -> None:
    uid = await new_user(manual)
    old, new = drafts("old", 8), drafts("new", 8)
    await manual.store.add_chunks(old, user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    await manual.store.add_chunks(new, user_id=uid, session_id="s1")
    assert await counts(manual) == (8, 8)
    hits = await manual.store.search_chunks(TOPICS[0], user_id=uid, limit=4)
    contents = {h.content for h in hits if h.via == "vector"}
    assert {old[0].content, new[0].content} <= contents


async def test_neither_table_leaks_another_users_chunks(manual: Memory) -> None:
    alice, bob = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("alice"), user_id=alice, session_id="a1")
    await manual.store.index_pending_chunks()  # alice's indexed, bob's queued
    await manual.store.add_chunks(drafts("bob"), user_id=bob, session_id="b1")
    for query in QUERIES:
        for owner, other in ((alice, bob), (bob, alice)):
            with request_context(user_id=owner):
                hits = await manual.store.search_chunks(query, limit=50)
                assert hits and {h.user_id for h in hits} == {owner}
                others_session = "a1" if other == alice else "b1"
                assert await manual.store.search_chunks(query, session_id=others_session) == []
    with request_context(permissions=[PERMISSION_READ_ALL]):
        everyone = await manual.store.search_chunks(TOPICS[0], limit=50)
        assert {h.user_id for h in everyone if h.via == "vector"} == {alice, bob}


async def test_the_session_filter_applies_to_indexed_and_queued_chunks(manual: Memory) -> None:
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("one"), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    await manual.store.add_chunks(drafts("two"), user_id=uid, session_id="s2")
    for sid in ("s1", "s2"):
        hits = await manual.store.search_chunks(TOPICS[4], user_id=uid, session_id=sid)
        assert hits and {h.session_id for h in hits} == {sid}


async def test_deleting_a_session_drops_its_queued_and_indexed_vectors(manual: Memory) -> None:
    uid = await new_user(manual)
    session = await manual.sessions.create(user_id=uid)
    keep = await manual.sessions.create(user_id=uid)
    await manual.store.add_chunks(drafts("x"), user_id=uid, session_id=session.id)
    await manual.store.index_pending_chunks()
    await manual.store.add_chunks(drafts("y"), user_id=uid, session_id=session.id)
    await manual.store.add_chunks(drafts("k"), user_id=uid, session_id=keep.id)
    assert await counts(manual) == (16, 8)
    assert await manual.sessions.delete(session.id, user_id=uid)
    assert await counts(manual) == (8, 0)
    assert await manual.store.index_pending_chunks() == 8


async def test_the_background_indexer_empties_the_queue(memory: Memory) -> None:
    assert memory.settings.chunk_index_in_background
    uid = await new_user(memory)
    for i in range(5):
        await memory.store.add_chunks(drafts(f"bg{i}"), user_id=uid, session_id=f"s{i}")
    await memory.store.wait_chunk_indexing()
    assert await counts(memory) == (0, 40)


async def test_closing_with_a_backlog_loses_nothing(db_url: str, fake_ollama: FakeOllama) -> None:
    settings = make_settings(db_url, fake_ollama, chunk_index_batch_size=4)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("many", 200), user_id=uid, session_id="s1")
    # Closed at once: the batch in flight finished, the rest stays queued for the next indexer.
    async with open_memory(make_settings(db_url, fake_ollama)) as memory:
        queued, indexed = await counts(memory)
        assert isinstance(queued, int) and isinstance(indexed, int)
        assert queued + indexed == 200 and indexed % 4 == 0
        await memory.store.index_pending_chunks()
        assert await counts(memory) == (0, 200)


async def test_a_script_that_exits_right_after_writing_leaves_nothing_queued(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """Closing right after add_chunks: the background batch those writes kicked, text and
    vectors, runs before the indexer stops."""
    async with open_memory(make_settings(db_url, fake_ollama)) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("short"), user_id=uid, session_id="s1")
        assert memory.store._indexer.running
        await memory.store.aclose()
    async with open_memory(make_settings(db_url, fake_ollama)) as memory:
        assert await counts(memory) == (0, len(TOPICS))
        assert await scalar(memory, "SELECT count(*) FROM memory_chunk_text_queue") == 0


async def test_two_indexers_share_the_queue_without_doing_a_row_twice(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=5
    )
    async with open_memory(settings) as one, open_memory(settings) as two:
        uid = await new_user(one)
        await one.store.add_chunks(drafts("shared", 120), user_id=uid, session_id="s1")
        done = await asyncio.gather(
            one.store.index_pending_chunks(), two.store.index_pending_chunks()
        )
        # SKIP LOCKED: one may stop early on rows the other holds; then a last pass ends it.
        rest = await one.store.index_pending_chunks()
        assert sum(done) + rest == 120
        assert await counts(one) == (0, 120)


async def test_two_indexers_at_once_never_take_more_than_a_batch(
    db_url: str, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each indexer's batch takes at most its limit while another pops the same queues (the
    rows are picked once: a re-run "IN (SELECT … LIMIT … SKIP LOCKED)" once took 1,340 rows
    in a batch of 64, and the batch failed), and together they index every chunk once."""
    batches: list[int] = []
    index_queued = ChunkRepository.index_queued

    async def recorded(self: ChunkRepository, limit: int, **options: Any) -> IndexedBatch:
        batch = await index_queued(self, limit, **options)
        batches.append(batch.done)
        return batch

    monkeypatch.setattr(ChunkRepository, "index_queued", recorded)
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=4
    )
    async with open_memory(settings) as one, open_memory(settings) as two:
        uid = await new_user(one)
        for session in range(3):
            await one.store.add_chunks(
                drafts(f"race{session}", 100), user_id=uid, session_id=f"s{session}"
            )
        done = await asyncio.gather(
            one.store.index_pending_chunks(), two.store.index_pending_chunks()
        )
        rest = await one.store.index_pending_chunks()
        assert sum(done) + rest == 300
        assert await counts(one) == (0, 300)
    assert len(batches) > 2 * 300 // 4 // 2 and max(batches) <= 4


async def test_a_failing_background_indexer_retries_and_the_queue_keeps_its_rows(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    uid = await new_user(memory)
    await refuse_inserts(memory, "memory_chunk_vectors", True)
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        await memory.store.add_chunks(drafts("f"), user_id=uid, session_id="s1")
        for _ in range(100):  # until the first failure is seen
            if any("chunks.index_retry" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
        assert await counts(memory) == (8, 0)
        # Searchable meanwhile, exactly, from the queue.
        hits = await memory.store.search_chunks(TOPICS[2], user_id=uid)
        assert hits and hits[0].via == "vector"
        # The cause goes away: the next retry succeeds.
        await refuse_inserts(memory, "memory_chunk_vectors", False)
        await memory.store.wait_chunk_indexing()
    assert await counts(memory) == (0, 8)
    assert not [r for r in caplog.records if "chunks.index_failed" in r.getMessage()]


async def test_a_background_indexer_that_keeps_failing_gives_up_and_says_so(
    manual: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    memory = manual  # its own indexer stays out of the way: this test runs one by hand
    uid = await new_user(memory)
    await memory.store.add_chunks(drafts("g"), user_id=uid, session_id="s1")
    await memory.store.index_pending_chunks()
    await refuse_inserts(memory, "memory_chunk_vectors", True)
    await memory.store.add_chunks(drafts("h"), user_id=uid, session_id="s1")
    indexer = ChunkIndexer(
        memory.sessionmaker, batch_size=8, background=True, retry_delays=(0.0, 0.01)
    )
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        indexer.kick()
        await indexer.wait_idle()
        await indexer.aclose()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("chunks.index_retry" in m for m in messages) >= 2
    assert any("chunks.index_failed" in m and "backfill" in m for m in messages)
    queued, _ = await counts(memory)
    assert queued == 8  # nothing lost: `make backfill` or the next kick indexes them
    with pytest.raises(StorageError, match="refuse"):
        await memory.store.index_pending_chunks()
    await refuse_inserts(memory, "memory_chunk_vectors", False)
    assert await memory.store.index_pending_chunks() == 8


@pytest.mark.parametrize(
    "slow", ["made", "made vectors", "memory_chunk_terms", "memory_chunk_vectors", "requeued"]
)
@pytest.mark.parametrize("delete", ["session", "user", "sql"])
async def test_deleting_while_the_indexer_is_mid_batch_does_not_deadlock(
    db_url: str, fake_ollama: FakeOllama, delete: str, slow: str
) -> None:
    """A session or user delete, or a plain SQL delete of the chunks (an admin script: it does
    not take the queue rows first), that arrives while the indexer is making a backlog's
    tsvectors ahead, or inserting a batch of text (or vectors, or vectors requeued after their
    text was indexed), waits for it or is skipped by it, and then deletes everything; nobody
    deadlocks."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=40
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        session = await memory.sessions.create(user_id=uid)
        await memory.store.add_chunks(drafts("d", 40), user_id=uid, session_id=session.id)
        table, event = slow, "INSERT"
        if slow == "made":  # 40 queued, batches of 40: a backlog, made ahead first
            table, event = "memory_chunk_text_queue", "UPDATE"
        if slow == "made vectors":  # the same batch copying the vectors onto their queue rows
            table, event = "memory_chunk_vector_queue", "UPDATE"
        if slow == "requeued":
            table = "memory_chunk_vectors"
            await memory.store.index_pending_chunks()
            await execute(
                memory,
                "WITH gone AS (DELETE FROM memory_chunk_vectors RETURNING chunk_id, user_id) "
                "INSERT INTO memory_chunk_vector_queue SELECT chunk_id, user_id FROM gone",
            )
        # Each row the indexer inserts takes 20 ms, as a slow GIN or HNSW insertion would: the
        # delete arrives while the indexer holds the queue rows and has not reached the
        # foreign key check on the chunks yet.
        await slow_trigger(memory, table, event, 0.02)
        indexing = asyncio.create_task(memory.store.index_pending_chunks())
        await wait_for_a_sleeping_statement(memory)
        if delete == "session":
            assert await memory.sessions.delete(session.id, user_id=uid)
        elif delete == "user":
            assert await memory.users.delete(uid)
        else:
            await execute(memory, "DELETE FROM memory_chunks WHERE user_id = :u", u=uid)
        await indexing
        if delete == "sql":
            # A batch may find every chunk still held by the delete (it skips them, and so
            # stops): after the make step, or after a slowed term write (CI, 2026-12-07: 24
            # text queue rows left); the chunks then go, their text queue rows (no foreign
            # key) stay, ignored by search, until the next drain drops them.
            await memory.store.index_pending_chunks()
        assert await counts(memory) == (0, 0)
        assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0
        left = await scalar(
            memory,
            "SELECT (SELECT count(*) FROM memory_chunk_terms)"
            " + (SELECT count(*) FROM memory_chunk_text_queue)"
            " + (SELECT coalesce(sum(chunks), 0) FROM memory_chunk_text_stats)",
        )
        assert left == 0


async def test_the_indexer_skips_a_chunk_a_delete_holds_and_never_waits_for_it(
    manual: Memory,
) -> None:
    """A chunk locked as a delete locks it is left queued (text and vector), without waiting;
    the chunks after it are indexed; once the delete commits, the next drain drops its text
    queue row (that queue has no foreign key) and the cascade its vector queue row."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("h", 6), user_id=uid, session_id="s1")
    held = await scalar(manual, "SELECT min(id) FROM memory_chunks WHERE user_id = :u", u=uid)
    async with manual.engine.connect() as other:
        await other.execute(
            text("SELECT 1 FROM memory_chunks WHERE id = :i FOR UPDATE"), {"i": held}
        )
        assert await asyncio.wait_for(manual.store.index_pending_chunks(), timeout=10) == 5
        assert await counts(manual) == (1, 5)
        assert await scalar(manual, "SELECT count(*) FROM memory_chunk_text_queue") == 1
        await other.execute(text("DELETE FROM memory_chunks WHERE id = :i"), {"i": held})
        await other.commit()
    assert await manual.store.index_pending_chunks() == 0
    assert await counts(manual) == (0, 5)
    assert await scalar(manual, "SELECT count(*) FROM memory_chunk_text_queue") == 0


async def test_a_backlogs_vectors_are_copied_ahead_and_read_from_the_queue(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """The batch that makes a backlog's tsvectors also copies those chunks' queued vectors onto
    their queue rows, L2-normalised as halfvec (what memory_chunk_vectors holds). Search orders
    a made row by its copy, and reports the distance of the chunk's own vector; the vector
    step later inserts the copy. (A copy is made to differ from the chunk's vector here, so
    each read is seen.)"""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=8
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("v", 20), user_id=uid, session_id="s1")
        assert await memory.store.index_pending_chunks(max_batches=1) == 0
        copies = (
            "SELECT count(*) FILTER (WHERE p.embedding IS NOT NULL), count(*) FILTER"
            " (WHERE p.embedding = CAST(l2_normalize(c.embedding) AS halfvec(768)))"
            " FROM memory_chunk_vector_queue p JOIN memory_chunks c ON c.id = p.chunk_id"
        )
        async with memory.engine.connect() as conn:
            assert tuple((await conn.execute(text(copies))).one()) == (8, 8)
            ids = list(
                (await conn.execute(text("SELECT id FROM memory_chunks ORDER BY id"))).scalars()
            )
            made, unmade = ids[:8], ids[8:]
            target = unmade[0]
            vector = (
                await conn.execute(
                    text("SELECT embedding FROM memory_chunks WHERE id = :i"), {"i": target}
                )
            ).scalar_one()

        async def nearest(limit: int) -> list[tuple[int, float]]:
            async with memory.engine.connect() as conn:
                rows, _ = await ChunkSearchRepository(session=conn).search_ranked(
                    uid, None, vector.to_list(), ["zzz"], limit, k1=1.5, b=0.75
                )
            return [(r["id"], r["distance"]) for r in rows]

        before = await nearest(2)
        assert before[0][0] == target and before[0][1] == pytest.approx(0.0, abs=1e-6)
        marked = next(i for i in made if i not in {chunk for chunk, _ in before})
        await execute(
            memory,
            "UPDATE memory_chunk_vector_queue SET embedding ="
            " (SELECT CAST(l2_normalize(embedding) AS halfvec(768)) FROM memory_chunks"
            "  WHERE id = :t) WHERE chunk_id = :m",
            t=target,
            m=marked,
        )
        own = await scalar(
            memory,
            "SELECT c.embedding <=> t.embedding FROM memory_chunks c, memory_chunks t"
            " WHERE c.id = :m AND t.id = :t",
            m=marked,
            t=target,
        )
        assert isinstance(own, float) and own > 0.2
        after = await nearest(2)
        assert {chunk for chunk, _ in after} == {target, marked}
        assert dict(after)[marked] == pytest.approx(own, abs=1e-9)  # its own vector's distance

        await memory.store.index_pending_chunks()
        assert await counts(memory) == (0, 20)
        inserted = await scalar(
            memory,
            "SELECT v.embedding = CAST(l2_normalize(t.embedding) AS halfvec(768))"
            " FROM memory_chunk_vectors v, memory_chunks t WHERE v.chunk_id = :m AND t.id = :t",
            m=marked,
            t=target,
        )
        assert inserted is True


async def test_a_vector_set_again_drops_the_copy_made_of_the_earlier_one(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A chunk whose vector was cleared by SQL of its own while queued with a copy made ahead
    (a model change done by hand), then filled by backfill: the stale copy is dropped, and the
    vector step indexes the new vector, not the copy."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=8
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("r", 8), user_id=uid, session_id="s1")
        assert await memory.store.index_pending_chunks(max_batches=1) == 0  # made ahead
        first, other = (
            await scalar(memory, "SELECT min(id) FROM memory_chunks"),
            await scalar(memory, "SELECT max(id) FROM memory_chunks"),
        )
        # The copy stands for the earlier model's vector: another chunk's here.
        await execute(
            memory,
            "UPDATE memory_chunk_vector_queue SET embedding = (SELECT embedding FROM"
            " memory_chunk_vector_queue WHERE chunk_id = :o) WHERE chunk_id = :f",
            o=other,
            f=first,
        )
        await execute(memory, "UPDATE memory_chunks SET embedding = NULL WHERE id = :f", f=first)
        assert await memory.store.backfill_embeddings() == 1
        copy = "SELECT embedding IS NULL FROM memory_chunk_vector_queue WHERE chunk_id = :f"
        assert await scalar(memory, copy, f=first) is True
        await memory.store.index_pending_chunks()
        indexed = await scalar(
            memory,
            "SELECT v.embedding = CAST(l2_normalize(c.embedding) AS halfvec(768))"
            " FROM memory_chunk_vectors v JOIN memory_chunks c ON c.id = v.chunk_id"
            " WHERE v.chunk_id = :f",
            f=first,
        )
        assert indexed is True


async def test_text_goes_before_vectors_and_each_chunk_counts_once(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """With a backlog, batches make the queued chunks' tsvectors first (what a search pays for
    a queued chunk), then index text; vectors follow once no text waits. A chunk counts as
    indexed once, in the batch that completes it."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=8
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("t", 20), user_id=uid, session_id="s1")
        text_queued = "SELECT count(*) FROM memory_chunk_text_queue"
        made = "SELECT count(*) FROM memory_chunk_text_queue WHERE tsv IS NOT NULL"
        # Batches 1-2: 16 tsvectors made ahead; 4 left, less than a batch.
        assert await memory.store.index_pending_chunks(max_batches=2) == 0
        assert (await scalar(memory, text_queued), await scalar(memory, made)) == (20, 16)
        # Batches 3-4: 16 texts into the GIN index, their tsvectors as made.
        assert await memory.store.index_pending_chunks(max_batches=2) == 0
        assert (await scalar(memory, text_queued), await scalar(memory, made)) == (4, 0)
        assert await counts(memory) == (20, 0)
        # Batch 5: the last 4 texts, then 4 vectors (those 4 chunks are whole now).
        assert await memory.store.index_pending_chunks(max_batches=1) == 4
        assert await scalar(memory, text_queued) == 0
        assert await counts(memory) == (16, 4)
        assert await memory.store.index_pending_chunks() == 16
        assert await counts(memory) == (0, 20)


async def test_an_indexer_says_whether_its_last_batch_caught_up(manual: Memory) -> None:
    """``caught_up``: the last batch found less than a full batch of work (a polling worker's
    cue to pause), not whether it completed chunks (text-first batches complete none)."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("c", 20), user_id=uid, session_id="s1")
    indexer = ChunkIndexer(manual.sessionmaker, batch_size=8, background=False)
    assert await indexer.drain(max_batches=1) == 0
    assert not indexer.caught_up
    assert await indexer.drain() == 20
    assert indexer.caught_up


async def test_a_batch_a_delete_holds_whole_ends_the_drain_instead_of_spinning(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """The lowest queued chunks all held by a delete in flight: a batch picks them, takes
    none, and the drain stops (``caught_up``) rather than picking them again and again until
    the delete ends; the next drain indexes everything."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=2
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("s", 4), user_id=uid, session_id="s1")
        indexer = ChunkIndexer(memory.sessionmaker, batch_size=2, background=False)
        async with memory.engine.connect() as other:
            await other.execute(
                text(
                    "SELECT 1 FROM memory_chunks WHERE id IN (SELECT id FROM memory_chunks"
                    " WHERE user_id = :u ORDER BY id LIMIT 2) FOR UPDATE"
                ),
                {"u": uid},
            )
            assert await asyncio.wait_for(indexer.drain(), timeout=10) == 0
            assert indexer.caught_up
            await other.rollback()
        assert await indexer.drain() == 4
        assert await counts(memory) == (0, 4)


async def test_backfilled_chunk_vectors_are_queued_then_indexed(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(manual)
    fake_ollama.mode = "fail"
    await manual.store.add_chunks(drafts("late"), user_id=uid, session_id="s1")
    assert await counts(manual) == (0, 0)  # no vector, nothing to index
    fake_ollama.mode = "ok"
    assert await manual.store.backfill_embeddings() == 8
    assert await counts(manual) == (8, 0)
    assert await manual.store.backfill_embeddings() == 0
    assert await manual.store.index_pending_chunks() == 8
    hits = await manual.store.search_chunks(TOPICS[4], user_id=uid)
    assert hits[0].via == "vector"


async def test_backfill_queues_chunk_vectors_that_no_index_holds(manual: Memory) -> None:
    """A chunk with a vector written by SQL of its own is found once backfill has queued its
    text and vector."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("kept"), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    # A chunk written by SQL of its own (or by a process older than revision 0004): it has a
    # vector, but neither the index table nor the queue knows it.
    await execute(
        manual,
        "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, "
        "start_seq, end_seq, started_at, ended_at, embedding) "
        "SELECT user_id, 's2', 'stray ' || content, 'stray', 1, 1, now(), now(), "
        "embedding FROM memory_chunks WHERE content LIKE '%note 4:%'",
    )
    hits = await manual.store.search_chunks(TOPICS[4], user_id=uid, session_id="s2")
    assert hits == []  # in neither index nor queue, text or vector: no pass sees it yet
    assert await manual.store.backfill_embeddings() == 0  # nothing lacked a vector
    assert await counts(manual) == (1, 8)
    assert await manual.store.index_pending_chunks() == 1
    hits = await manual.store.search_chunks(TOPICS[4], user_id=uid, session_id="s2")
    assert [h.via for h in hits] == ["vector"]


async def test_a_store_on_a_sessionmaker_without_an_engine_is_refused(memory: Memory) -> None:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from navi_memory import ConfigError, MemoryStore

    with pytest.raises(ConfigError, match="AsyncEngine"):
        MemoryStore(
            sessionmaker=async_sessionmaker(), settings=memory.settings, embedder=memory.embedder
        )


async def test_a_chunk_both_queued_and_indexed_is_one_hit_and_backfill_tidies_it(
    manual: Memory,
) -> None:
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("both", 8), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    # What a requeue racing an indexer's commit can leave: a chunk in both tables.
    await execute(
        manual,
        "INSERT INTO memory_chunk_vector_queue (chunk_id, user_id) "
        "SELECT chunk_id, user_id FROM memory_chunk_vectors",
    )
    assert await counts(manual) == (8, 8)
    hits = await manual.store.search_chunks(TOPICS[0], user_id=uid, limit=50)
    ids = [h.id for h in hits]
    assert ids and len(ids) == len(set(ids))
    assert await manual.store.backfill_embeddings() == 0
    assert await counts(manual) == (0, 8)


async def most_batches_at_once(memory: Memory, until: asyncio.Event) -> int:
    """The most indexer statements seen at once in the slow trigger's pg_sleep, sampled until
    ``until`` is set."""
    most = 0
    while not until.is_set():
        most = max(most, await sleeping_statements(memory))
        await asyncio.sleep(0.005)
    return most


@pytest.mark.parametrize(("workers", "at_once"), [(1, 1), (2, 2)])
async def test_a_backlog_is_drained_by_as_many_indexers_as_chunk_index_workers(
    db_url: str, fake_ollama: FakeOllama, workers: int, at_once: int
) -> None:
    """CHUNK_INDEX_WORKERS: a background drain that finds a backlog starts the helpers, each
    its own connection, so that many batches are in flight at once (seen in pg_stat_activity
    while each batch sleeps in a slow trigger); with 1, never two. Everything is indexed."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_batch_size=2, chunk_index_workers=workers
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await slow_trigger(memory, "memory_chunk_terms", "INSERT", 0.05)
        done = asyncio.Event()
        watching = asyncio.create_task(most_batches_at_once(memory, done))
        await memory.store.add_chunks(drafts("lane", 24), user_id=uid, session_id="s1")
        await asyncio.wait_for(memory.store.wait_chunk_indexing(), timeout=60)
        done.set()
        assert await watching == at_once
        assert await memory.store.pending_chunk_count() == 0
        assert await counts(memory) == (0, 24)


async def test_a_trickle_of_writes_starts_no_helper_and_a_backlog_does(manual: Memory) -> None:
    """Helpers run only when a batch of the background indexer finds a full batch of work:
    writes smaller than a batch leave them idle (no batch at all); a backlog starts them."""
    settings = manual.settings.model_copy(
        update={
            "chunk_index_in_background": True,
            "chunk_index_batch_size": 8,
            "chunk_index_workers": 3,
        }
    )
    indexer = ChunkIndexer.from_settings(manual.sessionmaker, settings)
    assert len(indexer.helpers) == 2
    uid = await new_user(manual)
    try:
        for n in range(3):
            await manual.store.add_chunks(drafts(f"drop {n}", 2), user_id=uid, session_id=f"s{n}")
            indexer.kick()
            await asyncio.wait_for(indexer.wait_idle(), timeout=30)
        assert await counts(manual) == (0, 6)
        assert indexer.batches_run >= 3
        assert [helper.batches_run for helper in indexer.helpers] == [0, 0]

        await manual.store.add_chunks(drafts("flood", 40), user_id=uid, session_id="f")
        indexer.kick()
        await asyncio.wait_for(indexer.wait_idle(), timeout=60)
        assert await counts(manual) == (0, 46)
        assert all(helper.batches_run > 0 for helper in indexer.helpers)
    finally:
        await indexer.aclose()


async def test_an_explicit_drain_runs_every_lane_and_counts_each_chunk_once(
    manual: Memory,
) -> None:
    """drain_all (index_pending_chunks): the helpers drain beside the indexer, the chunks
    completed are counted once over all lanes, and a failing lane raises the package's
    error, not a group of them, with the queue kept."""
    settings = manual.settings.model_copy(
        update={"chunk_index_batch_size": 4, "chunk_index_workers": 2}
    )
    indexer = ChunkIndexer.from_settings(manual.sessionmaker, settings)
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("many", 40), user_id=uid, session_id="s1")
    assert await indexer.drain_all() == 40
    assert indexer.helpers[0].batches_run > 0
    assert await counts(manual) == (0, 40)

    await manual.store.add_chunks(drafts("more", 12), user_id=uid, session_id="s2")
    await refuse_inserts(manual, "memory_chunk_terms")
    try:
        with pytest.raises(StorageError):
            await indexer.drain_all()
    finally:
        await refuse_inserts(manual, "memory_chunk_terms", refuse=False)
    assert await manual.store.pending_chunk_count() == 12
    assert await indexer.drain_all() == 12


async def test_waits_during_an_outage_do_not_use_up_the_background_retries(
    manual: Memory,
) -> None:
    """wait_settled() wakes a background drain sleeping before a retry; while the database
    still refuses, that early retry fails — and must not count against RETRY_DELAYS, or a
    caller polling the wait during an outage spends the 80 s in milliseconds: the drain gave
    up (index_failed), and nothing drained the queue once the database was back."""
    memory = manual
    uid = await new_user(memory)
    await refuse_inserts(memory, "memory_chunk_vectors", True)
    await memory.store.add_chunks(drafts("w"), user_id=uid, session_id="s1")
    indexer = ChunkIndexer(memory.sessionmaker, batch_size=8, background=True)
    try:
        indexer.kick()
        await asyncio.wait_for(indexer.wait_batches(), 10)
        for _ in range(len(RETRY_DELAYS) + 1):
            await asyncio.wait_for(indexer.wait_settled(), 10)
        assert indexer.running  # still in its first sleep (0.25 s), not given up
        await refuse_inserts(memory, "memory_chunk_vectors", False)
        await asyncio.wait_for(indexer.wait_idle(), 10)  # the scheduled retry drains
        assert await counts(memory) == (0, 8)
    finally:
        await indexer.aclose()


async def test_an_explicit_drain_skips_and_ends_a_background_retrys_sleep(manual: Memory) -> None:
    """A background drain that failed sleeps before its retry (here 60 s): wait_batches does
    not wait for that sleep, and wake() ends it, so the retry runs at once and finds the queue
    the explicit drain emptied. wait_idle still waits for the background drain to end."""
    memory = manual
    uid = await new_user(memory)
    await refuse_inserts(memory, "memory_chunk_vectors", True)
    await memory.store.add_chunks(drafts("w"), user_id=uid, session_id="s1")
    indexer = ChunkIndexer(memory.sessionmaker, batch_size=8, background=True, retry_delays=(60.0,))
    try:
        indexer.kick()
        # The failed batch, not the sleep after it.
        await asyncio.wait_for(indexer.wait_batches(), 10)
        assert indexer.running  # asleep before its retry
        idle = asyncio.ensure_future(indexer.wait_idle())
        await asyncio.sleep(0.1)
        assert not idle.done()
        await refuse_inserts(memory, "memory_chunk_vectors", False)
        assert await indexer.drain_all() == 8
        indexer.wake()
        await asyncio.wait_for(idle, 5)
        assert await counts(memory) == (0, 8)
    finally:
        await indexer.aclose()


@pytest.mark.parametrize("made_ahead", [False, True])
async def test_a_near_tie_keeps_the_same_hit_before_and_after_indexing(
    manual: Memory, made_ahead: bool
) -> None:
    """Two chunks 1e-5 apart: a queued chunk whose copy was not made yet was ranked by its
    exact distance, the indexed rows (and copies made ahead) by the half-precision one, which
    orders them the other way; with limit=1 the hit changed once they were indexed. Every
    side now ranks by the index's distance."""
    uid = await new_user(manual)
    query = "zzqx probe wording"
    a_vec, b_vec = near_tie(hashed_embedding(query), 0.1)
    await manual.store.add_chunks(
        [draft("User: first plain chunk", 1), draft("User: second plain chunk", 2)],
        user_id=uid,
        session_id="s1",
    )
    ids = [
        int(str(await scalar(manual, "SELECT id FROM memory_chunks WHERE start_seq = :s", s=s)))
        for s in (1, 2)
    ]
    for chunk_id, vector in zip(ids, (a_vec, b_vec), strict=True):
        await execute(
            manual,
            "UPDATE memory_chunks SET embedding = CAST(:v AS vector) WHERE id = :i",
            v=vector_binary(vector),
            i=chunk_id,
        )
    if made_ahead:
        await execute(
            manual,
            "UPDATE memory_chunk_vector_queue q"
            " SET embedding = CAST(l2_normalize(c.embedding) AS halfvec(768))"
            " FROM memory_chunks c WHERE c.id = q.chunk_id",
        )
    queued = await manual.store.search_chunks(query, user_id=uid, limit=1)
    await manual.store.index_pending_chunks()
    assert await manual.store.pending_chunk_count() == 0
    indexed = await manual.store.search_chunks(query, user_id=uid, limit=1)
    assert [(h.id, h.distance) for h in queued] == [(h.id, h.distance) for h in indexed]
    assert [h.distance is not None for h in indexed] == [True]
