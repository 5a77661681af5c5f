"""Small async factories for integration tests."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import struct
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from navi_memory import ChunkDraft, Memory

_T = TypeVar("_T")


async def new_user(memory: Memory, name: str | None = None) -> uuid.UUID:
    uid = uuid.uuid4()
    await memory.users.ensure(uid, name)
    return uid


async def new_session_row(memory: Memory, user_id: uuid.UUID, session_id: str | None = None) -> str:
    """A sessions row owned by ``user_id`` (the session store of a later layer makes these)."""
    sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
    async with memory.engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO sessions (id, user_id) VALUES (:id, :u)"), {"id": sid, "u": user_id}
        )
    return sid


async def scalar(memory: Memory, sql: str, **params: object) -> object:
    async with memory.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar()


async def execute(memory: Memory, sql: str, **params: object) -> None:
    """Run ``sql`` in a transaction of its own."""
    async with memory.engine.begin() as conn:
        await conn.execute(text(sql), params)


async def refuse_inserts(memory: Memory, table: str, refuse: bool = True) -> None:
    """A real failure of every later INSERT into ``table`` (a CHECK no row meets, NOT VALID so
    the rows already there are not checked), or, with ``refuse=False``, its end."""
    if refuse:
        await execute(memory, f"ALTER TABLE {table} ADD CONSTRAINT refuse CHECK (false) NOT VALID")
    else:
        await execute(memory, f"ALTER TABLE {table} DROP CONSTRAINT refuse")


async def add_filler_chunks(memory: Memory, owner: uuid.UUID, count: int, marks: str) -> None:
    """``count`` chunks of ``owner`` over 50 sessions, ~1.2 KB of the same words each (like real
    chunks: a big user's table is too big to scan cheaply) and the number ``g`` of the chunk,
    then ``marks``: an SQL text expression of ``g`` adding the words a test looks for."""
    await execute(
        memory,
        "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
        " end_seq, started_at, ended_at)"
        " SELECT :u, 's' || (g % 50),"
        f"   'User: ' || repeat('talk about weather and lunch ', 40) || g || {marks},"
        "   md5(g::text), g, g, now(), now()"
        " FROM generate_series(1, :n) g",
        u=owner,
        n=count,
    )


async def index_chunk_text(memory: Memory) -> None:
    """What the chunk indexer would make of every chunk's text, in one statement (the rows
    stay in memory_chunk_text_queue too; a chunk in both counts once, as indexed)."""
    await execute(
        memory,
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
        " SELECT id, user_id, session_id, ended_at, length(tsv), tsv FROM"
        " (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM memory_chunks) c",
    )


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, ``node`` first."""
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


async def sleeping_statements(memory: Memory) -> int:
    """How many statements of this database wait in ``pg_sleep`` now (a test's slow trigger)."""
    return int(
        str(
            await scalar(
                memory,
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event = 'PgSleep' AND datname = current_database()",
            )
        )
    )


async def wait_for_a_sleeping_statement(memory: Memory) -> None:
    """Until a statement of this database waits in ``pg_sleep`` (a test's slow trigger): the
    statement is then in flight, holding what it has locked, so what the test does next
    overlaps it for sure. Gives up after 10 s."""
    async with asyncio.timeout(10):
        while True:
            if await sleeping_statements(memory):
                return
            await asyncio.sleep(0.005)


async def slow_trigger(memory: Memory, table: str, event: str, seconds: float) -> None:
    """A BEFORE ``event`` row trigger named ``slow`` on ``table`` that sleeps ``seconds`` a row:
    a statement writing ``table`` stays in flight, holding its locks, long enough for a test to
    act meanwhile (see wait_for_a_sleeping_statement). ``DROP TRIGGER slow ON table`` ends it."""
    returned = "OLD" if event == "DELETE" else "NEW"
    await execute(
        memory,
        "CREATE OR REPLACE FUNCTION navi_test_slow() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_sleep({seconds}); RETURN {returned}; END $$",
    )
    await execute(
        memory,
        f"CREATE TRIGGER slow BEFORE {event} ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION navi_test_slow()",
    )


@asynccontextmanager
async def statements_on(
    engine: AsyncEngine, on_sent: Callable[[str], None] | None = None
) -> AsyncIterator[list[str]]:
    """Every statement ``engine``'s connections ran to its end while the block runs (and
    ``on_sent(statement)`` as each ends): those SQLAlchemy executes (its events) and the
    search reads sent straight to the asyncpg driver (repositories.statements.fetch_rows: the
    driver's query logger, added at checkout; it reports one loop turn later, which the
    block's end waits for). BEGIN, COMMIT and pings are not statements here."""
    seen: list[str] = []
    loggers: dict[Any, Callable[[Any], None]] = {}

    def sent(statement: str) -> None:
        seen.append(statement)
        if on_sent is not None:
            on_sent(statement)

    def after(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent(statement)

    def logged(record: Any) -> None:
        if record.args:
            sent(record.query)

    def checkout(dbapi_connection: Any, *_args: Any) -> None:
        driver = dbapi_connection.driver_connection
        if driver not in loggers:
            loggers[driver] = logged
            driver.add_query_logger(logged)

    event.listen(engine.sync_engine, "after_cursor_execute", after)
    event.listen(engine.sync_engine.pool, "checkout", checkout)
    try:
        yield seen
        await asyncio.sleep(0)
    finally:
        event.remove(engine.sync_engine, "after_cursor_execute", after)
        event.remove(engine.sync_engine.pool, "checkout", checkout)
        for driver in loggers:
            driver.remove_query_logger(logged)


CHUNK_T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
"""When chunk_draft's chunks begin: chunk ``seq`` ends ``seq`` minutes later."""


def chunk_draft(content: str, seq: int, breadcrumbs: Sequence[str] = ()) -> ChunkDraft:
    """A chunk of one message, ``seq``, ``seq`` minutes after CHUNK_T0 (so a higher seq is
    newer), its hash the content's."""
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=seq,
        end_seq=seq,
        started_at=CHUNK_T0 + timedelta(minutes=seq),
        ended_at=CHUNK_T0 + timedelta(minutes=seq),
        breadcrumbs=list(breadcrumbs),
    )


async def delete_user_during(
    memory: Memory,
    user_id: uuid.UUID,
    work: Coroutine[Any, Any, _T],
    paused: asyncio.Event,
    resume: asyncio.Event,
) -> tuple[_T, bool]:
    """Run ``work`` until it sets ``paused`` (a write holding its locks, waiting for
    ``resume``), start ``users.delete(user_id)``, give it 0.3 s to queue behind the write's
    locks, then resume: (what ``work`` returned, what the delete returned)."""
    task = asyncio.create_task(work)
    try:
        await asyncio.wait_for(paused.wait(), 10)
        delete = asyncio.create_task(memory.users.delete(user_id))
        await asyncio.sleep(0.3)
    finally:
        resume.set()
    done = await asyncio.wait_for(task, 10)
    return done, await asyncio.wait_for(delete, 10)


def _unit(v: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def _half(v: Sequence[float]) -> list[float]:
    return [struct.unpack("e", struct.pack("e", x))[0] for x in v]


def _cosine_distance(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1 - dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def near_tie(query: Sequence[float], distance: float) -> tuple[list[float], list[float]]:
    """Two vectors at cosine distance ~``distance`` from ``query``: A nearer than B exactly (by
    5e-6 to 3e-5), B nearer than A once both are normalised and rounded to half precision (as
    the vector indexes hold them) by more than 8e-6."""
    rnd = random.Random(7)
    unit = _unit(query)
    half_query = _half(unit)
    theta = math.acos(1 - distance)
    while True:
        noise = _unit([rnd.gauss(0, 1) for _ in query])
        dot = sum(a * b for a, b in zip(noise, unit, strict=True))
        orth = _unit([n - dot * a for n, a in zip(noise, unit, strict=True)])
        a = [math.cos(theta) * x + math.sin(theta) * y for x, y in zip(unit, orth, strict=True)]
        nudge = _unit([rnd.gauss(0, 1) for _ in query])
        b = _unit([x + 1e-3 * y for x, y in zip(a, nudge, strict=True)])
        exact_gap = _cosine_distance(b, query) - _cosine_distance(a, query)
        half_gap = _cosine_distance(_half(a), half_query) - _cosine_distance(_half(b), half_query)
        if 5e-6 < exact_gap < 3e-5 and half_gap > 8e-6:
            return a, b
