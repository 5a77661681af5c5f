"""Only big users' chunk vectors go into the HNSW graph; a smaller user's are searched exactly.

A per-user search over a graph shared by every user finds a small user's few rows only by
walking far (pgvector's iterative scan, up to ``hnsw.max_scan_tuples``), and an exact scan of
a few hundred half-precision vectors through the per-user btree is faster and finds every
nearest row. So the graph holds only what it serves well, and what is inserted into it — the
chunk indexer's slow part, about 3 ms a vector on a small machine and 10–15 ms at 1M chunks —
shrinks to the chunks of users big enough to need it:

- ``memory_chunk_vectors.in_graph``: whether the row is in the HNSW graph. The indexer sets it
  when the chunk's user holds ``CHUNK_GRAPH_FROM`` (setting) indexed chunks or more, and moves
  the earlier rows of a user who crosses it into the graph, in batches (``in_graph`` set true);
- the HNSW index becomes partial (``WHERE in_graph``), and the (user_id, session_id) btree two
  partial ones, one per side, so each side of a search reads only its own rows.

Search reads both sides and the queue, each row from exactly one of the three, in one
statement: results never depend on which side a row is on. Existing rows of users who hold
``CHUNK_GRAPH_FROM`` chunks or more are marked here and the graph is rebuilt over them alone
(on 1M chunks over 10k users of Zipf sizes, about a quarter of the rows; give the session a few
GB of ``maintenance_work_mem``). Chunk searches and the indexer wait for the upgrade's lock on
memory_chunk_vectors until the graph is built: plan it as downtime, and ``VACUUM
memory_chunk_vectors`` afterwards (the marked rows' old versions). See docs/raw-history.md,
"Vector index".

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GRAPH_FROM = 2_000
"""navi_memory.constants.CHUNK_GRAPH_FROM when this revision was written (a revision does not
import the package: it must mean the same thing whatever the package becomes)."""


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_chunk_vectors_embedding_hnsw")
    op.execute("DROP INDEX IF EXISTS ix_memory_chunk_vectors_user_id_session_id")
    # A constant default: PostgreSQL adds the column without rewriting the table.
    op.execute(
        "ALTER TABLE memory_chunk_vectors ADD COLUMN in_graph boolean NOT NULL DEFAULT false"
    )
    op.execute(
        "UPDATE memory_chunk_vectors v SET in_graph = true FROM memory_chunk_text_stats s "
        f"WHERE s.user_id = v.user_id AND s.chunks >= {GRAPH_FROM}"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_exact_user_id_session_id "
        "ON memory_chunk_vectors (user_id, session_id) WHERE NOT in_graph"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_graph_user_id_session_id "
        "ON memory_chunk_vectors (user_id, session_id) WHERE in_graph"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_embedding_hnsw ON memory_chunk_vectors "
        "USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64) "
        "WHERE in_graph"
    )
    # Statistics for in_graph, so the planner weighs the two sides from the start.
    op.execute("ANALYZE memory_chunk_vectors")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_chunk_vectors_embedding_hnsw")
    op.execute("DROP INDEX IF EXISTS ix_memory_chunk_vectors_graph_user_id_session_id")
    op.execute("DROP INDEX IF EXISTS ix_memory_chunk_vectors_exact_user_id_session_id")
    op.execute("ALTER TABLE memory_chunk_vectors DROP COLUMN in_graph")
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_user_id_session_id "
        "ON memory_chunk_vectors (user_id, session_id)"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_embedding_hnsw ON memory_chunk_vectors "
        "USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
