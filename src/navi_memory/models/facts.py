"""memory_facts, memory_summary and session_memory_state: the curated side of memory."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import HALFVEC, Vector
from sqlalchemy import BigInteger, CheckConstraint, DateTime, ForeignKey, Index, Integer, Text, text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.models.base import Base, created_at_column, updated_at_column


class FactRow(Base):
    """A fact. ``embedding`` is the vector of record; its normalised copy, which search reads,
    lives in memory_fact_vectors (revision 0007; the table has fillfactor 90, so a
    re-verification is a HOT update)."""

    __tablename__ = "memory_facts"

    # Legacy databases have a serial id; the adoption revision widens it to bigint and keeps its
    # sequence, so the model declares a plain autoincrementing bigint rather than an identity.
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE")
    )
    category: Mapped[str] = mapped_column(Text, nullable=False)
    key: Mapped[str] = mapped_column(Text, nullable=False)
    # The key's canonical spelling as "<rules>:<form>" (services/facts.py, key_norm): what a
    # dedupe compares. NULL or another <rules> where written by anything but upsert_fact;
    # upsert_fact fills those of a category before it compares.
    key_norm: Mapped[str | None] = mapped_column(Text(collation="C"))
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
    # When the user separated this row from the fact it had been merged into (unmerge_fact);
    # a dedupe never merges such a row again (revision 0017). NULL: never separated.
    unmerged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
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
        # Hidden spellings by key: a hidden spelling written again goes to its survivor.
        Index(
            "ix_memory_facts_user_id_category_key_hidden",
            "user_id",
            "category",
            "key",
            postgresql_where="merged_into IS NOT NULL",
        ),
        Index(
            "ix_memory_facts_user_id_category_key_norm",
            "user_id",
            "category",
            "key_norm",
            postgresql_where="merged_into IS NULL",
        ),
        Index("ix_memory_facts_expires_at", "expires_at"),
        Index("ix_memory_facts_source_category", "source", "category"),
        Index("ix_memory_facts_merged_into", "merged_into"),
    )


class FactVectorRow(Base):
    """The copy of a fact's vector that search reads (revision 0007), L2-normalised as
    ``halfvec``; read exactly, per user through its btree, everyone's by a scan (revision 0020
    dropped its HNSW graph).

    Filled by the fact indexer from memory_fact_vector_queue, off upsert_fact's path. A fact is
    in the queue whenever this copy may be missing or stale (a trigger on memory_facts queues
    it); search reads the queued facts exactly and skips their entries here."""

    __tablename__ = "memory_fact_vectors"

    fact_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_facts.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    embedding: Mapped[list[float]] = mapped_column(HALFVEC(EMBEDDING_DIM), nullable=False)

    __table_args__ = (Index("ix_memory_fact_vectors_user_id", "user_id"),)


class FactVectorQueueRow(Base):
    """A fact whose vector was set or changed and is not yet (again) in memory_fact_vectors."""

    __tablename__ = "memory_fact_vector_queue"

    fact_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("memory_facts.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))

    __table_args__ = (Index("ix_memory_fact_vector_queue_user_id", "user_id"),)


class SummaryRow(Base):
    __tablename__ = "memory_summary"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE")
    )
    content: Mapped[str] = mapped_column(Text, nullable=False)
    updated_at: Mapped[datetime] = updated_at_column()
    # The digest of the facts the extractor wrote this summary from (revision 0015); NULL when
    # it was written otherwise (set_summary, an import, before 0015).
    facts_digest: Mapped[str | None] = mapped_column(Text)

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
    # The extractor's last failed attempt since the last success (revision 0025): a sweep takes
    # such sessions after the others, so one the model always fails on cannot starve them.
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Failures of the session's own (not a model outage) since the last success (revision
    # 0030): sweeps leave it for longer after each (EXTRACTION_RETRY_*), or until new activity.
    failures: Mapped[int] = mapped_column(
        Integer,
        CheckConstraint("failures >= 0", name="failures"),
        nullable=False,
        server_default=text("0"),
    )
    # Who the session belongs to (NULL on legacy rows): extraction state is readable by its owner
    # only, also for sessions the application keeps outside the sessions table, and it goes with
    # the user.
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE")
    )


class FactForgottenRow(Base):
    """A forget of a user's fact: its category (NFC, lower-cased) and canonical key, and when
    (revision 0026). An extraction of a session last active before it leaves the fact out."""

    __tablename__ = "memory_fact_forgotten"

    user_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE"), primary_key=True
    )
    category: Mapped[str] = mapped_column(Text, primary_key=True)
    key_norm: Mapped[str] = mapped_column(Text, primary_key=True)
    forgotten_at: Mapped[datetime] = created_at_column()
