"""SQL for memory_chunks (raw history) and the session facts chunk search needs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Integer, cast, func, literal, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import ChunkRow, MessageRow, SessionRow
from navi_memory.repositories.facts import escape_like
from navi_memory.repositories.vectors import set_vector_search_options

__all__ = ["ChunkRepository"]

_FTS_CONFIG = text("'simple'::regconfig")


def _owner(user_id: uuid.UUID | None, session_id: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if user_id is not None:
        where.append(ChunkRow.user_id == user_id)
    if session_id is not None:
        where.append(ChunkRow.session_id == session_id)
    return where or [literal(True)]


def _patterns(terms: Sequence[str]) -> list[str]:
    return [f"%{escape_like(term)}%" for term in terms]


def _term_hit(pattern: str) -> ColumnElement[bool]:
    # The breadcrumbs are matched as one string: `ILIKE` inside an array needs unnest, and a
    # pattern never spans two crumbs anyway because the separator is a newline.
    return or_(
        ChunkRow.content.ilike(pattern, escape="\\"),
        func.array_to_string(ChunkRow.breadcrumbs, "\n").ilike(pattern, escape="\\"),
    )


class ChunkRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def insert_many(
        self,
        user_id: uuid.UUID,
        session_id: str,
        rows: Sequence[dict[str, Any]],
    ) -> int:
        """One multi-row INSERT … ON CONFLICT DO NOTHING; returns the rows actually written."""
        if not rows:
            return 0
        values = [{**row, "user_id": user_id, "session_id": session_id} for row in rows]
        stmt = (
            insert(ChunkRow)
            .values(values)
            .on_conflict_do_nothing(
                index_elements=[ChunkRow.user_id, ChunkRow.session_id, ChunkRow.content_hash]
            )
            .returning(ChunkRow.id)
        )
        return len((await self.session.execute(stmt)).all())

    async def set_search_options(self, ef_search: int) -> None:
        await set_vector_search_options(self.session, ef_search)

    async def nearest(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float],
        limit: int,
    ) -> list[tuple[ChunkRow, float]]:
        distance = ChunkRow.embedding.cosine_distance(query_vector).label("distance")
        stmt = (
            select(ChunkRow, distance)
            .where(*_owner(user_id, session_id), ChunkRow.embedding.is_not(None))
            .order_by(distance)
            .limit(limit)
        )
        rows = (await self.session.execute(stmt)).all()
        # relaxed_order may return neighbours slightly out of order: sort them.
        return sorted(((row[0], float(row[1])) for row in rows), key=lambda pair: pair[1])

    async def text_search(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        terms: Sequence[str],
        limit: int,
        exclude_ids: Sequence[int] = (),
    ) -> list[tuple[ChunkRow, int]]:
        """Chunks matching any term (full text on content, ILIKE on content and breadcrumbs),
        ranked by distinct terms hit, then the most recent."""
        patterns = _patterns(terms)
        tsquery: ColumnElement[Any] = func.plainto_tsquery(_FTS_CONFIG, terms[0])
        for term in terms[1:]:
            tsquery = tsquery.op("||")(func.plainto_tsquery(_FTS_CONFIG, term))
        matches = or_(
            func.to_tsvector(_FTS_CONFIG, ChunkRow.content).op("@@")(tsquery),
            *(_term_hit(pattern) for pattern in patterns),
        )
        hits: ColumnElement[int] = cast(_term_hit(patterns[0]), Integer)
        for pattern in patterns[1:]:
            hits = hits + cast(_term_hit(pattern), Integer)
        labelled = hits.label("terms_hit")
        stmt = select(ChunkRow, labelled).where(*_owner(user_id, session_id), matches)
        if exclude_ids:
            stmt = stmt.where(ChunkRow.id.not_in(exclude_ids))
        stmt = stmt.order_by(labelled.desc(), ChunkRow.ended_at.desc(), ChunkRow.id.desc()).limit(
            limit
        )
        return [(row[0], int(row[1])) for row in (await self.session.execute(stmt)).all()]

    async def recent(
        self, user_id: uuid.UUID | None, session_id: str | None, limit: int
    ) -> list[ChunkRow]:
        stmt = (
            select(ChunkRow)
            .where(*_owner(user_id, session_id))
            .order_by(ChunkRow.ended_at.desc(), ChunkRow.id.desc())
            .limit(limit)
        )
        return list((await self.session.scalars(stmt)).all())

    async def session_owner(self, session_id: str, *, lock: bool = False) -> uuid.UUID | None:
        """The session's owner; ``lock`` holds a share lock on its row (a delete waits)."""
        stmt = select(SessionRow.user_id).where(SessionRow.id == session_id)
        if lock:
            stmt = stmt.with_for_update(read=True)
        return await self.session.scalar(stmt)

    async def chunk_owners(self, session_id: str) -> set[uuid.UUID]:
        rows = await self.session.scalars(
            select(ChunkRow.user_id).where(ChunkRow.session_id == session_id).distinct()
        )
        return set(rows)

    async def latest_summary_at(self, session_id: str) -> datetime | None:
        return await self.session.scalar(
            select(func.max(MessageRow.created_at)).where(
                MessageRow.session_id == session_id, MessageRow.kind == "summary"
            )
        )

    # --- backfill ---------------------------------------------------------------------------

    async def count_missing_embeddings(self) -> int:
        stmt = select(func.count()).where(ChunkRow.embedding.is_(None))
        return int(await self.session.scalar(stmt) or 0)

    async def missing_embeddings(self, after_id: int, limit: int) -> list[tuple[int, str]]:
        stmt = (
            select(ChunkRow.id, ChunkRow.content)
            .where(ChunkRow.embedding.is_(None), ChunkRow.id > after_id)
            .order_by(ChunkRow.id)
            .limit(limit)
        )
        return [(row.id, row.content) for row in (await self.session.execute(stmt)).all()]

    async def set_embedding(self, chunk_id: int, embedding: Sequence[float]) -> None:
        await self.session.execute(
            update(ChunkRow)
            .where(ChunkRow.id == chunk_id, ChunkRow.embedding.is_(None))
            .values(embedding=list(embedding))
        )
