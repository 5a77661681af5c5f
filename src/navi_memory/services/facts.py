"""Facts: upsert with dedupe/merge, expiry and revival, delete, unmerge, search and listing, the
user's summary and the extraction state of a session.

The merge rule: a key that ``text.keys.same_key`` calls another spelling of a key the user
already holds in the same category is merged — the new spelling's row holds the value, the older
rows are hidden behind it (``merged_into``), never deleted. docs/memory.md has the whole rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.constants import FACT_MAX_DISTANCE, PERMISSION_READ_ALL
from navi_memory.errors import InvalidInputError, NotFoundError
from navi_memory.models import FactRow
from navi_memory.repositories.facts import (
    FACT_SORT_COLUMNS,
    FactRepository,
    FactSearchRepository,
)
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.request_context import current_user_id, has_permission
from navi_memory.schemas import Fact, FactHit
from navi_memory.services.ranking import hit_fields, rank_hits
from navi_memory.text.keys import same_key

__all__ = [
    "CONFIDENCE_BY_SOURCE",
    "FACT_SORT_KEYS",
    "SOURCES",
    "FactService",
    "FactWrite",
    "UpsertOutcome",
]

UpsertOutcome = Literal["inserted", "updated", "verified", "revived", "merged"]

SOURCES: Final = ("conversation", "tool_call", "auto_discovery", "user_explicit")
"""Where a fact came from (spec: memory tool)."""

CONFIDENCE_BY_SOURCE: Final = {"tool_call": 95, "auto_discovery": 95, "user_explicit": 90}
"""Confidence when the caller gives none (spec: extractor); anything else gets
constants.DEFAULT_CONFIDENCE."""

FACT_SORT_KEYS: Final = frozenset(FACT_SORT_COLUMNS)
"""What get_all_facts may sort by; anything else is refused before SQL is built."""


@dataclass(frozen=True, slots=True)
class FactWrite:
    """A validated fact to write, with its embedding (None when none could be had)."""

    user_id: uuid.UUID
    category: str
    key: str
    value: str
    source: str
    confidence: int
    expires_days: float | None
    source_context: str | None
    embedding: Sequence[float] | None
    session_id: str | None = None
    """The session the fact is written from (provenance); it moves with ``updated_at``."""


def to_fact(row: FactRow | RowMapping) -> Fact:
    """A Fact from an ORM row (vector loaded) or a Core row with ``has_embedding``."""
    if isinstance(row, FactRow):
        return Fact.model_validate(row, from_attributes=True).model_copy(
            update={"has_embedding": row.embedding is not None}
        )
    return Fact.model_validate(dict(row))


def to_fact_hit(row: RowMapping, **score: Any) -> FactHit:
    return FactHit.model_validate(hit_fields(row, score))


def may_change(owner: uuid.UUID | None) -> bool:
    """A row found by id: the current user's own; with no current user (an admin context),
    anyone's with read_all. Acting for one user never changes another's row."""
    current = current_user_id()
    if current is not None:
        return owner == current
    return has_permission(PERMISSION_READ_ALL)


def may_read(owner: uuid.UUID | None) -> bool:
    """A row found by id: the current user's own; anyone's with read_all."""
    if has_permission(PERMISSION_READ_ALL):
        return True
    current = current_user_id()
    return current is not None and owner == current


class FactService:
    """The fact rules, on the session (or, for searches, the connection) each call is given."""

    # --- writes -----------------------------------------------------------------------------

    async def upsert(
        self, session: AsyncSession, write: FactWrite, *, dedupe: bool
    ) -> tuple[Fact, UpsertOutcome]:
        facts = FactRepository(session=session)
        await facts.lock_category(write.user_id, write.category)
        now = await facts.now()
        expires_at = (
            None if write.expires_days is None else now + timedelta(days=write.expires_days)
        )

        target = await facts.find_key(write.user_id, write.category, write.key, hidden=False)
        if target is None:
            # A hidden spelling written again goes to the fact it was merged into: the merge
            # said they are one fact, and only unmerge_fact undoes that.
            hidden = await facts.find_key(write.user_id, write.category, write.key, hidden=True)
            if hidden is not None and hidden.merged_into is not None:
                target = await facts.get(hidden.merged_into)

        spellings: list[int] = []
        if dedupe:
            spellings = [
                fact_id
                for fact_id, key in await facts.visible_keys(write.user_id, write.category)
                if same_key(key, write.key) and (target is None or fact_id != target.id)
            ]

        outcome: UpsertOutcome
        if target is None:
            row = await facts.insert(
                {
                    "user_id": write.user_id,
                    "category": write.category,
                    "key": write.key,
                    "value": write.value,
                    "embedding": None if write.embedding is None else list(write.embedding),
                    "source": write.source,
                    "confidence": write.confidence,
                    "expires_at": expires_at,
                    "source_context": write.source_context,
                    "last_verified_at": now,
                    "session_id": write.session_id,
                }
            )
            outcome = "merged" if spellings else "inserted"
        else:
            row, outcome = await _write_over(facts, target, write, now, expires_at)
            if spellings:
                outcome = "merged"
        await facts.hide_behind(spellings, row.id)
        return to_fact(row), outcome

    async def delete(
        self, session: AsyncSession, user_id: uuid.UUID, key: str, category: str | None
    ) -> int:
        facts = FactRepository(session=session)
        # The same per-category locks as upsert (taken in a fixed order, so two deletes cannot
        # deadlock): an upsert never updates a row this delete is removing, nor the other way.
        categories = [category] if category is not None else []
        if category is None:
            categories = await facts.categories_with_key(user_id, key)
        for name in sorted(categories):
            await facts.lock_category(user_id, name)
        ids = await facts.ids_for_delete(user_id, key, category)
        return await facts.delete_with_hidden(ids)

    async def unmerge(self, session: AsyncSession, fact_id: int) -> Fact:
        """Make a hidden row visible again, if the caller may change it (``may_change``)."""
        facts = FactRepository(session=session)
        row = await facts.get(fact_id)
        if row is None or not may_change(row.user_id):
            raise NotFoundError(f"fact {fact_id} does not exist")
        if row.user_id is not None:
            await facts.lock_category(row.user_id, row.category)
        if row.merged_into is None:
            raise InvalidInputError(f"fact {row.id} is not merged into another fact")
        clash = await facts.find_key(row.user_id, row.category, row.key, hidden=False)
        if clash is not None:
            raise InvalidInputError(
                f"cannot unmerge fact {row.id}: fact {clash.id} already uses the key "
                f"{row.category}/{row.key}; delete or rename that one first"
            )
        await facts.unhide(row.id)
        refreshed = await facts.get(row.id)
        if refreshed is None:  # pragma: no cover - deleted under our lock
            raise NotFoundError(f"fact {row.id} does not exist")
        await session.refresh(refreshed)
        return to_fact(refreshed)

    async def purge_expired(
        self, session: AsyncSession, user_id: uuid.UUID | None, *, dry_run: bool
    ) -> tuple[int, int]:
        """Delete the facts past their expiry (every user's for None) with the rows hidden
        behind them; returns (expired, hidden with them). ``dry_run`` only counts."""
        facts = FactRepository(session=session)
        counts = await facts.expired(user_id)
        if not dry_run:
            await facts.delete_expired(user_id)
        return counts

    # --- reads ------------------------------------------------------------------------------

    async def get(self, session: AsyncSession, fact_id: int) -> Fact:
        """One fact by id, hidden or expired alike, if the caller may read it (``may_read``)."""
        row = await FactRepository(session=session).get(fact_id)
        if row is None or not may_read(row.user_id):
            raise NotFoundError(f"fact {fact_id} does not exist")
        return to_fact(row)

    async def search(
        self,
        conn: AsyncSession | AsyncConnection,
        scope: uuid.UUID | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
    ) -> list[FactHit]:
        """Vector hits closer than FACT_MAX_DISTANCE (nearest first), then text hits; no terms:
        the most recently updated facts."""
        repo = FactSearchRepository(session=conn)
        if not terms:
            return [to_fact_hit(row, via="recent") for row in await repo.recent(scope, limit)]
        rows = await repo.search(scope, query_vector, terms, limit, FACT_MAX_DISTANCE)
        return rank_hits(rows, limit, to_fact_hit, recency="updated_at")

    async def list_facts(
        self,
        session: AsyncSession,
        scope: uuid.UUID | None,
        *,
        search: str | None,
        include_merged: bool,
        sort_by: str,
        descending: bool,
        limit: int | None,
        offset: int,
        category: str | None = None,
    ) -> list[Fact]:
        rows = await FactRepository(session=session).list_facts(
            scope,
            category=category,
            search=search,
            include_merged=include_merged,
            sort_by=sort_by,
            descending=descending,
            limit=limit,
            offset=offset,
        )
        return [to_fact(row) for row in rows]

    async def count(
        self, session: AsyncSession, scope: uuid.UUID | None, *, include_merged: bool
    ) -> int:
        return await FactRepository(session=session).count(scope, include_merged=include_merged)

    async def categories(
        self, session: AsyncSession, scope: uuid.UUID | None
    ) -> list[tuple[str, int]]:
        return await FactRepository(session=session).category_counts(scope)

    # --- summary ----------------------------------------------------------------------------

    async def get_summary(self, session: AsyncSession, scope: uuid.UUID | None) -> str | None:
        return await FactRepository(session=session).get_summary(scope)

    async def summary_updated_at(
        self, session: AsyncSession, user_id: uuid.UUID
    ) -> datetime | None:
        return await FactRepository(session=session).summary_updated_at(user_id)

    async def set_summary(self, session: AsyncSession, user_id: uuid.UUID, content: str) -> None:
        await FactRepository(session=session).set_summary(user_id, content)

    # --- extraction state -------------------------------------------------------------------

    async def mark_extracted(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        session_id: str,
        *,
        at: datetime | None = None,
    ) -> datetime:
        """Record the session as processed ``at`` (None: now); NotFoundError when it is
        someone else's."""
        repo = SessionRepository(session=session)
        if await repo.extraction_owner(session_id) not in (None, user_id):
            raise NotFoundError(f"no session {session_id!r} for this user")
        return await repo.mark_extracted(session_id, user_id, at=at)

    async def extracted_at(
        self, session: AsyncSession, scope: uuid.UUID | None, session_id: str
    ) -> datetime | None:
        """When the session was processed; None if never — or if it is not ``scope``'s."""
        repo = SessionRepository(session=session)
        if scope is not None and await repo.extraction_owner(session_id) != scope:
            return None
        return await repo.extracted_at(session_id)


async def _write_over(
    facts: FactRepository,
    row: FactRow,
    write: FactWrite,
    now: datetime,
    expires_at: datetime | None,
) -> tuple[FactRow, UpsertOutcome]:
    expired = row.expires_at is not None and row.expires_at <= now
    values: dict[str, Any]
    outcome: UpsertOutcome
    if row.value == write.value:
        values = {"last_verified_at": now}
        outcome = "verified"
        if expired:
            values["expires_at"] = expires_at
            outcome = "revived"
        if row.embedding is None and write.embedding is not None:
            values["embedding"] = list(write.embedding)
    else:
        values = {
            "value": write.value,
            # A vector of the old value would be wrong; NULL is filled by backfill.
            "embedding": None if write.embedding is None else list(write.embedding),
            "source": write.source,
            "confidence": write.confidence,
            "source_context": write.source_context,
            "expires_at": expires_at,
            "updated_at": now,
            "last_verified_at": now,
            "session_id": write.session_id,
        }
        outcome = "revived" if expired else "updated"
    return await facts.update(row.id, values), outcome
