"""The pruned BM25 statement (revision 0008): memory_chunk_lexeme_df kept in step by any
writer, the pruned list equal to the plain one to the bit, a big user's query reading only the
chunks that can reach the top, and PruneHints learning which users are small."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from navi_memory import Memory
from navi_memory.constants import (
    CHUNK_BM25_B,
    CHUNK_BM25_K1,
    CHUNK_BM25_SEED_EVERY,
    CHUNK_BM25_SEED_ROWS,
)
from navi_memory.repositories.chunks import ranked_text_sql
from navi_memory.testing import FakeOllama
from tests.integration.factories import (
    add_filler_chunks,
    execute,
    index_chunk_text,
    new_user,
    plan_nodes,
)
from tests.integration.factories import chunk_draft as draft

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "QUARTZ_X"]
"""A small vocabulary, so that most words are common, scores tie and pruning has work."""


async def df_table(memory: Memory) -> set[tuple[Any, ...]]:
    async with memory.engine.connect() as conn:
        rows = await conn.execute(text("SELECT user_id, lexeme, df FROM memory_chunk_lexeme_df"))
        return {tuple(r) for r in rows}


async def df_recount(memory: Memory) -> set[tuple[Any, ...]]:
    """What memory_chunk_lexeme_df must hold: the frequencies of the users it keeps."""
    async with memory.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT t.user_id, l, count(*) FROM memory_chunk_terms t"
                " JOIN memory_chunk_text_stats s ON s.user_id = t.user_id AND s.df_kept,"
                " unnest(tsvector_to_array(t.tsv)) l GROUP BY t.user_id, l"
            )
        )
        return {tuple(r) for r in rows}


async def set_df_from(memory: Memory, chunks: int) -> None:
    """Keep the frequencies of users from ``chunks`` indexed chunks on (1,000 by default)."""
    await execute(
        memory,
        "CREATE OR REPLACE FUNCTION navi_chunk_df_from() RETURNS integer"
        f" LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT {int(chunks)}'",
    )


async def kept(memory: Memory) -> set[uuid.UUID]:
    async with memory.engine.connect() as conn:
        rows = await conn.execute(text("SELECT user_id FROM memory_chunk_text_stats WHERE df_kept"))
        return {r[0] for r in rows}


async def insert_chunks(
    memory: Memory, uid: uuid.UUID, contents: list[str], *, indexed: list[bool], session: str = "s"
) -> None:
    """The chunks, written by SQL of their own: the indexed ones straight into
    memory_chunk_terms (as the indexer would), the others left in the text queue."""
    await execute(
        memory,
        "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
        " start_seq, end_seq, started_at, ended_at)"
        " SELECT :u, :s, x.content, md5(:s || x.n || x.content), x.n, x.n,"
        "   timestamptz '2026-11-01' + x.n * interval '1 minute',"
        "   timestamptz '2026-11-01' + (x.n % 3) * interval '1 minute'"
        " FROM unnest(CAST(:contents AS text[]), CAST(:indexed AS bool[]))"
        "   WITH ORDINALITY x(content, indexed, n)"
        " RETURNING id, user_id, session_id, ended_at, content, breadcrumbs, start_seq),"
        " flags AS (SELECT c.*, x.indexed FROM c JOIN"
        "   unnest(CAST(:indexed AS bool[])) WITH ORDINALITY x(indexed, n) ON x.n = c.start_seq),"
        " terms AS (INSERT INTO memory_chunk_terms"
        "   (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
        "   SELECT id, user_id, session_id, ended_at, length(tsv), tsv FROM"
        "   (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM flags WHERE indexed) f)"
        " INSERT INTO memory_chunk_text_queue (chunk_id, user_id)"
        " SELECT id, user_id FROM flags WHERE NOT indexed",
        u=uid,
        s=session,
        contents=contents,
        indexed=indexed,
    )


async def ranked(
    memory: Memory,
    uid: uuid.UUID,
    query: str,
    limit: int,
    *,
    prune_from: int | None,
    seed: tuple[int, int] = (CHUNK_BM25_SEED_ROWS, CHUNK_BM25_SEED_EVERY),
    small: bool = False,
) -> list[tuple[Any, ...]]:
    """The BM25 list; ``small``: the small-user statement, on a generic plan (as on the
    cached-plans engine)."""
    sql = ranked_text_sql(by_user=True, by_session=False, prune=prune_from is not None, small=small)
    params: dict[str, Any] = {
        "uid": uid,
        "query": query,
        "terms": query.split(),
        "limit": limit,
        "k1": CHUNK_BM25_K1,
        "b": CHUNK_BM25_B,
    }
    if prune_from is not None:
        params.update(prune_from=prune_from, seed_rows=seed[0], seed_every=seed[1])
    async with memory.engine.connect() as conn:
        if small:  # this transaction's only
            await conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        rows = (await conn.execute(text(sql), params)).mappings().all()
    return [(r["id"], r["score"], r["terms_hit"], r["scope_chunks"]) for r in rows]


async def test_document_frequencies_follow_every_insert_and_delete(memory: Memory) -> None:
    """memory_chunk_lexeme_df is the recount of memory_chunk_terms after inserts, deletes by
    SQL of its own (a session's chunks, one chunk) and a user's delete; a lexeme no chunk
    holds has no row left. (Every user's frequencies kept here: see the next test.)"""
    await set_df_from(memory, 0)
    alice, bob = await new_user(memory), await new_user(memory)
    await insert_chunks(memory, alice, ["alpha bravo", "alpha zulu"], indexed=[True, True])
    await insert_chunks(memory, alice, ["alpha", "QUARTZ_X"], indexed=[True, True], session="other")
    await insert_chunks(memory, bob, ["alpha", "bravo bravo"], indexed=[True, True])
    assert await df_table(memory) == await df_recount(memory)
    assert (alice, "alpha", 3) in await df_table(memory)
    assert (alice, "quartz-x", 1) in await df_table(memory)
    await execute(memory, "DELETE FROM memory_chunks WHERE session_id = 'other'")
    await execute(memory, "DELETE FROM memory_chunks WHERE content = 'alpha zulu'")
    after = await df_table(memory)
    assert after == await df_recount(memory)
    assert not any(row[0] == alice and row[1] in ("zulu", "quartz-x") for row in after)
    await memory.users.delete(bob)
    assert await df_table(memory) == await df_recount(memory)
    assert {row[0] for row in await df_table(memory)} == {alice}


async def test_frequencies_are_kept_from_the_statement_that_makes_a_user_big(
    memory: Memory,
) -> None:
    """Under navi_chunk_df_from() chunks a user has no rows; the statement that takes them
    there counts all their chunks once, later ones add theirs, deletes take theirs away, and a
    user shrinking below it stays kept. Another user's rows never move."""
    await set_df_from(memory, 4)
    alice, bob = await new_user(memory), await new_user(memory)
    await insert_chunks(memory, alice, ["alpha bravo", "alpha"], indexed=[True, True])
    await insert_chunks(memory, bob, ["alpha", "bravo", "charlie"], indexed=[True] * 3)
    assert await kept(memory) == set() and await df_table(memory) == set()
    await insert_chunks(memory, alice, ["alpha zulu", "echo"], indexed=[True, True], session="t")
    assert await kept(memory) == {alice}
    assert (alice, "alpha", 3) in await df_table(memory)
    assert await df_table(memory) == await df_recount(memory)
    await insert_chunks(memory, alice, ["alpha golf"], indexed=[True], session="u")
    assert (alice, "alpha", 4) in await df_table(memory)
    await insert_chunks(memory, bob, ["delta", "echo"], indexed=[True, True])
    assert await kept(memory) == {alice, bob}
    assert await df_table(memory) == await df_recount(memory)
    await execute(
        memory, "DELETE FROM memory_chunks WHERE user_id = :u AND session_id <> 's'", u=alice
    )
    assert await kept(memory) == {alice, bob}  # alice holds 2 chunks now, still kept
    assert await df_table(memory) == await df_recount(memory)
    assert (alice, "alpha", 2) in await df_table(memory)
    await memory.users.delete(bob)
    assert {row[0] for row in await df_table(memory)} == {alice}
    assert await df_table(memory) == await df_recount(memory)


async def test_writers_of_one_user_around_the_moment_frequencies_start_count_each_chunk_once(
    memory: Memory,
) -> None:
    """Two transactions add chunks of one user at once, the first taking the user past the
    threshold: whichever commits first, the second sees it (the statistics row's lock orders
    them) and the counts match a recount; the same with a delete racing the first count."""
    await set_df_from(memory, 3)
    uid = await new_user(memory)
    await insert_chunks(memory, uid, ["alpha", "bravo"], indexed=[True, True])

    async def add(conn: Any, owner: uuid.UUID, contents: list[str], session: str) -> None:
        await conn.execute(
            text(
                "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content,"
                " content_hash, start_seq, end_seq, started_at, ended_at)"
                " SELECT :u, :s, x, md5(:s || x), 1, 1, now(), now()"
                " FROM unnest(CAST(:c AS text[])) x"
                " RETURNING *)"
                " INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at,"
                " lexemes, tsv) SELECT id, user_id, session_id, ended_at, length(tsv), tsv"
                " FROM (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM c) c"
            ),
            {"u": owner, "s": session, "c": contents},
        )

    async with memory.engine.connect() as first, memory.engine.connect() as second:
        await first.begin()
        await add(first, uid, ["alpha charlie"], "one")  # takes the user to 3: counted here
        await second.begin()
        waiting = asyncio.ensure_future(add(second, uid, ["alpha delta", "echo"], "two"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # behind the first's lock on the statistics row
        await first.commit()
        await waiting
        await second.commit()
    assert await kept(memory) == {uid}
    assert (uid, "alpha", 3) in await df_table(memory)
    assert await df_table(memory) == await df_recount(memory)

    other = await new_user(memory)
    await insert_chunks(memory, other, ["alpha", "bravo"], indexed=[True, True])
    async with memory.engine.connect() as deleting, memory.engine.connect() as adding:
        await deleting.begin()
        await deleting.execute(
            text("DELETE FROM memory_chunks WHERE user_id = :u AND content = 'bravo'"),
            {"u": other},
        )
        await adding.begin()
        waiting = asyncio.ensure_future(add(adding, other, ["alpha x", "alpha y"], "three"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await deleting.commit()
        await waiting
        await adding.commit()
    assert other in await kept(memory)
    assert (other, "alpha", 3) in await df_table(memory)
    assert await df_table(memory) == await df_recount(memory)

    # The count first, a delete of one of the counted chunks waiting behind it.
    third = await new_user(memory)
    await insert_chunks(memory, third, ["alpha", "bravo"], indexed=[True, True])
    async with memory.engine.connect() as adding, memory.engine.connect() as deleting:
        await adding.begin()
        await add(adding, third, ["alpha z"], "four")  # takes the user to 3: counted here
        await deleting.begin()
        removing = asyncio.ensure_future(
            deleting.execute(
                text("DELETE FROM memory_chunks WHERE user_id = :u AND content = 'alpha'"),
                {"u": third},
            )
        )
        await asyncio.sleep(0.2)
        assert not removing.done()
        await adding.commit()
        await removing
        await deleting.commit()
    assert third in await kept(memory)
    assert (third, "alpha", 1) in await df_table(memory)
    assert await df_table(memory) == await df_recount(memory)


@pytest.mark.slow
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    corpus=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    ),
    others=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=5),
    limit=st.integers(min_value=1, max_value=6),
    seed=st.tuples(st.sampled_from([0, 1, 3, 8, 200]), st.sampled_from([0, 1, 10])),
    df_from=st.sampled_from([0, 4, 12, 10**6]),
    split=st.integers(min_value=0, max_value=40),
)
async def test_the_pruned_list_is_the_plain_list_to_the_bit(
    memory: Memory,
    corpus: list[tuple[str, bool]],
    others: list[str],
    query: list[str],
    limit: int,
    seed: tuple[int, int],
    df_from: int,
    split: int,
) -> None:
    """Whatever the chunks (indexed or still queued, written in one statement or two), the
    query, the limit, the seed's sizes and whether the user's frequencies are kept (counted
    at once, or from the second statement on, or never), the pruned statement and the
    small-user one (on a generic plan) return the plain statement's rows: the same chunks,
    order, scores and terms hit. Another user's chunks (same words) change neither."""
    await set_df_from(memory, df_from)
    uid, other = await new_user(memory), await new_user(memory)
    contents = [f"{words} #{n}" for n, (words, _) in enumerate(corpus)]
    flags = [flag for _, flag in corpus]
    await insert_chunks(memory, uid, contents[:split], indexed=flags[:split])
    if contents[split:]:
        await insert_chunks(memory, uid, contents[split:], indexed=flags[split:], session="t")
    if others:
        await insert_chunks(memory, other, others, indexed=[True] * len(others))
    phrase = " ".join(query)
    plain = await ranked(memory, uid, phrase, limit, prune_from=None)
    assert await ranked(memory, uid, phrase, limit, prune_from=0, seed=seed) == plain
    assert await ranked(memory, uid, phrase, limit, prune_from=10**6, seed=seed) == plain
    assert await ranked(memory, uid, phrase, limit, prune_from=None, small=True) == plain


def plan_params(uid: uuid.UUID, query: str) -> dict[str, Any]:
    """Both BM25 statements' parameters for ``query`` (its words as terms), the top 5, the
    pruned one's at the package's thresholds."""
    return {
        "uid": uid,
        "query": query,
        "terms": query.split(),
        "limit": 5,
        "k1": CHUNK_BM25_K1,
        "b": CHUNK_BM25_B,
        "prune_from": 1_000,
        "seed_rows": CHUNK_BM25_SEED_ROWS,
        "seed_every": CHUNK_BM25_SEED_EVERY,
    }


async def analyzed_nodes(
    conn: AsyncConnection, sql: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every node of ``EXPLAIN (ANALYZE, FORMAT JSON)`` of ``sql``, as it ran."""
    plan = (await conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql), params)).scalar_one()
    root = plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"]
    return list(plan_nodes(root))


@pytest.mark.slow
async def test_a_big_users_query_reads_only_the_chunks_that_can_reach_the_top(
    memory: Memory,
) -> None:
    """EXPLAIN ANALYZE of a 20,000-chunk user's query of one rare and one common word: the
    plain statement reads every chunk holding the common word (4,000); the pruned one, served
    by the GIN index, reads the rare word's chunks and few more, and returns the same rows."""
    uid, other = await new_user(memory), await new_user(memory)
    marks = (
        "CASE WHEN g % 5 = 0 THEN ' marimba' ELSE '' END"
        " || CASE WHEN g % 2500 = 7 THEN ' glockenspiel' ELSE '' END"
    )
    for owner, count in ((uid, 20_000), (other, 2_000)):
        await add_filler_chunks(memory, owner, count, marks)
    await index_chunk_text(memory)
    await execute(memory, "ANALYZE memory_chunks, memory_chunk_terms, memory_chunk_lexeme_df")
    params = plan_params(uid, "glockenspiel marimba")
    reads = {}
    found = {}
    async with memory.engine.connect() as conn:
        for prune in (False, True):
            sql = ranked_text_sql(by_user=True, by_session=False, prune=prune)
            nodes = await analyzed_nodes(conn, sql, params)
            terms = [n for n in nodes if n.get("Relation Name") == "memory_chunk_terms"]
            assert not any(n["Node Type"] == "Seq Scan" for n in terms)
            reads[prune] = sum(n["Actual Rows"] * n.get("Actual Loops", 1) for n in terms)
            if prune:
                assert any(
                    n["Node Type"] == "Bitmap Index Scan"
                    and n["Index Name"] == "ix_memory_chunk_terms_user_id_tsv"
                    for n in nodes
                )
            rows = (await conn.execute(text(sql), params)).mappings().all()
            found[prune] = [(r["id"], r["score"]) for r in rows]
    assert found[True] == found[False] and len(found[True]) == 5
    assert reads[False] >= 4_000
    # The 8 glockenspiel chunks (seed, then candidates) and the seed's all-words chunks.
    assert reads[True] <= 100, reads


@pytest.mark.slow
async def test_a_big_users_query_is_pruned_when_no_word_is_rare_and_none_holds_all(
    memory: Memory,
) -> None:
    """The seed when no query word is rare enough to read whole (its chunks beyond
    CHUNK_BM25_SEED_ROWS) and no chunk holds every word: before, the seed was empty, θ 0, and
    a 20,000-chunk user's query read every chunk holding any of its words (4,500 here; at 1M
    chunks 0.7-0.9 s for the largest user). The seed now reads up to CHUNK_BM25_SEED_ROWS of
    the rarest word's chunks; their scores prune the common word, and the rows are the
    plain statement's."""
    uid = await new_user(memory)
    # xylophone three times in 500 chunks (beyond the seed's 200), marimba in 4,000 others.
    marks = (
        "CASE WHEN g % 5 = 0 THEN ' marimba' ELSE '' END"
        " || CASE WHEN g % 40 = 1 THEN ' xylophone xylophone xylophone' ELSE '' END"
    )
    await add_filler_chunks(memory, uid, 20_000, marks)
    await index_chunk_text(memory)
    await execute(memory, "ANALYZE memory_chunks, memory_chunk_terms, memory_chunk_lexeme_df")
    params = plan_params(uid, "xylophone marimba")
    reads, found = {}, {}
    async with memory.engine.connect() as conn:
        for prune in (False, True):
            sql = ranked_text_sql(by_user=True, by_session=False, prune=prune)
            nodes = await analyzed_nodes(conn, sql, params)
            reads[prune] = sum(
                n["Actual Rows"] * n.get("Actual Loops", 1)
                for n in nodes
                if n.get("Relation Name") == "memory_chunk_terms"
            )
            rows = (await conn.execute(text(sql), params)).mappings().all()
            found[prune] = [(r["id"], r["score"]) for r in rows]
    assert found[True] == found[False] and len(found[True]) == 5
    assert reads[False] >= 4_500
    # The seed's 200 xylophone chunks, then the 500 candidates holding the essential word.
    assert reads[True] <= 700 + 10, reads


@pytest.mark.slow
async def test_a_small_users_pruned_query_of_a_common_word_reads_only_their_own_chunks(
    memory: Memory,
) -> None:
    """A user the pruned statement does not prune (θ 0: a small user, every word essential)
    takes the plain statement's candidates, whose tsquery the planner sees. Before, the
    essential words' tsquery, unknown when planning, was ANDed with the user's btree through
    the GIN index, which then read every chunk of every user holding a common query word (at
    1M chunks 0.2-0.8 s for a user's first search, PruneHints not yet knowing them small)."""
    uid, other = await new_user(memory), await new_user(memory)
    # 300 chunks interleaved with another user's 20,700, as users' writes are: a bitmap of
    # the GIN index's matches looks worth ANDing with the user's to the planner.
    await execute(
        memory,
        "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
        " end_seq, started_at, ended_at)"
        " SELECT CASE WHEN g % 70 = 0 THEN CAST(:u AS uuid) ELSE CAST(:o AS uuid) END,"
        "   's' || (g % 50),"
        "   'User: ' || repeat('talk about weather and lunch ', 40) || g"
        "   || CASE WHEN g % 70 = 0 THEN ' marimba' ELSE '' END,"
        "   md5(g::text), g, g, now(), now()"
        " FROM generate_series(1, 21000) g",
        u=uid,
        o=other,
    )
    await index_chunk_text(memory)
    await execute(memory, "ANALYZE memory_chunks, memory_chunk_terms, memory_chunk_lexeme_df")
    params = plan_params(uid, "lunch marimba")
    found = {}
    async with memory.engine.connect() as conn:
        for prune in (False, True):
            sql = ranked_text_sql(by_user=True, by_session=False, prune=prune)
            terms_reads = [
                n["Actual Rows"] * n.get("Actual Loops", 1)
                for n in await analyzed_nodes(conn, sql, params)
                if n.get("Relation Name") == "memory_chunk_terms"
                or n.get("Index Name", "").startswith("ix_memory_chunk_terms")
            ]
            # The user's 300 chunks, read a few times over (frequencies, candidates): never
            # the other user's 20,700.
            assert terms_reads and max(terms_reads) <= 300, (prune, terms_reads)
            rows = (await conn.execute(text(sql), params)).mappings().all()
            found[prune] = [(r["id"], r["score"]) for r in rows]
    assert found[True] == found[False] and len(found[True]) == 5


async def test_search_learns_which_users_are_small_and_stops_pruning_them(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """search_chunks and unified search share one PruneHints: a user's first search takes the
    pruned statement and shows them small; later ones take the plain statement; a user who
    grew past the threshold is pruned again. The hits are the same either way."""
    from navi_memory.services.chunks import PruneHints

    hints = memory.store._chunks.prune_hints
    assert isinstance(hints, PruneHints)
    assert memory.search._service.prune_hints is hints
    uid = await new_user(memory)
    await insert_chunks(memory, uid, ["alpha bravo", "alpha"], indexed=[True, True])
    fake_ollama.mode = "fail"
    assert hints.prune(uid)
    first = await memory.store.search_chunks("alpha", user_id=uid)
    assert not hints.prune(uid)
    again = await memory.store.search_chunks("alpha", user_id=uid)
    assert [h.id for h in again] == [h.id for h in first]
    hints.prune_from = 2  # the user now counts as big
    await memory.search.search("alpha", scope="raw", user_id=uid)
    assert hints.prune(uid)
    other = await new_user(memory)
    await insert_chunks(memory, other, ["alpha"], indexed=[True])
    hints.prune_from = 1_000
    await memory.search.search("alpha", scope="raw", user_id=other)
    assert not hints.prune(other)


@pytest.mark.parametrize("capacity", [1, 3])
def test_prune_hints_forget_the_least_recently_searched_beyond_capacity(capacity: int) -> None:
    from navi_memory.services.chunks import PruneHints

    hints = PruneHints(capacity=capacity, prune_from=10)
    users = [uuid.uuid4() for _ in range(capacity + 1)]
    for user in users:
        hints.learn(user, [{"scope_chunks": 3}])
    assert hints.prune(users[0])  # forgotten: pruned again (exact anyway)
    assert not any(hints.prune(user) for user in users[1:])
    hints.learn(users[1], [])  # no rows: nothing learnt
    assert not hints.prune(users[1])


async def scores(
    memory: Memory, uid: uuid.UUID | None, query: str, session: str | None, *, small: bool
) -> dict[int, tuple[Any, ...]]:
    """Every chunk the BM25 statement ranks (limit 1,000), by id: its score and terms hit; of
    one session when ``session`` is given (``small``: on a generic plan); of every user's
    chunks (read_all) when ``uid`` is None."""
    sql = ranked_text_sql(by_user=uid is not None, by_session=session is not None, small=small)
    params: dict[str, Any] = {
        "uid": uid,
        "sid": session,
        "query": query,
        "terms": query.split(),
        "limit": 1_000,
        "k1": CHUNK_BM25_K1,
        "b": CHUNK_BM25_B,
    }
    async with memory.engine.connect() as conn:
        if small:
            await conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        rows = (await conn.execute(text(sql), params)).mappings().all()
    return {r["id"]: (r["score"], r["terms_hit"], r["scope_chunks"]) for r in rows}


@pytest.mark.parametrize("df_from", [0, 10**6])  # the user's frequencies kept, or counted
async def test_a_session_search_scores_each_chunk_as_the_users_search_does(
    memory: Memory, df_from: int
) -> None:
    """Narrowed to one session, BM25 keeps the user's idf: each of the session's chunks scores
    what it scores in a search of all the user's chunks, to the bit, indexed or queued, with
    the frequencies kept or counted, on either statement. (Counted over the session's own
    chunks, every word of a session was rare there: a word in thirty of the user's chunks
    outranked one in a single chunk.) Another user's chunks change nothing."""
    await set_df_from(memory, df_from)
    uid, other = await new_user(memory), await new_user(memory)
    await insert_chunks(
        memory,
        uid,
        ["the zanzibar trip is booked", "more coffee please", "alpha coffee bravo"],
        indexed=[True, False, True],
        session="s1",
    )
    await insert_chunks(
        memory, uid, [f"coffee cup {n}" for n in range(30)], indexed=[n % 2 == 0 for n in range(30)]
    )
    await insert_chunks(memory, other, ["zanzibar zanzibar"] * 5, indexed=[True] * 5, session="s1")
    assert (uid in await kept(memory)) is (df_from == 0)
    for query in ("coffee zanzibar", "alpha coffee", "bravo"):
        everything = await scores(memory, uid, query, None, small=False)
        for small in (False, True):
            session = await scores(memory, uid, query, "s1", small=small)
            assert session and session == {i: everything[i] for i in session}
        # read_all, no user: a session's chunks (both users' under "s1") score as in a search
        # of every user's chunks.
        everyones = await scores(memory, None, query, None, small=False)
        session = await scores(memory, None, query, "s1", small=False)
        assert session and session == {i: everyones[i] for i in session}


async def test_a_rare_word_outranks_a_common_one_within_a_session(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """search_chunks narrowed to a session ranks by the user's statistics: "zanzibar" (one
    chunk of the user's) beats "coffee" (thirty-one), though each is in one chunk of the
    session and the coffee chunk is newer and shorter."""
    uid = await new_user(memory)
    rare = draft("User: the zanzibar trip is booked", 1)
    common = draft("User: more coffee please", 2)
    await memory.store.add_chunks([rare, common], user_id=uid, session_id="s1")
    filler = [draft(f"User: coffee cup {n}", 10 + n) for n in range(30)]
    await memory.store.add_chunks(filler, user_id=uid, session_id="s2")
    fake_ollama.mode = "fail"  # the text path alone
    hits = await memory.store.search_chunks("coffee zanzibar", user_id=uid, session_id="s1")
    assert [h.content_hash for h in hits] == [rare.content_hash, common.content_hash]
