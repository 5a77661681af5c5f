"""The vector pass and text pass of a search, in one statement; vectors as bound parameters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from navi_memory.db import vector_binary
from navi_memory.repositories.statements import FetchedRow, Reads, fetch_rows, statement

__all__ = ["QUERY_VECTOR", "HybridSearch"]

QUERY_VECTOR = "CAST(:q AS vector)"
"""The query vector in SQL, bound as db.vector_binary (see db.register_vector_codec)."""


@dataclass(frozen=True, slots=True)
class HybridSearch:
    """One statement for both passes of a search over a table with an ``embedding`` column.

    The vector pass is a ``MATERIALIZED`` CTE — the nearest-neighbour scan runs as written
    (``ORDER BY distance LIMIT``) — with the distance threshold applied outside it, as pgvector
    documents for filtered iterative scans. The text pass matches ``match`` and ranks by
    ``hits`` (both written against ``:patterns``, a ``text[]``: one fixed shape whatever the
    number of terms, so it is prepared once per connection), then ``recency``, leaving out the
    vector hits — and it does not run at all when the vector pass already filled ``limit``
    (it only fills up; on big users it is the expensive half). The result rows carry
    ``columns``, ``has_embedding`` (never the vector), ``distance`` (vector hits) or
    ``terms_hit`` (text hits); the caller orders them.

    Every fragment is fixed SQL written in this package; every value is a bound parameter.
    """

    table: str
    alias: str
    columns: str
    where: str
    match: str
    hits: str
    recency: str
    nearest: str | None = None
    """The nearest-neighbour CTE's body (``id`` and ``approx`` rows, at most ``:limit``) when
    the vectors are indexed elsewhere than ``table.embedding``. The vector pass then takes the
    exact distance from ``table.embedding`` for those rows, each once (a row found by two
    branches of ``nearest`` is one hit). Default: an exact-order scan of
    ``table`` itself (the HNSW index on its ``embedding``)."""

    async def run(
        self,
        session: Reads,
        params: dict[str, Any],
        query_vector: Sequence[float] | None,
        max_distance: float,
    ) -> list[FetchedRow]:
        a = self.alias
        text_cte = f"""
            txt AS (
                SELECT {a}.id, h.hits
                FROM {self.table} {a},
                     LATERAL (SELECT count(*) AS hits FROM unnest(CAST(:patterns AS text[])) p
                              WHERE {self.hits}) h
                WHERE {self.where} AND {self.match}
                  {{exclude}}
                ORDER BY h.hits DESC, {a}.{self.recency} DESC, {a}.id DESC
                LIMIT :limit
            )"""
        params = dict(params)
        if query_vector is not None:
            fill_up = (
                f"AND {a}.id NOT IN (SELECT id FROM vec) AND (SELECT count(*) FROM vec) < :limit"
            )
            if self.nearest is None:
                vector_ctes = f"""
            nearest AS MATERIALIZED (
                SELECT {a}.id, {a}.embedding <=> {QUERY_VECTOR} AS distance
                FROM {self.table} {a}
                WHERE {self.where} AND {a}.embedding IS NOT NULL
                ORDER BY distance
                LIMIT :limit
            ),
            vec AS (SELECT id, distance FROM nearest WHERE distance < :max_distance)"""
            else:
                vector_ctes = f"""
            nearest AS MATERIALIZED ({self.nearest}),
            exact AS (
                SELECT {a}.id, {a}.embedding <=> {QUERY_VECTOR} AS distance
                FROM (SELECT DISTINCT id FROM nearest) n JOIN {self.table} {a} ON {a}.id = n.id
            ),
            vec AS (SELECT id, distance FROM exact WHERE distance < :max_distance)"""
            ctes = f"""
            WITH {vector_ctes},
            {text_cte.format(exclude=fill_up)}"""
            joins = f"LEFT JOIN vec v ON v.id = {a}.id LEFT JOIN txt t ON t.id = {a}.id"
            pick = f"{a}.id IN (SELECT id FROM vec UNION ALL SELECT id FROM txt)"
            distance = "v.distance"
            params["q"] = vector_binary(query_vector)
            params["max_distance"] = max_distance
        else:
            ctes = f"WITH {text_cte.format(exclude='')}"
            joins = f"JOIN txt t ON t.id = {a}.id"
            pick = "TRUE"
            distance = "NULL::float8"
        sql = f"""{ctes}
            SELECT {self.columns}, {a}.embedding IS NOT NULL AS has_embedding,
                   {distance} AS distance, t.hits AS terms_hit
            FROM {self.table} {a} {joins}
            WHERE {pick}"""
        return await fetch_rows(session, statement(sql), params)
