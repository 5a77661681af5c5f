"""SQL for memory_facts and memory_summary."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    RowMapping,
    Select,
    and_,
    delete,
    func,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from navi_memory.errors import NotFoundError
from navi_memory.models import FactRow, SummaryRow
from navi_memory.repositories.like import contains_pattern
from navi_memory.repositories.vectors import HybridSearch

__all__ = ["FACT_SORT_COLUMNS", "FactRepository", "FactSearchRepository"]

FACT_SORT_COLUMNS = {
    "id": FactRow.id,
    "category": FactRow.category,
    "key": FactRow.key,
    "value": FactRow.value,
    "source": FactRow.source,
    "confidence": FactRow.confidence,
    "created_at": FactRow.created_at,
    "updated_at": FactRow.updated_at,
    "expires_at": FactRow.expires_at,
    "last_verified_at": FactRow.last_verified_at,
}
"""The columns get_all_facts may sort by; anything else is refused before SQL is built."""


_FACT_COLUMNS = (
    "f.id, f.user_id, f.category, f.key, f.value, f.source, f.confidence, f.expires_at, "
    "f.last_verified_at, f.source_context, f.merged_into, f.created_at, f.updated_at, "
    "f.session_id"
)
"""Every memory_facts column a Fact shows, the vector excepted (text SQL form)."""


def fact_columns() -> list[ColumnElement[Any] | InstrumentedAttribute[Any]]:
    """The same columns for Core selects, with ``has_embedding`` instead of the vector: reading
    768 floats back as text and parsing them costs more than the rest of a search."""
    return [
        FactRow.id,
        FactRow.user_id,
        FactRow.category,
        FactRow.key,
        FactRow.value,
        FactRow.source,
        FactRow.confidence,
        FactRow.expires_at,
        FactRow.last_verified_at,
        FactRow.source_context,
        FactRow.merged_into,
        FactRow.created_at,
        FactRow.updated_at,
        FactRow.session_id,
        FactRow.embedding.is_not(None).label("has_embedding"),
    ]


def fact_embedding_text() -> ColumnElement[str]:
    """``llm.embedding_text_for_fact`` in SQL: "<category> / <key>: <value>"."""
    return FactRow.category + " / " + FactRow.key + ": " + FactRow.value


def owner_filter(user_id: uuid.UUID | None) -> ColumnElement[bool]:
    """Rows of one user, or every row for a global read (None)."""
    if user_id is None:
        return literal(True)
    return FactRow.user_id == user_id


def not_expired() -> ColumnElement[bool]:
    return or_(FactRow.expires_at.is_(None), FactRow.expires_at > func.now())


def visible() -> ColumnElement[bool]:
    """What every read path sees: not hidden behind a merge, not expired."""
    return and_(FactRow.merged_into.is_(None), not_expired())


def text_match(terms: Sequence[str]) -> ColumnElement[bool]:
    # One ILIKE per column and term, OR-ed: PostgreSQL can bitmap-OR trigram index scans for
    # this shape, which it cannot do for `ILIKE ANY (array)`.
    return or_(
        *(
            column.ilike(contains_pattern(term), escape="\\")
            for term in terms
            for column in (FactRow.category, FactRow.key, FactRow.value)
        )
    )


class FactRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    # --- locking ----------------------------------------------------------------------------

    async def lock_category(self, user_id: uuid.UUID, category: str) -> None:
        """Serialise writers of one (user, category) until the transaction ends.

        Dedupe compares a new key with every key of the category, so a unique index alone cannot
        stop two spellings landing at once; a transaction-scoped advisory lock can.
        """
        await self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:scope, 0))"),
            {"scope": f"memory_facts:{user_id}:{category}"},
        )

    async def now(self) -> datetime:
        """The transaction's time (``now()``): expiry and verification are stamped with it."""
        now: datetime = await self.session.scalar(select(func.now()))  # type: ignore[assignment]
        return now

    # --- single rows ------------------------------------------------------------------------

    async def get(self, fact_id: int) -> FactRow | None:
        return await self.session.get(FactRow, fact_id)

    async def find_key(
        self, user_id: uuid.UUID | None, category: str, key: str, *, hidden: bool
    ) -> FactRow | None:
        """The visible row (or, with hidden=True, a hidden row) holding exactly this key."""
        merged = FactRow.merged_into.is_not(None) if hidden else FactRow.merged_into.is_(None)
        return await self.session.scalar(
            select(FactRow)
            .where(
                FactRow.user_id.is_(None) if user_id is None else FactRow.user_id == user_id,
                FactRow.category == category,
                FactRow.key == key,
                merged,
            )
            .order_by(FactRow.id.desc())
            .limit(1)
        )

    async def visible_keys(self, user_id: uuid.UUID, category: str) -> list[tuple[int, str]]:
        """(id, key) of every visible row in the category, expired ones included."""
        rows = await self.session.execute(
            select(FactRow.id, FactRow.key).where(
                FactRow.user_id == user_id,
                FactRow.category == category,
                FactRow.merged_into.is_(None),
            )
        )
        return [(row.id, row.key) for row in rows]

    async def insert(self, values: dict[str, Any]) -> FactRow:
        row = FactRow(**values)
        self.session.add(row)
        await self.session.flush()
        await self.session.refresh(row)
        return row

    async def update(self, fact_id: int, values: dict[str, Any]) -> FactRow:
        await self.session.execute(update(FactRow).where(FactRow.id == fact_id).values(**values))
        row = await self.session.get(FactRow, fact_id, populate_existing=True)
        if row is None:  # deleted by a writer that did not take the category lock
            raise NotFoundError(f"fact {fact_id} was deleted while it was being written")
        return row

    async def hide_behind(self, hidden_ids: Sequence[int], survivor_id: int) -> None:
        """Hide rows behind ``survivor_id``, and re-point rows hidden behind them (no chains)."""
        if not hidden_ids:
            return
        await self.session.execute(
            update(FactRow)
            .where(or_(FactRow.id.in_(hidden_ids), FactRow.merged_into.in_(hidden_ids)))
            .values(merged_into=survivor_id)
        )

    async def unhide(self, fact_id: int) -> None:
        await self.session.execute(
            update(FactRow).where(FactRow.id == fact_id).values(merged_into=None)
        )

    # --- delete -----------------------------------------------------------------------------

    async def categories_with_key(self, user_id: uuid.UUID, key: str) -> list[str]:
        rows = await self.session.scalars(
            select(FactRow.category)
            .where(FactRow.user_id == user_id, FactRow.key == key)
            .distinct()
        )
        return list(rows)

    async def ids_for_delete(self, user_id: uuid.UUID, key: str, category: str | None) -> list[int]:
        """Visible rows named by ``key`` directly or through a hidden spelling of theirs."""
        named = select(FactRow.id, FactRow.merged_into).where(
            FactRow.user_id == user_id, FactRow.key == key
        )
        if category is not None:
            named = named.where(FactRow.category == category)
        rows = (await self.session.execute(named)).all()
        return sorted({row.merged_into or row.id for row in rows})

    async def delete_with_hidden(self, ids: Sequence[int]) -> int:
        """Delete the hidden rows pointing at ``ids`` first, then the rows. Returns len(ids)."""
        if not ids:
            return 0
        await self.session.execute(delete(FactRow).where(FactRow.merged_into.in_(ids)))
        result = await self.session.execute(
            delete(FactRow).where(FactRow.id.in_(ids)).returning(FactRow.id)
        )
        return len(result.all())

    async def expired(self, user_id: uuid.UUID | None) -> tuple[int, int]:
        """How many facts are past their expiry, and how many other rows are hidden behind them
        (they go with them: merged_into cascades). ``user_id`` None: every user's."""
        gone = select(FactRow.id).where(FactRow.expires_at <= func.now())
        if user_id is not None:
            gone = gone.where(FactRow.user_id == user_id)
        expired = int(
            await self.session.scalar(select(func.count()).select_from(gone.subquery())) or 0
        )
        behind = int(
            await self.session.scalar(
                select(func.count()).where(FactRow.merged_into.in_(gone), FactRow.id.not_in(gone))
            )
            or 0
        )
        return expired, behind

    async def delete_expired(self, user_id: uuid.UUID | None) -> None:
        """Delete the facts past their expiry (the rows hidden behind them go by the cascade)."""
        stmt = delete(FactRow).where(FactRow.expires_at <= func.now())
        if user_id is not None:
            stmt = stmt.where(FactRow.user_id == user_id)
        await self.session.execute(stmt)

    # --- reads ------------------------------------------------------------------------------

    def _listing(
        self,
        user_id: uuid.UUID | None,
        search: str | None,
        include_merged: bool,
        category: str | None = None,
    ) -> Select[Any]:
        # include_merged adds hidden rows; expired rows stay out either way.
        where: list[ColumnElement[bool]] = [owner_filter(user_id), not_expired()]
        if not include_merged:
            where.append(FactRow.merged_into.is_(None))
        if category is not None:
            where.append(FactRow.category == category)
        if search:
            where.append(text_match([search]))
        return select(*fact_columns()).where(*where)

    async def list_facts(
        self,
        user_id: uuid.UUID | None,
        *,
        search: str | None,
        include_merged: bool,
        sort_by: str,
        descending: bool,
        limit: int | None,
        offset: int,
        category: str | None = None,
    ) -> list[RowMapping]:
        column = FACT_SORT_COLUMNS[sort_by]
        order = column.desc().nulls_last() if descending else column.asc().nulls_last()
        stmt = (
            self._listing(user_id, search, include_merged, category)
            .order_by(order, FactRow.key, FactRow.id)
            .offset(offset)
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def count(self, user_id: uuid.UUID | None, *, include_merged: bool) -> int:
        stmt = self._listing(user_id, None, include_merged).with_only_columns(func.count())
        return int(await self.session.scalar(stmt) or 0)

    async def category_counts(self, user_id: uuid.UUID | None) -> list[tuple[str, int]]:
        """(category, visible facts in it), the fullest first, then by name."""
        count = func.count().label("facts")
        stmt = (
            select(FactRow.category, count)
            .where(owner_filter(user_id), visible())
            .group_by(FactRow.category)
            .order_by(count.desc(), FactRow.category)
        )
        return [(category, int(n)) for category, n in await self.session.execute(stmt)]

    # --- backfill ---------------------------------------------------------------------------

    async def missing_embeddings(self, after_id: int, limit: int) -> list[FactRow]:
        """Visible-or-expired rows without a vector (hidden rows are skipped), by id."""
        stmt = (
            select(FactRow)
            .where(
                FactRow.embedding.is_(None), FactRow.merged_into.is_(None), FactRow.id > after_id
            )
            .order_by(FactRow.id)
            .limit(limit)
        )
        return list((await self.session.scalars(stmt)).all())

    async def count_missing_embeddings(self) -> int:
        stmt = select(func.count()).where(
            FactRow.embedding.is_(None), FactRow.merged_into.is_(None)
        )
        return int(await self.session.scalar(stmt) or 0)

    async def set_embedding(
        self, fact_id: int, embedded_text: str, embedding: Sequence[float]
    ) -> None:
        # Only where still missing, and only if the fact still reads as what was embedded: an
        # upsert meanwhile may have stored a fresher vector, or a new value without one.
        await self.session.execute(
            update(FactRow)
            .where(
                FactRow.id == fact_id,
                FactRow.embedding.is_(None),
                fact_embedding_text() == embedded_text,
            )
            .values(embedding=list(embedding))
        )

    # --- summary ----------------------------------------------------------------------------

    async def get_summary(self, user_id: uuid.UUID | None) -> str | None:
        stmt = select(SummaryRow.content)
        stmt = stmt.where(
            SummaryRow.user_id.is_(None) if user_id is None else SummaryRow.user_id == user_id
        )
        return await self.session.scalar(stmt)

    async def summary_updated_at(self, user_id: uuid.UUID) -> datetime | None:
        """When the user's summary was last written (None: they have none)."""
        return await self.session.scalar(
            select(SummaryRow.updated_at).where(SummaryRow.user_id == user_id)
        )

    async def set_summary(self, user_id: uuid.UUID, content: str) -> None:
        stmt = insert(SummaryRow).values(user_id=user_id, content=content)
        await self.session.execute(
            stmt.on_conflict_do_update(
                index_elements=[SummaryRow.user_id],
                set_={"content": stmt.excluded.content, "updated_at": func.now()},
            )
        )


class FactSearchRepository:
    """The read paths of search_facts: each one statement, so they run on an autocommit
    connection as well as in a transaction."""

    def __init__(self, *, session: AsyncSession | AsyncConnection) -> None:
        self.session = session

    async def search(
        self,
        user_id: uuid.UUID | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        max_distance: float,
    ) -> list[RowMapping]:
        """Both passes of search_facts in one statement: the ``limit`` nearest visible facts
        closer than ``max_distance`` (when there is a vector), and the visible facts whose
        category, key or value contains any term, most terms first (the vector hits left out).

        One fixed shape whatever the number of terms — a ``text[]`` of escaped patterns — so it
        is prepared once per connection; the vector is never sent back (only whether there is
        one). Rows carry ``distance`` (vector hits) or ``terms_hit``; the caller orders them.
        """
        owner = "f.user_id = :uid" if user_id is not None else "TRUE"
        document = "concat_ws(E'\\n', f.category, f.key, f.value)"
        search = HybridSearch(
            table="memory_facts",
            alias="f",
            columns=_FACT_COLUMNS,
            where=(
                f"{owner} AND f.merged_into IS NULL "
                "AND (f.expires_at IS NULL OR f.expires_at > now())"
            ),
            match=f"{document} ILIKE ANY (CAST(:patterns AS text[]))",
            hits=f"{document} ILIKE p",
            recency="updated_at",
        )
        params: dict[str, Any] = {"limit": limit, "patterns": [contains_pattern(t) for t in terms]}
        if user_id is not None:
            params["uid"] = user_id
        return await search.run(self.session, params, query_vector, max_distance)

    async def recent(self, user_id: uuid.UUID | None, limit: int) -> list[RowMapping]:
        stmt = (
            select(*fact_columns())
            .where(owner_filter(user_id), visible())
            .order_by(FactRow.updated_at.desc(), FactRow.id.desc())
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())
