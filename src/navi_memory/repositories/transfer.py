"""SQL for moving one user's memory out and back in: every table read in a stable order, and
rows written back with their own timestamps and with ids reserved in the order they had."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import RowMapping, Text, delete, exists, or_, select, text, union
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from navi_memory.models import (
    ChunkRow,
    ChunkTextQueueRow,
    ChunkVectorQueueRow,
    FactForgottenRow,
    FactRow,
    KvRow,
    MessageRow,
    SessionMemoryStateRow,
    SessionRow,
    SummaryRow,
    User,
)
from navi_memory.repositories.statements import XACT_LOCK, any_of

__all__ = ["TransferRepository", "floats"]


def floats(value: Any) -> list[float] | None:
    """A vector column's value (a pgvector ``Vector``, a numpy array, a list) as floats."""
    if value is None:
        return None
    if hasattr(value, "to_list"):
        return [float(x) for x in value.to_list()]
    if hasattr(value, "tolist"):
        return [float(x) for x in value.tolist()]
    return [float(x) for x in value]


def _columns(model: Any, names: Iterable[str]) -> list[InstrumentedAttribute[Any]]:
    return [getattr(model, name) for name in names]


_HOLD_BUCKETS = text(
    """
    SELECT count(pg_advisory_xact_lock(b.key))
    FROM (SELECT DISTINCT navi_session_bucket_key(s) AS key
          FROM unnest(CAST(:ids AS text[])) AS s ORDER BY 1) AS b
    """
)

_FACT_FIELDS = (
    "id",
    "category",
    "key",
    "value",
    "source",
    "confidence",
    "expires_at",
    "last_verified_at",
    "source_context",
    "merged_into",
    "unmerged_at",
    "created_at",
    "updated_at",
    "session_id",
)
_CHUNK_FIELDS = (
    "id",
    "session_id",
    "content",
    "content_hash",
    "start_seq",
    "end_seq",
    "started_at",
    "ended_at",
    "breadcrumbs",
    "created_at",
)
_MESSAGE_FIELDS = (
    "session_id",
    "seq",
    "role",
    "content",
    "tool_name",
    "tool_args",
    "kind",
    "is_context",
    "created_at",
)


class TransferRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    # --- reading one user's rows, each table in a stable order -------------------------------

    async def user(self, user_id: uuid.UUID) -> User | None:
        return await self.session.scalar(select(User).where(User.id == user_id))

    async def facts(self, user_id: uuid.UUID, *, with_vectors: bool) -> list[RowMapping]:
        columns: list[Any] = _columns(FactRow, _FACT_FIELDS)
        if with_vectors:
            columns.append(FactRow.embedding)
        stmt = select(*columns).where(FactRow.user_id == user_id).order_by(FactRow.id)
        return list((await self.session.execute(stmt)).mappings())

    async def summary(self, user_id: uuid.UUID) -> RowMapping | None:
        stmt = select(SummaryRow.content, SummaryRow.updated_at).where(
            SummaryRow.user_id == user_id
        )
        return (await self.session.execute(stmt)).mappings().first()

    async def sessions(self, user_id: uuid.UUID) -> list[SessionRow]:
        stmt = (
            select(SessionRow)
            .where(SessionRow.user_id == user_id)
            .order_by(SessionRow.created_at, SessionRow.id)
        )
        return list((await self.session.scalars(stmt)).all())

    async def messages(self, user_id: uuid.UUID) -> list[RowMapping]:
        stmt = (
            select(*_columns(MessageRow, _MESSAGE_FIELDS))
            .join(SessionRow, SessionRow.id == MessageRow.session_id)
            .where(SessionRow.user_id == user_id)
            .order_by(SessionRow.created_at, SessionRow.id, MessageRow.seq)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def extraction_states(self, user_id: uuid.UUID) -> list[RowMapping]:
        stmt = (
            select(
                SessionMemoryStateRow.session_id,
                SessionMemoryStateRow.extracted_at,
                SessionMemoryStateRow.failed_at,
                SessionMemoryStateRow.failures,
            )
            .where(SessionMemoryStateRow.user_id == user_id)
            .order_by(SessionMemoryStateRow.session_id)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def forgotten(self, user_id: uuid.UUID) -> list[RowMapping]:
        stmt = (
            select(
                FactForgottenRow.category, FactForgottenRow.key_norm, FactForgottenRow.forgotten_at
            )
            .where(FactForgottenRow.user_id == user_id)
            .order_by(FactForgottenRow.category, FactForgottenRow.key_norm)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def chunks(self, user_id: uuid.UUID, *, with_vectors: bool) -> list[RowMapping]:
        columns: list[Any] = _columns(ChunkRow, _CHUNK_FIELDS)
        if with_vectors:
            columns.append(ChunkRow.embedding)
        stmt = select(*columns).where(ChunkRow.user_id == user_id).order_by(ChunkRow.id)
        return list((await self.session.execute(stmt)).mappings())

    async def kv(self, user_id: uuid.UUID) -> list[RowMapping]:
        stmt = (
            select(
                KvRow.scope,
                KvRow.session_id,
                KvRow.key,
                KvRow.value,
                KvRow.created_at,
                KvRow.updated_at,
            )
            .where(KvRow.user_id == user_id)
            .order_by(KvRow.scope, KvRow.session_id.nulls_first(), KvRow.key)
        )
        return list((await self.session.execute(stmt)).mappings())

    # --- checks before an import ---------------------------------------------------------------

    async def owns_anything(self, user_id: uuid.UUID) -> bool:
        """Whether the user holds any memory row (a bare navi_users row does not count; the
        forgets a conversation left do)."""
        owners = (
            FactRow.user_id,
            FactForgottenRow.user_id,
            SummaryRow.user_id,
            SessionRow.user_id,
            ChunkRow.user_id,
            KvRow.user_id,
            SessionMemoryStateRow.user_id,
        )
        stmt = select(or_(*(exists().where(column == user_id) for column in owners)))
        return bool(await self.session.scalar(stmt))

    async def hold_user(self, user_id: uuid.UUID) -> None:
        """Hold the user against other imports until the transaction ends: a second import
        into the same user waits here, then sees what the first wrote (and is refused)."""
        await self.session.execute(XACT_LOCK, {"scope": f"users.import:{user_id}"})

    async def hold_session_ids(self, session_ids: Sequence[str]) -> None:
        """Hold ``session_ids`` against other users' claims until the transaction ends: their
        buckets (revision 0029's navi_session_bucket_key, at most 256 locks however many ids),
        exclusively and in order. A claim of an id outside ``sessions`` takes its bucket
        shared (navi_session_held_by_others): it waits for this import, then sees its rows."""
        if session_ids:
            await self.session.execute(_HOLD_BUCKETS, {"ids": list(session_ids)})

    async def session_ids_of_others(
        self, session_ids: Sequence[str], user_id: uuid.UUID
    ) -> list[str]:
        """Which of ``session_ids`` another user (or nobody, a legacy row) holds already: a
        session, extraction state, raw chunks or sketches under it (the last two may be of a
        session their application keeps outside ``sessions``)."""
        if not session_ids:
            return []
        in_sessions = select(SessionRow.id).where(
            any_of(SessionRow.id, session_ids, Text()), SessionRow.user_id != user_id
        )
        in_states = select(SessionMemoryStateRow.session_id).where(
            any_of(SessionMemoryStateRow.session_id, session_ids, Text()),
            or_(
                SessionMemoryStateRow.user_id.is_(None),
                SessionMemoryStateRow.user_id != user_id,
            ),
        )
        in_chunks = select(ChunkRow.session_id).where(
            any_of(ChunkRow.session_id, session_ids, Text()), ChunkRow.user_id != user_id
        )
        in_kv = select(KvRow.session_id).where(
            any_of(KvRow.session_id, session_ids, Text()), KvRow.user_id != user_id
        )
        rows = await self.session.scalars(union(in_sessions, in_states, in_chunks, in_kv))
        return sorted(rows.all())

    # --- writing ---------------------------------------------------------------------------

    async def delete_user(self, user_id: uuid.UUID) -> None:
        """The user and everything they own (the cascades; the chunks' queue rows first, in
        the chunk indexer's lock order)."""
        for queue in (ChunkTextQueueRow, ChunkVectorQueueRow):
            await self.session.execute(delete(queue).where(queue.user_id == user_id))
        await self.session.execute(delete(User).where(User.id == user_id))

    async def ensure_user(self, user_id: uuid.UUID, name: str | None, created_at: Any) -> None:
        await self.session.execute(
            insert(User)
            .values(id=user_id, name=name, created_at=created_at)
            .on_conflict_do_nothing(index_elements=[User.id])
        )

    async def reserve_ids(self, table: str, count: int) -> list[int]:
        """``count`` new ids from the table's id sequence, ascending: rows inserted with them
        keep the order they had where they came from."""
        if count == 0:
            return []
        rows = await self.session.scalars(
            text(
                "SELECT nextval(pg_get_serial_sequence(:table, 'id')) "
                "FROM generate_series(1, :count)"
            ),
            {"table": table, "count": count},
        )
        return sorted(int(value) for value in rows.all())

    async def insert_facts(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Rows with their ids, all in one statement: the rows they are merged into must be
        there already (the caller inserts visible rows first, then those behind them)."""
        if rows:
            await self.session.execute(insert(FactRow), [dict(row) for row in rows])

    async def insert_summary(self, user_id: uuid.UUID, content: str, updated_at: Any) -> None:
        await self.session.execute(
            insert(SummaryRow).values(user_id=user_id, content=content, updated_at=updated_at)
        )

    async def insert_chunks(self, user_id: uuid.UUID, rows: Sequence[Mapping[str, Any]]) -> None:
        """Rows with their ids, queued for the text index; those with a vector for the HNSW
        index too."""
        if not rows:
            return
        await self.session.execute(insert(ChunkRow), [{**row, "user_id": user_id} for row in rows])
        await self.session.execute(
            insert(ChunkTextQueueRow), [{"chunk_id": row["id"], "user_id": user_id} for row in rows]
        )
        queued = [
            {"chunk_id": row["id"], "user_id": user_id}
            for row in rows
            if row.get("embedding") is not None
        ]
        if queued:
            await self.session.execute(insert(ChunkVectorQueueRow), queued)

    async def insert_sessions(self, user_id: uuid.UUID, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            await self.session.execute(
                insert(SessionRow), [{**row, "user_id": user_id} for row in rows]
            )

    async def insert_messages(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            await self.session.execute(insert(MessageRow), [dict(row) for row in rows])

    async def insert_extraction_states(
        self, user_id: uuid.UUID, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        if rows:
            await self.session.execute(
                insert(SessionMemoryStateRow), [{**row, "user_id": user_id} for row in rows]
            )

    async def insert_forgotten(self, user_id: uuid.UUID, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            await self.session.execute(
                insert(FactForgottenRow), [{**row, "user_id": user_id} for row in rows]
            )

    async def insert_kv(self, user_id: uuid.UUID, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            await self.session.execute(insert(KvRow), [{**row, "user_id": user_id} for row in rows])
