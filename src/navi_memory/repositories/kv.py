"""SQL for kv_store: a user's key/value entries per scope, user-wide or bound to a session."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import ColumnElement, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import KvRow
from navi_memory.repositories.like import term_patterns
from navi_memory.repositories.statements import (
    FetchedRow,
    Reads,
    fetch_rows,
    owner_where,
    statement,
)

__all__ = ["SHOWS_SOMETHING", "KvRepository", "KvSearchRepository"]

_UNIQUE = "uq_kv_store_user_id_scope_session_id_key"


def _same_session(session_id: str | None) -> ColumnElement[bool]:
    # None names the user-wide entry (NULLS NOT DISTINCT in the unique key), not "any session".
    return KvRow.session_id.is_(None) if session_id is None else KvRow.session_id == session_id


def _owner(user_id: uuid.UUID | None) -> ColumnElement[bool]:
    return literal(True) if user_id is None else KvRow.user_id == user_id


class KvRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def upsert(
        self, user_id: uuid.UUID, scope: str, session_id: str | None, key: str, value: str
    ) -> KvRow:
        # The time of the write, not of the transaction's start (now(), the columns' default):
        # a write that waited for a lock is as new as an overwrite's clock_timestamp() says.
        # Read once (a subquery), so a new entry's two columns hold the same instant: two
        # clock_timestamp() calls in one VALUES row differ by a microsecond now and then.
        written = select(func.clock_timestamp().label("at")).subquery("written")
        stmt = insert(KvRow).from_select(
            ["user_id", "scope", "session_id", "key", "value", "created_at", "updated_at"],
            select(
                literal(user_id, KvRow.user_id.type),
                literal(scope, KvRow.scope.type),
                literal(session_id, KvRow.session_id.type),
                literal(key, KvRow.key.type),
                literal(value, KvRow.value.type),
                written.c.at,
                written.c.at,
            ),
        )
        row_id = await self.session.scalar(
            stmt.on_conflict_do_update(
                constraint=_UNIQUE,
                set_={"value": stmt.excluded.value, "updated_at": func.clock_timestamp()},
            ).returning(KvRow.id)
        )
        row = await self.session.get(KvRow, row_id, populate_existing=True)
        assert row is not None  # just written in this transaction
        return row

    async def get(
        self, user_id: uuid.UUID, scope: str, session_id: str | None, key: str
    ) -> KvRow | None:
        return await self.session.scalar(
            select(KvRow).where(
                KvRow.user_id == user_id,
                KvRow.scope == scope,
                _same_session(session_id),
                KvRow.key == key,
            )
        )

    async def delete(
        self, user_id: uuid.UUID, scope: str, session_id: str | None, key: str
    ) -> bool:
        result = await self.session.execute(
            delete(KvRow)
            .where(
                KvRow.user_id == user_id,
                KvRow.scope == scope,
                _same_session(session_id),
                KvRow.key == key,
            )
            .returning(KvRow.id)
        )
        return result.first() is not None

    async def list_entries(
        self, user_id: uuid.UUID | None, scope: str, session_id: str | None
    ) -> list[KvRow]:
        """The scope's entries; ``session_id`` narrows to one session (None: every entry)."""
        stmt = select(KvRow).where(_owner(user_id), KvRow.scope == scope)
        if session_id is not None:
            stmt = stmt.where(KvRow.session_id == session_id)
        stmt = stmt.order_by(KvRow.key, KvRow.session_id.asc().nulls_first(), KvRow.id)
        return list((await self.session.scalars(stmt)).all())


SHOWS_SOMETHING: Final = (
    "[^\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u00ad\\u061c\\u1680\\u180e"
    "\\u2000-\\u200f\\u2028-\\u202f\\u205f-\\u2064\\u2066-\\u206f\\u3000\\ufeff"
    "\\ufff9-\\ufffb\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a"
    "\\U000e0001\\U000e0020-\\U000e007f]"
)
"""A PostgreSQL regular expression matching a value that is not blank as ``validation.is_blank``
reads it: one character outside the blank ones (whitespace, zero-width and other invisible
format characters). Written out, not derived at run time (a walk of the Unicode table, ~0.15 s,
on the first search of every process); tests/unit/test_blank_class.py derives it from is_blank
and keeps the two equal."""


class KvSearchRepository:
    """search_values's read: one statement, so it runs on an autocommit connection (unified
    search) as well as in a transaction."""

    def __init__(self, *, session: Reads) -> None:
        self.session = session

    async def search(
        self,
        user_id: uuid.UUID | None,
        scope: str,
        terms: Sequence[str],
        *,
        limit: int,
        session_id: str | None,
        prefer_session_id: str | None,
        with_value: bool = False,
        short_terms: bool = False,
    ) -> list[FetchedRow]:
        """Rows of the scope matching any term in key or value, each with ``terms_hit`` (how
        many distinct terms it matches): rows of ``prefer_session_id`` first, then most terms,
        then the newest. No terms: the newest rows, ``prefer_session_id`` first, 0 terms hit.
        ``with_value``: only rows whose value shows something (a cleared note, empty or blank
        as ``is_blank`` reads it, has nothing to show).
        ``short_terms``: keep one-character terms beside longer ones (``like.term_patterns``).

        The terms go in as one ``text[]`` of escaped patterns: one statement shape whatever
        their number, prepared once per connection, and no expression tree built per term."""
        params: dict[str, Any] = {
            "scope": scope,
            "limit": limit,
            "patterns": term_patterns(terms, short_terms=short_terms),
        }
        where = ["k.scope = :scope", *owner_where("k", user_id, session_id, params)]
        if with_value:
            where.append("k.value ~ :shows_something")
            params["shows_something"] = SHOWS_SOMETHING
        if terms:
            where.append(
                "(k.key ILIKE ANY (CAST(:patterns AS text[])) "
                "OR k.value ILIKE ANY (CAST(:patterns AS text[])))"
            )
        order = ["h.hits DESC", "k.updated_at DESC", "k.id DESC"]
        if prefer_session_id is not None:
            order.insert(0, "(k.session_id IS NOT DISTINCT FROM :prefer) DESC")
            params["prefer"] = prefer_session_id
        stmt = statement(
            f"""
            SELECT k.id, k.user_id, k.scope, k.session_id, k.key, k.value, k.created_at,
                   k.updated_at, h.hits AS terms_hit
            FROM kv_store k,
                 LATERAL (SELECT count(*) AS hits FROM unnest(CAST(:patterns AS text[])) p
                          WHERE k.key ILIKE p OR k.value ILIKE p) h
            WHERE {" AND ".join(where)}
            ORDER BY {", ".join(order)}
            LIMIT :limit
            """
        )
        return await fetch_rows(self.session, stmt, params)
