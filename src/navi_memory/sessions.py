"""memory.sessions: a user's conversations, their messages, and the compression that keeps the
context short while the dropped messages stay searchable as raw chunks.

Every call checks that the session belongs to the user; another user's session behaves exactly
like one that does not exist (NotFoundError for writes, None / [] / False otherwise).
"""

from __future__ import annotations

import builtins
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, Final, cast, get_args

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import PERMISSION_READ_ALL, SESSION_ID_MAX_CHARS
from navi_memory.errors import (
    InvalidInputError,
    InvalidTypeError,
    NotFoundError,
    PermissionDeniedError,
)
from navi_memory.llm.chat import ChatModel
from navi_memory.repositories.sessions import SessionRepository, to_message
from navi_memory.request_context import current_user_id, has_permission, read_scope, write_scope
from navi_memory.schemas import CompressionResult, Message, MessageRole, SessionInfo
from navi_memory.services.compression import (
    AddChunks,
    CompressionPlan,
    CompressionService,
    index_raw_chunks,
    nothing_demoted,
    plan_compression,
    raw_chunks,
    summarize,
)
from navi_memory.unit_of_work import unit_of_work
from navi_memory.validation import check_int, check_optional_text, check_text

__all__ = [
    "DROPPED_HISTORY_SETTLE",
    "MESSAGE_MAX_CHARS",
    "SESSION_ID_MAX_CHARS",
    "SessionStore",
    "check_session_id",
]

MESSAGE_MAX_CHARS: Final = 1_000_000
"""Longest message content (and serialised tool_args) accepted; a tool may return a whole file,
but more than this is a bug upstream, refused rather than truncated."""

TITLE_MAX_CHARS: Final = 1_000
TOOL_NAME_MAX_CHARS: Final = 200

ROLES: Final = frozenset(get_args(MessageRole))
_TOOL_NAME_ROLES: Final = frozenset({"tool_call", "tool"})

DROPPED_HISTORY_SETTLE: Final = timedelta(minutes=10)
"""index_dropped_history leaves alone sessions compressed more recently than this: a compression
indexes its messages seconds after its commit."""

logger = logging.getLogger(__name__)


def _consecutive(messages: Sequence[Message]) -> Iterator[list[Message]]:
    """``messages`` (by seq) split where a seq is missing: each run is one stretch of history."""
    run: list[Message] = []
    for message in messages:
        if run and message.seq != run[-1].seq + 1:
            yield run
            run = []
        run.append(message)
    if run:
        yield run


def check_session_id(session_id: Any) -> str:
    """A session id as given: non-blank text without NUL, at most 200 characters."""
    return check_text("session_id", session_id, max_chars=SESSION_ID_MAX_CHARS)


def _check_encodable(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{name} holds a lone surrogate at {exc.start}, which is not valid UTF-8"
        ) from exc


def _check_role(role: Any) -> MessageRole:
    if not isinstance(role, str):
        raise InvalidTypeError(f"role must be a str, got {type(role).__name__}")
    if role not in ROLES:
        raise InvalidInputError(f"role must be one of {', '.join(sorted(ROLES))}; got {role!r}")
    return cast(MessageRole, role)


def _check_tool_args(tool_args: Any) -> dict[str, Any] | None:
    """``tool_args`` as the JSON object PostgreSQL will store (so the reply equals the row)."""
    if tool_args is None:
        return None
    if not isinstance(tool_args, dict):
        raise InvalidTypeError(f"tool_args must be a dict, got {type(tool_args).__name__}")
    try:
        dumped = json.dumps(tool_args, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise InvalidTypeError(f"tool_args must be JSON-serialisable: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"tool_args cannot be stored as JSON: {exc}") from exc
    check_text("tool_args", dumped, max_chars=MESSAGE_MAX_CHARS)
    _check_encodable("tool_args", dumped)
    loaded: dict[str, Any] = json.loads(dumped)
    # jsonb refuses \u0000 anywhere, keys included.
    pending: builtins.list[Any] = [loaded]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, builtins.list):
            pending.extend(item)
        elif isinstance(item, str) and "\x00" in item:
            raise InvalidInputError("tool_args contains a NUL byte, which jsonb cannot hold")
    return loaded


class SessionStore:
    """Sessions and their messages; ``compress`` demotes old messages behind a summary.

    ``add_chunks(chunks, user_id, session_id) -> int`` stores raw chunks (``MemoryStore.
    add_chunks``); ``chat_model`` writes summaries (None: always the truncation fallback).
    """

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        chat_model: ChatModel | None,
        add_chunks: AddChunks,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._settings = settings
        self._chat_model = chat_model
        self._add_chunks = add_chunks

    # --- sessions ---------------------------------------------------------------------------

    async def create(
        self,
        session_id: str | None = None,
        *,
        user_id: uuid.UUID | str | None = None,
        title: str | None = None,
    ) -> SessionInfo:
        """A new session of the user; ``session_id`` None generates one.

        Session ids are unique across users: a taken id is an InvalidInputError that does not
        say whose it is. The user must exist (``memory.users.ensure``), else NotFoundError.
        """
        uid = write_scope(user_id)
        sid = str(uuid.uuid4()) if session_id is None else check_session_id(session_id)
        title = check_optional_text("title", title, max_chars=TITLE_MAX_CHARS)
        async with unit_of_work(self._sessionmaker) as session:
            repo = SessionRepository(session=session)
            if not await repo.user_exists(uid):
                raise NotFoundError(f"no user {uid}: create it with memory.users.ensure() first")
            row = await repo.insert_session(sid, uid, title)
            if row is None:
                raise InvalidInputError(
                    f"session id {sid!r} is already taken; choose another, or pass None to have "
                    "one generated"
                )
            return SessionInfo.model_validate(row)

    async def get(
        self, session_id: str, user_id: uuid.UUID | str | None = None
    ) -> SessionInfo | None:
        """The session, or None when it does not exist or is not the user's."""
        scope = read_scope(user_id)
        sid = check_session_id(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            row = await SessionRepository(session=session).get(sid, scope)
            return None if row is None else SessionInfo.model_validate(row)

    async def list(self, user_id: uuid.UUID | str | None = None) -> builtins.list[SessionInfo]:
        """The user's sessions, most recently active first (every user's for a global read)."""
        scope = read_scope(user_id)
        async with unit_of_work(self._sessionmaker) as session:
            rows = await SessionRepository(session=session).list_sessions(scope)
            return [SessionInfo.model_validate(row) for row in rows]

    async def delete(self, session_id: str, *, user_id: uuid.UUID | str | None = None) -> bool:
        """Delete the session with its messages, raw chunks, extraction state and sketches, in
        one transaction. False when there is no such session of the user's."""
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            repo = SessionRepository(session=session)
            if await repo.lock_owned(sid, uid) is None:
                return False
            await repo.delete_session(sid, uid)
            return True

    # --- messages ---------------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        role: str,
        content: str = "",
        *,
        tool_name: str | None = None,
        tool_args: dict[str, Any] | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> Message:
        """Add a message at the end of the session (next seq) and into its context.

        Roles: user, assistant, system; ``tool_call`` (the assistant asking for a tool:
        ``tool_name`` and a JSON-object ``tool_args``) and ``tool`` (its result: ``tool_name``
        and ``content``). Concurrent appends to one session queue on the session row.
        """
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        checked_role = _check_role(role)
        content = check_text("content", content, max_chars=MESSAGE_MAX_CHARS, allow_empty=True)
        _check_encodable("content", content)
        tool_name = check_optional_text(
            "tool_name", tool_name, max_chars=TOOL_NAME_MAX_CHARS, allow_empty=False
        )
        if checked_role in _TOOL_NAME_ROLES and tool_name is None:
            raise InvalidInputError(f"a {checked_role} message needs a tool_name")
        if checked_role not in _TOOL_NAME_ROLES and tool_name is not None:
            raise InvalidInputError(f"a {checked_role} message takes no tool_name")
        args = _check_tool_args(tool_args)
        if args is not None and checked_role != "tool_call":
            raise InvalidInputError(f"a {checked_role} message takes no tool_args")
        async with unit_of_work(self._sessionmaker) as session:
            repo = SessionRepository(session=session)
            if await repo.lock_owned(sid, uid) is None:
                raise NotFoundError(f"no session {sid!r} for this user")
            row = await repo.insert_message(
                {
                    "session_id": sid,
                    "seq": await repo.next_seq(sid),
                    "role": checked_role,
                    "content": content,
                    "tool_name": tool_name,
                    "tool_args": args,
                    "kind": "message",
                    "is_context": True,
                }
            )
            await repo.touch(sid)
            return to_message(row)

    async def context(
        self, session_id: str, *, user_id: uuid.UUID | str | None = None
    ) -> builtins.list[Message]:
        """What the model sees: the current summary (if any) first, then the messages still in
        context in seq order. [] when the session is not the user's."""
        return await self._messages(session_id, user_id, context_only=True)

    async def history(
        self, session_id: str, *, user_id: uuid.UUID | str | None = None
    ) -> builtins.list[Message]:
        """Every message in seq order, demoted ones and summaries included (a summary sits at
        the seq it was written at, after the messages it replaced)."""
        return await self._messages(session_id, user_id, context_only=False)

    async def _messages(
        self, session_id: str, user_id: uuid.UUID | str | None, *, context_only: bool
    ) -> builtins.list[Message]:
        scope = read_scope(user_id)
        sid = check_session_id(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            repo = SessionRepository(session=session)
            if await repo.get(sid, scope) is None:
                return []
            return [to_message(r) for r in await repo.messages(sid, context_only=context_only)]

    # --- compression ------------------------------------------------------------------------

    async def index_dropped_history(
        self, *, settled_for: timedelta = DROPPED_HISTORY_SETTLE
    ) -> int:
        """Index as raw chunks the demoted messages that no chunk holds; returns chunks written.

        A compression indexes its messages after its own commit; if that fails (the database
        went away, the process died) they have left the context but are in no chunk, and no
        search finds them. This finds them in every user's sessions (an operator's job:
        ``make backfill`` runs it) and indexes each run of consecutive ones as a compression
        would, with the breadcrumbs found in them (old summaries, markers and system messages
        ride along in a run and are skipped, as in a compression, so the packing is the
        compression's). Sessions whose last summary is younger than ``settled_for`` (database
        clock) are left to the compression that may still be indexing them; a session with
        demoted messages and no summary at all (only SQL of its own makes one) is not visited.
        A no-op when MEMORY_SEARCH_ENABLED is false. Inside a request context it needs
        ``navi.memory.read_all``. A session deleted meanwhile is skipped; other errors
        propagate (StorageError).
        """
        if current_user_id() is not None and not has_permission(PERMISSION_READ_ALL):
            raise PermissionDeniedError(
                "index_dropped_history works on every user's sessions: run it outside a "
                f"request context (an operator's job), or with {PERMISSION_READ_ALL}"
            )
        if not self._settings.memory_search_enabled:
            return 0
        settle = settled_for.total_seconds()
        async with unit_of_work(self._sessionmaker) as session:
            owned = await SessionRepository(session=session).sessions_with_dropped_history(settle)
        written = 0
        for user_id, session_id in owned:
            async with unit_of_work(self._sessionmaker) as session:
                rows = await SessionRepository(session=session).dropped_history(
                    user_id, session_id, settle
                )
            try:
                for run in _consecutive([to_message(row) for row in rows]):
                    chunks, _ = raw_chunks(
                        CompressionPlan(demoted=tuple(run)),
                        [],
                        max_chars=self._settings.chunk_max_chars,
                        message_max_chars=self._settings.chunk_message_max_chars,
                    )
                    if chunks:
                        written += await self._add_chunks(chunks, user_id, session_id)
            except NotFoundError:
                # Deleted meanwhile: its messages went with it.
                logger.info(
                    "sessions.dropped_history_skipped: session %s was deleted meanwhile",
                    session_id,
                    extra={"event": "sessions.dropped_history_skipped"},
                )
        if written:
            logger.info(
                "sessions.dropped_history_indexed: %d chunk(s)",
                written,
                extra={"event": "sessions.dropped_history_indexed", "rows": written},
            )
        return written

    async def compress(
        self,
        session_id: str,
        *,
        keep_last: int | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> CompressionResult:
        """Demote all but the last ``keep_last`` (MEMORY_COMPRESS_KEEP_LAST) context messages
        behind a new summary, and index the demoted messages as raw chunks.

        Three steps, so no lock is held while the model answers: read the context; summarise
        outside any transaction; then, under the session lock, check no other compression got
        there first (if one did, nothing is written and 0 comes back as demoted), flip exactly
        the planned rows and add the summary. Indexing runs after that commit; its failures are
        logged (``compressor.chunk_index_failed``), never raised.
        """
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        keep = self._settings.memory_compress_keep_last if keep_last is None else keep_last
        keep = check_int("keep_last", keep, minimum=0)

        async with unit_of_work(self._sessionmaker) as session:
            repo = SessionRepository(session=session)
            if await repo.get(sid, uid) is None:
                raise NotFoundError(f"no session {sid!r} for this user")
            context = [to_message(r) for r in await repo.messages(sid, context_only=True)]
        plan = plan_compression(context, keep)
        if plan is None:
            return nothing_demoted()

        summary = await summarize(
            self._chat_model, plan, message_max_chars=self._settings.chunk_message_max_chars
        )

        async with unit_of_work(self._sessionmaker) as session:
            written = await CompressionService(session=session).apply(uid, sid, plan, summary.text)
        if written is None:
            return nothing_demoted()

        chunks, breadcrumbs = raw_chunks(
            plan,
            summary.keys,
            max_chars=self._settings.chunk_max_chars,
            message_max_chars=self._settings.chunk_message_max_chars,
        )
        chunks_written = 0
        if self._settings.memory_search_enabled:
            chunks_written = await index_raw_chunks(self._add_chunks, chunks, uid, sid)
        return CompressionResult(
            demoted=len(plan.demoted),
            summary=written,
            chunks_written=chunks_written,
            breadcrumbs=breadcrumbs,
            used_fallback=summary.used_fallback,
        )
