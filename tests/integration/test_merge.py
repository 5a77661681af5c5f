"""Dedupe/merge of differently spelled keys, unmerge, and atomicity under concurrent writers."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    Memory,
    NotFoundError,
    request_context,
)
from navi_memory.llm import embedding_text_for_fact
from navi_memory.repositories.facts import category_lock_scope
from navi_memory.services.facts import FactService, FactWrite
from navi_memory.unit_of_work import unit_of_work
from tests.integration.factories import execute, new_user, scalar, wait_for_a_sleeping_statement

MERGE = [
    ("language", "preferred_language"),
    ("Editor", "editor"),
    ("home-city", "home_city"),
    ("favourite_colour", "favorite_color"),
    ("os", "operating_system"),
    ("timezone", "tz"),
    ("date_of_birth", "dob"),
    # an application's camelCase or PascalCase against the extractor's snake_case
    ("GitHub_username", "github_username"),
    ("phoneNumber", "phonenumber"),
    ("jobTitle", "job_title"),
]
KEEP_APART = [
    ("home_city", "work_city"),
    ("first_name", "last_name"),
    ("name", "first_name"),
    ("start_date", "end_date"),
    ("python_version", "node_version"),
]


async def visible_keys(memory: Memory, uid: uuid.UUID, category: str = "p") -> list[str]:
    return sorted(
        f.key for f in await memory.store.get_all_facts(user_id=uid) if f.category == category
    )


@pytest.mark.parametrize(("old", "new"), MERGE)
async def test_another_spelling_merges_into_the_new_spelling(
    memory: Memory, old: str, new: str
) -> None:
    uid = await new_user(memory)
    first = await memory.store.upsert_fact("p", old, "aardvark", user_id=uid)
    second = await memory.store.upsert_fact("p", new, "zebra", user_id=uid, dedupe=True)
    assert second.id != first.id
    assert second.value == "zebra"
    assert await visible_keys(memory, uid) == [new]
    everything = await memory.store.get_all_facts(user_id=uid, include_merged=True)
    hidden = [f for f in everything if f.id == first.id]
    assert hidden[0].merged_into == second.id
    assert hidden[0].value == "aardvark"  # kept as it was, only hidden
    assert await memory.store.fact_count(user_id=uid) == 1
    assert await memory.store.fact_count(user_id=uid, include_merged=True) == 2
    assert await memory.store.search_facts("aardvark", user_id=uid) == []
    assert [h.id for h in await memory.store.search_facts("zebra", user_id=uid)] == [second.id]


@pytest.mark.parametrize(("a", "b"), KEEP_APART)
async def test_distinct_keys_are_not_merged(memory: Memory, a: str, b: str) -> None:
    uid = await new_user(memory)
    await memory.store.upsert_fact("p", a, "x", user_id=uid)
    await memory.store.upsert_fact("p", b, "y", user_id=uid, dedupe=True)
    assert await visible_keys(memory, uid) == sorted([a, b])


async def test_without_dedupe_spellings_stay_separate(memory: Memory) -> None:
    uid = await new_user(memory)
    await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid)
    assert await visible_keys(memory, uid) == ["language", "preferred_language"]


async def test_merges_stay_inside_one_category(memory: Memory) -> None:
    uid = await new_user(memory)
    await memory.store.upsert_fact("home", "city", "Utrecht", user_id=uid)
    await memory.store.upsert_fact("work", "City", "Amsterdam", user_id=uid, dedupe=True)
    assert len(await memory.store.get_all_facts(user_id=uid)) == 2


async def test_dedupe_sweeps_up_existing_duplicate_spellings(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("p", "language", "English", user_id=uid)
    await store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid)
    kept = await store.upsert_fact("p", "language", "Frisian", user_id=uid, dedupe=True)
    assert await visible_keys(memory, uid) == ["language"]
    rows = await store.get_all_facts(user_id=uid, include_merged=True)
    assert {f.key: f.merged_into for f in rows} == {"language": None, "preferred_language": kept.id}


async def test_chains_are_flattened_so_merged_into_always_points_at_a_visible_row(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    store = memory.store
    a = await store.upsert_fact("p", "lang", "English", user_id=uid)
    b = await store.upsert_fact("p", "language", "Dutch", user_id=uid, dedupe=True)
    c = await store.upsert_fact("p", "preferred_language", "Frisian", user_id=uid, dedupe=True)
    rows = {f.id: f for f in await store.get_all_facts(user_id=uid, include_merged=True)}
    assert rows[a.id].merged_into == c.id
    assert rows[b.id].merged_into == c.id
    assert rows[c.id].merged_into is None


@pytest.mark.parametrize("dedupe", [False, True])
async def test_writing_a_hidden_spelling_again_updates_the_fact_it_was_merged_into(
    memory: Memory, dedupe: bool
) -> None:
    uid = await new_user(memory)
    store = memory.store
    old = await store.upsert_fact("p", "language", "English", user_id=uid)
    survivor = await store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    written = await store.upsert_fact("p", "language", "German", user_id=uid, dedupe=dedupe)
    assert written.id == survivor.id
    assert (written.key, written.value) == ("preferred_language", "German")
    rows = {f.id: f for f in await store.get_all_facts(user_id=uid, include_merged=True)}
    assert rows[old.id].merged_into == survivor.id
    assert rows[old.id].value == "English"


async def test_setting_merged_into_null_brings_a_hidden_row_back(memory: Memory) -> None:
    uid = await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    async with memory.engine.begin() as conn:
        await conn.execute(
            text("UPDATE memory_facts SET merged_into = NULL WHERE id = :i"), {"i": old.id}
        )
    assert await visible_keys(memory, uid) == ["language", "preferred_language"]


async def test_unmerge_fact_undoes_a_merge(memory: Memory) -> None:
    uid = await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    with request_context(user_id=uid):
        restored = await memory.store.unmerge_fact(old.id)
    assert restored.merged_into is None
    assert restored.value == "English"
    assert await visible_keys(memory, uid) == ["language", "preferred_language"]
    with request_context(user_id=uid), pytest.raises(InvalidInputError, match="not merged"):
        await memory.store.unmerge_fact(old.id)


async def test_unmerge_racing_a_delete_of_its_survivor_is_not_found(memory: Memory) -> None:
    """A delete holding the category's lock removes the survivor and the rows behind it while
    unmerge_fact waits for that lock: the unmerge answers NotFoundError (it reads the row
    after the lock), not a StorageError about an instance it could not refresh."""
    uid = await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    survivor = await memory.store.upsert_fact(
        "p", "preferred_language", "German", user_id=uid, dedupe=True
    )

    async def unmerge() -> object:
        with request_context(user_id=uid):
            return await memory.store.unmerge_fact(old.id)

    async with memory.engine.connect() as conn:
        await conn.begin()
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:s, 0))"),
            {"s": category_lock_scope(uid, "p")},
        )
        task = asyncio.create_task(unmerge())
        await asyncio.sleep(0.5)  # the unmerge is waiting for the lock
        assert not task.done()
        await conn.execute(
            text("DELETE FROM memory_facts WHERE merged_into = :s OR id = :s"),
            {"s": survivor.id},
        )
        await conn.commit()
    with pytest.raises(NotFoundError, match=f"fact {old.id} does not exist"):
        await task


async def test_unmerge_fact_reads_the_row_after_the_lock(memory: Memory) -> None:
    """A row unmerged by SQL while unmerge_fact waits for the lock is refused as not merged."""
    uid = await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "German", user_id=uid, dedupe=True)

    async def unmerge() -> object:
        with request_context(user_id=uid):
            return await memory.store.unmerge_fact(old.id)

    async with memory.engine.connect() as conn:
        await conn.begin()
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:s, 0))"),
            {"s": category_lock_scope(uid, "p")},
        )
        task = asyncio.create_task(unmerge())
        await asyncio.sleep(0.5)
        await conn.execute(
            text("UPDATE memory_facts SET merged_into = NULL WHERE id = :i"), {"i": old.id}
        )
        await conn.commit()
    with pytest.raises(InvalidInputError, match="not merged"):
        await task


async def test_unmerge_refuses_when_the_key_is_taken_again_and_hides_other_users_rows(
    memory: Memory,
) -> None:
    uid, other = await new_user(memory), await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    async with memory.engine.begin() as conn:  # a visible 'language' row again, by hand
        await conn.execute(
            text(
                "INSERT INTO memory_facts (user_id, category, key, value) "
                "VALUES (:u, 'p', 'language', 'Klingon')"
            ),
            {"u": uid},
        )
    with request_context(user_id=uid), pytest.raises(InvalidInputError, match="already uses"):
        await memory.store.unmerge_fact(old.id)
    with request_context(user_id=other), pytest.raises(NotFoundError):
        await memory.store.unmerge_fact(old.id)
    with pytest.raises(NotFoundError):  # no user and no read_all: not even told it exists
        await memory.store.unmerge_fact(old.id)
    with (
        request_context(permissions=[PERMISSION_READ_ALL]),
        pytest.raises(InvalidInputError, match="already uses"),
    ):
        await memory.store.unmerge_fact(old.id)


@pytest.mark.parametrize("dedupe", [False, True])
async def test_twenty_concurrent_upserts_of_one_key_leave_one_visible_row(
    busy_memory: Memory, dedupe: bool
) -> None:
    memory = busy_memory
    uid = await new_user(memory)
    await asyncio.gather(
        *(
            memory.store.upsert_fact("p", "editor", f"editor {i}", user_id=uid, dedupe=dedupe)
            for i in range(20)
        )
    )
    facts = await memory.store.get_all_facts(user_id=uid, include_merged=True)
    assert len(facts) == 1
    assert facts[0].merged_into is None


async def test_twenty_concurrent_spellings_with_dedupe_leave_one_visible_row(
    busy_memory: Memory,
) -> None:
    memory = busy_memory
    uid = await new_user(memory)
    spellings = ["language", "preferred_language", "Language", "lang", "preferredLanguage"]
    await asyncio.gather(
        *(
            memory.store.upsert_fact(
                "p", spellings[i % len(spellings)], f"v{i}", user_id=uid, dedupe=True
            )
            for i in range(20)
        )
    )
    facts = await memory.store.get_all_facts(user_id=uid, include_merged=True)
    visible = [f for f in facts if f.merged_into is None]
    assert len(visible) == 1
    assert {f.merged_into for f in facts if f.merged_into is not None} <= {visible[0].id}
    assert len(facts) == len({f.key for f in facts})  # one row per spelling, no duplicates


async def test_an_unmerge_survives_the_next_dedupe_write_of_either_spelling(
    memory: Memory,
) -> None:
    """unmerge_fact records that the user separated the row (``unmerged_at``); later dedupe
    writes — the extractor's, of the survivor's key or of the separated row's own key — leave
    the two apart."""
    uid = await new_user(memory)
    store = memory.store
    old = await store.upsert_fact("p", "language", "English", user_id=uid)
    await store.upsert_fact("p", "preferred_language", "German", user_id=uid, dedupe=True)
    with request_context(user_id=uid):
        await store.unmerge_fact(old.id)
    assert await scalar(
        memory, "SELECT unmerged_at IS NOT NULL FROM memory_facts WHERE id = :i", i=old.id
    )
    await store.upsert_fact("p", "preferred_language", "German", user_id=uid, dedupe=True)
    assert await visible_keys(memory, uid) == ["language", "preferred_language"]
    await store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    assert await visible_keys(memory, uid) == ["language", "preferred_language"]
    again = await store.upsert_fact("p", "language", "Spanish", user_id=uid, dedupe=True)
    assert (again.id, again.key) == (old.id, "language")
    assert await visible_keys(memory, uid) == ["language", "preferred_language"]


async def test_a_new_spelling_merges_the_others_but_not_the_row_the_user_separated(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    store = memory.store
    old = await store.upsert_fact("p", "language", "English", user_id=uid)
    survivor = await store.upsert_fact(
        "p", "preferred_language", "German", user_id=uid, dedupe=True
    )
    with request_context(user_id=uid):
        await store.unmerge_fact(old.id)
    newest = await store.upsert_fact("p", "Preferred-Language", "French", user_id=uid, dedupe=True)
    rows = {
        f.id: f.merged_into for f in await store.get_all_facts(user_id=uid, include_merged=True)
    }
    assert rows == {old.id: None, survivor.id: newest.id, newest.id: None}


async def stored_vector(memory: Memory, fact_id: int) -> list[float] | None:
    got = await scalar(memory, "SELECT embedding::text FROM memory_facts WHERE id = :i", i=fact_id)
    return None if got is None else [float(x) for x in str(got).strip("[]").split(",")]


async def expected_vector(memory: Memory, category: str, key: str, value: str) -> list[float]:
    vector = await memory.store._embedding.document(embedding_text_for_fact(category, key, value))
    assert vector is not None
    return list(vector)


def close(got: list[float] | None, want: list[float]) -> bool:
    return got is not None and max(abs(x - y) for x, y in zip(got, want, strict=True)) < 1e-5


@pytest.mark.parametrize("dedupe", [False, True])
async def test_a_write_through_a_hidden_spelling_stores_the_vector_of_the_survivors_key(
    memory: Memory, dedupe: bool
) -> None:
    """The text embedded for a fact is its own ``category / key: value``: a value written
    under a hidden spelling is stored on the survivor, so its vector embeds the survivor's
    key, not the spelling the caller used."""
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("p", "language", "English", user_id=uid)
    survivor = await store.upsert_fact(
        "p", "preferred_language", "German", user_id=uid, dedupe=True
    )
    written = await store.upsert_fact("p", "language", "French", user_id=uid, dedupe=dedupe)
    assert (written.id, written.key, written.has_embedding) == (
        survivor.id,
        "preferred_language",
        True,
    )
    want = await expected_vector(memory, "p", "preferred_language", "French")
    assert close(await stored_vector(memory, survivor.id), want)
    # The same value, on a survivor that has no vector yet: it gets its own key's vector too.
    await execute(memory, "UPDATE memory_facts SET embedding = NULL WHERE id = :i", i=survivor.id)
    again = await store.upsert_fact("p", "language", "French", user_id=uid, dedupe=dedupe)
    assert again.has_embedding
    assert close(await stored_vector(memory, survivor.id), want)


async def test_a_connection_lost_while_embedding_the_survivors_key_keeps_the_committed_write(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    """A write through a hidden spelling commits the value on the row it was merged into, then
    gives that row the vector of its own key in a second transaction. A connection lost in
    the second is not the write's failure: the caller gets the stored fact (without a vector,
    which backfill gives it), never an error saying nothing was committed."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    survivor = await memory.store.upsert_fact(
        "p", "preferred_language", "Dutch", user_id=uid, dedupe=True
    )
    await execute(
        memory,
        "CREATE OR REPLACE FUNCTION navi_test_slow() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_sleep(5); RETURN NEW; END $$",
    )
    await execute(
        memory,
        "CREATE TRIGGER slow BEFORE UPDATE OF embedding ON memory_facts FOR EACH ROW"
        " WHEN (OLD.embedding IS NULL AND NEW.embedding IS NOT NULL)"
        " EXECUTE FUNCTION navi_test_slow()",
    )

    async def end_the_sleeper() -> None:
        await wait_for_a_sleeping_statement(memory)
        await execute(
            memory,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE wait_event = 'PgSleep' AND datname = current_database()",
        )

    ender = asyncio.create_task(end_the_sleeper())
    try:
        written = await memory.store.upsert_fact("p", "language", "French", user_id=uid)
    finally:
        await ender
        await execute(memory, "DROP TRIGGER slow ON memory_facts")
    assert (written.id, written.key, written.value) == (survivor.id, "preferred_language", "French")
    assert not written.has_embedding
    assert "memory.fact_vector_failed" in caplog.text
    assert await scalar(memory, "SELECT value FROM memory_facts WHERE id = :i", i=survivor.id) == (
        "French"
    )
    assert await memory.store.backfill_embeddings() == 1
    assert await scalar(
        memory, "SELECT embedding IS NOT NULL FROM memory_facts WHERE id = :i", i=survivor.id
    )


async def test_a_purge_and_an_extraction_writing_two_categories_never_deadlock(
    memory: Memory,
) -> None:
    """A purge locked only the categories where an expired fact had a live row behind it,
    then deleted every expired row of the user: an extraction holding category a (reviving
    an expired fact there, its row locked) and waiting for b's lock, which the purge held
    while its delete waited for a's row, was a deadlock ("deadlock detected": the purge
    failed, or the extraction). The purge takes every category's lock holding an expired
    fact, first, in writers' order: it waits for the extraction and then purges."""
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("a", "editor", "vim", user_id=uid)
    await store.upsert_fact("b", "language", "en", user_id=uid)
    await store.upsert_fact("b", "preferred_language", "de", user_id=uid, dedupe=True)
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 hour' "
        "WHERE user_id = :u AND key IN ('editor', 'preferred_language')",
        u=uid,
    )

    def write(category: str, key: str, value: str) -> FactWrite:
        return FactWrite(
            user_id=uid,
            category=category,
            key=key,
            value=value,
            source="conversation",
            confidence=70,
            expires_days=None,
            source_context=None,
            embedding=None,
        )

    async with unit_of_work(memory.sessionmaker) as session:  # an extraction's transaction
        await FactService().write(session, write("a", "editor", "vim"), dedupe=True)
        with request_context(permissions=[PERMISSION_READ_ALL]):
            purge = asyncio.create_task(memory.admin.purge_expired(uid))
        await asyncio.sleep(1.0)  # the purge is at its locks
        await FactService().write(session, write("b", "preferred_language", "fr"), dedupe=True)
    result = await asyncio.wait_for(purge, 30)
    assert result.expired == 0  # both revived by the extraction before the purge went on
    visible = {(f.category, f.key): f.value for f in await store.get_all_facts(uid)}
    assert visible == {("a", "editor"): "vim", ("b", "preferred_language"): "fr"}
