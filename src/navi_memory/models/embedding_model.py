"""memory_embedding_model: the one row naming the embedding model that made the stored vectors."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, SmallInteger, Text, func, text
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.models.base import Base


class EmbeddingModelRow(Base):
    __tablename__ = "memory_embedding_model"
    # One row: vectors of two models are not comparable, so there is one model of record.
    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default=text("1"))
    model: Mapped[str] = mapped_column(Text, nullable=False)
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
