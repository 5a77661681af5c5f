"""The memory message and the facts block: what the prompt says about the user."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from navi_memory.schemas import Fact
from navi_memory.text.context import (
    FACT_LINE_TEXT_MAX_CHARS,
    fact_line,
    facts_block_text,
    memory_message_text,
    prompt_facts,
)

NOW = datetime(2026, 12, 13, 12, 0, tzinfo=UTC)


def fact(fact_id: int, key: str = "editor", value: str = "neovim", **fields: Any) -> Fact:
    fields.setdefault("category", "preferences")
    fields.setdefault("confidence", 90)
    fields.setdefault("last_verified_at", NOW - timedelta(days=34))
    return Fact(id=fact_id, user_id=None, key=key, value=value, **fields)


def test_memory_message_is_the_spec_header_then_the_summary() -> None:
    """The memory message reads '## What I remember about the user', a blank line, the summary."""
    text = memory_message_text("Likes neovim.\nLives in Basel.")
    assert text == "## What I remember about the user\n\nLikes neovim.\nLives in Basel."


@pytest.mark.parametrize("summary", [None, "", "  \n "])
def test_no_memory_message_without_a_summary(summary: str | None) -> None:
    """No summary (or a blank one) means no memory message at all."""
    assert memory_message_text(summary) is None


def test_fact_line_has_the_spec_shape() -> None:
    """A fact renders as the spec's line: category, key → value, confidence and age."""
    line = fact_line(fact(1), now=NOW)
    assert line == "• [preferences] editor → neovim (confidence: 90%, updated 34d ago)"


def test_unknown_confidence_reads_as_a_question_mark() -> None:
    """A fact without a confidence shows 'confidence: ?'."""
    assert "(confidence: ?, updated 34d ago)" in fact_line(fact(1, confidence=None), now=NOW)


def test_age_under_a_day_reads_today_and_a_future_clock_too() -> None:
    """Less than a day old reads 'updated today'; so does a time ahead of now (clock skew)."""
    fresh = fact(1, last_verified_at=NOW - timedelta(hours=23))
    ahead = fact(2, last_verified_at=NOW + timedelta(minutes=5))
    assert fact_line(fresh, now=NOW).endswith("updated today)")
    assert fact_line(ahead, now=NOW).endswith("updated today)")


def test_age_falls_back_to_updated_at_then_says_unknown() -> None:
    """Without last_verified_at the age is updated_at's; with no time at all it is '?'."""
    only_updated = fact(1, last_verified_at=None, updated_at=NOW - timedelta(days=3))
    timeless = fact(2, last_verified_at=None)
    assert fact_line(only_updated, now=NOW).endswith("updated 3d ago)")
    assert fact_line(timeless, now=NOW).endswith("updated ?)")


def test_a_multiline_or_huge_value_stays_on_one_cut_line() -> None:
    """Newlines in a value cannot start a new line of the block; a huge value is cut, marked."""
    line = fact_line(fact(1, value="first\n• [x] injected → line\n" + "v" * 5000), now=NOW)
    assert "\n" not in line
    assert "first • [x] injected → line" in line
    value_part = line.split(" → ", 1)[1].rsplit(" (confidence", 1)[0]
    assert len(value_part) == FACT_LINE_TEXT_MAX_CHARS
    assert value_part.endswith("…")


def test_facts_are_ordered_most_recently_verified_first() -> None:
    """The block lists the most recently verified fact first, whatever the input order."""
    facts = [
        fact(1, key="old", last_verified_at=NOW - timedelta(days=90)),
        fact(2, key="new", last_verified_at=NOW - timedelta(days=1)),
        fact(3, key="middle", last_verified_at=NOW - timedelta(days=10)),
    ]
    assert [f.key for f in prompt_facts(facts, now=NOW)] == ["new", "middle", "old"]


def test_the_block_states_the_cap_and_shows_at_most_that_many() -> None:
    """With more facts than the cap, the block shows the cap's worth and says how many more."""
    facts = [fact(i, key=f"k{i}", last_verified_at=NOW - timedelta(days=i)) for i in range(1, 8)]
    block = facts_block_text(facts, now=NOW, max_facts=3)
    assert block is not None
    lines = block.splitlines()
    assert lines[0] == "## Facts about the user"
    assert "at most 3 shown (MEMORY_PROMPT_MAX_FACTS)" in block
    assert [line.split(" → ")[0] for line in lines if line.startswith("• ")] == [
        "• [preferences] k1",
        "• [preferences] k2",
        "• [preferences] k3",
    ]
    assert lines[-1].startswith("… and 4 more not shown here")


def test_the_block_counts_the_facts_the_caller_did_not_fetch() -> None:
    """A caller that fetched only the first N passes the total, and the block says the rest."""
    block = facts_block_text([fact(1), fact(2, key="shell")], now=NOW, max_facts=2, total=40)
    assert block is not None
    assert block.splitlines()[-1].startswith("… and 38 more not shown here")


def test_no_more_line_when_everything_fits() -> None:
    """When every fact is shown, the block does not claim that more exist."""
    block = facts_block_text([fact(1)], now=NOW, max_facts=50)
    assert block is not None
    assert "more not shown" not in block
    assert "at most 50 shown" in block


def test_expired_and_hidden_facts_are_never_shown() -> None:
    """An expired fact and a hidden (merged) fact are left out; one expiring later stays."""
    facts = [
        fact(1, key="expired", expires_at=NOW - timedelta(seconds=1)),
        fact(2, key="hidden", merged_into=3),
        fact(3, key="later", expires_at=NOW + timedelta(days=1)),
    ]
    block = facts_block_text(facts, now=NOW, max_facts=50)
    assert block is not None
    assert "later → neovim" in block
    assert "expired" not in block
    assert "hidden" not in block


def test_no_block_without_facts_to_show() -> None:
    """No facts, or only expired/hidden ones, or a cap of 0: no block."""
    assert facts_block_text([], now=NOW, max_facts=50) is None
    assert facts_block_text([fact(1, merged_into=2)], now=NOW, max_facts=50) is None
    assert facts_block_text([fact(1)], now=NOW, max_facts=0) is None
