"""The unit of work every facade call runs in: one AsyncSession, one transaction, committed on
success and rolled back on any error — or, for a call that is one statement, an autocommit
connection (``single_statement``). Both translate driver errors into StorageError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.db import redact_url
from navi_memory.errors import NotFoundError, StorageError

__all__ = ["single_statement", "unit_of_work"]


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
