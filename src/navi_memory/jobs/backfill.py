"""Backfill: give a vector to every row that was written without one, and queue for their
indexers every chunk and fact vector that is in none.

A batch job: it commits per batch, and can be interrupted and run again (it only touches rows
whose embedding is still NULL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.errors import BackfillIncompleteError, ConfigError, EmbeddingError
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
    "BackfillRecorder",
    "BackfillResult",
    "BackfillSource",
    "ChunkBackfill",
    "FactBackfill",
    "ProgressCallback",
    "run_backfill",
]

logger = logging.getLogger(__name__)

MODEL_CHECK_TEXT: Final = "navi-memory: is the embedding model there?"
"""What ``Backfill.check_model`` embeds."""

CHANGED_RETRIES: Final = 3
"""Times a backfill reads again a row whose text changed while it was embedded (a row written
over and over keeps its writer's own vector or none; the next backfill takes it)."""

FAILURES_TO_STOP: Final = 3
"""Rows in a row the embedding model fails, each alone, before a backfill stops: the model is
down (a row it cannot embed is skipped, and the run goes on)."""


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
    ) -> list[int]:
        """Store each (id, text embedded, vector), unless the row changed meanwhile; returns
        the ids of the rows not stored so (read again: one may still lack a vector)."""


class BackfillRecorder(VectorRecorder, Protocol):
    """The embedding model of record, as a backfill needs it (jobs/embedding_model.py)."""

    async def check_recorded(self, session: AsyncSession) -> None:
        """Raise ConfigError unless the vectors about to be stored on ``session`` are the
        model of record's."""
        ...

    async def refuse_if_changed(self) -> None:
        """Raise ConfigError when the stored vectors are another model's (before any call of
        the model)."""
        ...


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
        recorder: BackfillRecorder | None = None,
    ) -> None:
        """``recorder`` learns of the first vectors stored (the embedding model of record), and
        refuses a batch of another model's vectors."""
        self._sessionmaker = sessionmaker
        self._embedder = embedder
        self._indexer = indexer
        self._fact_indexer = fact_indexer
        self._recorder = recorder

    async def check_model(self) -> None:
        """Ask the model for one vector: EmbeddingError when it cannot answer (a re-embedding
        asks before it clears anything), ConfigError in text-only mode."""
        if self._embedder is None:
            raise ConfigError(
                "text-only mode (EMBEDDING_MODEL=none): there is no embedding model to embed "
                "with; set EMBEDDING_MODEL to a 768-dimensional model first"
            )
        await self._embedder.embed_documents([MODEL_CHECK_TEXT])

    async def run(
        self,
        *,
        batch_size: int,
        pause_seconds: float,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Embed every fact (hidden ones too) and every chunk without a vector, ``batch_size``
        at a time, committing per batch, and queue for the HNSW index every chunk vector that
        is in none (see ChunkRepository.requeue_unindexed). Returns how many rows got a vector.
        Raises
        EmbeddingError if the model is down (finished batches stay; a rerun resumes), or at the
        end when it failed some rows alone (every other row got its vector; a rerun retries
        them), and ConfigError in text-only mode (there is no model to embed with)."""
        if self._embedder is None:
            raise ConfigError(
                "text-only mode (EMBEDDING_MODEL=none): there is no embedding model to backfill "
                "with; set EMBEDDING_MODEL to a 768-dimensional model first"
            )
        try:
            result = await run_backfill(
                self._sessionmaker,
                self._embedder,
                [FactBackfill(), ChunkBackfill()],
                batch_size=batch_size,
                pause_seconds=pause_seconds,
                progress=progress,
                recorder=self._recorder,
            )
        except EmbeddingError:
            # The vectors of the batches done are queued: the indexers take them now, not at
            # the next write.
            await self._requeue_and_kick(filled=True)
            raise
        await self._requeue_and_kick(filled=bool(sum(result.filled.values())))
        if result.left:
            raise BackfillIncompleteError(
                f"backfill: {result.left} row(s) could not be embedded ({result.refusal}); they "
                "keep no vector and are found by text search; run the backfill again to retry "
                "them",
                embedded=sum(result.filled.values()),
                left=result.left,
            ) from result.refusal
        return sum(result.filled.values())

    async def _requeue_and_kick(self, *, filled: bool) -> None:
        """Queue every chunk and fact vector that is in no index, and kick the indexers when
        there is anything to take (``filled``: vectors were stored)."""
        async with unit_of_work(self._sessionmaker) as session:
            requeued = await ChunkRepository(session=session).requeue_unindexed()
        if requeued:
            logger.info(
                "backfill.chunks_requeued: %d chunk(s) were in no index (text or vector), queued",
                requeued,
                extra={"event": "backfill.chunks_requeued", "rows": requeued},
            )
        if filled or requeued:
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
            # The vectors stored were queued by memory_facts' trigger.
            if filled or facts_requeued:
                self._fact_indexer.kick()


async def run_backfill(
    sessionmaker: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    sources: Sequence[BackfillSource],
    *,
    batch_size: int,
    pause_seconds: float,
    progress: ProgressCallback | None = None,
    recorder: BackfillRecorder | None = None,
) -> BackfillResult:
    """Embed and store every missing vector of ``sources``; returns rows filled per table and
    the rows the model refused. ``recorder`` is told before each batch's vectors are stored,
    and checks in the batch's transaction that its model is still the model of record (a
    reembed in another process meanwhile stops the run: ConfigError).

    A batch the model fails is embedded again row by row, and a row the model fails alone is
    left (it keeps NULL; a rerun tries it again): one row the model can never embed (it answers
    NaN or zeros for it) must not hold back every row after it, run after run. Failures in a
    row stop the run (``FAILURES_TO_STOP``: the model is down) with an EmbeddingError; the
    batches stored stay, and a rerun resumes.
    """
    result = BackfillResult()
    if recorder is not None:
        await recorder.refuse_if_changed()  # before the model is asked (it may be down)
    model = _ModelCalls(embedder)
    first_batch = True
    for source in sources:
        async with unit_of_work(sessionmaker, read_only=True) as session:
            total = await source.count_missing(session)
        done, after_id, reached = 0, 0, 0
        retried: dict[int, int] = {}  # rows that changed while embedded: times read again
        result.filled[source.table] = 0
        while True:
            async with unit_of_work(sessionmaker, read_only=True) as session:
                batch = await source.next_batch(session, after_id, batch_size)
            if not batch:
                break
            if not first_batch and pause_seconds > 0:
                await asyncio.sleep(pause_seconds)
            first_batch = False
            embedded = await model.embed(batch)
            changed: list[int] = []
            if embedded:
                if recorder is not None:
                    await recorder.vectors_made()
                async with unit_of_work(sessionmaker) as session:
                    if recorder is not None:
                        await recorder.check_recorded(session)
                    changed = await source.store(session, embedded)
            # A row whose text changed while it was embedded (an upsert whose own model call
            # failed leaves it without a vector) is read again, its new text embedded.
            again = [row_id for row_id in changed if retried.get(row_id, 0) < CHANGED_RETRIES]
            for row_id in again:
                retried[row_id] = retried.get(row_id, 0) + 1
            after_id = min(again) - 1 if again else batch[-1][0]
            done += sum(row_id > reached for row_id, _ in batch)
            reached = max(reached, batch[-1][0])
            result.filled[source.table] += len(embedded) - len(changed)
            result.left += len(batch) - len(embedded)
            if progress is not None:
                called = progress(BackfillProgress(source.table, done, max(total, done)))
                if called is not None:
                    await called
        logger.info("backfill.done", extra={"table": source.table, "rows": done})
    result.refusal = model.refusal
    return result


@dataclass(slots=True)
class BackfillResult:
    """What ``run_backfill`` did."""

    filled: dict[str, int] = field(default_factory=dict)
    """Rows that got a vector, per table."""
    left: int = 0
    """Rows the model failed alone: they keep no vector (found by text) until a rerun."""
    refusal: EmbeddingError | None = None
    """The model's last error on a row it failed alone."""


class _ModelCalls:
    """The embedder's calls of one backfill, and its failures in a row."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._failures = 0
        self.refusal: EmbeddingError | None = None

    async def embed(
        self, batch: Sequence[tuple[int, str]]
    ) -> list[tuple[int, str, Sequence[float]]]:
        """(id, text, vector) of the rows of ``batch`` the model embedded: all of them in one
        call, or else each row alone. Raises EmbeddingError at ``FAILURES_TO_STOP`` rows
        failed alone in a row (a whole batch failing counts as its rows are tried alone)."""
        if len(batch) > 1:
            try:
                vectors = await self._embedder.embed_documents([text for _, text in batch])
            except EmbeddingError:
                pass
            else:
                self._failures = 0
                return [(i, text, v) for (i, text), v in zip(batch, vectors, strict=True)]
        embedded: list[tuple[int, str, Sequence[float]]] = []
        for row_id, text in batch:
            try:
                [vector] = await self._embedder.embed_documents([text])
            except EmbeddingError as exc:
                self._failures += 1
                self.refusal = exc
                if self._failures >= FAILURES_TO_STOP:
                    raise EmbeddingError(
                        f"backfill stopped: the embedding model failed {self._failures} times "
                        f"in a row ({exc}); the batches done are stored, run it again to resume"
                    ) from exc
                continue
            self._failures = 0
            embedded.append((row_id, text, vector))
        return embedded


class FactBackfill:
    """memory_facts rows without a vector, hidden ones too: no read path shows a hidden row,
    but an unmerge or the expiry of the row it stands behind brings it back, and a reembed
    clears its vector with the rest."""

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
    ) -> list[int]:
        repo = FactRepository(session=session)
        return [
            fact_id
            for fact_id, embedded, vector in vectors
            if not await repo.set_embedding(fact_id, embedded, vector)
        ]


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
    ) -> list[int]:
        repo = ChunkRepository(session=session)
        for chunk_id, embedded, vector in vectors:
            await repo.set_embedding(chunk_id, embedded, vector)
        return []  # a chunk never changes: stored, or deleted meanwhile
