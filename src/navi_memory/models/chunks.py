"""memory_chunks and its index tables (vectors, text): verbatim dropped history, searchable."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import HALFVEC, Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, TSVECTOR, UUID
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.models.base import Base, created_at_column

TEXT_GIN_OPTIONS = {"gin_pending_list_limit": 128}
"""The GIN index of memory_chunk_terms keeps its pending list (entries not yet merged into the
tree, which every search scans) at 128 kB instead of 4 MB: as fast to fill, and searches never
scan more than 16 pages of it (docs/raw-history.md, "Text index")."""


CHUNK_GRAPH_OPTIONS = {"m": 16, "ef_construction": 128}
"""The chunk graph's build options (revision 0012): at ef_construction 64 some rows of the big
users were out of the search's reach (recall@10 0.947-0.98 by user size at 1M chunks)."""


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

    __table_args__ = (
        # Where a chunk starts is part of its identity (revision 0016): the same text demoted
        # again later in the session is a chunk of its own, so its messages are in one.
        UniqueConstraint("user_id", "session_id", "start_seq", "content_hash"),
        Index(
            "ix_memory_chunks_user_id_session_id_ended_at",
            "user_id",
            "session_id",
            text("ended_at DESC"),
        ),
        Index("ix_memory_chunks_breadcrumbs", "breadcrumbs", postgresql_using="gin"),
        # Whose chunks a session id holds, whoever wrote them (revision 0028).
        Index("ix_memory_chunks_session_id_user_id", "session_id", "user_id"),
        # The chunks without a vector, for backfill and doctor (revision 0033).
        Index(
            "ix_memory_chunks_id_without_embedding",
            "id",
            postgresql_where=text("embedding IS NULL"),
        ),
    )


class ChunkVectorRow(Base):
    """The indexed copy of a chunk's vector (docs/raw-history.md, "Vector index").

    ``memory_chunks.embedding`` stays the vector of record; this table holds it L2-normalised
    as ``halfvec`` (cosine distance does not change, every value fits 16 bits, index and copy
    are half the size). Rows arrive from memory_chunk_vector_queue off the write path, so
    add_chunks never waits for an HNSW insertion; search reads both tables.

    ``in_graph``: the row is in the HNSW graph (its user holds CHUNK_GRAPH_FROM indexed chunks
    or more); a smaller user's rows are searched exactly, through their own partial btree.
    """

    __tablename__ = "memory_chunk_vectors"

    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_chunks.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    session_id: Mapped[str] = mapped_column(Text, nullable=False)
    embedding: Mapped[list[float]] = mapped_column(HALFVEC(EMBEDDING_DIM), nullable=False)
    in_graph: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=false())

    __table_args__ = (
        Index(
            "ix_memory_chunk_vectors_exact_user_id_session_id",
            "user_id",
            "session_id",
            postgresql_where=text("NOT in_graph"),
        ),
        Index(
            "ix_memory_chunk_vectors_graph_user_id_session_id",
            "user_id",
            "session_id",
            postgresql_where=text("in_graph"),
        ),
        Index(
            "ix_memory_chunk_vectors_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_with=CHUNK_GRAPH_OPTIONS,
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
            postgresql_where=text("in_graph"),
        ),
    )


class ChunkVectorQueueRow(Base):
    """A chunk whose vector is stored but not yet in memory_chunk_vectors (searched exactly)."""

    __tablename__ = "memory_chunk_vector_queue"

    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_chunks.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    embedding: Mapped[list[float] | None] = mapped_column(HALFVEC(EMBEDDING_DIM))
    """The chunk's vector L2-normalised as halfvec (what memory_chunk_vectors holds), copied
    ahead when the indexer finds a backlog (revision 0013), so a search reads it here instead
    of from memory_chunks' TOAST; NULL until then."""

    __table_args__ = (Index("ix_memory_chunk_vector_queue_user_id", "user_id"),)


class ChunkTextQueueRow(Base):
    """A chunk whose text is not yet in memory_chunk_terms (search ranks it exactly).

    No foreign key: checking it was most of what a queue row costs add_chunks. Session and
    user deletes remove their chunks' rows first; a row left by a chunk deleted by SQL of its
    own joins no chunk, so search ignores it and the indexer drops it."""

    __tablename__ = "memory_chunk_text_queue"

    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    tsv: Mapped[str | None] = mapped_column(TSVECTOR)
    """``navi_chunk_tsv(content, breadcrumbs)``, made ahead of the GIN step when the indexer
    finds a backlog (revision 0013), so a search reads it instead of making it; NULL until
    then."""

    __table_args__ = (
        Index("ix_memory_chunk_text_queue_user_id", "user_id"),
        Index(
            "ix_memory_chunk_text_queue_unmade",
            "chunk_id",
            postgresql_where=text("tsv IS NULL"),
        ),
    )


class ChunkTermsRow(Base):
    """The GIN-indexed text of a chunk (docs/raw-history.md, "Text index").

    ``tsv`` is ``navi_chunk_tsv(content, breadcrumbs)`` (revision 0006): the 'simple' lexemes of
    content and breadcrumbs, identifiers with an underscore also kept whole; ``lexemes`` its
    length (BM25's document length). Owner, session and end time are copied so ranking reads
    no memory_chunks row for a candidate. Rows arrive from memory_chunk_text_queue off the
    write path and go with their chunk (``ON DELETE CASCADE``).
    """

    __tablename__ = "memory_chunk_terms"

    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_chunks.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    session_id: Mapped[str] = mapped_column(Text, nullable=False)
    ended_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    lexemes: Mapped[int] = mapped_column(Integer, nullable=False)
    tsv: Mapped[str] = mapped_column(TSVECTOR, nullable=False)

    __table_args__ = (
        Index("ix_memory_chunk_terms_user_id_session_id", "user_id", "session_id"),
        # GIN over both (btree_gin, revision 0014): a user's chunks holding a word, found
        # inside the index; also serves every user's (tsv alone).
        Index(
            "ix_memory_chunk_terms_user_id_tsv",
            "user_id",
            "tsv",
            postgresql_using="gin",
            postgresql_with=TEXT_GIN_OPTIONS,
        ),
    )


class ChunkTextStatsRow(Base):
    """Per user: how many chunks memory_chunk_terms holds and how many lexemes they hold
    (summed), the N and average length of search_chunks' BM25 (the user's queued chunks are
    added by the query). Kept in step with every insert and delete of memory_chunk_terms by
    statement-level triggers (revision 0006), whoever writes."""

    __tablename__ = "memory_chunk_text_stats"

    user_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE"), primary_key=True
    )
    chunks: Mapped[int] = mapped_column(BigInteger, nullable=False)
    lexemes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    df_kept: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=false())
    """memory_chunk_lexeme_df holds this user's frequencies (revision 0010): true, for good,
    from the statement that takes the user to ``navi_chunk_df_from()`` (1,000) chunks."""


class ChunkLexemeDfRow(Base):
    """Per user and lexeme: how many of the user's chunks in memory_chunk_terms hold it (BM25's
    document frequency), so a search knows each query word's idf, and so the most it can add
    to a score, before it reads a chunk (``ranked_text_sql(prune=True)``). Only for users whose
    ``ChunkTextStatsRow.df_kept`` is true (revision 0010: the users big enough to prune), kept
    in step with every insert and delete of memory_chunk_terms by the statistics triggers; a
    lexeme no chunk holds any more has no row. ``fillfactor = 70`` keeps the indexer's
    increments HOT (set by the migration; the model does not compare storage options)."""

    __tablename__ = "memory_chunk_lexeme_df"

    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    df: Mapped[int] = mapped_column(Integer, nullable=False)
