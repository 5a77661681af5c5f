"""The small-user statement (ranked_text_sql's ``small``): the plain BM25 + nearest statement
written for a generic plan, which a user known to hold fewer than CHUNK_BM25_PRUNE_FROM chunks
reads with, on the cached-plans engine. It must return the plain statement's rows to the bit
wherever the user's chunks are (indexed, queued with a copy made ahead or without, beside the
graph or in it, without a vector), never another user's, and its generic plan must never walk
an index of everyone's rows (the HNSW graph, the GIN index of every user's terms)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event, text

from navi_memory import Memory, open_memory
from navi_memory.constants import CHUNK_BM25_B, CHUNK_BM25_K1, CHUNK_GRAPH_FROM
from navi_memory.db import vector_binary
from navi_memory.repositories.chunks import ranked_text_sql, settled_rows
from navi_memory.repositories.statements import _driver_text, statement
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import CHUNK_T0, execute, new_user, plan_nodes
from tests.integration.test_chunk_index import TOPICS, drafts
from tests.integration.test_search import add_summary

QUERIES = [*TOPICS[:5], "pgbouncer 5433", "nothing matches zzzz", "backup invoice berlin"]
EVERYONES = ("ix_memory_chunk_vectors_embedding_hnsw", "ix_memory_chunk_terms_user_id_tsv")
"""The indexes of every user's rows: a plan for one small user must never read them."""


@pytest.fixture
async def manual(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """Background indexing off, batches of 8: a test leaves chunks queued where it wants."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_index_batch_size=8
    )
    async with open_memory(settings) as opened:
        yield opened


def params(
    uid: uuid.UUID,
    query: str,
    vector: Sequence[float],
    limit: int = 5,
    session_id: str | None = None,
) -> dict[str, Any]:
    words = query.split()
    return {
        "sid": session_id,
        "uid": uid,
        "query": query,
        "terms": words,
        "limit": limit,
        "k1": CHUNK_BM25_K1,
        "b": CHUNK_BM25_B,
        "q": vector_binary(vector),
        "settled_rows": settled_rows(CHUNK_GRAPH_FROM),
    }


async def raw_connection(memory: Memory, plan_cache_mode: str) -> asyncpg.Connection:
    fairy = await memory.engine.raw_connection()
    driver = fairy.driver_connection
    assert isinstance(driver, asyncpg.Connection)
    await driver.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    fairy.detach()  # ours alone: closed by the caller, never back in the pool
    return driver


async def rows_of(
    conn: asyncpg.Connection, memory: Memory, sql: str, values: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """Every row the statement returns, sorted by id: what both lists say of each chunk."""
    found = _driver_text(statement(sql), memory.engine.dialect)
    assert found is not None
    rows = await conn.fetch(found.sql, *[values[name] for name in found.names])
    return sorted(
        (
            r["id"],
            r["user_id"],
            r["score"],
            r["terms_hit"],
            r["distance"],
            r["query_distance"],
            r["summary_at"],
            r["scope_chunks"],
        )
        for r in rows
    )


async def both(
    memory: Memory,
    uid: uuid.UUID,
    queries: list[str],
    limit: int = 5,
    session_id: str | None = None,
) -> list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """For each query: the plain statement's rows on custom plans, and the small statement's on
    a generic plan (forced: the plan a cached-plans connection settles on); of one session
    when ``session_id`` is given."""
    assert memory.embedder is not None
    by_session = session_id is not None
    plain_sql = ranked_text_sql(
        by_user=True, by_session=by_session, with_vector=True, with_summary_at=True
    )
    small_sql = ranked_text_sql(
        by_user=True, by_session=by_session, with_vector=True, with_summary_at=True, small=True
    )
    custom = await raw_connection(memory, "force_custom_plan")
    generic = await raw_connection(memory, "force_generic_plan")
    try:
        pairs = []
        for query in queries:
            vector = await memory.embedder.embed_query(query)
            values = params(uid, query, vector, limit, session_id)
            pairs.append(
                (
                    await rows_of(custom, memory, plain_sql, values),
                    await rows_of(generic, memory, small_sql, values),
                )
            )
        return pairs
    finally:
        await custom.close()
        await generic.close()


@pytest.mark.slow  # 4-8 s: make test-slow (CI runs it)
async def test_the_small_statement_returns_the_plain_statements_rows_wherever_the_chunks_are(
    manual: Memory, fake_ollama: FakeOllama
) -> None:
    """One user's chunks indexed beside the graph, some of them in it (a user who shrank), a
    backlog with copies made ahead and without, chunks with no vector, and a session summary;
    another user with the same chunks. For every query and limit the small statement on a
    generic plan returns the plain statement's rows: the same chunks, BM25 scores, terms hit,
    distances and summary boundaries, bit for bit; and only the user's own. The same for a
    search of each of their sessions, and of a session they do not have. (A user settled in
    the graph — possible only with CHUNK_GRAPH_FROM below CHUNK_BM25_PRUNE_FROM — is read
    exactly by the small statement and through the graph by the plain one: not compared.)"""
    uid, other = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("a", 16), user_id=uid, session_id="s1")
    await manual.store.add_chunks(drafts("a", 16), user_id=other, session_id="s1-other")
    await manual.store.index_pending_chunks()
    # The other user's chunks under the same id: left by a version before revision 0028
    # (add_chunks refuses it now), and read by user all the same.
    for table in ("memory_chunks", "memory_chunk_vectors", "memory_chunk_terms"):
        await execute(manual, f"UPDATE {table} SET session_id = 's1' WHERE user_id = :u", u=other)
    await execute(
        manual,
        "UPDATE memory_chunk_vectors SET in_graph = true WHERE user_id = :u AND chunk_id % 3 = 0",
        u=uid,
    )
    await manual.store.add_chunks(drafts("b", 20), user_id=uid, session_id="s2")
    assert await manual.store.index_pending_chunks(max_batches=1) == 0  # copies made ahead
    fake_ollama.mode = "fail"
    await manual.store.add_chunks(drafts("c", 3), user_id=uid, session_id="s3")
    fake_ollama.mode = "ok"
    await manual.sessions.create("s2", user_id=uid)
    # A summary in the middle of s2's chunks (they end CHUNK_T0 + 0..19 minutes).
    await add_summary(manual, "s2", CHUNK_T0 + timedelta(minutes=10))
    sides = await manual_sides(manual, uid)
    assert sides["graph"] > 0 and sides["beside"] > 0
    assert sides["made"] > 0 and sides["unmade"] > 0 and sides["no vector"] == 3
    boundaries = set()

    for session_id in (None, "s1", "s2", "s3", "nobody's"):
        for limit in (1, 5, 40):
            for plain, small in await both(manual, uid, QUERIES, limit, session_id):
                assert small == plain
                assert {row[1] for row in small} <= {uid}
                boundaries |= {row[6] for row in small}
    assert len(boundaries) == 2  # rows of s2 (its summary's time) and of the others (None)
    # Something was found by each list, so the comparison compared something.
    found = await both(manual, uid, [TOPICS[0], "pgbouncer 5433"])
    assert any(row[4] is not None for row in found[0][1])
    assert any(row[2] is not None for row in found[1][1])


async def manual_sides(memory: Memory, uid: uuid.UUID) -> dict[str, int]:
    """Where the user's chunk vectors are."""
    async with memory.engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    text(
                        "SELECT (SELECT count(*) FROM memory_chunk_vectors"
                        "        WHERE user_id = :u AND in_graph) AS graph,"
                        "       (SELECT count(*) FROM memory_chunk_vectors"
                        "        WHERE user_id = :u AND NOT in_graph) AS beside,"
                        "       (SELECT count(*) FROM memory_chunk_vector_queue"
                        "        WHERE user_id = :u AND embedding IS NOT NULL) AS made,"
                        "       (SELECT count(*) FROM memory_chunk_vector_queue"
                        "        WHERE user_id = :u AND embedding IS NULL) AS unmade,"
                        "       (SELECT count(*) FROM memory_chunks"
                        '        WHERE user_id = :u AND embedding IS NULL) AS "no vector"'
                    ),
                    {"u": uid},
                )
            )
            .mappings()
            .one()
        )
    return {key: int(value) for key, value in row.items()}


@pytest.mark.parametrize(
    "off",
    [
        ("enable_seqscan",),
        ("enable_seqscan", "enable_sort"),
        ("enable_seqscan", "enable_bitmapscan"),
    ],
)
@pytest.mark.parametrize("session_id", [None, "s1"])
async def test_the_small_statements_generic_plan_reads_no_index_of_everyones_rows(
    manual: Memory, off: tuple[str, ...], session_id: str | None
) -> None:
    """The generic plan of the small statement, over a table where another user holds most
    rows (in the graph, their terms in GIN; sequential scans priced out, as a table of
    thousands of users would: a test-sized one is cheaper to scan), with sorts or bitmaps
    priced out too: it reads neither the HNSW graph nor the GIN index of everyone's terms,
    only the user's own rows through their btrees. The control: the plain statement's generic
    plan, with sorts priced out, plans the HNSW scan of everyone's rows (its custom plans see
    the user and avoid it)."""
    uid, big = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("small", 8), user_id=uid, session_id="s1")
    await manual.store.add_chunks(drafts("big", 200), user_id=big, session_id="b1")
    await manual.store.index_pending_chunks()
    await execute(
        manual, "UPDATE memory_chunk_vectors SET in_graph = true WHERE user_id = :u", u=big
    )
    await execute(manual, "ANALYZE memory_chunks, memory_chunk_vectors, memory_chunk_terms")
    assert manual.embedder is not None
    vector = await manual.embedder.embed_query(TOPICS[0])
    values = params(uid, "staging database", vector, session_id=session_id)
    values["q"] = "[" + ",".join(str(x) for x in vector) + "]"  # EXECUTE's arguments: literals
    sql = ranked_text_sql(
        by_user=True,
        by_session=session_id is not None,
        with_vector=True,
        with_summary_at=True,
        small=True,
    )
    found = _driver_text(statement(sql), manual.engine.dialect)
    assert found is not None
    conn = await raw_connection(manual, "force_generic_plan")
    try:
        for setting in off:
            await conn.execute(f"SET {setting} = off")
        plan = await explain_prepared(conn, "small_statement", found, values)
        # The control: the plain statement's generic plan under the same settings.
        plain = _driver_text(
            statement(
                ranked_text_sql(
                    by_user=True,
                    by_session=session_id is not None,
                    with_vector=True,
                    with_summary_at=True,
                )
            ),
            manual.engine.dialect,
        )
        assert plain is not None
        control = await explain_prepared(conn, "plain_statement", plain, values, analyze=False)
    finally:
        await conn.close()
    plain_used = {n["Index Name"] for n in plan_of(control) if "Index Name" in n}
    if "enable_sort" in off:  # there an index is the only way to the order it wants
        assert plain_used & set(EVERYONES), plain_used
    nodes = plan_of(plan)
    used = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert not used & set(EVERYONES), used
    # The user's own rows were read (8 chunks, each side once), never the big user's 200.
    for node in nodes:
        if node.get("Relation Name") in ("memory_chunk_vectors", "memory_chunk_terms"):
            read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            assert read * node.get("Actual Loops", 1) <= 8, node


async def explain_prepared(
    conn: asyncpg.Connection,
    name: str,
    found: Any,
    values: dict[str, Any],
    *,
    analyze: bool = True,
) -> Any:
    """EXPLAIN (FORMAT JSON) of the driver text ``found`` prepared as ``name`` on ``conn`` (its
    plan_cache_mode decides custom or generic) and executed on ``values`` by name; with
    ANALYZE, as it ran."""
    await conn.execute(f"PREPARE {name} AS {found.sql}")
    arguments = ", ".join(literal(values[parameter]) for parameter in found.names)
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    return await conn.fetchval(f"EXPLAIN ({options}) EXECUTE {name}({arguments})")


def plan_of(explained: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) answer (text or decoded)."""
    root = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    return list(plan_nodes(root))


def literal(value: object) -> str:
    """``value`` as an SQL literal (EXPLAIN EXECUTE takes no bound parameters)."""
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(literal(item) for item in value) + "]::text[]"
    return "'" + str(value).replace("'", "''") + "'"


async def test_a_user_known_small_is_read_on_cached_plans_with_the_same_hits(
    manual: Memory,
) -> None:
    """search_chunks and unified search: a user's first search (not yet known small) reads on
    the engine of custom plans; later ones — of all their chunks or of one session — on the
    cached-plans engine, with the same hits."""
    uid, stranger = await new_user(manual), await new_user(manual)
    await manual.store.add_chunks(drafts("a", 12), user_id=uid, session_id="s1")
    await manual.store.add_chunks(drafts("b", 4), user_id=stranger, session_id="s2")
    await manual.store.index_pending_chunks()
    checkouts = {"custom": 0, "cached": 0}
    engines = {"custom": manual.store._engine, "cached": manual.store._cached_plans}
    assert engines["custom"] is not engines["cached"]

    def counter(name: str) -> Any:
        def count(*_: Any) -> None:
            checkouts[name] += 1

        return count

    listeners = [(engines[name].sync_engine.pool, counter(name)) for name in engines]
    for pool, listener in listeners:
        event.listen(pool, "checkout", listener)
    try:

        async def chunk_hits() -> list[tuple[int, str, float | None]]:
            return [
                (h.id, h.via, h.score)
                for h in await manual.store.search_chunks(TOPICS[1], user_id=uid)
            ]

        async def unified_hits() -> list[tuple[int | None, str, float]]:
            return [
                (h.chunk_id, h.via, h.score)
                for h in await manual.search.search(TOPICS[1], scope="raw", user_id=uid)
                if h.source_type == "raw"
            ]

        first = await chunk_hits()
        assert checkouts == {"custom": 1, "cached": 0}
        assert first and await chunk_hits() == first
        assert checkouts == {"custom": 1, "cached": 1}
        unified = await unified_hits()
        # The raw lane and the facts lane (always cached): both on cached plans now.
        assert checkouts == {"custom": 1, "cached": 3}
        assert [chunk for chunk, _, _ in unified] == [chunk for chunk, _, _ in first]
        # One session of the user's: the session's statement, small too.
        in_session = await manual.store.search_chunks(TOPICS[1], user_id=uid, session_id="s1")
        assert checkouts == {"custom": 1, "cached": 4}
        assert [h.id for h in in_session] == [chunk for chunk, _, _ in first]
        # A user not known small (never searched): custom plans, session or not; a session's
        # search teaches the hints too (its rows count all the user's chunks).
        await manual.store.search_chunks(TOPICS[1], user_id=stranger, session_id="s2")
        assert checkouts == {"custom": 2, "cached": 4}
        await manual.store.search_chunks(TOPICS[1], user_id=stranger, session_id="s2")
        assert checkouts == {"custom": 2, "cached": 5}
    finally:
        for pool, listener in listeners:
            event.remove(pool, "checkout", listener)
