"""Sessions and their messages: ownership, gap-free sequence numbers, the rows a delete takes.

Another user's session behaves exactly like one that does not exist.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.errors import InvalidInputError, NotFoundError, StorageError
from navi_memory.models import MessageRow
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.schemas import Message, MessageRole, SessionInfo

__all__ = ["SessionService", "to_message"]


def to_message(row: MessageRow) -> Message:
    """The row as a Message. A row no message can be (written by SQL of the application's
    own: tool arguments that are not a JSON object, an unknown role or kind) is a StorageError
    naming it, not pydantic's ValidationError from every read of its session."""
    try:
        return Message.model_validate(row)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()[:3]
        )
        raise StorageError(
            f"message {row.seq} of session {row.session_id!r} in session_messages is not a "
            f"message navi-memory can read ({problems}): it was not written by navi-memory; "
            "fix or delete that row"
        ) from None


class SessionService:
    """The session rules, on the session (transaction) each call is given."""

    async def create(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        session_id: str,
        title: str | None,
        *,
        generated: bool = False,
    ) -> SessionInfo:
        """``generated``: ``session_id`` is a fresh UUID the package made, which no other
        user's rows can be under: the probe of their chunks and sketches is skipped."""
        repo = SessionRepository(session=session)
        if not await repo.user_exists(user_id):
            raise NotFoundError(f"no user {user_id}: create it with memory.users.ensure() first")
        # Session ids are unique across users: an id another user holds extraction state,
        # raw chunks or sketches under (a session their application keeps outside
        # ``sessions``) is taken too, or this session would be read and swept by their mark,
        # and their own later writes under the id (add_chunks, kv.set) refused and their
        # sketches hidden. The id lock orders this check and a concurrent mark (which takes
        # it as well).
        await repo.lock_session_id(session_id)
        state = await repo.state_owner(session_id)
        taken = state is not None and state[0] is not None and state[0] != user_id
        if not taken and not generated:
            taken = await repo.rows_of_others(session_id, user_id)
        row = None if taken else await repo.insert_session(session_id, user_id, title)
        if row is None:
            raise InvalidInputError(
                f"session id {session_id!r} is already taken; choose another, or pass None to "
                "have one generated"
            )
        return SessionInfo.model_validate(row)

    async def get(
        self, session: AsyncSession, scope: uuid.UUID | None, session_id: str
    ) -> SessionInfo | None:
        row = await SessionRepository(session=session).get(session_id, scope)
        return None if row is None else SessionInfo.model_validate(row)

    async def list_sessions(
        self, session: AsyncSession, scope: uuid.UUID | None
    ) -> list[SessionInfo]:
        rows = await SessionRepository(session=session).list_sessions(scope)
        return [SessionInfo.model_validate(row) for row in rows]

    async def delete(self, session: AsyncSession, user_id: uuid.UUID, session_id: str) -> bool:
        """Delete the session with everything keyed by it; False when it is not the user's."""
        repo = SessionRepository(session=session)
        if await repo.lock_owned(session_id, user_id) is None:
            return False
        await repo.delete_session(session_id, user_id)
        return True

    async def append(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        session_id: str,
        *,
        role: MessageRole,
        content: str,
        tool_name: str | None,
        tool_args: dict[str, Any] | None,
    ) -> Message:
        """The message at the next seq, in the context. The session row lock queues
        concurrent appends, so seqs have no gaps."""
        repo = SessionRepository(session=session)
        if await repo.lock_owned(session_id, user_id) is None:
            raise NotFoundError(f"no session {session_id!r} for this user")
        row = await repo.insert_message(
            {
                "session_id": session_id,
                "seq": await repo.next_seq(session_id),
                "role": role,
                "content": content,
                "tool_name": tool_name,
                "tool_args": tool_args,
                "kind": "message",
                "is_context": True,
            }
        )
        await repo.touch(session_id)
        return to_message(row)

    async def messages(
        self,
        session: AsyncSession,
        scope: uuid.UUID | None,
        session_id: str,
        *,
        context_only: bool,
    ) -> list[Message]:
        """The session's messages (the context, summary first, or all by seq); [] when it is
        not ``scope``'s."""
        repo = SessionRepository(session=session)
        if await repo.get(session_id, scope) is None:
            return []
        return [to_message(r) for r in await repo.messages(session_id, context_only=context_only)]

    # --- dropped history (for the history repair job) -------------------------------------

    async def sessions_with_dropped_history(
        self, session: AsyncSession, settle_seconds: float, owner: uuid.UUID | None = None
    ) -> list[tuple[uuid.UUID, str]]:
        """(owner, session) of the sessions to repair: ``owner``'s, or every user's for None."""
        return await SessionRepository(session=session).sessions_with_dropped_history(
            settle_seconds, owner
        )

    async def dropped_history(
        self, session: AsyncSession, user_id: uuid.UUID, session_id: str, settle_seconds: float
    ) -> list[Message]:
        rows = await SessionRepository(session=session).dropped_history(
            user_id, session_id, settle_seconds
        )
        return [to_message(row) for row in rows]
