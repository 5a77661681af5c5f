"""Automatic recall's pure rules: the query, which hits qualify, the ledger, the message."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

import pytest

from navi_memory.constants import INJECTED_LEDGER_MAX
from navi_memory.schemas import MemoryHit, Message
from navi_memory.text.hits import format_hits
from navi_memory.text.recall import (
    RECALL_HEADER,
    RECALL_QUERY_MESSAGE_MAX_CHARS,
    RECALL_QUERY_MESSAGES,
    context_seqs,
    extend_ledger,
    ledger_ids,
    qualifies,
    recall_message_text,
    recall_query,
    recall_terms,
    repeats_context,
    select_recall,
)

T0 = datetime(2026, 11, 6, 18, 41, tzinfo=UTC)


@dataclass(frozen=True)
class Hit:
    """A unified-search hit as recall reads it."""

    chunk_id: int | None
    via: Literal["vector", "text", "recent"] = "vector"
    distance: float | None = 0.2
    terms_hit: int = 0
    superseded_by: str | None = None
    source_type: Literal["fact", "raw", "sketch"] = "raw"
    text: str = "User: the port is 8098"
    session_id: str | None = "s1"
    timestamp: datetime = T0
    score: float = 0.8
    start_seq: int | None = 12
    end_seq: int | None = 14
    breadcrumbs: list[str] = field(default_factory=list)
    before_summary: bool = False


def message(seq: int, content: str, role: str = "user", **fields: Any) -> Message:
    return Message(session_id="s1", seq=seq, role=role, content=content, created_at=T0, **fields)


# --- the query -------------------------------------------------------------------------------


def test_query_is_the_incoming_then_the_last_four_spoken_messages_newest_first() -> None:
    """The query holds the incoming message and the last four user/assistant messages."""
    context = [message(i, f"m{i}", role="user" if i % 2 else "assistant") for i in range(1, 8)]
    assert recall_query(context, "now").splitlines() == ["now", "m7", "m6", "m5", "m4"]


@pytest.mark.parametrize("spoken", range(7))
def test_query_holds_every_spoken_message_when_there_are_fewer_than_four(spoken: int) -> None:
    """Fewer spoken messages than the query takes: all of them, newest first. (The slice once
    counted from the end past the start: three messages gave the newest one alone.)"""
    context = [message(i, f"m{i}", role="user" if i % 2 else "assistant") for i in range(spoken)]
    expected = [f"m{i}" for i in reversed(range(spoken))][:RECALL_QUERY_MESSAGES]
    assert recall_query(context, "now").splitlines() == ["now", *expected]


def test_query_skips_summaries_system_tool_and_empty_messages() -> None:
    """Only spoken conversation is the topic: summaries, system, tool rows and blanks are out."""
    context = [
        message(1, "the summary", role="system", kind="summary"),
        message(2, "be brief", role="system"),
        message(3, "spoken"),
        message(4, "", role="tool_call", tool_name="sql"),
        message(5, "42 rows", role="tool", tool_name="sql"),
        message(6, "   ", role="assistant"),
    ]
    assert recall_query(context, "what now?").splitlines() == ["what now?", "spoken"]


def test_query_cuts_each_long_message() -> None:
    """A pasted file does not become the query: each message is cut."""
    query = recall_query([message(1, "x" * 50_000)], "y" * 50_000)
    cut = RECALL_QUERY_MESSAGE_MAX_CHARS
    assert query.splitlines() == ["y" * cut, "x" * cut]


def test_query_orders_by_seq_not_by_list_position() -> None:
    """The newest message is the one with the highest seq."""
    context = [message(9, "late"), message(2, "early")]
    assert recall_query(context, "in").splitlines() == ["in", "late", "early"]


# --- qualification ---------------------------------------------------------------------------


def test_vector_hit_qualifies_at_the_minimum_similarity() -> None:
    """A vector hit qualifies when 1 − distance reaches the minimum, not below."""
    assert qualifies(Hit(1, distance=0.45), min_similarity=0.55)
    assert not qualifies(Hit(1, distance=0.46), min_similarity=0.55)


def test_text_hit_needs_two_distinct_terms() -> None:
    """On the text path a hit qualifies with 2 matched terms, not with 1."""
    assert qualifies(Hit(1, via="text", distance=None, terms_hit=2), min_similarity=0.55)
    assert not qualifies(Hit(1, via="text", distance=None, terms_hit=1), min_similarity=0.55)


def test_a_hit_in_both_lists_qualifies_by_either_evidence() -> None:
    """A fused hit found by vector below the similarity still qualifies by its terms, and one
    with too few terms by its similarity; with neither it does not."""
    assert qualifies(Hit(1, distance=0.7, terms_hit=2), min_similarity=0.55)
    assert qualifies(Hit(1, distance=0.3, terms_hit=0), min_similarity=0.55)
    assert not qualifies(Hit(1, distance=0.7, terms_hit=1), min_similarity=0.55)


def test_superseded_recent_and_non_raw_hits_never_qualify() -> None:
    """An excerpt a newer fact overrides, a 'recent'-only hit, a fact or a sketch: never."""
    assert not qualifies(Hit(1, superseded_by="server_port"), min_similarity=0.0)
    assert not qualifies(Hit(1, via="recent", distance=None, terms_hit=9), min_similarity=0.0)
    assert not qualifies(Hit(1, source_type="fact"), min_similarity=0.0)
    assert not qualifies(Hit(1, source_type="sketch"), min_similarity=0.0)
    assert not qualifies(Hit(None), min_similarity=0.0)


def test_selection_keeps_search_order_skips_the_ledger_and_stops_at_k() -> None:
    """Up to k hits, in search order, none whose chunk id the ledger holds, none twice."""
    hits = [
        Hit(n, start_seq=n * 10, end_seq=n * 10 + 2, superseded_by="k" if n == 2 else None)
        for n in (1, 2, 3, 3, 4, 5)
    ]
    chosen = select_recall(hits, ledger=[3], min_similarity=0.55, k=2)
    assert [h.chunk_id for h in chosen] == [1, 4]


@pytest.mark.parametrize(
    ("spans", "chosen"),
    [
        # a host's chunk of 1-2, then compression's chunks of 1 and of 2: held already
        ([(1, 2), (1, 1), (2, 2)], [1]),
        # two chosen excerpts together hold the third's messages
        ([(1, 2), (3, 4), (2, 3)], [1, 2]),
        # a range reaching one message further is no repeat
        ([(1, 2), (2, 3)], [1, 2]),
        ([(5, 9), (1, 2), (3, 4)], [1, 2, 3]),
        # no range known: kept
        ([(1, 2), (None, None)], [1, 2]),
        # two texts filed under one range (a host's pieces of one long message): both kept
        ([(5, 5), (5, 5), (4, 6), (5, 5)], [1, 2, 3, 4]),
    ],
)
def test_an_excerpt_the_chosen_ones_hold_already_is_left_out(
    spans: list[tuple[int | None, int | None]], chosen: list[int]
) -> None:
    hits = [Hit(n, start_seq=a, end_seq=b) for n, (a, b) in enumerate(spans, start=1)]
    picked = select_recall(hits, ledger=[], min_similarity=0.55, k=5)
    assert [h.chunk_id for h in picked] == chosen


def test_selection_with_k_zero_is_empty() -> None:
    """k = 0 recalls nothing."""
    assert select_recall([Hit(1)], ledger=[], min_similarity=0.0, k=0) == []


# --- the ledger ------------------------------------------------------------------------------


def test_ledger_appends_and_keeps_each_id_once() -> None:
    """Delivered ids are appended; an id delivered again moves to the end, never twice."""
    assert extend_ledger([1, 2, 3], [4, 2, 4]) == [1, 3, 4, 2]


def test_ledger_keeps_the_last_hundred() -> None:
    """The ledger holds the last 100 ids: the oldest deliveries drop out first."""
    ledger = extend_ledger(list(range(1, 100)), [100, 101, 102])
    assert INJECTED_LEDGER_MAX == 100
    assert len(ledger) == 100
    assert ledger[0] == 3
    assert ledger[-3:] == [100, 101, 102]


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, []),
        ("1,2", []),
        ({"a": 1}, []),
        ([1, "2", True, 3.0, None, 4], [1, 4]),
    ],
)
def test_ledger_read_from_metadata_ignores_junk(stored: object, expected: list[int]) -> None:
    """Whatever a host wrote in session_metadata, only int chunk ids are taken as the ledger."""
    assert ledger_ids(stored) == expected


# --- the message -----------------------------------------------------------------------------


def raw_hit(chunk_id: int, **fields: Any) -> MemoryHit:
    values: dict[str, Any] = {
        "source_type": "raw",
        "text": "User: the port is 8098",
        "session_id": "s1",
        "timestamp": T0,
        "score": 0.8,
        "via": "vector",
        "distance": 0.2,
        "chunk_id": chunk_id,
        "start_seq": 12,
        "end_seq": 14,
    }
    return MemoryHit(**(values | fields))


def test_recall_message_renders_excerpts_like_raw_search_hits() -> None:
    """The message has the header, then each excerpt exactly as memory_search shows it."""
    hits = [
        raw_hit(7, breadcrumbs=["server_port", "8098"], before_summary=True),
        raw_hit(9, start_seq=3, end_seq=3, session_id=None, text="User: a\n\nAssistant: b"),
    ]
    text = recall_message_text(hits)
    assert text is not None
    assert text.startswith(RECALL_HEADER + "\n\nVerbatim excerpts")
    body = text.split("\n\n", 2)[2]
    assert body == (
        "1. raw · session s1 · turn 12–14 · 2026-11-06 18:41\n"
        "   before summary: a verbatim record from before this session's latest summary\n"
        "   keys: server_port, 8098\n"
        "   User: the port is 8098\n"
        "2. raw · turn 3 · 2026-11-06 18:41\n"
        "   User: a\n"
        "\n"
        "   Assistant: b"
    )
    entries = format_hits("q", "raw", hits).split("\n\n", 1)[1]
    assert body == entries


def test_recall_message_shows_times_in_utc() -> None:
    """An excerpt's time is shown in UTC whatever zone it carries."""
    other_zone = T0.astimezone(ZoneInfo("Europe/Zurich"))
    assert other_zone.hour != T0.hour
    text = recall_message_text([raw_hit(1, timestamp=other_zone)])
    assert text is not None
    assert "· 2026-11-06 18:41" in text


def test_no_recall_message_without_hits() -> None:
    """Nothing recalled: no message."""
    assert recall_message_text([]) is None


# --- excerpts the prompt shows already --------------------------------------------------------


def test_an_excerpt_wholly_in_the_context_repeats_it_and_one_holding_a_dropped_row_does_not() -> (
    None
):
    """Context rows 4, 6, 7 and the summary at 8; seq 5 (an old summary) and 1–3 were dropped."""
    context = [
        message(8, "summary", role="system", kind="summary"),
        message(4, "kept"),
        message(6, "kept"),
        message(7, "kept"),
    ]
    seqs = context_seqs(context)
    assert seqs == [4, 6, 7, 8]
    assert repeats_context(Hit(1, start_seq=6, end_seq=7), seqs)
    assert repeats_context(Hit(1, start_seq=4, end_seq=4), seqs)
    assert not repeats_context(Hit(1, start_seq=3, end_seq=4), seqs)
    assert not repeats_context(Hit(1, start_seq=4, end_seq=6), seqs)
    assert not repeats_context(Hit(1, start_seq=9, end_seq=9), seqs)
    assert not repeats_context(Hit(1, start_seq=None, end_seq=None), seqs)
    assert not repeats_context(Hit(1, start_seq=7, end_seq=6), seqs)


# --- the query's terms ------------------------------------------------------------------------


def test_recall_terms_leave_out_courtesy_stop_and_rendering_words() -> None:
    """Words that say nothing about the topic never count as matched: courtesy words ("thanks",
    "please": two of them matched an excerpt about a flight to a message about an invoice),
    stop words (search keeps them when nothing else is left), the rendering prefixes and
    one-character terms. The topic's words stay, in their order and spelling."""
    assert recall_terms(["Thanks", "please", "continue", "invoice", "OK"]) == (
        "continue",
        "invoice",
    )
    assert recall_terms(["hi", "hello", "yes", "no", "Sure", "yeah", "great", "cool"]) == ()
    assert recall_terms(["the", "of", "it", "User", "assistant", "4", "x"]) == ()
    assert recall_terms(["Oslo", "flight", "thank"]) == ("Oslo", "flight")
