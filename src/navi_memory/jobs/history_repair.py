"""The history repair: demoted messages that no raw chunk holds, indexed as chunks.

A compression writes its chunks in the transaction that demotes the messages, so no compression
of this version leaves any. Such messages come from compressions made while
MEMORY_SEARCH_ENABLED was false, from older versions (which indexed after the commit), or from
an application's own SQL. This batch job finds them in every user's sessions and indexes them,
one session at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import DROPPED_HISTORY_SETTLE, PERMISSION_READ_ALL
from navi_memory.errors import NotFoundError, PermissionDeniedError
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.request_context import current_user_id, has_permission
from navi_memory.schemas import Message
from navi_memory.services.compression import CompressionPlan, CompressionService
from navi_memory.services.sessions import SessionService
from navi_memory.unit_of_work import statement_or_transaction, unit_of_work

__all__ = ["HistoryRepair"]

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


class HistoryRepair:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        settings: Settings,
        sessions: SessionService,
        compression: CompressionService,
        indexer: ChunkIndexer | None,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._settings = settings
        self._sessions = sessions
        self._compression = compression
        self._indexer = indexer

    async def run(self, *, settled_for: timedelta = DROPPED_HISTORY_SETTLE) -> int:
        """Index as raw chunks the demoted messages that no chunk holds; returns chunks written.

        Every user's sessions (an operator's job: ``make backfill`` runs it) — acting for a
        user, that user's only: read_all lets it run there, never write into others; each run of
        consecutive demoted messages is indexed as a compression would, with the breadcrumbs
        found in them (old summaries, markers and system messages ride along in a run and are
        skipped, as in a compression, so the packing is the compression's). Sessions whose last
        summary is younger than ``settled_for`` (database clock; none by default) are left
        alone; a session with demoted messages and no summary at all is visited like any other.
        A no-op when MEMORY_SEARCH_ENABLED is false. Acting for a user it needs
        ``navi.memory.read_all``. A session deleted meanwhile is skipped; other errors
        propagate (StorageError).
        """
        owner = current_user_id()
        if owner is not None and not has_permission(PERMISSION_READ_ALL):
            raise PermissionDeniedError(
                "index_dropped_history is an operator's job: run it outside a request context "
                f"(every user's sessions), or with {PERMISSION_READ_ALL} (the current user's "
                "sessions only)"
            )
        if not self._settings.memory_search_enabled:
            return 0
        settle = settled_for.total_seconds()
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            owned = await self._sessions.sessions_with_dropped_history(session, settle, owner)
        written = 0
        for user_id, session_id in owned:
            async with unit_of_work(self._sessionmaker, read_only=True) as session:
                messages = await self._sessions.dropped_history(
                    session, user_id, session_id, settle
                )
            try:
                for run in _consecutive(messages):
                    chunks, _ = await self._compression.raw_chunks(
                        CompressionPlan(demoted=tuple(run)), []
                    )
                    if not chunks:
                        continue
                    vectors = await self._compression.embed_chunks(chunks)
                    async with statement_or_transaction(
                        self._sessionmaker,
                        one_statement=self._compression.chunks.one_statement(len(chunks)),
                    ) as conn:
                        added = await self._compression.write_chunks(
                            conn, user_id, session_id, chunks, vectors
                        )
                    if added and self._indexer is not None:
                        self._indexer.kick()
                    written += added
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
