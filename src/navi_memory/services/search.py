"""Unified search: one read over facts, raw history and sketches — tiered (facts, then raw
excerpts by relevance, then sketches), with provenance and freshness marks on every hit.

The caller (a facade) validates, embeds the query once and gives one connection per store the
plan names; the store queries then run concurrently, each on its own connection.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.constants import (
    CHUNK_MAX_DISTANCE,
    FACT_MAX_DISTANCE,
    SEARCH_K_MAX,
    SKETCH_SCOPE,
)
from navi_memory.repositories.chunks import ChunkRepository
from navi_memory.repositories.facts import FactSearchRepository
from navi_memory.repositories.kv import KvSearchRepository
from navi_memory.repositories.sessions import SummaryBoundaryRepository
from navi_memory.schemas import MemoryHit
from navi_memory.services.ranking import rank_hits
from navi_memory.text.freshness import FactVersion, RawExcerpt, mark_freshness
from navi_memory.text.hits import SearchScope
from navi_memory.text.terms import STOP_WORDS, query_terms

__all__ = [
    "FRESHNESS_FACTS",
    "SearchPlan",
    "SearchRequest",
    "Store",
    "UnifiedSearchService",
    "plan_search",
]

Store = Literal["facts", "raw", "sketches"]
"""One store of unified search; each gets a connection of its own."""

Connection = AsyncSession | AsyncConnection

FRESHNESS_FACTS: Final = SEARCH_K_MAX
"""How many of the facts matching the query the freshness rule compares raw excerpts with
(the best-ranked ones; the first ``k`` of them are also the fact hits)."""

_STORES: Final[dict[SearchScope, tuple[Store, ...]]] = {
    "all": ("facts", "raw", "sketches"),
    "facts": ("facts",),
    # Raw hits need the facts matching the query for their freshness marks.
    "raw": ("facts", "raw"),
    "sketches": ("sketches",),
}

Via = Literal["vector", "text", "recent"]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """What one search reads: its scope, ``k`` per store, the query's terms (none: the most
    recent items of each store), the stores it needs a connection for, and whether the query
    vector is wanted."""

    scope: SearchScope
    k: int
    terms: tuple[str, ...]
    stores: tuple[Store, ...]
    embed: bool


def plan_search(query: str, scope: SearchScope, k: int) -> SearchPlan:
    """The plan for an already validated query, scope and (clamped) ``k``.

    A query with no terms, or with stop words only, reads the most recent items of each store
    and needs no vector; sketches are never searched by vector."""
    terms = query_terms(query)
    if all(term.casefold() in STOP_WORDS for term in terms):
        terms = []
    stores = _STORES[scope]
    wants_vector = bool(terms) and ("facts" in stores or "raw" in stores)
    return SearchPlan(scope=scope, k=k, terms=tuple(terms), stores=stores, embed=wants_vector)


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One validated search: the plan, whose memory (None: every user's, read_all checked by
    the caller), the query vector (None: text only), the session filter, the current session
    and its summary boundary (None: looked up)."""

    plan: SearchPlan
    owner: uuid.UUID | None
    query_vector: Sequence[float] | None = None
    session_id: str | None = None
    current_session_id: str | None = None
    summary_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class _Raw:
    hits: list[MemoryHit]
    boundaries: dict[str, datetime]


def _score(via: Via, distance: float | None, terms_hit: int) -> float:
    if via == "vector" and distance is not None:
        return 1.0 - distance
    if via == "text":
        return float(terms_hit)
    return 0.0


def _fact_hit(row: RowMapping, *, via: Via) -> MemoryHit:
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


def _raw_hit(row: RowMapping, *, via: Via) -> MemoryHit:
    distance = row.get("distance")
    terms_hit = int(row.get("terms_hit") or 0)
    return MemoryHit(
        source_type="raw",
        text=row["content"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        timestamp=row["ended_at"],
        score=_score(via, distance, terms_hit),
        via=via,
        distance=distance,
        terms_hit=terms_hit,
        chunk_id=row["id"],
        start_seq=row["start_seq"],
        end_seq=row["end_seq"],
        breadcrumbs=list(row["breadcrumbs"] or ()),
    )


def _sketch_hit(row: RowMapping, *, via: Via) -> MemoryHit:
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
    """The tiered merge and the freshness marks, on the connections each call is given."""

    async def search(
        self, connections: Mapping[Store, Connection], request: SearchRequest
    ) -> list[MemoryHit]:
        """Facts (curated truth) first, then raw excerpts by relevance with their freshness
        marks, then sketches (the current session's first); ``k`` of each at most.

        ``connections`` holds one connection per store of ``request.plan.stores``; never one
        shared by two stores, as the stores are read concurrently."""
        plan = request.plan
        facts_call = (
            self.facts(connections["facts"], request, self._facts_limit(plan))
            if "facts" in plan.stores
            else _nothing()
        )
        raw_call = self.raw(connections["raw"], request) if "raw" in plan.stores else _no_raw()
        sketch_call = (
            self.sketches(connections["sketches"], request)
            if "sketches" in plan.stores
            else _nothing()
        )
        fact_hits, raw, sketch_hits = await _concurrently(facts_call, raw_call, sketch_call)
        marked = self.mark(raw.hits, fact_hits, raw.boundaries)
        shown_facts = fact_hits[: plan.k] if plan.scope in ("all", "facts") else []
        return [*shown_facts, *marked, *sketch_hits]

    @staticmethod
    def _facts_limit(plan: SearchPlan) -> int:
        return max(plan.k, FRESHNESS_FACTS) if "raw" in plan.stores else plan.k

    async def facts(self, conn: Connection, request: SearchRequest, limit: int) -> list[MemoryHit]:
        """The facts matching the query, best first: vector hits closer than
        FACT_MAX_DISTANCE, then text hits; no terms: the most recently updated."""
        repo = FactSearchRepository(session=conn)
        if not request.plan.terms:
            return [_fact_hit(row, via="recent") for row in await repo.recent(request.owner, limit)]
        rows = await repo.search(
            request.owner, request.query_vector, request.plan.terms, limit, FACT_MAX_DISTANCE
        )
        return rank_hits(rows, limit, _fact_hit, recency="updated_at")

    async def raw(self, conn: Connection, request: SearchRequest) -> _Raw:
        """The raw excerpts (vector hits closer than CHUNK_MAX_DISTANCE, then text hits; no
        terms: the most recent) and, in one more query on the same connection, the summary
        boundaries of their sessions."""
        repo = ChunkRepository(session=conn)
        k = request.plan.k
        if request.plan.terms:
            rows = await repo.search(
                request.owner,
                request.session_id,
                request.query_vector,
                request.plan.terms,
                k,
                CHUNK_MAX_DISTANCE,
            )
            hits = rank_hits(rows, k, _raw_hit, recency="ended_at")
        else:
            recent = await repo.recent(request.owner, request.session_id, k)
            hits = [_raw_hit(row, via="recent") for row in recent]
        given = request.current_session_id if request.summary_at is not None else None
        wanted = sorted(
            {
                (hit.session_id, hit.user_id)
                for hit in hits
                if hit.session_id is not None
                and hit.user_id is not None
                and hit.session_id != given
            }
        )
        boundaries = await SummaryBoundaryRepository(session=conn).latest_summaries(wanted)
        if given is not None and request.summary_at is not None:
            boundaries[given] = request.summary_at
        return _Raw(hits, boundaries)

    async def sketches(self, conn: Connection, request: SearchRequest) -> list[MemoryHit]:
        """The scratchpad's entries matching any term (current session first, then terms
        matched, then the newest); no terms: the newest, current session first."""
        rows = await KvSearchRepository(session=conn).search(
            request.owner,
            SKETCH_SCOPE,
            request.plan.terms,
            limit=request.plan.k,
            session_id=request.session_id,
            prefer_session_id=request.current_session_id,
        )
        via: Via = "text" if request.plan.terms else "recent"
        return [_sketch_hit(row, via=via) for row in rows]

    @staticmethod
    def mark(
        raw_hits: Sequence[MemoryHit],
        facts: Sequence[MemoryHit],
        boundaries: Mapping[str, datetime],
    ) -> list[MemoryHit]:
        """``raw_hits`` with their freshness marks (text.freshness, docs/memory.md): a fact
        marks only excerpts of its own user."""
        excerpts = [
            RawExcerpt(
                user_id=hit.user_id,
                session_id=hit.session_id or "",
                ended_at=hit.timestamp,
                content=hit.text,
                breadcrumbs=hit.breadcrumbs,
            )
            for hit in raw_hits
        ]
        versions = [
            FactVersion(
                user_id=fact.user_id, key=fact.key or "", value=fact.text, updated_at=fact.timestamp
            )
            for fact in facts
        ]
        marks = mark_freshness(excerpts, versions, boundaries)
        return [
            hit.model_copy(
                update={"superseded_by": mark.superseded_by, "before_summary": mark.before_summary}
            )
            for hit, mark in zip(raw_hits, marks, strict=True)
        ]


async def _nothing() -> list[MemoryHit]:
    return []


async def _no_raw() -> _Raw:
    return _Raw([], {})


async def _concurrently(
    facts: Awaitable[list[MemoryHit]],
    raw: Awaitable[_Raw],
    sketches: Awaitable[list[MemoryHit]],
) -> tuple[list[MemoryHit], _Raw, list[MemoryHit]]:
    """The three store reads run concurrently and every one to its end; then the first failure,
    if any, is raised. (Plain gather would leave the others running while the caller closes
    their connections.)"""
    fact_hits, raw_result, sketch_hits = await asyncio.gather(
        facts, raw, sketches, return_exceptions=True
    )
    if isinstance(fact_hits, BaseException):
        raise fact_hits
    if isinstance(raw_result, BaseException):
        raise raw_result
    if isinstance(sketch_hits, BaseException):
        raise sketch_hits
    return fact_hits, raw_result, sketch_hits
