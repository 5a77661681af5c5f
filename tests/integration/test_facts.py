"""MemoryStore fact operations on real PostgreSQL: upsert, search, delete, listing, expiry."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    MemoryStore,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
    open_memory,
    request_context,
)
from navi_memory.db import create_engine, create_sessionmaker
from navi_memory.schemas import Fact
from navi_memory.testing import FakeOllama
from navi_memory.text.terms import query_terms
from tests.conftest import make_settings
from tests.integration.factories import execute, new_session_row, new_user, scalar


async def expire_now(memory: Memory, fact_id: int) -> None:
    async with memory.engine.begin() as conn:
        await conn.execute(
            text("UPDATE memory_facts SET expires_at = now() - interval '1 second' WHERE id = :i"),
            {"i": fact_id},
        )


# --- upsert ---------------------------------------------------------------------------------


async def test_upsert_inserts_with_defaults_and_a_vector(memory: Memory) -> None:
    uid = await new_user(memory)
    fact = await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    assert (fact.category, fact.key, fact.value) == ("preferences", "editor", "neovim")
    assert (fact.source, fact.confidence, fact.user_id) == ("conversation", 70, uid)
    assert fact.has_embedding
    assert fact.merged_into is None
    assert fact.expires_at is None


async def test_confidence_defaults_follow_the_source(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    assert (
        await store.upsert_fact("a", "k1", "v", source="tool_call", user_id=uid)
    ).confidence == 95
    assert (
        await store.upsert_fact("a", "k2", "v", source="user_explicit", user_id=uid)
    ).confidence == 90
    assert (
        await store.upsert_fact("a", "k3", "v", source="user_explicit", confidence=42, user_id=uid)
    ).confidence == 42


async def test_same_value_again_only_refreshes_last_verified_at(memory: Memory) -> None:
    uid = await new_user(memory)
    first = await memory.store.upsert_fact(
        "preferences", "editor", "neovim", user_id=uid, source_context="said so"
    )
    await asyncio.sleep(0.01)
    again = await memory.store.upsert_fact(
        "preferences", "editor", "neovim", user_id=uid, source="tool_call", confidence=10
    )
    assert again.id == first.id
    assert again.updated_at == first.updated_at
    assert again.last_verified_at is not None and first.last_verified_at is not None
    assert again.last_verified_at > first.last_verified_at
    assert (again.source, again.confidence, again.source_context) == ("conversation", 70, "said so")


async def test_a_new_value_updates_the_row_and_its_vector(memory: Memory) -> None:
    uid = await new_user(memory)
    first = await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    old_vector = await scalar(
        memory, "SELECT embedding::text FROM memory_facts WHERE id = :i", i=first.id
    )
    await asyncio.sleep(0.01)
    changed = await memory.store.upsert_fact(
        "preferences", "editor", "emacs", user_id=uid, source="user_explicit"
    )
    assert changed.id == first.id
    assert changed.value == "emacs"
    assert changed.updated_at > first.updated_at  # type: ignore[operator]
    assert changed.confidence == 90
    new_vector = await scalar(
        memory, "SELECT embedding::text FROM memory_facts WHERE id = :i", i=first.id
    )
    assert new_vector != old_vector
    assert await memory.store.fact_count(user_id=uid) == 1


@pytest.mark.parametrize("value", ["neovim", "helix"])
async def test_writing_over_an_expired_fact_revives_it_with_the_new_expiry(
    memory: Memory, value: str
) -> None:
    uid = await new_user(memory)
    fact = await memory.store.upsert_fact(
        "preferences", "editor", "neovim", expires_days=1, user_id=uid
    )
    await expire_now(memory, fact.id)
    assert await memory.store.fact_count(user_id=uid) == 0
    revived = await memory.store.upsert_fact(
        "preferences", "editor", value, expires_days=30, user_id=uid
    )
    assert revived.id == fact.id
    assert revived.value == value
    assert revived.expires_at is not None and fact.expires_at is not None
    assert (revived.expires_at - fact.expires_at).days >= 28
    assert await memory.store.fact_count(user_id=uid) == 1


async def test_expired_facts_disappear_from_every_read(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    kept = await store.upsert_fact("work", "employer", "Acme", user_id=uid)
    gone = await store.upsert_fact("work", "project", "Apollo", expires_days=1, user_id=uid)
    await expire_now(memory, gone.id)
    assert [f.id for f in await store.get_all_facts(user_id=uid)] == [kept.id]
    assert [f.id for f in await store.get_all_facts(user_id=uid, include_merged=True)] == [kept.id]
    assert await store.fact_count(user_id=uid) == 1
    assert await store.fact_count(user_id=uid, include_merged=True) == 1
    assert await store.search_facts("Apollo", user_id=uid) == []
    assert await store.search_facts("project Apollo", user_id=uid) == []


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("c", "k\x00", "v"), {}, InvalidInputError, "NUL"),
        (("c", "k", "v" * 100_001), {}, InvalidInputError, "100,000"),
        (("c", "k" * 201, "v"), {}, InvalidInputError, "limit is 200"),
        (("c", 5, "v"), {}, InvalidTypeError, "key must be a str"),
        (("c", "k", None), {}, InvalidTypeError, "value must be a str"),
        (("", "k", "v"), {}, InvalidInputError, "category must not be empty"),
        (("c", "k", "v"), {"source": "rumour"}, InvalidInputError, "source must be one of"),
        (("c", "k", "v"), {"confidence": 101}, InvalidInputError, "confidence must be <= 100"),
        (("c", "k", "v"), {"confidence": "high"}, InvalidTypeError, "confidence must be an int"),
        (("c", "k", "v"), {"expires_days": -1}, InvalidInputError, "expires_days"),
        (("c", "k", "v"), {"expires_days": "soon"}, InvalidTypeError, "expires_days"),
        (("c", "k", "v"), {"source": b"conversation"}, InvalidTypeError, "source must be a str"),
        (("c", "k", "v"), {"source": None}, InvalidTypeError, "source must be a str"),
    ],
)
async def test_bad_input_is_refused_clearly_and_stores_nothing(
    memory: Memory, args: tuple[object, ...], kwargs: dict[str, object], error: type, match: str
) -> None:
    uid = await new_user(memory)
    with pytest.raises(error, match=match):
        await memory.store.upsert_fact(*args, user_id=uid, **kwargs)  # type: ignore[arg-type]
    assert await memory.store.fact_count(user_id=uid, include_merged=True) == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sort_order": b"desc"}, InvalidTypeError, "sort_order must be a str"),
        ({"sort_order": None}, InvalidTypeError, "sort_order must be a str"),
        ({"sort_order": "up"}, InvalidInputError, "sort_order must be 'asc' or 'desc'"),
    ],
)
async def test_a_listing_sort_order_of_the_wrong_type_is_a_type_error(
    memory: Memory, kwargs: dict[str, object], error: type, match: str
) -> None:
    uid = await new_user(memory)
    with pytest.raises(error, match=match) as raised:
        await memory.store.get_all_facts(user_id=uid, **kwargs)  # type: ignore[arg-type]
    assert (type(raised.value) is InvalidTypeError) == (error is InvalidTypeError)


# --- search ---------------------------------------------------------------------------------


async def test_search_finds_by_meaning_through_the_vector_pass(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "preferred_language", "Dutch", user_id=uid)
    await store.upsert_fact("work", "employer", "Acme Corporation", user_id=uid)
    hits = await store.search_facts("preferred language", user_id=uid)
    assert hits
    assert hits[0].key == "preferred_language"
    assert hits[0].via == "vector"
    assert hits[0].distance is not None and hits[0].distance < 0.3
    assert all(h.key != "employer" or h.via == "text" for h in hits)


async def test_text_pass_fills_up_with_an_exact_identifier_the_vector_pass_misses(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "preferred_language", "Dutch", user_id=uid)
    await store.upsert_fact("work", "vpn_ticket", "opened INC-40211 about the VPN", user_id=uid)
    hits = await store.search_facts("INC-40211", user_id=uid)
    assert [(h.key, h.via) for h in hits] == [("vpn_ticket", "text")]
    assert hits[0].terms_hit == 1


async def test_vector_hits_come_first_then_text_hits_without_repeats(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    await store.upsert_fact("notes", "editor_plugins", "telescope and a neovim theme", user_id=uid)
    await store.upsert_fact("notes", "unrelated", "the cat is called neovim too", user_id=uid)
    hits = await store.search_facts("preferences editor neovim", user_id=uid)
    vias = [h.via for h in hits]
    assert vias[0] == "vector"
    assert vias == sorted(vias, key=lambda v: v != "vector")
    assert len({h.id for h in hits}) == len(hits) == 3
    distances = [h.distance for h in hits if h.via == "vector"]
    assert distances == sorted(distances)  # type: ignore[type-var]


async def test_search_respects_the_limit(memory: Memory) -> None:
    uid = await new_user(memory)
    for i in range(6):
        await memory.store.upsert_fact("notes", f"note_{i}", f"about kubernetes {i}", user_id=uid)
    assert len(await memory.store.search_facts("kubernetes", user_id=uid, limit=4)) == 4


@pytest.mark.parametrize("query", ["%", "_", "\\", "%%__", "a%", "50%", "e_c", "co%e"])
async def test_wildcards_in_search_text_match_only_themselves(memory: Memory, query: str) -> None:
    uid = await new_user(memory)
    facts = [
        await memory.store.upsert_fact("misc", "plain", "nothing special here", user_id=uid),
        await memory.store.upsert_fact("misc", "discount", "save 50% with code a%_\\", user_id=uid),
        await memory.store.upsert_fact("misc", "under_score", "exec", user_id=uid),
    ]

    def contains(fact: Fact, needle: str) -> bool:
        return any(needle.casefold() in f.casefold() for f in (fact.category, fact.key, fact.value))

    listing = await memory.store.get_all_facts(user_id=uid, search=query)
    assert {f.id for f in listing} == {f.id for f in facts if contains(f, query)}
    terms = query_terms(query)
    for hit in await memory.store.search_facts(query, user_id=uid):
        if hit.via == "text":
            assert any(contains(hit, term) for term in terms), (query, hit.key)


@pytest.mark.parametrize(
    ("query", "exact", "looser"),
    [
        # "%" and "\\" only separate terms: "100%" is the term 100, which 1000 holds too.
        ("100%", "100% off", ["revenue grew 1000 units"]),
        ("C:\\Users\\bob", "C:\\Users\\bob", [f"bob added {i} Users" for i in range(15)]),
        ("rate 5%", "a rate 5% fixed", ["rate of 50 and 5", "rate 55 over 5"]),
    ],
)
async def test_a_fact_holding_the_whole_query_ranks_first_among_equal_text_hits(
    memory: Memory, fake_ollama: FakeOllama, query: str, exact: str, looser: list[str]
) -> None:
    """Text hits matching as many terms rank a fact holding the whole query, wildcard-like
    characters and all, before newer ones holding only its terms; in unified search too."""
    uid = await new_user(memory)
    fact = await memory.store.upsert_fact("misc", "exact", exact, user_id=uid)
    for index, value in enumerate(looser):
        await memory.store.upsert_fact("misc", f"looser_{index}", value, user_id=uid)
    fake_ollama.mode = "fail"  # the text pass alone
    hits = await memory.store.search_facts(query, user_id=uid)
    assert hits[0].id == fact.id, [(h.key, h.terms_hit) for h in hits]
    assert {h.terms_hit for h in hits} == {hits[0].terms_hit}  # a tie on terms, broken by it
    unified = await memory.search.search(query, scope="facts", k=5, user_id=uid)
    assert unified[0].fact_id == fact.id


async def test_empty_query_lists_the_most_recent_facts(memory: Memory) -> None:
    uid = await new_user(memory)
    for key in ("a", "b", "c"):
        await memory.store.upsert_fact("misc", key, key * 3, user_id=uid)
    hits = await memory.store.search_facts("   ", user_id=uid, limit=2)
    assert [(h.key, h.via) for h in hits] == [("c", "recent"), ("b", "recent")]


async def test_search_with_the_embedder_down_answers_by_text(
    memory: Memory, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    uid = await new_user(memory)
    await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    fake_ollama.mode = "fail"
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        hits = await memory.store.search_facts("neovim", user_id=uid)
    assert [(h.key, h.via) for h in hits] == [("editor", "text")]
    assert [r for r in caplog.records if "memory.embedding_failed" in r.getMessage()]


@pytest.mark.parametrize(
    ("query", "key"), [("C++ programming", "main_language"), ("C#", "second_language")]
)
async def test_a_name_of_a_letter_and_symbols_is_searched_whole(
    memory: Memory, fake_ollama: FakeOllama, query: str, key: str
) -> None:
    """ "C++" and "C#" are terms of their own: not the letter "c", which every fact of a
    category "technical" holds (the newer ones then pushed the fact out of the 15), nor
    dropped beside another word (then nothing was found)."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("technical", "main_language", "C++", user_id=uid)
    await memory.store.upsert_fact("technical", "second_language", "C#", user_id=uid)
    for i in range(20):
        await memory.store.upsert_fact("technical", f"tool_{i}", f"value {i}", user_id=uid)
    fake_ollama.mode = "fail"  # the text pass alone
    hits = await memory.store.search_facts(query, user_id=uid)
    assert [h.key for h in hits] == [key]


async def test_numbers_listed_with_commas_are_searched_each(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """ "8080,8081" is two numbers, each its own ILIKE pattern ("%8080,8081%" matches no
    stored 8080); "1,200" is one number and finds itself, not "200"."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("technical", "port", "8080", user_id=uid)
    await memory.store.upsert_fact("places", "home", "52.5, 13.4", user_id=uid)
    await memory.store.upsert_fact("budget", "laptop", "$1,200", user_id=uid)
    await memory.store.upsert_fact("budget", "desk", "$200", user_id=uid)
    fake_ollama.mode = "fail"  # the text pass alone
    assert [h.key for h in await memory.store.search_facts("ports 8080,8081", user_id=uid)] == [
        "port"
    ]
    assert [h.key for h in await memory.store.search_facts("at 52.5,13.4", user_id=uid)] == ["home"]
    assert [h.key for h in await memory.store.search_facts("1,200", user_id=uid)] == ["laptop"]


async def test_trigram_indexes_serve_the_text_search_when_pg_trgm_is_installed(
    trgm_memory: Memory,
) -> None:
    memory = trgm_memory
    uid = await new_user(memory)
    await memory.store.upsert_fact("work", "ticket", "INC-40211 about the VPN", user_id=uid)
    with request_context(user_id=uid):
        hits = await memory.store.search_facts("INC-40211")
    assert [h.key for h in hits] == ["ticket"]
    async with memory.engine.connect() as conn:
        await conn.execute(text("SET enable_seqscan = off"))
        plan = "\n".join(
            (
                await conn.execute(
                    text("EXPLAIN SELECT id FROM memory_facts WHERE value ILIKE '%INC-40211%'")
                )
            ).scalars()
        )
    assert "ix_memory_facts_value_trgm" in plan


async def test_an_unreachable_database_is_a_storage_error(memory: Memory, tmp_path: object) -> None:
    engine = create_engine(memory.settings, f"postgresql+asyncpg://nobody@/nothing?host={tmp_path}")
    store = MemoryStore(
        sessionmaker=create_sessionmaker(engine), settings=memory.settings, embedder=memory.embedder
    )
    try:
        with pytest.raises(StorageError, match="nothing"):
            await store.upsert_fact("c", "k", "v", user_id=uuid.uuid4())
        with pytest.raises(StorageError):
            await store.search_facts("k", user_id=uuid.uuid4())
    finally:
        await engine.dispose()


# --- delete ---------------------------------------------------------------------------------


async def test_delete_removes_the_fact_and_its_hidden_spellings(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "language", "English", user_id=uid)
    await store.upsert_fact("preferences", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    await store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    assert await store.fact_count(user_id=uid, include_merged=True) == 3
    assert await store.delete_fact("preferred_language", user_id=uid) == 1
    assert [f.key for f in await store.get_all_facts(user_id=uid, include_merged=True)] == [
        "editor"
    ]


async def test_delete_by_a_hidden_spelling_deletes_the_fact_it_stands_behind(
    memory: Memory,
) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "language", "English", user_id=uid)
    await store.upsert_fact("preferences", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    assert await store.delete_fact("language", user_id=uid) == 1
    assert await store.fact_count(user_id=uid, include_merged=True) == 0


async def test_delete_filters_by_category_and_counts_visible_facts(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("home", "city", "Utrecht", user_id=uid)
    await store.upsert_fact("work", "city", "Amsterdam", user_id=uid)
    assert await store.delete_fact("city", category="work", user_id=uid) == 1
    assert [f.category for f in await store.get_all_facts(user_id=uid)] == ["home"]
    assert await store.delete_fact("city", user_id=uid) == 1
    assert await store.delete_fact("city", user_id=uid) == 0


async def test_deleting_an_expired_fact_frees_it_but_counts_no_visible_fact(
    memory: Memory,
) -> None:
    """An expired fact is invisible to every read: deleting its key removes the row, but
    neither counts nor returns it as a visible fact deleted (it once said "forgot 1 fact"). The
    summary still goes with it: expiry never touched the summary, which may tell the fact the
    user asked to forget."""
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("plans", "trip", "Rome", user_id=uid)
    await store.upsert_fact("plans", "hotel", "Hotel Roma", user_id=uid)
    await store.set_summary("Goes to Rome.", user_id=uid)
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 second'"
        " WHERE user_id = :u AND key = 'trip'",
        u=uid,
    )
    assert await store.fact_count(user_id=uid) == 1
    assert await store.delete_facts("trip", user_id=uid) == []
    assert await store.fact_count(user_id=uid, include_merged=True) == 1  # the row is gone
    assert await store.get_summary(user_id=uid) is None
    # Nothing deleted (no row holds the key): the summary stays.
    await store.set_summary("Stays at Hotel Roma.", user_id=uid)
    assert await store.delete_facts("trip", user_id=uid) == []
    assert await store.get_summary(user_id=uid) == "Stays at Hotel Roma."
    assert [f.key for f in await store.delete_facts("hotel", user_id=uid)] == ["hotel"]
    assert await store.get_summary(user_id=uid) is None


# --- listing --------------------------------------------------------------------------------


async def test_get_all_facts_sorts_pages_and_searches(memory: Memory) -> None:
    uid = await new_user(memory)
    store = memory.store
    for category, key, value in [
        ("b", "k1", "one"),
        ("a", "k2", "two"),
        ("c", "k3", "three"),
    ]:
        await store.upsert_fact(category, key, value, user_id=uid)
    assert [f.category for f in await store.get_all_facts(user_id=uid)] == ["c", "b", "a"]
    assert [
        f.category for f in await store.get_all_facts(user_id=uid, sort_by="key", sort_order="asc")
    ] == ["b", "a", "c"]
    page = await store.get_all_facts(user_id=uid, limit=1, offset=1, sort_order="ASC")
    assert [f.category for f in page] == ["b"]
    assert [f.key for f in await store.get_all_facts(user_id=uid, search="THR")] == ["k3"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sort_by": "value; DROP TABLE memory_facts"}, "sort_by must be one of"),
        ({"sort_by": "embedding"}, "sort_by must be one of"),
        ({"sort_order": "sideways"}, "sort_order must be 'asc' or 'desc'"),
        ({"limit": -1}, "limit must be >= 0"),
        ({"offset": -5}, "offset must be >= 0"),
    ],
)
async def test_get_all_facts_refuses_bad_arguments_before_any_sql(
    memory: Memory, kwargs: dict[str, object], match: str
) -> None:
    uid = await new_user(memory)
    with pytest.raises(ValueError, match=match):
        await memory.store.get_all_facts(user_id=uid, **kwargs)  # type: ignore[arg-type]
    assert await scalar(memory, "SELECT count(*) FROM memory_facts") == 0


# --- summary and extraction state ----------------------------------------------------------


async def test_summary_is_set_replaced_and_read_per_user(memory: Memory) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    store = memory.store
    assert await store.get_summary(user_id=alice) is None
    await store.set_summary("likes tea", user_id=alice)
    await store.set_summary("likes green tea", user_id=alice)
    await store.set_summary("likes coffee", user_id=bob)
    assert await store.get_summary(user_id=alice) == "likes green tea"
    with request_context(user_id=bob):
        assert await store.get_summary() == "likes coffee"


async def test_extraction_state_is_recorded_for_the_owner_and_hidden_from_others(
    memory: Memory,
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    sid = await new_session_row(memory, alice)
    store = memory.store
    with request_context(user_id=alice):
        assert await store.get_extracted_at(sid) is None
        marked = await store.mark_session_extracted(sid)
        assert await store.get_extracted_at(sid) == marked
    with request_context(user_id=bob):
        assert await store.get_extracted_at(sid) is None
        with pytest.raises(NotFoundError):
            await store.mark_session_extracted(sid)
        assert await store.get_extracted_at("no-such-session") is None
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert await store.get_extracted_at(sid) == marked


# --- tenancy --------------------------------------------------------------------------------


async def test_a_user_never_sees_another_users_facts(memory: Memory) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "editor", "neovim", user_id=alice)
    await store.upsert_fact("preferences", "editor", "emacs", user_id=bob)
    with request_context(user_id=alice):
        assert [f.value for f in await store.search_facts("editor")] == ["neovim"]
        assert [f.value for f in await store.search_facts("emacs")] == []
        assert [f.value for f in await store.get_all_facts()] == ["neovim"]
        assert await store.fact_count() == 1
        with pytest.raises(PermissionDeniedError):
            await store.search_facts("editor", user_id=bob)
        with pytest.raises(PermissionDeniedError):
            await store.get_all_facts(all_users=True)
        with pytest.raises(PermissionDeniedError):
            await store.delete_fact("editor", user_id=bob)
    assert await store.fact_count(user_id=bob) == 1


async def test_without_a_current_user_writes_are_refused_and_global_reads_need_read_all(
    memory: Memory,
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    store = memory.store
    await store.upsert_fact("preferences", "editor", "neovim", user_id=alice)
    await store.upsert_fact("preferences", "editor", "emacs", user_id=bob)
    with pytest.raises(PermissionDeniedError, match="no user for this write"):
        await store.upsert_fact("preferences", "editor", "vi")
    with pytest.raises(PermissionDeniedError, match="no user for this write"):
        await store.set_summary("x")
    for read in (
        store.search_facts("editor"),
        store.get_all_facts(),
        store.fact_count(),
        store.get_summary(),
    ):
        with pytest.raises(PermissionDeniedError, match=PERMISSION_READ_ALL):
            await read
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert sorted(f.value for f in await store.search_facts("editor")) == ["emacs", "neovim"]
        assert await store.fact_count() == 2
        assert len(await store.get_all_facts(all_users=True)) == 2
        # One user and every user at once: which was meant is not guessed (it listed everyone's).
        with pytest.raises(InvalidInputError, match="pass one of them"):
            await store.get_all_facts(user_id=alice, all_users=True)


async def test_legacy_unowned_facts_are_visible_only_to_global_reads(memory: Memory) -> None:
    alice = await new_user(memory)
    async with memory.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO memory_facts (user_id, category, key, value) "
                "VALUES (NULL, 'personal', 'city', 'Utrecht')"
            )
        )
    with request_context(user_id=alice):
        assert await memory.store.search_facts("Utrecht") == []
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert [f.value for f in await memory.store.search_facts("Utrecht")] == ["Utrecht"]


async def test_every_connection_starts_with_the_vector_search_options(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    settings = make_settings(db_url, fake_ollama, hnsw_ef_search=123)
    async with open_memory(settings) as memory:
        for _ in range(2):  # a new connection, then the pooled one again
            async with memory.engine.connect() as conn:
                shown = (await conn.execute(text("SHOW hnsw.iterative_scan"))).scalar()
                ef = (await conn.execute(text("SHOW hnsw.ef_search"))).scalar()
                assert (shown, ef) == ("relaxed_order", "123")


@pytest.mark.parametrize(("configured", "shown"), [(None, "0"), (3, "3"), (-1, "2")])
async def test_connections_start_with_the_parallel_workers_setting(
    db_url: str, fake_ollama: FakeOllama, configured: int | None, shown: str
) -> None:
    """DB_PARALLEL_WORKERS_PER_GATHER: 0 by default on both engines' connections (a
    parallel plan's workers cost more than a per-user statement saves), as set, or the
    server's own (2, PostgreSQL's default) at -1."""
    extra = {} if configured is None else {"db_parallel_workers_per_gather": configured}
    async with open_memory(make_settings(db_url, fake_ollama, **extra)) as memory:
        for engine in (memory.engine, memory.cached_plans_engine):
            async with engine.connect() as conn:
                assert await conn.scalar(text("SHOW max_parallel_workers_per_gather")) == shown


@pytest.mark.parametrize("configured", [None, "on", "off", "local"])
async def test_connections_start_with_the_synchronous_commit_setting(
    db_url: str, fake_ollama: FakeOllama, configured: str | None
) -> None:
    """DB_SYNCHRONOUS_COMMIT: left to the server by default (the test server's own value, not
    one the client sent), as set otherwise, on both engines' connections; a write made with
    it is there, whole, for the next reader."""
    extra = {} if configured is None else {"db_synchronous_commit": configured}
    async with open_memory(make_settings(db_url, fake_ollama, **extra)) as memory:
        for engine in (memory.engine, memory.cached_plans_engine):
            async with engine.connect() as conn:
                shown = (
                    await conn.execute(
                        text(
                            "SELECT setting, source FROM pg_settings "
                            "WHERE name = 'synchronous_commit'"
                        )
                    )
                ).one()
                if configured is None:
                    assert shown.source != "client"
                else:
                    assert (shown.setting, shown.source) == (configured, "client")
        uid = await new_user(memory)
        await memory.store.upsert_fact("notes", "durability", "asked of the server", user_id=uid)
        facts = await memory.store.get_all_facts(user_id=uid)
        assert [(f.key, f.value) for f in facts] == [("durability", "asked of the server")]


async def test_hits_say_whether_the_fact_has_a_vector_without_carrying_it(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    await memory.store.upsert_fact("notes", "with_vector", "kubernetes alpha", user_id=uid)
    fake_ollama.mode = "fail"
    await memory.store.upsert_fact("notes", "without_vector", "kubernetes beta", user_id=uid)
    hits = {h.key: h for h in await memory.store.search_facts("kubernetes", user_id=uid)}
    assert hits["with_vector"].has_embedding is True
    assert hits["without_vector"].has_embedding is False
    listing = {f.key: f for f in await memory.store.get_all_facts(user_id=uid)}
    assert (listing["with_vector"].has_embedding, listing["without_vector"].has_embedding) == (
        True,
        False,
    )


async def test_a_fact_says_which_session_it_was_written_from(memory: Memory) -> None:
    """upsert_fact's session_id comes back on the Fact, on its search hit and in the listing; a
    new value written outside a session clears it, the same value again keeps it."""
    uid = await new_user(memory)
    written = await memory.store.upsert_fact(
        "work", "employer", "Acme", user_id=uid, session_id="s1"
    )
    assert written.session_id == "s1"
    (hit,) = await memory.store.search_facts("Acme", user_id=uid)
    assert hit.session_id == "s1"
    again = await memory.store.upsert_fact("work", "employer", "Acme", user_id=uid)
    assert again.session_id == "s1"  # the same value: only verified
    moved = await memory.store.upsert_fact("work", "employer", "Initech", user_id=uid)
    assert moved.session_id is None
    assert [f.session_id for f in await memory.store.get_all_facts(uid)] == [None]


async def test_a_word_with_combining_marks_is_searched_whole(memory: Memory) -> None:
    """A decomposed query word finds the composed fact and only it; a Devanagari word is
    searched as the word, not as its letters (which a second fact also holds)."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("travel", "city", "Z\u00fcrich", user_id=uid)
    await memory.store.upsert_fact("family", "uncle", "a rich uncle", user_id=uid)
    await memory.store.upsert_fact("language", "learning", "हिन्दी सीख रहा हूँ", user_id=uid)
    await memory.store.upsert_fact("language", "other", "दिन और रात", user_id=uid)
    city = await memory.store.search_facts("Zu\u0308rich", user_id=uid)
    assert [hit.key for hit in city if hit.via == "text"] == ["city"]
    hindi = await memory.store.search_facts("हिन्दी", user_id=uid)
    assert [hit.key for hit in hindi if hit.via == "text"] == ["learning"]


async def test_forget_facts_reports_the_expired_rows_and_the_summary_it_deleted(
    memory: Memory,
) -> None:
    """forget_facts says everything a delete removed: delete_facts returns only the visible
    facts, so a caller could not tell an expired row and the summary deleted from nothing."""
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("plans", "trip", "Rome", user_id=uid)
    await store.set_summary("Goes to Rome.", user_id=uid)
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 second' WHERE user_id = :u",
        u=uid,
    )
    forgotten = await store.forget_facts("trip", user_id=uid)
    assert (forgotten.facts, forgotten.expired, forgotten.summary_removed) == ([], 1, True)
    assert forgotten.deleted_anything
    again = await store.forget_facts("trip", user_id=uid)
    assert (again.facts, again.expired, again.summary_removed) == ([], 0, False)
    assert not again.deleted_anything
    # A visible fact, with no summary to take: only the fact.
    fact = await store.upsert_fact("plans", "hotel", "Hotel Roma", user_id=uid)
    hotel = await store.forget_facts("hotel", user_id=uid)
    assert ([f.id for f in hotel.facts], hotel.expired, hotel.summary_removed) == (
        [fact.id],
        0,
        False,
    )


async def test_an_invisible_session_id_or_fact_key_stored_before_stays_reachable(
    memory: Memory,
) -> None:
    """Facts are refused a category, key or value of invisible characters alone; identifiers
    and lookups are not held to that (rows stored before the rule, or by SQL, must stay
    readable and deletable): a session id of a zero-width space is deleted, a fact of such a
    key forgotten."""
    uid = await new_user(memory)
    await execute(
        memory,
        "INSERT INTO sessions (id, user_id) VALUES (:s, :u)",
        s="\u200b",
        u=uid,
    )
    assert await memory.sessions.delete("\u200b", user_id=uid)
    await memory.store.upsert_fact("prefs", "k", "v", user_id=uid)
    await execute(memory, "UPDATE memory_facts SET key = :k WHERE user_id = :u", k="\u200b", u=uid)
    assert [f.key for f in await memory.store.delete_facts("\u200b", user_id=uid)] == ["\u200b"]
