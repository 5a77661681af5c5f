"""SQL that counts: rows per table, per user, without vectors, queued, hidden and expired."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, RowMapping, Select, and_, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import (
    ChunkRow,
    ChunkTermsRow,
    ChunkTextQueueRow,
    ChunkTextStatsRow,
    ChunkVectorQueueRow,
    ChunkVectorRow,
    FactForgottenRow,
    FactRow,
    FactVectorQueueRow,
    FactVectorRow,
    KvRow,
    MessageRow,
    SessionMemoryStateRow,
    SessionRow,
    SummaryRow,
    User,
)

__all__ = ["TABLES", "StatsRepository"]

TABLES: tuple[Any, ...] = (
    User,
    FactRow,
    FactVectorRow,
    FactVectorQueueRow,
    FactForgottenRow,
    SummaryRow,
    SessionMemoryStateRow,
    SessionRow,
    MessageRow,
    ChunkRow,
    ChunkVectorRow,
    ChunkVectorQueueRow,
    ChunkTermsRow,
    ChunkTextQueueRow,
    KvRow,
)
"""Every table of navi-memory's data, in the order stats lists them (not the text index's
statistics and document frequencies, nor the embedding model of record: bookkeeping)."""


def _expired() -> ColumnElement[bool]:
    return and_(FactRow.expires_at.is_not(None), FactRow.expires_at <= func.now())


def _count_if(condition: ColumnElement[bool]) -> Any:
    return func.count().filter(condition)


_S = TypeVar("_S", bound="Select[*tuple[Any, ...]]")


def _scoped(stmt: _S, column: Any, user_id: uuid.UUID | None) -> _S:
    return stmt if user_id is None else stmt.where(column == user_id)


class StatsRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def table_rows(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for model in TABLES:
            counts[model.__tablename__] = int(
                await self.session.scalar(select(func.count()).select_from(model)) or 0
            )
        return counts

    async def fact_totals(self) -> RowMapping:
        stmt = select(
            _count_if(FactRow.merged_into.is_not(None)).label("hidden"),
            _count_if(_expired()).label("expired"),
            _count_if(and_(FactRow.embedding.is_(None), FactRow.merged_into.is_(None))).label(
                "missing"
            ),
        )
        return (await self.session.execute(stmt)).mappings().one()

    async def chunks_without_vector(self) -> int:
        stmt = select(func.count()).where(ChunkRow.embedding.is_(None))
        return int(await self.session.scalar(stmt) or 0)

    async def chunk_vectors_awaiting_graph(self, graph_from: int) -> int:
        """Indexed chunk vectors beside the HNSW graph whose user now holds ``graph_from``
        indexed chunks or more: the chunk indexer moves them in (revision 0009)."""
        stmt = (
            select(func.count())
            .select_from(ChunkTextStatsRow)
            .join(
                ChunkVectorRow,
                and_(
                    ChunkVectorRow.user_id == ChunkTextStatsRow.user_id,
                    ~ChunkVectorRow.in_graph,
                ),
            )
            .where(ChunkTextStatsRow.chunks >= graph_from)
        )
        return int(await self.session.scalar(stmt) or 0)

    async def chunk_vectors_unindexed(self) -> int:
        """Chunk vectors in neither the HNSW table nor its queue (backfill queues them)."""
        indexed = select(ChunkVectorRow.chunk_id).where(ChunkVectorRow.chunk_id == ChunkRow.id)
        queued = select(ChunkVectorQueueRow.chunk_id).where(
            ChunkVectorQueueRow.chunk_id == ChunkRow.id
        )
        stmt = select(func.count()).where(
            ChunkRow.embedding.is_not(None), ~indexed.exists(), ~queued.exists()
        )
        return int(await self.session.scalar(stmt) or 0)

    # --- per user: each returns {user_id: {counter: n}} -------------------------------------

    async def users(self, user_id: uuid.UUID | None) -> dict[uuid.UUID, str | None]:
        stmt = _scoped(select(User.id, User.name), User.id, user_id)
        return {row.id: row.name for row in await self.session.execute(stmt)}

    async def facts_by_user(self, user_id: uuid.UUID | None) -> dict[Any, dict[str, int]]:
        stmt = _scoped(
            select(
                FactRow.user_id,
                _count_if(FactRow.merged_into.is_(None)).label("facts"),
                _count_if(FactRow.merged_into.is_not(None)).label("hidden_facts"),
                _count_if(_expired()).label("expired_facts"),
                _count_if(and_(FactRow.embedding.is_(None), FactRow.merged_into.is_(None))).label(
                    "facts_without_vector"
                ),
            ).group_by(FactRow.user_id),
            FactRow.user_id,
            user_id,
        )
        return await self._by_user(stmt)

    async def chunks_by_user(self, user_id: uuid.UUID | None) -> dict[Any, dict[str, int]]:
        stmt = _scoped(
            select(
                ChunkRow.user_id,
                func.count().label("chunks"),
                _count_if(ChunkRow.embedding.is_(None)).label("chunks_without_vector"),
            ).group_by(ChunkRow.user_id),
            ChunkRow.user_id,
            user_id,
        )
        return await self._by_user(stmt)

    async def queued_by_user(self, user_id: uuid.UUID | None) -> dict[Any, dict[str, int]]:
        stmt = _scoped(
            select(
                ChunkVectorQueueRow.user_id, func.count().label("chunk_vectors_queued")
            ).group_by(ChunkVectorQueueRow.user_id),
            ChunkVectorQueueRow.user_id,
            user_id,
        )
        return await self._by_user(stmt)

    async def sessions_by_user(self, user_id: uuid.UUID | None) -> dict[Any, dict[str, int]]:
        stmt = _scoped(
            select(
                SessionRow.user_id,
                func.count(func.distinct(SessionRow.id)).label("sessions"),
                func.count(MessageRow.id).label("messages"),
            )
            .outerjoin(MessageRow, MessageRow.session_id == SessionRow.id)
            .group_by(SessionRow.user_id),
            SessionRow.user_id,
            user_id,
        )
        return await self._by_user(stmt)

    async def kv_by_user(self, user_id: uuid.UUID | None) -> dict[Any, dict[str, int]]:
        stmt = _scoped(
            select(KvRow.user_id, func.count().label("kv_entries")).group_by(KvRow.user_id),
            KvRow.user_id,
            user_id,
        )
        return await self._by_user(stmt)

    async def summaries_by_user(self, user_id: uuid.UUID | None) -> dict[Any, dict[str, int]]:
        stmt = _scoped(
            select(SummaryRow.user_id, func.count().label("summary")).group_by(SummaryRow.user_id),
            SummaryRow.user_id,
            user_id,
        )
        return await self._by_user(stmt)

    async def _by_user(self, stmt: Select[*tuple[Any, ...]]) -> dict[Any, dict[str, int]]:
        result: dict[Any, dict[str, int]] = {}
        for row in (await self.session.execute(stmt)).mappings():
            values = dict(row)
            owner = values.pop("user_id")
            result[owner] = {name: int(count) for name, count in values.items()}
        return result
