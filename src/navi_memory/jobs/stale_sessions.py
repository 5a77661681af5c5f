"""The stale-session sweep: every session idle for MEMORY_STALE_MINUTES whose last activity no
extraction covers is turned into facts, one session per claim and per set of transactions;
and the background task that runs the sweep for a user when they start a new session.

No transaction is open and no row is locked while a model answers: a session is claimed with
a session-level advisory lock on a connection of its own, outside any transaction (appends do
not take it, so they never wait), and each write re-checks the mark under the session's
extraction-state lock. Two extractors, in any processes, never extract one activity twice.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import EXTRACTION_BACKGROUND_CONCURRENCY
from navi_memory.errors import (
    ChatModelError,
    ConnectionLostError,
    ExtractionError,
    NaviMemoryError,
    NotFoundError,
    StorageError,
)
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.repositories.sessions import ExtractionClaim
from navi_memory.schemas import ExtractionReport
from navi_memory.services.extraction import (
    CLAIM_LOST,
    ExtractionService,
    NewSummary,
    NotWritten,
    SessionTranscript,
)
from navi_memory.services.extraction_parser import ParsedFacts
from navi_memory.unit_of_work import engine_of, single_statement, unit_of_work

__all__ = [
    "BackgroundExtraction",
    "ExtractionProgress",
    "ExtractionProgressCallback",
    "SessionExtraction",
    "SessionOutcome",
    "StaleSessionSweep",
    "StaleSessionTrigger",
]

logger = logging.getLogger(__name__)

SessionOutcome = Literal["extracted", "skipped", "failed", "missing"]
"""``missing``: no such session of the user's (extract_session answers NotFoundError)."""


@dataclass(frozen=True, slots=True)
class ExtractionProgress:
    """Where a sweep is: ``done`` of ``total`` sessions handled, the last one named."""

    done: int
    total: int
    session_id: str


ExtractionProgressCallback = Callable[[ExtractionProgress], Awaitable[None] | None]


MODEL_FAILURES_TO_STOP: Final = 3
"""Sessions in a row the chat model fails (down, stalled, erroring) before a sweep stops: the
next ones would wait out the same failure, MEMORY_LLM_TIMEOUT_SECONDS each when it stalls."""


@dataclass(frozen=True, slots=True)
class SessionExtraction:
    """How the extraction of one session ended, and its counts."""

    outcome: SessionOutcome
    report: ExtractionReport
    model_failure: str | None = None
    """A ``failed`` session's ChatModelError: the chat model, not the session, failed."""
    storage_error: StorageError | None = None
    """A ``failed`` session's StorageError: the database, not the session, failed (a sweep
    counts it and goes on; a call for one session raises it)."""


def _missing() -> SessionExtraction:
    return SessionExtraction("missing", ExtractionReport(sessions_seen=1, sessions_skipped=1))


def _skipped(session_id: str, why: str, done: ExtractionReport | None = None) -> SessionExtraction:
    """A skipped session; ``done``: the counts of what was written before it was skipped."""
    logger.info(
        "extractor.session_skipped: %s: %s",
        session_id,
        why,
        extra={"event": "extractor.session_skipped", "session_id": session_id},
    )
    report = ExtractionReport(sessions_seen=1) if done is None else done
    return SessionExtraction("skipped", report.model_copy(update={"sessions_skipped": 1}))


def _not_written(
    session_id: str, refused: NotWritten, done: ExtractionReport | None = None
) -> SessionExtraction:
    """A write step that wrote nothing: skipped when another extraction covered the activity;
    failed when this extractor's claim was lost with its connection (a database restart, a
    proxy closing it: the next run extracts the session, and the run reports a failure, not a
    session there was nothing to do for). ``done``: what was written before."""
    if refused is not CLAIM_LOST:
        return _skipped(session_id, refused.reason, done)
    logger.warning(
        "extractor.session_failed: %s: %s (left unmarked, retried by a later run)",
        session_id,
        refused.reason,
        extra={"event": "extractor.session_failed", "session_id": session_id},
    )
    report = ExtractionReport(sessions_seen=1) if done is None else done
    return SessionExtraction("failed", report.model_copy(update={"failures": 1}))


class StaleSessionSweep:
    """Extraction as a batch job: ``run`` sweeps the stale sessions, ``extract`` does one."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        settings: Settings,
        service: ExtractionService,
        fact_indexer: FactIndexer | None = None,
        claims: AsyncEngine | None = None,
    ) -> None:
        """``claims``: the engine whose connections hold the extraction claims (default: the
        sessionmaker's). A claim is held for the whole extraction while the extraction's own
        transactions take connections of the sessionmaker's pool: from that same pool, as
        many extractions at once as it has connections would each hold one and wait for
        another (until the pool's timeout). open_memory passes its second engine; at most
        DB_POOL_SIZE claims are held at once (half of that engine's pool), more extractions
        wait for one to end."""
        self._sessionmaker = sessionmaker
        self._engine = engine_of(sessionmaker) if claims is None else claims
        self._claim_slots = asyncio.Semaphore(max(1, settings.db_pool_size))
        self._settings = settings
        self._service = service
        self._fact_indexer = fact_indexer

    async def run(
        self,
        scope: uuid.UUID | None,
        *,
        limit: int | None = None,
        progress: ExtractionProgressCallback | None = None,
    ) -> ExtractionReport:
        """Extract every stale session of ``scope`` (every user's for None), at most ``limit``,
        longest idle first. A failing session is counted and left for the next run; the sweep
        goes on, unless the chat model failed ``MODEL_FAILURES_TO_STOP`` sessions in a row:
        then it stops (``extractor.sweep_stopped``), leaving the rest for the next run. The
        caller has checked that ``scope`` may be acted for."""
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            stale = await self._service.stale_sessions(
                session, scope, stale_minutes=self._settings.memory_stale_minutes, limit=limit
            )
        report = ExtractionReport()
        model_failures = 0
        for done, activity in enumerate(stale, start=1):
            result = await self.extract(activity.user_id, activity.session_id, stale_only=True)
            report += result.report
            if progress is not None:
                step = progress(ExtractionProgress(done, len(stale), activity.session_id))
                if inspect.isawaitable(step):
                    await step
            model_failures = model_failures + 1 if result.model_failure is not None else 0
            if model_failures >= MODEL_FAILURES_TO_STOP and done < len(stale):
                logger.warning(
                    "extractor.sweep_stopped: the chat model failed %d sessions in a row (%s); "
                    "%d session(s) left for the next run",
                    model_failures,
                    result.model_failure,
                    len(stale) - done,
                    extra={"event": "extractor.sweep_stopped"},
                )
                break
        return report

    async def extract(
        self, user_id: uuid.UUID | None, session_id: str, *, stale_only: bool
    ) -> SessionExtraction:
        """Extract the user's session if its last activity is not covered yet (and, with
        ``stale_only``, if it is still idle for MEMORY_STALE_MINUTES). ``user_id`` None: the
        session's owner, whoever that is (the operator's call, as ``run(None)`` sweeps every
        user's sessions); the caller has checked that ``user_id`` may be acted for. A model
        failure, a reply with no JSON or a database error is a ``failed`` result (logged),
        never raised."""
        owner = user_id
        try:
            if owner is None or not stale_only:
                # A call for one session (extract_session) names it: another user's answers
                # "missing" before the claim, so it never makes the owner's own run skip, nor
                # says "another extractor holds it" of a session that is not the caller's.
                async with unit_of_work(self._sessionmaker, read_only=True) as session:
                    owner = await self._service.owner(session, user_id, session_id)
                if owner is None:
                    return _missing()
            async with self._claim_slots, single_statement(self._engine) as conn:
                claim = await self._service.try_claim(conn, session_id)
                if claim is None:
                    return _skipped(session_id, "another extractor holds it")
                try:
                    return await self._extract_claimed(
                        owner, session_id, claim, stale_only=stale_only
                    )
                finally:
                    await self._release(conn, claim)
        except (ChatModelError, ExtractionError, StorageError) as exc:
            logger.warning(
                "extractor.session_failed: %s: %s (left unmarked, retried by a later run)",
                session_id,
                exc,
                extra={"event": "extractor.session_failed", "session_id": session_id},
            )
            # Not for a lost connection (the database is down: recording it fails too, and
            # the session did nothing wrong); a row the session cannot be read from, or any
            # other failure of this session, sends it behind the others.
            if owner is not None and not isinstance(exc, ConnectionLostError):
                await self._record_failure(
                    owner, session_id, counted=not isinstance(exc, ChatModelError)
                )
            return SessionExtraction(
                "failed",
                ExtractionReport(sessions_seen=1, failures=1),
                model_failure=str(exc) if isinstance(exc, ChatModelError) else None,
                storage_error=exc if isinstance(exc, StorageError) else None,
            )
        except Exception:
            # A defect of ours meeting some reply or row: one session's failure, with its
            # traceback, never the sweep's (the sessions after it would go unextracted).
            logger.exception(
                "extractor.session_failed: %s: unexpected error "
                "(left unmarked, retried by a later run)",
                session_id,
                extra={"event": "extractor.session_failed", "session_id": session_id},
            )
            if owner is not None:
                await self._record_failure(owner, session_id, counted=True)
            return SessionExtraction("failed", ExtractionReport(sessions_seen=1, failures=1))

    async def _record_failure(self, user_id: uuid.UUID, session_id: str, *, counted: bool) -> None:
        """Record the failed attempt (sweeps then take the session after the others; a
        ``counted`` one, of the session's own, leaves it out of them for a while). A failure
        to record it is logged, never raised: the extraction's own failure is the result."""
        try:
            async with unit_of_work(self._sessionmaker) as session:
                await self._service.record_failure(session, user_id, session_id, counted=counted)
        except Exception as exc:
            logger.warning(
                "extractor.failure_not_recorded: %s: %s",
                session_id,
                exc,
                extra={"event": "extractor.failure_not_recorded", "session_id": session_id},
            )

    async def _release(self, conn: AsyncConnection, claim: ExtractionClaim) -> None:
        """Release the claim. One that cannot be released must not go back to the pool still
        held: closing the connection ends its database session, and the lock with it. A
        failed release (the connection lost: the lock went with it) is logged and not raised,
        so the extraction's own result stands; a cancellation still propagates."""
        try:
            await self._service.release(conn, claim)
        except Exception as exc:
            await conn.invalidate()
            logger.warning(
                "extractor.claim_release_failed: %s: %s (the connection is closed, and the "
                "claim with it)",
                claim.session_id,
                exc,
                extra={"event": "extractor.claim_release_failed", "session_id": claim.session_id},
            )
        except BaseException:
            await conn.invalidate()
            raise

    async def _extract_claimed(
        self, user_id: uuid.UUID, session_id: str, claim: ExtractionClaim, *, stale_only: bool
    ) -> SessionExtraction:
        service = self._service
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            transcript = await service.transcript(session, user_id, session_id)
        if transcript is None:
            return _missing()
        if not transcript.needs_extraction:
            return _skipped(session_id, "no activity since its last extraction")
        if stale_only and transcript.idle_seconds < self._settings.memory_stale_minutes * 60:
            return _skipped(session_id, "active again")

        parsed = ParsedFacts(facts=(), skipped=0)
        if transcript.text:
            parsed = await service.ask_facts(transcript)
        vectors = await service.embed(parsed.facts)
        try:
            async with unit_of_work(self._sessionmaker) as session:
                written = await service.write_facts(
                    session, transcript, parsed.facts, vectors, claim=claim
                )
        except NotFoundError as exc:
            return _skipped(session_id, str(exc))  # deleted meanwhile, or not theirs to mark
        if isinstance(written, NotWritten):
            return _not_written(session_id, written)
        own = await service.own_key_vectors(written.unembedded)
        stored = 0
        if own:
            async with unit_of_work(self._sessionmaker) as session:
                stored = await service.store_vectors(session, own)
        if (written.vectors_queued or stored) and self._fact_indexer is not None:
            # Vectors queued for the fact indexer: by the upserts (a merged one too), or
            # stored on a fact's own text just now.
            self._fact_indexer.kick()
        report = ExtractionReport(
            sessions_seen=1,
            facts_written=written.written,
            facts_merged=written.merged,
            facts_skipped=parsed.skipped,
            facts_outdated=written.outdated,
        )
        try:
            summary = await self._new_summary(transcript, gave_facts=bool(parsed.facts))
        except (ChatModelError, ExtractionError) as exc:
            logger.warning(
                "extractor.session_failed: %s: summary: %s (facts kept, left unmarked)",
                session_id,
                exc,
                extra={"event": "extractor.session_failed", "session_id": session_id},
            )
            await self._record_failure(
                user_id, session_id, counted=not isinstance(exc, ChatModelError)
            )
            return SessionExtraction(
                "failed",
                report.model_copy(update={"failures": 1}),
                model_failure=str(exc) if isinstance(exc, ChatModelError) else None,
            )
        try:
            async with unit_of_work(self._sessionmaker) as session:
                finished = await service.finish(session, transcript, summary, claim=claim)
        except NotFoundError as exc:
            # Its facts were written before the delete (they are the user's, as if extracted
            # first); no mark is left for an id that is gone.
            return _skipped(session_id, str(exc), report)
        if isinstance(finished, NotWritten):
            return _not_written(session_id, finished, report)
        if summary is not None and not finished.summary_written:
            logger.info(
                "extractor.summary_superseded: %s: the facts changed during the summary call; "
                "the summary of the current facts is another extraction's to write",
                session_id,
                extra={"event": "extractor.summary_superseded", "session_id": session_id},
            )
        logger.info(
            "extractor.session_extracted: %s: %d fact(s) written, %d merged, %d skipped",
            session_id,
            written.written,
            written.merged,
            parsed.skipped,
            extra={"event": "extractor.session_extracted", "session_id": session_id},
        )
        return SessionExtraction(
            "extracted",
            report.model_copy(
                update={"sessions_extracted": 1, "summaries_written": int(finished.summary_written)}
            ),
        )

    async def _new_summary(
        self, transcript: SessionTranscript, *, gave_facts: bool
    ) -> NewSummary | None:
        """The user's summary rewritten from all their current facts when it is out of date
        (whether or not this session gave facts: a fact forgotten or expired since is a change
        too — except for a summary of unknown origin, which only a session that gave facts
        replaces), or removed when no fact is left; None leaves it as it is."""
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            plan = await self._service.summary_input(
                session, transcript.user_id, gave_facts=gave_facts
            )
        if not plan.outdated:
            return None
        if not plan.facts:
            return NewSummary(content=None, facts_digest=plan.digest)
        return NewSummary(await self._service.ask_summary(plan.facts), plan.digest)


class StaleSessionTrigger(Protocol):
    """What the session store calls when a user starts a session: run the sweep for them."""

    def schedule(self, user_id: uuid.UUID) -> None:
        """Start the user's sweep in the background; return at once, never raise."""
        ...


class BackgroundExtraction:
    """Runs a user's sweep in a background task the Memory owns: at most one per user, and at
    most ``concurrency`` sweeping at once (the others wait their turn).

    ``schedule`` returns at once (a user whose sweep is running or waiting is not scheduled
    twice); the task runs with no current user (it acts for the user it was given), logs its
    errors and never raises them. ``aclose`` cancels the tasks and waits for them.
    """

    def __init__(
        self, sweep: StaleSessionSweep, *, concurrency: int = EXTRACTION_BACKGROUND_CONCURRENCY
    ) -> None:
        self._sweep = sweep
        self._tasks: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._closing = False

    def schedule(self, user_id: uuid.UUID) -> None:
        """Start the user's sweep unless it is running, or the Memory is closing."""
        if self._closing:
            return
        running = self._tasks.get(user_id)
        if running is not None and not running.done():
            return
        # A fresh context: the task must not act as whoever happened to start it.
        task = asyncio.get_running_loop().create_task(
            self._run(user_id),
            name=f"navi-memory extraction {user_id}",
            context=contextvars.Context(),
        )
        self._tasks[user_id] = task
        task.add_done_callback(lambda done: self._forget(user_id, done))

    def _forget(self, user_id: uuid.UUID, task: asyncio.Task[None]) -> None:
        if self._tasks.get(user_id) is task:
            del self._tasks[user_id]

    async def _run(self, user_id: uuid.UUID) -> None:
        try:
            async with self._slots:
                report = await self._sweep.run(user_id)
        except NaviMemoryError as exc:
            logger.warning(
                "extractor.background_failed: user %s: %s",
                user_id,
                exc,
                extra={"event": "extractor.background_failed"},
            )
            return
        except Exception:
            # Nobody awaits this task: an unexpected error is logged here or lost.
            logger.exception(
                "extractor.background_failed: user %s: unexpected error",
                user_id,
                extra={"event": "extractor.background_failed"},
            )
            return
        if report.sessions_seen:
            logger.info(
                "extractor.background_done: user %s: %d session(s) extracted, %d failed",
                user_id,
                report.sessions_extracted,
                report.failures,
                extra={"event": "extractor.background_done"},
            )

    async def wait_idle(self) -> None:
        """Wait until no background sweep is running."""
        while tasks := [task for task in self._tasks.values() if not task.done()]:
            await asyncio.wait(tasks)

    async def aclose(self) -> None:
        """Cancel every running sweep and wait for it (a cancelled session stays unmarked and
        is retried by the next run)."""
        self._closing = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
