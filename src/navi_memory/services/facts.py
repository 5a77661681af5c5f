"""Fact writes: upsert with dedupe/merge, expiry and revival, delete, unmerge.

The merge rule: a key that ``text.keys.same_key`` calls another spelling of a key the user
already holds in the same category is merged — the new spelling's row holds the value, the older
rows are hidden behind it (``merged_into``), never deleted. docs/memory.md has the whole rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.errors import InvalidInputError, NotFoundError
from navi_memory.models import FactRow
from navi_memory.repositories.facts import FactRepository
from navi_memory.text.keys import same_key

__all__ = ["FactService", "FactWrite", "UpsertOutcome"]

UpsertOutcome = Literal["inserted", "updated", "verified", "revived", "merged"]


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


class FactService:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session
        self.facts = FactRepository(session=session)

    async def upsert(self, write: FactWrite, *, dedupe: bool) -> tuple[FactRow, UpsertOutcome]:
        await self.facts.lock_category(write.user_id, write.category)
        now: datetime = await self.session.scalar(select(func.now()))  # type: ignore[assignment]
        expires_at = (
            None if write.expires_days is None else now + timedelta(days=write.expires_days)
        )

        target = await self.facts.find_key(write.user_id, write.category, write.key, hidden=False)
        if target is None:
            # A hidden spelling written again goes to the fact it was merged into: the merge
            # said they are one fact, and only unmerge_fact undoes that.
            hidden = await self.facts.find_key(
                write.user_id, write.category, write.key, hidden=True
            )
            if hidden is not None and hidden.merged_into is not None:
                target = await self.facts.get(hidden.merged_into)

        spellings: list[int] = []
        if dedupe:
            spellings = [
                fact_id
                for fact_id, key in await self.facts.visible_keys(write.user_id, write.category)
                if same_key(key, write.key) and (target is None or fact_id != target.id)
            ]

        outcome: UpsertOutcome
        if target is None:
            row = await self.facts.insert(
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
                }
            )
            outcome = "merged" if spellings else "inserted"
        else:
            row, outcome = await self._write_over(target, write, now, expires_at)
            if spellings:
                outcome = "merged"
        await self.facts.hide_behind(spellings, row.id)
        return row, outcome

    async def _write_over(
        self, row: FactRow, write: FactWrite, now: datetime, expires_at: datetime | None
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
            }
            outcome = "revived" if expired else "updated"
        return await self.facts.update(row.id, values), outcome

    async def delete(self, user_id: uuid.UUID, key: str, category: str | None) -> int:
        # The same per-category locks as upsert (taken in a fixed order, so two deletes cannot
        # deadlock): an upsert never updates a row this delete is removing, nor the other way.
        categories = [category] if category is not None else []
        if category is None:
            categories = await self.facts.categories_with_key(user_id, key)
        for name in sorted(categories):
            await self.facts.lock_category(user_id, name)
        ids = await self.facts.ids_for_delete(user_id, key, category)
        return await self.facts.delete_with_hidden(ids)

    async def unmerge(self, row: FactRow) -> FactRow:
        if row.merged_into is None:
            raise InvalidInputError(f"fact {row.id} is not merged into another fact")
        clash = await self.facts.find_key(row.user_id, row.category, row.key, hidden=False)
        if clash is not None:
            raise InvalidInputError(
                f"cannot unmerge fact {row.id}: fact {clash.id} already uses the key "
                f"{row.category}/{row.key}; delete or rename that one first"
            )
        await self.facts.unhide(row.id)
        refreshed = await self.facts.get(row.id)
        if refreshed is None:  # pragma: no cover - deleted under our lock
            raise NotFoundError(f"fact {row.id} does not exist")
        await self.session.refresh(refreshed)
        return refreshed
