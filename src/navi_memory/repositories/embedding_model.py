"""SQL of the embedding model of record (memory_embedding_model), and clearing every stored
vector with the vector indexes' copies and queues, for a re-embedding."""

from __future__ import annotations

from datetime import datetime
from typing import Final, NamedTuple

from sqlalchemy import exists, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.models import ChunkRow, EmbeddingModelRow, FactRow

__all__ = ["EmbeddingModelRepository", "RecordedModel"]

# The chunk and fact vector indexes hold copies of the vectors, and their queues (revision 0013)
# vectors made ahead: both go with the vectors of record.
_TRUNCATE_VECTOR_INDEXES: Final = text(
    "TRUNCATE memory_chunk_vectors, memory_chunk_vector_queue, "
    "memory_fact_vectors, memory_fact_vector_queue"
)


class RecordedModel(NamedTuple):
    """The row of record: ``recorded_at`` tells a model recorded again (a reembed with the
    same name) from the record as it was."""

    model: str
    recorded_at: datetime


class EmbeddingModelRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def recorded(self, *, held: bool = False) -> str | None:
        """The model of record; None when none was recorded yet. ``held``: read FOR SHARE, so
        the record cannot be replaced (``hold_record``) until this transaction ends."""
        statement = select(EmbeddingModelRow.model)
        if held:
            statement = statement.with_for_update(read=True)
        return await self.session.scalar(statement)

    async def hold_record(self) -> None:
        """Lock the record's table against every writer and every ``recorded(held=True)``
        until this transaction ends, waiting for those in progress (plain reads go on): a
        backfill batch that has checked the record commits before a reembed clears the
        vectors, or checks it after the new model is recorded. A table lock, not a row lock:
        it holds when no model is recorded yet too."""
        await self.session.execute(text("LOCK TABLE memory_embedding_model IN EXCLUSIVE MODE"))

    async def record(self) -> RecordedModel | None:
        """The model of record and when it was recorded; None when none was recorded yet."""
        row = (
            await self.session.execute(
                select(EmbeddingModelRow.model, EmbeddingModelRow.recorded_at)
            )
        ).first()
        return None if row is None else RecordedModel(row.model, row.recorded_at)

    async def age_seconds(self) -> float | None:
        """How long ago, by the database's clock, the model of record was recorded."""
        age = await self.session.scalar(
            select(func.extract("epoch", func.now() - EmbeddingModelRow.recorded_at))
        )
        return None if age is None else float(age)

    async def replace_if(self, expected: RecordedModel, model: str) -> bool:
        """Make ``model`` the model of record if the record is still ``expected`` (model and
        time): two processes replacing one leftover at once, only the first does."""
        replaced = await self.session.scalar(
            update(EmbeddingModelRow)
            .where(
                EmbeddingModelRow.model == expected.model,
                EmbeddingModelRow.recorded_at == expected.recorded_at,
            )
            .values(model=model, recorded_at=func.now())
            .returning(EmbeddingModelRow.id)
        )
        return replaced is not None

    async def record_if_none(self, model: str) -> RecordedModel:
        """Record ``model`` unless a model is recorded already; returns the record."""
        await self.session.execute(
            insert(EmbeddingModelRow).values(model=model).on_conflict_do_nothing()
        )
        recorded = await self.record()
        assert recorded is not None  # inserted above, or there already
        return recorded

    async def replace(self, model: str) -> None:
        """Make ``model`` the model of record, whatever was recorded."""
        statement = insert(EmbeddingModelRow).values(model=model)
        await self.session.execute(
            statement.on_conflict_do_update(
                index_elements=[EmbeddingModelRow.id],
                set_={"model": statement.excluded.model, "recorded_at": text("now()")},
            )
        )

    async def vectors_exist(self) -> bool:
        """Whether any fact or chunk holds a vector."""
        found = await self.session.scalar(
            select(
                or_(
                    exists().where(FactRow.embedding.is_not(None)),
                    exists().where(ChunkRow.embedding.is_not(None)),
                )
            )
        )
        return bool(found)

    async def clear_vectors(self) -> None:
        """Every fact's and chunk's vector set to NULL, and the vector indexes and their queues
        emptied (the text index is left alone: text search keeps finding the rows)."""
        await self.session.execute(
            update(FactRow)
            .where(FactRow.embedding.is_not(None))
            .values(embedding=None)
            .execution_options(synchronize_session=False)
        )
        await self.session.execute(
            update(ChunkRow)
            .where(ChunkRow.embedding.is_not(None))
            .values(embedding=None)
            .execution_options(synchronize_session=False)
        )
        # After the UPDATEs: memory_facts' trigger may have queued the facts it saw change.
        await self.session.execute(_TRUNCATE_VECTOR_INDEXES)
