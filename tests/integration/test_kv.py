"""KvStore on real PostgreSQL: set/get/overwrite/delete, listing, search_values ranking and
escaping, and tenancy (another user's entries and sessions stay invisible)."""

from __future__ import annotations

import asyncio
import unicodedata
import uuid
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    InvalidTypeError,
    KvStore,
    Memory,
    NotFoundError,
    PermissionDeniedError,
    request_context,
)
from tests.integration.factories import new_session_row, new_user, scalar

PAD = "scratchpad"


@pytest.fixture
def kv(memory: Memory) -> KvStore:
    return KvStore(sessionmaker=memory.sessionmaker)


async def user_with_sessions(memory: Memory, *session_ids: str) -> uuid.UUID:
    uid = await new_user(memory)
    for sid in session_ids:
        await new_session_row(memory, uid, sid)
    return uid


# --- set / get / delete --------------------------------------------------------------------


async def test_set_get_overwrite_and_delete(memory: Memory, kv: KvStore) -> None:
    uid = await new_user(memory)
    first = await kv.set(PAD, "plan", "draft one", user_id=uid)
    assert (first.scope, first.key, first.value, first.session_id) == (
        PAD,
        "plan",
        "draft one",
        None,
    )
    assert await kv.get(PAD, "plan", user_id=uid) == "draft one"

    second = await kv.set(PAD, "plan", "draft two", user_id=uid)
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert await kv.get(PAD, "plan", user_id=uid) == "draft two"
    assert await scalar(memory, "SELECT count(*) FROM kv_store") == 1

    assert await kv.delete(PAD, "plan", user_id=uid) is True
    assert await kv.get(PAD, "plan", user_id=uid) is None
    assert await kv.delete(PAD, "plan", user_id=uid) is False


async def test_user_wide_session_bound_and_other_scope_entries_are_distinct(
    memory: Memory, kv: KvStore
) -> None:
    uid = await user_with_sessions(memory, "s1")
    await kv.set(PAD, "plan", "user-wide", user_id=uid)
    await kv.set(PAD, "plan", "in s1", session_id="s1", user_id=uid)
    await kv.set("notes", "plan", "other scope", user_id=uid)

    assert await kv.get(PAD, "plan", user_id=uid) == "user-wide"
    assert await kv.get(PAD, "plan", session_id="s1", user_id=uid) == "in s1"
    assert await kv.get("notes", "plan", user_id=uid) == "other scope"
    assert await kv.delete(PAD, "plan", session_id="s1", user_id=uid) is True
    assert await kv.get(PAD, "plan", user_id=uid) == "user-wide"


async def test_list_orders_by_key_and_narrows_to_a_session(memory: Memory, kv: KvStore) -> None:
    uid = await user_with_sessions(memory, "s1", "s2")
    await kv.set(PAD, "b", "2", session_id="s1", user_id=uid)
    await kv.set(PAD, "a", "1", session_id="s2", user_id=uid)
    await kv.set(PAD, "b", "0", user_id=uid)
    await kv.set("other", "c", "3", user_id=uid)

    everything = await kv.list(PAD, user_id=uid)
    assert [(e.key, e.session_id) for e in everything] == [("a", "s2"), ("b", None), ("b", "s1")]
    assert [e.key for e in await kv.list(PAD, session_id="s1", user_id=uid)] == ["b"]


async def test_the_current_user_is_used_when_none_is_named(memory: Memory, kv: KvStore) -> None:
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await kv.set(PAD, "plan", "mine")
        assert await kv.get(PAD, "plan") == "mine"
        assert [h.value for h in await kv.search_values(None, PAD, ["mine"])] == ["mine"]
    with pytest.raises(PermissionDeniedError):
        await kv.set(PAD, "plan", "nobody's")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ({"scope": "", "key": "k", "value": "v"}, InvalidInputError),
        ({"scope": PAD, "key": " ", "value": "v"}, InvalidInputError),
        ({"scope": PAD, "key": "k", "value": "a\x00b"}, InvalidInputError),
        ({"scope": PAD, "key": "k", "value": 7}, InvalidTypeError),
        ({"scope": PAD, "key": "k" * 501, "value": "v"}, InvalidInputError),
    ],
)
async def test_bad_input_to_set_is_refused_and_nothing_is_written(
    memory: Memory, kv: KvStore, call: dict[str, Any], error: type[Exception]
) -> None:
    uid = await new_user(memory)
    with pytest.raises(error):
        await kv.set(user_id=uid, **call)
    assert await scalar(memory, "SELECT count(*) FROM kv_store") == 0


async def test_set_in_a_session_that_does_not_exist_is_not_found(
    memory: Memory, kv: KvStore
) -> None:
    uid = await new_user(memory)
    with pytest.raises(NotFoundError):
        await kv.set(PAD, "plan", "x", session_id="no-such-session", user_id=uid)
    assert await scalar(memory, "SELECT count(*) FROM kv_store") == 0


async def test_names_within_their_character_limits_but_too_wide_for_the_index_are_refused(
    memory: Memory, kv: KvStore
) -> None:
    """A scope of 100, a session id of 200 and a key of 500 four-byte characters are within
    each limit but 3,200 bytes together, past the 2,704 a row of the unique index holds: an
    InvalidInputError saying to shorten the key (it was a StorageError, which the scratchpad
    tool told the model to retry), nothing written; the widest that fits is stored."""
    wide = chr(0x20000)  # a CJK Extension B character: four bytes in UTF-8
    uid = await user_with_sessions(memory, wide * 200)
    with pytest.raises(InvalidInputError, match="use a shorter key"):
        await kv.set(wide * 100, wide * 500, "v", session_id=wide * 200, user_id=uid)
    assert await scalar(memory, "SELECT count(*) FROM kv_store") == 0
    key = wide * ((2_600 - 4 * 300) // 4)
    entry = await kv.set(wide * 100, key, "v", session_id=wide * 200, user_id=uid)
    assert entry.key == key
    assert await kv.get(wide * 100, key, session_id=wide * 200, user_id=uid) == "v"


# --- search_values -------------------------------------------------------------------------


async def ranked_fixture(memory: Memory, kv: KvStore) -> uuid.UUID:
    uid = await user_with_sessions(memory, "s1", "s2")
    await kv.set(PAD, "deploy", "nginx listens on port 8099", session_id="s1", user_id=uid)  # 2
    await kv.set(PAD, "old", "nginx was restarted", session_id="s1", user_id=uid)  # 1, oldest
    await kv.set(PAD, "infra", "nginx on the staging box", session_id="s2", user_id=uid)  # 1
    await kv.set(PAD, "nginx", "see above", user_id=uid)  # 1 (by key), user-wide
    await kv.set(PAD, "lunch", "pasta", session_id="s1", user_id=uid)  # 0, newest
    await kv.set("notes", "nginx", "port 80", user_id=uid)  # other scope
    return uid


async def test_search_ranks_by_terms_matched_then_recency(memory: Memory, kv: KvStore) -> None:
    uid = await ranked_fixture(memory, kv)
    hits = await kv.search_values(uid, PAD, ["port", "NGINX"])
    assert [(h.key, h.terms_hit) for h in hits] == [
        ("deploy", 2),
        ("nginx", 1),
        ("infra", 1),
        ("old", 1),
    ]
    assert hits[0].section == "deploy" and hits[0].session_id == "s1" and hits[0].scope == PAD


async def test_one_term_given_in_two_unicode_forms_counts_once(memory: Memory, kv: KvStore) -> None:
    """ "café" composed and decomposed is one term: counted twice it outranked a row holding
    two distinct terms."""
    uid = await new_user(memory)
    await kv.set(PAD, "b", "menu bar", user_id=uid)
    await kv.set(PAD, "a", "café", user_id=uid)
    terms = ["café", unicodedata.normalize("NFD", "café"), "menu", "bar"]
    hits = await kv.search_values(uid, PAD, terms)
    assert [(h.key, h.terms_hit) for h in hits] == [("b", 2), ("a", 1)]


async def test_terms_are_told_apart_as_ilike_tells_them(memory: Memory, kv: KvStore) -> None:
    """ "Straße" and "STRASSE" are one word to casefold() but two to ILIKE: dropped as a
    repeat of the first, the second term found nothing, so adding a term lost a hit."""
    uid = await new_user(memory)
    await kv.set(PAD, "addr", "HAUPTSTRASSE 5", user_id=uid)
    for terms in (["STRASSE"], ["Straße", "STRASSE"], ["STRASSE", "Straße"]):
        assert [h.key for h in await kv.search_values(uid, PAD, terms)] == ["addr"], terms
    found = await memory.search.search("Straße STRASSE", user_id=uid, scope="sketches")
    assert [h.key for h in found] == ["addr"]


async def test_a_one_character_term_the_caller_names_is_kept_beside_longer_ones(
    memory: Memory, kv: KvStore
) -> None:
    uid = await new_user(memory)
    await kv.set(PAD, "v1", "version notes", user_id=uid)
    hits = await kv.search_values(uid, PAD, ["v", "zzz"])
    assert [(h.key, h.terms_hit) for h in hits] == [("v1", 1)]


@pytest.mark.parametrize(
    ("prefer", "expected"),
    [("s1", ["deploy", "old", "nginx", "infra"]), ("s2", ["infra", "deploy", "nginx", "old"])],
)
async def test_prefer_session_id_puts_that_sessions_rows_first_then_terms_matched(
    memory: Memory, kv: KvStore, prefer: str, expected: list[str]
) -> None:
    uid = await ranked_fixture(memory, kv)
    hits = await kv.search_values(uid, PAD, ["port", "nginx"], prefer_session_id=prefer)
    assert [h.key for h in hits] == expected


async def test_session_id_keeps_one_sessions_rows_and_limit_cuts(
    memory: Memory, kv: KvStore
) -> None:
    uid = await ranked_fixture(memory, kv)
    hits = await kv.search_values(uid, PAD, ["nginx"], session_id="s1")
    assert [h.key for h in hits] == ["old", "deploy"]
    assert {h.session_id for h in hits} == {"s1"}
    assert len(await kv.search_values(uid, PAD, ["nginx"], limit=2)) == 2


async def test_a_term_counts_once_however_often_it_matches(memory: Memory, kv: KvStore) -> None:
    uid = await new_user(memory)
    await kv.set(PAD, "nginx", "nginx nginx", user_id=uid)
    hits = await kv.search_values(uid, PAD, ["nginx", "NGINX", " nginx "])
    assert [h.terms_hit for h in hits] == [1]


async def test_without_terms_the_newest_rows_come_back_preferred_session_first(
    memory: Memory, kv: KvStore
) -> None:
    uid = await ranked_fixture(memory, kv)
    hits = await kv.search_values(uid, PAD, [], prefer_session_id="s2")
    assert [h.key for h in hits] == ["infra", "lunch", "nginx", "old", "deploy"]
    assert {h.terms_hit for h in hits} == {0}
    assert [h.key for h in await kv.search_values(uid, PAD, ["  "], limit=1)] == ["lunch"]


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("%", {"percent"}),
        ("0%", {"percent"}),
        ("_", {"underscore"}),
        ("e_c", {"underscore"}),
        ("\\", {"backslash"}),
        ("\\n", {"backslash"}),
    ],
)
async def test_wildcard_characters_in_terms_match_only_themselves(
    memory: Memory, kv: KvStore, term: str, expected: set[str]
) -> None:
    uid = await new_user(memory)
    for key, value in [
        ("percent", "100% done"),
        ("digits", "1000 done"),
        ("underscore", "snake_case"),
        ("lookalike", "snakeXcase"),
        ("backslash", "C:\\new"),
        ("plain", "C:/new"),
    ]:
        await kv.set(PAD, key, value, user_id=uid)
    assert {h.key for h in await kv.search_values(uid, PAD, [term])} == expected


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"terms": "nginx"}, InvalidTypeError),
        ({"terms": [3]}, InvalidTypeError),
        ({"terms": ["a\x00"]}, InvalidInputError),
        ({"terms": ["x"], "limit": 0}, InvalidInputError),
        ({"terms": ["x"], "scope": ""}, InvalidInputError),
    ],
)
async def test_bad_search_input_is_refused(
    memory: Memory, kv: KvStore, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    uid = await new_user(memory)
    call: dict[str, Any] = {"scope": PAD, **kwargs}
    with pytest.raises(error):
        await kv.search_values(uid, **call)


# --- tenancy -------------------------------------------------------------------------------


async def test_another_users_entries_and_sessions_stay_invisible(
    memory: Memory, kv: KvStore
) -> None:
    alice = await user_with_sessions(memory, "alice-s")
    bob = await user_with_sessions(memory, "bob-s")
    await kv.set(PAD, "secret", "alice's plan", session_id="alice-s", user_id=alice)
    await kv.set(PAD, "secret", "alice's user-wide plan", user_id=alice)

    assert await kv.search_values(bob, PAD, ["plan"]) == []
    assert await kv.search_values(bob, PAD, ["plan"], session_id="alice-s") == []
    assert await kv.search_values(bob, PAD, [], session_id="alice-s") == []
    assert await kv.get(PAD, "secret", user_id=bob) is None
    assert await kv.get(PAD, "secret", session_id="alice-s", user_id=bob) is None
    assert await kv.list(PAD, user_id=bob) == []
    assert await kv.list(PAD, session_id="alice-s", user_id=bob) == []
    with pytest.raises(NotFoundError):
        await kv.set(PAD, "secret", "bob was here", session_id="alice-s", user_id=bob)
    assert await kv.delete(PAD, "secret", session_id="alice-s", user_id=bob) is False
    assert await kv.delete(PAD, "secret", user_id=bob) is False

    # A filter naming bob's own session finds nothing of alice's either.
    assert await kv.search_values(alice, PAD, ["plan"], session_id="bob-s") == []
    assert {h.value for h in await kv.search_values(alice, PAD, ["plan"])} == {
        "alice's plan",
        "alice's user-wide plan",
    }
    assert await kv.get(PAD, "secret", session_id="alice-s", user_id=alice) == "alice's plan"


async def test_a_global_search_needs_read_all_and_then_sees_every_user(
    memory: Memory, kv: KvStore
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await kv.set(PAD, "a", "shared word", user_id=alice)
    await kv.set(PAD, "b", "shared word", user_id=bob)
    with pytest.raises(PermissionDeniedError):
        await kv.search_values(None, PAD, ["shared"])
    with request_context(user_id=bob), pytest.raises(PermissionDeniedError):
        await kv.search_values(alice, PAD, ["shared"])
    with request_context(permissions=[PERMISSION_READ_ALL]):
        hits = await kv.search_values(None, PAD, ["shared"])
        assert {h.user_id for h in hits} == {alice, bob}
        assert {e.user_id for e in await kv.list(PAD)} == {alice, bob}
        with pytest.raises(InvalidInputError, match="user_id"):
            await kv.get(PAD, "a")


async def test_a_set_waiting_on_a_session_holds_up_no_other_write_and_is_dated_when_written(
    busy_memory: Memory,
) -> None:
    """kv.set locks its user's row FOR KEY SHARE (before the session's): a set waiting for a
    session an append or compression holds must not hold up the same user's set on another
    session (the lock was FOR NO KEY UPDATE: every write of one user waited for the others).
    The set that waited is dated when it wrote, not when its transaction began."""
    memory = busy_memory
    uid = await new_user(memory)
    held, free = await new_session_row(memory, uid), await new_session_row(memory, uid)
    async with memory.engine.connect() as conn:
        transaction = await conn.begin()
        await conn.execute(text("SELECT 1 FROM sessions WHERE id = :s FOR UPDATE"), {"s": held})
        waiting = asyncio.create_task(
            memory.kv.set(PAD, "a", "written last", session_id=held, user_id=uid)
        )
        await asyncio.sleep(0.3)
        other = await asyncio.wait_for(
            memory.kv.set(PAD, "b", "written first", session_id=free, user_id=uid), 5
        )
        released = await scalar(memory, "SELECT clock_timestamp()")
        await transaction.rollback()
    late = await asyncio.wait_for(waiting, 5)
    assert isinstance(released, datetime)
    assert late.updated_at >= released > other.updated_at
    assert late.created_at == late.updated_at
