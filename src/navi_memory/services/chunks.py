"""Raw chunks: what a stored chunk must be, writing chunks of one session, and their search.

Chunk writing is one service both facades call: ``MemoryStore.add_chunks`` (any caller) and
``SessionStore.compress`` (the messages a compression demoted); the history repair job too.
"""

from __future__ import annotations

import hashlib
import uuid
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.config import Settings
from navi_memory.constants import (
    CHUNK_BM25_B,
    CHUNK_BM25_K1,
    CHUNK_BM25_PRUNE_FROM,
    CHUNK_FUSION_VECTOR_WEIGHT,
    CHUNK_GRAPH_FROM,
    CHUNK_INSERT_BATCH,
    CHUNK_MAX_DISTANCE,
    INT32_MAX,
    MAX_BREADCRUMBS,
    MAX_TEXT_CHARS,
    PRUNE_HINTS_CAPACITY,
)
from navi_memory.errors import InvalidInputError, InvalidTypeError, NotFoundError
from navi_memory.repositories.chunks import ChunkRepository, ChunkSearchRepository
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.repositories.statements import FetchedRow, Reads
from navi_memory.schemas import ChunkDraft, ChunkHit
from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.ranking import fuse_hits, hit_fields, rank_hits
from navi_memory.text import BREADCRUMB_MAX_CHARS
from navi_memory.text.terms import unspaced
from navi_memory.validation import check_aware_datetime, check_int, check_text

__all__ = ["ChunkService", "PruneHints", "checked_draft", "ranked_lists"]


def checked_draft(chunk: object) -> ChunkDraft:
    """A chunk to store: a ChunkDraft (or its dict) whose every field a column can hold and
    whose hash really is its content's. A ChunkDraft is checked field by field too: one built
    with ``model_construct`` skipped pydantic's validation."""
    if isinstance(chunk, dict):
        try:
            chunk = ChunkDraft.model_validate(chunk)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            # A value of the wrong type (pydantic's "..._type" errors) is an InvalidTypeError.
            kind = InvalidTypeError if error["type"].endswith("_type") else InvalidInputError
            raise kind(f"a chunk is malformed: {where}: {error['msg']}") from exc
    if not isinstance(chunk, ChunkDraft):
        raise InvalidTypeError(f"chunks must be ChunkDraft objects, got {type(chunk).__name__}")
    check_text("chunk content", chunk.content, max_chars=MAX_TEXT_CHARS)
    if not isinstance(chunk.content_hash, str):
        raise InvalidTypeError(
            f"a chunk's content_hash must be a str, got {type(chunk.content_hash).__name__}"
        )
    digest = hashlib.sha256(chunk.content.encode("utf-8")).hexdigest()
    if chunk.content_hash != digest:
        raise InvalidInputError(
            f"chunk content_hash {chunk.content_hash[:12]!r}… is not the sha256 of its content"
        )
    # Seqs are positions in a session; the columns are int4.
    start_seq = check_int("a chunk's start_seq", chunk.start_seq, minimum=0, maximum=INT32_MAX)
    end_seq = check_int("a chunk's end_seq", chunk.end_seq, minimum=0, maximum=INT32_MAX)
    for name, stamp in (("started_at", chunk.started_at), ("ended_at", chunk.ended_at)):
        check_aware_datetime(f"a chunk's {name}", stamp)
    if end_seq < start_seq or chunk.ended_at < chunk.started_at:
        raise InvalidInputError("a chunk must not end before it starts (seq or time)")
    if not isinstance(chunk.breadcrumbs, list | tuple):
        raise InvalidTypeError(
            f"a chunk's breadcrumbs must be a list of str, got {type(chunk.breadcrumbs).__name__}"
        )
    if len(chunk.breadcrumbs) > MAX_BREADCRUMBS:
        # Each is searched as text: thousands would make the chunk's tsvector pass the 1 MB
        # PostgreSQL allows, and every search of the user's chunks (and the indexer) fail.
        raise InvalidInputError(
            f"a chunk carries at most {MAX_BREADCRUMBS} breadcrumbs, got {len(chunk.breadcrumbs):,}"
        )
    for crumb in chunk.breadcrumbs:
        check_text("breadcrumb", crumb, max_chars=BREADCRUMB_MAX_CHARS)
    return chunk


class PruneHints:
    """Which users are known to hold fewer than ``prune_from`` chunks, so that their BM25
    search takes the plain statement: the pruned one would prune nothing for them and costs
    about a millisecond more to plan and run (docs/raw-history.md, "Pruning").

    Learnt from the ``scope_chunks`` every ranked row carries: a user not known small takes the
    pruned statement (exact for every user), and is remembered once a search shows them small;
    a remembered user who has grown is forgotten at their next search. At most ``capacity``
    users, the least recently searched forgotten first. One per process, shared by
    search_chunks and unified search."""

    def __init__(
        self, *, capacity: int = PRUNE_HINTS_CAPACITY, prune_from: int = CHUNK_BM25_PRUNE_FROM
    ) -> None:
        self.capacity = capacity
        self.prune_from = prune_from
        self._small: OrderedDict[uuid.UUID, None] = OrderedDict()

    def prune(self, user_id: uuid.UUID) -> bool:
        """Whether to search ``user_id``'s chunks with the pruned statement."""
        if user_id in self._small:
            self._small.move_to_end(user_id)
            return False
        return True

    def learn(self, user_id: uuid.UUID, rows: Sequence[FetchedRow]) -> None:
        """Remember from a search's ``rows`` whether ``user_id`` is small (no rows: nothing)."""
        if not rows:
            return
        if int(rows[0]["scope_chunks"]) >= self.prune_from:
            self._small.pop(user_id, None)
            return
        self._small[user_id] = None
        self._small.move_to_end(user_id)
        while len(self._small) > self.capacity:
            self._small.popitem(last=False)


def small_user(
    hints: PruneHints | None,
    scope: uuid.UUID | None,
    *,
    terms: Sequence[str],
    text_ranking: str,
) -> bool:
    """Whether a search of ``scope``'s chunks (all of them, or one session's) for ``terms``
    takes the small-user statement (ranked_text_sql's ``small``): a bm25 search with terms, of
    one user's, a user ``hints`` know to hold fewer than their ``prune_from`` chunks (search_chunks
    and unified search alike). That statement's plan is the same for every
    such user, so it runs on cached plans: a generic plan, made once per connection, where
    planning the plain statement for each call took 1.1-1.5 ms, about as long as running it
    (docs/benchmarks.md, "2026-12-06, 12:10–14:40 UTC"). Users not known small keep the
    statements planned for them."""
    return (
        text_ranking_for(text_ranking, terms) == "bm25"
        and bool(terms)
        and hints is not None
        and scope is not None
        and not hints.prune(scope)
    )


def text_ranking_for(text_ranking: str, terms: Sequence[str]) -> str:
    """The ranking a search for ``terms`` takes: ``text_ranking`` (CHUNK_TEXT_RANKING), but
    ``terms`` for a term in a script written without spaces (``text.terms.unspaced``). The
    BM25 text list reads the text index, whose lexemes are whole runs of such letters
    ("服务器端口是"): "端口" would never match. The terms ranking matches substrings (ILIKE on
    the content and breadcrumbs, the spec's text path), as fact and sketch search do; it reads
    every chunk of the user (or session), so only such queries take it."""
    return "terms" if text_ranking == "bm25" and unspaced(terms) else text_ranking


async def ranked_lists(
    repo: ChunkSearchRepository,
    scope: uuid.UUID | None,
    session_id: str | None,
    query_vector: Sequence[float] | None,
    terms: Sequence[str],
    limit: int,
    max_distance: float,
    *,
    with_summary_at: bool = False,
    hints: PruneHints | None = None,
    small: bool = False,
    graph_from: int = CHUNK_GRAPH_FROM,
) -> tuple[list[FetchedRow], list[FetchedRow]]:
    """The two lists the bm25 ranking fuses, in one statement: the vector hits closer than
    ``max_distance``, nearest first (none without ``query_vector``), and the BM25 text list,
    best first; ``limit`` of each at most.

    ``hints``: one user's search without a session takes the pruned BM25 statement unless
    they say the user is small; every one-user search teaches them what its rows show.
    ``small``: the caller found the user small (``small_user``; it runs the read on cached
    plans): the small-user statement, the same rows as the plain one. ``graph_from``:
    CHUNK_GRAPH_FROM (which users the vector list reads through the graph alone)."""
    # Every one-user search teaches the hints (its rows' scope_chunks count all the user's
    # chunks, session or not); only one without a session may take the pruned statement.
    learner = hints if scope is not None else None
    small = small and scope is not None
    prune = (
        learner is not None
        and scope is not None
        and session_id is None
        and not small
        and learner.prune(scope)
    )
    options: dict[str, Any] = {
        "k1": CHUNK_BM25_K1,
        "b": CHUNK_BM25_B,
        "with_summary_at": with_summary_at,
        "prune_from": learner.prune_from if learner is not None and prune else None,
        "small": small,
    }
    nearest: list[FetchedRow] = []
    if query_vector is None:
        text = await repo.search_ranked_text(scope, session_id, terms, limit, **options)
    else:
        nearest, text = await repo.search_ranked(
            scope, session_id, query_vector, terms, limit, graph_from=graph_from, **options
        )
    if learner is not None and scope is not None:
        learner.learn(scope, text or nearest)
    return [row for row in nearest if row["distance"] < max_distance], text


def to_chunk_hit(row: FetchedRow, **score: Any) -> ChunkHit:
    return ChunkHit.model_validate(hit_fields(row, score))


class ChunkService:
    """Chunk writing and chunk search, on the session or connection each call is given."""

    def __init__(
        self,
        *,
        embedding: EmbeddingService,
        text_ranking: str = "bm25",
        max_distance: float = CHUNK_MAX_DISTANCE,
        graph_from: int = CHUNK_GRAPH_FROM,
    ) -> None:
        self.embedding = embedding
        self.text_ranking = text_ranking
        self.max_distance = max_distance
        self.graph_from = graph_from
        self.prune_hints = PruneHints()

    @classmethod
    def from_settings(cls, settings: Settings, *, embedding: EmbeddingService) -> ChunkService:
        """The service with CHUNK_TEXT_RANKING, CHUNK_MAX_DISTANCE and CHUNK_GRAPH_FROM from
        ``settings``."""
        return cls(
            embedding=embedding,
            text_ranking=settings.chunk_text_ranking,
            max_distance=settings.chunk_max_distance,
            graph_from=settings.chunk_graph_from,
        )

    @staticmethod
    def one_statement(count: int) -> bool:
        """Whether writing ``count`` chunks is one statement (then it needs no transaction)."""
        return count <= CHUNK_INSERT_BATCH

    async def embed(self, drafts: Sequence[ChunkDraft]) -> list[array[float]] | None:
        """The drafts' vectors in batches, or None when the model fails (the chunks then land
        without; backfill fills them). Never inside a transaction."""
        return await self.embedding.documents([draft.content for draft in drafts])

    async def write(
        self,
        conn: AsyncSession | AsyncConnection,
        user_id: uuid.UUID,
        session_id: str,
        drafts: Sequence[ChunkDraft],
        vectors: Sequence[Sequence[float]] | None,
        *,
        require_session: bool,
    ) -> int:
        """Store the chunks of one session, skipping ones already stored (same content hash);
        returns how many were new. A session with a row must be the user's (and is
        share-locked against a concurrent delete); ``require_session`` also refuses one that
        has no row. Refusals are NotFoundError."""
        written = await ChunkRepository(session=conn).insert_many(
            user_id, session_id, drafts, vectors, require_session=require_session
        )
        if written is None:
            raise NotFoundError(f"no session {session_id!r} for this user")
        return written

    async def search(
        self,
        conn: Reads,
        scope: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        *,
        small: bool = False,
    ) -> list[ChunkHit]:
        """No terms: the most recent chunks. ``bm25``: the BM25 text list and the vector hits
        closer than ``max_distance``, fused by a weighted sum of scores (``fuse_hits``).
        ``terms`` (the spec's): vector hits closer than ``max_distance`` first, then text hits
        by distinct terms hit. ``small``: ``small_read`` said so (``conn`` on cached plans)."""
        repo = ChunkSearchRepository(session=conn)
        if not terms:
            recent = await repo.recent(scope, session_id, limit)
            return [to_chunk_hit(row, via="recent") for row in recent]
        if text_ranking_for(self.text_ranking, terms) == "terms":
            rows = await repo.search(
                scope,
                session_id,
                query_vector,
                terms,
                limit,
                self.max_distance,
                graph_from=self.graph_from,
            )
            return rank_hits(rows, limit, to_chunk_hit, recency="ended_at")
        vector, text = await ranked_lists(
            repo,
            scope,
            session_id,
            query_vector,
            terms,
            limit,
            self.max_distance,
            hints=self.prune_hints,
            small=small,
            graph_from=self.graph_from,
        )
        return fuse_hits(
            vector,
            text,
            limit,
            to_chunk_hit,
            recency="ended_at",
            vector_weight=CHUNK_FUSION_VECTOR_WEIGHT,
        )

    def small_read(self, scope: uuid.UUID | None, terms: Sequence[str]) -> bool:
        """Whether ``search`` of ``scope`` (any session filter) for ``terms`` reads with the
        small-user statement (``small_user``): then its reads belong on the cached-plans
        engine, and ``search`` is told so (``small``)."""
        return small_user(self.prune_hints, scope, terms=terms, text_ranking=self.text_ranking)

    async def latest_summary_at(
        self, session: AsyncSession, scope: uuid.UUID | None, session_id: str
    ) -> datetime | None:
        """When the session's last summary was written; None when there is none or the
        session is not ``scope``'s."""
        repo = SessionRepository(session=session)
        if scope is not None and await repo.owner(session_id) != scope:
            return None
        return await repo.latest_summary_at(session_id)
