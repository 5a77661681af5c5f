"""Reciprocal-rank fusion of search_chunks' vector and text lists (pure ranking rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from navi_memory.services.ranking import fuse_hits

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def row(chunk_id: int, minutes: int, **score: Any) -> dict[str, Any]:
    return {"id": chunk_id, "ended_at": T0 + timedelta(minutes=minutes), **score}


def fused(vector: list[dict[str, Any]], text: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return fuse_hits(
        vector, text, 10, lambda data, via: {**data, "via": via}, "ended_at", k=60, vector_weight=1
    )


def test_a_hit_in_both_lists_beats_the_head_of_either() -> None:
    """Being second in both lists outscores being first in one."""
    hits = fused(
        [row(1, 0, distance=0.1), row(2, 0, distance=0.2)],
        [row(3, 0, terms_hit=2), row(2, 0, terms_hit=1)],
    )
    # 1 and 3 tie (first of one list each, same time): the higher id goes first.
    assert [h["id"] for h in hits] == [2, 3, 1]
    assert hits[0]["distance"] == 0.2 and hits[0]["terms_hit"] == 1 and hits[0]["via"] == "vector"


def test_recency_breaks_only_exact_ties() -> None:
    """Equal fused scores go newest first; a better rank wins over a newer chunk."""
    hits = fused([row(1, 0, distance=0.1)], [row(2, 5, terms_hit=1), row(3, 9, terms_hit=1)])
    # 1 and 2 are both first of a list (a tie): the newer, 2, goes first; 3 is second (worse).
    assert [h["id"] for h in hits] == [2, 1, 3]
    assert hits[0]["via"] == "text" and "distance" not in hits[0]
    assert hits[1]["terms_hit"] == 0
