"""Many writers of many users at once, in generated interleavings: every write lands exactly
once, in its own tenant, through the request context each task set — and nothing a task reads
belongs to another user."""

from __future__ import annotations

import asyncio
import collections
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from navi_memory import Memory, PermissionDeniedError, request_context
from navi_memory.text.keys import same_key
from tests.reliability.strategies import HOSTILE_RUN
from tests.reliability.world import chunk_draft

USERS: Final = 6
OPS: Final = ("fact", "merge", "kv", "append", "chunk", "compress", "search", "peek")
SPELLINGS: Final = ("favourite_colour", "favorite_color", "favouriteColour", "Favorite Color")
"""One key in four spellings: concurrent dedupe writes of them must leave one visible row."""
INTERLEAVINGS: Final = 12
"""Generated schedules per `make test` run (each of up to SCHEDULE_OPS concurrent operations)."""
SCHEDULE_OPS: Final = 48
SOAK_INTERLEAVINGS: Final = 100
SOAK_SCHEDULE_OPS: Final = 120

_runs = itertools.count()


@dataclass
class Tenant:
    uid: uuid.UUID
    sid: str
    facts: set[str] = field(default_factory=set)
    kv: set[str] = field(default_factory=set)
    appended: list[str] = field(default_factory=list)
    chunks: set[str] = field(default_factory=set)
    merged: bool = False


async def tenants(memory: Memory) -> list[Tenant]:
    found = []
    for _ in range(USERS):
        uid = uuid.uuid4()
        await memory.users.ensure(uid)
        found.append(Tenant(uid, (await memory.sessions.create(user_id=uid)).id))
    return found


def _owner_of(tag: str) -> int:
    return int(tag.split("-")[1])


async def run_op(
    memory: Memory, people: list[Tenant], who: int, op: str, tag: str, yields: int
) -> None:
    """One operation of tenant ``who``, in a task of its own, acting through the request
    context only (no user_id argument anywhere)."""
    me, other = people[who], people[(who + 1) % len(people)]
    for _ in range(yields):
        await asyncio.sleep(0)  # a different interleaving for a different draw
    with request_context(user_id=me.uid, session_id=me.sid):
        store = memory.store
        if op == "fact":
            me.facts.add(tag)
            await store.upsert_fact("tags", tag, tag)
        elif op == "merge":
            me.merged = True
            await store.upsert_fact("tags", SPELLINGS[yields % len(SPELLINGS)], tag, dedupe=True)
        elif op == "kv":
            me.kv.add(tag)
            await memory.kv.set("notes", tag, tag, session_id=me.sid)
        elif op == "append":
            me.appended.append(tag)
            await memory.sessions.append(me.sid, "user", tag)
        elif op == "chunk":
            me.chunks.add(tag)
            assert await store.add_chunks([chunk_draft(tag)]) == 1
        elif op == "compress":
            await memory.sessions.compress(me.sid, keep_last=1)
        elif op == "search":
            prefix = f"u-{who}-"
            owners = {f.user_id for f in await store.search_facts(prefix)}
            owners |= {c.user_id for c in await store.search_chunks(prefix)}
            owners |= {f.user_id for f in await store.get_all_facts()}
            assert owners <= {me.uid}
            hits = await memory.kv.search_values(None, "notes", [prefix])
            assert {h.user_id for h in hits} <= {me.uid}
        else:  # peek: reach for the neighbour's rows every way the API allows
            assert await memory.sessions.get(other.sid) is None
            assert await memory.sessions.history(other.sid) == []
            assert await memory.kv.list("notes", session_id=other.sid) == []
            assert await store.search_chunks("", session_id=other.sid) == []
            with pytest.raises(PermissionDeniedError):
                await store.get_all_facts(user_id=other.uid)
            with pytest.raises(PermissionDeniedError):
                await store.upsert_fact("tags", "intrusion", tag, user_id=other.uid)


async def rows_by_owner(memory: Memory) -> dict[str, list[tuple[uuid.UUID, str]]]:
    """(owner, text) of every row that can hold a tag, straight from the tables."""
    queries = {
        "facts": "SELECT user_id, value FROM memory_facts WHERE merged_into IS NULL",
        "kv": "SELECT user_id, key FROM kv_store WHERE scope = 'notes'",
        "messages": "SELECT s.user_id, m.content FROM session_messages m "
        "JOIN sessions s ON s.id = m.session_id WHERE m.kind = 'message'",
        "chunks": "SELECT user_id, content FROM memory_chunks",
    }
    found: dict[str, list[tuple[uuid.UUID, str]]] = {}
    async with memory.engine.connect() as conn:
        for name, sql in queries.items():
            found[name] = [(row[0], row[1]) for row in await conn.execute(text(sql))]
    return found


async def check_tenancy(memory: Memory, people: list[Tenant], run: int) -> None:
    """Every write exactly once, in its tenant; one visible row per merged key."""
    owner_of = {p.uid: i for i, p in enumerate(people)}
    rows = await rows_by_owner(memory)
    marker = f"-r{run}-"
    for table, pairs in rows.items():
        for owner, content in pairs:
            for tag in (w for w in content.split() if marker in w):
                assert owner_of[owner] == _owner_of(tag), (
                    f"{table}: {tag} is in user {owner}'s rows"
                )
    for i, person in enumerate(people):
        values = collections.Counter(v for o, v in rows["facts"] if o == person.uid)
        assert all(values[t] == 1 for t in person.facts), f"user {i}: a fact is missing or twice"
        visible_spellings = [
            f.key
            for f in await memory.store.get_all_facts(person.uid)
            if same_key(f.key, SPELLINGS[0])
        ]
        assert len(visible_spellings) == (1 if person.merged else 0), visible_spellings
        keys = collections.Counter(k for o, k in rows["kv"] if o == person.uid)
        assert all(keys[t] == 1 for t in person.kv)
        contents = collections.Counter(c for o, c in rows["messages"] if o == person.uid)
        assert all(contents[t] == 1 for t in person.appended), f"user {i}: a message is lost"
        chunks = collections.Counter(c for o, c in rows["chunks"] if o == person.uid)
        assert all(chunks[t] == 1 for t in person.chunks)


async def run_schedule(
    memory: Memory, people: list[Tenant], schedule: list[tuple[int, str, int]]
) -> None:
    run = next(_runs)
    await asyncio.gather(
        *(
            run_op(memory, people, who, op, f"u-{who}-r{run}-{n}", yields)
            for n, (who, op, yields) in enumerate(schedule)
        )
    )
    await check_tenancy(memory, people, run)


def schedules(size: int) -> st.SearchStrategy[list[tuple[int, str, int]]]:
    return st.lists(
        st.tuples(
            st.integers(0, USERS - 1), st.sampled_from(OPS), st.integers(min_value=0, max_value=4)
        ),
        min_size=size // 2,
        max_size=size,
    )


@pytest.mark.slow
@settings(HOSTILE_RUN, max_examples=INTERLEAVINGS)
@given(schedule=schedules(SCHEDULE_OPS))
async def test_generated_interleavings_of_many_tenants_lose_nothing_and_leak_nothing(
    busy_memory: Memory, schedule: list[tuple[int, str, int]]
) -> None:
    """Up to 48 operations of six users started at once, ordered by the draw: every fact,
    sketch, message and chunk lands once in its own tenant; merges leave one visible row;
    reads and peeks of each task see its own user's rows only."""
    people = await tenants(busy_memory)
    await run_schedule(busy_memory, people, schedule)


@pytest.mark.slow
async def test_two_hundred_concurrent_writes_of_ten_users(busy_memory: Memory) -> None:
    """200 writes started at once, twenty per user (facts, sketches, messages, chunks), each
    task acting through its own request context: all land once, each in its tenant."""
    people = (await tenants(busy_memory)) + (await tenants(busy_memory))[:4]
    schedule = [
        (who, op, n % 3)
        for n, (who, op) in enumerate(
            (w, o) for w in range(len(people)) for o in ("fact", "kv", "append", "chunk") * 5
        )
    ]
    await run_schedule(busy_memory, people, schedule)


@pytest.mark.soak
@settings(HOSTILE_RUN, max_examples=SOAK_INTERLEAVINGS, derandomize=False)
@given(schedule=schedules(SOAK_SCHEDULE_OPS))
async def test_soak_interleavings(
    busy_memory: Memory, schedule: list[tuple[int, str, int]]
) -> None:
    """The same contract over many more, larger, freshly random schedules (make soak)."""
    people = await tenants(busy_memory)
    await run_schedule(busy_memory, people, schedule)
