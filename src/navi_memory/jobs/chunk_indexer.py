"""The chunk indexer: queued chunks into the GIN-indexed text table and the HNSW-indexed vector
table, off the write path.

add_chunks commits a chunk with its vector and queue rows in one short transaction; making its
tsvector and inserting it into a GIN index (about 1.7 ms a 3 KB chunk), and inserting its vector
into an HNSW graph (about 3 ms for 768 dimensions on a small machine), happen here, in batches,
each its own transaction. Until then search reads the queued chunks exactly, so nothing written
is ever unsearchable and no result depends on the indexer's progress (docs/raw-history.md).

One ChunkIndexer per Memory, with CHUNK_INDEX_WORKERS - 1 helpers (``from_settings``).
``kick()`` starts a background drain on the running event loop (at most one at a time; a kick
during a drain makes it go round again), which kicks the helpers when a batch finds a backlog;
``drain()`` indexes in the caller's task; ``aclose()`` lets the batches in flight finish (or
runs one where a kicked drain had not begun) and stops. Indexers in several processes share
the queue (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import CHUNK_GRAPH_FROM, CHUNK_GRAPH_SWEEP_SECONDS
from navi_memory.jobs.queue_indexer import RETRY_DELAYS, QueueIndexer
from navi_memory.repositories.chunks import ChunkRepository

__all__ = ["ChunkIndexer"]


class ChunkIndexer(QueueIndexer):
    """Queued chunks into their text and vector indexes, text first; ``drain`` counts the
    chunks it completed (text, and vector when there is one), ``queued`` the chunks that wait
    for either."""

    events = "chunks"
    retry_hint = "the next add_chunks or `navi-memory backfill`"

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        batch_size: int,
        background: bool,
        graph_from: int = CHUNK_GRAPH_FROM,
        sweep_seconds: float = CHUNK_GRAPH_SWEEP_SECONDS,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        helpers: Sequence[ChunkIndexer] = (),
        sweeps: bool = True,
    ) -> None:
        """``graph_from``: a user's vectors go into the HNSW graph once the user holds that
        many indexed chunks (the CHUNK_GRAPH_FROM setting); the indexer also moves the earlier
        vectors of a user who crosses it, with batches' spare room. ``sweep_seconds``: how
        often at most a batch also looks at every grown user for vectors left beside the
        graph (besides the first batch and one after a batch that ran out of room).
        ``sweeps=False`` (a helper): no look of its own at every grown user, first or
        periodic — the indexer that relays to it makes them (a look that runs out of room is
        still followed up)."""
        super().__init__(
            sessionmaker,
            batch_size=batch_size,
            background=background,
            retry_delays=retry_delays,
            helpers=helpers,
        )
        self._graph_from = graph_from
        self._sweep_seconds = sweep_seconds if sweeps else math.inf
        self._sweep_due = sweeps
        self._next_sweep = 0.0 if sweeps else math.inf
        self._crossing: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_settings(
        cls, sessionmaker: async_sessionmaker[AsyncSession], settings: Settings
    ) -> ChunkIndexer:
        """The indexer of CHUNK_INDEX_BATCH_SIZE, CHUNK_INDEX_IN_BACKGROUND and
        CHUNK_GRAPH_FROM, with CHUNK_INDEX_WORKERS - 1 helpers: independent indexers of the
        same queue (as indexers in other processes are) that its background drain starts when
        a batch finds a backlog."""

        def make(helpers: Sequence[ChunkIndexer] = (), *, sweeps: bool = True) -> ChunkIndexer:
            return cls(
                sessionmaker,
                batch_size=settings.chunk_index_batch_size,
                background=settings.chunk_index_in_background,
                graph_from=settings.chunk_graph_from,
                helpers=helpers,
                sweeps=sweeps,
            )

        return make([make(sweeps=False) for _ in range(settings.chunk_index_workers - 1)])

    @property
    def graph_from(self) -> int:
        """From how many indexed chunks a user's vectors go into the HNSW graph."""
        return self._graph_from

    def sweep_next(self) -> None:
        """Make the next batch look at every user past ``graph_from`` for vectors beside the
        graph: an explicit drain (index_pending_chunks) finishes what anyone left."""
        self._sweep_due = True

    async def _index_batch(self, session: AsyncSession, limit: int) -> tuple[bool, int]:
        # The look at every grown user (ChunkRepository.index_queued's sweep) is dear and
        # nearly always finds nothing (0.3-0.4 s at 1M after a burst): it runs in the first
        # batch of this indexer, after a look that ran out of room, and every
        # ``sweep_seconds`` for what another process (or a rolled-back batch) left. The users
        # a batch takes past the threshold are moved by name (``crossing``), batch by batch.
        now = time.monotonic()
        sweep = self._sweep_due or now >= self._next_sweep
        if sweep:
            self._next_sweep = now + self._sweep_seconds
        self._sweep_due = True  # until this batch says otherwise
        batch = await ChunkRepository(session=session).index_queued(
            limit, graph_from=self._graph_from, sweep=sweep, crossing=self._crossing
        )
        self._sweep_due = batch.graph_left
        self._crossing = batch.crossing
        return (batch.done >= limit and batch.took > 0) or bool(batch.crossing), batch.indexed

    async def _queued_count(self, session: AsyncSession) -> int:
        return await ChunkRepository(session=session).queued_count()
