"""SQL for navi_users."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import ChunkTextQueueRow, ChunkVectorQueueRow, User


class UserRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def ensure(self, user_id: uuid.UUID, name: str | None) -> bool:
        """Insert the user if missing; True when it was created."""
        result = await self.session.execute(
            insert(User)
            .values(id=user_id, name=name)
            .on_conflict_do_nothing(index_elements=[User.id])
            .returning(User.id)
        )
        return result.scalar() is not None

    async def get(self, user_id: uuid.UUID) -> User | None:
        return await self.session.scalar(select(User).where(User.id == user_id))

    async def delete(self, user_id: uuid.UUID) -> bool:
        """Delete the user; everything they own goes by the cascades. Their
        chunks' queue rows (text and vector) go first, in the chunk indexer's lock order (queue
        rows, then chunk rows), and the text queue's again after the user's row."""
        for queue in (ChunkTextQueueRow, ChunkVectorQueueRow):
            await self.session.execute(delete(queue).where(queue.user_id == user_id))
        result = await self.session.execute(
            delete(User).where(User.id == user_id).returning(User.id)
        )
        if result.scalar() is None:
            return False
        # A chunk write that committed while the user's row was waited for (its foreign-key
        # lock) queued its text after the first delete read the queue; the cascade took its
        # chunk, not that row (the text queue has no foreign key). None can come after: the
        # next writer's key check waits for this row and then finds no user. Rows the
        # indexer holds are skipped, not waited for (it holds them before their chunk rows,
        # which this transaction holds now); it drops them itself, their chunks gone.
        held = (
            select(ChunkTextQueueRow.chunk_id)
            .where(ChunkTextQueueRow.user_id == user_id)
            .with_for_update(skip_locked=True)
        )
        await self.session.execute(
            delete(ChunkTextQueueRow).where(ChunkTextQueueRow.chunk_id.in_(held.scalar_subquery()))
        )
        return True
