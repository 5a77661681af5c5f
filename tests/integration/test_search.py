"""Unified search on real PostgreSQL: tier order per scope, scope and k rules, one embedding per
call, freshness marks and their edge cases, the spec's golden text, and tenancy."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    MemoryHit,
    NaviMemoryError,
    PermissionDeniedError,
    StorageError,
    format_hits,
    open_memory,
    request_context,
)
from navi_memory.constants import CHUNK_FUSION_VECTOR_WEIGHT, SKETCH_SCOPE
from navi_memory.schemas import ChunkDraft
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import (
    execute,
    new_session_row,
    new_user,
    scalar,
    statements_on,
)

T0 = datetime(2026, 11, 6, 18, 41, tzinfo=UTC)
SCOPES = ("all", "facts", "raw", "sketches")
KIND_OF_SCOPE = {"facts": "fact", "raw": "raw", "sketches": "sketch"}

SPEC_EXAMPLE = """\
memory_search "server port" (scope=all): 2 hit(s)

1. fact [technical] · session s1 · updated 2026-11-09 12:00
   server_port: 8099
2. raw · session s1 · turn 12–14 · 2026-11-06 18:41
   ⚠ outdated: a newer curated fact overrides this
   keys: server_port, 8098
   User: ...verbatim..."""
"""The spec's example ("Unified search"), byte for byte."""


def draft(
    content: str,
    *,
    start_seq: int = 1,
    end_seq: int | None = None,
    ended_at: datetime = T0,
    breadcrumbs: Sequence[str] = (),
) -> ChunkDraft:
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=start_seq,
        end_seq=start_seq + 1 if end_seq is None else end_seq,
        started_at=ended_at - timedelta(minutes=5),
        ended_at=ended_at,
        breadcrumbs=list(breadcrumbs),
    )


async def set_updated_at(memory: Memory, key: str, when: datetime) -> None:
    await execute(memory, "UPDATE memory_facts SET updated_at = :t WHERE key = :k", t=when, k=key)


async def add_summary(memory: Memory, session_id: str, when: datetime, seq: int = 1000) -> None:
    """A summary message of the session written at ``when`` (what compress writes)."""
    await execute(
        memory,
        "INSERT INTO session_messages (session_id, seq, role, content, kind, created_at) "
        "VALUES (:s, :q, 'system', 'summary', 'summary', :t)",
        s=session_id,
        q=seq,
        t=when,
    )


async def seed_all_stores(memory: Memory, uid: uuid.UUID, sid: str, word: str) -> None:
    """One fact, two raw chunks and two sketches of ``uid`` all about ``word`` deploys."""
    await memory.store.upsert_fact(
        "project", f"{word}_deploy", f"{word} deploy runs nightly", user_id=uid
    )
    await memory.store.add_chunks(
        [
            draft(f"User: the {word} deploy failed twice", start_seq=1),
            draft(
                f"User: {word} deploy fixed by a retry",
                start_seq=3,
                ended_at=T0 + timedelta(hours=1),
            ),
        ],
        user_id=uid,
        session_id=sid,
    )
    await memory.kv.set(SKETCH_SCOPE, "topic", f"{word} deploy notes", session_id=sid, user_id=uid)
    await memory.kv.set(SKETCH_SCOPE, "todo", f"check {word} deploy", user_id=uid)


def kinds(hits: Sequence[MemoryHit]) -> list[str]:
    return [hit.source_type for hit in hits]


# --- tiers, scope, k ----------------------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
async def test_hits_come_in_tiers_facts_then_raw_then_sketches_in_every_scope(
    memory: Memory, scope: str
) -> None:
    """scope=all gives facts, then raw, then sketches; a narrower scope gives only its store."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, sid, "alpha")
    hits = await memory.search.search("alpha deploy", scope, user_id=uid)
    if scope == "all":
        assert kinds(hits) == ["fact", "raw", "raw", "sketch", "sketch"]
    else:
        assert kinds(hits) and set(kinds(hits)) == {KIND_OF_SCOPE[scope]}
    for hit in hits:
        assert hit.user_id == uid and hit.via in ("vector", "text")


async def test_raw_hits_rank_by_relevance_and_sketches_of_the_current_session_first(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Raw: more terms matched first; sketches: current_session_id's entries before others."""
    uid = await new_user(memory)
    s1, s2 = await new_session_row(memory, uid), await new_session_row(memory, uid)
    await memory.store.add_chunks(
        [
            draft("User: the nginx reload", start_seq=1, ended_at=T0 + timedelta(hours=2)),
            draft("User: nginx reload needs sudo here", start_seq=5),
        ],
        user_id=uid,
        session_id=s1,
    )
    await memory.kv.set(SKETCH_SCOPE, "a", "nginx sudo reload", session_id=s1, user_id=uid)
    await memory.kv.set(SKETCH_SCOPE, "b", "nginx", session_id=s2, user_id=uid)
    # Text path: the ordering rules are exact there.
    fake_ollama.mode = "fail"
    hits = await memory.search.search("nginx sudo", "all", user_id=uid, current_session_id=s2)
    raw = [h for h in hits if h.source_type == "raw"]
    assert [h.start_seq for h in raw] == [5, 1]
    assert [h.terms_hit for h in raw] == [2, 1]
    # The fused score that ordered them (no query vector: BM25 relative to the best's).
    assert raw[0].score == 1.0 and 0 < raw[1].score < 1.0
    assert [h.key for h in hits if h.source_type == "sketch"] == ["b", "a"]


async def test_raw_hits_rank_by_bm25_as_search_chunks_does(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Raw excerpts come in search_chunks' order: a chunk holding the query's rare word beats
    newer ones holding only its common word; terms_hit counts query terms held whole (an
    identifier once, not as its parts), and the score is search_chunks' fused score."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    filler = [
        draft(f"User: coffee again, cup {i}", start_seq=i, ended_at=T0 + timedelta(minutes=i))
        for i in range(10, 16)
    ]
    rare = draft("Assistant: set QUARTZ_RETRY_LIMIT before the coffee", start_seq=1)
    parts = draft(
        "User: quartz clocks retry at the limit",
        start_seq=2,
        ended_at=T0 + timedelta(hours=1),
    )
    await memory.store.add_chunks([*filler, rare, parts], user_id=uid, session_id=sid)
    fake_ollama.mode = "fail"
    hits = await memory.search.search("coffee QUARTZ_RETRY_LIMIT", "raw", user_id=uid, k=8)
    by_chunk = await memory.store.search_chunks("coffee QUARTZ_RETRY_LIMIT", user_id=uid)
    assert [h.chunk_id for h in hits] == [h.id for h in by_chunk]
    assert hits[0].text == rare.content and hits[0].terms_hit == 2
    assert [h.score for h in hits] == pytest.approx([h.score for h in by_chunk])
    assert hits[0].score == 1.0
    [partial] = [h for h in hits if h.text == parts.content]
    assert partial.via == "text" and partial.terms_hit == 0


async def test_the_spec_ranking_of_raw_hits_stays_reachable(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """With CHUNK_TEXT_RANKING=terms, raw excerpts rank by distinct terms hit (substrings),
    then recency, as the spec says."""
    async with open_memory(make_settings(db_url, fake_ollama, chunk_text_ranking="terms")) as m:
        uid = await new_user(m)
        common = draft("User: coffee again", start_seq=1)
        rare = draft("User: the zanzibar trip", start_seq=2, ended_at=T0 + timedelta(hours=1))
        newest = draft("User: more coffee", start_seq=3, ended_at=T0 + timedelta(hours=2))
        await m.store.add_chunks([common, rare, newest], user_id=uid, session_id="s")
        fake_ollama.mode = "fail"
        hits = await m.search.search("coffee zanzibar", "raw", user_id=uid)
    assert [h.text for h in hits] == [newest.content, rare.content, common.content]
    assert [h.terms_hit for h in hits] == [1, 1, 1]


async def test_a_raw_hit_of_both_lists_keeps_distance_and_terms_hit(memory: Memory) -> None:
    """With an embedder, an excerpt found by the vector and the BM25 list is one hit, via
    "vector", carrying its distance, the terms it holds and search_chunks' fused score."""
    uid = await new_user(memory)
    port = draft("User: which port should the API use?\n\nAssistant: we picked port 8099.")
    other = draft("User: I am flying to Berlin next week.", start_seq=3)
    await memory.store.add_chunks([port, other], user_id=uid, session_id="s1")
    hits = await memory.search.search("which port should the API use", "raw", user_id=uid)
    assert len({h.chunk_id for h in hits}) == len(hits)
    first = hits[0]
    assert first.text == port.content and first.via == "vector"
    assert first.distance is not None and first.terms_hit >= 2
    [same] = [
        h
        for h in await memory.store.search_chunks("which port should the API use", user_id=uid)
        if h.id == first.chunk_id
    ]
    # Best BM25 (1.0) plus 0.3 times its similarity to the query.
    assert first.score == pytest.approx(same.score)
    assert first.score == pytest.approx(1.0 + CHUNK_FUSION_VECTOR_WEIGHT * (1 - first.distance))


async def test_an_unknown_scope_is_all_and_shows_as_all(memory: Memory) -> None:
    """scope='sessions' searches every store, and format_hits prints scope=all."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, sid, "alpha")
    unknown = await memory.search.search("alpha deploy", "sessions", user_id=uid)
    everything = await memory.search.search("alpha deploy", "all", user_id=uid)
    assert unknown == everything
    assert memory.search.format_hits("alpha deploy", "sessions", unknown).startswith(
        'memory_search "alpha deploy" (scope=all): 5 hit(s)'
    )


async def test_k_is_per_store_and_clamped_to_1_to_20(memory: Memory) -> None:
    """k outside 1–20 is clamped, never an error; each store gives up to k hits (one user's
    data, every k asked of it: the data took 1.5 s to build per k)."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    for i in range(25):
        await memory.store.upsert_fact("ops", f"host_{i}", f"zebra host {i}", user_id=uid)
        await memory.kv.set(
            SKETCH_SCOPE, f"note_{i}", f"zebra note {i}", session_id=sid, user_id=uid
        )
    await memory.store.add_chunks(
        [draft(f"User: zebra chunk {i}", start_seq=i * 2) for i in range(25)],
        user_id=uid,
        session_id=sid,
    )
    for k, per_store in [(0, 1), (-7, 1), (1, 1), (3, 3), (21, 20), (10**9, 20)]:
        hits = await memory.search.search("zebra", k=k, user_id=uid)
        assert kinds(hits) == ["fact"] * per_store + ["raw"] * per_store + ["sketch"] * per_store, k


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"query": 5}, InvalidTypeError),
        ({"query": "a\x00b"}, InvalidInputError),
        ({"query": "x" * 100_001}, InvalidInputError),
        ({"query": "x", "scope": None}, InvalidTypeError),
        ({"query": "x", "k": "5"}, InvalidTypeError),
        ({"query": "x", "k": True}, InvalidTypeError),
        ({"query": "x", "session_id": ""}, InvalidInputError),
        ({"query": "x", "current_session_id": 7}, InvalidTypeError),
        ({"query": "x", "summary_at": "yesterday", "current_session_id": "s"}, InvalidTypeError),
        (
            {"query": "x", "summary_at": datetime(2026, 1, 1), "current_session_id": "s"},
            InvalidInputError,
        ),
        ({"query": "x", "summary_at": T0}, InvalidInputError),
        ({"query": "x", "user_id": "not-a-uuid"}, InvalidTypeError),
    ],
)
async def test_bad_arguments_are_navi_memory_errors(
    memory: Memory, arguments: dict[str, object], error: type[Exception]
) -> None:
    """The Python API refuses wrong types and bad text before any SQL or model call."""
    uid = await new_user(memory)
    with request_context(user_id=uid), pytest.raises(error):
        await memory.search.search(**arguments)  # type: ignore[arg-type]


# --- embedding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "requests"), [("all", 1), ("facts", 1), ("raw", 1), ("sketches", 0)]
)
async def test_the_query_is_embedded_once_per_call_whatever_the_stores(
    memory: Memory, fake_ollama: FakeOllama, scope: str, requests: int
) -> None:
    """One /api/embed request serves facts and raw; sketches are not searched by vector."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, sid, "alpha")
    fake_ollama.clear()
    hits = await memory.search.search("alpha deploy", scope, user_id=uid)
    assert hits
    embeds = fake_ollama.requests_to("/api/embed")
    assert len(embeds) == requests
    if requests:
        assert embeds[0].json is not None and "alpha deploy" in str(embeds[0].json["input"])


async def test_an_empty_or_stop_word_query_lists_the_newest_items_of_each_store_unembedded(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """'' and 'the of it' return the most recent fact, chunk and sketch first, via 'recent'."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, sid, "alpha")
    await memory.store.upsert_fact("project", "newest", "zzz", user_id=uid)
    fake_ollama.clear()
    for query in ("", "the of it", "   "):
        hits = await memory.search.search(query, k=1, user_id=uid)
        assert kinds(hits) == ["fact", "raw", "sketch"]
        assert {hit.via for hit in hits} == {"recent"} and {hit.score for hit in hits} == {0.0}
        assert hits[0].key == "newest"
        assert hits[1].start_seq == 3  # the chunk that ended last
    assert fake_ollama.requests_to("/api/embed") == []


BLANK_VALUES = ["", "   ", "\u200b", " \u200b\u00a0\ufeff\u2060\n", "\u00ad\u200d"]
"""Values a note shows nothing of: empty, whitespace, zero-width and other invisible format
characters (``is_blank``)."""


async def test_a_cleared_or_blank_sketch_is_never_a_hit(memory: Memory) -> None:
    """A scratchpad entry whose value is empty or blank (the tool's "cleared") is no hit, for a
    query matching its key or for an empty query listing the newest; a value with a visible
    character among invisible ones is a hit."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    for number, value in enumerate(BLANK_VALUES):
        await memory.kv.set(SKETCH_SCOPE, f"zebra{number}", value, session_id=sid, user_id=uid)
    for query in ("zebra", ""):
        assert await memory.search.search(query, "sketches", user_id=uid) == []
    await memory.kv.set(SKETCH_SCOPE, "zebra_shown", "\u200bx\u200b", session_id=sid, user_id=uid)
    for query in ("zebra", ""):
        hits = await memory.search.search(query, "sketches", user_id=uid)
        assert [hit.key for hit in hits] == ["zebra_shown"]


async def test_with_the_embedder_down_search_answers_by_text(
    memory: Memory, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing embedding model: every store still answers, by text, and it is logged."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, sid, "alpha")
    fake_ollama.mode = "fail"
    with caplog.at_level(logging.WARNING):
        hits = await memory.search.search("alpha deploy", user_id=uid)
    assert kinds(hits) == ["fact", "raw", "raw", "sketch", "sketch"]
    assert {hit.via for hit in hits} == {"text"}
    assert any("memory.embedding_failed" in r.getMessage() for r in caplog.records)


async def test_vector_hits_carry_distance_and_similarity_as_score(
    memory: Memory,
) -> None:
    """A raw vector hit's score is the fused one (its only hit: best BM25, 1.0, plus 0.3 times
    1 - distance); recall reads distance and terms_hit from hits."""
    uid = await new_user(memory)
    await memory.store.add_chunks(
        [draft("User: the alpha deploy failed twice")], user_id=uid, session_id="sx"
    )
    [hit] = await memory.search.search("the alpha deploy failed twice", "raw", user_id=uid)
    assert hit.via == "vector" and hit.distance is not None
    assert hit.score == pytest.approx(1.0 + CHUNK_FUSION_VECTOR_WEIGHT * (1 - hit.distance))
    assert hit.chunk_id is not None


# --- session filter ----------------------------------------------------------------------------


async def test_session_id_narrows_raw_and_sketches_to_one_session(memory: Memory) -> None:
    """Facts stay user-wide; raw excerpts and sketches come from the named session only."""
    uid = await new_user(memory)
    s1, s2 = await new_session_row(memory, uid), await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, s1, "alpha")
    await memory.store.add_chunks([draft("User: alpha deploy in s2")], user_id=uid, session_id=s2)
    await memory.kv.set(SKETCH_SCOPE, "s2note", "alpha deploy s2", session_id=s2, user_id=uid)
    hits = await memory.search.search("alpha deploy", user_id=uid, session_id=s2)
    assert kinds(hits) == ["fact", "raw", "sketch"]
    assert [h.session_id for h in hits[1:]] == [s2, s2]


# --- freshness ---------------------------------------------------------------------------------


async def fact_and_chunk(
    memory: Memory,
    uid: uuid.UUID,
    *,
    key: str = "server_port",
    value: str = "8099",
    content: str = "User: what is the port? Assistant: 8098",
    breadcrumbs: Sequence[str] = ("server_port", "8098"),
    fact_at: datetime = T0 + timedelta(days=3),
    sid: str = "s1",
) -> None:
    await memory.store.upsert_fact("technical", key, value, user_id=uid)
    await set_updated_at(memory, key, fact_at)
    await memory.store.add_chunks(
        [draft(content, start_seq=12, end_seq=14, breadcrumbs=breadcrumbs)],
        user_id=uid,
        session_id=sid,
    )


def raw_of(hits: Sequence[MemoryHit]) -> MemoryHit:
    [raw] = [hit for hit in hits if hit.source_type == "raw"]
    return raw


@pytest.mark.parametrize("scope", ["all", "raw"])
async def test_a_newer_fact_sharing_two_content_words_marks_the_excerpt_superseded(
    memory: Memory, scope: str
) -> None:
    """server_port=8099, newer than the chunk, shares server+port: superseded_by=server_port,
    also when only raw hits are asked for (the facts are read for the marks)."""
    uid = await new_user(memory)
    await fact_and_chunk(memory, uid)
    hits = await memory.search.search("server port", scope, user_id=uid)
    assert raw_of(hits).superseded_by == "server_port"
    assert kinds(hits) == (["fact", "raw"] if scope == "all" else ["raw"])


@pytest.mark.parametrize(
    ("key", "value", "content", "breadcrumbs"),
    [
        # one shared content word: "port"
        ("ssh_port", "22", "User: which port is free?", ()),
        # shared only through stop words and the User:/Assistant: prefixes
        ("user_assistant", "what is the", "User: what is the port? Assistant: the port", ()),
    ],
)
async def test_one_shared_word_or_only_stop_words_do_not_supersede(
    memory: Memory, key: str, value: str, content: str, breadcrumbs: tuple[str, ...]
) -> None:
    """Fewer than two shared content words leave the excerpt unmarked."""
    uid = await new_user(memory)
    await fact_and_chunk(
        memory, uid, key=key, value=value, content=content, breadcrumbs=breadcrumbs
    )
    hits = await memory.search.search(f"{key} port", "raw", user_id=uid)
    assert raw_of(hits).superseded_by is None


async def test_kept_excerpt_words_still_follow_the_facts_and_recall_shares_them(
    memory: Memory,
) -> None:
    """An excerpt's words are kept once it has been marked twice (text.freshness.ExcerptWords);
    the marks still follow the facts as they change (the words are the excerpt's, not the
    marks), and recall's searches use the same kept words."""
    known = memory.search._service.excerpt_words
    uid = await new_user(memory)
    await fact_and_chunk(memory, uid, key="ssh_port", value="22")  # one shared word: port
    for _ in range(2):  # marked twice: its words kept
        hits = await memory.search.search("ssh port", "raw", user_id=uid)
        assert raw_of(hits).superseded_by is None
    misses = known.misses
    assert misses >= 1
    await memory.store.upsert_fact("technical", "server_port", "8099", user_id=uid)
    await set_updated_at(memory, "server_port", T0 + timedelta(days=3))
    hits = await memory.search.search("server port", "raw", user_id=uid)
    assert raw_of(hits).superseded_by == "server_port"
    assert (known.misses, known.hits >= 1) == (misses, True)
    assert memory.context._search.excerpt_words is known


async def test_an_older_fact_does_not_supersede(memory: Memory) -> None:
    """A fact last updated before the chunk ended marks nothing."""
    uid = await new_user(memory)
    await fact_and_chunk(memory, uid, fact_at=T0 - timedelta(days=1))
    assert raw_of(await memory.search.search("server port", user_id=uid)).superseded_by is None


async def test_a_fact_of_another_user_never_marks_anything(memory: Memory) -> None:
    """Bob's newer server_port fact leaves Alice's excerpt unmarked, in her search and in a
    global read_all search, where Bob's own excerpt is marked by it."""
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.add_chunks(
        [draft("User: port is 8098", breadcrumbs=["server_port", "8098"])],
        user_id=alice,
        session_id="sa",
    )
    await fact_and_chunk(memory, bob, content="User: bob port 8098", sid="sb")
    mine = await memory.search.search("server port", user_id=alice)
    assert kinds(mine) == ["raw"] and mine[0].superseded_by is None
    with request_context(permissions=[PERMISSION_READ_ALL]):
        every = await memory.search.search("server port")
    marks = {hit.user_id: hit.superseded_by for hit in every if hit.source_type == "raw"}
    assert marks == {alice: None, bob: "server_port"}


async def test_an_excerpt_before_its_sessions_last_summary_is_before_summary(
    memory: Memory,
) -> None:
    """The boundary of each hit's own session counts: looked up for other sessions in one
    query, ``summary_at`` for the current one; no summary, or one before it, no mark."""
    uid = await new_user(memory)
    s1, s2, s3 = [await new_session_row(memory, uid) for _ in range(3)]
    for sid in (s1, s2, s3):
        await memory.store.add_chunks([draft(f"User: zebra in {sid}")], user_id=uid, session_id=sid)
    await add_summary(memory, s1, T0 + timedelta(minutes=1))
    await add_summary(memory, s2, T0 - timedelta(minutes=1))
    hits = await memory.search.search("zebra", "raw", user_id=uid)
    assert {h.session_id: h.before_summary for h in hits} == {s1: True, s2: False, s3: False}
    # summary_at stands for the current session's boundary, whatever its rows say.
    hits = await memory.search.search(
        "zebra", "raw", user_id=uid, current_session_id=s1, summary_at=T0 - timedelta(hours=1)
    )
    assert {h.session_id: h.before_summary for h in hits} == {s1: False, s2: False, s3: False}
    hits = await memory.search.search(
        "zebra", "raw", user_id=uid, current_session_id=s3, summary_at=T0 + timedelta(hours=1)
    )
    assert {h.session_id: h.before_summary for h in hits} == {s1: True, s2: False, s3: True}


async def test_a_summary_of_another_users_session_id_is_no_boundary(memory: Memory) -> None:
    """Alice's chunks filed under a session id whose row is Bob's get no boundary from Bob's
    summary (session ids name one owner; a chunk of another user never borrows it)."""
    alice, bob = await new_user(memory), await new_user(memory)
    sid = await new_session_row(memory, bob)
    await add_summary(memory, sid, T0 + timedelta(days=1))
    await execute(
        memory,
        "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content, content_hash, "
        "start_seq, end_seq, started_at, ended_at, breadcrumbs) "
        "VALUES (:u, :s, 'User: zebra', 'h', 1, 2, :t, :t, '{}') RETURNING id, user_id) "
        "INSERT INTO memory_chunk_text_queue (chunk_id, user_id) SELECT id, user_id FROM c",
        u=alice,
        s=sid,
        t=T0,
    )
    [hit] = await memory.search.search("zebra", "raw", user_id=alice)
    assert hit.before_summary is False


async def test_in_a_global_search_another_users_chunk_never_borrows_a_boundary(
    memory: Memory,
) -> None:
    """A read_all search across users: Bob's summary marks Bob's excerpt of his session, never
    Alice's excerpt filed under the same session id (the boundary is each excerpt's own, not
    one per session id shared by every user's rows)."""
    alice, bob = await new_user(memory), await new_user(memory)
    sid = await new_session_row(memory, bob)
    await add_summary(memory, sid, T0 + timedelta(days=1))
    await memory.store.add_chunks([draft("User: zebra of bob")], user_id=bob, session_id=sid)
    await execute(
        memory,
        "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content, content_hash, "
        "start_seq, end_seq, started_at, ended_at, breadcrumbs) "
        "VALUES (:u, :s, 'User: zebra of alice', 'h', 1, 2, :t, :t, '{}') "
        "RETURNING id, user_id) "
        "INSERT INTO memory_chunk_text_queue (chunk_id, user_id) SELECT id, user_id FROM c",
        u=alice,
        s=sid,
        t=T0,
    )
    with request_context(permissions=frozenset({PERMISSION_READ_ALL})):
        hits = await memory.search.search("zebra", "raw")
    assert {h.user_id: h.before_summary for h in hits} == {bob: True, alice: False}


async def test_the_golden_text_from_stored_data(memory: Memory) -> None:
    """The spec's example, byte for byte, from a fact and a chunk stored for real."""
    uid = await new_user(memory)
    with request_context(user_id=uid, session_id="s1"):
        await memory.store.upsert_fact("technical", "server_port", "8099")
        await memory.store.add_chunks(
            [
                draft(
                    "User: ...verbatim...",
                    start_seq=12,
                    end_seq=14,
                    breadcrumbs=["server_port", "8098"],
                )
            ]
        )
    await set_updated_at(memory, "server_port", datetime(2026, 11, 9, 12, 0, tzinfo=UTC))
    with request_context(user_id=uid, session_id="s1"):
        hits = await memory.search.search("server port", current_session_id="s1")
    assert format_hits("server port", "all", hits) == SPEC_EXAMPLE


# --- facts remember their session ---------------------------------------------------------------


async def test_a_fact_records_the_session_it_was_last_written_from(memory: Memory) -> None:
    """The request context's session (or session_id=) is stored; a new value moves it, the
    same value again does not; a write outside any session leaves it unknown."""
    uid = await new_user(memory)

    async def session_of(key: str) -> object:
        return await scalar(memory, "SELECT session_id FROM memory_facts WHERE key = :k", k=key)

    with request_context(user_id=uid, session_id="s1"):
        await memory.store.upsert_fact("p", "editor", "vim")
        await memory.store.upsert_fact("p", "shell", "zsh", session_id="s9")
    assert (await session_of("editor"), await session_of("shell")) == ("s1", "s9")
    with request_context(user_id=uid, session_id="s2"):
        await memory.store.upsert_fact("p", "editor", "vim")  # same value: verified only
    assert await session_of("editor") == "s1"
    with request_context(user_id=uid, session_id="s2"):
        await memory.store.upsert_fact("p", "editor", "neovim")
    assert await session_of("editor") == "s2"
    await memory.store.upsert_fact("p", "editor", "helix", user_id=uid)
    assert await session_of("editor") is None
    [hit] = await memory.search.search("editor", "facts", user_id=uid)
    assert hit.session_id is None and hit.text == "helix"
    with request_context(user_id=uid), pytest.raises(InvalidInputError):
        await memory.store.upsert_fact("p", "x", "y", session_id="")


# --- tenancy -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
async def test_no_hit_of_another_user_in_any_scope(memory: Memory, scope: str) -> None:
    """Alice's searches (also naming Bob's session, or as current session) never show Bob's
    rows; naming Bob or reading globally without read_all is refused."""
    alice, bob = await new_user(memory), await new_user(memory)
    sa, sb = await new_session_row(memory, alice), await new_session_row(memory, bob)
    await seed_all_stores(memory, alice, sa, "alpha")
    await seed_all_stores(memory, bob, sb, "alpha")
    with request_context(user_id=alice, session_id=sa):
        for kwargs in ({}, {"current_session_id": sb}, {"session_id": sb}):
            hits = await memory.search.search("alpha deploy", scope, **kwargs)  # type: ignore[arg-type]
            assert all(hit.user_id == alice for hit in hits)
            assert all(hit.session_id in (sa, None) for hit in hits)
        narrowed = await memory.search.search("alpha deploy", scope, session_id=sb)
        assert set(kinds(narrowed)) <= {"fact"}
        with pytest.raises(PermissionDeniedError):
            await memory.search.search("alpha deploy", scope, user_id=bob)
    with pytest.raises(PermissionDeniedError):
        await memory.search.search("alpha deploy", scope)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        every = await memory.search.search("alpha deploy", scope, k=20)
    assert {hit.user_id for hit in every} == {alice, bob}


# --- failures and concurrency -------------------------------------------------------------------


async def test_a_store_that_fails_is_a_storage_error(quiet_memory: Memory) -> None:
    """A failing store query (its table gone) fails the search with StorageError."""
    memory = quiet_memory
    uid = await new_user(memory)
    await execute(memory, "ALTER TABLE kv_store RENAME TO kv_store_gone")
    with pytest.raises(StorageError):
        await memory.search.search("alpha", user_id=uid)
    # Every lane ran to its end and gave its connection back: none is left checked out.
    assert memory.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert memory.cached_plans_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    # The stores that do not need the missing table still answer.
    assert await memory.search.search("alpha", "facts", user_id=uid) == []


@asynccontextmanager
async def search_behind_locked_chunks(
    memory: Memory, query: str, uid: uuid.UUID
) -> AsyncIterator[tuple[asyncio.Task[list[MemoryHit]], list[int]]]:
    """``memory.search(query)`` started while memory_chunks is locked, so that its raw history
    read waits until the block ends (the lock is released there). Yields the search's task and
    a one-item list counting the statements the cached-plans engine (facts, sketches) ran."""
    done = [0]

    def after(_statement: str) -> None:
        done[0] += 1

    async with (
        statements_on(memory.cached_plans_engine, after),
        memory.engine.connect() as blocker,
    ):
        await blocker.execute(text("LOCK TABLE memory_chunks IN ACCESS EXCLUSIVE MODE"))
        try:
            yield asyncio.create_task(memory.search.search(query, user_id=uid)), done
        finally:
            await blocker.rollback()


async def eventually(condition: Callable[[], bool]) -> None:
    """Wait up to 5 s for ``condition`` (the caller asserts what it needs afterwards)."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)


async def test_a_lane_gives_its_connection_back_as_soon_as_its_own_read_ends(
    quiet_memory: Memory,
) -> None:
    """The facts and sketches lane returns its connection while the raw history's read still
    waits (here for a lock on memory_chunks), and the search answers in full once it ends.
    The raw history reads on custom plans for a user not yet known small, on cached plans
    (the same pool as the facts') once the first search has shown them small."""
    memory = quiet_memory
    pool = memory.cached_plans_engine.pool
    hints = memory.search._service.prune_hints
    for word, known_small in (("w0x", True), ("w2x", False)):
        uid = await new_user(memory)
        sid = await new_session_row(memory, uid)
        await seed_all_stores(memory, uid, sid, word)
        expected = await memory.search.search(f"{word} deploy", user_id=uid)
        assert kinds(expected) == ["fact", "raw", "raw", "sketch", "sketch"]
        if not known_small:
            hints.learn(uid, [{"scope_chunks": hints.prune_from}])  # forgotten as small
        assert hints.prune(uid) is not known_small
        # The raw history's connection, still waiting, when it is the cached pool's.
        waiting = 1 if known_small else 0
        async with search_behind_locked_chunks(memory, f"{word} deploy", uid) as (
            search,
            cached_done,
        ):
            await eventually(lambda: cached_done[0] >= 2 and pool.checkedout() == waiting)  # type: ignore[attr-defined]  # noqa: B023
            # The facts and the sketches were read, and their connection is back in its
            # pool, while the raw history's read still waits.
            assert cached_done[0] == 2
            assert pool.checkedout() == waiting  # type: ignore[attr-defined]
            assert not search.done()
        assert await search == expected


async def test_a_search_cancelled_mid_read_gives_every_connection_back(
    quiet_memory: Memory,
) -> None:
    """Cancelling a search whose facts lane has finished and whose raw history read is still
    pending (memory_chunks locked) ends it with CancelledError and leaves no connection
    checked out of either pool."""
    memory = quiet_memory
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await seed_all_stores(memory, uid, sid, "w1x")
    async with search_behind_locked_chunks(memory, "w1x deploy", uid) as (search, cached_done):
        await eventually(lambda: cached_done[0] >= 2)
        await asyncio.sleep(0.2)
        assert cached_done[0] == 2 and not search.done()
        search.cancel()
        with pytest.raises(asyncio.CancelledError):
            await search
    await eventually(lambda: memory.engine.pool.checkedout() == 0)  # type: ignore[attr-defined]
    assert memory.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert memory.cached_plans_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    # The pools still serve a search.
    assert kinds(await memory.search.search("w1x deploy", user_id=uid))[0] == "fact"


async def test_concurrent_searches_each_get_their_own_answers(busy_memory: Memory) -> None:
    """Twenty searches at once (three connections each) answer as they would one by one."""
    memory = busy_memory
    users = [await new_user(memory) for _ in range(4)]
    for i, uid in enumerate(users):
        sid = await new_session_row(memory, uid)
        await seed_all_stores(memory, uid, sid, f"w{i}x")
    alone = [await memory.search.search(f"w{i}x deploy", user_id=u) for i, u in enumerate(users)]
    together = await asyncio.gather(
        *(memory.search.search(f"w{i % 4}x deploy", user_id=users[i % 4]) for i in range(20))
    )
    assert all(together[i] == alone[i % 4] for i in range(20))


# --- generated inputs ----------------------------------------------------------------------------

VOCABULARY = ["alpha", "deploy", "zebra", "server_port", "8098", "the", "%", "_", "\\", "'; --"]


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(st.sampled_from(VOCABULARY), max_size=4),
    scope=st.sampled_from([*SCOPES, "other", " RAW "]),
    k=st.integers(-5, 30),
    session=st.sampled_from(["own", "other", None]),
    current=st.sampled_from(["own", "other", None]),
)
async def test_generated_searches_never_show_another_users_rows(
    memory: Memory,
    words: list[str],
    scope: str,
    k: int,
    session: str | None,
    current: str | None,
) -> None:
    """Any query, scope, k and session choice, as Alice: every hit is hers, at most k a store."""
    alice, _bob, sa, sb = await two_users(memory)
    sessions = {"own": sa, "other": sb, None: None}
    with request_context(user_id=alice):
        hits = await memory.search.search(
            " ".join(words),
            scope,
            k,
            session_id=sessions[session],
            current_session_id=sessions[current],
        )
    assert all(hit.user_id == alice for hit in hits)
    for kind in ("fact", "raw", "sketch"):
        assert kinds(hits).count(kind) <= max(1, min(20, k))
    if session == "other":
        assert set(kinds(hits)) <= {"fact"}


async def two_users(memory: Memory) -> tuple[uuid.UUID, uuid.UUID, str, str]:
    """Alice and Bob with the same words in every store, made once per database (hypothesis
    runs many examples on one test's database)."""
    if await scalar(memory, "SELECT id FROM navi_users WHERE name = 'gen-alice'") is None:
        for name, sid in (("gen-alice", "gen-sa"), ("gen-bob", "gen-sb")):
            uid = await new_user(memory, name)
            await new_session_row(memory, uid, sid)
            await seed_all_stores(memory, uid, sid, "alpha")
            await fact_and_chunk(memory, uid, sid=sid)
    alice = await scalar(memory, "SELECT id FROM navi_users WHERE name = 'gen-alice'")
    bob = await scalar(memory, "SELECT id FROM navi_users WHERE name = 'gen-bob'")
    assert isinstance(alice, uuid.UUID) and isinstance(bob, uuid.UUID)
    return alice, bob, "gen-sa", "gen-sb"


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.one_of(st.text(max_size=60), st.none(), st.integers(), st.binary(max_size=5)),
    scope=st.one_of(st.text(max_size=10), st.none(), st.integers()),
    k=st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=3), st.none()),
)
async def test_generated_bad_input_is_a_result_or_a_navi_memory_error(
    memory: Memory, query: object, scope: object, k: object
) -> None:
    """NUL bytes, lone surrogates, wrong types, huge numbers: hits or a navi_memory error."""
    alice, _, _, _ = await two_users(memory)
    with request_context(user_id=alice):
        try:
            hits = await memory.search.search(query, scope, k)  # type: ignore[arg-type]
        except NaviMemoryError:
            return
    assert all(hit.user_id == alice for hit in hits)


async def test_a_hung_embedding_model_is_skipped_for_the_pause(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """Ollama (through the real client) stalls past EMBEDDING_TIMEOUT_SECONDS: the first
    search waits for it and falls back to text; for EMBEDDING_PAUSE_SECONDS after that,
    searches fall back and writes land without a vector without sending Ollama a request."""
    settings = make_settings(
        db_url, fake_ollama, embedding_timeout_seconds=0.5, embedding_pause_seconds=60
    )
    async with open_memory(settings) as m:
        uid = await new_user(m)
        await m.store.upsert_fact("ops", "web_server", "nginx reloads after deploy", user_id=uid)
        fake_ollama.stall_seconds = 5.0
        fake_ollama.mode = "stall"
        first = await m.search.search("nginx reloads", "facts", user_id=uid)
        asked = len(fake_ollama.requests_to("/api/embed"))
        again = await m.search.search("nginx reloads", "facts", user_id=uid)
        fact = await m.store.upsert_fact("ops", "proxy", "haproxy in front", user_id=uid)
        assert len(fake_ollama.requests_to("/api/embed")) == asked
    assert [(h.key, h.via) for h in first] == [("web_server", "text")]
    assert [(h.key, h.via) for h in again] == [("web_server", "text")]
    assert not fact.has_embedding


UNSPACED = (
    ("端口", "服务器端口是8099"),  # Chinese
    ("ポート", "サーバーのポートは8099です"),  # Japanese
    ("서버", "서버의 포트는 8099입니다"),  # Korean: the particle clings to the noun
    ("พอร์ต", "เซิร์ฟเวอร์ใช้พอร์ต8099"),  # Thai
)


async def test_a_question_in_chinese_finds_the_rows_holding_most_of_its_words(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A whole question typed in Chinese was one term, a substring no row holds, so only a
    vector found anything: its runs of Han, kana or Hangul letters are cut into overlapping
    pairs, and the rows holding most of them rank first (the embedder down here: text only)."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    answer = "我们把服务器的端口改成了8099"
    await memory.store.add_chunks(
        [draft("User: 今天的服务很好"), draft(f"User: {answer}", start_seq=3)],
        user_id=uid,
        session_id=sid,
    )
    await memory.store.upsert_fact("ops", "port", answer, user_id=uid)
    await memory.store.upsert_fact("ops", "weather", "今天天气很好", user_id=uid)
    await memory.store.wait_chunk_indexing()
    fake_ollama.mode = "fail"
    question = "服务器端口改成多少"
    chunks = await memory.store.search_chunks(question, user_id=uid)
    assert [c.content for c in chunks] == [f"User: {answer}", "User: 今天的服务很好"]
    facts = await memory.store.search_facts(question, user_id=uid)
    assert [f.key for f in facts] == ["port"]
    hits = await memory.search.search(question, user_id=uid)
    assert [(h.source_type, h.text) for h in hits][:2] == [
        ("fact", answer),
        ("raw", f"User: {answer}"),
    ]


@pytest.mark.parametrize("embedder", ["up", "down"])
async def test_a_word_inside_unspaced_text_is_found_in_every_store(
    memory: Memory, fake_ollama: FakeOllama, embedder: str
) -> None:
    """Chinese, Japanese, Thai write no spaces between words: the text index holds
    "服务器端口是" as one lexeme, so "端口" found the fact and the sketch (substring search)
    but never the raw excerpt, in unified search and search_chunks alike. A query with such a
    term reads the raw history by substring (the terms ranking), with the embedder up or
    down; a query of spaced words keeps the BM25 ranking."""
    for word, stored in UNSPACED:
        fake_ollama.mode = "ok"
        uid = await new_user(memory)
        sid = await new_session_row(memory, uid)
        await memory.store.upsert_fact("ops", "port", stored, user_id=uid)
        await memory.store.add_chunks([draft(f"User: {stored}")], user_id=uid, session_id=sid)
        await memory.store.add_chunks(
            [draft("User: the deploy port is 8099", start_seq=3)], user_id=uid, session_id=sid
        )
        await memory.kv.set(SKETCH_SCOPE, "port", stored, session_id=sid, user_id=uid)
        await memory.store.wait_chunk_indexing()
        if embedder == "down":
            fake_ollama.mode = "fail"
        hits = await memory.search.search(word, user_id=uid)
        assert [(h.source_type, h.text) for h in hits] == [
            ("fact", stored),
            ("raw", f"User: {stored}"),
            ("sketch", stored),
        ], word
        chunks = await memory.store.search_chunks(word, user_id=uid)
        assert [c.content for c in chunks] == [f"User: {stored}"], word
        assert chunks[0].score is None  # the terms ranking: distinct terms hit
        spaced = await memory.store.search_chunks("deploy port", user_id=uid)
        assert spaced[0].content == "User: the deploy port is 8099"
        assert spaced[0].score is not None  # BM25 fused


def ranged_draft(content: str, start: int, end: int) -> ChunkDraft:
    at = datetime(2026, 11, 6, 18, 41, tzinfo=UTC) + timedelta(minutes=end)
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=start,
        end_seq=end,
        started_at=at,
        ended_at=at,
    )


@pytest.mark.parametrize("model", ["up", "down"])
async def test_an_excerpt_whose_messages_a_better_one_shows_is_left_out(
    memory: Memory, fake_ollama: FakeOllama, model: str
) -> None:
    """A host's own chunk of messages 1–2 and compression's chunks of 1 and of 2: the
    messages were shown twice, in memory.search and the memory_search tool alike. An excerpt
    holding no message the better-ranked ones of its session do not is left out; another text
    with the very range (a host's pieces of one long message) and another session's excerpt
    of the same seqs are not."""
    uid = await new_user(memory)
    both = ranged_draft("User: deploy nginx\n\nAssistant: it listens on port 8080", 1, 2)
    first = ranged_draft("User: deploy nginx", 1, 1)
    second = ranged_draft("Assistant: it listens on port 8080", 2, 2)
    piece = ranged_draft("User: (the rest) nginx port notes, part two", 1, 2)
    store = memory.store
    await store.add_chunks([both, first, second, piece], user_id=uid, session_id="s1")
    other_session = ranged_draft("User: deploy nginx again", 1, 1)
    await store.add_chunks([other_session], user_id=uid, session_id="s2")
    fake_ollama.mode = "ok" if model == "up" else "fail"
    hits = await memory.search.search("nginx port", "raw", k=10, user_id=uid)
    texts = [h.text for h in hits]
    assert both.content in texts and piece.content in texts, texts  # both terms: first
    assert first.content not in texts and second.content not in texts, texts
    assert other_session.content in texts, texts
    assert len(texts) == 3
