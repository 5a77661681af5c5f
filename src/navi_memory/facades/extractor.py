"""memory.extractor: facts about a user taken from their stale sessions, on demand.

The same work runs in the background when a user starts a session (MEMORY_EXTRACT_ON_CREATE)
and as a job (``navi-memory extract``); docs/memory.md describes the loop and its prompts.
"""

from __future__ import annotations

import uuid

from navi_memory.constants import MAX_LIMIT
from navi_memory.errors import InvalidTypeError, NotFoundError
from navi_memory.jobs.stale_sessions import (
    BackgroundExtraction,
    ExtractionProgressCallback,
    StaleSessionSweep,
)
from navi_memory.request_context import current_user_id, write_scope
from navi_memory.schemas import ExtractionReport
from navi_memory.validation import check_int, check_session_id

__all__ = ["Extractor"]


class Extractor:
    """Extraction on demand: a sweep of the stale sessions, or one session now.

    Facts are written for the session's owner only, each with ``dedupe=True``; the owner's
    summary is then rewritten from all their facts and the session marked extracted at the
    activity that was read. A model failure leaves the session unmarked (the next run retries
    it) and the summary as it was.
    """

    def __init__(
        self, *, sweep: StaleSessionSweep, background: BackgroundExtraction | None = None
    ) -> None:
        self._sweep = sweep
        self._background = background

    async def process_stale_sessions(
        self,
        user_id: uuid.UUID | str | None = None,
        *,
        limit: int | None = None,
        progress: ExtractionProgressCallback | None = None,
    ) -> ExtractionReport:
        """Extract the user's sessions idle for MEMORY_STALE_MINUTES whose last activity no
        extraction covers, longest idle first, at most ``limit``.

        ``user_id=None`` is the current user; with no current user it is every user's
        sessions (an operator's job: ``navi-memory extract``). Acting for a user, another
        user's id is refused (PermissionDeniedError). ``progress`` is called after each
        session. Failing sessions are counted in the report, not raised.
        """
        scope = current_user_id() if user_id is None else write_scope(user_id)
        if limit is not None:
            limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
        if progress is not None and not callable(progress):
            # Refused before any work: called after the first session, it would stop the
            # sweep half way with a TypeError of its own.
            raise InvalidTypeError(
                f"progress must be a function of ExtractionProgress, got {type(progress).__name__}"
            )
        return await self._sweep.run(scope, limit=limit, progress=progress)

    async def extract_session(
        self, session_id: str, *, user_id: uuid.UUID | str | None = None
    ) -> ExtractionReport:
        """Extract the user's session now, however recently it was active, unless its last
        activity is covered already (or another extractor is at it): then it is skipped.

        ``user_id=None`` is the current user; with no current user (an operator's call, as
        for ``process_stale_sessions``) it is the session's owner, whoever that is, and the
        facts and summary are written for that owner. Acting for a user, another user's id is
        refused (PermissionDeniedError). NotFoundError when the session is not the user's (or
        does not exist). A model failure is a report with ``failures=1``, the session left
        unmarked; the database failing is its StorageError (ConnectionLostError when it is
        down), as for every other call, the session left unmarked too.
        """
        # The sweep's rule: no user named and none current is every user (here: the owner).
        scope = current_user_id() if user_id is None else write_scope(user_id)
        sid = check_session_id(session_id)
        result = await self._sweep.extract(scope, sid, stale_only=False)
        if result.storage_error is not None:
            raise result.storage_error
        if result.outcome == "missing":
            raise NotFoundError(
                f"no session {sid!r}" if scope is None else f"no session {sid!r} for this user"
            )
        return result.report

    async def wait_background(self) -> None:
        """Wait until no background extraction (started by ``sessions.create``) is running."""
        if self._background is not None:
            await self._background.wait_idle()
