"""Chunk vectors are HNSW-indexed off the write path: memory_chunk_vectors and its queue.

An HNSW insertion of a 768-d vector costs about 3 ms here, six times what the rest of a chunk's
write costs, so add_chunks no longer inserts into an HNSW index. It stores the chunk (with its
vector of record in memory_chunks.embedding) and queues the chunk id; an indexer moves queued
vectors into memory_chunk_vectors (L2-normalised halfvec, HNSW) in batches, and search reads the
index and, exactly, the queue. See docs/raw-history.md, "Vector index".

Existing vectors are copied over here and the index is built once after the copy (faster than
row by row); the HNSW index on memory_chunks.embedding goes.

The GIN full-text index on memory_chunks goes too: chunk search matches terms as substrings
(which every whole-word match also is), so no query used it, and keeping it cost ~1 ms of
every chunk's write (about 350 lexemes inserted a chunk).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory_chunk_vectors (
            chunk_id bigint NOT NULL,
            user_id uuid NOT NULL,
            session_id text NOT NULL,
            embedding halfvec(768) NOT NULL,
            CONSTRAINT pk_memory_chunk_vectors PRIMARY KEY (chunk_id),
            CONSTRAINT fk_memory_chunk_vectors_chunk_id_memory_chunks FOREIGN KEY (chunk_id)
                REFERENCES memory_chunks (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE memory_chunk_vector_queue (
            chunk_id bigint NOT NULL,
            user_id uuid NOT NULL,
            CONSTRAINT pk_memory_chunk_vector_queue PRIMARY KEY (chunk_id),
            CONSTRAINT fk_memory_chunk_vector_queue_chunk_id_memory_chunks FOREIGN KEY (chunk_id)
                REFERENCES memory_chunks (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO memory_chunk_vectors (chunk_id, user_id, session_id, embedding) "
        "SELECT id, user_id, session_id, CAST(l2_normalize(embedding) AS halfvec(768)) "
        "FROM memory_chunks WHERE embedding IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_user_id_session_id "
        "ON memory_chunk_vectors (user_id, session_id)"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vectors_embedding_hnsw ON memory_chunk_vectors "
        "USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_vector_queue_user_id ON memory_chunk_vector_queue (user_id)"
    )
    op.execute("DROP INDEX IF EXISTS ix_memory_chunks_embedding_hnsw")
    op.execute("DROP INDEX IF EXISTS ix_memory_chunks_content_fts")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memory_chunk_vector_queue")
    op.execute("DROP TABLE IF EXISTS memory_chunk_vectors")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memory_chunks_content_fts ON memory_chunks "
        "USING gin (to_tsvector('simple'::regconfig, content))"
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memory_chunks_embedding_hnsw ON memory_chunks "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
