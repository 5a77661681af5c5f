"""The search reads sent straight to the pooled connection's asyncpg driver
(repositories.statements.fetch_rows): the same rows as through SQLAlchemy, SQLAlchemy's own
path inside a transaction and for statements it must process, and a connection lost under
such a read is a ConnectionLostError that costs the pool nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Integer, bindparam, event, text
from sqlalchemy.types import TypeDecorator

from navi_memory import Memory, db, errors
from navi_memory.repositories.facts import FactSearchRepository
from navi_memory.repositories.statements import fetch_rows
from navi_memory.testing import hashed_embedding
from navi_memory.unit_of_work import pooled_reads, single_statement, unit_of_work
from tests.integration.factories import new_user, scalar, statements_on


async def seed_facts(memory: Memory, uid: uuid.UUID) -> None:
    await memory.store.upsert_fact("work", "employer", "Acme in Berlin", user_id=uid)
    await memory.store.upsert_fact("work", "office", "Berlin, Acme tower", user_id=uid)
    await memory.store.upsert_fact("home", "city", "Lisbon", user_id=uid)


async def test_a_pooled_read_returns_what_sqlalchemy_returns(memory: Memory) -> None:
    """The fact search on PooledStatements (the driver) and on a single_statement connection
    (SQLAlchemy): the same rows, columns and values."""
    uid = await new_user(memory)
    await seed_facts(memory, uid)
    vector = hashed_embedding("Acme Berlin")
    async with pooled_reads(memory.cached_plans_engine) as reads:
        direct = await FactSearchRepository(session=reads).search(
            uid, vector, ["acme", "berlin"], 10, 2.0
        )
    async with single_statement(memory.cached_plans_engine) as conn:
        through = await FactSearchRepository(session=conn).search(
            uid, vector, ["acme", "berlin"], 10, 2.0
        )
    assert type(direct[0]).__module__.startswith("asyncpg")  # the driver's own rows
    assert type(through[0]).__module__.startswith("sqlalchemy")
    assert [dict(row) for row in direct] == [dict(row) for row in through]
    assert {row["key"] for row in direct} == {"employer", "office", "city"}  # every distance


async def test_inside_a_transaction_the_read_sees_the_transaction(memory: Memory) -> None:
    """In a unit of work the read goes through SQLAlchemy's transaction: it sees what the
    transaction wrote and has not committed (a read beside it on the driver would not)."""
    uid = await new_user(memory)
    async with memory.sessionmaker() as session, session.begin():
        await session.execute(
            text(
                "INSERT INTO memory_facts (user_id, category, key, value) "
                "VALUES (:u, 'p', 'pet', 'a cat named Acme')"
            ),
            {"u": uid},
        )
        rows = await FactSearchRepository(session=session).search(uid, None, ["acme"], 5, 0.3)
        assert [row["key"] for row in rows] == ["pet"]
        await session.rollback()
    assert await memory.store.search_facts("acme", user_id=uid) == []


class _Doubled(TypeDecorator[int]):
    """A bind type with a processor: SQLAlchemy must run it, so the read cannot skip it."""

    impl = Integer
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: object) -> int | None:
        return None if value is None else value * 2


async def test_statements_sqlalchemy_must_process_go_through_sqlalchemy(memory: Memory) -> None:
    """A bind parameter with a processor, and one expanded at execution: both answered as
    SQLAlchemy would, on the search paths' reads too (through SQLAlchemy there)."""
    processed = text("SELECT CAST(:n AS int) AS n").bindparams(bindparam("n", type_=_Doubled()))
    expanded = text("SELECT x AS n FROM unnest(ARRAY[1, 2, 3]) x WHERE x IN :xs").bindparams(
        bindparam("xs", expanding=True)
    )
    plain = text("SELECT CAST(:n AS int) AS n")
    async with pooled_reads(memory.engine) as conn:
        assert [row["n"] for row in await fetch_rows(conn, processed, {"n": 21})] == [42]
        assert [row["n"] for row in await fetch_rows(conn, expanded, {"xs": [1, 3]})] == [1, 3]
        assert [row["n"] for row in await fetch_rows(conn, plain, {"n": 21})] == [21]
        # Twice: the compiled text is kept, and still right.
        assert [row["n"] for row in await fetch_rows(conn, plain, {"n": 5})] == [5]


async def test_pooled_reads_hold_a_connection_only_while_a_statement_runs(
    memory: Memory,
) -> None:
    """The search paths' reads: each statement takes a pooled connection and gives it back
    with its rows; the fact search answers as through SQLAlchemy; a statement SQLAlchemy must
    process runs on a SQLAlchemy connection of its own, just as briefly."""
    uid = await new_user(memory)
    await seed_facts(memory, uid)
    engine = memory.cached_plans_engine
    pool = engine.pool
    vector = hashed_embedding("Acme Berlin")
    processed = text("SELECT CAST(:n AS int) AS n").bindparams(bindparam("n", type_=_Doubled()))
    async with pooled_reads(engine) as reads:
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
        direct = await FactSearchRepository(session=reads).search(
            uid, vector, ["acme", "berlin"], 10, 2.0
        )
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
        assert [row["n"] for row in await fetch_rows(reads, processed, {"n": 4})] == [8]
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
    async with memory.sessionmaker() as session, session.begin():
        through = await FactSearchRepository(session=session).search(
            uid, vector, ["acme", "berlin"], 10, 2.0
        )
    assert [dict(row) for row in direct] == [dict(row) for row in through]


@pytest.mark.parametrize("hold", [False, True])
async def test_a_failing_pooled_read_is_a_navi_memory_error_and_leaks_nothing(
    memory: Memory, hold: bool
) -> None:
    """A statement the server refuses, on the driver: the caller gets a StorageError (not
    asyncpg's own), and the connection is back in the pool and serves the next read — also
    when it was held for the block (a unified-search lane's)."""
    broken = text("SELECT CAST(:n AS int) / 0 AS n")
    engine = memory.cached_plans_engine
    with pytest.raises(errors.StorageError, match="division by zero"):
        async with pooled_reads(engine, hold=hold) as reads:
            await fetch_rows(reads, text("SELECT 1 AS n"), {})
            await fetch_rows(reads, broken, {"n": 1})
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    async with pooled_reads(engine) as reads:
        assert [row["n"] for row in await fetch_rows(reads, text("SELECT 7 AS n"), {})] == [7]


async def test_the_search_reads_are_seen_and_sent_once(memory: Memory) -> None:
    """search_facts is one statement whichever path carries it (nothing sent twice, no
    SQLAlchemy execution beside the driver's)."""
    uid = await new_user(memory)
    await seed_facts(memory, uid)
    async with statements_on(memory.cached_plans_engine) as sent:
        hits = await memory.store.search_facts("Acme", user_id=uid)
    assert {hit.key for hit in hits} == {"employer", "office"}
    assert len(sent) == 1 and "memory_facts" in sent[0]


async def test_a_connection_killed_under_a_driver_read_is_connection_lost(
    quiet_memory: Memory,
) -> None:
    """search_facts waits (memory_facts locked) when its backend is terminated: the caller gets
    a ConnectionLostError, not asyncpg's own error; the dead connection never serves again and
    the next search answers."""
    memory = quiet_memory
    uid = await new_user(memory)
    await seed_facts(memory, uid)
    async with memory.engine.connect() as blocker:
        await blocker.execute(text("LOCK TABLE memory_facts IN ACCESS EXCLUSIVE MODE"))
        search = asyncio.create_task(memory.store.search_facts("Acme", user_id=uid))
        waiting = None
        for _ in range(500):
            waiting = await scalar(
                memory,
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND pid <> pg_backend_pid() AND query LIKE '%head\\_kept%' LIMIT 1",
            )
            if waiting is not None:
                break
            await asyncio.sleep(0.01)
        assert waiting is not None, "the search never waited for the lock"
        await scalar(memory, "SELECT pg_terminate_backend(:pid)", pid=waiting)
        with pytest.raises(errors.ConnectionLostError) as lost:
            await asyncio.wait_for(search, 30)
        await blocker.rollback()
    assert "safe to" in str(lost.value).lower() or "again" in str(lost.value).lower()
    for _ in range(3):  # every pooled connection serves: the dead one was replaced
        assert {h.key for h in await memory.store.search_facts("Acme", user_id=uid)} == {
            "employer",
            "office",
        }
    assert memory.cached_plans_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_lost_without_an_eof_costs_one_search_not_one_per_pooled_connection(
    quiet_memory: Memory,
) -> None:
    """Every pooled connection dies without the client seeing an EOF (a dead network path, a
    failover): the first search is a ConnectionLostError, and, as SQLAlchemy does on a
    disconnect, that retires every connection of the pool made before it, so the next search
    answers (it used to fail once for each pooled connection left)."""
    memory = quiet_memory
    uid = await new_user(memory)
    await seed_facts(memory, uid)
    engine = memory.cached_plans_engine
    pooled = [await engine.raw_connection() for _ in range(3)]
    drivers: list[Any] = [fairy.driver_connection for fairy in pooled]
    for fairy in pooled:
        fairy.close()
    for driver in drivers:
        # The EOF never read: the event loop cannot tell the connection is gone.
        driver._transport.pause_reading()
    pids = [driver.get_server_pid() for driver in drivers]
    gone = await scalar(
        memory,
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) "
        "FROM unnest(CAST(:pids AS int[])) pid",
        pids=pids,
    )
    assert gone == 3
    with pytest.raises(errors.ConnectionLostError):
        await asyncio.wait_for(memory.store.search_facts("Acme", user_id=uid), 10)
    for _ in range(3):
        hits = await asyncio.wait_for(memory.store.search_facts("Acme", user_id=uid), 10)
        assert {hit.key for hit in hits} == {"employer", "office"}
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


@contextmanager
def checkouts(*engines: Any) -> Iterator[list[int]]:
    """The backend pid of every connection checked out of ``engines``' pools meanwhile."""
    seen: list[int] = []

    def count(dbapi_connection: Any, *_: Any) -> None:
        seen.append(dbapi_connection.driver_connection.get_server_pid())

    pools = [engine.sync_engine.pool for engine in engines]
    for pool in pools:
        event.listen(pool, "checkout", count)
    try:
        yield seen
    finally:
        for pool in pools:
            event.remove(pool, "checkout", count)


PID = text("SELECT pg_backend_pid() AS pid")


async def test_held_pooled_reads_take_one_connection_for_all_their_statements(
    memory: Memory,
) -> None:
    """pooled_reads(hold=True), a lane of unified search: the first statement's connection
    serves the next ones (one checkout), a statement the server refuses leaves it serving,
    and it is back in the pool when the block ends."""
    engine = memory.cached_plans_engine
    pool = engine.pool
    with checkouts(engine) as seen:
        async with pooled_reads(engine, hold=True) as reads:
            assert pool.checkedout() == 0  # type: ignore[attr-defined]
            [first] = await fetch_rows(reads, PID, {})
            assert pool.checkedout() == 1  # type: ignore[attr-defined]
            with pytest.raises(asyncpg.DivisionByZeroError):
                await fetch_rows(reads, text("SELECT 1 / 0 AS n"), {})
            [again] = await fetch_rows(reads, PID, {})
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
    assert first["pid"] == again["pid"]
    assert seen == [first["pid"]]
    # Without hold: a checkout for each statement, none kept between them.
    with checkouts(engine) as seen:
        async with pooled_reads(engine) as reads:
            await fetch_rows(reads, PID, {})
            assert pool.checkedout() == 0  # type: ignore[attr-defined]
            await fetch_rows(reads, PID, {})
    assert len(seen) == 2


async def test_a_held_connection_killed_is_connection_lost_and_never_serves_again(
    quiet_memory: Memory,
) -> None:
    """The backend of a held connection is terminated between two statements: the next one is
    a ConnectionLostError, the dead connection leaves the pool, and the next reads answer."""
    memory = quiet_memory
    engine = memory.cached_plans_engine
    with pytest.raises(errors.ConnectionLostError):
        async with pooled_reads(engine, hold=True) as reads:
            [row] = await fetch_rows(reads, PID, {})
            await scalar(memory, "SELECT pg_terminate_backend(:pid)", pid=row["pid"])
            for _ in range(100):  # until the loop has seen the EOF, or the statement fails
                await asyncio.sleep(0.01)
                await fetch_rows(reads, PID, {})
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    async with pooled_reads(engine, hold=True) as reads:
        [fresh] = await fetch_rows(reads, PID, {})
        assert fresh["pid"] != row["pid"]


async def test_unified_search_takes_one_connection_a_lane(quiet_memory: Memory) -> None:
    """memory.search over every store: the facts and the sketches, read one after the other,
    share their lane's one checkout; the raw history has its own: two in all (no background
    indexer takes one meanwhile)."""
    memory = quiet_memory
    uid = await new_user(memory)
    await seed_facts(memory, uid)
    await memory.kv.set("scratchpad", "plan", "Berlin trip for Acme", user_id=uid)
    await memory.search.search("Acme Berlin", user_id=uid)  # the user now known small
    with checkouts(memory.engine, memory.cached_plans_engine) as seen:
        hits = await memory.search.search("Acme Berlin", user_id=uid)
    assert {hit.source_type for hit in hits} == {"fact", "sketch"}
    assert len(seen) == 2 and len(set(seen)) == 2


async def test_a_cancelled_lane_gives_its_held_connection_back(quiet_memory: Memory) -> None:
    """A lane cancelled while its statement runs (the caller gave up on the search): the held
    connection goes back to the pool, and the pool's connections serve the next reads."""
    memory = quiet_memory
    engine = memory.cached_plans_engine
    started = asyncio.Event()

    async def lane() -> None:
        async with pooled_reads(engine, hold=True) as reads:
            await fetch_rows(reads, PID, {})
            started.set()
            await fetch_rows(reads, text("SELECT pg_sleep(30) AS n"), {})

    task = asyncio.create_task(lane())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.05)  # the sleep is on the server
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    for _ in range(3):
        async with pooled_reads(engine, hold=True) as reads:
            assert [row["n"] for row in await fetch_rows(reads, text("SELECT 3 AS n"), {})] == [3]


@pytest.mark.parametrize("hold", [False, True])
async def test_a_read_cancelled_mid_statement_never_goes_back_to_the_pool(
    quiet_memory: Memory, hold: bool
) -> None:
    """A caller's timeout cancels a driver read while the server runs it: the connection may be
    halfway through the protocol (a statement parsed, its locks and transaction open), and
    SQLAlchemy's reset on return would send nothing on it. It is closed instead — its server
    process ends — and the pool serves the next reads."""
    memory = quiet_memory
    engine = memory.cached_plans_engine
    # Long: the server must stop it at once (the cancel request), not run it to its end.
    sleep = "SELECT pg_sleep(20) AS n /* cancelled */"

    async def read() -> None:
        async with pooled_reads(engine, hold=hold) as reads:
            await fetch_rows(reads, PID, {})
            await fetch_rows(reads, text(sleep), {})

    await cancel_and_see_it_stop(memory, asyncio.create_task(read()), sleep)
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    for _ in range(3):
        async with pooled_reads(engine, hold=True) as reads:
            assert [row["n"] for row in await fetch_rows(reads, text("SELECT 3 AS n"), {})] == [3]


async def poll(read: Callable[[], Awaitable[Any]], seconds: float = 10) -> Any:
    """``read()`` until it answers something other than None (within ``seconds``)."""
    async with asyncio.timeout(seconds):
        while True:
            answer = await read()
            if answer is not None:
                return answer
            await asyncio.sleep(0.01)


async def test_a_second_cancellation_never_cuts_the_graceful_close_short(
    quiet_memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled again while its connection closes (a task group tearing down, a second
    timeout): the close goes on by itself, so the cancel request still reaches the server and
    the statement stops at once."""
    memory = quiet_memory
    engine = memory.cached_plans_engine
    sleep = "SELECT pg_sleep(20) AS n /* cancelled twice */"
    spawn = db.greenlet_spawn  # type: ignore[attr-defined]

    def cancelled_again(fn: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", "") == "invalidate":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # the second cancellation, as the close starts
        return spawn(fn, *args, **kwargs)

    monkeypatch.setattr(db, "greenlet_spawn", cancelled_again)

    async def read() -> None:
        async with pooled_reads(engine) as reads:
            await fetch_rows(reads, text(sleep), {})

    await cancel_and_see_it_stop(memory, asyncio.create_task(read()), sleep)

    async def given_back() -> bool | None:
        # The close goes on in a task of its own after the second cancellation ended the
        # wait for it: the connection is given back when it ends, not before the read returns.
        return engine.pool.checkedout() == 0 or None  # type: ignore[attr-defined]

    assert await poll(given_back, seconds=5)


async def cancel_and_see_it_stop(memory: Memory, task: asyncio.Task[None], statement: str) -> None:
    """Once ``statement`` runs on the server, cancel ``task``; its server process must end
    within 5 s (the statement sleeps far longer: only the cancel request stops it)."""
    sleeping = "SELECT pid FROM pg_stat_activity WHERE query = :q AND state = 'active'"
    pid = await poll(lambda: scalar(memory, sleeping, q=statement))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gone = "SELECT count(*) = 0 OR NULL FROM pg_stat_activity WHERE pid = :pid"
    await poll(lambda: scalar(memory, gone, pid=pid), seconds=5)


@pytest.mark.parametrize("block", ["unit_of_work", "single_statement", "pooled_reads"])
async def test_a_navi_memory_error_from_an_inner_block_passes_an_outer_one_as_it_is(
    memory: Memory, block: str
) -> None:
    """A ConnectionLostError (an OSError too, so one of the driver errors an outer block
    translates) raised inside another block reaches the caller as it was raised, not wrapped
    again in a message of its own message (the extraction runs units of work inside a
    single_statement block)."""
    inner = errors.ConnectionLostError("lost the connection (inner)")
    blocks: dict[str, Callable[[], AbstractAsyncContextManager[object]]] = {
        "unit_of_work": lambda: unit_of_work(memory.sessionmaker),
        "single_statement": lambda: single_statement(memory.engine),
        "pooled_reads": lambda: pooled_reads(memory.engine),
    }
    with pytest.raises(errors.ConnectionLostError) as raised:
        async with blocks[block]():
            raise inner
    assert raised.value is inner
