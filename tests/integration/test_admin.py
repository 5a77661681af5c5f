"""memory.admin: export and import of one user, stats, purge_expired, and who may call them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
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
from navi_memory.constants import EXPORT_FORMAT, EXPORT_FORMAT_VERSION, INJECTED_LEDGER_KEY
from navi_memory.schemas import ExportChunk, ExportExtraction, ExportFact, ExportSession
from navi_memory.services.transfer import import_refusals
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import (
    execute,
    new_session_row,
    new_user,
    scalar,
    slow_trigger,
    wait_for_a_sleeping_statement,
)
from tests.integration.test_review_fixes import holding_category_lock
from tests.integration.test_search import draft
from tests.seed import seed_user


def admin() -> request_context:
    return request_context(permissions=[PERMISSION_READ_ALL])


def dumped(records: list[Any]) -> list[dict[str, Any]]:
    return [record.model_dump(mode="json") for record in records]


@pytest.fixture
async def other_memory(trgm_db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A second database (another clone at head) to import into."""
    async with open_memory(make_settings(trgm_db_url, fake_ollama)) as opened:
        yield opened


async def test_export_import_export_across_databases_gives_the_same_records(
    memory: Memory, other_memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Every value, timestamp, merge link, message, breadcrumb, ledger entry and vector comes
    back; the merge link and the ledger point at the new rows."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-api")
    with admin():
        first = await memory.admin.export_user(uid, with_vectors=True)
        result = await other_memory.admin.import_user(first)
        again = await other_memory.admin.export_user(uid, with_vectors=True)
    assert dumped(again) == dumped(first)
    assert result.user_id == uid and result.rows["fact"] == 3 and result.rows["chunk"] >= 1

    facts = [r for r in first if isinstance(r, ExportFact)]
    hidden = next(f for f in facts if f.merged_into is not None)
    assert hidden.key == "language" and hidden.merged_into == "f2"
    assert all(f.embedding is not None and len(f.embedding) == 768 for f in facts)
    session = next(r for r in first if isinstance(r, ExportSession))
    chunks = [r for r in first if isinstance(r, ExportChunk)]
    assert session.session_metadata[INJECTED_LEDGER_KEY] == [c.ref for c in chunks]
    assert "port 8099" in chunks[0].breadcrumbs

    # In the new database the links are its own ids.
    survivor = await scalar(
        other_memory, "SELECT id FROM memory_facts WHERE key = 'preferred_language'"
    )
    assert (
        await scalar(other_memory, "SELECT merged_into FROM memory_facts WHERE key = 'language'")
        == survivor
    )
    ledger = await scalar(
        other_memory, f"SELECT session_metadata->'{INJECTED_LEDGER_KEY}' FROM sessions"
    )
    chunk_ids = await scalar(other_memory, "SELECT array_agg(id ORDER BY id) FROM memory_chunks")
    assert isinstance(chunk_ids, list) and ledger == chunk_ids
    # Imported vectors are searchable: the chunk vectors were queued for the index.
    with request_context(user_id=uid):
        hits = await other_memory.store.search_facts("preferred language")
        assert hits[0].key == "preferred_language" and hits[0].via == "vector"
        history = await other_memory.sessions.history("s-api")
    assert [m.role for m in history][:2] == ["tool_call", "user"]


async def test_import_refuses_to_overwrite_unless_told_and_then_replaces(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Importing into a user who holds memory is refused with nothing written; replace=True
    deletes the old memory first; another user's session ids need a session prefix."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-one")
    with admin():
        records = await memory.admin.export_user(uid)
        before = await memory.admin.stats(uid)
        with pytest.raises(InvalidInputError, match="already holds memory"):
            await memory.admin.import_user(records)
        assert await memory.admin.stats(uid) == before

        with request_context(user_id=uid):
            await memory.store.upsert_fact("notes", "extra", "to be replaced")
        replaced = await memory.admin.import_user(records, replace=True)
        assert replaced.replaced
        assert [r for r in dumped(await memory.admin.export_user(uid))] == dumped(records)

        copy = uuid.uuid4()
        with pytest.raises(InvalidInputError, match="'s-one' belong"):
            await memory.admin.import_user(records, user_id=copy)
        assert await memory.users.get(copy) is None  # nothing written, not even the user
        await memory.admin.import_user(records, user_id=copy, session_prefix="copy-")
        copied = await memory.sessions.list(user_id=copy)
    assert [s.id for s in copied] == ["copy-s-one"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r[1:], "starts with its header"),
        (lambda r: [r[0].model_copy(update={"version": 99}), *r[1:]], "version 99"),
        (lambda r: [*r, {"type": "fact", "ref": "x"}], r"record 4 .*category"),
        (
            lambda r: [*r, {**r[1].model_dump(), "ref": "f9", "merged_into": "f77"}],
            "'f77', which is not in the export",
        ),
        (lambda r: [*r, r[1]], "repeats the fact ref"),
        (lambda r: [*r, {**r[1].model_dump(), "value": "a\x00b", "ref": "f8"}], "NUL"),
    ],
)
async def test_a_malformed_export_is_refused_whole(
    memory: Memory, change: Any, message: str
) -> None:
    """A broken export is an InvalidInputError that says what is wrong, and writes nothing."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("p", "a", "alpha")
        await memory.store.upsert_fact("p", "b", "beta")
    with admin():
        records = await memory.admin.export_user(uid)
        assert len(records) == 3
        target = uuid.uuid4()
        with pytest.raises(InvalidInputError, match=message):
            await memory.admin.import_user(change(records), user_id=target)
        assert await memory.users.get(target) is None


@pytest.mark.parametrize(
    ("kind", "change", "field"),
    [
        ("fact", {"category": "c" * 100_000}, "category"),
        ("fact", {"key": ""}, "key"),
        ("fact", {"key": "editor "}, "key"),  # upsert_fact stores it trimmed
        ("fact", {"category": " preferences"}, "category"),
        ("fact", {"value": "a\ud800b"}, "value"),
        ("fact", {"confidence": 10**6}, "confidence"),
        ("fact", {"confidence": -5}, "confidence"),
        # a number given as another type was once converted quietly
        ("fact", {"confidence": "90"}, "confidence"),
        ("fact", {"confidence": True}, "confidence"),
        ("fact", {"confidence": 90.0}, "confidence"),
        ("message", {"seq": 1.0}, "seq"),
        ("chunk", {"start_seq": "0"}, "start_seq"),
        ("fact", {"source": "bogus"}, "source"),
        ("fact", {"created_at": "2024-01-01T00:00:00"}, "created_at"),
        ("fact", {"created_at": "0001-01-01T00:00:00+01:00"}, "created_at"),
        ("fact", {"embedding": [0.1, 0.2]}, "embedding"),
        ("header", {"name": "a\ud800b"}, "name"),
        ("chunk", {"content_hash": "0" * 64}, "content_hash"),
        ("chunk", {"start_seq": 5, "end_seq": 1}, "end"),
        ("chunk", {"start_seq": 2**40}, "start_seq"),
        ("chunk", {"started_at": "2024-01-01T00:00:00"}, "time zone"),
        ("chunk", {"breadcrumbs": ["a\ud800b"]}, "breadcrumb"),
        ("session", {"title": "t" * 1_000_000}, "title"),
        ("session", {"session_metadata": {"x": float("nan")}}, "session_metadata"),
        ("session", {"session_metadata": {INJECTED_LEDGER_KEY: [{"a": 1}]}}, "ledger"),
        ("message", {"seq": 2**40}, "seq"),
        ("message", {"tool_args": {"a\ud800": 1}}, "tool_args"),
        ("kv", {"scope": "s" * 100_000}, "scope"),
        ("extraction", {"failures": -1}, "failures"),
        ("extraction", {"failures": True}, "failures"),
        ("extraction", {"failures": 1.0}, "failures"),
        ("extraction", {"failures": "3"}, "failures"),
        ("extraction", {"failures": 2**31}, "failures"),
        ("extraction", {"failures": None}, "failures"),
    ],
)
async def test_an_import_checks_every_record_as_the_live_api_checks_its_input(
    memory: Memory, fake_ollama: FakeOllama, kind: str, change: dict[str, Any], field: str
) -> None:
    """A record the live API would refuse is refused on import with InvalidInputError naming
    the record and the field, and nothing is written, instead of being stored or ending in a
    StorageError."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-bad")
    with admin():
        records = dumped(await memory.admin.export_user(uid, with_vectors=True))
        number = next(n for n, r in enumerate(records, 1) if r["type"] == kind)
        records[number - 1] = {**records[number - 1], **change}
        target = uuid.uuid4()
        with pytest.raises(InvalidInputError, match=rf"record {number}\b.*{kind}.*{field}"):
            await memory.admin.import_user(records, user_id=target, session_prefix="p-")
        assert await memory.users.get(target) is None


@pytest.mark.parametrize("category", ["Work ", "Work", " work", "cafe\u0301"])
async def test_an_import_refuses_a_forget_whose_category_is_not_folded(
    memory: Memory, category: str
) -> None:
    """A forget's category is stored folded (an extraction looks it up so): "Work " was
    imported as written and the forget then matched nothing, quietly."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("p", "a", "alpha")
    with admin():
        records = dumped(await memory.admin.export_user(uid))
        forget = {
            "type": "forgotten",
            "category": category,
            "key_norm": "homecity",
            "forgotten_at": "2026-12-01T00:00:00+00:00",
        }
        target = uuid.uuid4()
        number = len(records) + 1
        with pytest.raises(InvalidInputError, match=rf"record {number}\b.*forgotten.*folded"):
            await memory.admin.import_user([*records, forget], user_id=target)
        assert await memory.users.get(target) is None
        folded = {**forget, "category": "work"}
        result = await memory.admin.import_user([*records, folded], user_id=target)
    assert result.rows["forgotten"] == 1


async def test_an_import_keeps_chunks_and_kv_entries_out_of_sessions_not_theirs(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A chunk naming another user's session is refused as that user's session would be; a kv
    entry must name a session of the export, as kv.set needs one of the user's sessions."""
    sam, kim = uuid.uuid4(), await new_user(memory)
    await seed_user(memory, fake_ollama, sam, "s-sam")
    with request_context(user_id=kim):
        await memory.sessions.create("k-1")
    with admin():
        records = dumped(await memory.admin.export_user(sam))
        chunk = next(n for n, r in enumerate(records) if r["type"] == "chunk")
        into_kim = [
            *records[:chunk],
            {**records[chunk], "session_id": "k-1"},
            *records[chunk + 1 :],
        ]
        with pytest.raises(InvalidInputError, match="'k-1' belong"):
            await memory.admin.import_user(into_kim, replace=True)
        kv = next(n for n, r in enumerate(records) if r["type"] == "kv" and r["session_id"])
        orphan = [*records[:kv], {**records[kv], "session_id": "gone"}, *records[kv + 1 :]]
        with pytest.raises(InvalidInputError, match="'gone', which is not in the export"):
            await memory.admin.import_user(orphan, replace=True)
        assert dumped(await memory.admin.export_user(sam)) == records


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (None, "records must be"),
        (5, "records must be"),
        ("header", "records must be"),
        (
            [
                {
                    "type": "header",
                    "format": EXPORT_FORMAT,
                    "version": EXPORT_FORMAT_VERSION,
                    "user_id": str(uuid.uuid4()),
                    "created_at": "2024-01-01T00:00:00+00:00",
                },
                5,
            ],
            "record 2 .*int",
        ),
    ],
)
async def test_an_import_of_something_other_than_records_is_a_type_error(
    memory: Memory, records: Any, message: str
) -> None:
    """import_user(None) or a list holding a non-record is InvalidTypeError, not a raw
    TypeError or AttributeError."""
    with admin(), pytest.raises(InvalidTypeError, match=message):
        await memory.admin.import_user(records, user_id=uuid.uuid4())


async def test_admin_calls_need_read_all_and_never_write_into_another_user(
    memory: Memory,
) -> None:
    """Without read_all every admin call is refused; acting for one user, an import into
    another user is refused even with read_all."""
    sam, kim = await new_user(memory), await new_user(memory)
    for call in (
        memory.admin.stats(),
        memory.admin.purge_expired(),
        memory.admin.export_user(sam),
        memory.admin.import_user([], user_id=sam),
    ):
        with pytest.raises(PermissionDeniedError, match=PERMISSION_READ_ALL):
            await call
    with request_context(user_id=sam, permissions=[PERMISSION_READ_ALL]):
        records = await memory.admin.export_user(sam)
        with pytest.raises(PermissionDeniedError, match="another user"):
            await memory.admin.import_user(records, user_id=kim)
        with pytest.raises(PermissionDeniedError):
            await memory.admin.purge_expired(kim)
    with admin(), pytest.raises(NotFoundError):
        await memory.admin.export_user(uuid.uuid4())


async def test_acting_for_one_user_an_import_named_by_its_header_cannot_replace_another(
    memory: Memory,
) -> None:
    """Without user_id an import goes to the header's user: acting for sam, an export whose
    header names kim is refused even with read_all and replace=True; kim keeps her memory."""
    sam, kim = await new_user(memory), await new_user(memory)
    with request_context(user_id=kim):
        await memory.store.upsert_fact("p", "kims", "kim's own fact")
    with request_context(user_id=sam):
        await memory.store.upsert_fact("p", "a", "alpha")
    with request_context(user_id=sam, permissions=[PERMISSION_READ_ALL]):
        records = await memory.admin.export_user(sam)
        as_kim = [records[0].model_copy(update={"user_id": kim}), *records[1:]]
        with pytest.raises(PermissionDeniedError, match="another user"):
            await memory.admin.import_user(as_kim, replace=True)
        with pytest.raises(PermissionDeniedError, match="another user"):
            await memory.admin.import_user(dumped(as_kim), replace=True)
        # Its own export, into itself, is still allowed.
        assert (await memory.admin.import_user(records, replace=True)).user_id == sam
    with request_context(user_id=kim):
        assert [f.key for f in await memory.store.get_all_facts()] == ["kims"]


async def test_acting_for_one_user_admin_calls_without_user_id_cover_that_user_only(
    memory: Memory,
) -> None:
    """Acting for sam (with read_all), purge_expired() and stats() mean sam, as user_id=None
    does everywhere; kim's expired fact stays. With no current user they cover everyone."""
    sam, kim = await new_user(memory), await new_user(memory)
    for uid in (sam, kim):
        with request_context(user_id=uid):
            await memory.store.upsert_fact("p", "ticket", "VPN-1")
    await execute(memory, "UPDATE memory_facts SET expires_at = now() - interval '1 hour'")
    with request_context(user_id=sam, permissions=[PERMISSION_READ_ALL]):
        assert [u.user_id for u in (await memory.admin.stats()).per_user] == [sam]
        purged = await memory.admin.purge_expired()
    assert purged.expired == 1
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE user_id = :u", u=kim) == 1
    with admin():
        assert {u.user_id for u in (await memory.admin.stats()).per_user} == {kim, sam}
        assert (await memory.admin.purge_expired()).expired == 1


@pytest.mark.parametrize(
    ("call", "flag"),
    [
        (lambda m, uid, recs: m.admin.purge_expired(uid, dry_run="no"), "dry_run"),
        (lambda m, uid, recs: m.admin.purge_expired(uid, dry_run=None), "dry_run"),
        (lambda m, uid, recs: m.admin.export_user(uid, with_vectors="no"), "with_vectors"),
        (lambda m, uid, recs: m.admin.export_user(uid, with_vectors=1), "with_vectors"),
        (lambda m, uid, recs: m.admin.import_user(recs, user_id=uid, replace="no"), "replace"),
        (lambda m, uid, recs: m.admin.stats(uid, users="5"), "users"),
    ],
    ids=["dry_run-str", "dry_run-None", "with_vectors-str", "with_vectors-int", "replace", "users"],
)
async def test_admin_flags_of_the_wrong_type_are_refused_before_anything_happens(
    memory: Memory, call: Any, flag: str
) -> None:
    """A flag given as "no", 1 or None is an InvalidTypeError naming it, not its truth value:
    purge_expired(dry_run="no") used to delete nothing yet report dry_run=False."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("p", "ticket", "VPN-1")
    await execute(memory, "UPDATE memory_facts SET expires_at = now() - interval '1 hour'")
    with admin():
        records = await memory.admin.export_user(uid)
        with pytest.raises(InvalidTypeError, match=flag):
            await call(memory, uid, records)
    assert await scalar(memory, "SELECT count(*) FROM memory_facts") == 1


async def test_stats_count_per_table_and_per_user(memory: Memory, fake_ollama: FakeOllama) -> None:
    """stats counts hidden, expired and vector-less facts, and attributes rows to their user."""
    sam, kim = uuid.uuid4(), await new_user(memory, "Kim")
    await seed_user(memory, fake_ollama, sam, "s-stats")
    fake_ollama.mode = "fail"
    with request_context(user_id=kim):
        await memory.store.upsert_fact("notes", "a", "no vector here")
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 day' WHERE key = 'vpn_ticket'",
    )
    with admin():
        stats = await memory.admin.stats()
        only_kim = await memory.admin.stats(kim)
    assert stats.tables["navi_users"] == 2 and stats.tables["memory_facts"] == 4
    forgets = stats.tables["memory_fact_forgotten"]
    # A forget asked for in a conversation is kept (against older sessions' extractions).
    with request_context(user_id=kim, session_id="s-kim"):
        await memory.store.forget_facts("a")
    with admin():
        assert (await memory.admin.stats()).tables["memory_fact_forgotten"] > forgets
    assert stats.hidden_facts == 1 and stats.expired_facts == 1
    assert stats.vectors_missing["memory_facts"] == 1
    by_user = {u.user_id: u for u in stats.per_user}
    assert by_user[sam].facts == 2 and by_user[sam].hidden_facts == 1
    assert by_user[sam].expired_facts == 1 and by_user[sam].summary
    assert (
        by_user[sam].sessions == 1 and by_user[sam].messages >= 6 and by_user[sam].kv_entries == 2
    )
    assert by_user[kim].facts == 1 and by_user[kim].facts_without_vector == 1
    assert [u.user_id for u in only_kim.per_user] == [kim]
    assert only_kim.tables == stats.tables  # the totals stay global


async def test_stats_report_what_each_indexer_still_has_to_move(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """stats counts the chunk vector, chunk text and fact vector queues; after the indexers ran
    they are empty."""
    settings = make_settings(
        db_url, fake_ollama, fact_index_in_background=False, chunk_index_in_background=False
    )
    async with open_memory(settings) as manual:
        uid = await new_user(manual)
        sid = await new_session_row(manual, uid)
        for n in range(3):
            await manual.store.upsert_fact("notes", f"k{n}", f"value {n}", user_id=uid)
        await manual.store.add_chunks(
            [draft("User: one"), draft("User: two", start_seq=3)], user_id=uid, session_id=sid
        )
        with admin():
            queued = (await manual.admin.stats()).queues
        assert queued["memory_fact_vector_queue"] == 3
        assert queued["memory_chunk_vector_queue"] == 2
        assert queued["memory_chunk_text_queue"] == 2
        await manual.store.index_pending_facts()
        await manual.store.index_pending_chunks()
        with admin():
            stats = await manual.admin.stats()
        assert {name: stats.queues[name] for name in queued} == dict.fromkeys(queued, 0)
        assert stats.tables["memory_fact_vectors"] == 3
        assert stats.tables["memory_chunk_terms"] == 2


async def test_purge_expired_deletes_expired_facts_and_brings_back_the_rows_behind_them(
    memory: Memory,
) -> None:
    """Expired facts go; the rows hidden behind them that have not expired are made visible
    again, never deleted with them (a merge can always be undone); a dry run only counts; a
    user scope keeps other users' expired facts."""
    sam, kim = await new_user(memory), await new_user(memory)
    for uid in (sam, kim):
        with request_context(user_id=uid):
            await memory.store.upsert_fact("p", "language", "English")
            await memory.store.upsert_fact("p", "preferred_language", "Dutch", dedupe=True)
            await memory.store.upsert_fact("p", "editor", "vim")
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 hour' "
        "WHERE key = 'preferred_language'",
    )
    with admin():
        dry = await memory.admin.purge_expired(dry_run=True)
        assert (dry.expired, dry.hidden, dry.dry_run) == (2, 2, True)
        assert await scalar(memory, "SELECT count(*) FROM memory_facts") == 6
        only_sam = await memory.admin.purge_expired(sam)
        assert (only_sam.expired, only_sam.hidden) == (1, 1)
        facts = await memory.store.get_all_facts(user_id=sam, include_merged=True)
        assert sorted((f.key, f.value, f.merged_into) for f in facts) == [
            ("editor", "vim", None),
            ("language", "English", None),
        ]
        rest = await memory.admin.purge_expired()
    assert (rest.expired, rest.hidden) == (1, 1)
    assert await scalar(memory, "SELECT count(*) FROM memory_facts") == 4
    with request_context(user_id=kim):
        assert [h.key for h in await memory.store.search_facts("English")] == ["language"]


async def insert_fact(
    memory: Memory,
    uid: uuid.UUID,
    key: str,
    *,
    age_hours: int,
    expired: bool = False,
    behind: int | None = None,
) -> int:
    """A row written by hand, ``age_hours`` old (its updated_at), expired or never expiring,
    hidden ``behind`` another row or visible."""
    async with memory.engine.begin() as conn:
        inserted = await conn.execute(
            text(
                "INSERT INTO memory_facts "
                "(user_id, category, key, value, updated_at, expires_at, merged_into) "
                "VALUES (:u, 'p', :k, :k || ' value', now() - make_interval(hours => :age), "
                "CASE WHEN :expired THEN now() - interval '1 minute' END, :behind) RETURNING id"
            ),
            {"u": uid, "k": key, "age": age_hours, "expired": expired, "behind": behind},
        )
        return int(inserted.scalar_one())


async def test_purge_gives_an_expired_facts_key_to_its_newest_live_hidden_row(
    memory: Memory,
) -> None:
    """Behind an expired fact: the most recently updated row that has not expired becomes
    visible, the other live ones are hidden behind it, the expired ones go with the fact."""
    uid = await new_user(memory)
    survivor = await insert_fact(memory, uid, "preferred_language", age_hours=1, expired=True)
    older = await insert_fact(memory, uid, "language", age_hours=30, behind=survivor)
    newer = await insert_fact(memory, uid, "lang", age_hours=20, behind=survivor)
    await insert_fact(memory, uid, "pref_lang", age_hours=10, expired=True, behind=survivor)
    with admin():
        purged = await memory.admin.purge_expired(uid)
    assert (purged.expired, purged.hidden) == (2, 2)
    with request_context(user_id=uid):
        rows = {f.id: f.merged_into for f in await memory.store.get_all_facts(include_merged=True)}
        assert rows == {newer: None, older: newer}
        # The key written again now goes to the row that holds it (or the one it is behind).
        assert (await memory.store.upsert_fact("p", "language", "Dutch")).id == newer


async def test_purge_brings_back_a_hidden_row_with_the_expired_facts_own_key(
    memory: Memory,
) -> None:
    """A hidden duplicate of the very key (legacy adoption makes such rows) takes it over."""
    uid = await new_user(memory)
    survivor = await insert_fact(memory, uid, "language", age_hours=1, expired=True)
    duplicate = await insert_fact(memory, uid, "language", age_hours=5, behind=survivor)
    with admin():
        await memory.admin.purge_expired(uid)
    with request_context(user_id=uid):
        assert [(f.id, f.merged_into) for f in await memory.store.get_all_facts()] == [
            (duplicate, None)
        ]


async def test_purge_hides_rows_behind_a_visible_row_already_holding_their_key(
    memory: Memory,
) -> None:
    """Two expired facts whose live hidden rows share a key, and a visible row holding that key
    already: the visible row keeps it and every rescued row is hidden behind it."""
    uid = await new_user(memory)
    holder = await insert_fact(memory, uid, "tz", age_hours=50)
    first = await insert_fact(memory, uid, "timezone", age_hours=1, expired=True)
    second = await insert_fact(memory, uid, "time_zone", age_hours=1, expired=True)
    one = await insert_fact(memory, uid, "tz", age_hours=5, behind=first)
    two = await insert_fact(memory, uid, "tz", age_hours=3, behind=second)
    with admin():
        await memory.admin.purge_expired(uid)
    with request_context(user_id=uid):
        rows = {f.id: f.merged_into for f in await memory.store.get_all_facts(include_merged=True)}
    assert rows == {holder: None, one: holder, two: holder}
    await execute(memory, "DELETE FROM memory_facts WHERE id = :i", i=holder)
    # Without the holder, the newer of the two takes the key and the other goes behind it.
    uid2 = await new_user(memory)
    first = await insert_fact(memory, uid2, "timezone", age_hours=1, expired=True)
    second = await insert_fact(memory, uid2, "time_zone", age_hours=1, expired=True)
    one = await insert_fact(memory, uid2, "tz", age_hours=5, behind=first)
    two = await insert_fact(memory, uid2, "tz", age_hours=3, behind=second)
    with admin():
        await memory.admin.purge_expired()
    with request_context(user_id=uid2):
        rows = {f.id: f.merged_into for f in await memory.store.get_all_facts(include_merged=True)}
    assert rows == {two: None, one: two}


async def test_get_fact_and_the_category_filter(memory: Memory) -> None:
    """get_fact finds one's own row (hidden too), another's only with read_all; get_all_facts
    narrows to a category."""
    sam, kim = await new_user(memory), await new_user(memory)
    with request_context(user_id=sam):
        await memory.store.upsert_fact("p", "language", "English")
        survivor = await memory.store.upsert_fact("p", "preferred_language", "Dutch", dedupe=True)
        await memory.store.upsert_fact("work", "editor", "vim")
        hidden = next(
            f for f in await memory.store.get_all_facts(include_merged=True) if f.merged_into
        )
        assert (await memory.store.get_fact(hidden.id)).merged_into == survivor.id
        assert [f.key for f in await memory.store.get_all_facts(category="work")] == ["editor"]
    with request_context(user_id=kim), pytest.raises(NotFoundError):
        await memory.store.get_fact(survivor.id)
    with admin():
        assert (await memory.store.get_fact(survivor.id)).key == "preferred_language"


async def test_stats_count_chunk_vectors_awaiting_the_graph(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A user past CHUNK_GRAPH_FROM whose earlier vectors are still beside the HNSW graph: stats
    counts them until the indexer has moved them in."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, chunk_graph_from=3
    )
    async with open_memory(settings) as manual:
        uid = await new_user(manual)
        sid = await new_session_row(manual, uid)
        await manual.store.add_chunks(
            [draft("User: one"), draft("User: two", start_seq=3)], user_id=uid, session_id=sid
        )
        await manual.store.index_pending_chunks()  # 2 chunks: beside the graph
        with admin():
            assert (await manual.admin.stats()).queues["awaiting_graph"] == 0
        # The user grows past 3 by SQL of its own: the indexer has not seen it yet.
        await execute(
            manual,
            "UPDATE memory_chunk_text_stats SET chunks = chunks + 5 WHERE user_id = :u",
            u=uid,
        )
        with admin():
            assert (await manual.admin.stats()).queues["awaiting_graph"] == 2
        await manual.store.index_pending_chunks()
        with admin():
            assert (await manual.admin.stats()).queues["awaiting_graph"] == 0


async def test_session_metadata_that_is_not_an_object_exports_as_empty(memory: Memory) -> None:
    """A host wrote a JSON array into session_metadata: the export reads it as empty."""
    uid = await new_user(memory)
    await memory.sessions.create("s1", user_id=uid)
    await execute(memory, "UPDATE sessions SET session_metadata = '[1, 2]'::jsonb")
    with admin():
        records = await memory.admin.export_user(uid)
    [session] = [r for r in records if isinstance(r, ExportSession)]
    assert session.session_metadata == {}


async def test_an_unmerge_and_a_facts_session_survive_export_and_import(
    memory: Memory, other_memory: Memory
) -> None:
    """A row the user separated (unmerge_fact) stays separated after export and import: a
    dedupe in the new database never merges it again. The session a fact was written from
    (its provenance) comes back too."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        old = await memory.store.upsert_fact("p", "language", "English", session_id="s-1")
        await memory.store.upsert_fact("p", "preferred_language", "Dutch", dedupe=True)
        await memory.store.unmerge_fact(old.id)
    with admin():
        records = await memory.admin.export_user(uid)
        await other_memory.admin.import_user(records)
        again = await other_memory.admin.export_user(uid)
    assert dumped(again) == dumped(records)
    separated = next(r for r in records if isinstance(r, ExportFact) and r.key == "language")
    assert separated.unmerged_at is not None and separated.session_id == "s-1"
    with admin():  # a session prefix renames the provenance too
        copy = uuid.uuid4()
        await memory.admin.import_user(records, user_id=copy, session_prefix="copy-")
    assert (
        await scalar(
            memory,
            "SELECT session_id FROM memory_facts WHERE user_id = :u AND key = 'language'",
            u=copy,
        )
        == "copy-s-1"
    )
    with request_context(user_id=uid):
        written = await other_memory.store.upsert_fact(
            "p", "preferred_language", "Dutch", dedupe=True
        )
        facts = await other_memory.store.get_all_facts(include_merged=True)
    assert written.key == "preferred_language"
    assert sorted((f.key, f.merged_into) for f in facts) == [
        ("language", None),
        ("preferred_language", None),
    ]


async def test_an_export_without_unmerged_at_or_session_id_still_imports(memory: Memory) -> None:
    """Exports written before those fields were carried import as never separated, written
    from no known session."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("p", "editor", "vim", session_id="s-1")
    with admin():
        records = dumped(await memory.admin.export_user(uid))
        for record in records:
            if record["type"] == "fact":
                record.pop("unmerged_at", None)
                record.pop("session_id", None)
        copy = uuid.uuid4()
        await memory.admin.import_user(records, user_id=copy)
        facts = await memory.store.get_all_facts(user_id=copy)
    assert [(f.key, f.value) for f in facts] == [("editor", "vim")]
    assert await scalar(
        memory,
        "SELECT unmerged_at IS NULL AND session_id IS NULL FROM memory_facts WHERE user_id = :u",
        u=copy,
    )


async def test_an_extractions_last_failure_survives_export_and_import(
    memory: Memory, other_memory: Memory
) -> None:
    """session_memory_state.failed_at (a session the model failed on is swept after the
    others) and failures (revision 0030: sweeps leave it for a while) were left out of the
    export: the copy took a failing session first again. An export made before they were
    carried imports with none."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    await memory.store.mark_session_extracted(sid, user_id=uid)
    await execute(
        memory,
        "UPDATE session_memory_state SET failed_at = now() - interval '1 hour', failures = 3 "
        "WHERE session_id = :s",
        s=sid,
    )
    failed = "SELECT (failed_at, failures) FROM session_memory_state WHERE session_id = :s"
    with admin():
        records = await memory.admin.export_user(uid)
        await other_memory.admin.import_user(records)
        assert dumped(await other_memory.admin.export_user(uid)) == dumped(records)
        older = dumped(records)
        for record in older:
            record.pop("failed_at", None)
            record.pop("failures", None)
        copy = uuid.uuid4()
        await memory.admin.import_user(older, user_id=copy, session_prefix="copy-")
    (state,) = [r for r in records if isinstance(r, ExportExtraction)]
    assert state.failed_at is not None and state.failures == 3
    assert await scalar(other_memory, failed, s=sid) == (state.failed_at, 3)
    assert await scalar(memory, failed, s=f"copy-{sid}") == (None, 0)


async def test_purge_of_every_user_commits_user_by_user(busy_memory: Memory) -> None:
    """An all-users purge takes the category locks of one user at a time and commits each
    user's purge before the next: never every user's locks in one transaction (a huge purge
    would exhaust the lock table). While it waits for one user's category, the users before
    it are purged and committed already."""
    memory = busy_memory
    first = uuid.UUID("00000000-0000-4000-8000-000000000001")
    last = uuid.UUID("ffffffff-ffff-4fff-bfff-ffffffffffff")
    for uid in (first, last):
        await memory.users.ensure(uid, None)
        survivor = await insert_fact(memory, uid, "preferred_language", age_hours=1, expired=True)
        await insert_fact(memory, uid, "language", age_hours=5, behind=survivor)
    await execute(memory, "INSERT INTO memory_facts (category, key, value, expires_at) "
                  "VALUES ('p', 'legacy', 'x', now() - interval '1 minute')")  # fmt: skip
    async with holding_category_lock(memory, last, "p"):
        with admin():
            purging = asyncio.create_task(memory.admin.purge_expired())
        # Until the purge waits for the last user's category (or ends, failing below): a
        # deadline, not a count of polls, so a loaded machine's slow purge is waited for.
        async with asyncio.timeout(15):
            while True:
                waiting = await scalar(
                    memory,
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())",
                )
                if waiting or purging.done():
                    break
                await asyncio.sleep(0.01)
        assert waiting == 1
        # The first user's purge is committed: seen from another connection.
        assert await scalar(
            memory,
            "SELECT array_agg(key ORDER BY key) FROM memory_facts WHERE user_id = :u",
            u=first,
        ) == ["language"]
    purged = await purging
    assert (purged.expired, purged.hidden) == (3, 2)
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE expires_at <= now()") == 0


async def test_an_import_is_refused_a_session_id_another_user_keeps_chunks_or_sketches_under(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Session ids are unique across users (sessions.create's rule): an export whose session id
    another user keeps raw chunks or sketches under, with no sessions row (a session their
    application keeps elsewhere), needs a session prefix, and nothing is written."""
    kim = uuid.uuid4()
    await seed_user(memory, fake_ollama, kim, "ext-1")
    with admin():
        records = await memory.admin.export_user(kim)
    await memory.users.delete(kim)

    sam = await new_user(memory, "Sam")
    await memory.store.add_chunks([draft("Sam's own text")], user_id=sam, session_id="ext-1")
    with admin(), pytest.raises(InvalidInputError, match="'ext-1' belong"):
        await memory.admin.import_user(records)
    assert await memory.users.get(kim) is None

    await execute(memory, "DELETE FROM memory_chunks WHERE user_id = :u", u=sam)
    await execute(
        memory,
        "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
        "VALUES (:u, 'scratchpad', 'ext-1', 'plan', 'Sam''s note')",
        u=sam,
    )
    with admin(), pytest.raises(InvalidInputError, match="'ext-1' belong"):
        await memory.admin.import_user(records)
    assert await memory.users.get(kim) is None
    with admin():
        await memory.admin.import_user(records, session_prefix="kim-")
    assert [s.id for s in await memory.sessions.list(user_id=kim)] == ["kim-ext-1"]


@pytest.mark.parametrize("claim", ["add_chunks", "create"])
async def test_an_import_holds_its_session_ids_until_it_commits(
    memory: Memory, fake_ollama: FakeOllama, claim: str
) -> None:
    """An import checks that no other user holds its session ids, then writes for a while:
    another user's first chunks under one of them (a session their application keeps outside
    ``sessions``), or a create of it, wait for the import's commit and are then refused, so
    the id never ends up held by two users."""
    kim = uuid.uuid4()
    await seed_user(memory, fake_ollama, kim, "ext-2")
    with admin():
        records = await memory.admin.export_user(kim)
    await memory.users.delete(kim)
    sam = await new_user(memory, "Sam")
    await slow_trigger(memory, "kv_store", "INSERT", 0.5)  # the import writes sketches last
    try:
        with admin():
            importing = asyncio.create_task(memory.admin.import_user(records))
        await wait_for_a_sleeping_statement(memory)
        with request_context(user_id=sam):
            if claim == "add_chunks":
                with pytest.raises(NotFoundError, match="no session 'ext-2'"):
                    await memory.store.add_chunks([draft("Sam's own text")], session_id="ext-2")
            else:
                with pytest.raises(InvalidInputError, match="'ext-2' is already taken"):
                    await memory.sessions.create("ext-2")
        # Refused: the claim waited for the import's commit (its bucket), then saw its rows.
        await importing
    finally:
        await execute(memory, "DROP TRIGGER IF EXISTS slow ON kv_store")
    holders = await scalar(
        memory,
        "SELECT array_agg(DISTINCT user_id::text) FROM (SELECT user_id FROM memory_chunks "
        "WHERE session_id = 'ext-2' UNION ALL SELECT user_id FROM sessions WHERE id = 'ext-2') h",
    )
    assert holders == [str(kim)]


async def test_an_export_names_the_legacy_rows_an_import_would_refuse(memory: Memory) -> None:
    """Rows a legacy table held (an empty value, blanks around a key: revision 0002 keeps
    them) are exported as they are; import_refusals names each as the import would, and an
    export of what the package writes has none."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("p", "editor", "vim")
        await memory.store.upsert_fact("p", "shell", "fish")
    with admin():
        assert import_refusals(await memory.admin.export_user(uid)) == []
    await execute(memory, "UPDATE memory_facts SET value = '' WHERE key = 'editor'")
    await execute(memory, "UPDATE memory_facts SET key = ' shell ' WHERE key = 'shell'")
    with admin():
        records = await memory.admin.export_user(uid)
        refusals = import_refusals(records)
        assert [line.split(":")[0] for line in refusals] == [
            "record 2 (fact f1)",
            "record 3 (fact f2)",
        ]
        assert "value must not be empty" in refusals[0]
        assert "has blanks around it" in refusals[1]
        with pytest.raises(InvalidInputError) as refused:
            await memory.admin.import_user(records, user_id=uuid.uuid4())
        assert str(refused.value) == refusals[0]


# --- vectors and the model that made them -----------------------------------------------------

OTHER_MODEL = "mxbai-embed-other:latest"


async def vectors_of(memory: Memory, uid: uuid.UUID) -> tuple[int, int]:
    """(facts with a vector, chunks with a vector) of the user."""
    facts = await scalar(
        memory,
        "SELECT count(*) FROM memory_facts WHERE user_id = :u AND embedding IS NOT NULL",
        u=uid,
    )
    chunks = await scalar(
        memory,
        "SELECT count(*) FROM memory_chunks WHERE user_id = :u AND embedding IS NOT NULL",
        u=uid,
    )
    return int(str(facts)), int(str(chunks))


async def test_an_export_names_the_model_of_its_vectors_and_the_same_model_keeps_them(
    memory: Memory, other_memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-model")
    model = await scalar(memory, "SELECT model FROM memory_embedding_model")
    with admin():
        records = await memory.admin.export_user(uid, with_vectors=True)
        plain = await memory.admin.export_user(uid)
        result = await other_memory.admin.import_user(records)
    assert records[0].embedding_model == model  # type: ignore[union-attr]
    assert plain[0].embedding_model is None  # type: ignore[union-attr]
    assert not result.vectors_dropped
    assert await vectors_of(other_memory, uid) == await vectors_of(memory, uid)
    assert await scalar(other_memory, "SELECT model FROM memory_embedding_model") == model


async def test_vectors_of_another_model_are_left_out_of_an_import_for_backfill(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """An export's vectors into a database whose vectors are another model's (here: re-embedded
    with it since) would mix two models' spaces: the rows land without vectors, the result
    says so, and backfill gives them the database's model's."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-old")
    with admin():
        records = dumped(await memory.admin.export_user(uid, with_vectors=True))
    async with open_memory(
        make_settings(str(memory.settings.database_url), fake_ollama, embedding_model=OTHER_MODEL)
    ) as other:
        with admin():
            await other.admin.reembed()
            copy = uuid.uuid4()
            result = await other.admin.import_user(records, user_id=copy, session_prefix="c-")
        assert result.vectors_dropped
        assert await vectors_of(other, copy) == (0, 0)
        fake_ollama.clear()
        assert await other.store.backfill_embeddings() > 0
        models = {r.json["model"] for r in fake_ollama.requests_to("/api/embed")}
        assert models == {OTHER_MODEL}
        assert (await vectors_of(other, copy))[0] > 0


async def test_an_export_that_does_not_name_its_model_imports_without_vectors(
    memory: Memory, other_memory: Memory, fake_ollama: FakeOllama
) -> None:
    """An export written before the header named the model: its vectors' model is unknown."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-unnamed")
    with admin():
        records = dumped(await memory.admin.export_user(uid, with_vectors=True))
        del records[0]["embedding_model"]
        result = await other_memory.admin.import_user(records)
    assert result.vectors_dropped
    assert await vectors_of(other_memory, uid) == (0, 0)


async def test_an_import_into_a_database_of_another_configured_model_leaves_vectors_out(
    memory: Memory, trgm_db_url: str, fake_ollama: FakeOllama
) -> None:
    """No model recorded yet: the importing process's own model decides."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-fresh")
    with admin():
        records = await memory.admin.export_user(uid, with_vectors=True)
    async with open_memory(
        make_settings(trgm_db_url, fake_ollama, embedding_model=OTHER_MODEL)
    ) as other:
        with admin():
            result = await other.admin.import_user(records)
        assert result.vectors_dropped
        assert await vectors_of(other, uid) == (0, 0)
        assert await scalar(other, "SELECT count(*) FROM memory_embedding_model") == 0


async def test_an_import_checks_a_constructed_records_failure_count(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """A record built without validation (model_construct) reached the database with its
    failure count unchecked: True and 1.5 were stored as 1, -1 and 2**31 ended in a
    StorageError. The import checks it as it checks a message's seq."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-construct")
    with admin():
        records = await memory.admin.export_user(uid)
        number, state = next(
            (n, r) for n, r in enumerate(records, 1) if isinstance(r, ExportExtraction)
        )
        for failures in (-1, True, 1.5, "3", 2**31):
            bad = list(records)
            bad[number - 1] = ExportExtraction.model_construct(
                **{**state.model_dump(), "failures": failures}
            )
            target = uuid.uuid4()
            with pytest.raises(InvalidInputError, match=rf"record {number}\b.*failures"):
                await memory.admin.import_user(bad, user_id=target, session_prefix="p-")
            assert await memory.users.get(target) is None, failures


async def user_holding_only_forgets(memory: Memory) -> uuid.UUID:
    """A user who forgot their last fact in a conversation: forgets are all they hold."""
    uid = await new_user(memory, "Kim")
    with request_context(user_id=uid, session_id="kim-chat"):
        await memory.store.upsert_fact("places", "home_city", "Berlin")
        assert (await memory.store.forget_facts("home_city")).facts
    assert await scalar(
        memory, "SELECT count(*) FROM memory_fact_forgotten WHERE user_id = :u", u=uid
    )
    return uid


async def test_a_user_holding_only_forgets_holds_memory_an_import_must_replace(
    memory: Memory,
) -> None:
    """Forgets count as memory: an import into such a user was not refused (it broke on a
    duplicate key, or merged its forgets into the old ones), and a replace kept the old
    forgets, which then went on holding those keys back from extraction."""
    kim = await user_holding_only_forgets(memory)
    with admin():
        own = await memory.admin.export_user(kim)
        with pytest.raises(InvalidInputError, match="already holds memory"):
            await memory.admin.import_user(own)
    sam = await new_user(memory, "Sam")
    with request_context(user_id=sam):
        await memory.store.upsert_fact("tools", "editor", "vim")
    with admin():
        other = await memory.admin.export_user(sam)
        result = await memory.admin.import_user(other, user_id=kim, replace=True)
        again = await memory.admin.export_user(kim)
    assert result.replaced
    assert [record.type for record in again] == ["header", "fact"]


async def test_two_imports_into_one_user_at_once_let_only_the_first_write(
    busy_memory: Memory,
) -> None:
    """Each import checked that the user held nothing, then wrote: two at once both passed
    the check, and the user ended up with both files merged. The second now waits for the
    first and is refused."""
    memory = busy_memory
    a, b = await new_user(memory, "A"), await new_user(memory, "B")
    with request_context(user_id=a):
        await memory.store.upsert_fact("p", "from_a", "alpha")
    with request_context(user_id=b):
        await memory.store.upsert_fact("p", "from_b", "beta")
    with admin():
        from_a, from_b = await memory.admin.export_user(a), await memory.admin.export_user(b)
    copy = uuid.uuid4()
    await slow_trigger(memory, "memory_facts", "INSERT", 0.5)
    try:
        with admin():
            first = asyncio.create_task(memory.admin.import_user(from_a, user_id=copy))
            await wait_for_a_sleeping_statement(memory)
            with pytest.raises(InvalidInputError, match="already holds memory"):
                await memory.admin.import_user(from_b, user_id=copy)
            await first
    finally:
        await execute(memory, "DROP TRIGGER IF EXISTS slow ON memory_facts")
    with request_context(user_id=copy):
        assert [f.key for f in await memory.store.get_all_facts()] == ["from_a"]


async def test_an_import_is_refused_a_fact_written_from_another_users_session(
    memory: Memory,
) -> None:
    """upsert_fact refuses another user's session as the one a fact was written from
    (revision 0027); an import took it, so a fact named another user's conversation."""
    victim = await new_user(memory, "Victim")
    with request_context(user_id=victim):
        await memory.sessions.create("victim-secret")
    sam = await new_user(memory, "Sam")
    with request_context(user_id=sam):
        await memory.store.upsert_fact("p", "editor", "vim", session_id="sam-1")
    with admin():
        records = dumped(await memory.admin.export_user(sam))
    for record in records:
        if record["type"] == "fact":
            record["session_id"] = "victim-secret"
    copy = uuid.uuid4()
    with admin(), pytest.raises(InvalidInputError, match="'victim-secret' belong"):
        await memory.admin.import_user(records, user_id=copy)
    assert await memory.users.get(copy) is None
    with admin():
        await memory.admin.import_user(records, user_id=copy, session_prefix="copy-")
    with request_context(user_id=copy):
        assert [f.session_id for f in await memory.store.get_all_facts()] == ["copy-victim-secret"]


async def test_purge_keeps_a_live_row_behind_an_expired_hidden_row_hidden_behind_its_fact(
    memory: Memory,
) -> None:
    """A legacy chain: a live row behind an expired hidden row, itself behind a live visible
    fact. The live row took the expired row's place as its own visible fact — two visible
    spellings of one key; it goes behind the fact the chain ends at."""
    uid = await new_user(memory)
    fact = await insert_fact(memory, uid, "preferred_language", age_hours=1)
    middle = await insert_fact(memory, uid, "pref_lang", age_hours=5, expired=True, behind=fact)
    live = await insert_fact(memory, uid, "language", age_hours=3, behind=middle)
    # Two links of expired hidden rows, and an expired fact at the end of another chain.
    far = await insert_fact(memory, uid, "home_city", age_hours=9, expired=True)
    mid2 = await insert_fact(memory, uid, "city", age_hours=8, expired=True, behind=far)
    mid3 = await insert_fact(memory, uid, "hometown", age_hours=7, expired=True, behind=mid2)
    kept = await insert_fact(memory, uid, "home-city", age_hours=6, behind=mid3)
    with admin():
        purged = await memory.admin.purge_expired(uid)
    assert purged.expired == 4
    with request_context(user_id=uid):
        rows = {f.id: f.merged_into for f in await memory.store.get_all_facts(include_merged=True)}
    assert rows == {fact: None, live: fact, kept: None}


async def test_purge_of_a_legacy_chain_that_loops_back_leaves_a_visible_fact(
    memory: Memory,
) -> None:
    """h1 behind an expired s behind h2 behind h1: following the chain led h1 behind h2, two
    live rows hidden behind each other and no fact left to read. A chain that loops back is
    rescued as behind any expired row: h1 takes the key back."""
    uid = await new_user(memory)
    h1 = await insert_fact(memory, uid, "language", age_hours=2)
    s = await insert_fact(memory, uid, "lang", age_hours=5, expired=True)
    h2 = await insert_fact(memory, uid, "preferred_language", age_hours=3, behind=h1)
    await execute(memory, f"UPDATE memory_facts SET merged_into = {s} WHERE id = {h1}")
    await execute(memory, f"UPDATE memory_facts SET merged_into = {h2} WHERE id = {s}")
    with admin():
        await memory.admin.purge_expired(uid)
    with request_context(user_id=uid):
        rows = {f.id: f.merged_into for f in await memory.store.get_all_facts(include_merged=True)}
    assert rows == {h1: None, h2: h1}
