"""MEMORY_USAGE_GUIDELINES: the spec's persona guidance, ready for a host's system prompt."""

from __future__ import annotations

from navi_memory.text.guidelines import MEMORY_USAGE_GUIDELINES


def test_guidelines_carry_every_rule_of_the_spec() -> None:
    """Each rule of the spec's 'Memory usage guidelines' is in the constant, in its words."""
    flat = " ".join(MEMORY_USAGE_GUIDELINES.split())
    for rule in [
        "before saying you do not remember",
        "you need the fact behind it",
        "about to make an assumption about the user's environment or preferences",
        "Prefer a newer curated fact over an older raw excerpt",
        "Do NOT call memory_search reflexively at the start of every session",
        "automatic recall already covers the compressed-history case",
        'Call memory with action="forget" only when the user explicitly asks',
    ]:
        assert rule in flat, rule


def test_guidelines_say_which_tool_writes_and_which_reads_everything() -> None:
    """The guidance states the difference between memory and memory_search."""
    flat = " ".join(MEMORY_USAGE_GUIDELINES.split())
    assert "`memory` writes" in flat
    assert "`memory_search` reads everything" in flat
