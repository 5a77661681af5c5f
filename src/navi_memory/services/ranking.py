"""The order of a search's hits: vector hits nearest first, then text hits by terms matched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import RowMapping

__all__ = ["hit_fields", "rank_hits"]

HitT = TypeVar("HitT")


def hit_fields(row: RowMapping, score: dict[str, Any]) -> dict[str, Any]:
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
