"""What the facts and chunks sections share: their database's life, the memory they time, the
relation sizes they report, the EXPLAIN replay of a captured search, and the latency rows."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Final

import asyncpg
from pgvector.asyncpg import register_vector
from sqlalchemy import text

from benchmarks.harness import (
    BenchContext,
    CapturedStatement,
    Row,
    Sample,
    SqlClock,
    TimingEmbedder,
    fmt_ms,
    migrate,
    percentile,
)
from navi_memory import Memory, Settings, open_memory
from navi_memory.db import (
    commit_settings,
    parallel_settings,
    register_vector_codec,
    vector_search_settings,
)

__all__ = [
    "WARMUP_CALLS",
    "bench_database",
    "latency_rows",
    "loader",
    "p50_p95",
    "quiet_embedding_failures",
    "raw_connection",
    "raw_fetch",
    "relation_sizes",
    "replay_explained",
    "summarize_plan",
    "timed_memory",
]

WARMUP_CALLS: Final = 40
"""Calls made before a timed series and left out of it (pool, plans, caches)."""


# --- the section's database -------------------------------------------------------------------


@asynccontextmanager
async def bench_database(ctx: BenchContext, name: str, tag: str) -> AsyncIterator[str]:
    """A fresh database ``name`` migrated to head (its URL), dropped when the section ends."""
    ctx.log(f"{tag}: creating and migrating {name}")
    url = await ctx.server.create_database(name)
    await migrate(url)
    try:
        yield url
    finally:
        admin = await ctx.server.connect()
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@asynccontextmanager
async def loader(ctx: BenchContext, name: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection for the bulk load, vectors registered."""
    conn = await ctx.server.connect(name)
    try:
        await register_vector(conn)
        yield conn
    finally:
        await conn.close()


@asynccontextmanager
async def timed_memory(
    settings: Settings, embedder: TimingEmbedder
) -> AsyncIterator[tuple[Memory, SqlClock]]:
    """open_memory with the timing embedder, and the clock on its engines' statements (fact
    and sketch reads run on the cached-plans engine: a clock on ``memory.engine`` alone
    captured no search_facts statement, and the facts section failed)."""
    async with open_memory(settings, embedder=embedder) as memory:
        async with memory.engine.connect() as conn:
            vector_oid = await conn.scalar(text("SELECT 'vector'::regtype::oid"))
        clock = SqlClock(memory.engine, memory.cached_plans_engine, vector_oid=vector_oid)
        try:
            yield memory, clock
        finally:
            clock.close()


async def raw_connection(
    ctx: BenchContext,
    database: str,
    settings: Settings,
    *,
    synchronous_commit: bool = True,
    cached_plans: bool = False,
) -> asyncpg.Connection:
    """One plain asyncpg connection to ``database``, started with the settings the engine's
    connections carry (db.create_engine; ``cached_plans``: the engine fact and sketch reads
    run on) and the same binary vector codec: what "the same statement on raw asyncpg" runs on."""
    conn = await asyncpg.connect(
        host=ctx.server.socket_dir,
        user="postgres",
        database=database,
        server_settings={
            "plan_cache_mode": "force_generic_plan" if cached_plans else "force_custom_plan",
            **vector_search_settings(settings),
            **parallel_settings(settings),
            **commit_settings(settings),
            **({} if synchronous_commit else {"synchronous_commit": "off"}),
        },
    )
    await register_vector_codec(conn)
    return conn


async def raw_fetch(conn: asyncpg.Connection, statement: CapturedStatement) -> float:
    """Seconds ``conn`` takes to run ``statement`` and fetch its rows."""
    started = time.perf_counter()
    await conn.fetch(statement.sql, *statement.parameters)
    return time.perf_counter() - started


async def relation_sizes(memory: Memory, parts: Sequence[tuple[str, str]]) -> str:
    """ "Sizes: …" of each (label, SQL size expression), then shared_buffers: the sizes that
    decide what stays in memory. The expressions are fixed SQL of the section."""
    parts = [*parts, ("shared_buffers", "pg_size_bytes(current_setting('shared_buffers'))")]
    sql = " UNION ALL ".join(
        f"SELECT {i} AS n, CAST(:l{i} AS text) AS what, ({expr}) AS bytes"
        for i, (_, expr) in enumerate(parts)
    )
    params = {f"l{i}": label for i, (label, _) in enumerate(parts)}
    async with memory.engine.connect() as conn:
        rows = await conn.execute(text(f"SELECT what, bytes FROM ({sql}) s ORDER BY n"), params)
        sizes = rows.all()
    return (
        "Sizes: "
        + ", ".join(f"{what} {int(size or 0) / 2**20:,.0f} MiB" for what, size in sizes)
        + "."
    )


@contextmanager
def quiet_embedding_failures() -> Iterator[None]:
    """Silences the ``memory.embedding_failed`` warnings while a section's embedder is down."""
    logger = logging.getLogger("navi_memory.services.embedding")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


# --- plans ------------------------------------------------------------------------------------

_SCAN = re.compile(
    r"(Index Only Scan|Bitmap Index Scan|Index Scan|Seq Scan)(?: Backward)?"
    r"(?: using (\w+))?(?: on (\w+))?"
)
_EXECUTION = re.compile(r"Execution Time: ([\d.]+) ms")
_SERIALIZATION = re.compile(r"Serialization: time=([\d.]+) ms\s+output=(\d+)kB")
_VECTOR_LITERAL = re.compile(r"'\[[-0-9.,e]+\]'")
_PLANNING = re.compile(r"Planning Time: ([\d.]+) ms")


def summarize_plan(plan: str) -> str:
    """Which scans the plan ran (index names), and its planning and execution time."""
    scans = [f"{node} {index or table or ''}".strip() for node, index, table in _SCAN.findall(plan)]
    execution = _EXECUTION.search(plan)
    planning = _PLANNING.search(plan)
    timing = ""
    if execution and planning:
        timing = f"; planning {planning.group(1)} ms, execution {execution.group(1)} ms"
    serialization = _SERIALIZATION.search(plan)
    if serialization:
        timing += (
            f" (of which serializing {serialization.group(2)} kB of output "
            f"{serialization.group(1)} ms)"
        )
    return (" + ".join(dict.fromkeys(scans)) or "no scan") + timing


async def replay_explained(
    memory: Memory,
    statements: Sequence[CapturedStatement],
    explain: Callable[[str], bool],
    *,
    before: Sequence[str] = (),
) -> list[str]:
    """Replay ``statements`` as the package sent them, in one rolled-back transaction, each one
    ``explain`` picks under EXPLAIN (ANALYZE, BUFFERS, SERIALIZE); returns those plans, query
    vectors masked. ``before`` runs first in the same transaction (e.g. dropping an index)."""
    plans: list[str] = []
    # SERIALIZE (PostgreSQL >= 17) adds the cost of turning result rows into text.
    serialize = ", SERIALIZE" if memory.capabilities.server_version_num >= 170000 else ""
    async with memory.engine.connect() as conn:
        transaction = await conn.begin()
        try:
            for sql in before:
                await conn.execute(text(sql))
            for statement in statements:
                sql, parameters = statement.sql, statement.parameters
                if explain(sql):
                    sql = f"EXPLAIN (ANALYZE, BUFFERS{serialize}) " + sql
                result = await conn.exec_driver_sql(sql, parameters)
                if sql.startswith("EXPLAIN"):
                    plan = "\n".join(str(row[0]) for row in result)
                    plans.append(_VECTOR_LITERAL.sub("'[query vector]'", plan))
        finally:
            await transaction.rollback()
    return plans


# --- rows -------------------------------------------------------------------------------------


def latency_rows(label: str, samples: Sequence[Sample], detail: str = "") -> list[Row]:
    """The p50 row (with the SQL / Python / embedding split) and the p95 row of a search."""
    times = [s.without_embedding for s in samples]
    parts = (
        f"{len(samples)} queries, embedding excluded; p50 of parts: SQL "
        f"{fmt_ms(percentile([s.sql for s in samples], 50))} ms, Python "
        f"{fmt_ms(percentile([s.python for s in samples], 50))} ms, embedding "
        f"{fmt_ms(percentile([s.embed for s in samples], 50))} ms (apart)"
    )
    return [
        Row(f"{label} p50", fmt_ms(percentile(times, 50)), "ms", parts + detail),
        Row(f"{label} p95", fmt_ms(percentile(times, 95)), "ms"),
    ]


def p50_p95(label: str, times: Sequence[float], detail: str) -> Row:
    """One row "``label`` p50 / p95" for a slice of a series (a kind of query, a user size)."""
    return Row(
        f"{label} p50 / p95",
        f"{fmt_ms(percentile(times, 50))} / {fmt_ms(percentile(times, 95))}",
        "ms",
        detail,
    )
