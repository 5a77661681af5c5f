"""The unit of work every facade call (and every batch of a job) runs in: one AsyncSession, one
transaction, committed on success and rolled back on any error — or, for a call that is one
statement, an autocommit connection (``single_statement``), or statements each their own
transaction on a pooled connection's driver (``pooled_reads``, ``pooled_write``: the search
paths and upsert_fact, db.PooledStatements).
Both translate driver errors (db.translate_driver_error): a connection lost before the COMMIT
is a ConnectionLostError, safe to call again, and so is one lost at the COMMIT of a unit of work
declared ``read_only``. Services and repositories never open either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.db import DRIVER_ERRORS, PooledStatements, check_loop, translate_driver_error
from navi_memory.errors import ConfigError, NaviMemoryError

__all__ = [
    "LaneEngines",
    "engine_of",
    "pooled_reads",
    "pooled_write",
    "single_statement",
    "statement_or_transaction",
    "unit_of_work",
]


@asynccontextmanager
async def unit_of_work(
    sessionmaker: async_sessionmaker[AsyncSession], *, read_only: bool = False
) -> AsyncIterator[AsyncSession]:
    """A transaction. With an autocommit sessionmaker each statement commits itself: use one
    only for reads and for writes a repeat cannot double (see single_statement).

    ``read_only``: the body only reads — no row written, not even a mark, a ledger entry or a
    touch (a lock taken is not a write). A connection lost at its COMMIT is then a
    ConnectionLostError like one lost before it: nothing was written, so calling again is
    safe; without it such a loss is a StorageError saying the outcome is unknown. A promise of
    the caller's, not a ``SET TRANSACTION READ ONLY`` (which would cost a round trip)."""
    bind = sessionmaker.kw.get("bind")
    call = _Call(read_only=read_only)
    with _translated(bind, call):
        async with sessionmaker() as session, session.begin():
            yield session
            # Reached only when the body succeeded: what fails from here on is the COMMIT.
            call.committing = True


@asynccontextmanager
async def single_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit mode, for a unit of work that is one statement: the statement
    is its own transaction, without the BEGIN and COMMIT round trips (nor an ORM session).

    Only for reads and for writes a repeat cannot double (add_chunks skips stored chunks): a
    connection lost mid-statement is reported as safe to call again."""
    with _translated(engine, _Call()):
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn


@asynccontextmanager
async def pooled_reads(
    engine: AsyncEngine, *, hold: bool = False
) -> AsyncIterator[PooledStatements]:
    """The search paths' reads (db.PooledStatements): each statement its own transaction on a
    pooled connection; none held between statements, or (``hold``: reads one after the other)
    the first one's held until the block ends. Only for reads (pooled_write opens it for one
    write). Their driver errors translated as single_statement's."""
    reads = PooledStatements(engine, hold=hold)
    with _translated(engine, _Call()):
        try:
            yield reads
        finally:
            await reads.release()


@asynccontextmanager
async def pooled_write(engine: AsyncEngine) -> AsyncIterator[PooledStatements]:
    """A write that is one statement, its own transaction (no BEGIN or COMMIT round trip), on
    a pooled connection's driver (db.PooledStatements): single_statement without SQLAlchemy's
    Connection and execution around the statement. Only for a statement complete in itself
    that a repeat cannot double: a connection lost mid-statement is reported as safe to call
    again."""
    async with pooled_reads(engine) as statements:
        yield statements


@dataclass(frozen=True, slots=True)
class LaneEngines:
    """Where a read of several concurrent lanes takes its connections: ``custom`` (custom plans
    forced, for statements whose plan depends on the user) or ``cached`` (plans cached, for
    those whose plan does not; None: ``custom`` for every lane). See db.create_engine."""

    custom: AsyncEngine
    cached: AsyncEngine | None = None

    async def run(
        self,
        cached_plans: Sequence[bool],
        read: Callable[[int, PooledStatements], Awaitable[None]],
    ) -> None:
        """``read(i, reads)`` for each lane ``i``, concurrently, each with PooledStatements of its
        own (``pooled_reads``), from ``cached`` where the lane's flag is set. Every lane's read
        is one statement at a time, so none needs a transaction.

        Each lane runs in its own task, on one pooled connection taken at its first statement
        and given back after its last: the first lane's statement is on the server while the
        next lane checks out, and a quick lane's connection is back in the pool while a slow
        one still reads. Every lane runs to its end; then the first failure, if any, is raised
        (plain gather would leave the others running on connections their caller is giving
        back)."""

        async def lane(index: int, cached: bool) -> None:
            engine = self.cached if cached and self.cached else self.custom
            async with pooled_reads(engine, hold=True) as reads:
                await read(index, reads)

        results = await asyncio.gather(
            *(lane(i, cached) for i, cached in enumerate(cached_plans)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result


def statement_or_transaction(
    sessionmaker: async_sessionmaker[AsyncSession], *, one_statement: bool
) -> AbstractAsyncContextManager[AsyncSession | AsyncConnection]:
    """``single_statement`` when the work is one statement, else ``unit_of_work``: one
    statement is its own transaction, without the BEGIN and COMMIT round trips."""
    if one_statement:
        return single_statement(engine_of(sessionmaker))
    return unit_of_work(sessionmaker)


def engine_of(sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncEngine:
    """The engine ``sessionmaker`` is bound to; ConfigError when it is bound to none."""
    bind = sessionmaker.kw.get("bind")
    if not isinstance(bind, AsyncEngine):
        raise ConfigError(
            "navi-memory needs a sessionmaker bound to an AsyncEngine (got "
            f"{type(bind).__name__}): use open_memory(), or "
            "async_sessionmaker(navi_memory.db.create_engine(settings, url))"
        )
    return bind


@dataclass(slots=True)
class _Call:
    committing: bool = False
    read_only: bool = False


@contextmanager
def _translated(bind: AsyncEngine | None, call: _Call) -> Iterator[None]:
    """Driver errors as navi_memory errors, naming the database. A navi_memory error from an
    inner block passes as it is (ConnectionLostError is an OSError, one of DRIVER_ERRORS).
    First, a call from another event loop than the Memory's is refused (db.check_loop)."""
    check_loop(bind)
    try:
        yield
    except NaviMemoryError:
        raise
    except DRIVER_ERRORS as exc:
        raise translate_driver_error(
            exc, bind, committing=call.committing, read_only=call.read_only
        ) from exc
