"""Backfill: give a vector to every row that was written without one, and queue for the HNSW
indexes every chunk and fact vector that is in none.

A batch job: it commits per batch, and can be interrupted and run again (it only touches rows
whose embedding is still NULL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.errors import ConfigError
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.llm import Embedder, embedding_text_for_fact
from navi_memory.repositories.chunks import ChunkRepository
from navi_memory.repositories.facts import FactRepository, FactVectorRepository
from navi_memory.services.embedding import VectorRecorder
from navi_memory.unit_of_work import unit_of_work

__all__ = [
    "Backfill",
    "BackfillProgress",
    "BackfillSource",
    "ChunkBackfill",
    "FactBackfill",
    "ProgressCallback",
    "run_backfill",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    table: str
    done: int
    total: int


class BackfillSource(Protocol):
    """One table's rows that lack a vector, and how to store one."""

    table: str

    async def count_missing(self, session: AsyncSession) -> int: ...

    async def next_batch(
        self, session: AsyncSession, after_id: int, limit: int
    ) -> list[tuple[int, str]]: ...

    async def store(
        self, session: AsyncSession, vectors: Sequence[tuple[int, str, Sequence[float]]]
    ) -> None:
        """Store each (id, text embedded, vector), unless the row changed meanwhile."""


ProgressCallback = Callable[[BackfillProgress], Awaitable[None] | None]
"""Called after every batch (a progress bar); may be a coroutine function."""


class Backfill:
    """The backfill job of one Memory: embeds facts then chunks, and hands the vectors it
    stored (and any found in no index) to the chunk and fact indexers."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        embedder: Embedder | None,
        indexer: ChunkIndexer,
        fact_indexer: FactIndexer | None = None,
        recorder: VectorRecorder | None = None,
    ) -> None:
        """``recorder`` learns of the first vectors stored (the embedding model of record)."""
        self._sessionmaker = sessionmaker
        self._embedder = embedder
        self._indexer = indexer
        self._fact_indexer = fact_indexer
        self._recorder = recorder

    async def run(
        self,
        *,
        batch_size: int,
        pause_seconds: float,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Embed every visible fact and every chunk without a vector, ``batch_size`` at a time,
        committing per batch, and queue for the HNSW index every chunk vector that is in none
        (see ChunkRepository.requeue_unindexed). Returns how many rows got a vector. Raises
        EmbeddingError if the model is down (finished batches stay; a rerun resumes), and
        ConfigError in text-only mode (there is no model to embed with)."""
        if self._embedder is None:
            raise ConfigError(
                "text-only mode (EMBEDDING_MODEL=none): there is no embedding model to backfill "
                "with; set EMBEDDING_MODEL to a 768-dimensional model first"
            )
        filled = await run_backfill(
            self._sessionmaker,
            self._embedder,
            [FactBackfill(), ChunkBackfill()],
            batch_size=batch_size,
            pause_seconds=pause_seconds,
            progress=progress,
            recorder=self._recorder,
        )
        async with unit_of_work(self._sessionmaker) as session:
            requeued = await ChunkRepository(session=session).requeue_unindexed()
        if requeued:
            logger.info(
                "backfill.chunks_requeued: %d chunk(s) were in no index (text or vector), queued",
                requeued,
                extra={"event": "backfill.chunks_requeued", "rows": requeued},
            )
        if filled.get(ChunkBackfill.table) or requeued:
            self._indexer.kick()
        if self._fact_indexer is not None:
            async with unit_of_work(self._sessionmaker) as session:
                facts_requeued = await FactVectorRepository(session=session).requeue_unindexed()
            if facts_requeued:
                logger.info(
                    "backfill.facts_requeued: %d fact vector(s) were in no index, queued",
                    facts_requeued,
                    extra={"event": "backfill.facts_requeued", "rows": facts_requeued},
                )
            # The vectors stored above were queued by memory_facts' trigger.
            if filled.get(FactBackfill.table) or facts_requeued:
                self._fact_indexer.kick()
        return sum(filled.values())


async def run_backfill(
    sessionmaker: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    sources: Sequence[BackfillSource],
    *,
    batch_size: int,
    pause_seconds: float,
    progress: ProgressCallback | None = None,
    recorder: VectorRecorder | None = None,
) -> dict[str, int]:
    """Embed and store every missing vector of ``sources``; returns rows filled per table.
    ``recorder`` is told before each batch's vectors are stored.

    An EmbeddingError propagates (the rows of the failed batch keep NULL; a rerun resumes).
    """
    filled: dict[str, int] = {}
    first_batch = True
    for source in sources:
        async with unit_of_work(sessionmaker) as session:
            total = await source.count_missing(session)
        done, after_id = 0, 0
        filled[source.table] = 0
        while True:
            async with unit_of_work(sessionmaker) as session:
                batch = await source.next_batch(session, after_id, batch_size)
            if not batch:
                break
            if not first_batch and pause_seconds > 0:
                await asyncio.sleep(pause_seconds)
            first_batch = False
            vectors = await embedder.embed_documents([text for _, text in batch])
            if recorder is not None:
                await recorder.vectors_made()
            async with unit_of_work(sessionmaker) as session:
                await source.store(
                    session,
                    [(i, text, v) for (i, text), v in zip(batch, vectors, strict=True)],
                )
            after_id = batch[-1][0]
            done += len(batch)
            filled[source.table] += len(batch)
            if progress is not None:
                result = progress(BackfillProgress(source.table, done, max(total, done)))
                if result is not None:
                    await result
        logger.info("backfill.done", extra={"table": source.table, "rows": done})
    return filled


class FactBackfill:
    """memory_facts rows without a vector; hidden rows are skipped (no read path shows them)."""

    table = "memory_facts"

    async def count_missing(self, session: AsyncSession) -> int:
        return await FactRepository(session=session).count_missing_embeddings()

    async def next_batch(
        self, session: AsyncSession, after_id: int, limit: int
    ) -> list[tuple[int, str]]:
        rows = await FactRepository(session=session).missing_embeddings(after_id, limit)
        return [(row.id, embedding_text_for_fact(row.category, row.key, row.value)) for row in rows]

    async def store(
        self, session: AsyncSession, vectors: Sequence[tuple[int, str, Sequence[float]]]
    ) -> None:
        repo = FactRepository(session=session)
        for fact_id, embedded, vector in vectors:
            await repo.set_embedding(fact_id, embedded, vector)


class ChunkBackfill:
    """memory_chunks rows without a vector (written while the embedder was down)."""

    table = "memory_chunks"

    async def count_missing(self, session: AsyncSession) -> int:
        return await ChunkRepository(session=session).count_missing_embeddings()

    async def next_batch(
        self, session: AsyncSession, after_id: int, limit: int
    ) -> list[tuple[int, str]]:
        return await ChunkRepository(session=session).missing_embeddings(after_id, limit)

    async def store(
        self, session: AsyncSession, vectors: Sequence[tuple[int, str, Sequence[float]]]
    ) -> None:
        repo = ChunkRepository(session=session)
        for chunk_id, embedded, vector in vectors:
            await repo.set_embedding(chunk_id, embedded, vector)
