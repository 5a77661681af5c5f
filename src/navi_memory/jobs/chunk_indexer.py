"""The chunk indexer: queued chunks into the GIN-indexed text table and the HNSW-indexed vector
table, off the write path.

add_chunks commits a chunk with its vector and queue rows in one short transaction; making its
tsvector and inserting it into a GIN index (about 1.7 ms a 3 KB chunk), and inserting its vector
into an HNSW graph (about 3 ms for 768 dimensions on a small machine), happen here, in batches,
each its own transaction. Until then search reads the queued chunks exactly, so nothing written
is ever unsearchable and no result depends on the indexer's progress (docs/raw-history.md).

One ChunkIndexer per Memory. ``kick()`` starts a background drain on the running event loop
(at most one at a time; a kick during a drain makes it go round again); ``drain()`` indexes
in the caller's task; ``aclose()`` lets the batch in flight finish and stops. Indexers in
several processes share the queue (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.errors import NaviMemoryError
from navi_memory.repositories.chunks import ChunkRepository
from navi_memory.unit_of_work import unit_of_work

__all__ = ["ChunkIndexer"]

logger = logging.getLogger(__name__)

CLOSE_GRACE_SECONDS: Final = 10.0
"""How long aclose() waits for the batch in flight before cancelling it (it rolls back; the
queue keeps its rows for the next indexer)."""

RETRY_DELAYS: Final = (0.25, 1.0, 4.0)
"""Seconds before each retry of a failed background drain (a deadlock victim, a dropped
connection, a database restarting); then it gives up until the next kick."""


class ChunkIndexer:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        batch_size: int,
        background: bool,
        retry_delays: Sequence[float] = RETRY_DELAYS,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._batch_size = batch_size
        self._background = background
        self._retry_delays = tuple(retry_delays)
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._closing = False
        self._closed = asyncio.Event()

    async def drain(self, max_batches: int | None = None) -> int:
        """Index queued chunks until the queues are empty (or ``max_batches`` batches ran);
        returns how many chunks were indexed (text, vector or both). Raises StorageError if
        the database fails."""
        indexed, batches = 0, 0
        while not self._closing and (max_batches is None or batches < max_batches):
            async with unit_of_work(self._sessionmaker) as session:
                taken, moved = await ChunkRepository(session=session).index_queued(self._batch_size)
            indexed += moved
            batches += 1
            if taken < self._batch_size:
                break
        return indexed

    async def queued(self) -> int:
        """How many chunks wait for an index (text, vector or both)."""
        async with unit_of_work(self._sessionmaker) as session:
            return await ChunkRepository(session=session).queued_count()

    def kick(self) -> None:
        """Start a background drain if background indexing is on (a no-op otherwise)."""
        if not self._background or self._closing:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._again = False
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="navi-memory chunk indexer"
        )

    async def _run(self) -> None:
        failures = 0
        while True:
            self._again = False
            try:
                indexed = await self.drain()
            except NaviMemoryError as exc:
                # The queue keeps its rows, and search reads them exactly meanwhile.
                if failures < len(self._retry_delays) and not self._closing:
                    delay = self._retry_delays[failures]
                    failures += 1
                    logger.info(
                        "chunks.index_retry: %s (retry %d in %.2g s)",
                        exc,
                        failures,
                        delay,
                        extra={"event": "chunks.index_retry"},
                    )
                    await self._sleep(delay)
                    self._again = True
                    continue
                logger.warning(
                    "chunks.index_failed: %s (the next add_chunks or `navi-memory backfill` "
                    "retries)",
                    exc,
                    extra={"event": "chunks.index_failed"},
                )
                return
            except Exception:
                logger.exception(
                    "chunks.index_failed: unexpected error",
                    extra={"event": "chunks.index_failed"},
                )
                return
            failures = 0
            if indexed:
                logger.debug("chunks.indexed", extra={"event": "chunks.indexed", "rows": indexed})
            if not self._again or self._closing:
                return

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the indexer is closed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), seconds)

    async def wait_idle(self) -> None:
        """Wait until no background drain is running (tests, benchmarks, shutdown)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def aclose(self) -> None:
        """Stop after the batch in flight; cancel it if it takes longer than the grace."""
        self._closing = True
        self._closed.set()
        task = self._task
        if task is None or task.done():
            return
        _, pending = await asyncio.wait({task}, timeout=CLOSE_GRACE_SECONDS)
        if pending:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
