"""memory.search: unified search — one query over facts, raw history and sketches, tiered, with
provenance and freshness on every hit (spec: "Unified search"), and ``format_hits``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.constants import SEARCH_K_DEFAULT
from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.request_context import read_scope
from navi_memory.schemas import MemoryHit
from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.search import (
    SearchRequest,
    UnifiedSearchService,
    plan_search,
)
from navi_memory.text.hits import clamp_k, format_hits, normalize_scope
from navi_memory.unit_of_work import LaneEngines, engine_of
from navi_memory.validation import (
    check_aware_datetime,
    check_int,
    check_optional_session_id,
    check_text,
)

__all__ = ["UnifiedMemorySearch"]


class UnifiedMemorySearch:
    """``memory.search``: what an agent reads memory with (the ``memory_search`` tool too)."""

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        embedding: EmbeddingService,
        service: UnifiedSearchService | None = None,
        cached_plans: AsyncEngine | None = None,
    ) -> None:
        """``cached_plans``: the engine for the lanes whose plans are the same for every user
        (db.create_engine; default: the sessionmaker's)."""
        self._engines = LaneEngines(engine_of(sessionmaker), cached_plans)
        self._embedding = embedding
        self._service = service or UnifiedSearchService()

    async def search(
        self,
        query: str,
        scope: str = "all",
        k: int = SEARCH_K_DEFAULT,
        user_id: uuid.UUID | str | None = None,
        session_id: str | None = None,
        current_session_id: str | None = None,
        summary_at: datetime | None = None,
    ) -> list[MemoryHit]:
        """Facts first (curated truth), then raw excerpts by relevance, then sketches (scope
        ``scratchpad``, ``current_session_id``'s first): at most ``k`` of each.

        ``scope`` narrows to ``facts``, ``raw`` or ``sketches``; an unknown scope is ``all``.
        ``k`` is clamped to 1–20. The query is embedded once for every store; an empty or
        stop-words-only query returns the most recent items of each store. ``session_id``
        narrows raw excerpts and sketches to one session of the user (another user's session
        finds nothing). Raw excerpts carry ``superseded_by`` (a newer fact sharing two content
        words) and ``before_summary`` (ended before their session's last summary:
        ``summary_at`` for ``current_session_id``, else looked up); docs/memory.md.

        ``user_id=None`` is the current user; with none, a global read needs
        navi.memory.read_all.
        """
        owner = read_scope(user_id)
        query = check_text("query", query, allow_empty=True)
        if not isinstance(scope, str):
            raise InvalidTypeError(f"scope must be a str, got {type(scope).__name__}")
        k = clamp_k(check_int("k", k))
        session_id = check_optional_session_id(session_id)
        current_session_id = check_optional_session_id(current_session_id)
        summary_at = _check_summary_at(summary_at, current_session_id)
        plan = plan_search(query, normalize_scope(scope), k)
        vector = await self._embedding.query(query) if plan.embed else None
        request = SearchRequest(
            plan=plan,
            owner=owner,
            query_vector=vector,
            session_id=session_id,
            current_session_id=current_session_id,
            summary_at=summary_at,
        )
        return await self._service.search(self._engines.run, request)

    @staticmethod
    def format_hits(query: str, scope: str, hits: Sequence[MemoryHit]) -> str:
        """The ``memory_search`` answer text for ``hits`` (navi_memory.format_hits)."""
        return format_hits(query, scope, hits)


def _check_summary_at(summary_at: Any, current_session_id: str | None) -> datetime | None:
    if summary_at is None:
        return None
    checked = check_aware_datetime("summary_at", summary_at)
    if current_session_id is None:
        raise InvalidInputError(
            "summary_at is the boundary of the current session: pass current_session_id too"
        )
    return checked
