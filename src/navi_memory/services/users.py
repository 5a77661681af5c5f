"""The owners of memory: a user row, and its delete that takes everything the user owns."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.repositories.users import UserRepository
from navi_memory.schemas import UserInfo

__all__ = ["UserService"]


class UserService:
    async def ensure(self, session: AsyncSession, user_id: uuid.UUID, name: str | None) -> bool:
        """Create the user if missing; True when created."""
        return await UserRepository(session=session).ensure(user_id, name)

    async def get(self, session: AsyncSession, user_id: uuid.UUID) -> UserInfo | None:
        row = await UserRepository(session=session).get(user_id)
        return None if row is None else UserInfo.model_validate(row)

    async def delete(self, session: AsyncSession, user_id: uuid.UUID) -> bool:
        """Delete the user; their memory goes by the cascades. True when the user existed."""
        return await UserRepository(session=session).delete(user_id)
