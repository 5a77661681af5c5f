"""The fact vector indexer: queued fact vectors into memory_fact_vectors, off upsert_fact's path.

upsert_fact commits a fact with its vector of record, and a trigger queues the fact whenever that
vector is set or changed; the indexer copies the vector, L2-normalised as ``halfvec``, into
memory_fact_vectors, which search reads exactly (per user by its btree, everyone's by a scan),
in batches, each its own transaction. Until then search reads the queued facts from
memory_facts, so a fact is searchable from the moment upsert_fact returns, and results never
depend on how far this got (docs/architecture.md, "Fact vectors off the write path, read
exactly"). The table had an HNSW graph until revision 0020; entering it cost more than the
rest of a fact's write, for global searches alone.

One FactIndexer per Memory. ``kick()`` starts a background drain on the running event loop (at
most one at a time; a kick during a drain makes it go round again); ``drain()`` indexes in the
caller's task; ``aclose()`` lets the batch in flight finish (or runs one where a kicked drain
had not begun) and stops. Indexers in several processes share the queue (``FOR UPDATE SKIP
LOCKED``).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.jobs.queue_indexer import QueueIndexer
from navi_memory.repositories.facts import FactVectorRepository

__all__ = ["FactIndexer"]

GATHER_SECONDS: Final = 0.05
"""How long a background drain waits after the kick that started it, and before each round a
kick during it asks for: the writes of a burst, or of a stream, then share one batch — one
transaction, one commit — instead of one each (a caller writing a fact every millisecond
otherwise doubles its commits)."""


class FactIndexer(QueueIndexer):
    """Queued fact vectors into memory_fact_vectors."""

    events = "facts"
    retry_hint = "the next upsert_fact or `navi-memory backfill`"
    gather_seconds = GATHER_SECONDS

    async def _index_batch(self, session: AsyncSession, limit: int) -> tuple[bool, int]:
        picked, taken, indexed = await FactVectorRepository(session=session).index_queued(limit)
        return picked >= limit and taken > 0, indexed

    async def _queued_count(self, session: AsyncSession) -> int:
        return await FactVectorRepository(session=session).queued_count()
