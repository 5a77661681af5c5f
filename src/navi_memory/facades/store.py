"""MemoryStore: the spec's operations on facts, the summary, extraction state and raw chunks.

Every public call is one unit of work. Embeddings are computed before the transaction opens, so
no lock is held while a model answers; when none can be had the write still lands (NULL vector,
one ``memory.embedding_failed`` log event) and reads fall back to text search.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import (
    BACKFILL_BATCH_SIZE,
    BACKFILL_PAUSE_MAX_SECONDS,
    BATCH_SIZE_MAX,
    BIGINT_MAX,
    EXTRACTED_MARK_MAX_AHEAD_SECONDS,
    FACT_CATEGORY_MAX_CHARS,
    FACT_EXPIRES_MAX_DAYS,
    FACT_KEY_MAX_CHARS,
    INT32_MAX,
    MAX_LIMIT,
    PERMISSION_READ_ALL,
)
from navi_memory.errors import (
    InvalidInputError,
    InvalidTypeError,
    NaviMemoryError,
    PermissionDeniedError,
    StorageError,
)
from navi_memory.jobs.backfill import Backfill, ProgressCallback
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.llm import Embedder, embedding_text_for_fact
from navi_memory.request_context import (
    current_session_id,
    current_user_id,
    has_permission,
    read_scope,
    write_scope,
)
from navi_memory.schemas import ChunkDraft, ChunkHit, Fact, FactHit, ForgetResult
from navi_memory.services.chunks import ChunkService, checked_draft
from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.facts import (
    FACT_SORT_KEYS,
    SOURCES,
    FactService,
    FactWrite,
    confidence_for_source,
)
from navi_memory.text.chunks import raw_history_terms
from navi_memory.text.terms import query_phrase, query_terms
from navi_memory.unit_of_work import (
    engine_of,
    pooled_reads,
    pooled_write,
    statement_or_transaction,
    unit_of_work,
)
from navi_memory.validation import (
    check_aware_datetime,
    check_batch_job,
    check_bool,
    check_int,
    check_optional_session_id,
    check_optional_text,
    check_sequence,
    check_session_id,
    check_shown,
    check_text,
)

__all__ = ["MemoryStore"]

logger = logging.getLogger(__name__)


class MemoryStore:
    """The spec's MemoryStore over PostgreSQL: facts, summary, extraction state, raw chunks."""

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        embedder: Embedder | None,
        embedding: EmbeddingService | None = None,
        chunks: ChunkService | None = None,
        indexer: ChunkIndexer | None = None,
        backfill: Backfill | None = None,
        fact_indexer: FactIndexer | None = None,
        cached_plans: AsyncEngine | None = None,
    ) -> None:
        """``embedding``, ``chunks``, ``indexer``, ``fact_indexer`` and ``backfill`` default to
        ones of this store's own; open_memory passes the ones it shares with the SessionStore
        and the admin facade (one indexer of each per Memory). ``embedder`` None is text-only
        mode. ``cached_plans``: the engine fact searches run on (db.create_engine; default:
        the sessionmaker's)."""
        self._sessionmaker = sessionmaker
        self._engine = engine_of(sessionmaker)  # refuses a sessionmaker bound to no engine
        self._cached_plans = cached_plans or self._engine
        self._settings = settings
        self._embedding = embedding or EmbeddingService(embedder)
        self._facts = FactService()
        self._chunks = chunks or ChunkService.from_settings(settings, embedding=self._embedding)
        self._indexer = indexer or ChunkIndexer.from_settings(sessionmaker, settings)
        self._fact_indexer = fact_indexer or FactIndexer(
            sessionmaker,
            batch_size=settings.fact_index_batch_size,
            background=settings.fact_index_in_background,
        )
        self._backfill = backfill or Backfill(
            sessionmaker,
            embedder=embedder,
            indexer=self._indexer,
            fact_indexer=self._fact_indexer,
        )

    async def aclose(self) -> None:
        """Stop the background chunk and fact indexers (open_memory calls this on exit): the
        batches in flight finish, a drain that was kicked but had not begun runs one batch,
        and what is queued beyond that stays queued for the next indexer."""
        try:
            await self._indexer.aclose()
        finally:
            await self._fact_indexer.aclose()

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
        session_id: str | None = None,
    ) -> Fact:
        """Insert or update a fact of the user; with ``dedupe`` merge other spellings of the key.

        Same value again: only ``last_verified_at`` moves (an expired fact is revived with the new
        expiry). New value: value, vector, source, confidence, expiry and ``updated_at`` change.
        ``session_id`` (default: the request context's session) is recorded as where the fact
        was written from; it moves with ``updated_at``. A session the ``sessions`` table holds
        under another user is NotFoundError, writing nothing; an id it does not hold (an
        application's own) is recorded as given.

        One statement on an autocommit connection (FactService.write). A vector set or changed
        is queued for memory_fact_vectors, which the fact indexer fills in the background;
        search reads queued facts from memory_facts meanwhile.
        """
        uid = write_scope(user_id)
        category = check_text("category", category, max_chars=FACT_CATEGORY_MAX_CHARS).strip()
        key = check_text("key", key, max_chars=FACT_KEY_MAX_CHARS).strip()
        value = check_text("value", value)
        for name, text in (("category", category), ("key", key), ("value", value)):
            check_shown(name, text)
        source_context = check_optional_text("source_context", source_context)
        if not isinstance(source, str):
            raise InvalidTypeError(
                f"source must be a str, one of {', '.join(SOURCES)}; got {type(source).__name__}"
            )
        if source not in SOURCES:
            raise InvalidInputError(f"source must be one of {', '.join(SOURCES)}; got {source!r}")
        if confidence is None:
            confidence = confidence_for_source(source)
        confidence = check_int("confidence", confidence, minimum=0, maximum=100)
        if expires_days is not None:
            if isinstance(expires_days, bool) or not isinstance(expires_days, int | float):
                raise InvalidTypeError(
                    f"expires_days must be a number of days, got {type(expires_days).__name__}"
                )
            if not 0 < expires_days <= FACT_EXPIRES_MAX_DAYS:
                raise InvalidInputError(
                    f"expires_days must be between 0 (exclusive) and {FACT_EXPIRES_MAX_DAYS}, "
                    f"got {expires_days}"
                )
        dedupe = check_bool("dedupe", dedupe)
        session_id = check_optional_session_id(
            current_session_id() if session_id is None else session_id
        )

        embedding = await self._embedding.document(embedding_text_for_fact(category, key, value))
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
            session_id=session_id,
        )
        # One statement, its own transaction; a repeat cannot double it (the same value again
        # only verifies), so a connection lost mid-way is safe to call again.
        async with pooled_write(self._engine) as conn:
            done = await self._facts.write(conn, write, dedupe=dedupe)
        fact = done.fact
        if done.own_key_text is not None:
            fact = await self._embed_own_key(fact, done.own_key_text)
        if done.vector_queued:
            self._fact_indexer.kick()
        logger.debug("memory.fact_%s", done.outcome, extra={"fact_id": fact.id})
        return fact

    async def _embed_own_key(self, fact: Fact, embedded: str) -> Fact:
        """Give ``fact`` the vector of ``embedded``, its own text (UpsertResult.own_key_text;
        guarded like backfill's: only if it still has none and still reads so); unchanged when
        no vector can be had (backfill's job)."""
        vector = await self._embedding.document(embedded)
        if vector is None:
            return fact
        try:
            async with unit_of_work(self._sessionmaker) as session:
                stored = await self._facts.give_vector(session, fact.id, embedded, vector)
        except StorageError as exc:
            # The value is committed already: an error here would tell the caller the write
            # failed (or, for a lost connection, that it is to be repeated). The vector is
            # optional; backfill gives the row one.
            logger.warning(
                "memory.fact_vector_failed: fact %d: %s (the value is stored; backfill gives "
                "it its vector)",
                fact.id,
                exc,
                extra={"event": "memory.fact_vector_failed", "fact_id": fact.id},
            )
            return fact
        if not stored:
            return fact
        self._fact_indexer.kick()
        return fact.model_copy(update={"has_embedding": True})

    async def search_facts(
        self, query: str, user_id: uuid.UUID | str | None = None, limit: int = 15
    ) -> list[FactHit]:
        """Vector hits (cosine distance < 0.3, nearest first), then text hits up to ``limit``.

        Text hits match any query term in category, key or value (ILIKE, wildcards escaped),
        most terms first; of those matching as many terms, a fact holding the whole query
        verbatim (a query of up to 200 characters) first, then the most recently updated; with
        no embedding to be had the text pass alone answers. An empty query lists the most
        recently updated facts.
        """
        scope = read_scope(user_id)
        query = check_text("query", query, allow_empty=True)
        limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
        terms = query_terms(query)
        vector = await self._embedding.query(query) if terms else None
        # One statement: no transaction (the connection's settings hold what it needs), on the
        # engine whose plans are cached: this plan is the same for every user.
        async with pooled_reads(self._cached_plans) as reads:
            return await self._facts.search(reads, scope, vector, terms, limit, query_phrase(query))

    async def delete_fact(
        self, key: str, category: str | None = None, user_id: uuid.UUID | str | None = None
    ) -> int:
        """Delete the user's fact(s) named ``key`` — directly or by a hidden spelling — with the
        hidden rows behind them. Returns how many visible facts were deleted."""
        return len(await self.delete_facts(key, category, user_id))

    async def delete_facts(
        self, key: str, category: str | None = None, user_id: uuid.UUID | str | None = None
    ) -> list[Fact]:
        """delete_fact, returning the visible facts deleted as they were (by category, key):
        through a hidden spelling, a fact whose key is not ``key``."""
        return (await self.forget_facts(key, category, user_id)).facts

    async def forget_facts(
        self, key: str, category: str | None = None, user_id: uuid.UUID | str | None = None
    ) -> ForgetResult:
        """delete_fact, saying everything it deleted: the visible facts, the expired rows the
        key also named (deleted, but never visible), and whether the user's summary went with
        them (it goes whenever a row does: it may tell the forgotten fact)."""
        uid = write_scope(user_id)
        key = check_text("key", key, max_chars=FACT_KEY_MAX_CHARS).strip()
        category = check_optional_text(
            "category", category, max_chars=FACT_CATEGORY_MAX_CHARS, allow_empty=False
        )
        async with unit_of_work(self._sessionmaker) as session:
            return await self._facts.delete(
                session,
                uid,
                key,
                None if category is None else category.strip(),
                # Asked for in a conversation (the memory tool, a request naming a session):
                # remembered against older sessions' extractions.
                in_conversation=current_session_id() is not None,
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
        category: str | None = None,
    ) -> list[Fact]:
        """The user's facts (every user's with ``all_users``, which needs read_all), sorted;
        ``category`` narrows to one category. Expired facts are never listed."""
        scope = self._listing_scope(user_id, check_bool("all_users", all_users))
        include_merged = check_bool("include_merged", include_merged)
        if not isinstance(sort_by, str):
            raise InvalidTypeError(f"sort_by must be a str, got {type(sort_by).__name__}")
        if sort_by not in FACT_SORT_KEYS:
            raise InvalidInputError(
                f"sort_by must be one of {', '.join(sorted(FACT_SORT_KEYS))}; got {sort_by!r}"
            )
        if not isinstance(sort_order, str):
            raise InvalidTypeError(
                f"sort_order must be a str, 'asc' or 'desc'; got {type(sort_order).__name__}"
            )
        if sort_order.lower() not in {"asc", "desc"}:
            raise InvalidInputError(f"sort_order must be 'asc' or 'desc'; got {sort_order!r}")
        if limit is not None:
            limit = check_int("limit", limit, minimum=0, maximum=BIGINT_MAX)
        offset = check_int("offset", offset, minimum=0, maximum=BIGINT_MAX)
        search = check_optional_text("search", search)
        category = check_optional_text(
            "category", category, max_chars=FACT_CATEGORY_MAX_CHARS, allow_empty=False
        )
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.list_facts(
                session,
                scope,
                category=None if category is None else category.strip(),
                search=search or None,
                include_merged=include_merged,
                sort_by=sort_by,
                descending=sort_order.lower() == "desc",
                limit=limit,
                offset=offset,
            )

    def _listing_scope(self, user_id: uuid.UUID | str | None, all_users: bool) -> uuid.UUID | None:
        if all_users:
            if user_id is not None:
                # Which was meant is not ours to guess: one user's list, or everyone's.
                raise InvalidInputError(
                    f"user_id={user_id!s} and all_users=True ask for one user's facts and for "
                    "every user's: pass one of them"
                )
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
        include_merged = check_bool("include_merged", include_merged)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.count(session, scope, include_merged=include_merged)

    async def fact_categories(
        self, user_id: uuid.UUID | str | None = None
    ) -> list[tuple[str, int]]:
        """The categories that hold visible facts, with how many each, the fullest first (the
        ``memory`` tool's ``list``: what there is, not the facts themselves)."""
        scope = read_scope(user_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.categories(session, scope)

    async def get_fact(self, fact_id: int) -> Fact:
        """One fact by id, hidden or expired alike: the current user's own, or anyone's with
        read_all (an admin context); NotFoundError otherwise."""
        fact_id = check_int("fact_id", fact_id, minimum=1, maximum=BIGINT_MAX)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.get(session, fact_id)

    async def get_merged_facts(self, fact_id: int) -> list[Fact]:
        """The rows hidden behind one fact (merged into it), expired ones too, by id: what
        forgetting that fact deletes with it. The fact is read as by ``get_fact``."""
        fact_id = check_int("fact_id", fact_id, minimum=1, maximum=BIGINT_MAX)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.hidden_behind(session, fact_id)

    async def unmerge_fact(self, fact_id: int) -> Fact:
        """Make a hidden row visible again (the row it was merged into stays as it is): the
        current user's own row, or — with no current user — any row with read_all (admin)."""
        fact_id = check_int("fact_id", fact_id, minimum=1, maximum=BIGINT_MAX)
        async with unit_of_work(self._sessionmaker) as session:
            return await self._facts.unmerge(session, fact_id)

    # --- summary ----------------------------------------------------------------------------

    async def get_summary(self, user_id: uuid.UUID | str | None = None) -> str | None:
        """The user's narrative summary (a global read: the legacy unowned one)."""
        scope = read_scope(user_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.get_summary(session, scope)

    async def set_summary(self, content: str, user_id: uuid.UUID | str | None = None) -> None:
        uid = write_scope(user_id)
        content = check_text("content", content, allow_empty=True)
        async with unit_of_work(self._sessionmaker) as session:
            await self._facts.set_summary(session, uid, content)

    # --- extraction state -------------------------------------------------------------------

    async def mark_session_extracted(
        self,
        session_id: str,
        user_id: uuid.UUID | str | None = None,
        *,
        at: datetime | None = None,
    ) -> datetime:
        """Record that the user's session was processed ``at`` (default: now); returns the time.

        The extractor passes the ``last_active`` it read with the transcript, so activity
        during its model call leaves the session stale. ``at`` must carry a time zone, be no
        more than 5 minutes ahead of this host's clock and not before 1970. The session need
        not be a row of ``sessions`` (an application may keep its own); when it is, or when it
        was marked before, it must be the user's (else NotFoundError).
        """
        uid = write_scope(user_id)
        session_id = check_session_id(session_id)
        if at is not None:
            at = check_aware_datetime("at", at)
            # A mark ahead of the clock would leave the session's later activity unextracted
            # until the clock passed it; 5 minutes allow for a clock (the database's, another
            # host's) a little ahead of this one. Before 1970 no extraction ran: such a time is
            # a bug (and year 1 would be stored as -infinity, read back naive).
            seconds = at.timestamp()  # since 1970-01-01 UTC, whatever at's zone
            ahead = seconds - datetime.now(at.tzinfo).timestamp()
            if ahead > EXTRACTED_MARK_MAX_AHEAD_SECONDS:
                raise InvalidInputError(
                    f"at {at.isoformat()} is in the future, more than "
                    f"{EXTRACTED_MARK_MAX_AHEAD_SECONDS // 60} minutes ahead of this "
                    "host's clock: pass the time of the activity the extraction covered (its "
                    "last_active), or leave at out to record now"
                )
            if seconds < 0:
                raise InvalidInputError(
                    f"at {at.isoformat()} is before 1970: pass the time of the activity the "
                    "extraction covered (its last_active), or leave at out to record now"
                )
        async with unit_of_work(self._sessionmaker) as session:
            return await self._facts.mark_extracted(session, uid, session_id, at=at)

    async def get_extracted_at(
        self, session_id: str, user_id: uuid.UUID | str | None = None
    ) -> datetime | None:
        """When the session was processed; None if never — or if it is not the caller's."""
        scope = read_scope(user_id)
        session_id = check_session_id(session_id)
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._facts.extracted_at(session, scope, session_id)

    # --- backfill ---------------------------------------------------------------------------

    async def backfill_embeddings(
        self,
        batch_size: int = BACKFILL_BATCH_SIZE,
        *,
        pause_seconds: float | None = None,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Embed every visible fact and every chunk without a vector, ``batch_size`` at a time,
        committing per batch, and queue for their indexes every chunk and fact vector that
        is in none (see ChunkRepository.requeue_unindexed). Returns how many rows got a vector.
        Raises EmbeddingError if the model is down (finished batches stay; a rerun resumes).
        Every user's rows: acting for a user it is refused (PermissionDeniedError), read_all or
        not — it would write vectors into other users' rows."""
        batch_size, pause_seconds = check_batch_job(
            batch_size,
            self._settings.backfill_pause_seconds if pause_seconds is None else pause_seconds,
            progress,
            batch_max=BATCH_SIZE_MAX,
            pause_max=BACKFILL_PAUSE_MAX_SECONDS,
        )
        if current_user_id() is not None:
            raise PermissionDeniedError(
                "backfill_embeddings fills every user's rows: call it acting for nobody "
                "(outside request_context(user_id=...)), as make backfill does"
            )
        return await self._backfill.run(
            batch_size=batch_size, pause_seconds=pause_seconds, progress=progress
        )

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
        chunks = check_sequence("chunks", chunks)
        require_session = check_bool("require_session", require_session)
        sid = session_id if session_id is not None else current_session_id()
        if sid is None:
            raise InvalidInputError(
                "add_chunks needs a session: pass session_id=... or set it with "
                "request_context(session_id=...)"
            )
        sid = check_session_id(sid)
        drafts = [checked_draft(chunk) for chunk in chunks]
        if not drafts:
            return 0
        vectors = await self._chunks.embed(drafts)
        # Up to CHUNK_INSERT_BATCH chunks are one statement, its own transaction (no BEGIN and
        # COMMIT round trips); more take one transaction.
        async with statement_or_transaction(
            self._sessionmaker, one_statement=self._chunks.one_statement(len(drafts))
        ) as conn:
            written = await self._chunks.write(
                conn, uid, sid, drafts, vectors, require_session=require_session
            )
        if written:
            self._indexer.kick()
        return written

    async def index_pending_chunks(self, max_batches: int | None = None) -> int:
        """Index queued chunks now (text into the GIN index, vectors into the HNSW index), in
        this task — with ``max_batches`` None, on CHUNK_INDEX_WORKERS connections at once
        until the queues are empty; returns how many chunks.

        add_chunks leaves this to a background task (``CHUNK_INDEX_IN_BACKGROUND``); call it
        where that is off (a worker, a cron job, a script that exits at once). Queued chunks
        are found by search meanwhile, exactly, so this changes speed, never results. Its
        first batch also moves into the HNSW graph the vectors of every user past
        CHUNK_GRAPH_FROM that are still beside it (left by another process, or by SQL of
        its own)."""
        if max_batches is not None:
            max_batches = check_int("max_batches", max_batches, minimum=1, maximum=INT32_MAX)
        # A batch in flight, yes; a background retry's sleep, no: while the database is down
        # this drain's own error comes at once, and once it is back this drain ends the sleep.
        await self._indexer.wait_batches()
        self._indexer.sweep_next()
        if max_batches is None:
            indexed = await self._indexer.drain_all()
        else:
            indexed = await self._indexer.drain(max_batches)
        self._indexer.wake()
        return indexed

    async def pending_chunk_count(self) -> int:
        """How many stored chunks wait for the text index, the HNSW index or both."""
        return await self._indexer.queued()

    async def wait_chunk_indexing(self) -> None:
        """Wait for the background indexer to go idle (it stops when the queue is empty). A
        background drain that failed and sleeps before its retry retries now and is waited for
        once: this never sleeps through the retry delays, and returns while the database is
        down (the queue keeps its rows)."""
        await self._indexer.wait_settled()

    async def index_pending_facts(self, max_batches: int | None = None) -> int:
        """Move queued fact vectors into memory_fact_vectors now, in this task; returns how many.

        upsert_fact leaves this to a background task (``FACT_INDEX_IN_BACKGROUND``); call it
        where that is off. Queued facts are found by search meanwhile, exactly, so this changes
        speed, never results."""
        if max_batches is not None:
            max_batches = check_int("max_batches", max_batches, minimum=1, maximum=INT32_MAX)
        # See index_pending_chunks: a batch in flight is waited for, a retry's sleep is not.
        await self._fact_indexer.wait_batches()
        indexed = await self._fact_indexer.drain(max_batches)
        self._fact_indexer.wake()
        return indexed

    async def pending_fact_count(self) -> int:
        """How many facts' vectors wait for the fact indexer."""
        return await self._fact_indexer.queued()

    async def wait_fact_indexing(self) -> None:
        """Wait for the background fact indexer to go idle (it stops when the queue is empty);
        as wait_chunk_indexing, never through a retry's sleep."""
        await self._fact_indexer.wait_settled()

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
        """The user's chunks best matching ``query``, at most ``limit``.

        CHUNK_TEXT_RANKING=bm25 (default): text hits ranked by BM25 over content and
        breadcrumbs (idf from the user's own chunks), fused with the vector hits closer than
        CHUNK_MAX_DISTANCE by a weighted sum (BM25 score relative to the best text hit's, plus
        0.3 times the cosine similarity to the query, a text hit's too); each hit's ``score``
        is that sum; recency breaks only exact ties. ``terms`` (the
        spec's): vector hits first, then hits containing any query term, by distinct terms hit,
        then recency. An empty normalised query returns the most recent chunks. ``session_id``
        narrows to one session of the user.
        """
        scope = read_scope(user_id)
        query = check_text("query", query, allow_empty=True)
        limit = check_int("limit", limit, minimum=1, maximum=MAX_LIMIT)
        session_id = check_optional_session_id(session_id)
        terms = query_terms(query)
        vector = await self._embedding.query(query) if terms else None
        terms = list(raw_history_terms(terms))  # not the words every chunk's rendering holds
        # One statement: no transaction (the connection's settings hold the HNSW options). A
        # user known small reads with a statement whose plan is every small user's: cached.
        small = self._chunks.small_read(scope, terms)
        async with pooled_reads(self._cached_plans if small else self._engine) as reads:
            return await self._chunks.search(
                reads, scope, session_id, vector, terms, limit, small=small
            )

    async def latest_summary_at(self, session_id: str) -> datetime | None:
        """When the session's last summary was written: the freshness boundary for raw
        excerpts. None when there is none, when the session is not the caller's, or on any
        failure (logged as ``memory.latest_summary_at_failed``)."""
        try:
            scope = read_scope(None)
            session_id = check_session_id(session_id)
            async with unit_of_work(self._sessionmaker, read_only=True) as session:
                return await self._chunks.latest_summary_at(session, scope, session_id)
        except NaviMemoryError as exc:
            logger.warning(
                "memory.latest_summary_at_failed: %s",
                exc,
                extra={"event": "memory.latest_summary_at_failed"},
            )
            return None
