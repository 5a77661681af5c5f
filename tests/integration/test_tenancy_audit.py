"""Tenancy audit: paths across the public API where one user's call touched another user's rows.

Each test names the rule it holds (docs/architecture.md, "Identity and tenancy"): no read
returns another user's rows without ``navi.memory.read_all``; no write creates, changes or
deletes another user's rows, read_all or not; an operation acting for one user leaves the others
alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from navi_memory import (
    PERMISSION_READ_ALL,
    Memory,
    NotFoundError,
    PermissionDeniedError,
    ToolContext,
    request_context,
)
from navi_memory.schemas import ChunkDraft
from tests.integration.factories import execute, new_user, scalar

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def chunk(content: str, ended_at: datetime, seq: int = 1) -> ChunkDraft:
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=seq,
        end_seq=seq + 1,
        started_at=ended_at - timedelta(minutes=5),
        ended_at=ended_at,
    )


async def _session_with_messages(memory: Memory, user: uuid.UUID, count: int = 4) -> str:
    sid = (await memory.sessions.create(user_id=user)).id
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        await memory.sessions.append(sid, role, f"message {i} about the harbour", user_id=user)
    return sid


# --- sessions.delete --------------------------------------------------------------------------


async def test_deleting_a_session_leaves_another_users_extraction_mark_under_its_id(
    memory: Memory,
) -> None:
    """A pair docs/memory.md allows (left by older code): Alice's session, and Bob's extraction
    mark under the same id. Nothing of Alice's may write over Bob's row, and deleting her
    session deleted it."""
    alice, bob = await new_user(memory), await new_user(memory)
    sid = (await memory.sessions.create(user_id=alice)).id
    await execute(
        memory,
        "INSERT INTO session_memory_state (session_id, user_id, extracted_at) "
        "VALUES (:s, :u, now())",
        s=sid,
        u=bob,
    )
    assert await memory.sessions.delete(sid, user_id=alice) is True
    owner = await scalar(
        memory, "SELECT user_id FROM session_memory_state WHERE session_id = :s", s=sid
    )
    assert owner == bob
    assert await memory.store.get_extracted_at(sid, user_id=bob) is not None


# --- sessions.index_dropped_history -----------------------------------------------------------


async def _chunk_count(memory: Memory, user: uuid.UUID) -> object:
    return await scalar(memory, "SELECT count(*) FROM memory_chunks WHERE user_id = :u", u=user)


async def test_the_history_repair_acting_for_a_user_repairs_only_that_users_sessions(
    memory: Memory,
) -> None:
    """Acting for Alice, even with read_all, the repair writes chunks into Alice's memory only:
    read_all grants reads, never writes into Bob's. Acting for nobody it covers everyone."""
    alice, bob = await new_user(memory), await new_user(memory)
    sessions = {u: await _session_with_messages(memory, u) for u in (alice, bob)}
    for sid in sessions.values():  # demoted, with no chunk: what the repair is for
        await execute(
            memory,
            "UPDATE session_messages SET is_context = false WHERE session_id = :s AND seq <= 2",
            s=sid,
        )

    with request_context(user_id=alice, permissions=[PERMISSION_READ_ALL]):
        assert await memory.sessions.index_dropped_history(settled_for=timedelta(0)) > 0
    assert await _chunk_count(memory, alice) == 1
    assert await _chunk_count(memory, bob) == 0

    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert await memory.sessions.index_dropped_history(settled_for=timedelta(0)) > 0
    assert await _chunk_count(memory, bob) == 1


# --- search: a global search's freshness ------------------------------------------------------


async def test_a_global_search_lends_the_current_sessions_boundary_to_no_other_user(
    memory: Memory,
) -> None:
    """read_all, no user, ``current_session_id`` Bob's session and ``summary_at`` its boundary:
    Bob's excerpt ended before it; Alice's excerpt filed under the same id (a chunk of hers,
    left by SQL of her application) is not of Bob's session, so the boundary never marks it."""
    alice, bob = await new_user(memory), await new_user(memory)
    sid = (await memory.sessions.create(user_id=bob)).id
    boundary = T0 + timedelta(days=1)
    await execute(  # the summary the caller read its boundary from
        memory,
        "INSERT INTO session_messages (session_id, seq, role, content, kind, created_at) "
        "VALUES (:s, 1, 'system', 'summary', 'summary', :t)",
        s=sid,
        t=boundary,
    )
    await memory.store.add_chunks([chunk("User: zebra of bob", T0)], user_id=bob, session_id=sid)
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
    with request_context(permissions=[PERMISSION_READ_ALL]):
        hits = await memory.search.search(
            "zebra", "raw", current_session_id=sid, summary_at=boundary + timedelta(hours=1)
        )
    assert {h.user_id: h.before_summary for h in hits} == {bob: True, alice: False}


# --- store.backfill_embeddings ----------------------------------------------------------------


async def test_the_backfill_acting_for_a_user_is_refused_and_embeds_nobodys_rows(
    memory: Memory,
) -> None:
    """The backfill embeds every user's rows: acting for Alice (read_all or not) it would
    write vectors into Bob's facts, so it is refused, as reembed is; acting for nobody it
    runs."""
    alice, bob = await new_user(memory), await new_user(memory)
    fact = await memory.store.upsert_fact("tools", "editor", "vim", user_id=bob)
    await execute(memory, "UPDATE memory_facts SET embedding = NULL WHERE id = :i", i=fact.id)
    for permissions in ([], [PERMISSION_READ_ALL]):
        with (
            request_context(user_id=alice, permissions=permissions),
            pytest.raises(PermissionDeniedError, match="acting for nobody"),
        ):
            await memory.store.backfill_embeddings()
        missing = "SELECT embedding IS NULL FROM memory_facts WHERE id = :i"
        assert await scalar(memory, missing, i=fact.id) is True
    assert await memory.store.backfill_embeddings() == 1


async def test_acting_for_a_user_a_tool_context_naming_another_changes_nothing_of_theirs(
    memory: Memory,
) -> None:
    """Inside Alice's request context, ToolContext(user_id=Bob) made the tools save, forget
    and write Bob's memory, which upsert_fact(user_id=Bob) there refuses: now each call is
    the tool's error text and Bob's rows are as they were."""
    alice, bob = await new_user(memory), await new_user(memory)
    bsid = (await memory.sessions.create(user_id=bob)).id
    await memory.store.upsert_fact("tools", "editor", "vim", user_id=bob)
    save = {"action": "save", "category": "x", "key": "k", "value": "from alice"}
    write = {"action": "write", "section": "s", "text": "alice was here"}
    with request_context(user_id=alice):
        answers = [
            await memory.tools.call("memory", save, ToolContext(user_id=bob)),
            await memory.tools.call(
                "memory", {"action": "forget", "key": "editor"}, ToolContext(user_id=bob)
            ),
            await memory.tools.call("scratchpad", write, ToolContext(user_id=bob, session_id=bsid)),
        ]
    assert all(" error: this request acts for user " in answer for answer in answers), answers
    facts = await memory.store.get_all_facts(user_id=bob)
    assert [(f.key, f.value) for f in facts] == [("editor", "vim")]
    assert await scalar(memory, "SELECT count(*) FROM kv_store") == 0


async def test_another_user_cannot_take_a_session_kept_outside_sessions_by_marking_it(
    memory: Memory,
) -> None:
    """Bob keeps his session "ext-1" outside `sessions` (his chunks name it). Alice's mark of
    the id was taken, and then Bob could neither mark nor create his own session: her mark is
    refused as another user's session (NotFoundError), and his go through."""
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.add_chunks(
        [chunk("User: bob external", T0)], user_id=bob, session_id="ext-1"
    )
    with request_context(user_id=alice), pytest.raises(NotFoundError):
        await memory.store.mark_session_extracted("ext-1")
    with request_context(user_id=bob):
        marked = await memory.store.mark_session_extracted("ext-1")
        assert await memory.store.get_extracted_at("ext-1") == marked
        await memory.sessions.create("ext-1")


# --- upsert_fact's session ---------------------------------------------------------------------


async def test_a_fact_is_not_written_from_another_users_session(memory: Memory) -> None:
    """upsert_fact(session_id=Bob's session) for Alice, and the memory tool's save with a
    ToolContext naming it, recorded Bob's session as her fact's provenance (her memory_search
    then showed it). Now both are refused and nothing is written; her own session, and an id
    `sessions` does not hold, are recorded as given."""
    alice, bob = await new_user(memory), await new_user(memory)
    bsid = (await memory.sessions.create(user_id=bob)).id
    asid = (await memory.sessions.create(user_id=alice)).id
    await memory.store.upsert_fact("prefs", "editor", "vim", user_id=alice, session_id=asid)
    with pytest.raises(NotFoundError, match=f"no session '{bsid}' for this user"):
        await memory.store.upsert_fact("prefs", "editor", "emacs", user_id=alice, session_id=bsid)
    with pytest.raises(NotFoundError, match="for this user"):
        await memory.store.upsert_fact("prefs", "shell", "zsh", user_id=alice, session_id=bsid)
    save = {"action": "save", "category": "prefs", "key": "theme", "value": "dark"}
    answer = await memory.tools.call("memory", save, ToolContext(user_id=alice, session_id=bsid))
    assert answer.startswith("memory error: ") and f"no session '{bsid}'" in answer, answer
    facts = await memory.store.get_all_facts(user_id=alice)
    assert [(f.key, f.value, f.session_id) for f in facts] == [("editor", "vim", asid)]
    # An application's own session id (no row in `sessions`) is provenance as given.
    fact = await memory.store.upsert_fact(
        "prefs", "editor", "helix", user_id=alice, session_id="app-7"
    )
    assert (fact.value, fact.session_id) == ("helix", "app-7")
    # Bob writes from his own session.
    own = await memory.store.upsert_fact("prefs", "editor", "nano", user_id=bob, session_id=bsid)
    assert own.session_id == bsid


# --- add_chunks under a session kept outside sessions ---------------------------------------------


async def test_chunks_are_not_written_under_a_session_another_user_keeps_outside_sessions(
    memory: Memory,
) -> None:
    """Bob keeps "ext-1" outside `sessions` (his chunks name it). Alice's add_chunks under it
    was written, and then Bob could neither mark nor create his own session id. Refused now,
    as mark_session_extracted and sessions.create refuse it; so is an id Bob holds extraction
    state or sketches under."""
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.add_chunks(
        [chunk("User: bob external", T0)], user_id=bob, session_id="ext-1"
    )
    with request_context(user_id=alice), pytest.raises(NotFoundError, match="ext-1"):
        await memory.store.add_chunks([chunk("User: alice into ext", T0)], session_id="ext-1")
    assert await _chunk_count(memory, alice) == 0
    await memory.store.mark_session_extracted("ext-2", user_id=bob)
    await execute(
        memory,
        "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
        "VALUES (:u, 'scratchpad', 'ext-3', 'plan', 'bob''s')",
        u=bob,
    )
    for sid in ("ext-2", "ext-3"):
        with pytest.raises(NotFoundError, match=sid):
            await memory.store.add_chunks([chunk("User: alice", T0)], user_id=alice, session_id=sid)
    assert await _chunk_count(memory, alice) == 0
    # Bob goes on writing under his ids, and marks and creates them; Alice under her own.
    with request_context(user_id=bob):
        more = [chunk("User: bob again", T0 + timedelta(minutes=1), seq=3)]
        assert await memory.store.add_chunks(more, session_id="ext-1") == 1
        assert await memory.store.add_chunks(more, session_id="ext-3") == 1
        await memory.store.mark_session_extracted("ext-1")
        await memory.sessions.create("ext-1")
    assert await memory.store.add_chunks([chunk("User: a", T0)], user_id=alice, session_id="a-1")


async def test_two_users_first_chunks_under_one_new_id_at_once_go_to_one_of_them(
    memory: Memory,
) -> None:
    """Each add_chunks found none of the other's rows in its snapshot, and both were written:
    the id's lock (taken when it has no sessions row) makes the second see the first's."""
    alice, bob = await new_user(memory), await new_user(memory)
    for round_ in range(12):
        sid = f"race-{round_}"
        results = await asyncio.gather(
            *(
                memory.store.add_chunks(
                    [chunk(f"User: {who} {round_}", T0)], user_id=who, session_id=sid
                )
                for who in ((alice, bob) if round_ % 2 else (bob, alice))
            ),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["NotFoundError", "int"], results
        owners = "SELECT count(DISTINCT user_id) FROM memory_chunks WHERE session_id = :s"
        assert await scalar(memory, owners, s=sid) == 1
