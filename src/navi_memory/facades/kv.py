"""memory.kv: a user's key/value entries per scope, user-wide or bound to one session. The
scratchpad's sketches live here (scope ``scratchpad``, one key per section).

``search_values`` is the read path unified search uses for sketches (spec: KvStore.search_values).
"""

from __future__ import annotations

import builtins
import unicodedata
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.constants import (
    KV_KEY_MAX_CHARS,
    KV_SCOPE_MAX_CHARS,
    KV_TERM_MAX_CHARS,
    MAX_LIMIT,
    MAX_TEXT_CHARS,
)
from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.request_context import read_scope, write_scope
from navi_memory.schemas import KvEntry, KvHit
from navi_memory.services.kv import KvService
from navi_memory.text.terms import MAX_QUERY_TERMS
from navi_memory.unit_of_work import unit_of_work
from navi_memory.validation import (
    check_int,
    check_kv_entry_name,
    check_optional_session_id,
    check_text,
)

__all__ = ["KvStore"]


def _check_scope(scope: Any) -> str:
    return check_text("scope", scope, max_chars=KV_SCOPE_MAX_CHARS)


def _check_key(key: Any) -> str:
    return check_text("key", key, max_chars=KV_KEY_MAX_CHARS)


def _check_terms(terms: Any) -> list[str]:
    """Distinct non-blank terms (case-insensitive as ILIKE is, first spelling kept), at most 16."""
    if isinstance(terms, str) or not isinstance(terms, list | tuple):
        raise InvalidTypeError(f"terms must be a list of str, got {type(terms).__name__}")
    kept: list[str] = []
    seen: set[str] = set()
    for term in terms:
        term = check_text("term", term, max_chars=KV_TERM_MAX_CHARS, allow_empty=True).strip()
        # One term in two Unicode forms is one term (its patterns look for both forms). Told
        # apart by lower(), as ILIKE tells them: "STRASSE" is not "Straße" to it (casefold's is).
        folded = unicodedata.normalize("NFC", term).lower()
        if term and folded not in seen:
            seen.add(folded)
            kept.append(term)
    return kept[:MAX_QUERY_TERMS]


class KvStore:
    """kv_store: per user and scope, entries keyed by (session_id, key).

    ``session_id=None`` in set/get/delete names the user-wide entry; in ``list`` and
    ``search_values`` it means "no session filter". A session named must be the user's: a write
    to another user's (or a missing) session is NotFoundError, a read finds nothing.
    """

    def __init__(self, *, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker
        self._kv = KvService()

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
        sid = check_optional_session_id(session_id)
        check_kv_entry_name(scope, sid, key)
        async with unit_of_work(self._sessionmaker) as session:
            return await self._kv.set(session, uid, scope, sid, key, value)

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
        sid = check_optional_session_id(session_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._kv.get(session, uid, scope, sid, key)

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
        sid = check_optional_session_id(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            return await self._kv.delete(session, uid, scope, sid, key)

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
        sid = check_optional_session_id(session_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._kv.list_entries(session, uid, scope, sid)

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
        sid = check_optional_session_id(session_id)
        prefer = check_optional_session_id(prefer_session_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._kv.search_values(
                session,
                uid,
                scope,
                checked_terms,
                limit=limit,
                session_id=sid,
                prefer_session_id=prefer,
            )
