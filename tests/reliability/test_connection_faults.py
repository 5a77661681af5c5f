"""Connections killed under navi-memory (pg_terminate_backend): at random moments while writes,
merges and searches run, and exactly while the pool sets a new connection up. Every failure is a
StorageError — ConnectionLostError when nothing was committed — nothing is half-written, and the
next call works."""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass

import pytest
from sqlalchemy.engine import make_url

from navi_memory import Memory, StorageError, errors, open_memory
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.dbtools import EmbeddedServer
from tests.integration.factories import scalar
from tests.reliability.faults import BackendKiller, kill_while_connecting
from tests.reliability.world import chunk_draft

WORKERS = 6
ROUNDS = 8
SEED = 20261203


@dataclass(frozen=True, slots=True)
class Outcome:
    operation: str
    tag: str
    error: BaseException | None


async def attempt(log: list[Outcome], operation: str, tag: str, call: Awaitable[object]) -> None:
    try:
        await call
    except Exception as exc:
        log.append(Outcome(operation, tag, exc))
    else:
        log.append(Outcome(operation, tag, None))


def raw_errors(log: list[Outcome]) -> collections.Counter[str]:
    return collections.Counter(
        f"{o.operation}: {type(o.error).__module__}.{type(o.error).__name__}: {o.error}"[:160]
        for o in log
        if o.error is not None and not isinstance(o.error, StorageError)
    )


async def test_backends_killed_mid_call_surface_only_as_storage_errors_and_half_write_nothing(
    fault_memory: Memory, pg_server: EmbeddedServer
) -> None:
    """Writes with merges, chunk writes and both searches under random backend kills: only
    StorageErrors, no ConnectionLostError for a write that landed, no half-merged fact, no
    partly written chunk batch, and every call succeeds once the kills stop."""
    memory = fault_memory
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    sid = (await memory.sessions.create(user_id=uid)).id
    log: list[Outcome] = []

    async def worker(w: int) -> None:
        for r in range(ROUNDS):
            tag = f"w{w}r{r}"
            store = memory.store
            await attempt(
                log,
                "upsert",
                tag,
                store.upsert_fact("colours", f"favourite_colour_{tag}", f"red-{tag}", user_id=uid),
            )
            await attempt(
                log,
                "merge",
                tag,
                store.upsert_fact(
                    "colours", f"favorite_color_{tag}", f"blue-{tag}", user_id=uid, dedupe=True
                ),
            )
            chunks = [chunk_draft(f"{tag} first part"), chunk_draft(f"{tag} second part", 3)]
            await attempt(log, "chunks", tag, store.add_chunks(chunks, user_id=uid, session_id=sid))
            await attempt(log, "search_facts", tag, store.search_facts("colour", user_id=uid))
            await attempt(log, "search_chunks", tag, store.search_chunks("part", user_id=uid))

    with BackendKiller(pg_server, memory.engine.url.database or "", seed=SEED) as killer:
        await asyncio.gather(*(worker(w) for w in range(WORKERS)))

    assert raw_errors(log) == {}
    failed = [o for o in log if o.error is not None]
    assert killer.kills > 0 and failed, "no fault was injected: the test proved nothing"

    # The next call of every kind succeeds.
    await memory.store.upsert_fact("colours", "after", "green", user_id=uid)
    await memory.store.add_chunks([chunk_draft("after the kills")], user_id=uid, session_id=sid)
    assert await memory.store.search_facts("green", user_id=uid)
    assert await memory.store.search_chunks("kills", user_id=uid)

    # A ConnectionLostError promises that nothing of the call was committed.
    for outcome in failed:
        if outcome.operation in ("upsert", "merge") and isinstance(
            outcome.error, errors.ConnectionLostError
        ):
            value = ("red-" if outcome.operation == "upsert" else "blue-") + outcome.tag
            assert (
                await scalar(memory, "SELECT count(*) FROM memory_facts WHERE value = :v", v=value)
                == 0
            )
    # Merges are whole: two spellings of one key are never both visible, and a hidden row
    # points at a visible row of the same user and category.
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM memory_facts a JOIN memory_facts b ON a.user_id = b.user_id "
            "AND a.key = 'favourite_colour_' || substr(b.key, 16) "
            "AND b.key LIKE 'favorite_color_%' "
            "WHERE a.merged_into IS NULL AND b.merged_into IS NULL",
        )
        == 0
    )
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM memory_facts h LEFT JOIN memory_facts v ON v.id = h.merged_into "
            "AND v.merged_into IS NULL AND v.user_id = h.user_id AND v.category = h.category "
            "WHERE h.merged_into IS NOT NULL AND v.id IS NULL",
        )
        == 0
    )
    # A chunk batch is all there or not at all, and each stored vector is queued or indexed.
    await memory.store.wait_chunk_indexing()
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM (SELECT split_part(content, ' ', 1) AS tag, count(*) AS n "
            "FROM memory_chunks GROUP BY 1) t WHERE n <> 2 AND tag <> 'after'",
        )
        == 0
    )
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM memory_chunks c WHERE c.embedding IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM memory_chunk_vectors v WHERE v.chunk_id = c.id) "
            "AND NOT EXISTS (SELECT 1 FROM memory_chunk_vector_queue q WHERE q.chunk_id = c.id)",
        )
        == 0
    )


async def test_a_connection_killed_while_the_pool_sets_it_up_is_connection_lost(
    memory: Memory, pg_server: EmbeddedServer
) -> None:
    """The vector-codec registration of a new pooled connection is killed: the call raises
    ConnectionLostError, writes nothing, and the next call opens a healthy connection."""
    await memory.engine.dispose()  # the next call must open a new connection
    uid = uuid.uuid4()
    with (
        kill_while_connecting(pg_server, memory.engine.url.database or "") as victims,
        pytest.raises(errors.ConnectionLostError),
    ):
        await memory.users.ensure(uid)
    assert victims and "pg_extension" in victims[0]
    assert await memory.users.get(uid) is None
    assert await memory.users.ensure(uid) is True


async def test_open_memory_whose_first_connection_is_killed_is_connection_lost(
    db_url: str, fake_ollama: FakeOllama, pg_server: EmbeddedServer
) -> None:
    """open_memory's first connection (the capability probe) killed during its set-up is a
    ConnectionLostError, not a driver error; opening again works."""
    settings = make_settings(db_url, fake_ollama)
    dbname = make_url(db_url).database or ""
    with (
        kill_while_connecting(pg_server, dbname) as victims,
        pytest.raises(errors.ConnectionLostError),
    ):
        async with open_memory(settings):
            pass
    assert victims
    async with open_memory(settings) as memory:
        assert memory.capabilities.vector
