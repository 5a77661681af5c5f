"""search_chunks' BM25 text ranking on real PostgreSQL: term weighting, whole identifiers,
per-user statistics, the index serving the query, and the fusion with the vector list."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text

from navi_memory import ChunkDraft, Memory, open_memory
from navi_memory.constants import CHUNK_BM25_B, CHUNK_BM25_K1, CHUNK_FUSION_VECTOR_WEIGHT
from navi_memory.repositories.chunks import ranked_text_sql
from navi_memory.testing import FakeOllama
from navi_memory.testing.hashing import hashed_embedding
from tests.conftest import make_settings
from tests.integration.factories import (
    add_filler_chunks,
    execute,
    index_chunk_text,
    new_user,
    plan_nodes,
    scalar,
)
from tests.integration.factories import chunk_draft as draft


@pytest.fixture
async def terms_memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    async with open_memory(make_settings(db_url, fake_ollama, chunk_text_ranking="terms")) as m:
        yield m


async def test_a_rare_term_outranks_a_common_one_whatever_the_recency(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A chunk holding the query's rare word beats a newer one holding only its common word."""
    uid = await new_user(memory)
    filler = [draft(f"User: coffee again, cup number {i}", i) for i in range(1, 9)]
    rare = draft("User: the zanzibar trip is booked", 10)
    newest_common = draft("User: more coffee please", 20)
    await memory.store.add_chunks([*filler, rare, newest_common], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"  # the text path alone
    hits = await memory.store.search_chunks("coffee zanzibar", user_id=uid)
    assert hits[0].content_hash == rare.content_hash
    assert hits[0].via == "text" and hits[0].terms_hit == 1
    assert hits[1].content_hash == newest_common.content_hash  # then recency among equals


async def test_a_one_digit_word_of_the_query_decides_between_chunks(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """ "floor 4" finds the chunk about floor 4 first, not a newer one about floor 9: the digit
    is a query term (it was dropped as a one-character term, and recency decided)."""
    uid = await new_user(memory)
    four = draft("User: the meeting room is on floor 4", 1)
    nine = draft("User: the gym is on floor 9", 2)
    await memory.store.add_chunks([four, nine], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"  # the text path alone
    hits = await memory.store.search_chunks("floor 4", user_id=uid)
    assert [h.content_hash for h in hits] == [four.content_hash, nine.content_hash]
    assert [h.terms_hit for h in hits] == [2, 1]


async def text_path_over(
    memory: Memory, fake_ollama: FakeOllama, uid: uuid.UUID, chunks: dict[str, ChunkDraft]
) -> Callable[[str], Awaitable[list[tuple[str, int]]]]:
    """``chunks`` stored for ``uid`` (one session), the embedder down: a search by the text
    path alone, answering each hit's name in ``chunks`` and its terms hit."""
    await memory.store.add_chunks(list(chunks.values()), user_id=uid, session_id="s")
    fake_ollama.mode = "fail"
    names = {c.content_hash: name for name, c in chunks.items()}

    async def found(query: str) -> list[tuple[str, int]]:
        hits = await memory.store.search_chunks(query, user_id=uid)
        return [(names[h.content_hash], h.terms_hit) for h in hits]

    return found


async def test_a_compound_query_word_finds_no_chunk_by_its_stop_word_parts(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """The index holds each part of "state-of-the-art" as a lexeme, the and of included: asked
    for them, every chunk of the user was a candidate, and "the cat sat on the mat" came back
    as a hit of "state-of-the-art" (terms hit 0). The query's compounds leave out their
    stop-word and one-letter parts (me of "me@example.com", a and m of "a.m."); the chunk
    holding the compound whole is first and hits the term, one holding its other parts apart
    comes after and does not."""
    uid = await new_user(memory)
    chunks = {
        "compound": draft("User: we picked a state-of-the-art parser", 1),
        "parts": draft("User: the art of the state machine", 2),
        "mail": draft("User: mail me@example.com at 9 a.m. please", 3),
        "app": draft("User: the build of my-app.js is failing", 4),
        "noise": draft("User: tell me a story about it, I said, then the cat sat", 5),
    }
    found = await text_path_over(memory, fake_ollama, uid, chunks)

    assert await found("state-of-the-art") == [("compound", 1), ("parts", 0)]
    assert await found("me@example.com") == [("mail", 1)]
    assert await found("a.m.") == [("mail", 1)]
    assert (await found("is my-app.js failing"))[0] == ("app", 2)
    # Nothing holds "end" or "file": no hit, though the chunks hold "of".
    assert await found("end_of_file") == []


@pytest.mark.parametrize(
    ("query", "wanted", "first"),
    [
        ("settings", "files", False),
        ("readme", "files", True),
        ("what is bob's address", "mail", True),
        ("example", "mail", False),
        ("node", "node", True),
        ("settings.py", "files", True),
        ("bob@example.com", "mail", True),
    ],
)
async def test_a_part_of_a_file_name_host_or_address_finds_it(
    memory: Memory, fake_ollama: FakeOllama, query: str, wanted: str, first: bool
) -> None:
    """The parser keeps "settings.py", "bob@example.com", "node.js" whole: their parts are
    words of the chunk too (revision 0024), beside a chunk holding the same words on their own;
    the whole finds its chunk first."""
    uid = await new_user(memory)
    chunks = {
        "files": draft("User: I edited settings.py and the README.md", 1),
        "mail": draft("User: write to bob@example.com tomorrow", 2),
        "node": draft("User: the service runs on node.js", 3),
        "other": draft("User: the settings of the example are fine", 4),
    }
    await memory.store.add_chunks(list(chunks.values()), user_id=uid, session_id="s")
    fake_ollama.mode = "fail"  # the text path alone
    hits = [h.content_hash for h in await memory.store.search_chunks(query, user_id=uid)]
    assert chunks[wanted].content_hash in hits
    if first:
        assert hits[0] == chunks[wanted].content_hash


async def test_another_form_of_a_word_finds_it_and_the_very_word_hits_the_term(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Words match by their English stems too (revision 0024): "deploy" finds "deployed", and
    "meeting with landlord" finds the chunk about meetings with the landlord by both words
    (only by "landlord" before: "meetings" is not "meeting"). Only the chunk's own words decide
    which terms it hits: the stem deploy of "deployed" scores for "deploy" and does not hit it
    (so "important" does not hit "import", which would let recall take any excerpt saying
    "important" for one about importing)."""
    uid = await new_user(memory)
    chunks = {
        "deployed": draft("User: I deployed the new build on friday", 1),
        "landlord": draft("User: I have two meetings with the landlord next week", 2),
        "room": draft("User: the meeting room is on floor 4", 3),
    }
    found = await text_path_over(memory, fake_ollama, uid, chunks)

    assert await found("when did I deploy") == [("deployed", 0)]
    assert await found("deployed builds") == [("deployed", 1)]
    assert dict(await found("meeting with landlord")) == {"landlord": 1, "room": 1}
    assert dict(await found("meeting")) == {"landlord": 0, "room": 1}
    assert dict(await found("meetings")) == {"landlord": 1, "room": 0}


async def test_the_spec_ranking_stays_reachable_and_lets_recency_win_that_tie(
    terms_memory: Memory, fake_ollama: FakeOllama
) -> None:
    """CHUNK_TEXT_RANKING=terms ranks by distinct terms hit, then recency, as the spec says."""
    uid = await new_user(terms_memory)
    common = draft("User: coffee again", 1)
    rare = draft("User: the zanzibar trip", 2)
    newest_common = draft("User: more coffee", 3)
    await terms_memory.store.add_chunks([common, rare, newest_common], user_id=uid, session_id="s")
    fake_ollama.mode = "fail"
    hits = await terms_memory.store.search_chunks("coffee zanzibar", user_id=uid)
    assert [h.content_hash for h in hits] == [
        newest_common.content_hash,
        rare.content_hash,
        common.content_hash,
    ]


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("QUARTZ_RETRY_LIMIT", "identifier"),
        ("what is quartz_retry_limit set to", "identifier"),
        ("8098", "number"),
        ("#4521", "ticket"),
        ("/etc/x.toml", "path"),
        ("x.toml", "path"),
    ],
)
async def test_identifiers_numbers_and_paths_are_found_whole(
    memory: Memory, fake_ollama: FakeOllama, query: str, wanted: str
) -> None:
    """Identifiers, numbers, ticket ids and paths (or a path's file name) find their chunk
    first, ahead of chunks holding only their parts or a longer number."""
    uid = await new_user(memory)
    chunks = {
        "identifier": draft("Assistant: set QUARTZ_RETRY_LIMIT to 5", 1),
        "parts": draft("User: quartz watches retry the limit; quartz again, limit again", 2),
        "number": draft("User: the service listens on 8098", 3),
        "longer": draft("User: 80981 is a zip code", 4),
        "ticket": draft("User: see ticket #4521 for the crash", 5),
        "path": draft("User: the config is in", 6, ["/etc/x.toml"]),
        "other": draft("User: nothing to see at /etc/y.toml", 7),
    }
    await memory.store.add_chunks(list(chunks.values()), user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"
    hits = await memory.store.search_chunks(query, user_id=uid)
    assert hits, query
    assert hits[0].content_hash == chunks[wanted].content_hash
    if wanted == "number":
        assert chunks["longer"].content_hash not in {h.content_hash for h in hits}


async def test_another_users_chunks_change_neither_idf_nor_results(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Alice's ranking is the same before and after Bob stores many chunks that would flip it
    if document frequencies were counted over everyone; Bob's chunks never show."""
    alice, bob = await new_user(memory), await new_user(memory)
    alpha = draft("User: alpha here", 1)  # alpha: 1 of Alice's 3 chunks
    beta_new = draft("User: beta here", 3)  # beta: 2 of 3, and the newest
    beta_old = draft("User: beta there", 2)
    await memory.store.add_chunks([alpha, beta_new, beta_old], user_id=alice, session_id="a")
    fake_ollama.mode = "fail"
    before = await memory.store.search_chunks("alpha beta", user_id=alice)
    assert before[0].content_hash == alpha.content_hash
    bobs = [draft(f"User: alpha number {i}", 10 + i) for i in range(40)]
    await memory.store.add_chunks(bobs, user_id=bob, session_id="b")
    after = await memory.store.search_chunks("alpha beta", user_id=alice)
    assert [(h.id, h.terms_hit) for h in after] == [(h.id, h.terms_hit) for h in before]
    assert {h.user_id for h in after} == {alice}
    await memory.store.wait_chunk_indexing()
    assert [(h.id, h.terms_hit) for h in after] == [
        (h.id, h.terms_hit) for h in await memory.store.search_chunks("alpha beta", user_id=alice)
    ]
    stats = await scalar(
        memory, "SELECT chunks FROM memory_chunk_text_stats WHERE user_id = :u", u=alice
    )
    assert stats == 3


async def test_text_statistics_follow_inserts_and_deletes_by_any_writer(memory: Memory) -> None:
    """The per-user chunk count and lexeme total follow the indexer, plain SQL deletes of
    memory_chunks (through the cascade) and a user's deletion."""
    uid = await new_user(memory)
    await memory.store.add_chunks(
        [draft("User: one two three", 1), draft("User: four", 2)], user_id=uid, session_id="s1"
    )
    await memory.store.add_chunks([draft("User: five six", 3)], user_id=uid, session_id="s2")
    await memory.store.wait_chunk_indexing()
    row = "SELECT chunks || '/' || lexemes FROM memory_chunk_text_stats WHERE user_id = :u"
    lexemes = (
        "SELECT sum(length(navi_chunk_tsv(content, breadcrumbs))) FROM memory_chunks "
        "WHERE user_id = :u"
    )
    assert await scalar(memory, row, u=uid) == f"3/{await scalar(memory, lexemes, u=uid)}"
    await execute(memory, "DELETE FROM memory_chunks WHERE session_id = 's1'")
    assert await scalar(memory, row, u=uid) == f"1/{await scalar(memory, lexemes, u=uid)}"
    await memory.users.delete(uid)
    assert await scalar(memory, "SELECT count(*) FROM memory_chunk_text_stats") == 0


async def test_fusion_keeps_distance_and_terms_hit_and_finds_each_hit_once(
    memory: Memory,
) -> None:
    """With an embedder, a chunk found by both lists is one hit carrying its distance and its
    terms hit; text-only hits carry no distance."""
    uid = await new_user(memory)
    port = draft("User: which port should the API use?\n\nAssistant: we picked port 8099.", 1)
    berlin = draft("User: I am flying to Berlin next week for the port of Hamburg.", 2)
    await memory.store.add_chunks([port, berlin], user_id=uid, session_id="s1")
    hits = await memory.store.search_chunks("which port should the API use", user_id=uid)
    assert len({h.id for h in hits}) == len(hits) == 2
    first = hits[0]
    assert first.content_hash == port.content_hash
    assert first.via == "vector" and first.distance is not None and first.distance < 0.45
    assert first.terms_hit >= 2
    assert all(h.distance is None for h in hits if h.via == "text")


async def test_a_text_hits_similarity_to_the_query_reorders_close_text_scores(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Score fusion on real PostgreSQL: two chunks with close BM25 scores swap places when the
    runner-up's stored vector is the query's and the leader's points away from it; a chunk
    without a vector takes the lowest similarity of the candidates that have one."""
    uid = await new_user(memory)
    query = "zanzibar trip"
    leader = draft("User: the zanzibar trip, zanzibar again, the trip to zanzibar", 1)
    runner_up = draft("User: zanzibar trip booked today", 2)
    third = draft("User: a zanzibar postcard arrived", 3)
    await memory.store.add_chunks([leader, runner_up, third], user_id=uid, session_id="s1")
    vector = hashed_embedding(query)
    other = hashed_embedding("quarterly invoices and the staging database")
    along = sum(a * b for a, b in zip(other, vector, strict=True))
    orthogonal = [a - along * b for a, b in zip(other, vector, strict=True)]
    for chunk, v in ((runner_up, vector), (leader, [-x for x in vector]), (third, orthogonal)):
        await execute(
            memory,
            "UPDATE memory_chunks SET embedding = CAST(:v AS vector) WHERE content_hash = :h",
            v=json.dumps(v),
            h=chunk.content_hash,
        )
    fake_ollama.mode = "fail"
    try:
        text_only = await memory.store.search_chunks(query, user_id=uid)
    finally:
        fake_ollama.mode = "ok"
    assert [h.content_hash for h in text_only[:2]] == [leader.content_hash, runner_up.content_hash]
    relative = {h.content_hash: h.score for h in text_only}
    assert text_only[0].score == 1.0
    assert all(s is not None and 0.0 < s <= 1.0 for s in relative.values())
    assert 0.4 < (relative[runner_up.content_hash] or 0.0) < 1.0

    hits = await memory.store.search_chunks(query, user_id=uid)
    by_hash = {h.content_hash: h for h in hits}
    assert [h.content_hash for h in hits[:2]] == [runner_up.content_hash, leader.content_hash]
    for chunk, similarity in ((runner_up, 1.0), (leader, -1.0), (third, 0.0)):
        expected = (relative[chunk.content_hash] or 0.0) + CHUNK_FUSION_VECTOR_WEIGHT * similarity
        assert by_hash[chunk.content_hash].score == pytest.approx(expected, abs=1e-5)
    assert hits[0].via == "vector" and hits[0].distance == pytest.approx(0.0, abs=1e-6)
    assert by_hash[leader.content_hash].via == "text"
    assert by_hash[leader.content_hash].distance is None

    # Without a vector the leader takes the lowest similarity among the others (the third's,
    # 0): not its old -1, not the runner-up's 1.
    await execute(
        memory,
        "UPDATE memory_chunks SET embedding = NULL WHERE content_hash = :h",
        h=leader.content_hash,
    )
    hits = await memory.store.search_chunks(query, user_id=uid)
    by_hash = {h.content_hash: h for h in hits}
    assert by_hash[leader.content_hash].score == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
async def test_a_20k_chunk_users_text_query_reads_only_chunks_holding_its_terms(
    memory: Memory,
) -> None:
    """EXPLAIN ANALYZE of the BM25 statement for a 20,000-chunk user: candidates come from the
    GIN index on memory_chunk_terms, and only the few chunks holding the rare query term are
    read, of either table."""
    uid, other = await new_user(memory), await new_user(memory)
    for owner, count in ((uid, 20_000), (other, 5_000)):
        await add_filler_chunks(
            memory, owner, count, "CASE WHEN g % 5000 = 7 THEN ' glockenspiel' ELSE '' END"
        )
    await index_chunk_text(memory)
    await execute(memory, "ANALYZE memory_chunks, memory_chunk_terms")
    sql = ranked_text_sql(by_user=True, by_session=False)
    params: dict[str, Any] = {
        "uid": uid,
        "query": "glockenspiel",
        "terms": ["glockenspiel"],
        "limit": 8,
        "k1": CHUNK_BM25_K1,
        "b": CHUNK_BM25_B,
    }
    async with memory.engine.connect() as conn:
        plan = (
            await conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql), params)
        ).scalar_one()
        found = (await conn.execute(text(sql), params)).mappings().all()
    nodes = list(
        plan_nodes(plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"])
    )
    chunk_reads = [
        n for n in nodes if n.get("Relation Name") in ("memory_chunks", "memory_chunk_terms")
    ]
    assert any(
        n["Node Type"] == "Bitmap Index Scan"
        and n["Index Name"] == "ix_memory_chunk_terms_user_id_tsv"
        for n in nodes
    )
    assert not any(n["Node Type"] == "Seq Scan" for n in chunk_reads)
    # The user owns 20,000 chunks; four hold the term, and no scan of either table returns
    # more.
    assert max(n["Actual Rows"] for n in chunk_reads) <= 8
    assert len(found) == 4 and {r["user_id"] for r in found} == {uid}


async def test_a_query_of_stop_words_only_still_ranks_by_them(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A query whose every word is a stop word still searches (query_terms keeps them)."""
    uid = await new_user(memory)
    chunk = draft("User: to be or not to be", 1)
    await memory.store.add_chunks([chunk, draft("User: lunch", 2)], user_id=uid, session_id="s")
    fake_ollama.mode = "fail"
    hits = await memory.store.search_chunks("to be", user_id=uid)
    assert [h.content_hash for h in hits] == [chunk.content_hash]


async def test_chunk_max_distance_setting_is_the_vector_cut_off(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """CHUNK_MAX_DISTANCE decides which vector hits enter the fusion: near zero, none do."""
    port = draft("User: which port should the API use?\n\nAssistant: we picked port 8099.", 1)
    for cut_off, vector_hits in ((0.45, 1), (1e-9, 0)):
        settings = make_settings(db_url, fake_ollama, chunk_max_distance=cut_off)
        async with open_memory(settings) as m:
            uid = await new_user(m)
            # A session id of each user's own (ids are unique across users).
            await m.store.add_chunks([port], user_id=uid, session_id=f"s-{cut_off}")
            hits = await m.store.search_chunks("which port should the API use", user_id=uid)
        assert [h.content_hash for h in hits] == [port.content_hash]
        assert sum(h.via == "vector" for h in hits) == vector_hits


async def test_bm25_scores_are_okapi_with_the_configured_k1_and_b(memory: Memory) -> None:
    """Each score is Okapi BM25 recomputed in Python from the stored tsvectors, with k1 1.5 and
    b 0.75 as configured: term frequencies above one and chunks of different lengths make a
    truncated k1 or b (an untyped bind parameter taken as an integer) give other scores."""
    uid, other = await new_user(memory), await new_user(memory)
    contents = [
        "alpha alpha alpha bravo",
        "alpha bravo charlie delta echo foxtrot golf hotel india juliet",
        "bravo bravo charlie",
        "alpha",
        "charlie delta echo",
        "alpha bravo alpha bravo kilo lima mike november oscar",
    ]
    for owner, texts in ((uid, contents), (other, ["alpha"] * 3)):
        await execute(
            memory,
            "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
            " end_seq, started_at, ended_at)"
            " SELECT :u, 's', x.c, md5(x.c || x.n), x.n, x.n, now(), now()"
            " FROM unnest(CAST(:contents AS text[])) WITH ORDINALITY x(c, n)",
            u=owner,
            contents=texts,
        )
    await index_chunk_text(memory)
    async with memory.engine.connect() as conn:
        stored = (
            await conn.execute(
                text(
                    "SELECT t.chunk_id, length(t.tsv) AS dl, u.lexeme,"
                    " coalesce(cardinality(u.positions), 1) AS tf"
                    " FROM memory_chunk_terms t, unnest(t.tsv) u WHERE t.user_id = :u"
                ),
                {"u": uid},
            )
        ).all()
        params: dict[str, Any] = {
            "uid": uid,
            "query": "alpha bravo",
            "terms": ["alpha", "bravo"],
            "limit": 10,
            "k1": CHUNK_BM25_K1,
            "b": CHUNK_BM25_B,
        }
        sql = ranked_text_sql(by_user=True, by_session=False)
        rows = (await conn.execute(text(sql), params)).mappings().all()
    lengths = {chunk: dl for chunk, dl, _, _ in stored}
    tfs = {(chunk, lexeme): tf for chunk, _, lexeme, tf in stored}
    n, avgdl = len(lengths), max(sum(lengths.values()) / len(lengths), 1)
    k1, b = CHUNK_BM25_K1, CHUNK_BM25_B
    expected: dict[Any, float] = {}
    for lexeme in ("alpha", "bravo"):
        holders = [chunk for chunk in lengths if (chunk, lexeme) in tfs]
        idf = math.log(1 + (n - len(holders) + 0.5) / (len(holders) + 0.5))
        for chunk in holders:
            tf = tfs[chunk, lexeme]
            expected[chunk] = expected.get(chunk, 0.0) + idf * tf * (k1 + 1) / (
                tf + k1 * (1 - b + b * lengths[chunk] / avgdl)
            )
    assert (k1, b) == (1.5, 0.75)
    assert {r["id"]: r["score"] for r in rows} == pytest.approx(expected, rel=1e-12)
    assert [r["id"] for r in rows] == sorted(expected, key=lambda c: -expected[c])


@pytest.mark.parametrize(
    ("query", "wanted", "other"),
    [
        # A signed number is one lexeme of the text index: "0.5" alone would not match it.
        ("-0.5", "User: set the similarity threshold to -0.5 for the ranker.", "User: hello"),
        # Digit groups: "4" and "5" alone were dropped as one-letter terms, leaving "GB".
        ("4,5 GB", "User: the old box has 4,5 GB free.", "User: the new box has 8 GB free."),
        ("$1,200", "User: the laptop cost $1,200 in May.", "User: the desk cost $3,200 in June."),
    ],
)
async def test_numbers_are_searched_whole_before_and_after_indexing(
    db_url: str, fake_ollama: FakeOllama, query: str, wanted: str, other: str
) -> None:
    """A number in the query finds the chunk that holds it, first, whether the indexer has
    reached the chunk or not (the newer chunk holding the rest of the query comes after)."""
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        chunks = [draft(wanted, 1), draft(other, 2)]
        await memory.store.add_chunks(chunks, user_id=uid, session_id="s")
        fake_ollama.mode = "fail"  # the text path alone
        queued = await memory.store.search_chunks(query, user_id=uid)
        await memory.store.index_pending_chunks()
        assert await scalar(memory, "SELECT count(*) FROM memory_chunk_terms") == 2
        indexed = await memory.store.search_chunks(query, user_id=uid)
    for hits in (queued, indexed):
        assert hits and hits[0].content == wanted
        assert hits[0].terms_hit == len(query.split())


@pytest.mark.parametrize("ranking", ["bm25", "terms"])
async def test_the_words_of_a_chunks_rendering_find_no_chunk_by_themselves(
    db_url: str, fake_ollama: FakeOllama, ranking: str
) -> None:
    """Every chunk holds "User:", "Assistant:", "Tool result": "user accounts" was a hit of
    every excerpt on "user", and "weather users" made every one a candidate by the stem of
    "users" (the search review). Those words are left out of the raw history's terms — in
    search_chunks and unified search alike —, unless the query holds nothing else."""
    settings = make_settings(db_url, fake_ollama, chunk_text_ranking=ranking)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        pizza = draft("User: I love pizza\n\nAssistant: me too", 1)
        weather = draft("Tool result (weather): sunny in Oslo", 2)
        accounts = draft("User: the admin panel needs accounts for every team", 3)
        await memory.store.add_chunks([pizza, weather, accounts], user_id=uid, session_id="s1")
        fake_ollama.mode = "fail"  # the text path alone
        for query, wanted in (
            ("user accounts", [accounts.content]),
            ("Assistants and accounts", [accounts.content]),
            ("weather users", [weather.content]),
            ("tool calls in Oslo", [weather.content]),
        ):
            hits = await memory.store.search_chunks(query, user_id=uid)
            assert [h.content for h in hits] == wanted, (query, ranking)
            assert [h.terms_hit for h in hits] == [1], query
            unified = await memory.search.search(query, "raw", user_id=uid)
            assert [h.text for h in unified] == wanted, (query, ranking)
        # Nothing else in the query: the words are asked for, as stop words alone are.
        hits = await memory.store.search_chunks("tool result", user_id=uid)
        assert hits and hits[0].content == weather.content
