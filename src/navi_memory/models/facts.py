"""memory_facts, memory_summary and session_memory_state: the curated side of memory."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import BigInteger, DateTime, ForeignKey, Index, Integer, Text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.models.base import Base, created_at_column, updated_at_column

HNSW_OPTIONS = {"m": 16, "ef_construction": 64}


class FactRow(Base):
    __tablename__ = "memory_facts"

    # Legacy databases have a serial id; the adoption revision widens it to bigint and keeps its
    # sequence, so the model declares a plain autoincrementing bigint rather than an identity.
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE")
    )
    category: Mapped[str] = mapped_column(Text, nullable=False)
    key: Mapped[str] = mapped_column(Text, nullable=False)
    value: Mapped[str] = mapped_column(Text, nullable=False)
    embedding: Mapped[list[float] | None] = mapped_column(Vector(EMBEDDING_DIM))
    source: Mapped[str | None] = mapped_column(Text)
    confidence: Mapped[int | None] = mapped_column(Integer)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    source_context: Mapped[str | None] = mapped_column(Text)
    # A hidden row points at the visible row that superseded it; deleting the survivor takes its
    # hidden spellings with it, so a hidden row never outlives the fact it stands behind.
    merged_into: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("memory_facts.id", ondelete="CASCADE")
    )
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = updated_at_column()
    # The session the fact was last written from (provenance in unified search); no foreign
    # key, like memory_chunks.session_id; NULL when unknown (legacy rows, writes outside one).
    session_id: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        # Unique among *visible* rows only: legacy databases may hold exact duplicates, which the
        # adoption merges (hidden behind the newest) rather than drops.
        Index(
            "uq_memory_facts_user_id_category_key",
            "user_id",
            "category",
            "key",
            unique=True,
            postgresql_nulls_not_distinct=True,
            postgresql_where="merged_into IS NULL",
        ),
        Index(
            "ix_memory_facts_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_with=HNSW_OPTIONS,
            postgresql_ops={"embedding": "vector_cosine_ops"},
        ),
        Index("ix_memory_facts_expires_at", "expires_at"),
        Index("ix_memory_facts_source_category", "source", "category"),
        Index("ix_memory_facts_merged_into", "merged_into"),
    )


class SummaryRow(Base):
    __tablename__ = "memory_summary"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE")
    )
    content: Mapped[str] = mapped_column(Text, nullable=False)
    updated_at: Mapped[datetime] = updated_at_column()

    __table_args__ = (
        Index(
            "uq_memory_summary_user_id",
            "user_id",
            unique=True,
            postgresql_nulls_not_distinct=True,
        ),
    )


class SessionMemoryStateRow(Base):
    __tablename__ = "session_memory_state"

    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    extracted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Who the session belongs to (NULL on legacy rows): extraction state is readable by its owner
    # only, also for sessions the application keeps outside the sessions table, and it goes with
    # the user.
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE")
    )
