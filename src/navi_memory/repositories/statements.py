"""Textual statements built once per shape.

``text()`` scans its SQL for bind parameters on every call: for the long search statements
that scan cost more than executing a small search (about a quarter of a millisecond each).
Statements whose text depends on the call's shape (a user or everyone, a session filter, a
vector or none) go through ``statement()``, which keeps one ``TextClause`` per distinct text.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, TypeAlias

from sqlalchemy import ColumnElement, Dialect, TextClause, TextualSelect, any_, literal, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.types import TypeEngine

from navi_memory.db import PooledStatements

__all__ = [
    "XACT_LOCK",
    "FetchedRow",
    "Reads",
    "any_of",
    "fetch_rows",
    "owner_where",
    "queue_pop",
    "statement",
]

XACT_LOCK: Final = text("SELECT pg_advisory_xact_lock(hashtextextended(:scope, 0))")
"""A transaction-scoped advisory lock on the ``scope`` string (PostgreSQL hashes it to the
key): a user's category, a summary, a session id, an import's user."""

Reads: TypeAlias = AsyncSession | AsyncConnection | PooledStatements
"""Where a repository's reads run: a unit of work's session, a single_statement connection,
or the search paths' PooledStatements."""

FetchedRow: TypeAlias = Mapping[Any, Any]
"""A row read by column name: SQLAlchemy's RowMapping, or asyncpg's Record (fetch_rows)."""

_SHAPES = 512
"""Distinct statement texts kept: every search has a handful of shapes, so this bounds
memory without ever evicting in practice."""


@lru_cache(maxsize=_SHAPES)
def statement(sql: str) -> TextClause:
    """The ``TextClause`` of ``sql``, made once per distinct text."""
    return text(sql)


def any_of(
    column: ColumnElement[Any] | InstrumentedAttribute[Any],
    values: Sequence[Any],
    item: TypeEngine[Any],
) -> ColumnElement[bool]:
    """``column = ANY(:values)``, the values sent as one array parameter of ``item``s: ``IN``
    sends one parameter a value, and the driver refuses more than 32,767 of them (a session of
    40,000 messages could not be compressed)."""
    return column == any_(literal(list(values), ARRAY(item)))


def owner_where(
    alias: str, user_id: uuid.UUID | None, session_id: str | None, params: dict[str, Any]
) -> list[str]:
    """The conditions narrowing ``alias`` to a user and to a session (None: not narrowed),
    their parameters (``uid``, ``sid``) added to ``params``."""
    where = []
    if user_id is not None:
        where.append(f"{alias}.user_id = :uid")
        params["uid"] = user_id
    if session_id is not None:
        where.append(f"{alias}.session_id = :sid")
        params["sid"] = session_id
    return where


def queue_pop(
    queue: str, key: str, parent: str, where: str = "TRUE", returning: Sequence[str] = ()
) -> str:
    """The CTEs ``picked``, ``held`` and ``taken`` of a batch taken off ``queue``: up to
    ``:limit`` rows, lowest ``key`` first, skipping rows another indexer holds; ``taken``
    returns ``key`` (and the queue row's columns ``returning`` names), and
    ``picked`` counts what the batch looked at (less than ``:limit``: the queue is empty for
    this indexer). ``where``: a condition on the queue row ``q``.

    The rows are picked once, in a locked CTE, and deleted ``USING`` it: as ``DELETE … WHERE key
    IN (SELECT … LIMIT … SKIP LOCKED)`` the subquery could be run again for a row another
    indexer had just taken, and a batch of 64 took 1,340 rows (two indexers at once, 100k
    bench).

    Each row's ``parent`` (``id`` = ``key``: the fact or chunk it queues) is locked too, FOR KEY
    SHARE, skipping parents a delete holds: the indexer's foreign key checks would otherwise
    wait for such a parent while holding the queue row that the delete's cascade waits for, a
    deadlock (CI, 2026-12-05: a fact deleted while the fact indexer ran). A row whose parent is
    held stays queued (the delete's cascade, or a later batch, drops it); a row whose parent is
    gone (the chunk text queue has no foreign key) is taken and indexes nothing. So the
    indexer never waits for a delete, and a delete waits for one batch at most."""
    return f"""picked AS (
        -- The queue alone, by its primary key: with the parent joined here, the vector-only
        -- batches of a 100k drain took 126 s against 27 s (measured, 2026-12-05).
        SELECT q.{key} FROM {queue} q WHERE {where}
        ORDER BY q.{key} LIMIT :limit FOR UPDATE SKIP LOCKED
    ),
    held AS (
        SELECT p.id FROM {parent} p JOIN picked k ON p.id = k.{key}
        FOR KEY SHARE OF p SKIP LOCKED
    ),
    taken AS (
        DELETE FROM {queue} q USING picked k
        WHERE q.{key} = k.{key}
          AND (q.{key} IN (SELECT id FROM held)
               OR NOT EXISTS (SELECT 1 FROM {parent} p WHERE p.id = q.{key}))
        RETURNING {", ".join(f"q.{column}" for column in (key, *returning))}
    )"""


@dataclass(frozen=True, slots=True)
class _DriverText:
    """A statement as the asyncpg dialect sends it: ``$n`` placeholders, and the name each
    stands for, in order."""

    sql: str
    names: tuple[str, ...]


_Text: TypeAlias = TextClause | TextualSelect
_DRIVER_TEXT: weakref.WeakKeyDictionary[_Text, dict[str, _DriverText | None]] = (
    weakref.WeakKeyDictionary()
)
"""Each statement's driver text, by dialect; kept as long as the statement is."""


def _driver_text(clause: _Text, dialect: Dialect) -> _DriverText | None:
    """``clause`` compiled once for ``dialect``; None when SQLAlchemy would do more than send it
    (a bind parameter with a processor, or one expanded at execution): such a statement goes
    through SQLAlchemy."""
    by_dialect = _DRIVER_TEXT.setdefault(clause, {})
    if dialect.name in by_dialect:
        return by_dialect[dialect.name]
    compiled = clause.compile(dialect=dialect)
    plain = not compiled._bind_processors and not any(
        bind.expanding or bind.literal_execute for bind in compiled.binds.values()
    )
    found = _DriverText(str(compiled), tuple(compiled.positiontup or ())) if plain else None
    by_dialect[dialect.name] = found
    return found


async def fetch_rows(conn: Reads, clause: _Text, params: Mapping[str, Any]) -> list[FetchedRow]:
    """The rows of ``clause`` (one statement complete in itself: a read, or upsert_fact's
    write) as mappings by column name.

    On PooledStatements (the search paths, upsert_fact) the statement goes straight to a pooled
    connection's asyncpg driver, compiled once (db.PooledStatements.fetch): SQLAlchemy's
    execution and result rows cost ~0.1 ms a call, a fifth of a small search
    (docs/benchmarks.md). Same text, same parameters, same server-side prepared statement cache
    (asyncpg's); asyncpg's Records read by name as RowMappings do. A statement SQLAlchemy must
    process, and every read on a session or a connection (a transaction's, single_statement's),
    goes through SQLAlchemy, which owns their state (and invalidates what a lost connection
    takes with it)."""
    if isinstance(conn, PooledStatements):
        found = _driver_text(clause, conn.engine.dialect)
        if found is not None:
            return await conn.fetch(found.sql, [params[name] for name in found.names])
    return list((await conn.execute(clause, params)).mappings())
