"""memory.users: the owners of memory. Deleting one removes everything they own."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.request_context import as_user_id, read_scope, write_scope
from navi_memory.schemas import UserInfo
from navi_memory.services.users import UserService
from navi_memory.unit_of_work import unit_of_work
from navi_memory.validation import check_optional_text

__all__ = ["Users"]


class Users:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker
        self._users = UserService()

    async def ensure(self, user_id: uuid.UUID | str, name: str | None = None) -> bool:
        """Create the user if missing (True when created); an existing user is left as it is.

        Like every write, refused for another user than the current one (when one is set).
        ``user_id`` has no default: None is an InvalidTypeError, never the current user."""
        uid = write_scope(as_user_id(user_id))  # None is no user here
        check_optional_text("name", name)
        async with unit_of_work(self._sessionmaker) as session:
            return await self._users.ensure(session, uid, name)

    async def get(self, user_id: uuid.UUID | str) -> UserInfo | None:
        """The user's row; another user's needs read_all when a current user is set."""
        uid = as_user_id(user_id)
        read_scope(uid)  # refuses another user's id without read_all
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._users.get(session, uid)

    async def delete(self, user_id: uuid.UUID | str) -> bool:
        """Delete the user and, through the cascades, their facts, summary, chunks, sessions and
        sketches. True when the user existed. Code acting for one user cannot delete another.
        ``user_id`` has no default: None is an InvalidTypeError, so a variable that is None by
        mistake never deletes the user the request acts for."""
        uid = write_scope(as_user_id(user_id))  # None is no user here
        async with unit_of_work(self._sessionmaker) as session:
            return await self._users.delete(session, uid)
