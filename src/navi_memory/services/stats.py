"""What the database holds, for an operator: rows per table and per user, vectors missing,
vector-index backlogs, hidden and expired facts."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.repositories.stats import StatsRepository
from navi_memory.schemas import MemoryStats, UserStats

__all__ = ["StatsService"]


class StatsService:
    async def stats(
        self, session: AsyncSession, user_id: uuid.UUID | None, *, users: int, graph_from: int
    ) -> MemoryStats:
        """Totals over the whole database; the per-user part for ``user_id`` only, or for the
        ``users`` users holding the most rows. ``graph_from``: the chunk indexer's threshold
        for the HNSW graph (CHUNK_GRAPH_FROM), for the graph's backlog."""
        repo = StatsRepository(session=session)
        tables = await repo.table_rows()
        facts = await repo.fact_totals()
        names = await repo.users(user_id)
        per_user: dict[uuid.UUID | None, dict[str, int]] = {uid: {} for uid in names}
        for part in (
            await repo.facts_by_user(user_id),
            await repo.chunks_by_user(user_id),
            await repo.queued_by_user(user_id),
            await repo.sessions_by_user(user_id),
            await repo.kv_by_user(user_id),
            await repo.summaries_by_user(user_id),
        ):
            for owner, counts in part.items():
                per_user.setdefault(owner, {}).update(counts)
        rows = [
            UserStats(
                user_id=owner,
                name=names.get(owner) if owner is not None else None,
                **{**counts, "summary": bool(counts.get("summary"))},
            )
            for owner, counts in per_user.items()
        ]
        rows.sort(key=lambda u: (-_size(u), str(u.user_id)))
        return MemoryStats(
            tables=tables,
            vectors_missing={
                "memory_facts": int(facts["missing"]),
                "memory_chunks": await repo.chunks_without_vector(),
            },
            queues={
                "memory_chunk_vector_queue": tables["memory_chunk_vector_queue"],
                "memory_chunk_text_queue": tables["memory_chunk_text_queue"],
                "memory_fact_vector_queue": tables["memory_fact_vector_queue"],
                "unindexed": await repo.chunk_vectors_unindexed(),
                "awaiting_graph": await repo.chunk_vectors_awaiting_graph(graph_from),
            },
            hidden_facts=int(facts["hidden"]),
            expired_facts=int(facts["expired"]),
            users=tables["navi_users"],
            per_user=rows[:users],
        )


def _size(user: UserStats) -> int:
    """The rows a user holds, for "the users holding the most rows": sketches count too."""
    return user.facts + user.hidden_facts + user.chunks + user.messages + user.kv_entries
