"""MemoryStore: the spec's operations on facts, the summary, extraction state and raw chunks.

Every public call is one unit of work. Embeddings are computed before the transaction opens, so
no lock is held while a model answers; when none can be had the write still lands (NULL vector,
one ``memory.embedding_failed`` log event) and reads fall back to text search.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from array import array
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import (
    CHUNK_MAX_DISTANCE,
    EMBEDDING_DIM,
    FACT_MAX_DISTANCE,
    MAX_TEXT_CHARS,
    PERMISSION_READ_ALL,
)
from navi_memory.errors import (
    ConfigError,
    EmbeddingError,
    InvalidInputError,
    InvalidTypeError,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
)
from navi_memory.llm import Embedder, embedding_text_for_fact
from navi_memory.models import FactRow
from navi_memory.repositories.chunks import INSERT_BATCH, ChunkRepository
from navi_memory.repositories.facts import FACT_SORT_COLUMNS, FactRepository
from navi_memory.request_context import (
    current_session_id,
    current_user_id,
    has_permission,
    read_scope,
    write_scope,
)
from navi_memory.schemas import ChunkDraft, ChunkHit, Fact, FactHit
from navi_memory.services.backfill import (
    BackfillProgress,
    BackfillSource,
    ChunkBackfill,
    FactBackfill,
    run_backfill,
)
from navi_memory.services.chunk_index import ChunkIndexer
from navi_memory.services.facts import FactService, FactWrite
from navi_memory.text.terms import query_terms
from navi_memory.unit_of_work import single_statement, unit_of_work
from navi_memory.validation import check_int, check_optional_text, check_text

__all__ = ["CONFIDENCE_BY_SOURCE", "SOURCES", "MemoryStore"]

logger = logging.getLogger(__name__)

SOURCES: Final = ("conversation", "tool_call", "auto_discovery", "user_explicit")
"""Where a fact came from (spec: memory tool)."""

CONFIDENCE_BY_SOURCE: Final = {"tool_call": 95, "auto_discovery": 95, "user_explicit": 90}
"""Confidence when the caller gives none (spec: extractor); anything else gets DEFAULT."""

DEFAULT_CONFIDENCE: Final = 70
MAX_KEY_CHARS: Final = 200
MAX_CATEGORY_CHARS: Final = 100
MAX_LIMIT: Final = 1000


def storable_vector(vector: Sequence[float]) -> array[float]:
    """The vector as float32 (``array('f')``, what pgvector stores), if a vector(768) column can
    hold it; else EmbeddingError. Any Embedder is checked here, so a custom one that answers
    junk degrades like a failing one."""
    if len(vector) != EMBEDDING_DIM:
        raise EmbeddingError(
            f"the embedder gave a {len(vector)}-dimensional vector; the columns are "
            f"vector({EMBEDDING_DIM})"
        )
    try:
        # float32, as pgvector stores it: converted and type-checked in C; a value beyond
        # float32's range becomes an infinity here.
        values = array("f", vector)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EmbeddingError(f"the embedder gave a vector of non-numbers: {exc}") from exc
    # A NaN or an infinity makes the sum non-finite; 768 finite float32 values cannot overflow it.
    if not math.isfinite(sum(values)):
        raise EmbeddingError("the embedder gave a value pgvector cannot store (NaN, inf, huge)")
    return values


def storable_vectors(vectors: Sequence[Sequence[float]], expected: int) -> list[array[float]]:
    if len(vectors) != expected:
        raise EmbeddingError(f"the embedder gave {len(vectors)} vectors for {expected} texts")
    return [storable_vector(vector) for vector in vectors]


def _log_embedding_failure(exc: EmbeddingError) -> None:
    logger.warning("memory.embedding_failed: %s", exc, extra={"event": "memory.embedding_failed"})


def to_fact(row: FactRow | RowMapping) -> Fact:
    """A Fact from an ORM row (vector loaded) or a Core row with ``has_embedding``."""
    if isinstance(row, FactRow):
        return Fact.model_validate(row, from_attributes=True).model_copy(
            update={"has_embedding": row.embedding is not None}
        )
    return Fact.model_validate(dict(row))


def _scored(row: RowMapping, score: dict[str, Any]) -> dict[str, Any]:
    data = {k: v for k, v in row.items() if not (k in ("distance", "terms_hit") and v is None)}
    return {**data, **score}


def to_hit(row: RowMapping, **score: Any) -> FactHit:
    return FactHit.model_validate(_scored(row, score))


def to_chunk_hit(row: RowMapping, **score: Any) -> ChunkHit:
    return ChunkHit.model_validate(_scored(row, score))


HitT = TypeVar("HitT", FactHit, ChunkHit)


def rank_hits(
    rows: Sequence[RowMapping], limit: int, make: Callable[..., HitT], recency: str
) -> list[HitT]:
    """Vector hits nearest first, then text hits by terms matched, then the ``recency`` column
    (the SQL ranks them the same way; the final join does not keep that order)."""
    vector = sorted((r for r in rows if r["distance"] is not None), key=lambda r: r["distance"])
    by_text = sorted(
        (r for r in rows if r["distance"] is None),
        key=lambda r: (-r["terms_hit"], -r[recency].timestamp(), -r["id"]),
    )
    hits = [make(r, via="vector") for r in vector]
    hits += [make(r, via="text") for r in by_text]
    return hits[:limit]


def _checked_draft(chunk: object) -> ChunkDraft:
    """A chunk to store: a ChunkDraft (or its dict) whose hash really is its content's."""
    if isinstance(chunk, dict):
        try:
            chunk = ChunkDraft.model_validate(chunk)
        except ValidationError as exc:
            raise InvalidInputError(f"a chunk is malformed: {exc.errors()[0]['msg']}") from exc
    if not isinstance(chunk, ChunkDraft):
        raise InvalidTypeError(f"chunks must be ChunkDraft objects, got {type(chunk).__name__}")
    check_text("chunk content", chunk.content, max_chars=MAX_TEXT_CHARS)
    digest = hashlib.sha256(chunk.content.encode("utf-8")).hexdigest()
    if chunk.content_hash != digest:
        raise InvalidInputError(
            f"chunk content_hash {chunk.content_hash[:12]}… is not the sha256 of its content"
        )
    if chunk.started_at.tzinfo is None or chunk.ended_at.tzinfo is None:
        raise InvalidInputError("a chunk's started_at and ended_at must carry a time zone")
    if chunk.end_seq < chunk.start_seq or chunk.ended_at < chunk.started_at:
        raise InvalidInputError("a chunk must not end before it starts (seq or time)")
    for crumb in chunk.breadcrumbs:
        check_text("breadcrumb", crumb, max_chars=MAX_KEY_CHARS)
    return chunk


class MemoryStore:
    """The spec's MemoryStore over PostgreSQL: facts, summary, extraction state, raw chunks."""

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        embedder: Embedder,
    ) -> None:
        self._sessionmaker = sessionmaker
        bind = sessionmaker.kw.get("bind")
        if not isinstance(bind, AsyncEngine):
            raise ConfigError(
                "MemoryStore needs a sessionmaker bound to an AsyncEngine (got "
                f"{type(bind).__name__}): use open_memory(), or "
                "async_sessionmaker(navi_memory.db.create_engine(settings, url))"
            )
        self._engine = bind
        self._autocommit = async_sessionmaker(
            self._engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False
        )
        self._settings = settings
        self._embedder = embedder
        self._indexer = ChunkIndexer(
            sessionmaker,
            batch_size=settings.chunk_index_batch_size,
            background=settings.chunk_index_in_background,
        )

    async def aclose(self) -> None:
        """Stop the background chunk indexer (the batch in flight finishes; open_memory calls
        this on exit). Queued vectors stay queued for the next indexer."""
        await self._indexer.aclose()

    # --- embeddings (never inside a transaction) -------------------------------------------

    async def _embed_document(self, text: str) -> list[float] | None:
        vectors = await self._embed_documents([text])
        return None if vectors is None else vectors[0].tolist()

    async def _embed_documents(self, texts: Sequence[str]) -> list[array[float]] | None:
        try:
            vectors = await self._embedder.embed_documents(texts)
            return storable_vectors(vectors, len(texts))
        except EmbeddingError as exc:
            _log_embedding_failure(exc)
            return None

    async def _embed_query(self, text: str) -> array[float] | None:
        try:
            return storable_vector(await self._embedder.embed_query(text))
        except EmbeddingError as exc:
            _log_embedding_failure(exc)
            return None

    # --- facts ------------------------------------------------------------------------------

    async def upsert_fact(
        self,
        category: str,
        key: str,
        value: str,
        *,
        source: str = "conversation",
        confidence: int | None = None,
        expires_days: float | None = None,
        source_context: str | None = None,
        user_id: uuid.UUID | str | None = None,
        dedupe: bool = False,
    ) -> Fact:
        """Insert or update a fact of the user; with ``dedupe`` merge other spellings of the key.

        Same value again: only ``last_verified_at`` moves (an expired fact is revived with the new
        expiry). New value: value, vector, source, confidence, expiry and ``updated_at`` change.
        """
        uid = write_scope(user_id)
        category = check_text("category", category, max_chars=MAX_CATEGORY_CHARS).strip()
        key = check_text("key", key, max_chars=MAX_KEY_CHARS).strip()
        value = check_text("value", value)
        source_context = check_optional_text("source_context", source_context)
        if source not in SOURCES:
            raise InvalidInputError(f"source must be one of {', '.join(SOURCES)}; got {source!r}")
        if confidence is None:
            confidence = CONFIDENCE_BY_SOURCE.get(source, DEFAULT_CONFIDENCE)
        confidence = check_int("confidence", confidence, minimum=0, maximum=100)
        if expires_days is not None:
            if isinstance(expires_days, bool) or not isinstance(expires_days, int | float):
                raise InvalidInputError(
                    f"expires_days must be a number of days, got {type(expires_days).__name__}"
                )
            if not 0 < expires_days <= 36_500:
                raise InvalidInputError(
                    f"expires_days must be between 0 (exclusive) and 36500, got {expires_days}"
                )
        if not isinstance(dedupe, bool):
            raise InvalidInputError(f"dedupe must be a bool, got {type(dedupe).__name__}")

        embedding = await self._embed_document(embedding_text_for_fact(category, key, value))
        write = FactWrite(
            user_id=uid,
            category=category,
            key=key,
            value=value,
            source=source,
            confidence=confidence,
            expires_days=expires_days,
            source_context=source_context,
            embedding=embedding,
        )
        async with unit_of_work(self._sessionmaker) as session:
            row, outcome = await FactService(session=session).upsert(write, dedupe=dedupe)
            logger.debug("memory.fact_%s", outcome, extra={"fact_id": row.id})
            return to_fact(row)

    async def search_facts(
        self, query: str, user_id: uuid.UUID | str | None = None, limit: int = 15
    ) -> list[FactHit]:
        """Vector hits (cosine distance < 0.3, nearest first), then text hits up to ``limit``.

        Text hits match any query term in category, key or value (ILIKE, wildcards escaped),
        most terms first; with no embedding to be had the text pass alone answers. An empty
        query lists the most recently updated facts.
        """
        scope = read_scope(user_id)
        query = check_text("query", query, allow_empty=True)
        limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
        terms = query_terms(query)
        vector = await self._embed_query(query) if terms else None
        # One statement: no transaction (the connection's settings hold the HNSW options).
        async with unit_of_work(self._autocommit) as session:
            repo = FactRepository(session=session)
            if not terms:
                return [to_hit(row, via="recent") for row in await repo.recent(scope, limit)]
            rows = await repo.search(scope, vector, terms, limit, FACT_MAX_DISTANCE)
        return rank_hits(rows, limit, to_hit, recency="updated_at")

    async def delete_fact(
        self, key: str, category: str | None = None, user_id: uuid.UUID | str | None = None
    ) -> int:
        """Delete the user's fact(s) named ``key`` — directly or by a hidden spelling — with the
        hidden rows behind them. Returns how many visible facts were deleted."""
        uid = write_scope(user_id)
        key = check_text("key", key, max_chars=MAX_KEY_CHARS).strip()
        category = check_optional_text(
            "category", category, max_chars=MAX_CATEGORY_CHARS, allow_empty=False
        )
        async with unit_of_work(self._sessionmaker) as session:
            return await FactService(session=session).delete(
                uid, key, None if category is None else category.strip()
            )

    async def get_all_facts(
        self,
        user_id: uuid.UUID | str | None = None,
        all_users: bool = False,
        limit: int | None = None,
        offset: int = 0,
        search: str | None = None,
        sort_by: str = "category",
        sort_order: str = "desc",
        include_merged: bool = False,
    ) -> list[Fact]:
        """The user's facts (every user's with ``all_users``, which needs read_all), sorted."""
        scope = self._listing_scope(user_id, all_users)
        if sort_by not in FACT_SORT_COLUMNS:
            raise InvalidInputError(
                f"sort_by must be one of {', '.join(sorted(FACT_SORT_COLUMNS))}; got {sort_by!r}"
            )
        if not isinstance(sort_order, str) or sort_order.lower() not in {"asc", "desc"}:
            raise InvalidInputError(f"sort_order must be 'asc' or 'desc'; got {sort_order!r}")
        if limit is not None:
            limit = check_int("limit", limit, minimum=0)
        offset = check_int("offset", offset, minimum=0)
        search = check_optional_text("search", search)
        async with unit_of_work(self._sessionmaker) as session:
            rows = await FactRepository(session=session).list_facts(
                scope,
                search=search or None,
                include_merged=include_merged,
                sort_by=sort_by,
                descending=sort_order.lower() == "desc",
                limit=limit,
                offset=offset,
            )
            return [to_fact(row) for row in rows]

    def _listing_scope(self, user_id: uuid.UUID | str | None, all_users: bool) -> uuid.UUID | None:
        if all_users:
            if not has_permission(PERMISSION_READ_ALL):
                raise PermissionDeniedError(
                    f"all_users=True lists every user's facts and needs {PERMISSION_READ_ALL}"
                )
            return None
        return read_scope(user_id)

    async def fact_count(
        self, user_id: uuid.UUID | str | None = None, include_merged: bool = False
    ) -> int:
        scope = read_scope(user_id)
        async with unit_of_work(self._sessionmaker) as session:
            return await FactRepository(session=session).count(scope, include_merged=include_merged)

    async def unmerge_fact(self, fact_id: int) -> Fact:
        """Make a hidden row visible again (the row it was merged into stays as it is): the
        current user's own row, or — with no current user — any row with read_all (admin)."""
        fact_id = check_int("fact_id", fact_id, minimum=1)
        async with unit_of_work(self._sessionmaker) as session:
            row = await FactRepository(session=session).get(fact_id)
            if row is None or not self._may_change(row.user_id):
                raise NotFoundError(f"fact {fact_id} does not exist")
            if row.user_id is not None:
                await FactRepository(session=session).lock_category(row.user_id, row.category)
            return to_fact(await FactService(session=session).unmerge(row))

    def _may_change(self, owner: uuid.UUID | None) -> bool:
        """A row found by id: the current user's own; with no current user (an admin context),
        anyone's with read_all. Acting for one user never changes another's row."""
        current = current_user_id()
        if current is not None:
            return owner == current
        return has_permission(PERMISSION_READ_ALL)

    # --- summary ----------------------------------------------------------------------------

    async def get_summary(self, user_id: uuid.UUID | str | None = None) -> str | None:
        """The user's narrative summary (a global read: the legacy unowned one)."""
        scope = read_scope(user_id)
        async with unit_of_work(self._sessionmaker) as session:
            return await FactRepository(session=session).get_summary(scope)

    async def set_summary(self, content: str, user_id: uuid.UUID | str | None = None) -> None:
        uid = write_scope(user_id)
        content = check_text("content", content, allow_empty=True)
        async with unit_of_work(self._sessionmaker) as session:
            await FactRepository(session=session).set_summary(uid, content)

    # --- extraction state -------------------------------------------------------------------

    async def mark_session_extracted(
        self, session_id: str, user_id: uuid.UUID | str | None = None
    ) -> datetime:
        """Record that the user's session was processed now; returns the time.

        The session need not be a row of ``sessions`` (an application may keep its own); when
        it is, or when it was marked before, it must be the user's (else NotFoundError).
        """
        uid = write_scope(user_id)
        session_id = check_text("session_id", session_id, max_chars=MAX_KEY_CHARS)
        async with unit_of_work(self._sessionmaker) as session:
            repo = FactRepository(session=session)
            if await repo.session_state_owner(session_id) not in (None, uid):
                raise NotFoundError(f"no session {session_id!r} for this user")
            return await repo.mark_extracted(session_id, uid)

    async def get_extracted_at(
        self, session_id: str, user_id: uuid.UUID | str | None = None
    ) -> datetime | None:
        """When the session was processed; None if never — or if it is not the caller's."""
        scope = read_scope(user_id)
        session_id = check_text("session_id", session_id, max_chars=MAX_KEY_CHARS)
        async with unit_of_work(self._sessionmaker) as session:
            repo = FactRepository(session=session)
            if scope is not None and await repo.session_state_owner(session_id) != scope:
                return None
            return await repo.extracted_at(session_id)

    # --- backfill ---------------------------------------------------------------------------

    async def backfill_embeddings(
        self,
        batch_size: int = 8,
        *,
        pause_seconds: float | None = None,
        progress: Callable[[BackfillProgress], Awaitable[None] | None] | None = None,
    ) -> int:
        """Embed every visible fact and every chunk without a vector, ``batch_size`` at a time,
        committing per batch, and queue for the HNSW index every chunk vector that is in none
        (see ChunkRepository.requeue_unindexed). Returns how many rows got a vector. Raises
        EmbeddingError if the model is down (finished batches stay; a rerun resumes)."""
        batch_size = check_int("batch_size", batch_size, minimum=1, maximum=1024)
        filled = await run_backfill(
            self._sessionmaker,
            self._embedder,
            self._backfill_sources(),
            batch_size=batch_size,
            pause_seconds=(
                self._settings.backfill_pause_seconds if pause_seconds is None else pause_seconds
            ),
            progress=progress,
        )
        async with unit_of_work(self._sessionmaker) as session:
            requeued = await ChunkRepository(session=session).requeue_unindexed()
        if requeued:
            logger.info(
                "backfill.chunks_requeued: %d chunk vector(s) were in no index, queued",
                requeued,
                extra={"event": "backfill.chunks_requeued", "rows": requeued},
            )
        if filled.get(ChunkBackfill.table) or requeued:
            self._indexer.kick()
        return sum(filled.values())

    def _backfill_sources(self) -> Sequence[BackfillSource]:
        return [FactBackfill(), ChunkBackfill()]

    # --- raw chunks -------------------------------------------------------------------------

    async def add_chunks(
        self,
        chunks: Sequence[ChunkDraft],
        user_id: uuid.UUID | str | None = None,
        session_id: str | None = None,
        *,
        require_session: bool = False,
    ) -> int:
        """Store raw chunks of one session (append-only); returns how many were new.

        Chunks already stored for the session (same content hash) are skipped, so indexing the
        same demoted range twice writes 0. Embeddings are made in batches before the write; if
        the model fails the chunks land without vectors (backfill fills them later).

        ``session_id`` need not be a row of ``sessions`` (the spec keeps no foreign key: an
        application may keep its sessions elsewhere); when it is, it must be the user's, and it
        is share-locked so a concurrent session delete cannot leave these chunks behind.
        ``require_session=True`` refuses a session that has no row (NotFoundError).
        """
        uid = write_scope(user_id)
        sid = session_id if session_id is not None else current_session_id()
        if sid is None:
            raise InvalidInputError(
                "add_chunks needs a session: pass session_id=... or set it with "
                "request_context(session_id=...)"
            )
        sid = check_text("session_id", sid, max_chars=MAX_KEY_CHARS)
        drafts = [_checked_draft(chunk) for chunk in chunks]
        if not drafts:
            return 0
        vectors = await self._embed_documents([draft.content for draft in drafts])
        # One statement (up to INSERT_BATCH chunks) is its own transaction: no BEGIN and
        # COMMIT round trips. More chunks than that take one transaction.
        if len(drafts) <= INSERT_BATCH:
            async with single_statement(self._engine) as conn:
                written = await ChunkRepository(session=conn).insert_many(
                    uid, sid, drafts, vectors, require_session=require_session
                )
        else:
            async with unit_of_work(self._sessionmaker) as session:
                written = await ChunkRepository(session=session).insert_many(
                    uid, sid, drafts, vectors, require_session=require_session
                )
        if written is None:
            raise NotFoundError(f"no session {sid!r} for this user")
        if written and vectors is not None:
            self._indexer.kick()
        return written

    async def index_pending_chunks(self, max_batches: int | None = None) -> int:
        """Move queued chunk vectors into the HNSW index now, in this task; returns how many.

        add_chunks leaves this to a background task (``CHUNK_INDEX_IN_BACKGROUND``); call it
        where that is off (a worker, a cron job, a script that exits at once). Queued chunks
        are found by search meanwhile, exactly, so this changes speed, never results."""
        await self._indexer.wait_idle()
        return await self._indexer.drain(max_batches)

    async def pending_chunk_count(self) -> int:
        """How many stored chunk vectors wait for the HNSW index."""
        return await self._indexer.queued()

    async def wait_chunk_indexing(self) -> None:
        """Wait for the background indexer to go idle (it stops when the queue is empty)."""
        await self._indexer.wait_idle()

    async def add_chunks_for_session(
        self, chunks: Sequence[ChunkDraft], user_id: uuid.UUID, session_id: str
    ) -> int:
        """add_chunks for the session store's compression: the session row must exist."""
        return await self.add_chunks(chunks, user_id, session_id, require_session=True)

    async def search_chunks(
        self,
        query: str,
        user_id: uuid.UUID | str | None = None,
        session_id: str | None = None,
        limit: int = 8,
    ) -> list[ChunkHit]:
        """Vector hits (cosine distance < 0.45) first, then full-text hits up to ``limit``.

        Text hits contain any query term in their content or breadcrumbs (case-insensitive),
        ranked by distinct terms hit, then recency. An empty normalised query returns the most
        recent chunks. ``session_id`` narrows to one session of the user.
        """
        scope = read_scope(user_id)
        query = check_text("query", query, allow_empty=True)
        limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
        if session_id is not None:
            session_id = check_text("session_id", session_id, max_chars=MAX_KEY_CHARS)
        terms = query_terms(query)
        vector = await self._embed_query(query) if terms else None
        # One statement: no transaction (the connection's settings hold the HNSW options).
        async with single_statement(self._engine) as conn:
            repo = ChunkRepository(session=conn)
            if not terms:
                recent = await repo.recent(scope, session_id, limit)
                return [to_chunk_hit(row, via="recent") for row in recent]
            rows = await repo.search(scope, session_id, vector, terms, limit, CHUNK_MAX_DISTANCE)
        return rank_hits(rows, limit, to_chunk_hit, recency="ended_at")

    async def latest_summary_at(self, session_id: str) -> datetime | None:
        """When the session's last summary was written: the freshness boundary for raw
        excerpts. None when there is none, when the session is not the caller's, or on any
        failure (logged as ``memory.latest_summary_at_failed``)."""
        try:
            scope = read_scope(None)
            session_id = check_text("session_id", session_id, max_chars=MAX_KEY_CHARS)
            async with unit_of_work(self._sessionmaker) as session:
                repo = ChunkRepository(session=session)
                if scope is not None and await repo.session_owner(session_id) != scope:
                    return None
                return await repo.latest_summary_at(session_id)
        except NaviMemoryError as exc:
            logger.warning(
                "memory.latest_summary_at_failed: %s",
                exc,
                extra={"event": "memory.latest_summary_at_failed"},
            )
            return None
