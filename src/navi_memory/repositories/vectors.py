"""What every vector query sets first, inside its own transaction."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["set_vector_search_options"]


async def set_vector_search_options(session: AsyncSession, ef_search: int) -> None:
    """Iterative HNSW scans (pgvector >= 0.8) and the search width, for this transaction only.

    With a per-user filter a plain HNSW scan stops after ``ef_search`` candidates, most of them
    other users' rows, and returns too few; an iterative scan keeps going until enough rows pass
    the filter. ``relaxed_order`` is faster than ``strict_order``; callers re-sort by distance.
    """
    # set_config(..., true) is SET LOCAL: both settings in one round trip.
    await session.execute(
        text(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
            "set_config('hnsw.ef_search', :ef, true)"
        ),
        {"ef": str(int(ef_search))},
    )
