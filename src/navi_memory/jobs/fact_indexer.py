"""The fact vector indexer: queued fact vectors into the HNSW-indexed table, off upsert_fact's path.

upsert_fact commits a fact with its vector of record, and a trigger queues the fact whenever that
vector is set or changed; inserting the vector into an HNSW graph (milliseconds for 768
dimensions on a small machine, several times the rest of the write) happens here, in batches,
each its own transaction. Until then search reads the queued facts exactly, so a fact is
searchable from the moment upsert_fact returns, and results never depend on how far this got
(docs/architecture.md, "Fact vectors are HNSW-indexed off the write path").

One FactIndexer per Memory. ``kick()`` starts a background drain on the running event loop (at
most one at a time; a kick during a drain makes it go round again); ``drain()`` indexes in the
caller's task; ``aclose()`` lets the batch in flight finish and stops. Indexers in several
processes share the queue (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.errors import NaviMemoryError
from navi_memory.repositories.facts import FactVectorRepository
from navi_memory.unit_of_work import unit_of_work

__all__ = ["FactIndexer"]

logger = logging.getLogger(__name__)

CLOSE_GRACE_SECONDS: Final = 10.0
"""How long aclose() waits for the batch in flight before cancelling it (it rolls back; the
queue keeps its rows for the next indexer)."""

GATHER_SECONDS: Final = 0.05
"""How long a background drain waits after the kick that started it: the writes of a burst
then share one batch — one transaction, one commit — instead of one each (a caller writing a
fact every millisecond otherwise doubles its commits)."""

RETRY_DELAYS: Final = (0.25, 1.0, 4.0)
"""Seconds before each retry of a failed background drain (a deadlock victim, a dropped
connection, a database restarting); then it gives up until the next kick."""


class FactIndexer:
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
        """Index queued vectors until the queue is empty (or ``max_batches`` batches ran);
        returns how many were indexed. Raises StorageError if the database fails."""
        indexed, batches = 0, 0
        while not self._closing and (max_batches is None or batches < max_batches):
            async with unit_of_work(self._sessionmaker) as session:
                taken, moved = await FactVectorRepository(session=session).index_queued(
                    self._batch_size
                )
            indexed += moved
            batches += 1
            if taken < self._batch_size:
                break
        return indexed

    async def queued(self) -> int:
        """How many facts wait for the index."""
        async with unit_of_work(self._sessionmaker) as session:
            return await FactVectorRepository(session=session).queued_count()

    def kick(self) -> None:
        """Start a background drain if background indexing is on (a no-op otherwise)."""
        if not self._background or self._closing:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._again = False
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="navi-memory fact indexer"
        )

    async def _run(self) -> None:
        failures = 0
        await self._sleep(GATHER_SECONDS)
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
                        "facts.index_retry: %s (retry %d in %.2g s)",
                        exc,
                        failures,
                        delay,
                        extra={"event": "facts.index_retry"},
                    )
                    await self._sleep(delay)
                    self._again = True
                    continue
                logger.warning(
                    "facts.index_failed: %s (the next upsert_fact or `navi-memory backfill` "
                    "retries)",
                    exc,
                    extra={"event": "facts.index_failed"},
                )
                return
            except Exception:
                logger.exception(
                    "facts.index_failed: unexpected error",
                    extra={"event": "facts.index_failed"},
                )
                return
            failures = 0
            if indexed:
                logger.debug("facts.indexed", extra={"event": "facts.indexed", "rows": indexed})
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
