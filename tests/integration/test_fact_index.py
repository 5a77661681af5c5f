"""Fact vectors off the write path (revision 0007): the trigger-fed queue, the fact indexer,
search over the index and the queue, and the one-statement upsert with its fallbacks."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory import PERMISSION_READ_ALL, Memory, NotFoundError, open_memory, request_context
from navi_memory.db import vector_binary
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.repositories.facts import FactVectorRepository, FactWriteRepository
from navi_memory.schemas import FactHit
from navi_memory.services.facts import key_norm, key_rules
from navi_memory.testing import FakeOllama, HashedEmbedder
from navi_memory.testing.hashing import hashed_embedding
from tests.conftest import make_settings
from tests.integration.extraction_model import ExtractionModel
from tests.integration.factories import (
    execute,
    near_tie,
    new_user,
    scalar,
    slow_trigger,
    wait_for_a_sleeping_statement,
)

FACTS = (
    ("preferences", "editor", "neovim with the gruvbox theme"),
    ("preferences", "shell", "fish with starship prompt"),
    ("preferences", "favorite_drink", "oolong tea without sugar"),
    ("infrastructure", "staging_db_port", "the staging database listens on port 5433"),
    ("infrastructure", "backup_path", "nightly backups go to /srv/backups/nightly"),
    ("infrastructure", "deploy_day", "deploys go out on fridays through the blue green pipeline"),
    ("work", "employer", "Acme Corporation in the Berlin office"),
    ("work", "ticket_ops_4411", "OPS-4411 tracks the flaky login test"),
    ("work", "manager", "Grace Hopper runs the platform team"),
    ("personal", "hometown", "Utrecht near the Dom tower"),
    ("personal", "pet", "a grey cat called Pixel"),
    ("personal", "hobby", "bouldering twice a week"),
    ("travel", "trip_lisbon", "flight TP1234 to Lisbon in May"),
    ("notes", "book", "reading The Left Hand of Darkness"),
    ("notes", "recipe", "shakshuka with feta and cumin"),
)
QUERIES = (
    "preferences editor neovim with the gruvbox theme",  # a fact's own words: a vector hit
    "infrastructure staging db port the staging database listens on port 5433",
    "personal pet a grey cat called Pixel",
    "nightly backups srv",
    "flight to Lisbon",
    "OPS-4411",
    "Acme Berlin office",
    "something else entirely",
    "",
)
Shape = list[tuple[int, str, float | None, int]]


@pytest.fixture
async def manual(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory whose fact indexer runs only when asked: the test decides when the queue drains."""
    settings = make_settings(
        db_url, fake_ollama, fact_index_in_background=False, fact_index_batch_size=4
    )
    async with open_memory(settings) as opened:
        yield opened


async def counts(memory: Memory) -> tuple[object, object]:
    return (
        await scalar(memory, "SELECT count(*) FROM memory_fact_vector_queue"),
        await scalar(memory, "SELECT count(*) FROM memory_fact_vectors"),
    )


async def write_all(memory: Memory, uid: uuid.UUID) -> None:
    for category, key, value in FACTS:
        await memory.store.upsert_fact(category, key, value, user_id=uid)


def shape(hits: list[FactHit]) -> Shape:
    return [
        (h.id, h.via, None if h.distance is None else round(h.distance, 6), h.terms_hit)
        for h in hits
    ]


async def searched(memory: Memory, uid: uuid.UUID, limit: int) -> dict[str, Shape]:
    return {q: shape(await memory.store.search_facts(q, user_id=uid, limit=limit)) for q in QUERIES}


# --- search never depends on the indexer --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("limit", [3, 15])
async def test_search_facts_returns_identical_hits_before_during_and_after_indexing(
    manual: Memory, limit: int
) -> None:
    """Every fact is searchable the moment upsert_fact returns: with all of them queued, part
    indexed, and all indexed, every query returns the same hits with the same distances."""
    uid, other = await new_user(manual), await new_user(manual)
    await write_all(manual, uid)
    await write_all(manual, other)  # the same facts for another user: never in uid's hits
    assert await counts(manual) == (2 * len(FACTS), 0)
    queued = await searched(manual, uid, limit)
    assert all(any(hit[1] == "vector" for hit in queued[q]) for q in QUERIES[:3])

    assert await manual.store.index_pending_facts(max_batches=3) == 12  # batches of 4
    assert await counts(manual) == (2 * len(FACTS) - 12, 12)
    assert await searched(manual, uid, limit) == queued

    assert await manual.store.index_pending_facts() == 2 * len(FACTS) - 12
    assert await counts(manual) == (0, 2 * len(FACTS))
    assert await searched(manual, uid, limit) == queued
    mine = {f.id for f in await manual.store.get_all_facts(user_id=uid)}
    for q in QUERIES:
        hits = await manual.store.search_facts(q, user_id=uid, limit=limit)
        assert {h.id for h in hits} <= mine


async def test_a_new_value_is_searched_by_its_new_vector_and_never_by_the_stale_entry(
    manual: Memory,
) -> None:
    """After a value changes, the index still holds the old vector until the indexer runs; search
    reads the fact from the queue instead, so the old meaning finds nothing."""
    uid = await new_user(manual)
    fact = await manual.store.upsert_fact("personal", "pet", "a grey cat called Pixel", user_id=uid)
    await manual.store.index_pending_facts()
    old_meaning, new_meaning = "pet a grey cat called Pixel", "pet a goldfish named Bubbles"
    hits = await manual.store.search_facts(old_meaning, user_id=uid)
    assert [(h.id, h.via) for h in hits] == [(fact.id, "vector")]

    await manual.store.upsert_fact("personal", "pet", "a goldfish named Bubbles", user_id=uid)
    assert await counts(manual) == (1, 1)  # queued again; the stale copy is still indexed
    for state in ("queued", "indexed"):
        old = await manual.store.search_facts(old_meaning, user_id=uid)
        assert [h.via for h in old] == ["text"], state  # "pet" is in the key, nothing more
        new = await manual.store.search_facts(new_meaning, user_id=uid)
        assert [(h.id, h.via) for h in new] == [(fact.id, "vector")], state
        await manual.store.index_pending_facts()
    assert await counts(manual) == (0, 1)


async def test_a_reverified_fact_with_an_unchanged_vector_costs_no_index_work(
    manual: Memory,
) -> None:
    """The same value again queues nothing and leaves the index row untouched."""
    uid = await new_user(manual)
    fact = await manual.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    await manual.store.index_pending_facts()
    before = await scalar(
        manual, "SELECT xmin::text FROM memory_fact_vectors WHERE fact_id = :i", i=fact.id
    )
    again = await manual.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    assert again.id == fact.id and again.last_verified_at != fact.last_verified_at
    assert await manual.store.pending_fact_count() == 0
    after = await scalar(
        manual, "SELECT xmin::text FROM memory_fact_vectors WHERE fact_id = :i", i=fact.id
    )
    assert after == before


async def test_vectors_written_by_sql_and_backfill_are_queued_by_the_trigger(
    manual: Memory,
) -> None:
    """The queue is kept by memory_facts' trigger, whoever writes: a vector dropped by hand is
    queued (and no longer found by meaning), backfill's new one is queued and indexed."""
    uid = await new_user(manual)
    fact = await manual.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    await manual.store.index_pending_facts()
    await execute(manual, "UPDATE memory_facts SET embedding = NULL WHERE id = :i", i=fact.id)
    assert await manual.store.pending_fact_count() == 1
    hits = await manual.store.search_facts("preferences editor neovim", user_id=uid)
    assert [(h.id, h.via) for h in hits] == [(fact.id, "text")]

    assert await manual.store.backfill_embeddings() == 1
    assert await manual.store.pending_fact_count() == 1
    hits = await manual.store.search_facts("preferences editor neovim", user_id=uid)
    assert [(h.id, h.via) for h in hits] == [(fact.id, "vector")]  # from the queue
    assert await manual.store.index_pending_facts() == 1
    assert await counts(manual) == (0, 1)
    hits = await manual.store.search_facts("preferences editor neovim", user_id=uid)
    assert [(h.id, h.via) for h in hits] == [(fact.id, "vector")]


async def test_the_indexer_drops_the_index_entry_of_a_vector_that_is_gone(
    manual: Memory,
) -> None:
    """A queued fact whose vector was removed leaves memory_fact_vectors when the queue drains."""
    uid = await new_user(manual)
    fact = await manual.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    await manual.store.index_pending_facts()
    await execute(manual, "UPDATE memory_facts SET embedding = NULL WHERE id = :i", i=fact.id)
    assert await manual.store.index_pending_facts() == 0
    assert await counts(manual) == (0, 0)


async def test_hidden_and_expired_facts_are_never_vector_hits_from_either_side(
    manual: Memory,
) -> None:
    """Visibility is read from memory_facts for indexed and queued facts alike."""
    uid = await new_user(manual)
    store = manual.store
    await store.upsert_fact("p", "language", "Dutch spoken at home", user_id=uid)  # hidden below
    gone = await store.upsert_fact("p", "home_language", "Dutch spoken at home", user_id=uid)
    await store.index_pending_facts()
    kept = await store.upsert_fact(
        "p", "preferred_language", "Dutch spoken at home", user_id=uid, dedupe=True
    )
    await execute(
        manual,
        "UPDATE memory_facts SET expires_at = now() - interval '1 second' WHERE id = :i",
        i=gone.id,
    )
    for state in ("some queued", "all indexed"):
        hits = await store.search_facts("p language Dutch spoken at home", user_id=uid)
        assert [(h.id, h.via) for h in hits] == [(kept.id, "vector")], state
        await store.index_pending_facts()


async def test_a_global_read_searches_every_users_indexed_and_queued_facts(
    manual: Memory,
) -> None:
    """With read_all and no user, search covers both tables for everyone."""
    alice, bob = await new_user(manual), await new_user(manual)
    a = await manual.store.upsert_fact("p", "editor", "neovim with gruvbox", user_id=alice)
    await manual.store.index_pending_facts()
    b = await manual.store.upsert_fact("p", "editor", "neovim with gruvbox", user_id=bob)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        hits = await manual.store.search_facts("p editor neovim with gruvbox")
    assert {(h.id, h.via) for h in hits} == {(a.id, "vector"), (b.id, "vector")}


async def test_imported_facts_with_vectors_are_queued_and_found_by_meaning(manual: Memory) -> None:
    """An import writes facts with their vectors by its own INSERT: the trigger queues them, so
    they are vector hits at once, and the indexer moves them."""
    uid, copy = await new_user(manual), uuid.uuid4()
    await manual.store.upsert_fact("p", "editor", "neovim with gruvbox", user_id=uid)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        records = await manual.admin.export_user(uid, with_vectors=True)
        await manual.admin.import_user(records, user_id=copy)
    [imported] = await manual.store.get_all_facts(user_id=copy)
    assert await manual.store.pending_fact_count() == 2  # the original's and the import's
    for state in ("queued", "indexed"):
        hits = await manual.store.search_facts("p editor neovim with gruvbox", user_id=copy)
        assert [(h.id, h.via) for h in hits] == [(imported.id, "vector")], state
        await manual.store.index_pending_facts()
    assert await counts(manual) == (0, 2)


async def test_backfill_queues_fact_vectors_that_no_index_holds(manual: Memory) -> None:
    """A vector written while the trigger was off (a data-only restore) is in neither table;
    backfill finds it, queues it, and the indexer moves it."""
    uid = await new_user(manual)
    await execute(manual, "ALTER TABLE memory_facts DISABLE TRIGGER memory_facts_vector_inserted")
    try:
        fact = await manual.store.upsert_fact("p", "editor", "neovim", user_id=uid)
    finally:
        await execute(
            manual, "ALTER TABLE memory_facts ENABLE TRIGGER memory_facts_vector_inserted"
        )
    assert fact.has_embedding
    assert await counts(manual) == (0, 0)
    assert await manual.store.backfill_embeddings() == 0  # nothing lacked a vector
    assert await counts(manual) == (1, 0)
    assert await manual.store.index_pending_facts() == 1
    hits = await manual.store.search_facts("p editor neovim", user_id=uid)
    assert [(h.id, h.via) for h in hits] == [(fact.id, "vector")]


async def test_the_background_indexer_empties_the_fact_queue(memory: Memory) -> None:
    """With background indexing on (the default), upsert_fact's kick drains the queue."""
    assert memory.settings.fact_index_in_background
    uid = await new_user(memory)
    await write_all(memory, uid)
    await memory.store.wait_fact_indexing()
    assert await counts(memory) == (0, len(FACTS))


async def test_facts_the_extractor_writes_are_indexed_in_the_background(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """The extraction sweep kicks the fact indexer after it writes facts: their vectors do not
    wait for the next upsert_fact to be indexed."""
    model = ExtractionModel(
        facts=json.dumps(
            [
                {"category": "notes", "key": f"k{i}", "value": f"v{i}", "source": "tool_call"}
                for i in range(5)
            ]
        )
    )
    fake_ollama.chat_handler = model
    settings = make_settings(db_url, fake_ollama, memory_extract_on_create=False)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        sid = (await memory.sessions.create(user_id=uid)).id
        await memory.sessions.append(sid, "user", "remember these", user_id=uid)
        report = await memory.extractor.extract_session(sid, user_id=uid)
        assert report.facts_written == 5
        await memory.store.wait_fact_indexing()
        assert await counts(memory) == (0, 5)


# --- the one-statement upsert -------------------------------------------------------------------


async def waiting_for_a_lock(memory: Memory) -> None:
    """Return once some backend waits for an advisory lock (within 10 s)."""
    for _ in range(200):
        waiting = await scalar(
            memory,
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'",
        )
        if waiting:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no backend ever waited for the category lock")


@asynccontextmanager
async def recording(memory: Memory) -> AsyncIterator[list[str]]:
    """The statements the engine's connections send while the block runs: through SQLAlchemy
    (its cursor events), or on their asyncpg driver, straight (upsert_fact, the search reads)
    or for SQLAlchemy (BEGIN, COMMIT), as asyncpg's query logger reports them."""
    sent: list[str] = []
    drivers: list[Any] = []

    def logged(record: Any) -> None:
        sent.append(record.query)

    def watch(dbapi_connection: Any, *_: object) -> None:
        drivers.append(dbapi_connection.driver_connection)
        drivers[-1].add_query_logger(logged)

    def executed(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        sent.append(statement)

    engine = memory.engine.sync_engine
    event.listen(engine.pool, "checkout", watch)
    event.listen(engine, "before_cursor_execute", executed)
    try:
        yield sent
        await asyncio.sleep(0)  # the logger reports a statement one loop turn after it
    finally:
        event.remove(engine.pool, "checkout", watch)
        event.remove(engine, "before_cursor_execute", executed)
        for driver in drivers:
            driver.remove_query_logger(logged)


async def test_an_uncontended_upsert_is_one_statement(manual: Memory) -> None:
    """upsert_fact with dedupe — a new value, the same value, a new key — sends one statement,
    on an autocommit connection (no BEGIN, no COMMIT, no separate lock or lookup)."""
    uid = await new_user(manual)
    await manual.store.upsert_fact("p", "editor", "vim", user_id=uid, dedupe=True)
    async with recording(manual) as sent:
        for value in ("neovim", "neovim", "helix"):
            await manual.store.upsert_fact("p", "editor", value, user_id=uid, dedupe=True)
        await manual.store.upsert_fact("p", "shell", "fish", user_id=uid, dedupe=True)
    assert len(sent) == 4
    assert all("navi_fact_upsert" in statement for statement in sent)


async def test_an_upsert_waiting_for_the_category_sees_what_the_holder_committed(
    memory: Memory,
) -> None:
    """A writer holds the category's lock and adds a spelling; an upsert of another spelling
    with dedupe waits for it, then reads what it committed: the two spellings end as one
    visible fact, in one statement."""
    uid = await new_user(memory)
    async with AsyncSession(memory.engine) as holder:  # the lock lives in its transaction
        await FactWriteRepository(session=holder).lock_category(uid, "p")
        await holder.execute(
            text(
                "INSERT INTO memory_facts (user_id, category, key, key_norm, value) "
                "VALUES (:u, 'p', 'preferred_language', :n, 'Dutch')"
            ),
            {"u": uid, "n": key_norm("preferred_language")},
        )
        async with recording(memory) as sent:
            writing = asyncio.create_task(
                memory.store.upsert_fact("p", "language", "Frisian", user_id=uid, dedupe=True)
            )
            await waiting_for_a_lock(memory)  # its statement has begun
            assert not writing.done()
            await holder.commit()
            written = await writing
    assert len([s for s in sent if "navi_fact_upsert" in s]) == 1  # no retry, no lookup
    facts = await memory.store.get_all_facts(user_id=uid, include_merged=True)
    assert {(f.key, f.merged_into) for f in facts} == {
        ("language", None),
        ("preferred_language", written.id),
    }


async def test_spellings_without_a_current_canonical_form_get_one_before_they_are_compared(
    memory: Memory,
) -> None:
    """A key written by SQL has no stored form, one stored under other rules is outdated: both
    are made again with the current rules, so the merge follows the rules in force — a stale
    form that would wrongly match merges nothing."""
    uid = await new_user(memory)
    async with memory.engine.begin() as conn:
        for key, stored in (
            ("preferred_language", None),  # by hand: no form
            ("home_city", "0ld-rules:language"),  # outdated, and it would match
        ):
            await conn.execute(
                text(
                    "INSERT INTO memory_facts (user_id, category, key, key_norm, value) "
                    "VALUES (:u, 'p', :k, :n, 'x')"
                ),
                {"u": uid, "k": key, "n": stored},
            )
    kept = await memory.store.upsert_fact("p", "language", "Frisian", user_id=uid, dedupe=True)
    facts = {f.key: f for f in await memory.store.get_all_facts(user_id=uid, include_merged=True)}
    assert facts["preferred_language"].merged_into == kept.id
    assert facts["home_city"].merged_into is None
    async with memory.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT key, key_norm FROM memory_facts WHERE user_id = :u"), {"u": uid}
        )
        forms = {key: form for key, form in rows}
    assert forms == {
        "language": f"{key_rules()}:language",
        "preferred_language": f"{key_rules()}:language",
        "home_city": f"{key_rules()}:homecity",
    }


async def test_an_upsert_for_a_user_that_does_not_exist_is_not_found_and_writes_nothing(
    memory: Memory,
) -> None:
    """The one statement refuses an unknown user as the old path did: NotFoundError, no row."""
    with pytest.raises(NotFoundError, match=r"users\.ensure"):
        await memory.store.upsert_fact("p", "editor", "vim", user_id=uuid.uuid4(), dedupe=True)
    assert await scalar(memory, "SELECT count(*) FROM memory_facts") == 0
    assert await scalar(memory, "SELECT count(*) FROM memory_fact_vector_queue") == 0


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["user", "everyone"])
async def test_a_search_skips_hidden_nearest_facts_beyond_the_first_look(
    manual: Memory, scope: str
) -> None:
    """Fact search (a user's, or everyone's with read_all) checks visibility on the nearest few
    first: when more than that many of the nearest are hidden, it still returns the nearest
    visible facts, exactly as the exact scan of queued facts does. Everyone's search has no
    graph either (revision 0020): another user's nearer facts are found among them."""
    uid, other = await new_user(manual), await new_user(manual)
    query = "river stone bridge lantern harbor meadow"
    for n in range(40):
        await manual.store.upsert_fact("notes", f"n{n}", f"{query} token{n}", user_id=uid)
    for n in range(3):
        await manual.store.upsert_fact("notes", f"o{n}", f"{query} other{n}", user_id=other)
    await manual.store.index_pending_facts()

    async def search() -> list[FactHit]:
        if scope == "user":
            return await manual.store.search_facts(query, user_id=uid, limit=5)
        with request_context(permissions=[PERMISSION_READ_ALL]):
            return await manual.store.search_facts(query, limit=5)

    hidden: set[int] = set()
    for _ in range(5):  # 25 nearest hidden: more than FACT_SCAN_HEAD x 5
        hits = await search()
        assert [h.via for h in hits] == ["vector"] * 5
        assert not {h.id for h in hits} & hidden
        hidden |= {h.id for h in hits}
        await execute(
            manual,
            "UPDATE memory_facts SET expires_at = now() - interval '1 second' WHERE id = ANY(:ids)",
            ids=[h.id for h in hits],
        )
    indexed = await search()
    assert [h.via for h in indexed] == ["vector"] * 5
    assert not {h.id for h in indexed} & hidden
    owners = {h.user_id for h in indexed}
    if scope == "user":
        assert owners == {uid}
    else:
        assert uid in owners
    await execute(
        manual,
        "INSERT INTO memory_fact_vector_queue (fact_id, user_id) "
        "SELECT id, user_id FROM memory_facts",
    )
    exact = await search()
    # Many facts lie at the same distance here: the same distances, not the same ids, is exact.
    assert [round(h.distance or 0, 6) for h in exact] == [
        round(h.distance or 0, 6) for h in indexed
    ]
    assert not {h.id for h in exact} & hidden


async def test_the_background_fact_indexer_gathers_a_stream_of_writes_into_few_batches(
    db_url: str, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller writing facts one after another while the background indexer drains: a kick
    during a drain makes it go round again, and each round first waits gather_seconds, so a
    batch takes the writes of that while (up to a full batch), not the one or two written
    during the last batch — which cost the writer a transaction of the indexer's every other
    write. Every fact still ends indexed."""
    monkeypatch.setattr(FactIndexer, "gather_seconds", 0.2)
    settings = make_settings(db_url, fake_ollama, fact_index_batch_size=64)
    # An embedder in the process: a write takes a millisecond or two, not an HTTP round trip.
    async with open_memory(settings, embedder=HashedEmbedder()) as memory:
        uid = await new_user(memory)
        indexer = memory.store._fact_indexer
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        written = 0
        while loop.time() < deadline:
            await memory.store.upsert_fact("notes", f"n{written}", f"note {written}", user_id=uid)
            written += 1
        await memory.store.wait_fact_indexing()
        assert await counts(memory) == (0, written)
    # A round every 0.2 s or more over the second of writes, each as many full batches as
    # gathered plus one; a round without the wait takes what one batch's time let through.
    rounds = 1.0 / 0.2 + 2
    assert indexer.batches_run <= written / 64 + 2 * rounds, (indexer.batches_run, written)


async def test_closing_the_fact_indexer_during_its_gather_wait_indexes_one_batch_at_once(
    db_url: str, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aclose() wakes a background drain that waits to gather writes: it does not wait out the
    gather but runs one batch and stops, so a script that exits right after its writes leaves
    them indexed (up to a batch); the rest stay queued for the next indexer."""
    monkeypatch.setattr(FactIndexer, "gather_seconds", 60.0)
    settings = make_settings(db_url, fake_ollama, fact_index_batch_size=2)
    async with open_memory(settings, embedder=HashedEmbedder()) as memory:
        uid = await new_user(memory)
        await memory.store.upsert_fact("notes", "n", "a note", user_id=uid)
        indexer = memory.store._fact_indexer
        assert indexer.running
        await asyncio.wait_for(indexer.aclose(), timeout=10)
        assert not indexer.running
        assert await counts(memory) == (0, 1)
    async with open_memory(settings, embedder=HashedEmbedder()) as memory:
        for i in range(5):
            await memory.store.upsert_fact("notes", f"m{i}", f"note {i}", user_id=uid)
        await asyncio.wait_for(memory.store._fact_indexer.aclose(), timeout=10)
        assert await counts(memory) == (3, 3)


@pytest.mark.parametrize("delete", ["fact", "expired", "user"])
async def test_deleting_while_the_fact_indexer_is_mid_batch_does_not_deadlock(
    db_url: str, fake_ollama: FakeOllama, delete: str
) -> None:
    """A delete that arrives while the fact indexer is inserting a batch waits for it or is
    skipped by it, and then deletes everything; nobody deadlocks. (The indexer locked the queue
    rows and then, in its foreign key check, the fact rows; a delete locks the fact rows and
    then, by the cascade, the queue rows: CI met that deadlock on 2026-12-05.)"""
    settings = make_settings(
        db_url, fake_ollama, fact_index_in_background=False, fact_index_batch_size=len(FACTS)
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await write_all(memory, uid)
        if delete == "expired":
            await execute(
                memory, "UPDATE memory_facts SET expires_at = now() WHERE user_id = :u", u=uid
            )
        # Each vector the indexer inserts takes 20 ms, as a slow HNSW insertion would: the
        # delete arrives while the indexer holds its queue rows and is still inserting.
        await slow_trigger(memory, "memory_fact_vectors", "INSERT", 0.02)
        indexing = asyncio.create_task(memory.store.index_pending_facts())
        await wait_for_a_sleeping_statement(memory)
        if delete == "fact":
            for _, key, _ in FACTS:
                assert await memory.store.delete_fact(key, user_id=uid) == 1
        elif delete == "expired":
            with request_context(permissions=[PERMISSION_READ_ALL]):
                assert (await memory.admin.purge_expired(uid)).expired == len(FACTS)
        else:
            assert await memory.users.delete(uid)
        await indexing
        assert await counts(memory) == (0, 0)
        assert await scalar(memory, "SELECT count(*) FROM memory_facts") == 0


async def test_the_indexer_skips_a_fact_a_delete_holds_and_never_waits_for_it(
    manual: Memory,
) -> None:
    """A fact locked as a delete locks it (FOR UPDATE, before its cascade reaches the queue)
    is left queued, without waiting; the rest of the queue is indexed past it; the delete's
    cascade then drops its queue row."""
    uid = await new_user(manual)
    await write_all(manual, uid)
    held = await scalar(manual, "SELECT min(id) FROM memory_facts WHERE user_id = :u", u=uid)
    async with manual.engine.connect() as other:
        await other.execute(
            text("SELECT 1 FROM memory_facts WHERE id = :i FOR UPDATE"), {"i": held}
        )
        indexed = await asyncio.wait_for(manual.store.index_pending_facts(), timeout=10)
        assert indexed == len(FACTS) - 1  # batches of 4: the held fact is in the first
        assert await counts(manual) == (1, len(FACTS) - 1)
        await other.execute(text("DELETE FROM memory_facts WHERE id = :i"), {"i": held})
        await other.commit()
    assert await counts(manual) == (0, len(FACTS) - 1)


async def test_a_vector_written_while_the_indexer_holds_its_queue_row_is_indexed_after_all(
    manual: Memory,
) -> None:
    """The indexer picks a fact's queue row, and reads the fact's vector in the snapshot its
    statement started with; a new vector written in between must be queued again (revision
    0011), or the index keeps the old vector for good. The indexer is held between its pick
    and its delete of the row (a sleeping BEFORE DELETE trigger) while the fact is rewritten."""
    uid = await new_user(manual)
    await manual.store.upsert_fact("notes", "book", "The Left Hand of Darkness", user_id=uid)
    await slow_trigger(manual, "memory_fact_vector_queue", "DELETE", 0.5)
    indexing = asyncio.create_task(manual.store.index_pending_facts())
    await wait_for_a_sleeping_statement(manual)  # the indexer, with the row picked
    await manual.store.upsert_fact("notes", "book", "A Wizard of Earthsea", user_id=uid)
    await indexing
    await execute(manual, "DROP TRIGGER slow ON memory_fact_vector_queue")
    await manual.store.index_pending_facts()
    assert await counts(manual) == (0, 1)
    same = await scalar(
        manual,
        "SELECT v.embedding = CAST(l2_normalize(f.embedding) AS halfvec(768))"
        " FROM memory_fact_vectors v JOIN memory_facts f ON f.id = v.fact_id",
    )
    assert same is True


async def test_an_upsert_for_a_user_never_created_is_not_found(memory: Memory) -> None:
    """The statement goes straight to the driver: its foreign-key violation is still the
    missing user's NotFoundError (not a StorageError), and nothing is written."""
    ghost = uuid.uuid4()
    with pytest.raises(NotFoundError, match=r"users\.ensure"):
        await memory.store.upsert_fact("p", "editor", "vim", user_id=ghost)
    stored = await scalar(memory, "SELECT count(*) FROM memory_facts WHERE user_id = :u", u=ghost)
    assert stored == 0
    uid = await new_user(memory)  # the pool still serves
    fact = await memory.store.upsert_fact("p", "editor", "vim", user_id=uid)
    assert fact.value == "vim"


@pytest.mark.slow
async def test_a_vector_written_while_the_indexer_starts_is_never_lost(manual: Memory) -> None:
    """A new vector that commits after the indexer's statement took its snapshot but before it
    locked the queue row: the lock took the row the write's queueing had moved, the snapshot
    gave the old vector: the index held the old vector of a fact no longer queued, and search
    ranked it by its old meaning. The batch now queues again, in a new snapshot, the facts
    whose vector differs from what it indexed. Timing-dependent: rounds with the write at
    random moments of a 3,000-row batch (the old code failed within 20)."""
    uid = await new_user(manual)
    base = vector_binary(hashed_embedding("bulk filler"))
    await execute(
        manual,
        "INSERT INTO memory_facts (user_id, category, key, key_norm, value, embedding)"
        " SELECT :u, 'bulk', 'k' || g, 'k' || g, 'v' || g, CAST(:v AS vector)"
        " FROM generate_series(1, 3000) g",
        u=uid,
        v=base,
    )
    await execute(
        manual,
        "INSERT INTO memory_facts (user_id, category, key, key_norm, value, embedding)"
        " VALUES (:u, 'notes', 'target', 'target', 'x', CAST(:v AS vector))",
        u=uid,
        v=base,
    )
    target = int(str(await scalar(manual, "SELECT max(id) FROM memory_facts")))
    vectors = [vector_binary(hashed_embedding(f"vector number {i}")) for i in range(2)]
    pace = random.Random(1)

    async def index() -> None:
        async with AsyncSession(manual.engine) as session, session.begin():
            await FactVectorRepository(session=session).index_queued(10_000)

    async def write(vector: bytes, delay: float) -> None:
        await asyncio.sleep(delay)
        async with manual.engine.begin() as conn:
            await conn.execute(
                text("UPDATE memory_facts SET embedding = CAST(:v AS vector) WHERE id = :i"),
                {"v": vector, "i": target},
            )

    for round_ in range(60):
        await execute(
            manual,
            "INSERT INTO memory_fact_vector_queue (fact_id, user_id)"
            " SELECT id, user_id FROM memory_facts ON CONFLICT DO NOTHING",
        )
        await asyncio.gather(index(), write(vectors[round_ % 2], pace.uniform(0, 0.006)))
        await index()  # what the write queued again, if it came after the lock
        fresh = await scalar(
            manual,
            "SELECT v.embedding = CAST(l2_normalize(f.embedding) AS halfvec(768))"
            " FROM memory_facts f JOIN memory_fact_vectors v ON v.fact_id = f.id"
            " WHERE f.id = :i",
            i=target,
        )
        assert fresh is True, f"round {round_}: the index holds an old vector, nothing queued"


async def test_a_near_tie_keeps_the_same_hit_before_and_after_indexing(manual: Memory) -> None:
    """Two facts 1e-5 apart: the queued side ranked them by the exact distance, the index by
    the half-precision one, which orders them the other way; with limit=1 the hit changed
    once they were indexed. Both sides now choose by the index's distance."""
    uid = await new_user(manual)
    query = "zzqx probe wording"
    a_vec, b_vec = near_tie(hashed_embedding(query), 0.1)
    a = await manual.store.upsert_fact("notes", "alpha", "first plain value", user_id=uid)
    b = await manual.store.upsert_fact("notes", "beta", "second plain value", user_id=uid)
    for fact_id, vector in ((a.id, a_vec), (b.id, b_vec)):
        await execute(
            manual,
            "UPDATE memory_facts SET embedding = CAST(:v AS vector) WHERE id = :i",
            v=vector_binary(vector),
            i=fact_id,
        )
    assert await manual.store.pending_fact_count() == 2
    queued = await manual.store.search_facts(query, user_id=uid, limit=1)
    await manual.store.index_pending_facts()
    assert await manual.store.pending_fact_count() == 0
    indexed = await manual.store.search_facts(query, user_id=uid, limit=1)
    assert [(h.id, h.via, h.distance) for h in queued] == [
        (h.id, h.via, h.distance) for h in indexed
    ]
    assert [h.via for h in indexed] == ["vector"]
