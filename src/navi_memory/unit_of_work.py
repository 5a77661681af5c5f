"""The unit of work every facade call (and every batch of a job) runs in: one AsyncSession, one
transaction, committed on success and rolled back on any error — or, for a call that is one
statement, an autocommit connection (``single_statement``, the package's only way to get one).
Both translate driver errors into StorageError. Services and repositories never open either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager

from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.db import redact_url
from navi_memory.errors import ConfigError, NotFoundError, StorageError

__all__ = [
    "engine_of",
    "single_statement",
    "statement_or_transaction",
    "unit_of_work",
]


@asynccontextmanager
async def unit_of_work(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    bind = sessionmaker.kw.get("bind")
    with _translated(bind):
        async with sessionmaker() as session, session.begin():
            yield session


@asynccontextmanager
async def single_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit mode, for a unit of work that is one statement: the statement
    is its own transaction, without the BEGIN and COMMIT round trips (nor an ORM session)."""
    with _translated(engine):
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn


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


@contextmanager
def _translated(bind: AsyncEngine | None) -> Iterator[None]:
    """Driver errors as StorageError (a missing user as NotFoundError), naming the database."""
    try:
        yield
    except IntegrityError as exc:
        if _sqlstate(exc) == FOREIGN_KEY_VIOLATION and "user_id" in str(exc.orig):
            raise NotFoundError(
                "that user does not exist: create it first with memory.users.ensure(user_id)"
            ) from exc
        raise StorageError(_describe(bind, exc)) from exc
    except (DBAPIError, OSError, TimeoutError) as exc:
        raise StorageError(_describe(bind, exc)) from exc
    except SQLAlchemyError as exc:
        raise StorageError(_describe(bind, exc)) from exc


FOREIGN_KEY_VIOLATION = "23503"


def _sqlstate(exc: DBAPIError) -> str | None:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    cause = getattr(orig, "__cause__", None)
    return code or getattr(cause, "sqlstate", None)


def _describe(bind: AsyncEngine | None, exc: BaseException) -> str:
    where = redact_url(bind.url) if bind is not None else "the database"
    detail = getattr(exc, "orig", None) or exc
    line = (str(detail).strip().splitlines() or [""])[0]
    return f"database error at {where}: {detail.__class__.__name__}: {line}"
