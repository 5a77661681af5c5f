"""SQL for memory_chunks (raw history) and its vector index tables."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, RowMapping, func, literal, literal_column, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.constants import CHUNK_INSERT_BATCH, EMBEDDING_DIM
from navi_memory.db import vector_binary
from navi_memory.models import ChunkRow, ChunkVectorQueueRow
from navi_memory.repositories.like import contains_pattern
from navi_memory.repositories.sessions import summary_at_of_chunk
from navi_memory.repositories.vectors import (
    QUERY_VECTOR,
    HybridSearch,
)
from navi_memory.schemas import ChunkDraft

__all__ = ["ChunkRepository", "ranked_text_sql"]


_HALFVEC = f"halfvec({EMBEDDING_DIM})"

_INSERT = text(
    """
    WITH owner AS (
        -- The session's row, if it has one, share-locked: a session delete that has not
        -- committed makes this wait and then see no row (refused if require_session), and one
        -- that starts after waits for this statement, so it deletes these chunks too.
        SELECT user_id FROM sessions WHERE id = :sid FOR SHARE
    ),
    allowed AS (
        SELECT NOT EXISTS (SELECT 1 FROM owner WHERE user_id <> :uid)
               AND (NOT :require_session OR EXISTS (SELECT 1 FROM owner)) AS ok
    ),
    ins AS (
        INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,
                                   end_seq, started_at, ended_at, breadcrumbs, embedding)
        SELECT :uid, :sid, r.content, r.content_hash, r.start_seq, r.end_seq, r.started_at,
               r.ended_at, ARRAY(SELECT jsonb_array_elements_text(CAST(r.crumbs AS jsonb))),
               r.embedding
        FROM unnest(CAST(:content AS text[]), CAST(:hash AS text[]), CAST(:start_seq AS int[]),
                    CAST(:end_seq AS int[]), CAST(:started_at AS timestamptz[]),
                    CAST(:ended_at AS timestamptz[]), CAST(:crumbs AS text[]),
                    CAST(:vectors AS vector[]))
             AS r(content, content_hash, start_seq, end_seq, started_at, ended_at, crumbs,
                  embedding)
        WHERE (SELECT ok FROM allowed)
        ON CONFLICT (user_id, session_id, content_hash) DO NOTHING
        RETURNING id, embedding IS NOT NULL AS has_vector
    ),
    queued AS (
        INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)
        SELECT id, :uid FROM ins WHERE has_vector
    )
    SELECT (SELECT ok FROM allowed) AS allowed, (SELECT count(*) FROM ins) AS written
    """
)

_INDEX_QUEUED = text(
    f"""
    WITH taken AS (
        DELETE FROM memory_chunk_vector_queue
        WHERE chunk_id IN (SELECT chunk_id FROM memory_chunk_vector_queue
                           ORDER BY chunk_id LIMIT :limit FOR UPDATE SKIP LOCKED)
        RETURNING chunk_id
    ),
    moved AS (
        INSERT INTO memory_chunk_vectors (chunk_id, user_id, session_id, embedding)
        SELECT c.id, c.user_id, c.session_id, CAST(l2_normalize(c.embedding) AS {_HALFVEC})
        FROM memory_chunks c JOIN taken t ON t.chunk_id = c.id
        WHERE c.embedding IS NOT NULL
        ON CONFLICT (chunk_id) DO NOTHING
        RETURNING chunk_id
    )
    SELECT (SELECT count(*) FROM taken) AS taken, (SELECT count(*) FROM moved) AS indexed
    """
)


def _owner(user_id: uuid.UUID | None, session_id: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if user_id is not None:
        where.append(ChunkRow.user_id == user_id)
    if session_id is not None:
        where.append(ChunkRow.session_id == session_id)
    return where or [literal(True)]


_CHUNK_COLUMNS = (
    "c.id, c.user_id, c.session_id, c.content, c.content_hash, c.start_seq, c.end_seq, "
    "c.started_at, c.ended_at, c.breadcrumbs, c.created_at"
)
"""Every memory_chunks column a Chunk shows, the vector excepted (text SQL form)."""


def chunk_columns() -> list[Any]:
    """The same columns for Core selects, with ``has_embedding`` instead of the vector."""
    return [
        ChunkRow.id,
        ChunkRow.user_id,
        ChunkRow.session_id,
        ChunkRow.content,
        ChunkRow.content_hash,
        ChunkRow.start_seq,
        ChunkRow.end_seq,
        ChunkRow.started_at,
        ChunkRow.ended_at,
        ChunkRow.breadcrumbs,
        ChunkRow.created_at,
        ChunkRow.embedding.is_not(None).label("has_embedding"),
    ]


def _nearest(vector_where: str, queue_where: str) -> str:
    """The ``limit`` nearest chunks by cosine distance: through the HNSW index of
    memory_chunk_vectors (or the per-user btree, as the planner judges), and exactly over the
    chunks still queued for it. A chunk is in exactly one of the two tables, or neither (no
    vector): the indexer moves it in one transaction, and one statement sees one snapshot."""
    return f"""
        SELECT u.id, u.approx FROM (
            (SELECT v.chunk_id AS id,
                    v.embedding <=> CAST(l2_normalize({QUERY_VECTOR}) AS {_HALFVEC}) AS approx
             FROM memory_chunk_vectors v
             WHERE {vector_where}
             ORDER BY approx
             LIMIT :limit)
            UNION ALL
            (SELECT c.id, c.embedding <=> {QUERY_VECTOR} AS approx
             FROM memory_chunk_vector_queue p JOIN memory_chunks c ON c.id = p.chunk_id
             WHERE {queue_where} AND c.embedding IS NOT NULL
             ORDER BY approx
             LIMIT :limit)
        ) u
        ORDER BY u.approx
        LIMIT :limit"""


_RANKED_TEXT = r"""
    WITH ql AS MATERIALIZED (
        -- The query's lexemes, made by the very function that made every chunk's search_tsv.
        SELECT DISTINCT l AS lexeme
        FROM unnest(tsvector_to_array(navi_text_tsv(CAST(:query AS text)))) l
    ),
    cand AS MATERIALIZED (
        -- Only chunks holding a query lexeme (navi_text_tsquery: evaluated while planning, so
        -- the planner weighs the words: the per-user btree for a small user, GIN for rare
        -- words).
        SELECT c.id, c.ended_at, c.search_tsv AS tsv
        FROM memory_chunks c
        WHERE {where} AND c.search_tsv @@ navi_text_tsquery(CAST(:query AS text))
    ),
    st AS (
        SELECT greatest(sum(chunks), 1)::float8 AS n,
               greatest(sum(lexemes)::float8 / greatest(sum(chunks), 1), 1) AS avgdl
        FROM memory_chunk_text_stats s WHERE {stats_where}
    ),
    tf AS (
        -- The query's lexemes of each candidate: marked (weight A, a binary search each) and
        -- kept, instead of unnesting all its lexemes (5x faster on long chunks).
        SELECT cand.id, u.lexeme, coalesce(cardinality(u.positions), 1) AS tf,
               length(cand.tsv) AS dl
        FROM cand,
             unnest(ts_filter(setweight(cand.tsv, 'A', (SELECT array_agg(lexeme) FROM ql)),
                              '{{a}}')) u
    ),
    df AS (SELECT lexeme, count(*)::float8 AS df FROM tf GROUP BY lexeme),
    scored AS (
        SELECT tf.id,
               sum(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))
                   * tf.tf * (:k1 + 1) / (tf.tf + :k1 * (1 - :b + :b * tf.dl / st.avgdl)))
                   AS score,
               count(*) AS hits
        FROM tf JOIN df USING (lexeme) CROSS JOIN st
        GROUP BY tf.id
    ),
    top AS (
        SELECT s.id, s.score, s.hits FROM scored s JOIN cand ON cand.id = s.id
        ORDER BY s.score DESC, cand.ended_at DESC, s.id DESC
        LIMIT :limit
    )
    SELECT {columns}, c.embedding IS NOT NULL AS has_embedding, top.score, top.hits AS terms_hit
    FROM top JOIN memory_chunks c ON c.id = top.id
    ORDER BY top.score DESC, c.ended_at DESC, c.id DESC
"""
"""BM25 over search_tsv: idf from the statistics of the chunks in scope (the user's own), tf
saturation (``k1``), length normalisation (``b``, length in distinct lexemes). The document
frequency of a lexeme is counted over the candidates, which is exact: every chunk holding the
lexeme is a candidate."""


def ranked_text_sql(*, by_user: bool, by_session: bool) -> str:
    """The BM25 text statement, narrowed to ``:uid`` and/or ``:sid`` (bound parameters, with
    ``:query``, ``:k1``, ``:b`` and ``:limit``)."""
    where, stats_where = ["TRUE"], ["TRUE"]
    if by_user:
        where.append("c.user_id = :uid")
        stats_where.append("s.user_id = :uid")
    if by_session:
        where.append("c.session_id = :sid")
    return _RANKED_TEXT.format(
        where=" AND ".join(where), stats_where=" AND ".join(stats_where), columns=_CHUNK_COLUMNS
    )


def _patterns(terms: Sequence[str]) -> list[str]:
    return [contains_pattern(term) for term in terms]


class ChunkRepository:
    def __init__(self, *, session: AsyncSession | AsyncConnection) -> None:
        self.session = session

    async def insert_many(
        self,
        user_id: uuid.UUID,
        session_id: str,
        rows: Sequence[ChunkDraft],
        vectors: Sequence[Sequence[float]] | None,
        *,
        require_session: bool,
    ) -> int | None:
        """Write ``rows`` (INSERT … ON CONFLICT DO NOTHING) and queue the vector of every row
        written for the indexer; returns how many were written, or None — nothing written —
        when the session has a row of another user (or none and ``require_session``).

        ``vectors``: one per row, or None (the rows land without; backfill fills them). One
        fixed-shape statement per CHUNK_INSERT_BATCH rows, the columns sent as arrays (unnest)
        and the vectors as one flat binary ``real[]``: prepared once per connection whatever the
        number of rows, no vector formatted as text, and — with one batch — one round trip, so
        the caller can run it as its own transaction (autocommit)."""
        written = 0
        for start in range(0, len(rows), CHUNK_INSERT_BATCH):
            batch = rows[start : start + CHUNK_INSERT_BATCH]
            params = {
                "uid": user_id,
                "sid": session_id,
                "require_session": require_session,
                "content": [r.content for r in batch],
                "hash": [r.content_hash for r in batch],
                "start_seq": [r.start_seq for r in batch],
                "end_seq": [r.end_seq for r in batch],
                "started_at": [r.started_at for r in batch],
                "ended_at": [r.ended_at for r in batch],
                "crumbs": [json.dumps(list(r.breadcrumbs)) for r in batch],
                "vectors": (
                    None
                    if vectors is None
                    else [vector_binary(v) for v in vectors[start : start + CHUNK_INSERT_BATCH]]
                ),
            }
            result = (await self.session.execute(_INSERT, params)).one()
            if not result.allowed:
                return None
            written += int(result.written)
        return written

    async def search(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        max_distance: float,
        *,
        with_summary_at: bool = False,
    ) -> list[RowMapping]:
        """Both passes of search_chunks in one statement (the shape of FactRepository.search):
        the ``limit`` nearest chunks closer than ``max_distance``, and the chunks whose content
        or breadcrumbs contain any term (case-insensitive), by distinct terms hit, then recency.
        Rows carry ``distance`` or ``terms_hit``, never the vector.

        The text pass is ``lower(x) LIKE ANY (lowered patterns)``: ILIKE's matches, at half its
        cost on long text (ILIKE folds the text once per pattern). It has no full-text arm: a
        word ``to_tsvector('simple', …)`` finds is a substring these patterns find too, and
        recomputing the tsvector cost ~0.17 ms a chunk (docs/raw-history.md, "Search").

        ``with_summary_at`` adds each hit's ``summary_at`` (its session's last summary, see
        ``summary_at_of_chunk``): unified search's freshness boundaries in the same statement."""
        where, vector_where, queue_where = ["TRUE"], ["TRUE"], ["TRUE"]
        params: dict[str, Any] = {"limit": limit, "patterns": _patterns(terms)}
        if user_id is not None:
            where.append("c.user_id = :uid")
            vector_where.append("v.user_id = :uid")
            queue_where.append("p.user_id = :uid")
            params["uid"] = user_id
        if session_id is not None:
            where.append("c.session_id = :sid")
            vector_where.append("v.session_id = :sid")
            queue_where.append("c.session_id = :sid")
            params["sid"] = session_id
        crumbs = "lower(array_to_string(c.breadcrumbs, E'\\n'))"
        lowered = "ARRAY(SELECT lower(x) FROM unnest(CAST(:patterns AS text[])) x)"
        search = HybridSearch(
            table="memory_chunks",
            alias="c",
            columns=(
                f"{_CHUNK_COLUMNS}, {summary_at_of_chunk('c')} AS summary_at"
                if with_summary_at
                else _CHUNK_COLUMNS
            ),
            where=" AND ".join(where),
            match=f"(lower(c.content) LIKE ANY ({lowered}) OR {crumbs} LIKE ANY ({lowered}))",
            hits=f"lower(c.content) LIKE lower(p) OR {crumbs} LIKE lower(p)",
            recency="ended_at",
            nearest=_nearest(" AND ".join(vector_where), " AND ".join(queue_where)),
        )
        return await search.run(self.session, params, query_vector, max_distance)

    async def search_ranked_text(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        terms: Sequence[str],
        limit: int,
        *,
        k1: float,
        b: float,
    ) -> list[RowMapping]:
        """The ``limit`` best chunks by BM25 over their content and breadcrumbs (search_tsv),
        best first; rows carry ``score`` and ``terms_hit`` (query lexemes held). Reads only the
        chunks holding a query lexeme (GIN on search_tsv), never the vectors."""
        params: dict[str, Any] = {"limit": limit, "query": " ".join(terms), "k1": k1, "b": b}
        if user_id is not None:
            params["uid"] = user_id
        if session_id is not None:
            params["sid"] = session_id
        sql = ranked_text_sql(by_user=user_id is not None, by_session=session_id is not None)
        return list((await self.session.execute(text(sql), params)).mappings())

    async def nearest(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float],
        limit: int,
    ) -> list[RowMapping]:
        """The ``limit`` nearest chunks (HNSW index and queue, see ``_nearest``), nearest first,
        each with its exact cosine ``distance``; no threshold (the caller applies one)."""
        vector_where, queue_where = ["TRUE"], ["TRUE"]
        params: dict[str, Any] = {"limit": limit, "q": vector_binary(query_vector)}
        if user_id is not None:
            vector_where.append("v.user_id = :uid")
            queue_where.append("p.user_id = :uid")
            params["uid"] = user_id
        if session_id is not None:
            vector_where.append("v.session_id = :sid")
            queue_where.append("c.session_id = :sid")
            params["sid"] = session_id
        sql = f"""
            WITH nearest AS MATERIALIZED (
                {_nearest(" AND ".join(vector_where), " AND ".join(queue_where))}
            )
            SELECT {_CHUNK_COLUMNS}, c.embedding IS NOT NULL AS has_embedding,
                   c.embedding <=> {QUERY_VECTOR} AS distance
            FROM (SELECT DISTINCT id FROM nearest) n JOIN memory_chunks c ON c.id = n.id
            ORDER BY distance, c.id"""
        return list((await self.session.execute(text(sql), params)).mappings())

    async def recent(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        limit: int,
        *,
        with_summary_at: bool = False,
    ) -> list[RowMapping]:
        columns = chunk_columns()
        if with_summary_at:
            columns.append(
                literal_column(summary_at_of_chunk(ChunkRow.__tablename__)).label("summary_at")
            )
        stmt = (
            select(*columns)
            .where(*_owner(user_id, session_id))
            .order_by(ChunkRow.ended_at.desc(), ChunkRow.id.desc())
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())

    # --- backfill ---------------------------------------------------------------------------

    async def count_missing_embeddings(self) -> int:
        stmt = select(func.count()).where(ChunkRow.embedding.is_(None))
        return int(await self.session.scalar(stmt) or 0)

    async def missing_embeddings(self, after_id: int, limit: int) -> list[tuple[int, str]]:
        stmt = (
            select(ChunkRow.id, ChunkRow.content)
            .where(ChunkRow.embedding.is_(None), ChunkRow.id > after_id)
            .order_by(ChunkRow.id)
            .limit(limit)
        )
        return [(row.id, row.content) for row in (await self.session.execute(stmt)).all()]

    async def set_embedding(
        self, chunk_id: int, embedded_text: str, embedding: Sequence[float]
    ) -> None:
        """Store a vector the chunk lacks and queue it for the index (chunks are immutable:
        the text embedded is still the chunk's)."""
        del embedded_text
        await self.session.execute(
            text(
                "WITH filled AS ("
                " UPDATE memory_chunks SET embedding = CAST(:vec AS vector)"
                " WHERE id = :id AND embedding IS NULL RETURNING id, user_id)"
                " INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)"
                " SELECT id, user_id FROM filled ON CONFLICT (chunk_id) DO NOTHING"
            ),
            {"id": chunk_id, "vec": vector_binary(embedding)},
        )

    # --- the vector index -------------------------------------------------------------------

    async def index_queued(self, limit: int) -> tuple[int, int]:
        """Move up to ``limit`` queued vectors into memory_chunk_vectors (L2-normalised halfvec,
        HNSW-indexed); returns (queue rows taken, vectors indexed). Rows another indexer holds
        are skipped, so indexers in several processes share the queue."""
        row = (await self.session.execute(_INDEX_QUEUED, {"limit": limit})).one()
        return int(row.taken), int(row.indexed)

    async def requeue_unindexed(self) -> int:
        """Queue every chunk that has a vector but is in neither memory_chunk_vectors nor the
        queue (written by SQL of its own, restored from a dump of memory_chunks alone, or by a
        process older than revision 0004); returns how many. A full scan: for backfill."""
        queued = (
            await self.session.execute(
                text(
                    "WITH added AS ("
                    " INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)"
                    " SELECT c.id, c.user_id FROM memory_chunks c"
                    " WHERE c.embedding IS NOT NULL AND NOT EXISTS"
                    " (SELECT 1 FROM memory_chunk_vectors v WHERE v.chunk_id = c.id)"
                    " ON CONFLICT (chunk_id) DO NOTHING RETURNING chunk_id)"
                    " SELECT count(*) FROM added"
                )
            )
        ).scalar_one()
        # An indexer that committed while the INSERT ran took rows it did not see yet: a new
        # statement sees that commit, and drops what is now queued and indexed both.
        dropped = (
            await self.session.execute(
                text(
                    "WITH gone AS (DELETE FROM memory_chunk_vector_queue q"
                    " USING memory_chunk_vectors v WHERE v.chunk_id = q.chunk_id"
                    " RETURNING q.chunk_id) SELECT count(*) FROM gone"
                )
            )
        ).scalar_one()
        return int(queued) - int(dropped)

    async def queued_count(self) -> int:
        return int(
            await self.session.scalar(select(func.count()).select_from(ChunkVectorQueueRow)) or 0
        )
