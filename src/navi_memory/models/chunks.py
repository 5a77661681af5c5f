"""memory_chunks and its vector index tables: verbatim dropped history, searchable."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import HALFVEC, Vector
from sqlalchemy import (
    BigInteger,
    Computed,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, TSVECTOR, UUID
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.models.base import Base, created_at_column
from navi_memory.models.facts import HNSW_OPTIONS


class ChunkRow(Base):
    __tablename__ = "memory_chunks"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE"), nullable=False
    )
    # No foreign key (spec): the memory DDL may run before sessions exist; the session store
    # deletes a session's chunks itself, in the same transaction.
    session_id: Mapped[str] = mapped_column(Text, nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(Text, nullable=False)
    start_seq: Mapped[int] = mapped_column(Integer, nullable=False)
    end_seq: Mapped[int] = mapped_column(Integer, nullable=False)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    breadcrumbs: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")
    )
    embedding: Mapped[list[float] | None] = mapped_column(Vector(EMBEDDING_DIM))
    created_at: Mapped[datetime] = created_at_column()
    # The text search_chunks ranks (BM25), made by navi_chunk_tsv (revision 0006): the 'simple'
    # lexemes of content and breadcrumbs, plus every identifier with an underscore kept whole.
    search_tsv: Mapped[str] = mapped_column(
        TSVECTOR, Computed("navi_chunk_tsv(content, breadcrumbs)", persisted=True)
    )

    __table_args__ = (
        UniqueConstraint("user_id", "session_id", "content_hash"),
        Index("ix_memory_chunks_search_tsv", "search_tsv", postgresql_using="gin"),
        Index(
            "ix_memory_chunks_user_id_session_id_ended_at",
            "user_id",
            "session_id",
            text("ended_at DESC"),
        ),
        Index("ix_memory_chunks_breadcrumbs", "breadcrumbs", postgresql_using="gin"),
    )


class ChunkVectorRow(Base):
    """The HNSW-indexed copy of a chunk's vector (docs/raw-history.md, "Vector index").

    ``memory_chunks.embedding`` stays the vector of record; this table holds it L2-normalised
    as ``halfvec`` (cosine distance does not change, every value fits 16 bits, index and copy
    are half the size). Rows arrive from memory_chunk_vector_queue off the write path, so
    add_chunks never waits for an HNSW insertion; search reads both tables.
    """

    __tablename__ = "memory_chunk_vectors"

    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_chunks.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    session_id: Mapped[str] = mapped_column(Text, nullable=False)
    embedding: Mapped[list[float]] = mapped_column(HALFVEC(EMBEDDING_DIM), nullable=False)

    __table_args__ = (
        Index("ix_memory_chunk_vectors_user_id_session_id", "user_id", "session_id"),
        Index(
            "ix_memory_chunk_vectors_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_with=HNSW_OPTIONS,
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
        ),
    )


class ChunkVectorQueueRow(Base):
    """A chunk whose vector is stored but not yet in memory_chunk_vectors (searched exactly)."""

    __tablename__ = "memory_chunk_vector_queue"

    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_chunks.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)

    __table_args__ = (Index("ix_memory_chunk_vector_queue_user_id", "user_id"),)


class ChunkTextStatsRow(Base):
    """Per user: how many chunks and how many lexemes (summed over chunks) they hold, the N and
    average length of search_chunks' BM25. Kept in step with every insert and delete of
    memory_chunks by statement-level triggers (revision 0006), whoever writes."""

    __tablename__ = "memory_chunk_text_stats"

    user_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE"), primary_key=True
    )
    chunks: Mapped[int] = mapped_column(BigInteger, nullable=False)
    lexemes: Mapped[int] = mapped_column(BigInteger, nullable=False)
