"""Unified search: one read over facts, raw history and sketches — tiered (facts, then raw
excerpts by relevance, then sketches), with provenance and freshness marks on every hit.

The caller (a facade) validates, embeds the query once and hands a lane runner
(unit_of_work.LaneEngines.run); the plan's lanes then run concurrently, each on reads of its
own (a pooled connection for the lane, from its first statement to its last).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final, Literal

from navi_memory.config import Settings
from navi_memory.constants import (
    CHUNK_FUSION_VECTOR_WEIGHT,
    CHUNK_GRAPH_FROM,
    CHUNK_MAX_DISTANCE,
    FACT_MAX_DISTANCE,
    FRESHNESS_FACTS,
    SKETCH_SCOPE,
)
from navi_memory.repositories.chunks import ChunkSearchRepository
from navi_memory.repositories.facts import FactSearchRepository
from navi_memory.repositories.kv import KvSearchRepository
from navi_memory.repositories.statements import FetchedRow, Reads
from navi_memory.schemas import MemoryHit
from navi_memory.services.chunks import (
    PruneHints,
    ranked_lists,
    small_user,
    text_ranking_for,
)
from navi_memory.services.ranking import fuse_hits, rank_hits
from navi_memory.text.chunks import raw_history_terms
from navi_memory.text.freshness import (
    ExcerptWords,
    FactVersion,
    FactWords,
    Freshness,
    RawExcerpt,
    fact_words,
    mark_freshness,
)
from navi_memory.text.hits import SearchScope, SeqCoverage
from navi_memory.text.terms import STOP_WORDS, query_phrase, query_terms

__all__ = [
    "LaneRunner",
    "SearchPlan",
    "SearchRequest",
    "Store",
    "UnifiedSearchService",
    "plan_search",
]

Store = Literal["facts", "raw", "sketches"]
"""One store of unified search."""

Connection = Reads

_LANES: Final[dict[SearchScope, tuple[tuple[Store, ...], ...]]] = {
    # Raw history is the slow read: it gets a lane of its own, and the facts and the
    # sketches (quick, index-served reads) share the other. More concurrent reads than cores
    # buy nothing: the machine this runs on may have two.
    "all": (("raw",), ("facts", "sketches")),
    "facts": (("facts",),),
    # Raw hits need the facts matching the query for their freshness marks.
    "raw": (("raw",), ("facts",)),
    "sketches": (("sketches",),),
}

_CUSTOM_PLANS: Final[frozenset[Store]] = frozenset({"raw"})
"""Stores whose statements need a plan made for the user at hand (db.create_engine)."""

Via = Literal["vector", "text", "recent"]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """What one search reads: its scope, ``k`` per store, the query's terms (none: the most
    recent items of each store), its lanes — the stores read one after the other in a lane,
    the lanes concurrently — and whether the query vector is wanted."""

    scope: SearchScope
    k: int
    terms: tuple[str, ...]
    lanes: tuple[tuple[Store, ...], ...]
    embed: bool
    phrase: str | None = None
    """The whole query (text.terms.query_phrase): facts holding it verbatim rank first among
    those matching the most terms."""

    @property
    def raw_terms(self) -> tuple[str, ...]:
        """The terms the raw history's text search asks for (text.chunks.raw_history_terms:
        not the words every chunk's rendering holds)."""
        return raw_history_terms(self.terms)

    @property
    def stores(self) -> frozenset[Store]:
        return frozenset(store for lane in self.lanes for store in lane)

    @property
    def cached_plans(self) -> tuple[bool, ...]:
        """For each lane, whether its statements may run with cached (generic) plans: all but
        the raw history's, whose best plan depends on the user's size (HNSW or the user's
        btree)."""
        return tuple(_CUSTOM_PLANS.isdisjoint(lane) for lane in self.lanes)


def plan_search(
    query: str, scope: SearchScope, k: int, *, pairs: bool = True, topic_last: bool = True
) -> SearchPlan:
    """The plan for an already validated query, scope and (clamped) ``k``.

    A query with no terms, or with stop words only, reads the most recent items of each store
    and needs no vector; sketches are never searched by vector."""
    terms = query_terms(query, pairs=pairs, topic_last=topic_last)
    if all(term.casefold() in STOP_WORDS for term in terms):
        terms = []
    lanes = _LANES[scope]
    stores = {store for lane in lanes for store in lane}
    wants_vector = bool(terms) and ("facts" in stores or "raw" in stores)
    return SearchPlan(
        scope=scope,
        k=k,
        terms=tuple(terms),
        lanes=lanes,
        embed=wants_vector,
        phrase=query_phrase(query) if terms else None,
    )


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One validated search: the plan, whose memory (None: every user's, read_all checked by
    the caller), the query vector (None: text only), the session filter, the current session
    and its summary boundary (None: read with the excerpts)."""

    plan: SearchPlan
    owner: uuid.UUID | None
    query_vector: Sequence[float] | None = None
    session_id: str | None = None
    current_session_id: str | None = None
    summary_at: datetime | None = None


Row = FetchedRow

Ranked = list[tuple[Row, Via]]
"""Search rows in their final order, each with how it was found."""

LaneRunner = Callable[
    [Sequence[bool], Callable[[int, Connection], Awaitable[None]]], Awaitable[None]
]
"""Runs ``read(i, reads)`` for every lane ``i`` concurrently, each lane on Reads of its own
(never shared by two lanes), from the cached-plans engine where the lane's flag is set
(LaneEngines.run: PooledStatements holding one pooled connection for the lane)."""


@dataclass(slots=True)
class _Found:
    """What the lanes read; each store is filled by the one lane that reads it."""

    fact_hits: list[MemoryHit] = field(default_factory=list)
    fact_words: FactWords = field(default_factory=lambda: fact_words(()))
    """The facts read, for the raw excerpts' freshness marks."""
    raw: Ranked = field(default_factory=list)
    """Each row with its ``summary_at``: its session's last summary, when the session's row is
    the chunk's own user's."""
    sketches: list[MemoryHit] = field(default_factory=list)


def _score(via: Via, distance: float | None, terms_hit: int) -> float:
    if via == "vector" and distance is not None:
        return 1.0 - distance
    if via == "text":
        return float(terms_hit)
    return 0.0


def _ranked(row: Row, *, via: Via) -> tuple[Row, Via]:
    return row, via


def _fact_hit(row: Row, *, via: Via) -> MemoryHit:
    distance = row.get("distance")
    terms_hit = int(row.get("terms_hit") or 0)
    return MemoryHit(
        source_type="fact",
        text=row["value"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        timestamp=row["updated_at"],
        score=_score(via, distance, terms_hit),
        via=via,
        distance=distance,
        terms_hit=terms_hit,
        category=row["category"],
        key=row["key"],
        fact_id=row["id"],
    )


def _raw_hit(row: Row, *, via: Via, freshness: Freshness) -> MemoryHit:
    distance = row.get("distance")
    terms_hit = int(row.get("terms_hit") or 0)
    # The fused score that ordered the excerpts (CHUNK_TEXT_RANKING bm25), as search_chunks'
    # ChunkHit.score; the spec's ranking (terms) and recent rows carry none.
    fused = row.get("score")
    return MemoryHit(
        source_type="raw",
        text=row["content"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        timestamp=row["ended_at"],
        score=float(fused) if fused is not None else _score(via, distance, terms_hit),
        via=via,
        distance=distance,
        terms_hit=terms_hit,
        chunk_id=row["id"],
        start_seq=row["start_seq"],
        end_seq=row["end_seq"],
        breadcrumbs=list(row["breadcrumbs"] or ()),
        superseded_by=freshness.superseded_by,
        before_summary=freshness.before_summary,
    )


def _sketch_hit(row: FetchedRow, *, via: Via) -> MemoryHit:
    terms_hit = int(row["terms_hit"])
    return MemoryHit(
        source_type="sketch",
        text=row["value"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        timestamp=row["updated_at"],
        score=_score(via, None, terms_hit),
        via=via,
        terms_hit=terms_hit,
        key=row["key"],
    )


class UnifiedSearchService:
    """The tiered merge and the freshness marks, on the connections each call is given.

    Raw excerpts are ranked as search_chunks ranks them: ``text_ranking`` ``bm25`` (the BM25
    list and the vector hits closer than ``chunk_max_distance``, fused by weighted scores) or
    ``terms`` (the spec's: vector hits first, then text hits by distinct terms hit)."""

    def __init__(
        self,
        *,
        text_ranking: str = "bm25",
        chunk_max_distance: float = CHUNK_MAX_DISTANCE,
        prune_hints: PruneHints | None = None,
        chunk_graph_from: int = CHUNK_GRAPH_FROM,
        excerpt_words: ExcerptWords | None = None,
    ) -> None:
        """``excerpt_words``: the raw excerpts' content words kept between searches for their
        freshness marks (text.freshness.ExcerptWords; default: up to FRESHNESS_EXCERPT_WORDS
        words)."""
        self.text_ranking = text_ranking
        self.chunk_max_distance = chunk_max_distance
        self.prune_hints = prune_hints or PruneHints()
        self.chunk_graph_from = chunk_graph_from
        self.excerpt_words = ExcerptWords() if excerpt_words is None else excerpt_words

    @classmethod
    def from_settings(
        cls, settings: Settings, *, prune_hints: PruneHints | None = None
    ) -> UnifiedSearchService:
        """The service with CHUNK_TEXT_RANKING, CHUNK_MAX_DISTANCE and CHUNK_GRAPH_FROM from
        ``settings``; ``prune_hints`` shared with search_chunks' (ChunkService.prune_hints)."""
        return cls(
            text_ranking=settings.chunk_text_ranking,
            chunk_max_distance=settings.chunk_max_distance,
            prune_hints=prune_hints,
            chunk_graph_from=settings.chunk_graph_from,
        )

    def for_recall(self, min_similarity: float) -> UnifiedSearchService:
        """This service with raw vector hits kept down to ``min_similarity`` (1 - cosine
        distance), recall's own threshold (MEMORY_RECALL_MIN_SIMILARITY), in place of
        ``chunk_max_distance``: a search cut at CHUNK_MAX_DISTANCE would drop the hits a lower
        threshold lets through before recall ever sees them. The cut is strict (``distance <``),
        so it sits one float above ``1 - min_similarity``: a hit exactly at the threshold
        qualifies. The prune hints and the excerpts' words are shared."""
        return UnifiedSearchService(
            text_ranking=self.text_ranking,
            chunk_max_distance=math.nextafter(1.0 - min_similarity, math.inf),
            prune_hints=self.prune_hints,
            chunk_graph_from=self.chunk_graph_from,
            excerpt_words=self.excerpt_words,
        )

    async def search(self, lanes: LaneRunner, request: SearchRequest) -> list[MemoryHit]:
        """Facts (curated truth) first, then raw excerpts by relevance with their freshness
        marks, then sketches (the current session's first); ``k`` of each at most.

        ``lanes``: runs a read for each lane of ``request.plan.lanes`` concurrently, each on
        Reads of its own (never shared by two lanes; LaneEngines.run's hold one pooled
        connection for the lane), from the cached-plans engine where ``plan.cached_plans`` says so
        (unit_of_work.LaneEngines.run)."""
        plan = request.plan
        found = _Found()
        read_lanes: set[int] = set()
        # A user known small reads the raw history with a statement whose plan is every small
        # user's (ranked_lists' ``small``): that lane goes to cached plans too.
        small = "raw" in plan.stores and small_user(
            self.prune_hints, request.owner, terms=plan.raw_terms, text_ranking=self.text_ranking
        )
        cached_plans = [
            cached or (small and "raw" in lane)
            for cached, lane in zip(plan.cached_plans, plan.lanes, strict=True)
        ]

        async def read(index: int, conn: Connection) -> None:
            read_lanes.add(index)
            await self._read(conn, plan.lanes[index], request, found, small=small)

        await lanes(cached_plans, read)
        if len(read_lanes) != len(plan.lanes):
            # A runner that skipped a lane would drop a store from the answer without a word.
            raise RuntimeError(f"the lane runner read {len(read_lanes)} of {len(plan.lanes)} lanes")
        # Every fact read marks excerpts (up to FRESHNESS_FACTS); only k are shown. The
        # before_summary mark is each row's own: a boundary per session id would lend one
        # user's summary to another user's chunk filed under the same id (a global search).
        marks = mark_freshness(
            [_excerpt(row) for row, _ in found.raw],
            found.fact_words,
            {},
            known=self.excerpt_words,
        )
        raw = [
            _raw_hit(
                row,
                via=via,
                freshness=replace(mark, before_summary=_before_summary(row, request)),
            )
            for (row, via), mark in zip(found.raw, marks, strict=True)
        ]
        return [*found.fact_hits, *raw, *found.sketches]

    async def _read(
        self,
        conn: Connection,
        lane: Sequence[Store],
        request: SearchRequest,
        found: _Found,
        *,
        small: bool,
    ) -> None:
        """One lane's stores, one after the other. What can be made of a store's rows alone
        is made here, while the other lane may still be reading: the fact hits, and the facts'
        words for the freshness marks. ``small``: the raw history's user is known small (see
        ``search``)."""
        plan = request.plan
        for store in lane:
            if store == "facts":
                facts = await self._facts(conn, request)
                if "raw" in plan.stores:
                    found.fact_words = fact_words(_version(row) for row, _ in facts)
                if plan.scope in ("all", "facts"):
                    found.fact_hits = [_fact_hit(row, via=via) for row, via in facts[: plan.k]]
            elif store == "raw":
                found.raw = await self._raw(conn, request, small=small)
            else:
                found.sketches = await self._sketches(conn, request)

    async def _facts(self, conn: Connection, request: SearchRequest) -> Ranked:
        """The facts matching the query, best first: vector hits closer than
        FACT_MAX_DISTANCE, then text hits; no terms: the most recently updated. ``k`` of
        them, or FRESHNESS_FACTS when raw excerpts are to be marked."""
        plan = request.plan
        limit = max(plan.k, FRESHNESS_FACTS) if "raw" in plan.stores else plan.k
        repo = FactSearchRepository(session=conn)
        if not plan.terms:
            return [(row, "recent") for row in await repo.recent(request.owner, limit)]
        rows = await repo.search(
            request.owner, request.query_vector, plan.terms, limit, FACT_MAX_DISTANCE, plan.phrase
        )
        return rank_hits(rows, limit, _ranked, recency="updated_at")

    async def _raw(self, conn: Connection, request: SearchRequest, *, small: bool) -> Ranked:
        """The raw excerpts, ranked as search_chunks ranks them (see the class; no terms: the
        most recent), each with its session's summary boundary (``summary_at``), in one
        statement; ``small``: with the small-user statement (ranked_lists)."""
        repo = ChunkSearchRepository(session=conn)
        plan = request.plan
        k = plan.k
        ranked: Ranked
        terms = plan.raw_terms
        if not terms:
            recent = await repo.recent(request.owner, request.session_id, k, with_summary_at=True)
            ranked = [(row, "recent") for row in recent]
        elif text_ranking_for(self.text_ranking, terms) == "terms":
            rows = await repo.search(
                request.owner,
                request.session_id,
                request.query_vector,
                terms,
                k,
                self.chunk_max_distance,
                with_summary_at=True,
                graph_from=self.chunk_graph_from,
            )
            ranked = rank_hits(rows, k, _ranked, recency="ended_at")
        else:
            vector, text = await ranked_lists(
                repo,
                request.owner,
                request.session_id,
                request.query_vector,
                terms,
                k,
                self.chunk_max_distance,
                with_summary_at=True,
                hints=self.prune_hints,
                small=small,
                graph_from=self.chunk_graph_from,
            )
            ranked = fuse_hits(
                vector,
                text,
                k,
                _ranked,
                recency="ended_at",
                vector_weight=CHUNK_FUSION_VECTOR_WEIGHT,
            )
        return _without_repeats(ranked)

    async def _sketches(self, conn: Connection, request: SearchRequest) -> list[MemoryHit]:
        """The scratchpad's entries matching any term (current session first, then terms
        matched, then the newest); no terms: the newest, current session first."""
        rows = await KvSearchRepository(session=conn).search(
            request.owner,
            SKETCH_SCOPE,
            request.plan.terms,
            limit=request.plan.k,
            session_id=request.session_id,
            prefer_session_id=request.current_session_id,
            with_value=True,  # a cleared section ("empty clears it") is no hit
        )
        via: Via = "text" if request.plan.terms else "recent"
        return [_sketch_hit(row, via=via) for row in rows]


def _without_repeats(ranked: Ranked) -> Ranked:
    """The excerpts less those whose messages better-ranked ones of the same session hold
    (text.hits.SeqCoverage: a host's chunk of messages 1–2 and compression's of 1 and of 2
    showed the messages twice); a session of each user apart (a global search)."""
    coverage = SeqCoverage()
    kept: Ranked = []
    for row, via in ranked:
        group = (row["user_id"], row["session_id"])
        if coverage.covers(group, row["start_seq"], row["end_seq"]):
            continue
        coverage.add(group, row["start_seq"], row["end_seq"])
        kept.append((row, via))
    return kept


def _before_summary(row: Row, request: SearchRequest) -> bool:
    """The excerpt ended before its session's last summary: ``request.summary_at`` for the
    current session's excerpts, else the row's own ``summary_at`` (None: no summary, or the
    session's row is another user's). In a global search the current session's boundary goes
    only to excerpts of that session's owner (those whose own ``summary_at`` is set): another
    user's chunk filed under the same id is not of that session."""
    boundary = row["summary_at"]
    if (
        request.summary_at is not None
        and row["session_id"] == request.current_session_id
        and (request.owner is not None or boundary is not None)
    ):
        boundary = request.summary_at
    return boundary is not None and row["ended_at"] < boundary


def _excerpt(row: Row) -> RawExcerpt:
    return RawExcerpt(
        user_id=row["user_id"],
        session_id=row["session_id"],
        ended_at=row["ended_at"],
        content=row["content"],
        breadcrumbs=row["breadcrumbs"] or (),
        chunk_id=row["id"],
    )


def _version(row: Row) -> FactVersion:
    return FactVersion(
        user_id=row["user_id"], key=row["key"], value=row["value"], updated_at=row["updated_at"]
    )
