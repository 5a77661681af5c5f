"""Only big users' chunk vectors in the HNSW graph (revision 0009): which rows go in, a user
who grows moves in, search gives the same hits wherever the rows are, tenancy, and a small
user's search never walks the graph."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from navi_memory import PERMISSION_READ_ALL, Memory, open_memory, request_context
from navi_memory.config import Settings
from navi_memory.constants import CHUNK_GRAPH_CANDIDATES, CHUNK_GRAPH_FROM
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.repositories.chunks import ranked_text_sql, settled_rows
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import chunk_draft as draft
from tests.integration.factories import execute, new_user, plan_nodes, scalar, statements_on
from tests.integration.test_chunk_index import QUERIES, TOPICS, drafts

GRAPH_FROM = 10


@pytest.fixture
async def manual(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """Background indexing off, and users of GRAPH_FROM indexed chunks or more in the graph."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_graph_from=GRAPH_FROM
    )
    async with open_memory(settings) as opened:
        yield opened


async def sides(memory: Memory, user_id: uuid.UUID) -> tuple[int, int, int]:
    """The user's vectors (in the graph, beside it, still queued)."""
    async with memory.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE in_graph), count(*) FILTER (WHERE NOT in_graph),"
                    " (SELECT count(*) FROM memory_chunk_vector_queue WHERE user_id = :u)"
                    " FROM memory_chunk_vectors WHERE user_id = :u"
                ),
                {"u": user_id},
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


async def hits(memory: Memory, user_id: uuid.UUID) -> list[list[tuple[int, str, float | None]]]:
    return [
        [
            (h.id, h.via, None if h.distance is None else round(h.distance, 6))
            for h in await memory.store.search_chunks(query, user_id=user_id, limit=6)
        ]
        for query in QUERIES
    ]


async def test_a_small_users_vectors_stay_beside_the_graph_and_a_big_users_go_in(
    manual: Memory,
) -> None:
    small, big = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("small", GRAPH_FROM - 1), user_id=small, session_id="a")
    await manual.store.add_chunks(drafts("big", GRAPH_FROM + 2), user_id=big, session_id="b")
    assert await sides(manual, big) == (0, 0, GRAPH_FROM + 2)
    await manual.store.index_pending_chunks()
    assert await sides(manual, small) == (0, GRAPH_FROM - 1, 0)
    assert await sides(manual, big) == (GRAPH_FROM + 2, 0, 0)


async def test_a_user_who_grows_past_the_threshold_moves_into_the_graph(manual: Memory) -> None:
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("early", 6), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    assert await sides(manual, uid) == (0, 6, 0)
    await manual.store.add_chunks(drafts("later", 6), user_id=uid, session_id="s2")
    await manual.store.index_pending_chunks()
    # The later six went in as they were indexed (the user then held 12), the early six after.
    assert await sides(manual, uid) == (12, 0, 0)


async def force_index_paths(memory: Memory) -> None:
    """New connections of ``memory`` plan with no sequential scan, no bitmap and no sort: the
    graph's side then goes through the HNSW index even for a few rows."""
    database = await scalar(memory, "SELECT current_database()")
    for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
        await execute(memory, f'ALTER DATABASE "{database}" SET {setting} = off')
    await memory.engine.dispose()


@pytest.mark.parametrize("ranking", ["bm25", "terms"])
async def test_search_gives_the_same_hits_wherever_the_vectors_are(
    db_url: str, fake_ollama: FakeOllama, ranking: str
) -> None:
    """The fused statement (bm25) and the spec's (terms) alike, with the graph's side read
    through the HNSW index: queued, all beside the graph, half in it, all in it."""
    settings = make_settings(
        db_url,
        fake_ollama,
        chunk_index_in_background=False,
        chunk_graph_from=GRAPH_FROM,
        chunk_text_ranking=ranking,
    )
    async with open_memory(settings) as memory:
        await force_index_paths(memory)
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("u", 24), user_id=uid, session_id="s1")
        queued = await hits(memory, uid)
        assert any(h[1] == "vector" for q in queued for h in q)
        await memory.store.index_pending_chunks()
        await execute(memory, "UPDATE memory_chunk_vectors SET in_graph = false")
        assert await sides(memory, uid) == (0, 24, 0)
        assert await hits(memory, uid) == queued
        await execute(
            memory, "UPDATE memory_chunk_vectors SET in_graph = true WHERE chunk_id % 2 = 0"
        )
        assert await sides(memory, uid) == (12, 12, 0)
        assert await hits(memory, uid) == queued
        await execute(memory, "UPDATE memory_chunk_vectors SET in_graph = true")
        assert await hits(memory, uid) == queued


async def test_a_grown_users_vectors_move_in_before_the_queue_is_empty(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """Moving a grown user's earlier vectors into the graph comes first in a batch, so a
    busy queue (another user's backlog) does not keep the user half in, half out."""
    settings = make_settings(
        db_url,
        fake_ollama,
        chunk_index_in_background=False,
        chunk_graph_from=GRAPH_FROM,
        chunk_index_batch_size=8,
    )
    async with open_memory(settings) as memory:
        grower, busy = await new_user(memory), await new_user(memory)
        await memory.store.add_chunks(drafts("early", 6), user_id=grower, session_id="s1")
        await memory.store.index_pending_chunks()
        assert await sides(memory, grower) == (0, 6, 0)
        await memory.store.add_chunks(drafts("later", 6), user_id=grower, session_id="s2")
        await memory.store.add_chunks(drafts("busy", 40), user_id=busy, session_id="b1")
        indexer = ChunkIndexer(
            memory.sessionmaker, batch_size=8, background=False, graph_from=GRAPH_FROM
        )
        await indexer.drain(max_batches=7)
        # Batches 1-5: the tsvectors of 40 of the 46 queued chunks, made ahead (a backlog);
        # batch 6: the text of the grower's 6 later chunks (12 now: past GRAPH_FROM) and of 2
        # of busy's, no room for vectors; batch 7: the grower's 6 earlier vectors into the
        # graph first, then 2 more of busy's tsvectors. The later vectors wait (text goes
        # first), queued: searched exactly, on neither side.
        assert await sides(memory, grower) == (6, 0, 6)
        assert (await sides(memory, busy))[2] > 0
        await indexer.drain()
        assert await sides(memory, grower) == (12, 0, 0)


async def test_with_graph_from_0_every_users_vectors_go_in(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_graph_from=0
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(drafts("one", 1), user_id=uid, session_id="s1")
        await memory.store.index_pending_chunks()
        assert await sides(memory, uid) == (1, 0, 0)


async def test_neither_side_of_the_graph_leaks_another_users_chunks(manual: Memory) -> None:
    """A small user beside the graph and two big users in it, with the same topics."""
    small, big, other = await new_user(manual), await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("small", 8), user_id=small, session_id="a1")
    await manual.store.add_chunks(drafts("big", 16), user_id=big, session_id="b1")
    await manual.store.add_chunks(drafts("other", 16), user_id=other, session_id="c1")
    await manual.store.index_pending_chunks()
    assert await sides(manual, small) == (0, 8, 0) and await sides(manual, big) == (16, 0, 0)
    assert await sides(manual, other) == (16, 0, 0)
    await force_index_paths(manual)
    for query in QUERIES:
        for owner in (small, big, other):
            with request_context(user_id=owner):
                found = await manual.store.search_chunks(query, limit=50)
                assert found and {h.user_id for h in found} == {owner}
                unified = await manual.search.search(query, "raw", k=20)
                assert unified and {h.user_id for h in unified} == {owner}
    with request_context(permissions=[PERMISSION_READ_ALL]):
        everyone = await manual.store.search_chunks(TOPICS[0], limit=50)
        assert {h.user_id for h in everyone if h.via == "vector"} == {small, big, other}


async def explain_nearest(
    memory: Memory,
    user_id: uuid.UUID,
    off: tuple[str, ...] = ("enable_seqscan", "enable_bitmapscan", "enable_sort"),
) -> list[dict[str, Any]]:
    """EXPLAIN ANALYZE of the fused chunk search of ``user_id`` (vector and BM25 lists), with
    the planner settings ``off`` turned off."""
    vector = (await memory.embedder.embed_query(TOPICS[0])) if memory.embedder else None
    assert vector is not None
    sql = ranked_text_sql(by_user=True, by_session=False, with_vector=True)
    params = {
        "uid": user_id,
        "q": "[" + ",".join(str(x) for x in vector) + "]",
        "query": "staging database",
        "terms": ["staging", "database"],
        "limit": 5,
        "k1": 1.5,
        "b": 0.75,
        "settled_rows": settled_rows(GRAPH_FROM),
    }
    async with memory.engine.connect() as conn:
        # By default the HNSW scan is then the planner's only way into the graph's side (no
        # seq scan, no bitmap, no sort): the plan has one for every user, and the check
        # decides if it runs.
        for setting in off:
            await conn.execute(text(f"SET {setting} = off"))
        plan = (
            await conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql), params)
        ).scalar_one()
    root = plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"]
    return list(plan_nodes(root))


async def test_a_small_users_search_never_walks_the_graph(manual: Memory) -> None:
    """The one-time check keeps the HNSW scan from running for a user the graph holds nothing
    of, and a big user's exact side reads none of their rows."""
    small, big = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("small", 4), user_id=small, session_id="a1")
    await manual.store.add_chunks(drafts("big", 40), user_id=big, session_id="b1")
    await manual.store.index_pending_chunks()
    await execute(manual, "ANALYZE memory_chunk_vectors")

    async def scans(user_id: uuid.UUID) -> dict[str, tuple[int, int]]:
        """Index name -> (loops, rows) summed over the scans of memory_chunk_vectors' indexes
        (the graph side has two arms, one for a user settled in it)."""
        found: dict[str, tuple[int, int]] = {}
        for n in await explain_nearest(manual, user_id):
            name = n.get("Index Name", "")
            if name.startswith("ix_memory_chunk_vectors_"):
                loops, rows = found.get(name, (0, 0))
                found[name] = (loops + n["Actual Loops"], rows + int(n["Actual Rows"]))
        return found

    hnsw, exact = (
        "ix_memory_chunk_vectors_embedding_hnsw",
        "ix_memory_chunk_vectors_exact_user_id_session_id",
    )
    of_small, of_big = await scans(small), await scans(big)
    assert of_small[hnsw] == (0, 0), of_small  # planned, never run
    assert of_small[exact] == (1, 4), of_small
    assert of_big[hnsw][0] == 1 and of_big[hnsw][1] > 0, of_big
    assert of_big[exact][1] == 0, of_big  # looked at (is the user settled?), nothing found


async def test_a_graph_users_rows_are_never_found_through_their_btree(manual: Memory) -> None:
    """The graph side's user filter is one no btree serves: the planner, which costs
    pgvector's scan high, read users of up to ~8,000 chunks exactly through the graph side's
    btree at 1M chunks (15-16 ms p50 against 3.6-4.0 through the graph). A table this small
    is cheaper to read whole than through any index, so sequential scans are turned off: the
    btree may then be read whole, never looked up by the user (its ``Index Cond``), but for
    the one-time check that the graph holds the user."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("big", 60), user_id=uid, session_id="b1")
    await manual.store.index_pending_chunks()
    await execute(manual, "ANALYZE memory_chunk_vectors")
    assert await sides(manual, uid) == (60, 0, 0)
    nodes = await explain_nearest(manual, uid, off=("enable_seqscan",))
    # Rows read by looking the user up (a bitmap's index half aside, which cannot stop
    # early): only the checks that the user is settled (40 rows at most), never all 60.
    by_user = [
        int(n["Actual Rows"])
        for n in nodes
        if n.get("Relation Name") == "memory_chunk_vectors"
        and n["Node Type"] != "Bitmap Index Scan"
        and "user_id =" in n.get("Index Cond", "") + n.get("Recheck Cond", "")
        and n["Actual Loops"]
    ]
    assert by_user and max(by_user) <= CHUNK_GRAPH_CANDIDATES, by_user


async def test_a_user_moving_into_the_graph_is_left_to_the_planner(manual: Memory) -> None:
    """A user with rows on both sides (moving in: the graph may hold a few of their rows
    among everyone's, which an HNSW scan filtered to them walks far to find) is read as
    the planner chooses: here, with sequential scans off, through the graph side's btree
    looked up by the user. The hits are the same as once they are all in."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("big", 60), user_id=uid, session_id="b1")
    await manual.store.index_pending_chunks()
    settled = await hits(manual, uid)
    await execute(
        manual,
        "UPDATE memory_chunk_vectors SET in_graph = false WHERE chunk_id IN"
        " (SELECT chunk_id FROM memory_chunk_vectors WHERE user_id = :u"
        "  ORDER BY chunk_id LIMIT 20)",
        u=uid,
    )
    await execute(manual, "ANALYZE memory_chunk_vectors")
    assert await sides(manual, uid) == (40, 20, 0)
    nodes = await explain_nearest(manual, uid, off=("enable_seqscan",))
    looked_up = [
        n["Node Type"]
        for n in nodes
        if n.get("Index Name") == "ix_memory_chunk_vectors_graph_user_id_session_id"
        and "user_id" in n.get("Index Cond", "")
        and n["Node Type"] != "Index Only Scan"
    ]
    assert looked_up, [(n["Node Type"], n.get("Index Name")) for n in nodes]
    # The same chunks (equally near ones may change places, and so which list names them).
    assert [sorted(h[0] for h in found) for found in await hits(manual, uid)] == [
        sorted(h[0] for h in found) for found in settled
    ]


async def test_the_graph_side_is_read_past_the_limit_then_cut_to_it(manual: Memory) -> None:
    """A search of limit 5 reads CHUNK_GRAPH_CANDIDATES rows from the graph (relaxed order
    yields the nearest only roughly; the best of more are nearer) and returns 5: the outer
    sort consumes the graph side whole instead of merging the sides and stopping early."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("big", 60), user_id=uid, session_id="b1")
    await manual.store.index_pending_chunks()
    await execute(manual, "ANALYZE memory_chunk_vectors")
    assert await sides(manual, uid) == (60, 0, 0)
    nodes = await explain_nearest(manual, uid)
    hnsw = [
        n
        for n in nodes
        if n.get("Index Name") == "ix_memory_chunk_vectors_embedding_hnsw" and n["Actual Loops"]
    ]
    assert [(n["Actual Loops"], n["Actual Rows"]) for n in hnsw] == [(1, CHUNK_GRAPH_CANDIDATES)]
    limits = [n for n in nodes if n["Node Type"] == "Limit" and n["Actual Rows"] == 5]
    assert limits, "the statement's vector list was not cut to its limit"


def test_the_migration_marks_the_users_the_default_setting_puts_in_the_graph() -> None:
    source = next((Path(__file__).parents[2] / "alembic" / "versions").glob("0009_*.py"))
    assert f"GRAPH_FROM = {CHUNK_GRAPH_FROM:_}" in source.read_text()
    assert Settings(_env_file=None).chunk_graph_from == CHUNK_GRAPH_FROM


async def test_a_user_who_shrinks_keeps_their_rows_in_the_graph_and_found(manual: Memory) -> None:
    """Deleting chunks below the threshold moves nothing back: the rows stay in the graph, and
    search finds them there."""
    uid = await new_user(manual)
    await manual.store.add_chunks(drafts("x", 12), user_id=uid, session_id="s1")
    await manual.store.index_pending_chunks()
    assert await sides(manual, uid) == (12, 0, 0)
    await execute(
        manual,
        "DELETE FROM memory_chunks WHERE id IN"
        " (SELECT id FROM memory_chunks WHERE user_id = :u ORDER BY id LIMIT 8)",
        u=uid,
    )
    assert (
        await scalar(manual, "SELECT chunks FROM memory_chunk_text_stats WHERE user_id = :u", u=uid)
        == 4
    )
    assert await sides(manual, uid) == (4, 0, 0)
    found = await manual.store.search_chunks(TOPICS[0], user_id=uid, limit=10)
    assert {h.via for h in found} >= {"vector"}


@pytest.mark.slow  # 4-8 s: make test-slow (CI runs it)
async def test_a_user_the_graph_holds_fewer_rows_of_than_its_threshold_is_not_walked_for(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A user who shrank in the graph (their chunks deleted) below its threshold, though not
    below CHUNK_GRAPH_CANDIDATES, holds a sliver of everyone's rows: an HNSW scan filtered to
    them stops at ``hnsw.max_scan_tuples`` with most of them unfound (here: the graph's
    nearest rows to the first query are another user's). Their search is left to the
    planner, which reads them exactly: the same hits with the walk cut to 60 tuples (and the
    graph's btree not to be read whole) as with every row of theirs beside the graph."""
    graph_from = 100
    settings = make_settings(
        db_url,
        fake_ollama,
        chunk_index_in_background=False,
        chunk_graph_from=graph_from,
        hnsw_ef_search=10,
    )
    async with open_memory(settings) as memory:
        other, uid = await new_user(memory), await new_user(memory)
        crowd = [draft(f"{TOPICS[0]} ({i})", i) for i in range(600)]  # nearer than theirs
        await memory.store.add_chunks(crowd, user_id=other, session_id="o1")
        await memory.store.add_chunks(drafts("kept", 60), user_id=uid, session_id="kept")
        await memory.store.add_chunks(drafts("gone", 60), user_id=uid, session_id="gone")
        await memory.store.index_pending_chunks()
        assert await sides(memory, uid) == (120, 0, 0)
        await execute(
            memory, "DELETE FROM memory_chunks WHERE user_id = :u AND session_id = 'gone'", u=uid
        )
        assert await sides(memory, uid) == (60, 0, 0)
        assert CHUNK_GRAPH_CANDIDATES <= 60 < settled_rows(graph_from)
        database = await scalar(memory, "SELECT current_database()")
        for setting in (
            "hnsw.max_scan_tuples = 60",
            "enable_seqscan = off",
            "enable_bitmapscan = off",
        ):
            await execute(memory, f'ALTER DATABASE "{database}" SET {setting}')

    async def nearest(memory: Memory) -> list[list[int]]:
        """Per query, the hits found by the vector list (they carry a distance), of
        search_chunks and of unified search (each its own service and settings)."""
        found = []
        for query in QUERIES:
            chunks = await memory.store.search_chunks(query, user_id=uid, limit=20)
            unified = await memory.search.search(query, scope="raw", k=20, user_id=uid)
            found.append(sorted(h.id for h in chunks if h.distance is not None))
            found.append(sorted(h.chunk_id or 0 for h in unified if h.distance is not None))
        return found

    async with open_memory(settings) as memory:  # new connections, the walk cut short
        assert await scalar(memory, "SHOW hnsw.max_scan_tuples") == "60"
        in_graph = await nearest(memory)
        await execute(
            memory, "UPDATE memory_chunk_vectors SET in_graph = false WHERE user_id = :u", u=uid
        )
        assert await sides(memory, uid) == (0, 60, 0)
        exact = await nearest(memory)
    assert [len(found) for found in exact] == [8] * 8, exact  # their chunks of the topic
    assert in_graph == exact


def sweeps(statements: list[str]) -> tuple[int, int]:
    """How many looks at every grown user, and at the users a batch took past the threshold."""
    moves = [s for s in statements if "SET in_graph = true" in s]
    crossed = [s for s in moves if "WITH crossing AS" in s]
    return len(moves) - len(crossed), len(crossed)


async def test_the_batch_that_takes_a_user_past_the_threshold_moves_them(
    manual: Memory,
) -> None:
    """After an indexer's first batch, a batch looks only at the users it took past the
    threshold (not at every big user), and that is enough to move a grower wholly in."""
    big, grower = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("big", GRAPH_FROM + 2), user_id=big, session_id="b")
    await manual.store.add_chunks(drafts("early", 6), user_id=grower, session_id="s1")
    indexer = ChunkIndexer(
        manual.sessionmaker, batch_size=64, background=False, graph_from=GRAPH_FROM
    )
    async with statements_on(manual.engine) as first:
        await indexer.drain()
    assert sweeps(first)[0] == 1  # the first batch looks at everyone
    assert await sides(manual, grower) == (0, 6, 0)
    await manual.store.add_chunks(drafts("later", 6), user_id=grower, session_id="s2")
    async with statements_on(manual.engine) as later:
        await indexer.drain()
    assert sweeps(later) == (0, 1)
    assert await sides(manual, grower) == (12, 0, 0)
    assert await sides(manual, big) == (GRAPH_FROM + 2, 0, 0)


async def test_a_crossing_the_batch_had_no_room_for_is_finished_by_the_next_batch(
    manual: Memory,
) -> None:
    """A batch full before it can move the user it took past the threshold names them, and
    the next batch moves them by name (not by a look at every grown user: 0.3-0.4 s at 1M)."""
    grower = await new_user(manual)
    await manual.store.add_chunks(drafts("early", 6), user_id=grower, session_id="s1")
    indexer = ChunkIndexer(
        manual.sessionmaker, batch_size=8, background=False, graph_from=GRAPH_FROM
    )
    await indexer.drain()
    await manual.store.add_chunks(drafts("later", 8), user_id=grower, session_id="s2")
    async with statements_on(manual.engine) as seen:
        await indexer.drain(max_batches=1)  # a full batch queued: its tsvectors made ahead
        assert await sides(manual, grower) == (0, 6, 8)
        await indexer.drain(max_batches=1)
        # The text of the 8 later chunks filled the batch (the user holds 14 now); the 6
        # earlier vectors wait beside the graph, the 8 later ones in the queue.
        assert await sides(manual, grower) == (0, 6, 8)
        await indexer.drain(max_batches=1)
        # The next batch moves the grower's 6 earlier vectors first, then 2 later ones.
        assert await sides(manual, grower) == (8, 0, 6)
        await indexer.drain(max_batches=1)
    assert sweeps(seen) == (0, 1)
    assert await sides(manual, grower) == (14, 0, 0)


async def test_a_crossing_user_with_more_than_a_batch_beside_moves_in_over_several_batches(
    manual: Memory,
) -> None:
    """A user taken past the threshold with more vectors beside the graph than a batch holds
    is moved by name, a batch at a time, until none is left; no batch looks at every user."""
    grower = await new_user(manual)
    await manual.store.add_chunks(drafts("early", GRAPH_FROM - 1), user_id=grower, session_id="a")
    indexer = ChunkIndexer(
        manual.sessionmaker, batch_size=4, background=False, graph_from=GRAPH_FROM
    )
    await indexer.drain()
    assert await sides(manual, grower) == (0, GRAPH_FROM - 1, 0)
    await manual.store.add_chunks(drafts("later", 2), user_id=grower, session_id="b")
    async with statements_on(manual.engine) as seen:
        await indexer.drain()
    full, by_name = sweeps(seen)
    assert full == 0 and by_name >= 3  # 2 in the crossing batch, then 4, then the last 3
    assert await sides(manual, grower) == (GRAPH_FROM + 1, 0, 0)


async def test_full_batches_that_take_nobody_past_the_threshold_never_look_at_everyone(
    manual: Memory,
) -> None:
    """A backlog fills every batch with text; a full batch that took nobody past the
    threshold leaves nothing for the look at every grown user (dear at 1M after a burst), so
    only the indexer's first batch runs it."""
    big, small = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("big", GRAPH_FROM + 2), user_id=big, session_id="b")
    await manual.store.add_chunks(drafts("small", 24), user_id=small, session_id="s")
    await manual.store.add_chunks(drafts("more", 24), user_id=big, session_id="b2")
    indexer = ChunkIndexer(
        manual.sessionmaker, batch_size=8, background=False, graph_from=GRAPH_FROM + 100
    )
    async with statements_on(manual.engine) as seen:
        await indexer.drain()
    assert sweeps(seen) == (1, 0)  # the first batch's; 20 batches after it, full ones too
    assert await sides(manual, big) == (0, GRAPH_FROM + 2 + 24, 0)
    assert await sides(manual, small) == (0, 24, 0)


async def test_vectors_another_process_left_beside_the_graph_are_moved_by_a_periodic_look(
    manual: Memory,
) -> None:
    """A grown user's vectors beside the graph that no batch of this indexer left (another
    process stopped half way) wait for the look every ``sweep_seconds``."""
    big = await new_user(manual)
    await manual.store.add_chunks(drafts("big", GRAPH_FROM + 2), user_id=big, session_id="b")
    await manual.store.index_pending_chunks()
    leave_two = (
        "UPDATE memory_chunk_vectors SET in_graph = false WHERE chunk_id IN"
        " (SELECT chunk_id FROM memory_chunk_vectors ORDER BY chunk_id DESC LIMIT 2)"
    )
    moved_by: dict[float, tuple[int, int, int]] = {}
    for sweep_seconds in (3600.0, 0.0):
        indexer = ChunkIndexer(
            manual.sessionmaker,
            batch_size=64,
            background=False,
            graph_from=GRAPH_FROM,
            sweep_seconds=sweep_seconds,
        )
        await indexer.drain()  # its first batch looks at every grown user
        assert await sides(manual, big) == (GRAPH_FROM + 2, 0, 0)
        await execute(manual, leave_two)
        await indexer.drain()
        moved_by[sweep_seconds] = await sides(manual, big)
    assert moved_by == {3600.0: (GRAPH_FROM, 2, 0), 0.0: (GRAPH_FROM + 2, 0, 0)}
