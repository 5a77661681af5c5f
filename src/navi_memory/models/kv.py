"""kv_store: a user's key/value entries per scope, user-wide or bound to a session (sketches)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Identity, Index, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.models.base import Base, created_at_column, updated_at_column


class KvRow(Base):
    __tablename__ = "kv_store"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("navi_users.id", ondelete="CASCADE"), nullable=False
    )
    scope: Mapped[str] = mapped_column(Text, nullable=False)
    session_id: Mapped[str | None] = mapped_column(Text)
    key: Mapped[str] = mapped_column(Text, nullable=False)
    value: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = updated_at_column()

    __table_args__ = (
        UniqueConstraint(
            "user_id", "scope", "session_id", "key", postgresql_nulls_not_distinct=True
        ),
        # Whose entries a session id holds, whoever wrote them (revision 0028).
        Index(
            "ix_kv_store_session_id_user_id",
            "session_id",
            "user_id",
            postgresql_where=text("session_id IS NOT NULL"),
        ),
    )
