"""SQL for kv_store: a user's key/value entries per scope, user-wide or bound to a session."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import ColumnElement, Integer, case, cast, delete, func, literal, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import KvRow
from navi_memory.repositories.like import contains_pattern

__all__ = ["KvRepository"]

_UNIQUE = "uq_kv_store_user_id_scope_session_id_key"


def _same_session(session_id: str | None) -> ColumnElement[bool]:
    # None names the user-wide entry (NULLS NOT DISTINCT in the unique key), not "any session".
    return KvRow.session_id.is_(None) if session_id is None else KvRow.session_id == session_id


def _owner(user_id: uuid.UUID | None) -> ColumnElement[bool]:
    return literal(True) if user_id is None else KvRow.user_id == user_id


def _term_match(term: str) -> ColumnElement[bool]:
    pattern = contains_pattern(term)
    return or_(KvRow.key.ilike(pattern, escape="\\"), KvRow.value.ilike(pattern, escape="\\"))


class KvRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def upsert(
        self, user_id: uuid.UUID, scope: str, session_id: str | None, key: str, value: str
    ) -> KvRow:
        stmt = insert(KvRow).values(
            user_id=user_id, scope=scope, session_id=session_id, key=key, value=value
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

    async def search(
        self,
        user_id: uuid.UUID | None,
        scope: str,
        terms: Sequence[str],
        *,
        limit: int,
        session_id: str | None,
        prefer_session_id: str | None,
    ) -> list[tuple[KvRow, int]]:
        """Rows of the scope matching any term in key or value, with how many distinct terms
        they match: most terms first, then rows of ``prefer_session_id``, then the newest.
        No terms: the newest rows, ``prefer_session_id`` first, each with 0 terms hit."""
        hits: ColumnElement[int] = literal(0)
        for index, term in enumerate(terms):
            hit: ColumnElement[int] = cast(_term_match(term), Integer)
            hits = hit if index == 0 else hits + hit
        preferred: ColumnElement[int] = (
            literal(0)
            if prefer_session_id is None
            else case((KvRow.session_id == prefer_session_id, 1), else_=0)
        )
        stmt = select(KvRow, hits.label("terms_hit")).where(_owner(user_id), KvRow.scope == scope)
        if session_id is not None:
            stmt = stmt.where(KvRow.session_id == session_id)
        if terms:
            stmt = stmt.where(or_(*(_term_match(term) for term in terms)))
        stmt = stmt.order_by(
            preferred.desc(), hits.desc(), KvRow.updated_at.desc(), KvRow.id.desc()
        ).limit(limit)
        rows = await self.session.execute(stmt)
        return [(row, int(count)) for row, count in rows]
