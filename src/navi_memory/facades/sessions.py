"""memory.sessions: a user's conversations, their messages, and the compression that keeps the
context short while the dropped messages stay searchable as raw chunks.

Every call checks that the session belongs to the user; another user's session behaves exactly
like one that does not exist (NotFoundError for writes, None / [] / False otherwise).
"""

from __future__ import annotations

import builtins
import logging
import uuid
from datetime import timedelta
from typing import Any, Final, cast, get_args

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import (
    DROPPED_HISTORY_MAX_SETTLE,
    DROPPED_HISTORY_SETTLE,
    INT32_MAX,
    MESSAGE_MAX_CHARS,
    SESSION_TITLE_MAX_CHARS,
    TOOL_NAME_MAX_CHARS,
)
from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.history_repair import HistoryRepair
from navi_memory.jobs.stale_sessions import StaleSessionTrigger
from navi_memory.llm.chat import ChatModel
from navi_memory.request_context import read_scope, write_scope
from navi_memory.schemas import CompressionResult, Message, MessageRole, SessionInfo
from navi_memory.services.chunks import ChunkService
from navi_memory.services.compression import (
    CompressionService,
    nothing_demoted,
    plan_compression,
)
from navi_memory.services.sessions import SessionService
from navi_memory.unit_of_work import unit_of_work
from navi_memory.validation import (
    check_int,
    check_json_object,
    check_optional_text,
    check_session_id,
    check_text,
)

__all__ = ["SessionStore"]

ROLES: Final = frozenset(get_args(MessageRole))
_TOOL_NAME_ROLES: Final = frozenset({"tool_call", "tool"})

logger = logging.getLogger(__name__)


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
    return check_json_object("tool_args", tool_args, max_chars=MESSAGE_MAX_CHARS)


class SessionStore:
    """Sessions and their messages; ``compress`` demotes old messages behind a summary.

    ``chat_model`` writes summaries (None: always the truncation fallback). ``chunks`` stores
    the demoted messages as raw chunks (the service ``MemoryStore.add_chunks`` uses too), and
    ``indexer`` — the Memory's one ChunkIndexer — moves their vectors into the HNSW index
    (None: they stay queued, searched exactly, until ``index_pending_chunks`` or backfill).
    ``extraction`` is told of every new session, to extract the user's stale ones in the
    background (None: extraction runs only on demand or as a job).
    """

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        chat_model: ChatModel | None,
        chunks: ChunkService,
        indexer: ChunkIndexer | None = None,
        history_repair: HistoryRepair | None = None,
        extraction: StaleSessionTrigger | None = None,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._extraction = extraction
        self._settings = settings
        self._sessions = SessionService()
        self._compression = CompressionService(
            settings=settings, chat_model=chat_model, chunks=chunks
        )
        self._indexer = indexer
        self._history_repair = history_repair or HistoryRepair(
            sessionmaker,
            settings=settings,
            sessions=self._sessions,
            compression=self._compression,
            indexer=indexer,
        )

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
        say whose it is. An id under which another user holds extraction state, raw chunks or
        kv entries (a session their application keeps outside ``sessions``) is taken too.
        The user must exist (``memory.users.ensure``), else NotFoundError.

        The user's stale sessions are then extracted in the background (the spec's "POST
        /sessions fires _process_stale_sessions()"): this call neither waits for that nor
        fails with it.
        """
        uid = write_scope(user_id)
        sid = str(uuid.uuid4()) if session_id is None else check_session_id(session_id)
        title = check_optional_text("title", title, max_chars=SESSION_TITLE_MAX_CHARS)
        async with unit_of_work(self._sessionmaker) as session:
            created = await self._sessions.create(
                session, uid, sid, title, generated=session_id is None
            )
        if self._extraction is not None:
            try:
                self._extraction.schedule(uid)
            except Exception:
                # The session exists; extraction is a side effect the next create retries.
                logger.exception(
                    "extractor.schedule_failed: user %s",
                    uid,
                    extra={"event": "extractor.schedule_failed"},
                )
        return created

    async def get(
        self, session_id: str, user_id: uuid.UUID | str | None = None
    ) -> SessionInfo | None:
        """The session, or None when it does not exist or is not the user's."""
        scope = read_scope(user_id)
        sid = check_session_id(session_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._sessions.get(session, scope, sid)

    async def list(self, user_id: uuid.UUID | str | None = None) -> builtins.list[SessionInfo]:
        """The user's sessions, most recently active first (every user's for a global read)."""
        scope = read_scope(user_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._sessions.list_sessions(session, scope)

    async def delete(self, session_id: str, *, user_id: uuid.UUID | str | None = None) -> bool:
        """Delete the session with its messages, raw chunks, extraction state and sketches, in
        one transaction. False when there is no such session of the user's."""
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        async with unit_of_work(self._sessionmaker) as session:
            return await self._sessions.delete(session, uid, sid)

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
            return await self._sessions.append(
                session,
                uid,
                sid,
                role=checked_role,
                content=content,
                tool_name=tool_name,
                tool_args=args,
            )

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
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._sessions.messages(session, scope, sid, context_only=context_only)

    # --- compression ------------------------------------------------------------------------

    async def index_dropped_history(
        self, *, settled_for: timedelta = DROPPED_HISTORY_SETTLE
    ) -> int:
        """Index as raw chunks the demoted messages that no chunk holds; returns chunks written.

        A compression writes its chunks with its demotion, so such messages come from elsewhere:
        compressions made while MEMORY_SEARCH_ENABLED was false, by an older version (which
        indexed after its commit), or demotions made by SQL of the application's own, with or
        without a summary. This runs the history repair job (jobs/history_repair.py) over every
        user's sessions: an operator's job, ``make backfill`` runs it. ``settled_for`` leaves
        alone sessions whose last summary is younger (none by default). A no-op when
        MEMORY_SEARCH_ENABLED is false. Acting for a user it needs ``navi.memory.read_all``
        and repairs that user's sessions only (read_all never writes into another user).
        """
        if not isinstance(settled_for, timedelta):
            raise InvalidTypeError(
                f"settled_for must be a datetime.timedelta, got {type(settled_for).__name__}"
            )
        if not timedelta(0) <= settled_for <= DROPPED_HISTORY_MAX_SETTLE:
            raise InvalidInputError(
                f"settled_for must be between 0 and {DROPPED_HISTORY_MAX_SETTLE.days} days, "
                f"got {settled_for}"
            )
        return await self._history_repair.run(settled_for=settled_for)

    async def compress(
        self,
        session_id: str,
        *,
        keep_last: int | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> CompressionResult:
        """Demote all but the last ``keep_last`` (MEMORY_COMPRESS_KEEP_LAST) context messages
        behind a new summary, and index the demoted messages as raw chunks.

        No lock is held while a model answers: read the context; summarise and embed the
        chunks outside any transaction; then, in one transaction under the session lock, check
        no other compression got there first (if one did, nothing is written and 0 comes back
        as demoted), flip exactly the planned rows, add the summary and write the chunks. So a
        demoted message is never in no chunk: if the chunks cannot be written (StorageError),
        nothing of the compression is. A failing embedder only leaves the chunks without
        vectors (``memory.embedding_failed``; backfill embeds them).
        """
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        keep = self._settings.memory_compress_keep_last if keep_last is None else keep_last
        keep = check_int("keep_last", keep, minimum=0, maximum=INT32_MAX)

        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            context = await self._compression.context(session, uid, sid)
        plan = plan_compression(context, keep)
        if plan is None:
            return nothing_demoted()

        summary = await self._compression.summarize(plan)
        chunks, breadcrumbs = await self._compression.raw_chunks(plan, summary.keys)
        if not self._settings.memory_search_enabled:
            chunks = []
        vectors = await self._compression.embed_chunks(chunks) if chunks else None

        async with unit_of_work(self._sessionmaker) as session:
            written = await self._compression.apply(session, uid, sid, plan, summary.text)
            if written is None:
                return nothing_demoted()
            chunks_written = 0
            if chunks:
                chunks_written = await self._compression.write_chunks(
                    session, uid, sid, chunks, vectors
                )
        if chunks_written and self._indexer is not None:
            self._indexer.kick()
        return CompressionResult(
            demoted=len(plan.demoted),
            summary=written,
            chunks_written=chunks_written,
            breadcrumbs=breadcrumbs,
            used_fallback=summary.used_fallback,
        )
