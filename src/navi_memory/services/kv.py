"""kv_store entries: a named session must be the user's, and ``search_values`` ranks by the
preferred session, then terms matched, then recency."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.errors import NotFoundError
from navi_memory.repositories.kv import KvRepository, KvSearchRepository
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.repositories.statements import FetchedRow
from navi_memory.schemas import KvEntry, KvHit

__all__ = ["KvService"]


def _hit(row: FetchedRow) -> KvHit:
    return KvHit(
        user_id=row["user_id"],
        scope=row["scope"],
        session_id=row["session_id"],
        key=row["key"],
        value=row["value"],
        updated_at=row["updated_at"],
        terms_hit=int(row["terms_hit"]),
    )


class KvService:
    """The kv rules, on the session (transaction) each call is given. Reads are of the user's
    own rows (every read filters by user; a global read is read_all's): a session filter finds
    the user's entries under that id, whether or not ``sessions`` holds it (an application's
    own session ids, an import's), and another user's session's entries never."""

    async def set(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        scope: str,
        session_id: str | None,
        key: str,
        value: str,
    ) -> KvEntry:
        if session_id is not None:
            # Share-locked, so a session delete waits for this write (and then takes it along).
            owner = await SessionRepository(session=session).owner(session_id, lock=True)
            if owner != user_id:
                raise NotFoundError(f"no session {session_id!r} for this user")
        row = await KvRepository(session=session).upsert(user_id, scope, session_id, key, value)
        return KvEntry.model_validate(row)

    async def get(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        scope: str,
        session_id: str | None,
        key: str,
    ) -> str | None:
        row = await KvRepository(session=session).get(user_id, scope, session_id, key)
        return None if row is None else row.value

    async def delete(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        scope: str,
        session_id: str | None,
        key: str,
    ) -> bool:
        return await KvRepository(session=session).delete(user_id, scope, session_id, key)

    async def list_entries(
        self,
        session: AsyncSession,
        scope_user: uuid.UUID | None,
        scope: str,
        session_id: str | None,
    ) -> list[KvEntry]:
        rows = await KvRepository(session=session).list_entries(scope_user, scope, session_id)
        return [KvEntry.model_validate(row) for row in rows]

    async def search_values(
        self,
        session: AsyncSession,
        scope_user: uuid.UUID | None,
        scope: str,
        terms: Sequence[str],
        *,
        limit: int,
        session_id: str | None,
        prefer_session_id: str | None,
    ) -> list[KvHit]:
        found = await KvSearchRepository(session=session).search(
            scope_user,
            scope,
            terms,
            limit=limit,
            session_id=session_id,
            prefer_session_id=prefer_session_id,
            short_terms=True,  # the caller's own terms, not words parsed from a query
        )
        return [_hit(row) for row in found]
