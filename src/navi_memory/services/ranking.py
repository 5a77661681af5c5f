"""The order of a search's hits: vector hits nearest first, then text hits by terms matched;
or the two lists fused by reciprocal rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import RowMapping

__all__ = ["fuse_hits", "hit_fields", "rank_hits"]

HitT = TypeVar("HitT")


def hit_fields(row: RowMapping | Mapping[str, Any], score: dict[str, Any]) -> dict[str, Any]:
    """A search row's fields with ``score`` (``via``) added; the pass it was not found by left
    out, so the hit's defaults hold."""
    data = {k: v for k, v in row.items() if not (k in ("distance", "terms_hit") and v is None)}
    return {**data, **score}


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


def fuse_hits(
    vector: Sequence[RowMapping | Mapping[str, Any]],
    text: Sequence[RowMapping | Mapping[str, Any]],
    limit: int,
    make: Callable[..., HitT],
    recency: str,
    *,
    k: float,
    vector_weight: float,
) -> list[HitT]:
    """Reciprocal-rank fusion: each hit scores ``weight / (k + rank)`` for every list it is in
    (``vector`` nearest first, ``text`` best first; the text list's weight is 1). Only exact
    ties of that score fall to the ``recency`` column, newest first. A hit keeps its
    ``distance`` (vector) and ``terms_hit`` (text) from whichever list holds it; ``via`` is
    "vector" when the vector list holds it."""
    fused: dict[int, float] = {}
    rows: dict[int, RowMapping | Mapping[str, Any]] = {}
    distance: dict[int, float] = {}
    terms_hit: dict[int, int] = {}
    for rank, row in enumerate(vector, start=1):
        fused[row["id"]] = fused.get(row["id"], 0.0) + vector_weight / (k + rank)
        rows.setdefault(row["id"], row)
        distance[row["id"]] = row["distance"]
    for rank, row in enumerate(text, start=1):
        fused[row["id"]] = fused.get(row["id"], 0.0) + 1.0 / (k + rank)
        rows.setdefault(row["id"], row)
        terms_hit[row["id"]] = row["terms_hit"]
    order = sorted(fused, key=lambda i: (-fused[i], -rows[i][recency].timestamp(), -rows[i]["id"]))
    hits = []
    for chunk_id in order[:limit]:
        data = {
            key: value
            for key, value in rows[chunk_id].items()
            if key not in ("distance", "terms_hit", "score")
        }
        if chunk_id in distance:
            data["distance"] = distance[chunk_id]
        data["terms_hit"] = terms_hit.get(chunk_id, 0)
        hits.append(make(data, via="vector" if chunk_id in distance else "text"))
    return hits
