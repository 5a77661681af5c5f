"""Weighted score fusion of search_chunks' vector and text lists (pure ranking rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from navi_memory.services.ranking import fuse_hits, rank_hits

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def row(chunk_id: int, minutes: int = 0, **score: Any) -> dict[str, Any]:
    return {"id": chunk_id, "ended_at": T0 + timedelta(minutes=minutes), **score}


def text_row(chunk_id: int, score: float, query_distance: float | None = None, **more: Any) -> Any:
    return row(chunk_id, score=score, terms_hit=1, query_distance=query_distance, **more)


def fused(
    vector: list[dict[str, Any]], text: list[dict[str, Any]], weight: float = 0.3
) -> list[dict[str, Any]]:
    return fuse_hits(
        vector, text, 10, lambda data, via: {**data, "via": via}, "ended_at", vector_weight=weight
    )


def test_without_a_query_vector_the_text_order_and_relative_scores_hold() -> None:
    hits = fused([], [row(1, score=2.0, terms_hit=1), row(2, score=8.0, terms_hit=3)])
    assert [h["id"] for h in hits] == [2, 1]
    assert [h["score"] for h in hits] == [1.0, 0.25]
    assert all(h["via"] == "text" and "distance" not in h for h in hits)
    assert "query_distance" not in hits[0]


def test_a_text_hit_much_closer_to_the_query_overtakes_a_slightly_better_text_score() -> None:
    """0.95 + 0.3 * 0.9 beats 1.0 + 0.3 * 0.2: the similarity reorders close text scores."""
    hits = fused([], [text_row(1, 10.0, query_distance=0.8), text_row(2, 9.5, query_distance=0.1)])
    assert [h["id"] for h in hits] == [2, 1]
    assert hits[0]["score"] == pytest.approx(0.95 + 0.3 * 0.9)
    assert hits[0]["via"] == "text" and "distance" not in hits[0]


def test_a_clear_text_lead_survives_a_closer_vector() -> None:
    """Half the best text score is not made up by any similarity at weight 0.3."""
    hits = fused([], [text_row(1, 10.0, query_distance=1.0), text_row(2, 5.0, query_distance=0.0)])
    assert [h["id"] for h in hits] == [1, 2]


def test_a_vector_only_hit_scores_its_weighted_similarity() -> None:
    near = row(3, distance=0.1, query_distance=0.1)
    hits = fused([near], [text_row(1, 4.0, query_distance=0.7), text_row(2, 1.0, 0.6)])
    assert [h["id"] for h in hits] == [1, 2, 3]
    assert hits[2]["via"] == "vector" and hits[2]["distance"] == 0.1
    assert hits[2]["terms_hit"] == 0
    assert hits[2]["score"] == pytest.approx(0.3 * 0.9)
    assert hits[1]["score"] == pytest.approx(0.25 + 0.3 * 0.4)


def test_a_hit_in_both_lists_keeps_both_marks() -> None:
    both = row(2, score=5.0, terms_hit=2, distance=0.2, query_distance=0.2)
    hits = fused([both], [text_row(1, 5.0, query_distance=0.6), both])
    assert [h["id"] for h in hits] == [2, 1]
    assert hits[0]["via"] == "vector"
    assert hits[0]["distance"] == 0.2 and hits[0]["terms_hit"] == 2


def test_a_chunk_without_a_vector_takes_the_lowest_similarity_of_the_candidates() -> None:
    """Neither favoured for lacking a vector nor scored as if orthogonal to the query."""
    hits = fused(
        [],
        [
            text_row(1, 10.0, query_distance=None),
            text_row(2, 10.0, query_distance=0.5),
            text_row(3, 10.0, query_distance=0.2),
        ],
    )
    # 1 and 2 tie exactly (same score, same time): the higher id goes first.
    assert [h["id"] for h in hits] == [3, 2, 1]
    by_id = {h["id"]: h["score"] for h in hits}
    assert by_id[1] == pytest.approx(by_id[2])
    assert by_id[3] > by_id[2]


def test_recency_breaks_only_exact_ties() -> None:
    """Equal fused scores go newest first; a better score wins over a newer chunk."""
    hits = fused(
        [],
        [
            row(1, 0, score=3.0, terms_hit=1),
            row(2, 5, score=3.0, terms_hit=1),
            row(3, 9, score=2.0, terms_hit=1),
        ],
    )
    assert [h["id"] for h in hits] == [2, 1, 3]


def test_only_limit_hits_come_back_best_first() -> None:
    text = [text_row(i, float(i), query_distance=0.5) for i in range(1, 16)]
    hits = fuse_hits(
        [], text, 3, lambda data, via: {**data, "via": via}, "ended_at", vector_weight=0.3
    )
    assert [h["id"] for h in hits] == [15, 14, 13]


def test_a_vector_row_without_a_query_distance_is_scored_by_its_distance() -> None:
    """A row of the vector list alone, as a caller other than the statement may give it."""
    hits = fused([row(5, distance=0.2)], [text_row(1, 1.0, query_distance=0.9)])
    by_id = {h["id"]: h["score"] for h in hits}
    assert by_id[5] == pytest.approx(0.3 * 0.8)
    assert by_id[1] == pytest.approx(1.0 + 0.3 * 0.1)


@pytest.mark.parametrize(
    ("runner_up", "leader_distance", "runner_up_distance", "leader_stays"),
    [
        (0.69, 1.0, 0.0, True),  # a lead of 0.31 against similarities 0 and 1 holds
        (0.75, 1.0, 0.0, False),  # a lead of 0.25 does not
        (0.65, 2.0, 0.0, False),  # a lead of 0.35 does not against opposite vectors (-1, 1)
        (0.39, 2.0, 0.0, True),  # 0.61 does
    ],
)
def test_how_large_a_text_lead_the_similarity_can_overturn(
    runner_up: float, leader_distance: float, runner_up_distance: float, leader_stays: bool
) -> None:
    hits = fused(
        [],
        [
            text_row(1, 1.0, query_distance=leader_distance),
            text_row(2, runner_up, query_distance=runner_up_distance),
        ],
    )
    assert [h["id"] for h in hits] == ([1, 2] if leader_stays else [2, 1])


def test_recency_breaks_an_exact_tie_the_similarity_makes() -> None:
    """1.0 + 0.5 * 0.5 and 0.75 + 0.5 * 1.0 are both exactly 1.25: the newer goes first."""
    older_leader = row(1, 0, score=4.0, terms_hit=1, query_distance=0.5)
    newer_close = row(2, 7, score=3.0, terms_hit=1, query_distance=0.0)
    hits = fused([], [older_leader, newer_close], weight=0.5)
    assert [h["id"] for h in hits] == [2, 1]
    assert hits[0]["score"] == hits[1]["score"] == 1.25
    # The same scores with the leader now the newer: it goes first.
    newer_leader = row(1, 9, score=4.0, terms_hit=1, query_distance=0.5)
    hits = fused([], [newer_leader, newer_close], weight=0.5)
    assert [h["id"] for h in hits] == [1, 2]


def test_rank_hits_orders_equal_distances_by_id_whatever_order_the_rows_come_in() -> None:
    """The spec's ranking (rank_hits): vector hits nearest first, an exact tie of distances
    by the lower id — the order the SQL's vector pass uses — so the answer does not depend
    on the order the final join returned the rows in (it keeps none)."""
    rows = [
        {"id": 3, "distance": 0.1, "terms_hit": None, "ended_at": T0},
        {"id": 2, "distance": 0.1, "terms_hit": None, "ended_at": T0},
        {"id": 1, "distance": 0.05, "terms_hit": None, "ended_at": T0},
    ]
    for ordered in (rows, rows[::-1]):
        hits = rank_hits(ordered, 10, lambda r, via: r["id"], "ended_at")
        assert hits == [1, 2, 3]


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 6])
def test_rank_hits_makes_only_the_hits_it_returns(limit: int) -> None:
    """Vector hits first, then text hits by terms, ``limit`` in all; a hit is made only for a
    row returned (the statement hands back up to twice ``limit`` rows)."""
    rows: list[dict[str, Any]] = [
        {"id": 1, "distance": 0.2, "terms_hit": 1, "ended_at": T0},
        {"id": 2, "distance": None, "terms_hit": 3, "ended_at": T0},
        {"id": 3, "distance": 0.1, "terms_hit": None, "ended_at": T0},
        {"id": 4, "distance": None, "terms_hit": 1, "ended_at": T0 + timedelta(days=1)},
        {"id": 5, "distance": None, "terms_hit": 1, "ended_at": T0},
    ]
    made: list[tuple[int, str]] = []

    def make(row: dict[str, Any], via: str) -> tuple[int, str]:
        made.append((row["id"], via))
        return row["id"], via

    hits = rank_hits(rows, limit, make, "ended_at")
    expected = [(3, "vector"), (1, "vector"), (2, "text"), (4, "text"), (5, "text")][:limit]
    assert hits == expected
    assert made == expected
