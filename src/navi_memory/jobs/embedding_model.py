"""The embedding model of record: recorded by the first vector write, compared with the
configured model at start-up, and replaced by ``reembed``, which embeds everything again.

Vectors of two models are not comparable: a model change with vectors stored is reported (log
event ``memory.embedding_model_changed``, a doctor finding), never refused.
"""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.errors import ConfigError
from navi_memory.jobs.backfill import Backfill, ProgressCallback
from navi_memory.repositories.embedding_model import EmbeddingModelRepository
from navi_memory.unit_of_work import unit_of_work

__all__ = ["EmbeddingModelRecord", "Reembed"]

logger = logging.getLogger(__name__)


class EmbeddingModelRecord:
    """The model of record of one database, against ``model``, the configured one."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], *, model: str) -> None:
        self._sessionmaker = sessionmaker
        self.model = model
        self._recorded = False

    async def vectors_made(self) -> None:
        """Record ``model`` if no model is recorded yet, or if another is and no vector is
        stored (they all went: the vectors about to be stored are the first ones): called
        before vectors are stored. Once per process: after the first call, a no-op."""
        if self._recorded:
            return
        async with unit_of_work(self._sessionmaker) as session:
            repo = EmbeddingModelRepository(session=session)
            recorded = await repo.record_if_none(self.model)
            # Kept, the old name would be reported as a model change for every later start.
            if recorded != self.model and not await repo.vectors_exist():
                await repo.replace(self.model)
        self._recorded = True

    async def check_recorded(self, session: AsyncSession) -> None:
        """Raise ConfigError when another model than ``model`` is recorded, on ``session``:
        the transaction about to store a backfill's batch. Its vectors among another model's
        would be silently useless (a reembed after a change would skip them: not NULL), so a
        backfill of the old model stops at its next batch once a reembed recorded a new one,
        and one of a changed model is refused while the old model's vectors are stored."""
        recorded = await EmbeddingModelRepository(session=session).recorded()
        if recorded is not None and recorded != self.model:
            raise self._mixing(recorded)

    async def refuse_if_changed(self) -> None:
        """check_recorded's ConfigError before a backfill asks the model for anything, when
        the stored vectors are another model's: the refusal does not wait for (or hide behind)
        a model that is down."""
        recorded = await self.changed_from()
        if recorded is not None:
            raise self._mixing(recorded)

    def _mixing(self, recorded: str) -> ConfigError:
        return ConfigError(
            f"the stored vectors are {recorded!r}'s, the configured embedding model is "
            f"{self.model!r}: a backfill would mix two models' vectors. Run `navi-memory "
            f"reembed` (memory.admin.reembed()) to embed everything with {self.model!r}, "
            f"or set EMBEDDING_MODEL back to {recorded!r}"
        )

    async def changed_from(self) -> str | None:
        """The model of record when it is another than ``model`` and vectors are stored (they
        are in another model's space); None otherwise."""
        async with unit_of_work(self._sessionmaker) as session:
            repo = EmbeddingModelRepository(session=session)
            recorded = await repo.recorded()
            if recorded is None or recorded == self.model:
                return None
            return recorded if await repo.vectors_exist() else None

    async def warn_if_changed(self) -> str | None:
        """``changed_from``, logged once as ``memory.embedding_model_changed`` when set."""
        recorded = await self.changed_from()
        if recorded is not None:
            logger.warning(
                "memory.embedding_model_changed: the stored vectors were made by %r, the "
                "configured embedding model is %r: vectors of two models are not comparable, so "
                "vector search misses until `navi-memory reembed` (or memory.admin.reembed()) "
                "has embedded everything again with the configured model",
                recorded,
                self.model,
                extra={
                    "event": "memory.embedding_model_changed",
                    "recorded": recorded,
                    "configured": self.model,
                },
            )
        return recorded

    async def replace_vectors(self) -> None:
        """In one transaction: clear every stored vector and the vector indexes' copies and
        queues, and record ``model`` as the model of record."""
        async with unit_of_work(self._sessionmaker) as session:
            repo = EmbeddingModelRepository(session=session)
            await repo.clear_vectors()
            await repo.replace(self.model)
        self._recorded = True


class Reembed:
    """Clears the stored vectors, records the configured model, then backfills everything."""

    def __init__(self, *, record: EmbeddingModelRecord | None, backfill: Backfill) -> None:
        self._record = record
        self._backfill = backfill

    async def run(
        self,
        *,
        batch_size: int,
        pause_seconds: float,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Returns how many rows got a vector. The model is asked for a vector first: when it
        cannot answer (EmbeddingError) nothing is cleared. Until it is through, the rows
        without a vector are found by text search; interrupted, ``backfill`` (or this again)
        finishes it."""
        if self._record is None:
            raise ConfigError(
                "text-only mode (EMBEDDING_MODEL=none): there is no embedding model to "
                "re-embed with; set EMBEDDING_MODEL to a 768-dimensional model first"
            )
        # Cleared with the model down, every vector would be gone until it is back.
        await self._backfill.check_model()
        await self._record.replace_vectors()
        logger.info(
            "reembed.cleared: every vector cleared, %r recorded; embedding again",
            self._record.model,
            extra={"event": "reembed.cleared", "model": self._record.model},
        )
        return await self._backfill.run(
            batch_size=batch_size, pause_seconds=pause_seconds, progress=progress
        )
