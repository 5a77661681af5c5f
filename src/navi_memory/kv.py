"""memory.kv: a user's key/value entries per scope, user-wide or bound to one session. The
scratchpad's sketches live here (scope ``scratchpad``, one key per section).

``search_values`` is the read path unified search uses for sketches (spec: KvStore.search_values).
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.constants import MAX_TEXT_CHARS
from navi_memory.errors import InvalidInputError, InvalidTypeError, NotFoundError
from navi_memory.models import KvRow
from navi_memory.repositories.kv import KvRepository
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.request_context import read_scope, write_scope
from navi_memory.schemas import KvEntry, KvHit
from navi_memory.sessions import check_session_id
from navi_memory.text.terms import MAX_QUERY_TERMS
from navi_memory.unit_of_work import unit_of_work
from navi_memory.validation import check_int, check_text

__all__ = ["KvStore"]

SCOPE_MAX_CHARS: Final = 100
KEY_MAX_CHARS: Final = 500
TERM_MAX_CHARS: Final = 500
MAX_LIMIT: Final = 1000




def _check_scope(scope: Any) -> str:
    return check_text("scope", scope, max_chars=SCOPE_MAX_CHARS)


def _check_key(key: Any) -> str:
    return check_text("key", key, max_chars=KEY_MAX_CHARS)


def _check_optional_session(session_id: Any) -> str | None:
    return None if session_id is None else check_session_id(session_id)


def _check_terms(terms: Any) -> list[str]:
    """Distinct non-blank terms (case-insensitive, first spelling kept), at most 16."""
    if isinstance(terms, str) or not isinstance(terms, list | tuple):
        raise InvalidTypeError(f"terms must be a list of str, got {type(terms).__name__}")
    kept: list[str] = []
    seen: set[str] = set()
    for term in terms:
        term = check_text("term", term, max_chars=TERM_MAX_CHARS, allow_empty=True).strip()
        if term and term.casefold() not in seen:
            seen.add(term.casefold())
            kept.append(term)
    return kept[:MAX_QUERY_TERMS]


def _hit(row: KvRow, terms_hit: int) -> KvHit:
    return KvHit(
        user_id=row.user_id,
        scope=row.scope,
        session_id=row.session_id,
        key=row.key,
        value=row.value,
        updated_at=row.updated_at,
        terms_hit=terms_hit,
    )


class KvStore:
    """kv_store: per user and scope, entries keyed by (session_id, key).

    ``session_id=None`` in set/get/delete names the user-wide entry; in ``list`` and
    ``search_values`` it means "no session filter". A session named must be the user's: a write
    to another user's (or a missing) session is NotFoundError, a read finds nothing.
    """

    def __init__(self, *, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker

    async def set(
        self,
        scope: str,
        key: str,
        value: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> KvEntry:
        """Write the entry, replacing its value if it exists (``updated_at`` moves)."""
        uid = write_scope(user_id)
        scope = _check_scope(scope)
        key = _check_key(key)
        value = check_text("value", value, max_chars=MAX_TEXT_CHARS, allow_empty=True)
        sid = _check_optional_session(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            owner = await SessionRepository(session=session).owner(sid, lock=True) if sid else None
            if sid is not None and owner != uid:
                raise NotFoundError(f"no session {sid!r} for this user")
            row = await KvRepository(session=session).upsert(uid, scope, sid, key, value)
            return KvEntry.model_validate(row)

    async def get(
        self,
        scope: str,
        key: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> str | None:
        """The entry's value, or None. Reads one user's entry, so a global read is refused."""
        uid = read_scope(user_id)
        if uid is None:
            raise InvalidInputError("get reads one user's entry: pass user_id=...")
        scope = _check_scope(scope)
        key = _check_key(key)
        sid = _check_optional_session(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            if not await self._session_visible(session, sid, uid):
                return None
            row = await KvRepository(session=session).get(uid, scope, sid, key)
            return None if row is None else row.value

    async def delete(
        self,
        scope: str,
        key: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> bool:
        """Delete the entry; False when the user has no such entry."""
        uid = write_scope(user_id)
        scope = _check_scope(scope)
        key = _check_key(key)
        sid = _check_optional_session(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            return await KvRepository(session=session).delete(uid, scope, sid, key)

    async def list(
        self,
        scope: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> builtins.list[KvEntry]:
        """The scope's entries by key, user-wide before session-bound; ``session_id`` narrows
        to that session's. A global read (read_all) lists every user's."""
        uid = read_scope(user_id)
        scope = _check_scope(scope)
        sid = _check_optional_session(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            if not await self._session_visible(session, sid, uid):
                return []
            rows = await KvRepository(session=session).list_entries(uid, scope, sid)
            return [KvEntry.model_validate(row) for row in rows]

    async def search_values(
        self,
        user_id: uuid.UUID | str | None,
        scope: str,
        terms: Sequence[str],
        limit: int = 10,
        session_id: str | None = None,
        prefer_session_id: str | None = None,
    ) -> builtins.list[KvHit]:
        """Entries of ``scope`` whose key or value contains any of ``terms`` (ILIKE, wildcards
        escaped): ``prefer_session_id``'s entries first (spec: the current session ranks first),
        then by distinct terms matched, then the most recently updated. ``session_id`` keeps
        one session's entries only. No terms: the most recently updated entries
        (``prefer_session_id``'s first), ``terms_hit`` 0.

        ``user_id`` None is the current user; with no current user it is a global read, which
        needs navi.memory.read_all.
        """
        uid = read_scope(user_id)
        scope = _check_scope(scope)
        checked_terms = _check_terms(terms)
        limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
        sid = _check_optional_session(session_id)
        prefer = _check_optional_session(prefer_session_id)
        async with unit_of_work(self._sessionmaker) as session:
            if not await self._session_visible(session, sid, uid):
                return []
            found = await KvRepository(session=session).search(
                uid, scope, checked_terms, limit=limit, session_id=sid, prefer_session_id=prefer
            )
            return [_hit(row, hits) for row, hits in found]

    @staticmethod
    async def _session_visible(
        session: AsyncSession, session_id: str | None, user_id: uuid.UUID | None
    ) -> bool:
        # A filter naming someone else's session finds nothing, as if it did not exist.
        if session_id is None or user_id is None:
            return True
        return await SessionRepository(session=session).owner(session_id) == user_id
