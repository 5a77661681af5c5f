"""The unit of work every facade call runs in: one AsyncSession, one transaction.

Commits on success, rolls back on any error, and translates driver errors into StorageError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.db import redact_url
from navi_memory.errors import NotFoundError, StorageError

__all__ = ["unit_of_work"]


@asynccontextmanager
async def unit_of_work(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    try:
        async with sessionmaker() as session, session.begin():
            yield session
    except IntegrityError as exc:
        if _sqlstate(exc) == FOREIGN_KEY_VIOLATION and "user_id" in str(exc.orig):
            raise NotFoundError(
                "that user does not exist: create it first with memory.users.ensure(user_id)"
            ) from exc
        raise StorageError(_describe(sessionmaker, exc)) from exc
    except (DBAPIError, OSError, TimeoutError) as exc:
        raise StorageError(_describe(sessionmaker, exc)) from exc
    except SQLAlchemyError as exc:
        raise StorageError(_describe(sessionmaker, exc)) from exc


FOREIGN_KEY_VIOLATION = "23503"


def _sqlstate(exc: DBAPIError) -> str | None:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    cause = getattr(orig, "__cause__", None)
    return code or getattr(cause, "sqlstate", None)


def _describe(sessionmaker: async_sessionmaker[AsyncSession], exc: BaseException) -> str:
    bind = sessionmaker.kw.get("bind")
    where = redact_url(bind.url) if bind is not None else "the database"
    detail = getattr(exc, "orig", None) or exc
    line = (str(detail).strip().splitlines() or [""])[0]
    return f"database error at {where}: {detail.__class__.__name__}: {line}"
