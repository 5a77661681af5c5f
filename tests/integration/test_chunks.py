"""Raw chunks on real PostgreSQL: add_chunks, search_chunks (both paths), latest_summary_at."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import string
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    NotFoundError,
    PermissionDeniedError,
    open_memory,
    request_context,
)
from navi_memory.constants import MAX_BREADCRUMBS
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.schemas import ChunkDraft
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import new_session_row, new_user, scalar

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def draft(content: str, seq: int = 1, breadcrumbs: list[str] | None = None) -> ChunkDraft:
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=seq,
        end_seq=seq + 1,
        started_at=T0 + timedelta(minutes=seq),
        ended_at=T0 + timedelta(minutes=seq + 1),
        breadcrumbs=breadcrumbs or [],
    )


PORT = draft("User: which port should the API use?\n\nAssistant: we picked port 8099.", 1, ["8099"])
PATH = draft(
    "User: the config lives in /etc/navi/app.toml\n\nAssistant: noted.", 3, ["/etc/navi/app.toml"]
)
BERLIN = draft("User: I am flying to Berlin next week for the conference.", 5)


async def test_add_chunks_writes_new_chunks_with_vectors_and_skips_repeats(memory: Memory) -> None:
    uid = await new_user(memory)
    assert await memory.store.add_chunks([PORT, PATH], user_id=uid, session_id="s1") == 2
    # The same demoted range indexed again writes nothing.
    assert await memory.store.add_chunks([PORT, PATH, PORT], user_id=uid, session_id="s1") == 0
    assert await memory.store.add_chunks([PORT, BERLIN], user_id=uid, session_id="s1") == 1
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL") == 0
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 3
    crumbs = await scalar(
        memory, "SELECT breadcrumbs FROM memory_chunks WHERE content_hash = :h", h=PATH.content_hash
    )
    assert crumbs == ["/etc/navi/app.toml"]


async def test_add_chunks_resolves_user_and_session_from_the_request_context(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    with request_context(user_id=uid, session_id="ctx-session"):
        assert await memory.store.add_chunks([PORT]) == 1
    assert await scalar(memory, "SELECT session_id FROM memory_chunks") == "ctx-session"
    with pytest.raises(PermissionDeniedError):
        await memory.store.add_chunks([PATH], session_id="s1")
    with request_context(user_id=uid), pytest.raises(InvalidInputError, match="session"):
        await memory.store.add_chunks([PATH])


async def test_add_chunks_refuses_another_users_session_and_bad_chunks(memory: Memory) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    sid = await new_session_row(memory, alice)
    with pytest.raises(NotFoundError):
        await memory.store.add_chunks([PORT], user_id=bob, session_id=sid)
    forged = PORT.model_copy(update={"content_hash": "0" * 64})
    with pytest.raises(InvalidInputError, match="sha256"):
        await memory.store.add_chunks([forged], user_id=alice, session_id=sid)
    with pytest.raises(InvalidTypeError):
        await memory.store.add_chunks(["just a string"], user_id=alice, session_id=sid)  # type: ignore[list-item]
    nul = draft("User: a NUL \x00 byte")
    with pytest.raises(InvalidInputError, match="NUL"):
        await memory.store.add_chunks([nul], user_id=alice, session_id=sid)
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0


@pytest.mark.parametrize("seq", [True, 1.0, "2", None])
async def test_a_chunks_seq_must_be_an_int(memory: Memory, seq: object) -> None:
    """start_seq and end_seq are positions in a session: True, 1.0 or "2" (which pydantic
    would have converted quietly) is an InvalidTypeError naming the field, in a dict or in a
    ChunkDraft, and nothing is stored."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    fields = PORT.model_dump()
    for name in ("start_seq", "end_seq"):
        with pytest.raises(InvalidTypeError, match=f"{name}: Input should be a valid integer"):
            await memory.store.add_chunks(
                [fields | {name: seq}],  # type: ignore[list-item]
                user_id=uid,
                session_id=sid,
            )
        with pytest.raises(ValidationError):
            ChunkDraft.model_validate(fields | {name: seq})
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0


async def test_add_chunks_racing_a_create_of_its_session_id_never_writes_under_it(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice's sessions.create("shared") has inserted its row and not committed; Bob's
    add_chunks under "shared" waits for the id's lock (revision 0021), then sees Alice's row
    and is refused. It used to see no row (not yet committed) and write Bob's chunk under
    Alice's new session."""
    alice, bob = await new_user(memory), await new_user(memory)
    inserted, release = asyncio.Event(), asyncio.Event()
    original = SessionRepository.insert_session

    async def paused(self: SessionRepository, *args: Any, **kwargs: Any) -> Any:
        row = await original(self, *args, **kwargs)
        inserted.set()
        await release.wait()
        return row

    monkeypatch.setattr(SessionRepository, "insert_session", paused)
    create = asyncio.create_task(memory.sessions.create("shared", user_id=alice))
    await asyncio.wait_for(inserted.wait(), 10)
    write = asyncio.create_task(
        memory.store.add_chunks([draft("User: bob's secret")], user_id=bob, session_id="shared")
    )
    await asyncio.sleep(0.5)
    assert not write.done()  # waiting for the create's lock on the id
    release.set()
    assert (await create).user_id == alice
    with pytest.raises(NotFoundError):
        await write
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0
    # Another user's add_chunks under an id nobody holds is not held up (shared locks).
    assert await memory.store.add_chunks([draft("User: a")], user_id=bob, session_id="b1") == 1


async def test_a_chunk_too_big_for_a_tsvector_stops_neither_the_indexer_nor_search(
    memory: Memory,
) -> None:
    """A 950,000-character chunk written by SQL of its own (or by compression before the chunk
    sizes were bounded) made a tsvector over PostgreSQL's 1 MB: the text indexer failed every
    batch holding it, for every user, and every search of its user failed. Its text is read
    from its first 120,000 characters (revision 0022): it is indexed and found by a word
    there, and another user's chunk after it is indexed too."""
    big_user, other = await new_user(memory), await new_user(memory)
    rng = random.Random(5)
    words = " ".join(
        "".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(120_000)
    )
    content = "User: zebra " + words[:950_000]
    async with memory.engine.begin() as conn:
        chunk_id = (
            await conn.execute(
                text(
                    "INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
                    " start_seq, end_seq, started_at, ended_at)"
                    " VALUES (:u, 'big', :c, :h, 1, 1, now(), now()) RETURNING id"
                ),
                {"u": big_user, "c": content, "h": hashlib.sha256(content.encode()).hexdigest()},
            )
        ).scalar_one()
        await conn.execute(
            text("INSERT INTO memory_chunk_text_queue (chunk_id, user_id) VALUES (:id, :u)"),
            {"id": chunk_id, "u": big_user},
        )
    # Queued, its text is read exactly by search: found, no error.
    assert [h.id for h in await memory.store.search_chunks("zebra", user_id=big_user)] == [chunk_id]
    assert await memory.store.add_chunks([draft("User: okapi")], user_id=other, session_id="o")
    await memory.store.index_pending_chunks()
    assert await scalar(memory, "SELECT count(*) FROM memory_chunk_text_queue") == 0
    assert [h.id for h in await memory.store.search_chunks("zebra", user_id=big_user)] == [chunk_id]
    assert len(await memory.store.search_chunks("okapi", user_id=other)) == 1


async def test_add_chunks_refuses_more_breadcrumbs_than_a_chunk_carries(memory: Memory) -> None:
    """12,000 breadcrumbs of 192 characters (each within its own limit) made the chunk's
    tsvector pass PostgreSQL's 1 MB: every search of the user's chunks, and the text indexer
    for every user, then failed. A chunk carries MAX_BREADCRUMBS at most, as compression
    makes them; one more is refused and nothing is stored."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    crumbs = [f"{i:04d}-" + "x" * 180 for i in range(12_000)]
    for count in (MAX_BREADCRUMBS + 1, 12_000):
        with pytest.raises(InvalidInputError, match=f"at most {MAX_BREADCRUMBS} breadcrumbs"):
            await memory.store.add_chunks(
                [draft("User: zebra", 1, crumbs[:count])], user_id=uid, session_id=sid
            )
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0
    kept = draft("User: zebra", 1, crumbs[:MAX_BREADCRUMBS])
    assert await memory.store.add_chunks([kept], user_id=uid, session_id=sid) == 1
    await memory.store.index_pending_chunks()
    assert [h.id for h in await memory.store.search_chunks("zebra", user_id=uid)]


async def test_times_outside_pythons_range_in_utc_are_refused_as_input(memory: Memory) -> None:
    """0001-01-01 at +01:00 is a valid aware datetime that overflows once in UTC: refused
    as InvalidInputError (it was a StorageError from the driver), nothing written."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-1)))
    for stamp in (early, late):
        bad = PORT.model_copy(update={"started_at": stamp, "ended_at": stamp})
        with pytest.raises(InvalidInputError, match="outside the years 1-9999 in UTC"):
            await memory.store.add_chunks([bad], user_id=uid, session_id=sid)
        with pytest.raises(InvalidInputError, match="outside the years 1-9999 in UTC"):
            await memory.store.mark_session_extracted(sid, user_id=uid, at=stamp)
        with pytest.raises(InvalidInputError, match="outside the years 1-9999 in UTC"):
            await memory.search.search(
                "port", user_id=uid, current_session_id=sid, summary_at=stamp
            )
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0
    assert await memory.store.get_extracted_at(sid, uid) is None


async def test_chunks_written_while_the_embedder_is_down_get_vectors_from_backfill(
    memory: Memory, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        assert await memory.store.add_chunks([PORT, PATH], user_id=uid, session_id="s1") == 2
    assert [r for r in caplog.records if "memory.embedding_failed" in r.getMessage()]
    hits = await memory.store.search_chunks("port 8099", user_id=uid)
    assert [h.via for h in hits] == ["text"]
    fake_ollama.mode = "ok"
    assert await memory.store.backfill_embeddings() == 2
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL") == 0
    hits = await memory.store.search_chunks("which port should the API use", user_id=uid)
    assert hits[0].via == "vector"


async def test_vector_hits_come_first_then_text_hits_fill_up_without_repeats(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    await memory.store.add_chunks([PORT, PATH, BERLIN], user_id=uid, session_id="s1")
    hits = await memory.store.search_chunks("which port should the API use", user_id=uid)
    assert hits[0].content_hash == PORT.content_hash
    assert hits[0].via == "vector"
    assert hits[0].distance is not None and hits[0].distance < 0.45
    assert len({h.id for h in hits}) == len(hits)
    vias = [h.via for h in hits]
    assert vias == sorted(vias, key=lambda v: v != "vector")


async def test_text_path_finds_exact_identifiers_in_content_and_breadcrumbs(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    crumbs_only = draft("User: the usual place for it", 7, ["/srv/data/archive.tar"])
    await memory.store.add_chunks([PORT, PATH, BERLIN, crumbs_only], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"  # text path alone
    hits = await memory.store.search_chunks("/etc/navi/app.toml", user_id=uid)
    assert [h.content_hash for h in hits] == [PATH.content_hash]
    hits = await memory.store.search_chunks("archive.tar", user_id=uid)
    assert [h.content_hash for h in hits] == [crumbs_only.content_hash]


async def test_text_hits_rank_by_distinct_terms_then_recency(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    one_old = draft("User: kubernetes is fine", 1)
    one_new = draft("User: kubernetes again", 9)
    both = draft("User: kubernetes ingress broke", 3)
    await memory.store.add_chunks([one_old, one_new, both], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"
    hits = await memory.store.search_chunks("kubernetes ingress", user_id=uid)
    assert [h.content_hash for h in hits] == [
        both.content_hash,
        one_new.content_hash,
        one_old.content_hash,
    ]
    assert [h.terms_hit for h in hits] == [2, 1, 1]


async def test_full_text_matches_whole_words_the_ilike_terms_would_also_find(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    await memory.store.add_chunks([BERLIN], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"
    hits = await memory.store.search_chunks("conference berlin", user_id=uid)
    assert [(h.content_hash, h.terms_hit) for h in hits] == [(BERLIN.content_hash, 2)]


async def test_empty_query_returns_the_most_recent_chunks(memory: Memory) -> None:
    uid = await new_user(memory)
    await memory.store.add_chunks([PORT, PATH, BERLIN], user_id=uid, session_id="s1")
    hits = await memory.store.search_chunks("  ?! ", user_id=uid, limit=2)
    assert [(h.content_hash, h.via) for h in hits] == [
        (BERLIN.content_hash, "recent"),
        (PATH.content_hash, "recent"),
    ]


@pytest.mark.parametrize(
    ("ranking", "query", "expected"),
    # terms: "_" stays inside a term (it is a word character) and must match only an
    # underscore; "%" and "\\" never are part of a term, so "50%" searches for "50" as a
    # substring. bm25 matches whole lexemes: "50" is not "500".
    [
        ("terms", "a_b", {"literal"}),
        ("terms", "e_c", {"literal"}),
        ("terms", "50%", {"literal", "decoy"}),
        ("bm25", "a_b", {"literal"}),
        ("bm25", "e_c", {"literal"}),
        ("bm25", "50%", {"literal"}),
    ],
)
async def test_wildcards_in_the_query_match_only_themselves(
    db_url: str, fake_ollama: FakeOllama, ranking: str, query: str, expected: set[str]
) -> None:
    async with open_memory(make_settings(db_url, fake_ollama, chunk_text_ranking=ranking)) as m:
        uid = await new_user(m)
        chunks = {
            "literal": draft("User: save 50% on a_b with code e_c", 2),
            # Each decoy matches one of the queries only if a wildcard is left unescaped.
            "decoy": draft("User: 500 aXb and eXc", 3),
        }
        await m.store.add_chunks(list(chunks.values()), user_id=uid, session_id="s1")
        fake_ollama.mode = "fail"
        hits = await m.store.search_chunks(query, user_id=uid)
    names = {name for name, c in chunks.items() for h in hits if h.content_hash == c.content_hash}
    assert names == expected
    assert all(h.via == "text" for h in hits)


async def test_a_query_of_wildcards_alone_has_no_terms_and_lists_recent_chunks(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    await memory.store.add_chunks([PORT, PATH], user_id=uid, session_id="s1")
    fake_ollama.mode = "fail"
    # "_" too: no word of the text index, it found nothing at all (bm25) where "%" listed
    for query in ("%", "\\", "%%", "_", "__", "-_-", "%_"):
        hits = await memory.store.search_chunks(query, user_id=uid)
        assert {h.via for h in hits} == {"recent"}, query
        unified = await memory.search.search(query, user_id=uid, scope="raw")
        assert {h.via for h in unified} == {"recent"}, query


async def test_session_filter_and_tenancy(memory: Memory) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.add_chunks([PORT], user_id=alice, session_id="a1")
    await memory.store.add_chunks([PATH], user_id=alice, session_id="a2")
    await memory.store.add_chunks([PORT.model_copy(), BERLIN], user_id=bob, session_id="b1")
    with request_context(user_id=alice):
        assert {h.session_id for h in await memory.store.search_chunks("port")} <= {"a1", "a2"}
        in_a2 = await memory.store.search_chunks("port config", session_id="a2")
        assert {h.session_id for h in in_a2} == {"a2"}
        assert await memory.store.search_chunks("Berlin conference", session_id="b1") == []
        assert await memory.store.search_chunks("", session_id="b1") == []
        with pytest.raises(PermissionDeniedError):
            await memory.store.search_chunks("port", user_id=bob)
    with pytest.raises(PermissionDeniedError):
        await memory.store.search_chunks("port")
    with request_context(permissions=[PERMISSION_READ_ALL]):
        everyone = await memory.store.search_chunks("", limit=10)
        assert {h.user_id for h in everyone} == {alice, bob}


async def test_latest_summary_at_is_the_sessions_last_summary_for_its_owner_only(
    memory: Memory,
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    sid = await new_session_row(memory, alice)
    with request_context(user_id=alice):
        assert await memory.store.latest_summary_at(sid) is None
    async with memory.engine.begin() as conn:
        for seq, at in ((1, T0), (2, T0 + timedelta(hours=1))):
            await conn.execute(
                text(
                    "INSERT INTO session_messages "
                    "(session_id, seq, role, content, kind, created_at) "
                    "VALUES (:s, :q, 'system', 'summary', 'summary', :at)"
                ),
                {"s": sid, "q": seq, "at": at},
            )
    with request_context(user_id=alice):
        assert await memory.store.latest_summary_at(sid) == T0 + timedelta(hours=1)
    with request_context(user_id=bob):
        assert await memory.store.latest_summary_at(sid) is None
    # Failures answer None, never raise: no user at all, or a session id that is not text.
    assert await memory.store.latest_summary_at(sid) is None
    with request_context(user_id=alice):
        assert await memory.store.latest_summary_at(None) is None  # type: ignore[arg-type]


async def test_deleting_the_user_deletes_their_chunks(memory: Memory) -> None:
    uid = await new_user(memory)
    await memory.store.add_chunks([PORT], user_id=uid, session_id=str(uuid.uuid4()))
    await memory.users.delete(uid)
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0


async def test_compression_indexing_refuses_a_session_deleted_meanwhile(memory: Memory) -> None:
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    assert await memory.store.add_chunks_for_session([PORT], uid, sid) == 1
    async with memory.engine.begin() as conn:
        await conn.execute(text("DELETE FROM sessions WHERE id = :s"), {"s": sid})
    with pytest.raises(NotFoundError):
        await memory.store.add_chunks_for_session([PATH], uid, sid)
    # Plain add_chunks keeps the spec's contract: a session the sessions table does not know.
    assert await memory.store.add_chunks([PATH], user_id=uid, session_id=sid) == 1
