"""navi_users: the owners every memory row hangs from (ON DELETE CASCADE)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from navi_memory.models.base import Base, created_at_column


class User(Base):
    __tablename__ = "navi_users"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()
