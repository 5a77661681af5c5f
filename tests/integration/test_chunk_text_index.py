"""The chunk text index off the write path: the text queue add_chunks fills, the indexer's
GIN-indexed memory_chunk_terms and per-user statistics, and BM25 over indexed and queued chunks
alike (the same scores, to the bit, however far the indexer got)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from navi_memory import PERMISSION_READ_ALL, Memory, StorageError, open_memory, request_context
from navi_memory.constants import CHUNK_BM25_B, CHUNK_BM25_K1
from navi_memory.repositories.chunks import _INDEX_TEXT, ChunkSearchRepository
from navi_memory.schemas import ChunkDraft
from navi_memory.testing import FakeOllama
from navi_memory.text.terms import query_terms
from tests.conftest import make_settings
from tests.integration.factories import chunk_draft as draft
from tests.integration.factories import (
    execute,
    new_user,
    scalar,
    statements_on,
    wait_for_a_sleeping_statement,
)
from tests.seed import seed_user

NOTES = (
    "User: the staging database runs on port 5433 behind pgbouncer",
    "Assistant: deploys go out through the blue green pipeline on fridays, port 443",
    "User: the invoice total for october was 4120 euros; the invoice is late",
    "User: the Berlin office moves in march. Berlin again: the office, the office",
    "Assistant: the nightly backup job writes to /srv/backups/nightly at 02:00",
    "User: ticket #4411 tracks the flaky login test on the staging database",
    "Assistant: the search service answers in 12 ms at p50 on staging",
    "User: we chose PostgreSQL 18 with pgvector for the memory store of the database",
    "User: set QUARTZ_RETRY_LIMIT to 5 on staging and the backup job",
    "Assistant: pgbouncer pools the database connections; port 6432 for the pool",
    "User: coffee",
    "User: the flaky login test fails on fridays after the nightly backup",
)
QUERIES = (
    "staging database port",
    "flaky login test fridays",
    "berlin office",
    "quartz_retry_limit backup",
    "invoice euros 4120",
    "pgbouncer pool",
)


def drafts(prefix: str = "") -> list[ChunkDraft]:
    return [draft(f"{note} {prefix}".strip(), i) for i, note in enumerate(NOTES)]


@pytest.fixture
async def manual(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory with background indexing off and batches of 5: the test decides how far the
    indexer gets."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=5
    )
    async with open_memory(settings) as opened:
        yield opened


async def text_counts(memory: Memory) -> tuple[object, object]:
    """(chunks queued for the text index, chunks in it)."""
    return (
        await scalar(memory, "SELECT count(*) FROM memory_chunk_text_queue"),
        await scalar(memory, "SELECT count(*) FROM memory_chunk_terms"),
    )


async def made_count(memory: Memory) -> object:
    """Queued chunks whose tsvector the indexer made ahead (revision 0013)."""
    return await scalar(
        memory, "SELECT count(*) FROM memory_chunk_text_queue WHERE tsv IS NOT NULL"
    )


async def bm25(
    memory: Memory, user_id: uuid.UUID | None, session_id: str | None, query: str
) -> list[tuple[int, float, int]]:
    """The BM25 text list as the repository ranks it: (chunk id, score, terms hit)."""
    async with memory.engine.connect() as conn:
        rows = await ChunkSearchRepository(session=conn).search_ranked_text(
            user_id, session_id, query_terms(query), 20, k1=CHUNK_BM25_K1, b=CHUNK_BM25_B
        )
    return [(r["id"], r["score"], r["terms_hit"]) for r in rows]


async def stats_match_the_index(memory: Memory, user_id: uuid.UUID) -> bool:
    """Whether the user's statistics row is exactly the count and lexeme total of their
    indexed chunks (no row stands for none)."""
    stats = await scalar(
        memory,
        "SELECT coalesce((SELECT chunks || '/' || lexemes FROM memory_chunk_text_stats"
        " WHERE user_id = :u), '0/0')",
        u=user_id,
    )
    actual = await scalar(
        memory,
        "SELECT count(*) || '/' || coalesce(sum(lexemes), 0) FROM memory_chunk_terms"
        " WHERE user_id = :u",
        u=user_id,
    )
    return stats == actual


async def test_add_chunks_queues_every_chunk_for_the_text_index_and_indexes_none(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    """The write is one text-queue row a chunk, with or without a vector; the indexer then
    stores each chunk's tsvector and length, and the user's statistics."""
    uid = await new_user(manual)
    chunks = drafts()
    await manual.store.add_chunks(chunks[:8], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"  # these land without vectors
    await manual.store.add_chunks(chunks[8:], user_id=uid, session_id="s2")
    assert await text_counts(manual) == (len(chunks), 0)
    assert await scalar(manual, "SELECT count(*) FROM memory_chunk_vector_queue") == 8
    assert await scalar(manual, "SELECT count(*) FROM memory_chunk_text_stats") == 0
    assert await manual.store.pending_chunk_count() == len(chunks)

    assert await manual.store.index_pending_chunks() == len(chunks)
    assert await text_counts(manual) == (0, len(chunks))
    assert await manual.store.pending_chunk_count() == 0
    mismatched = await scalar(
        manual,
        "SELECT count(*) FROM memory_chunk_terms t JOIN memory_chunks c ON c.id = t.chunk_id"
        " WHERE t.tsv <> navi_chunk_tsv(c.content, c.breadcrumbs) OR t.lexemes <> length(t.tsv)"
        " OR (t.user_id, t.session_id, t.ended_at) <> (c.user_id, c.session_id, c.ended_at)",
    )
    assert mismatched == 0
    assert await stats_match_the_index(manual, uid)


async def test_bm25_scores_and_order_are_the_same_before_during_and_after_indexing(
    manual: Memory,
) -> None:
    """Every query in every scope (a user, one session, every user) ranks the same chunks with
    the same scores, bit for bit, with all chunks queued, part of their tsvectors made ahead,
    part of them indexed, and all indexed; another user's chunks, indexed or not, change
    nothing."""
    alice, bob = await new_user(manual), await new_user(manual)
    chunks = drafts()
    await manual.store.add_chunks(drafts("bob")[:5], user_id=bob, session_id="b1")
    await manual.store.add_chunks(chunks[:7], user_id=alice, session_id="s1")
    await manual.store.add_chunks(chunks[7:], user_id=alice, session_id="s2")
    scopes = ((alice, None), (alice, "s1"), (alice, "s2"), (None, None))

    async def everything() -> dict[tuple[object, object, str], list[tuple[int, float, int]]]:
        return {(u, s, q): await bm25(manual, u, s, q) for u, s in scopes for q in QUERIES}

    queued = await everything()
    # A backlog (17 queued, batches of 5): tsvectors first, made on the queue rows.
    await manual.store.index_pending_chunks(max_batches=2)
    assert await text_counts(manual) == (17, 0)
    assert await made_count(manual) == 10  # bob's 5 and alice's first 5
    made = await everything()
    # One more batch makes 5 more; the 2 left are less than a batch: the text step indexes
    # the lowest 5 (bob's, made ahead) at once.
    await manual.store.index_pending_chunks(max_batches=2)
    assert await text_counts(manual) == (12, 5)
    assert await made_count(manual) == 10
    partly = await everything()
    await manual.store.index_pending_chunks()
    assert await text_counts(manual) == (0, 17)
    indexed = await everything()

    assert queued == made == partly == indexed
    assert all(indexed[(alice, None, q)] for q in QUERIES)
    scores = {score for ranked in indexed.values() for _, score, _ in ranked}
    assert len(scores) > 10  # real term weighting, not ties everywhere
    async with manual.engine.connect() as conn:
        alices = set(
            (
                await conn.execute(
                    text("SELECT id FROM memory_chunks WHERE user_id = :u"), {"u": alice}
                )
            ).scalars()
        )
    assert all(
        chunk_id in alices
        for (owner, _, _), ranked in indexed.items()
        if owner == alice
        for chunk_id, _, _ in ranked
    )


@pytest.mark.slow  # 4-8 s: make test-slow (CI runs it)
async def test_fused_search_gives_the_same_hits_before_and_after_indexing(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    """search_chunks with and without an embedder returns the same hits, in the same order,
    with the same distances and terms hit, before the indexer ran, with part of the backlog's
    tsvectors and vectors made ahead, and after it drained both queues."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts(), user_id=uid, session_id="s1")
    queries = [*QUERIES, NOTES[0].removeprefix("User: ")]  # a whole note: a vector hit

    async def hits() -> list[list[tuple[int, str, float | None, int]]]:
        found: list[list[tuple[int, str, float | None, int]]] = []
        for mode in ("ok", "fail"):
            fake_ollama.mode = mode
            for q, session in [(q, s) for q in queries for s in (None, "s1")]:
                ranked = await manual.store.search_chunks(q, user_id=uid, session_id=session)
                found.append(
                    [
                        (h.id, h.via, None if h.distance is None else round(h.distance, 6),
                         h.terms_hit)
                        for h in ranked
                    ]
                )  # fmt: skip
        fake_ollama.mode = "ok"
        return found

    before = await hits()
    await manual.store.index_pending_chunks(max_batches=1)  # 12 queued, batches of 5
    assert await made_count(manual) == 5
    made_vectors = "SELECT count(embedding) FROM memory_chunk_vector_queue"
    assert await scalar(manual, made_vectors) == 5
    made = await hits()
    await manual.store.index_pending_chunks()
    assert await manual.store.pending_chunk_count() == 0
    after = await hits()
    assert before == made == after
    assert any(via == "vector" for ranked in after for _, via, _, _ in ranked)
    assert all(ranked for ranked in after)


async def test_a_fused_search_is_one_statement(manual: Memory) -> None:
    """The vector list and the BM25 list of one search_chunks call come in one statement (one
    round trip); without an embedding, the text list alone."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts(), user_id=uid, session_id="s1")
    async with statements_on(manual.engine) as sent:
        hits = await manual.store.search_chunks(NOTES[0].removeprefix("User: "), user_id=uid)
    searches = [s for s in sent if "memory_chunk_terms" in s]
    assert len(searches) == 1 and "memory_chunk_vectors" in searches[0]
    assert hits[0].via == "vector" and hits[0].terms_hit >= 3


async def test_session_and_user_deletes_keep_the_statistics_exact(manual: Memory) -> None:
    """Deleting a session whose chunks are partly indexed, partly queued (some with their
    tsvectors made ahead, some not) leaves the user's
    statistics equal to their indexed chunks, and their ranking equal to that of a user who
    only ever held the chunks that are left; deleting the user leaves no row of theirs in any
    text table, and another user's statistics untouched."""
    alice, carol = await new_user(manual), await new_user(manual)
    gone = await manual.sessions.create(user_id=alice)
    kept = await manual.sessions.create(user_id=alice)
    chunks = drafts()
    await manual.store.add_chunks(chunks[:6], user_id=alice, session_id=kept.id)
    await manual.store.add_chunks(chunks[6:], user_id=alice, session_id=gone.id)
    # Batches of 5: 10 tsvectors made ahead, then 5 kept chunks indexed; queued are the 6th
    # kept and 4 gone chunks (made ahead) and 2 gone ones (not).
    await manual.store.index_pending_chunks(max_batches=3)
    assert await text_counts(manual) == (7, 5)
    assert await made_count(manual) == 5
    await manual.store.add_chunks(chunks[:6], user_id=carol, session_id="c1")

    assert await manual.sessions.delete(gone.id, user_id=alice)
    # Carol's 6 and alice's 6th kept chunk queued (made ahead), alice's first 5 indexed.
    assert await text_counts(manual) == (7, 5)
    assert await made_count(manual) == 1
    assert await stats_match_the_index(manual, alice)
    for q in QUERIES:
        alices = [(score, hits) for _, score, hits in await bm25(manual, alice, None, q)]
        carols = [(score, hits) for _, score, hits in await bm25(manual, carol, None, q)]
        assert alices == carols, q

    await manual.store.index_pending_chunks()
    assert await stats_match_the_index(manual, carol)
    carol_stats = await scalar(
        manual, "SELECT chunks FROM memory_chunk_text_stats WHERE user_id = :u", u=carol
    )
    await manual.store.add_chunks(drafts("later"), user_id=alice, session_id=kept.id)
    assert await manual.users.delete(alice)
    for table in ("memory_chunk_text_stats", "memory_chunk_terms", "memory_chunk_text_queue"):
        left = await scalar(manual, f"SELECT count(*) FROM {table} WHERE user_id = :u", u=alice)
        assert left == 0, table
    assert await stats_match_the_index(manual, carol)
    assert (
        await scalar(
            manual, "SELECT chunks FROM memory_chunk_text_stats WHERE user_id = :u", u=carol
        )
        == carol_stats
        == 6
    )


async def test_chunks_without_vectors_are_text_indexed_in_the_background(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """With the embedding model down, add_chunks still starts the background indexer, which
    empties the text queue."""
    assert memory.settings.chunk_index_in_background
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    await memory.store.add_chunks(drafts(), user_id=uid, session_id="s1")
    await memory.store.wait_chunk_indexing()
    assert await text_counts(memory) == (0, len(NOTES))
    hits = await memory.store.search_chunks("QUARTZ_RETRY_LIMIT", user_id=uid)
    assert hits[0].content.startswith("User: set QUARTZ_RETRY_LIMIT")


async def test_the_indexer_makes_each_chunks_tsvector_once(manual: Memory) -> None:
    """The text batch's plan makes a chunk's tsvector in one place: with the CTE inlined,
    "length(tsv), tsv" made it twice (a third of the indexer's text time)."""
    explain = text("EXPLAIN (VERBOSE, COSTS OFF) " + str(_INDEX_TEXT))
    async with manual.engine.connect() as conn:
        plan = "\n".join(row[0] for row in await conn.execute(explain, {"limit": 64}))
    assert plan.count("navi_chunk_tsv(") + plan.count("to_tsvector(") == 1, plan


async def test_a_backlogs_tsvectors_are_made_ahead_and_searches_read_them(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    """With a backlog (a full batch and more without a tsvector) a batch makes the tsvectors of
    the lowest queued ids, exactly navi_chunk_tsv's, and stores them on the queue rows; a
    search reads a stored one instead of making it (a row given a marker word is found by
    it), and the GIN step later indexes the stored one as it is."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts(), user_id=uid, session_id="s1")  # 12, batches of 5
    assert await manual.store.index_pending_chunks(max_batches=1) == 0
    assert await text_counts(manual) == (len(NOTES), 0)
    made = (
        "SELECT array_agg(q.chunk_id ORDER BY q.chunk_id) FILTER (WHERE q.tsv IS NOT NULL),"
        " count(*) FILTER (WHERE q.tsv <> navi_chunk_tsv(c.content, c.breadcrumbs))"
        " FROM memory_chunk_text_queue q JOIN memory_chunks c ON c.id = q.chunk_id"
    )
    lowest = await scalar(
        manual,
        "SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM memory_chunks"
        " ORDER BY id LIMIT 5) c",
    )
    async with manual.engine.connect() as conn:
        ids, differing = (await conn.execute(text(made))).one()
    assert (ids, differing) == (lowest, 0)

    assert isinstance(lowest, list)
    first = lowest[0]
    await execute(
        manual,
        "UPDATE memory_chunk_text_queue SET tsv = tsv || 'zeppelinmarker:1'::tsvector"
        " WHERE chunk_id = :c",
        c=first,
    )
    fake_ollama.mode = "fail"
    [hit] = await manual.store.search_chunks("zeppelinmarker", user_id=uid)
    assert hit.id == first
    await manual.store.index_pending_chunks()
    assert await text_counts(manual) == (0, len(NOTES))
    [hit] = await manual.store.search_chunks("zeppelinmarker", user_id=uid)
    assert hit.id == first  # the stored tsvector went into the index as it was


async def test_a_queue_shorter_than_a_batch_is_indexed_without_making_ahead(
    manual: Memory,
) -> None:
    """Fewer queued chunks than a batch are the whole backlog: one batch indexes them, their
    tsvectors made once, in the GIN step; no queue row is updated first (a trigger refusing
    updates would fail the batch)."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts()[:4], user_id=uid, session_id="s1")  # batches of 5
    await execute(
        manual,
        "CREATE FUNCTION navi_test_no_update() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'queue row updated'; END $$",
    )
    for queue in ("memory_chunk_text_queue", "memory_chunk_vector_queue"):
        await execute(
            manual,
            f"CREATE TRIGGER no_update BEFORE UPDATE ON {queue}"
            " FOR EACH ROW EXECUTE FUNCTION navi_test_no_update()",
        )
    await manual.store.index_pending_chunks(max_batches=1)
    assert await text_counts(manual) == (0, 4)
    # The same trigger does fail a backlog's batch: the check can fail.
    await manual.store.add_chunks(drafts("more"), user_id=uid, session_id="s2")
    with pytest.raises(StorageError):
        await manual.store.index_pending_chunks(max_batches=1)


async def test_a_backlog_row_whose_chunk_is_gone_is_dropped_not_made(manual: Memory) -> None:
    """A queue row whose chunk was deleted by SQL of its own, in a backlog: the make step drops
    it rather than store a tsvector for an id a restored chunk could take again; search never
    ranked it, and the rest are made and indexed."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts(), user_id=uid, session_id="s1")
    await execute(manual, "DELETE FROM memory_chunks WHERE content LIKE '%Berlin%'")
    assert await bm25(manual, uid, None, "berlin office") == []
    assert await manual.store.index_pending_chunks(max_batches=2) == 0  # 10 picked: made or gone
    orphans = (
        "SELECT count(*) FROM memory_chunk_text_queue q"
        " WHERE NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.id = q.chunk_id)"
    )
    assert await scalar(manual, orphans) == 0
    assert await text_counts(manual) == (len(NOTES) - 1, 0)
    assert await made_count(manual) == 9
    assert await manual.store.index_pending_chunks() == len(NOTES) - 1
    assert await text_counts(manual) == (0, len(NOTES) - 1)
    assert await stats_match_the_index(manual, uid)


async def test_a_chunk_both_queued_and_indexed_counts_once(manual: Memory) -> None:
    """A chunk found in the text queue and in memory_chunk_terms (a requeue racing the
    indexer) is ranked once, with the statistics of the index; the indexer then drops the
    queue row without indexing it twice."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts(), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    before = {q: await bm25(manual, uid, None, q) for q in QUERIES}
    await execute(
        manual,
        "INSERT INTO memory_chunk_text_queue (chunk_id, user_id) "
        "SELECT chunk_id, user_id FROM memory_chunk_terms",
    )
    assert await text_counts(manual) == (len(NOTES), len(NOTES))
    assert {q: await bm25(manual, uid, None, q) for q in QUERIES} == before
    assert await manual.store.index_pending_chunks() == 0
    assert await text_counts(manual) == (0, len(NOTES))
    assert await stats_match_the_index(manual, uid)


async def test_a_queued_chunk_deleted_by_sql_of_its_own_is_ignored_then_dropped(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    """The text queue has no foreign key: a chunk deleted while queued leaves its queue row,
    which search does not rank or count and the indexer removes without indexing anything."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts()[:4], user_id=uid, session_id="s1")
    await execute(manual, "DELETE FROM memory_chunks WHERE content LIKE '%Berlin%'")
    assert await text_counts(manual) == (4, 0)
    fake_ollama.mode = "fail"
    assert await manual.store.search_chunks("berlin office", user_id=uid) == []
    staging = await bm25(manual, uid, None, "staging database")
    assert await manual.store.index_pending_chunks() == 3
    assert await text_counts(manual) == (0, 3)
    assert await bm25(manual, uid, None, "staging database") == staging
    assert await stats_match_the_index(manual, uid)


async def test_backfill_queues_chunk_text_that_no_index_holds(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    """A chunk written by SQL of its own is in neither text table, so BM25 does not see it;
    backfill queues it (search then ranks it exactly) and the indexer indexes it."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts()[:3], user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    await execute(
        manual,
        "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq, "
        "end_seq, started_at, ended_at) "
        "VALUES (:u, 's2', 'User: the zeppelin lands at noon', 'z', 1, 1, now(), now())",
        u=uid,
    )
    fake_ollama.mode = "fail"
    assert await manual.store.search_chunks("zeppelin", user_id=uid) == []
    fake_ollama.mode = "ok"
    assert await manual.store.backfill_embeddings() == 1  # it had no vector either
    assert await text_counts(manual) == (1, 3)
    fake_ollama.mode = "fail"
    [queued] = await manual.store.search_chunks("zeppelin", user_id=uid)
    assert await manual.store.index_pending_chunks() == 1
    assert await text_counts(manual) == (0, 4)
    [indexed] = await manual.store.search_chunks("zeppelin", user_id=uid)
    assert queued.id == indexed.id and queued.terms_hit == indexed.terms_hit == 1


async def test_imported_chunks_are_queued_for_the_text_index(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A user imported from an export finds their chunks by text, and the indexer indexes
    them."""
    source, copy = uuid.uuid4(), uuid.uuid4()
    await seed_user(memory, fake_ollama, source, "s-api")
    with request_context(permissions=[PERMISSION_READ_ALL]):
        records = await memory.admin.export_user(source)
        result = await memory.admin.import_user(records, user_id=copy, session_prefix="copy-")
    assert result.rows["chunk"] >= 1
    await memory.store.wait_chunk_indexing()
    indexed = await scalar(
        memory, "SELECT count(*) FROM memory_chunk_terms WHERE user_id = :u", u=copy
    )
    assert indexed == result.rows["chunk"]
    fake_ollama.mode = "fail"
    hits = await memory.store.search_chunks("8099", user_id=copy)
    assert hits and {h.user_id for h in hits} == {copy}


async def test_a_user_deleted_while_their_chunks_commit_leaves_no_text_queue_row(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """add_chunks slow to commit (a deferred trigger sleeping at COMMIT, as a slow round trip
    before it would): users.delete, from another process, waits for the user's row, then the
    cascade takes the chunk — and the chunk's text queue row (no foreign key) went with it
    only if it was there when the delete read the queue. It was left behind, with the user's
    id, pending forever on an idle system (the races review's repro)."""
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
    async with open_memory(settings) as one, open_memory(settings) as two:
        uid = await new_user(one)
        await execute(
            one,
            "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$",
        )
        await execute(
            one,
            "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON memory_chunks"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()",
        )
        add = asyncio.create_task(
            one.store.add_chunks([draft("chunk about ports", 1)], user_id=uid, session_id="s1")
        )
        await wait_for_a_sleeping_statement(one)
        assert await two.users.delete(uid) is True
        assert await add == 1  # committed before the delete went on
        await execute(one, "DROP TRIGGER slow_commit ON memory_chunks")
        for table in ("memory_chunks", "memory_chunk_text_queue", "memory_chunk_vector_queue"):
            assert await scalar(one, f"SELECT count(*) FROM {table}") == 0, table
        assert await one.store.pending_chunk_count() == 0
