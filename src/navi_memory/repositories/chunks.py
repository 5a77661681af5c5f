"""SQL for memory_chunks (raw history) and the session facts chunk search needs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, RowMapping, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import ChunkRow, MessageRow, SessionRow
from navi_memory.repositories.facts import escape_like
from navi_memory.repositories.vectors import HybridSearch, set_vector_search_options

__all__ = ["ChunkRepository"]

def _owner(user_id: uuid.UUID | None, session_id: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if user_id is not None:
        where.append(ChunkRow.user_id == user_id)
    if session_id is not None:
        where.append(ChunkRow.session_id == session_id)
    return where or [literal(True)]


INSERT_BATCH = 1000
"""Rows per INSERT statement (10 parameters a row)."""

_CHUNK_COLUMNS = (
    "c.id, c.user_id, c.session_id, c.content, c.content_hash, c.start_seq, c.end_seq, "
    "c.started_at, c.ended_at, c.breadcrumbs, c.created_at"
)
"""Every memory_chunks column a Chunk shows, the vector excepted (text SQL form)."""


def chunk_columns() -> list[Any]:
    """The same columns for Core selects, with ``has_embedding`` instead of the vector."""
    return [
        ChunkRow.id,
        ChunkRow.user_id,
        ChunkRow.session_id,
        ChunkRow.content,
        ChunkRow.content_hash,
        ChunkRow.start_seq,
        ChunkRow.end_seq,
        ChunkRow.started_at,
        ChunkRow.ended_at,
        ChunkRow.breadcrumbs,
        ChunkRow.created_at,
        ChunkRow.embedding.is_not(None).label("has_embedding"),
    ]


def _patterns(terms: Sequence[str]) -> list[str]:
    return [f"%{escape_like(term)}%" for term in terms]


class ChunkRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def insert_many(
        self,
        user_id: uuid.UUID,
        session_id: str,
        rows: Sequence[dict[str, Any]],
    ) -> int:
        """Multi-row INSERT … ON CONFLICT DO NOTHING; returns the rows actually written.

        At most INSERT_BATCH rows a statement: PostgreSQL takes 32,767 parameters at most."""
        written = 0
        for start in range(0, len(rows), INSERT_BATCH):
            values = [
                {**row, "user_id": user_id, "session_id": session_id}
                for row in rows[start : start + INSERT_BATCH]
            ]
            stmt = (
                insert(ChunkRow)
                .values(values)
                .on_conflict_do_nothing(
                    index_elements=[ChunkRow.user_id, ChunkRow.session_id, ChunkRow.content_hash]
                )
                .returning(ChunkRow.id)
            )
            written += len((await self.session.execute(stmt)).all())
        return written

    async def set_search_options(self, ef_search: int) -> None:
        await set_vector_search_options(self.session, ef_search)

    async def search(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        max_distance: float,
    ) -> list[RowMapping]:
        """Both passes of search_chunks in one statement (the shape of FactRepository.search):
        the ``limit`` nearest chunks closer than ``max_distance``, and the chunks matching any
        term — full text on content, or ILIKE on content or breadcrumbs — by distinct terms hit,
        then recency. Rows carry ``distance`` or ``terms_hit``, never the vector."""
        where = ["TRUE"]
        params: dict[str, Any] = {
            "limit": limit,
            "patterns": _patterns(terms),
            # Terms hold no spaces or quotes (text.terms), so "a or b" is an OR of the terms.
            "tsq": " or ".join(terms),
        }
        if user_id is not None:
            where.append("c.user_id = :uid")
            params["uid"] = user_id
        if session_id is not None:
            where.append("c.session_id = :sid")
            params["sid"] = session_id
        crumbs = "array_to_string(c.breadcrumbs, E'\\n')"
        search = HybridSearch(
            table="memory_chunks",
            alias="c",
            columns=_CHUNK_COLUMNS,
            where=" AND ".join(where),
            match=(
                "(to_tsvector('simple'::regconfig, c.content)"
                " @@ websearch_to_tsquery('simple'::regconfig, :tsq)"
                " OR c.content ILIKE ANY (CAST(:patterns AS text[]))"
                f" OR {crumbs} ILIKE ANY (CAST(:patterns AS text[])))"
            ),
            hits=f"c.content ILIKE p OR {crumbs} ILIKE p",
            recency="ended_at",
        )
        return await search.run(self.session, params, query_vector, max_distance)

    async def recent(
        self, user_id: uuid.UUID | None, session_id: str | None, limit: int
    ) -> list[RowMapping]:
        stmt = (
            select(*chunk_columns())
            .where(*_owner(user_id, session_id))
            .order_by(ChunkRow.ended_at.desc(), ChunkRow.id.desc())
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def session_owner(self, session_id: str, *, lock: bool = False) -> uuid.UUID | None:
        """The session's owner; ``lock`` holds a share lock on its row (a delete waits)."""
        stmt = select(SessionRow.user_id).where(SessionRow.id == session_id)
        if lock:
            stmt = stmt.with_for_update(read=True)
        return await self.session.scalar(stmt)

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

    async def set_embedding(
        self, chunk_id: int, embedded_text: str, embedding: Sequence[float]
    ) -> None:
        # Chunks are immutable: the text embedded is still the chunk's.
        del embedded_text
        await self.session.execute(
            update(ChunkRow)
            .where(ChunkRow.id == chunk_id, ChunkRow.embedding.is_(None))
            .values(embedding=list(embedding))
        )
