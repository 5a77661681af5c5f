"""SQL for sessions, session_messages and session_memory_state, and for the rows a deleted
session takes with it. Every "whose session is this" question is answered here."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Float,
    Row,
    Select,
    and_,
    case,
    cast,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import aliased

from navi_memory.constants import EXTRACTION_RETRY_BASE_SECONDS, EXTRACTION_RETRY_MAX_SECONDS
from navi_memory.models import (
    ChunkRow,
    ChunkTextQueueRow,
    ChunkVectorQueueRow,
    KvRow,
    MessageRow,
    SessionMemoryStateRow,
    SessionRow,
    User,
)
from navi_memory.repositories.statements import XACT_LOCK, any_of
from navi_memory.text.chunks import WHITESPACE

__all__ = [
    "HELD_BY_OTHERS",
    "ExtractionClaim",
    "ExtractionClaimRepository",
    "SessionActivity",
    "SessionRepository",
    "summary_at_of_chunk",
]


HELD_BY_OTHERS: Final = "navi_session_held_by_others(:sid, :uid)"
"""Whether a user other than ``:uid`` holds raw chunks, kv entries (sketches) or extraction
state under the session id ``:sid`` (revision 0028's function, on its indexes)."""

_ROWS_OF_OTHERS: Final = text(f"SELECT {HELD_BY_OTHERS}")


@dataclass(frozen=True, slots=True)
class SessionActivity:
    """A session's owner, its last activity and when it was last extracted (None: never)."""

    session_id: str
    user_id: uuid.UUID
    last_active: datetime
    extracted_at: datetime | None
    idle_seconds: float
    """Seconds since ``last_active`` by the database clock."""


_FAILURES_MAX: Final = 2_147_483_647
"""``failures`` is an int4: a count stops there."""

_RETRY_DOUBLINGS_MAX: Final = 20
"""Past this many failures the wait is the longest anyway (2^19 × 5 min ≫ a day)."""


def _retry_due() -> ColumnElement[bool]:
    """Whether a sweep may try the session (of ``_activity``'s join) again: no failure of its
    own since its last success, new activity since its last failure, or its back-off passed:
    EXTRACTION_RETRY_BASE_SECONDS × 2^(failures − 1), at most EXTRACTION_RETRY_MAX_SECONDS."""
    state = SessionMemoryStateRow
    doublings = func.least(state.failures, _RETRY_DOUBLINGS_MAX) - 1
    wait = func.least(
        EXTRACTION_RETRY_BASE_SECONDS * func.power(2.0, doublings), EXTRACTION_RETRY_MAX_SECONDS
    )
    return or_(
        func.coalesce(state.failures, 0) == 0,
        state.failed_at.is_(None),
        state.failed_at < SessionRow.last_active,
        state.failed_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, wait),
    )


class SessionRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    # --- sessions ---------------------------------------------------------------------------

    async def user_exists(self, user_id: uuid.UUID) -> bool:
        return await self.session.scalar(select(User.id).where(User.id == user_id)) is not None

    async def lock_session_id(self, session_id: str) -> None:
        """Serialise the claims on one session id until the transaction ends: a create, and a
        mark of a session kept outside ``sessions``, each check the other's rows first."""
        await self.session.execute(XACT_LOCK, {"scope": f"sessions.id:{session_id}"})

    async def insert_session(
        self, session_id: str, user_id: uuid.UUID, title: str | None
    ) -> SessionRow | None:
        """The new row, or None when the id is taken (by anyone)."""
        row_id = await self.session.scalar(
            insert(SessionRow)
            .values(id=session_id, user_id=user_id, title=title)
            .on_conflict_do_nothing(index_elements=[SessionRow.id])
            .returning(SessionRow.id)
        )
        if row_id is None:
            return None
        return await self.session.get(SessionRow, row_id)

    async def get(self, session_id: str, owner: uuid.UUID | None) -> SessionRow | None:
        """The session if it belongs to ``owner`` (any owner for a global read, None)."""
        stmt = select(SessionRow).where(SessionRow.id == session_id)
        if owner is not None:
            stmt = stmt.where(SessionRow.user_id == owner)
        return await self.session.scalar(stmt)

    async def lock_owned(
        self, session_id: str, user_id: uuid.UUID, *, user_row: bool = False
    ) -> SessionRow | None:
        """Lock the user's session row until the transaction ends (None: not theirs or gone).

        Every writer of a session's messages takes this lock first, so appends get gap-free
        sequence numbers and compressions see each other's work. ``user_row``: the user's
        navi_users row is key-share-locked first, for a transaction that goes on to write rows
        referencing the user (a compression's chunks): DELETE FROM navi_users takes the user
        row, then the session by the cascade, and the other order deadlocks with it (see
        ``owner``).
        """
        if user_row and not await self._key_share_user(user_id):
            return None
        return await self.session.scalar(
            select(SessionRow)
            .where(SessionRow.id == session_id, SessionRow.user_id == user_id)
            .with_for_update()
        )

    async def set_metadata_value(self, session_id: str, key: str, value: Any) -> None:
        """Set one key of the session's ``session_metadata`` (a JSON value), leaving the other
        keys as they are; metadata that is not a JSON object (a host's own write) is read as
        empty and replaced by ``{key: value}``. Callers that read the key first hold
        ``lock_owned``."""
        current = SessionRow.session_metadata
        metadata = case(
            (func.jsonb_typeof(current) == "object", current),
            else_=cast(literal("{}"), JSONB),
        )
        await self.session.execute(
            update(SessionRow)
            .where(SessionRow.id == session_id)
            .values(
                session_metadata=metadata.op("||")(func.jsonb_build_object(key, cast(value, JSONB)))
            )
        )

    async def owner(self, session_id: str, *, lock: bool = False) -> uuid.UUID | None:
        """The session's owner; ``lock`` share-locks its row so a delete waits for this write.

        With ``lock`` the owner's navi_users row is key-share-locked first (None: the user or
        the session was deleted meanwhile). The write that follows (a fact, a summary, a mark,
        a kv entry) needs that lock anyway, for its foreign key; DELETE FROM navi_users takes
        the user row, then the sessions by the cascade. Taken the other way round, after the
        session row, a user delete in between deadlocks with the write."""
        stmt = select(SessionRow.user_id).where(SessionRow.id == session_id)
        if not lock:
            return await self.session.scalar(stmt)
        owner = await self.session.scalar(stmt)
        if owner is None or not await self._key_share_user(owner):
            return None
        # Read again under the lock: the session may have gone while the user row was awaited.
        return await self.session.scalar(stmt.with_for_update(read=True))

    async def _key_share_user(self, user_id: uuid.UUID) -> bool:
        """Lock the user's row FOR KEY SHARE until the transaction ends (a user delete waits;
        other writers of the user's rows do not); False when the user is gone."""
        locked = await self.session.scalar(
            # read=True: FOR KEY SHARE. key_share alone is FOR NO KEY UPDATE, which made every
            # write of one user (kv.set, compressions, extractions) wait for the others.
            select(User.id).where(User.id == user_id).with_for_update(read=True, key_share=True)
        )
        return locked is not None

    async def list_sessions(self, owner: uuid.UUID | None) -> list[SessionRow]:
        stmt = select(SessionRow).order_by(SessionRow.last_active.desc(), SessionRow.id)
        if owner is not None:
            stmt = stmt.where(SessionRow.user_id == owner)
        return list((await self.session.scalars(stmt)).all())

    async def touch(self, session_id: str) -> None:
        await self.session.execute(
            update(SessionRow)
            .where(SessionRow.id == session_id)
            .values(last_active=func.clock_timestamp())
        )

    async def delete_session(self, session_id: str, user_id: uuid.UUID) -> None:
        """Delete the session and everything keyed by it; messages go by the cascade.

        memory_chunks has no foreign key on session_id (spec), so its rows are deleted here, in
        the caller's transaction, together with the extraction state and the sketches — the
        user's own rows only. Their queue rows (text and vector) go first: the chunk indexer
        locks queue rows, then (its foreign key checks) chunk rows, and taking them in the same
        order cannot deadlock with it.
        """
        for queue in (ChunkTextQueueRow, ChunkVectorQueueRow):
            await self.session.execute(
                delete(queue).where(
                    queue.user_id == user_id,
                    queue.chunk_id.in_(
                        select(ChunkRow.id).where(
                            ChunkRow.user_id == user_id, ChunkRow.session_id == session_id
                        )
                    ),
                )
            )
        await self.session.execute(
            delete(ChunkRow).where(ChunkRow.user_id == user_id, ChunkRow.session_id == session_id)
        )
        await self.session.execute(
            delete(KvRow).where(KvRow.user_id == user_id, KvRow.session_id == session_id)
        )
        # The session's mark: the user's own, or a legacy one of no user; never another
        # user's mark under the same id (left by older code), which stays theirs.
        await self.session.execute(
            delete(SessionMemoryStateRow).where(
                SessionMemoryStateRow.session_id == session_id,
                or_(
                    SessionMemoryStateRow.user_id.is_(None),
                    SessionMemoryStateRow.user_id == user_id,
                ),
            )
        )
        await self.session.execute(delete(SessionRow).where(SessionRow.id == session_id))

    # --- messages ---------------------------------------------------------------------------

    async def next_seq(self, session_id: str) -> int:
        """max(seq) + 1; only sound while the session row is locked (``lock_owned``)."""
        current = await self.session.scalar(
            select(func.max(MessageRow.seq)).where(MessageRow.session_id == session_id)
        )
        return (current or 0) + 1

    async def insert_message(self, values: dict[str, Any]) -> MessageRow:
        # clock_timestamp, not now(): a message waits for the session lock, and its time should
        # follow the order it was given its seq in, not when its transaction began.
        row = MessageRow(**values, created_at=func.clock_timestamp())
        self.session.add(row)
        await self.session.flush()
        await self.session.refresh(row)
        return row

    async def messages(self, session_id: str, *, context_only: bool) -> list[MessageRow]:
        """History in seq order; with ``context_only`` the context, its summary first."""
        stmt = select(MessageRow).where(MessageRow.session_id == session_id)
        if context_only:
            stmt = stmt.where(MessageRow.is_context.is_(True)).order_by(
                (MessageRow.kind == "summary").desc(), MessageRow.seq
            )
        else:
            stmt = stmt.order_by(MessageRow.seq)
        return list((await self.session.scalars(stmt)).all())

    async def sessions_with_dropped_history(
        self, settle_seconds: float, owner: uuid.UUID | None = None
    ) -> list[tuple[uuid.UUID, str]]:
        """(owner, session) of every session holding a demoted conversation message that no raw
        chunk covers (start_seq..end_seq), except sessions whose last summary is younger than
        ``settle_seconds`` (database clock); a session with no summary at all is visited. Of
        ``owner``, or every user's for None: for backfill. Linear: one pass over summaries,
        chunks and demoted messages. Ranges are int8: an int4 range ending at int4's largest
        seq would overflow.

        Only messages a chunk can hold count: system messages and blank user and assistant
        messages (``render_message`` renders neither, whitespace as ``str.strip`` sees it) are
        in no chunk when they lie at the edge of a demoted run, and would list their session
        on every run."""
        rows = await self.session.execute(
            text(
                """
                WITH unsettled AS (
                    SELECT session_id FROM session_messages WHERE kind = 'summary'
                    GROUP BY session_id
                    HAVING max(created_at) >= now() - make_interval(secs => :settle)
                ),
                dropped AS (
                    SELECT m.session_id, m.seq FROM session_messages m
                    WHERE NOT m.is_context AND m.kind = 'message' AND m.role <> 'system'
                      AND (m.role IN ('tool', 'tool_call') OR btrim(m.content, :blank) <> '')
                      AND NOT EXISTS (SELECT 1 FROM unsettled u WHERE u.session_id = m.session_id)
                ),
                covered AS (
                    SELECT c.user_id, c.session_id,
                           range_agg(int8range(c.start_seq, c.end_seq, '[]')) AS seqs
                    FROM memory_chunks c
                    WHERE c.session_id IN (SELECT session_id FROM dropped)
                    GROUP BY c.user_id, c.session_id
                )
                SELECT DISTINCT s.user_id, d.session_id
                FROM dropped d
                JOIN sessions s ON s.id = d.session_id
                LEFT JOIN covered c ON c.user_id = s.user_id AND c.session_id = d.session_id
                WHERE (c.seqs IS NULL OR NOT c.seqs @> d.seq::bigint)
                  AND (CAST(:owner AS uuid) IS NULL OR s.user_id = :owner)
                ORDER BY d.session_id
                """
            ),
            {"settle": settle_seconds, "blank": WHITESPACE, "owner": owner},
        )
        return [(row[0], row[1]) for row in rows]

    async def dropped_history(
        self, user_id: uuid.UUID, session_id: str, settle_seconds: float
    ) -> list[MessageRow]:
        """The session's demoted rows (every kind: build_chunks skips what is not conversation,
        and keeping them keeps a run whole) that no chunk covers, by seq; none when the
        session's last summary is younger than ``settle_seconds`` (no summary: all of them)."""
        covered = (
            select(func.range_agg(func.int8range(ChunkRow.start_seq, ChunkRow.end_seq, "[]")))
            .where(ChunkRow.user_id == user_id, ChunkRow.session_id == session_id)
            .scalar_subquery()
        )
        last_summary = (
            select(func.max(MessageRow.created_at))
            .where(MessageRow.session_id == session_id, MessageRow.kind == "summary")
            .scalar_subquery()
        )
        settled_before = func.now() - func.make_interval(0, 0, 0, 0, 0, 0, settle_seconds)
        stmt = (
            select(MessageRow)
            .where(
                MessageRow.session_id == session_id,
                MessageRow.is_context.is_(False),
                or_(covered.is_(None), ~covered.op("@>")(cast(MessageRow.seq, BigInteger))),
                or_(last_summary.is_(None), last_summary < settled_before),
            )
            .order_by(MessageRow.seq)
        )
        return list((await self.session.scalars(stmt)).all())

    async def context_kinds(self, session_id: str) -> dict[int, str]:
        """id → kind of every message now in the session's context."""
        rows = await self.session.execute(
            select(MessageRow.id, MessageRow.kind).where(
                MessageRow.session_id == session_id, MessageRow.is_context.is_(True)
            )
        )
        return {row_id: kind for row_id, kind in rows}

    async def demote(self, session_id: str, message_ids: Sequence[int]) -> int:
        """Take the messages out of the context; returns how many were flipped."""
        if not message_ids:
            return 0
        result = await self.session.execute(
            update(MessageRow)
            .where(
                MessageRow.session_id == session_id,
                any_of(MessageRow.id, message_ids, BigInteger()),
                MessageRow.is_context.is_(True),
            )
            .values(is_context=False)
            .returning(MessageRow.id)
        )
        return len(result.scalars().all())

    # --- extraction state -------------------------------------------------------------------

    async def extraction_owner(self, session_id: str) -> uuid.UUID | None:
        """Whose session this is: the sessions row's owner, else the user who marked it (an
        application may keep its sessions outside ``sessions``)."""
        owner = await self.owner(session_id)
        if owner is not None:
            return owner
        return await self.session.scalar(
            select(SessionMemoryStateRow.user_id).where(
                SessionMemoryStateRow.session_id == session_id
            )
        )

    async def state_owner(self, session_id: str) -> tuple[uuid.UUID | None] | None:
        """(user_id,) of the session's extraction state row (None inside: a legacy row); None
        when it has none."""
        row = (
            await self.session.execute(
                select(SessionMemoryStateRow.user_id).where(
                    SessionMemoryStateRow.session_id == session_id
                )
            )
        ).first()
        return None if row is None else (row[0],)

    async def rows_of_others(self, session_id: str, user_id: uuid.UUID) -> bool:
        """Whether a user other than ``user_id`` holds raw chunks, kv entries (sketches) or
        extraction state under ``session_id``: rows of a session kept outside ``sessions``
        (no table has a foreign key to it). HELD_BY_OTHERS, on revision 0028's indexes."""
        found = await self.session.scalar(_ROWS_OF_OTHERS, {"sid": session_id, "uid": user_id})
        return bool(found)

    async def mark_extracted(
        self, session_id: str, user_id: uuid.UUID, at: datetime | None = None
    ) -> datetime | None:
        """Record the session as extracted ``at`` (None: the transaction's now()); None,
        writing nothing, when its state row is another user's (a legacy row, of no user, is
        taken over)."""
        when = func.now() if at is None else at
        stmt = insert(SessionMemoryStateRow).values(
            session_id=session_id, extracted_at=when, user_id=user_id
        )
        state = SessionMemoryStateRow.__table__.c
        result = await self.session.execute(
            stmt.on_conflict_do_update(
                index_elements=[SessionMemoryStateRow.session_id],
                set_={"extracted_at": when, "user_id": user_id, "failed_at": None, "failures": 0},
                where=or_(state.user_id.is_(None), state.user_id == user_id),
            ).returning(SessionMemoryStateRow.extracted_at)
        )
        extracted: datetime | None = result.scalar_one_or_none()
        return extracted

    async def record_failure(self, session_id: str, user_id: uuid.UUID, *, counted: bool) -> None:
        """Record a failed extraction of the session now (its mark unchanged): sweeps take it
        after the sessions never failed; ``counted`` (a failure of the session's own, not a
        model outage) also adds one to ``failures``, which leaves it out of sweeps for a
        while (stale_sessions). Nothing when the session is gone or not the user's (a state
        row left for a deleted id would hold the id against every other user), nor when its
        state row is another user's."""
        state = SessionMemoryStateRow.__table__.c
        added = 1 if counted else 0
        mine = select(
            SessionRow.id,
            SessionRow.user_id,
            literal(None, DateTime(timezone=True)),
            func.now(),
            literal(added),
        ).where(SessionRow.id == session_id, SessionRow.user_id == user_id)
        await self.session.execute(
            insert(SessionMemoryStateRow)
            .from_select(["session_id", "user_id", "extracted_at", "failed_at", "failures"], mine)
            .on_conflict_do_update(
                index_elements=[SessionMemoryStateRow.session_id],
                set_={
                    "failed_at": func.now(),
                    "user_id": user_id,
                    # A legacy row of no user starts its count afresh.
                    "failures": case(
                        (state.user_id.is_(None), added),
                        # An imported count may be int4's largest already.
                        else_=func.least(state.failures, _FAILURES_MAX - added) + added,
                    ),
                },
                where=or_(state.user_id.is_(None), state.user_id == user_id),
            )
        )

    def _activity(self) -> Select[str, uuid.UUID, datetime, datetime | None, float]:
        """Sessions with their mark: only a state row of the session's own user counts."""
        idle = func.extract("epoch", func.now() - SessionRow.last_active)
        return select(
            SessionRow.id,
            SessionRow.user_id,
            SessionRow.last_active,
            SessionMemoryStateRow.extracted_at,
            idle.cast(Float),
        ).outerjoin(
            SessionMemoryStateRow,
            and_(
                SessionMemoryStateRow.session_id == SessionRow.id,
                SessionMemoryStateRow.user_id == SessionRow.user_id,
            ),
        )

    async def stale_sessions(
        self, owner: uuid.UUID | None, stale_minutes: int, limit: int | None
    ) -> list[SessionActivity]:
        """Sessions idle for more than ``stale_minutes`` (database clock) whose last activity
        was never extracted: no mark, or a mark older than ``last_active``. Of ``owner`` (every
        user's for None), longest idle first; those the extractor failed on since their last
        extraction (``failed_at``) after the others, the longest-failed first, so a session
        the model always fails on cannot hold a limited sweep's every place. A session with
        ``failures`` of its own is left out until its back-off has passed (``_retry_due``) or
        it has new activity."""
        stmt = (
            self._activity()
            .where(
                SessionRow.last_active
                < func.now() - func.make_interval(0, 0, 0, 0, 0, stale_minutes),
                or_(
                    SessionMemoryStateRow.extracted_at.is_(None),
                    SessionMemoryStateRow.extracted_at < SessionRow.last_active,
                ),
                _retry_due(),
            )
            .where(~_foreign_state(SessionRow))
            .order_by(
                SessionMemoryStateRow.failed_at.asc().nulls_first(),
                SessionRow.last_active,
                SessionRow.id,
            )
            .limit(limit)
        )
        if owner is not None:
            stmt = stmt.where(SessionRow.user_id == owner)
        return [_activity_of(row) for row in await self.session.execute(stmt)]

    async def activity(self, session_id: str, owner: uuid.UUID | None) -> SessionActivity | None:
        """The session's activity, if it is ``owner``'s (anyone's for None)."""
        stmt = self._activity().where(SessionRow.id == session_id)
        if owner is not None:
            stmt = stmt.where(SessionRow.user_id == owner)
        row = (await self.session.execute(stmt)).first()
        return None if row is None else _activity_of(row)

    async def lock_extraction_state(
        self, session_id: str, user_id: uuid.UUID
    ) -> tuple[uuid.UUID | None, datetime | None]:
        """Lock the session's extraction state row until the transaction ends (made, unmarked,
        if missing) and return (its user, its mark). Only extraction takes it: appends never
        wait on it."""
        await self.session.execute(
            insert(SessionMemoryStateRow)
            .values(session_id=session_id, user_id=user_id, extracted_at=None)
            .on_conflict_do_nothing(index_elements=[SessionMemoryStateRow.session_id])
        )
        row = (
            await self.session.execute(
                select(SessionMemoryStateRow.user_id, SessionMemoryStateRow.extracted_at)
                .where(SessionMemoryStateRow.session_id == session_id)
                .with_for_update()
            )
        ).one()
        return row[0], row[1]

    async def claim_held(self, claim: ExtractionClaim) -> bool:
        """Whether ``claim``'s lock is still held by the server process that took it (a claim
        dies with its connection: a connection closed by the server, a proxy or a failover
        takes the lock with it, and another extractor may have claimed the session since).
        pg_locks shows a bigint advisory key as its high half in ``classid``, its low half in
        ``objid`` and ``objsubid`` 1."""
        held = await self.session.scalar(
            text(
                f"SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' "
                f"AND l.granted AND l.pid = :pid AND l.objsubid = 1 "
                f"AND l.database = (SELECT oid FROM pg_database "
                f"WHERE datname = current_database()) "
                f"AND l.classid = (({_CLAIM_KEY} >> 32) & 4294967295)::oid "
                f"AND l.objid = ({_CLAIM_KEY} & 4294967295)::oid)"
            ),
            {"pid": claim.pid, "scope": _claim_scope(claim.session_id)},
        )
        return bool(held)

    async def extracted_at(self, session_id: str, user_id: uuid.UUID | None) -> datetime | None:
        """The session's mark, if its state row is ``user_id``'s (anyone's for None)."""
        stmt = select(SessionMemoryStateRow.extracted_at).where(
            SessionMemoryStateRow.session_id == session_id
        )
        if user_id is not None:
            stmt = stmt.where(SessionMemoryStateRow.user_id == user_id)
        return await self.session.scalar(stmt)

    async def latest_summary_at(self, session_id: str) -> datetime | None:
        """When the session's last summary was written (None: never)."""
        return await self.session.scalar(
            select(func.max(MessageRow.created_at)).where(
                MessageRow.session_id == session_id, MessageRow.kind == "summary"
            )
        )


def _foreign_state(sessions: type[SessionRow]) -> ColumnElement[bool]:
    """The session's id has an extraction state row of another user (a mark racing a create,
    or left by code before the create check): the session is not extracted by a sweep, whose
    mark it could never write, and the row stays that user's."""
    other = aliased(SessionMemoryStateRow)  # the statement joins the user's own row already
    return (
        exists()
        .where(
            other.session_id == sessions.id,
            other.user_id.is_not(None),
            other.user_id != sessions.user_id,
        )
        .correlate(sessions)
    )


def _activity_of(row: Row[str, uuid.UUID, datetime, datetime | None, float]) -> SessionActivity:
    session_id, user_id, last_active, extracted_at, idle_seconds = row
    return SessionActivity(session_id, user_id, last_active, extracted_at, idle_seconds)


@dataclass(frozen=True, slots=True)
class ExtractionClaim:
    """A claim taken: the session's id and the server process (backend pid) whose
    session-level lock it is."""

    session_id: str
    pid: int


_CLAIM_KEY = "hashtextextended(:scope, 0)"


def _claim_scope(session_id: str) -> str:
    return f"session_memory_state:{session_id}"


class ExtractionClaimRepository:
    """The claim that keeps two extractors, in any processes, off one session: a session-level
    advisory lock, taken and released on a connection outside any transaction. It blocks no
    reader or writer of any table (appends never wait on it), and it dies with its connection,
    so a crashed extractor leaves nothing behind."""

    def __init__(self, *, connection: AsyncConnection) -> None:
        self.connection = connection

    async def try_claim(self, session_id: str) -> ExtractionClaim | None:
        """Take the session's claim if no one holds it; None when someone does."""
        claimed, pid = (
            await self.connection.execute(
                text(f"SELECT pg_try_advisory_lock({_CLAIM_KEY}), pg_backend_pid()"),
                {"scope": _claim_scope(session_id)},
            )
        ).one()
        return ExtractionClaim(session_id, int(pid)) if claimed else None

    async def release(self, claim: ExtractionClaim) -> None:
        await self.connection.execute(
            text(f"SELECT pg_advisory_unlock({_CLAIM_KEY})"),
            {"scope": _claim_scope(claim.session_id)},
        )


def summary_at_of_chunk(alias: str) -> str:
    """SQL for the freshness boundary of chunk ``alias`` (a memory_chunks row): when its
    session's last summary was written — NULL when there is none, when the session has no row,
    or when the row is another user's than the chunk's."""
    return (
        "(SELECT max(m.created_at) FROM sessions s JOIN session_messages m "
        "ON m.session_id = s.id AND m.kind = 'summary' "
        f"WHERE s.id = {alias}.session_id AND s.user_id = {alias}.user_id)"
    )
