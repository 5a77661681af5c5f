"""The order of a search's hits: vector hits nearest first, then text hits by terms matched
(the spec's); or the text and vector lists fused by a weighted sum of their scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from navi_memory.repositories.statements import FetchedRow

__all__ = ["fuse_hits", "hit_fields", "rank_hits"]

HitT = TypeVar("HitT")


def hit_fields(row: FetchedRow, score: dict[str, Any]) -> dict[str, Any]:
    """A search row's fields with ``score`` (``via``) added; the pass it was not found by left
    out, so the hit's defaults hold."""
    data = {k: v for k, v in row.items() if not (k in ("distance", "terms_hit") and v is None)}
    return {**data, **score}


def rank_hits(
    rows: Sequence[FetchedRow], limit: int, make: Callable[..., HitT], recency: str
) -> list[HitT]:
    """Vector hits nearest first (an exact tie: the lower id), then text hits by terms matched,
    then those holding the whole query (a ``whole_query`` column, where the statement has
    one), then the ``recency`` column (the SQL ranks them the same way; the final join does
    not keep that order)."""
    vector = sorted(
        (r for r in rows if r["distance"] is not None), key=lambda r: (r["distance"], r["id"])
    )
    by_text = sorted(
        (r for r in rows if r["distance"] is None),
        key=lambda r: (
            -r["terms_hit"],
            not r.get("whole_query"),
            -r[recency].timestamp(),
            -r["id"],
        ),
    )
    # Only the hits returned are made: the statement may return up to twice ``limit`` rows.
    hits = [make(r, via="vector") for r in vector[:limit]]
    hits += [make(r, via="text") for r in by_text[: limit - len(hits)]]
    return hits


def fuse_hits(
    vector: Sequence[FetchedRow],
    text: Sequence[FetchedRow],
    limit: int,
    make: Callable[..., HitT],
    recency: str,
    *,
    vector_weight: float,
) -> list[HitT]:
    """Weighted score fusion of the two lists (``vector`` nearest first, ``text`` best first):
    each candidate, a chunk either list holds, scores

        score / (the text list's best score)  +  vector_weight * (1 - query_distance)

    the first term 0 for a chunk only the vector list holds, the second 0 for every
    candidate when no row carries a ``query_distance`` (a search without a query vector). A
    candidate without a stored vector (``query_distance`` None) takes the lowest similarity of
    the candidates, so it is never favoured for lacking one. Only exact ties of the fused score
    fall to the ``recency`` column, newest first, then the higher id.

    A hit keeps ``distance`` (vector) and ``terms_hit`` (text) from whichever list holds it;
    ``via`` is "vector" when the vector list holds it; ``score`` is the fused score."""
    rows: dict[int, FetchedRow] = {}
    distance: dict[int, float] = {}
    terms_hit: dict[int, int] = {}
    relevance: dict[int, float] = {}
    for row in vector:
        rows.setdefault(row["id"], row)
        distance[row["id"]] = row["distance"]
    best = max((float(row["score"]) for row in text), default=0.0)
    for row in text:
        rows.setdefault(row["id"], row)
        terms_hit[row["id"]] = row["terms_hit"]
        relevance[row["id"]] = float(row["score"]) / best if best > 0 else 0.0
    similarity: dict[int, float] = {}
    for chunk_id, row in rows.items():
        query_distance = row.get("query_distance")
        if query_distance is None:
            query_distance = distance.get(chunk_id)
        if query_distance is not None:
            similarity[chunk_id] = 1.0 - float(query_distance)
    floor = min(similarity.values(), default=0.0)
    fused = {
        chunk_id: relevance.get(chunk_id, 0.0) + vector_weight * similarity.get(chunk_id, floor)
        for chunk_id in rows
    }
    order = sorted(fused, key=lambda i: (-fused[i], -rows[i][recency].timestamp(), -i))
    hits = []
    for chunk_id in order[:limit]:
        data = {
            key: value
            for key, value in rows[chunk_id].items()
            if key not in ("distance", "terms_hit", "score", "query_distance")
        }
        if chunk_id in distance:
            data["distance"] = distance[chunk_id]
        data["terms_hit"] = terms_hit.get(chunk_id, 0)
        data["score"] = fused[chunk_id]
        hits.append(make(data, via="vector" if chunk_id in distance else "text"))
    return hits
