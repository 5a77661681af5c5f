"""build_chunks and render_message: the spec's packing of demoted messages into raw chunks."""

from __future__ import annotations

import hashlib
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from navi_memory.constants import MAX_TEXT_CHARS
from navi_memory.errors import InvalidInputError
from navi_memory.schemas import Message
from navi_memory.text.chunks import (
    DEFAULT_CHUNK_MAX_CHARS,
    DEFAULT_MESSAGE_MAX_CHARS,
    WHITESPACE,
    build_chunks,
    elide_middle,
    elided_parts,
    raw_history_terms,
    render_message,
)

T0 = datetime(2026, 11, 6, 18, 41, tzinfo=UTC)


def message(seq: int, content: str = "hello", **fields: Any) -> Message:
    fields.setdefault("role", "user")
    fields.setdefault("created_at", T0 + timedelta(minutes=seq))
    return Message(session_id="s1", seq=seq, content=content, **fields)


def test_spec_sizes_are_the_defaults() -> None:
    assert (DEFAULT_CHUNK_MAX_CHARS, DEFAULT_MESSAGE_MAX_CHARS) == (4000, 12000)


def test_user_and_assistant_messages_are_prefixed() -> None:
    assert render_message(message(1, "hi", role="user")) == "User: hi"
    assert render_message(message(2, "hello", role="assistant")) == "Assistant: hello"


def test_tool_result_is_prefixed_with_the_tool_name() -> None:
    rendered = render_message(message(1, "42 rows", role="tool", tool_name="sql"))
    assert rendered == "Tool result (sql): 42 rows"


def test_tool_call_renders_as_assistant_request_with_compact_json_args() -> None:
    call = message(
        1, "", role="tool_call", tool_name="read_file", tool_args={"path": "/a b", "n": 2}
    )
    assert render_message(call) == 'Assistant: [Tool call] read_file({"n":2,"path":"/a b"})'


def test_tool_call_keeps_what_the_assistant_said_alongside_it() -> None:
    """Text stored on a tool_call is conversation (as in the extractor's transcript): the
    chunk holds it verbatim, before the call."""
    call = message(
        1,
        "Let me look at ZEBRA_PORT_9931 first",
        role="tool_call",
        tool_name="kv",
        tool_args={"a": 1},
    )
    assert render_message(call) == (
        'Assistant: Let me look at ZEBRA_PORT_9931 first\n[Tool call] kv({"a":1})'
    )


def test_tool_call_without_args_renders_empty_parentheses() -> None:
    call = message(1, "", role="tool_call", tool_name="now")
    assert render_message(call) == "Assistant: [Tool call] now()"


def test_tool_call_args_keep_non_ascii_and_survive_non_json_values() -> None:
    args = {"city": "Zürich", "when": T0}
    rendered = render_message(message(1, role="tool_call", tool_name="weather", tool_args=args))
    assert rendered is not None
    assert "Zürich" in rendered
    assert "2026-11-06" in rendered


@pytest.mark.parametrize(
    "skipped",
    [
        message(1, "You are Navi.", role="system"),
        message(1, "Earlier we discussed ports.", role="assistant", kind="summary"),
        message(1, "[history compressed]", role="system", kind="marker"),
        message(1, "[history compressed]", role="assistant", kind="marker"),
        message(1, "   ", role="user"),
        message(1, "", role="assistant"),
    ],
    ids=["system", "summary", "system-marker", "assistant-marker", "blank-user", "empty-assistant"],
)
def test_system_summary_marker_and_empty_messages_are_skipped(skipped: Message) -> None:
    assert render_message(skipped) is None
    assert build_chunks([skipped]) == []


def test_empty_tool_result_is_kept() -> None:
    assert render_message(message(1, "", role="tool", tool_name="rm")) == "Tool result (rm): "


def test_empty_input_gives_no_chunks() -> None:
    assert build_chunks([]) == []


def test_small_messages_share_one_chunk_joined_by_blank_lines() -> None:
    chunks = build_chunks([message(1, "a"), message(2, "b", role="assistant")])
    assert [c.content for c in chunks] == ["User: a\n\nAssistant: b"]


def test_chunk_records_seq_and_time_range_of_included_messages() -> None:
    messages = [message(3, "a"), message(4, "x", role="system"), message(7, "b")]
    [chunk] = build_chunks(messages)
    assert (chunk.start_seq, chunk.end_seq) == (3, 7)
    assert (chunk.started_at, chunk.ended_at) == (
        T0 + timedelta(minutes=3),
        T0 + timedelta(minutes=7),
    )


def test_skipped_messages_do_not_count_for_the_seq_range() -> None:
    messages = [message(1, "s", role="system"), message(2, "a"), message(3, "m", kind="marker")]
    [chunk] = build_chunks(messages)
    assert (chunk.start_seq, chunk.end_seq) == (2, 2)


def test_content_hash_is_sha256_hex_of_utf8_content() -> None:
    [chunk] = build_chunks([message(1, "Grüße, 🌍")])
    assert chunk.content_hash == hashlib.sha256(chunk.content.encode("utf-8")).hexdigest()


def test_same_messages_give_the_same_hash() -> None:
    messages = [
        message(1, "a"),
        message(2, "b", role="tool_call", tool_name="t", tool_args={"y": 1, "x": 2}),
    ]
    reordered_args = [messages[0], messages[1].model_copy(update={"tool_args": {"x": 2, "y": 1}})]
    assert build_chunks(messages)[0].content_hash == build_chunks(reordered_args)[0].content_hash


def test_breadcrumbs_are_left_empty_for_the_caller() -> None:
    assert build_chunks([message(1, "see /etc/hosts")])[0].breadcrumbs == []


def test_chunk_is_filled_exactly_up_to_max_chars() -> None:
    # "User: " + 4 chars = 10 chars; two of them plus the separator = 22.
    messages = [message(i, "abcd") for i in range(1, 4)]
    chunks = build_chunks(messages, max_chars=22)
    assert [len(c.content) for c in chunks] == [22, 10]
    assert [(c.start_seq, c.end_seq) for c in chunks] == [(1, 2), (3, 3)]


def test_one_char_over_max_chars_starts_a_new_chunk() -> None:
    messages = [message(i, "abcd") for i in range(1, 4)]
    chunks = build_chunks(messages, max_chars=21)
    assert [(c.start_seq, c.end_seq) for c in chunks] == [(1, 1), (2, 2), (3, 3)]


def test_chunks_never_exceed_max_chars_when_every_message_fits() -> None:
    messages = [message(i, "x" * (i * 37 % 300)) for i in range(1, 200)]
    chunks = build_chunks(messages, max_chars=1000)
    assert all(len(c.content) <= 1000 for c in chunks)
    assert len(chunks) > 1


def test_oversized_message_forms_a_chunk_of_its_own() -> None:
    big = "y" * 5000
    chunks = build_chunks([message(1, "a"), message(2, big), message(3, "b")])
    assert [(c.start_seq, c.end_seq) for c in chunks] == [(1, 1), (2, 2), (3, 3)]
    assert chunks[1].content == "User: " + big
    assert len(chunks[1].content) > DEFAULT_CHUNK_MAX_CHARS


def test_long_message_is_capped_with_its_middle_elided() -> None:
    body = "HEAD" + "m" * 20000 + "TAIL"
    [chunk] = build_chunks([message(1, body)])
    assert len(chunk.content) <= DEFAULT_MESSAGE_MAX_CHARS
    assert chunk.content.startswith("User: HEAD")
    assert chunk.content.endswith("TAIL")
    assert "characters elided" in chunk.content


def test_elision_marker_counts_the_characters_removed() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    capped = elide_middle(text, 200)
    head, _, rest = capped.partition("\n[… ")
    count, _, tail = rest.partition(" characters elided …]\n")
    assert len(head) + int(count) + len(tail) == len(text)
    assert text.startswith(head)
    assert text.endswith(tail)


@pytest.mark.parametrize("cap", [1, 5, 10, 30, 31, 32, 33, 50, 199, 999, 1000])
def test_elision_never_exceeds_the_cap(cap: int) -> None:
    text = "z" * 1000
    capped = elide_middle(text, cap)
    assert len(capped) <= cap
    assert capped == text if cap >= len(text) else len(capped) >= cap - 1


@pytest.mark.parametrize("cap", [1, 5, 31, 50, 200, 999, 1000, 2000])
def test_elided_parts_are_what_elide_middle_keeps(cap: int) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    head, cut, tail = elided_parts(text, cap)
    capped = elide_middle(text, cap)
    assert capped.startswith(head) and capped.endswith(tail)
    assert len(head) + cut + len(tail) == len(text) if cut else capped == head
    assert not cut or f"{cut} characters elided" in capped


def test_text_within_the_cap_is_untouched() -> None:
    assert elide_middle("short", 5) == "short"


def test_message_cap_applies_to_the_rendered_text_with_its_prefix() -> None:
    [chunk] = build_chunks(
        [message(1, "q" * 500, role="tool", tool_name="ls")], message_max_chars=100
    )
    assert len(chunk.content) <= 100
    assert chunk.content.startswith("Tool result (ls): ")


def test_joined_chunks_contain_every_rendered_message_once_in_order() -> None:
    messages = [
        message(i, f"message {i} " + "w" * (i * 91 % 700), role=("user", "assistant")[i % 2])
        for i in range(1, 120)
    ]
    messages.insert(10, message(500, "system prompt", role="system"))
    chunks = build_chunks(messages, max_chars=900)
    rendered = [r for m in messages if (r := render_message(m)) is not None]
    assert "\n\n".join(c.content for c in chunks) == "\n\n".join(rendered)
    assert [c.start_seq for c in chunks] == sorted(c.start_seq for c in chunks)


def test_lone_surrogates_are_replaced_so_content_is_valid_utf8() -> None:
    [chunk] = build_chunks([message(1, "bad \ud800 char")])
    assert chunk.content == "User: bad \ufffd char"
    chunk.content.encode("utf-8")


@pytest.mark.parametrize(
    ("max_chars", "message_max_chars"),
    [(0, 10), (10, 0), (-1, -1), (MAX_TEXT_CHARS + 1, 10), (10, 10**6)],
)
def test_sizes_outside_what_a_chunk_may_hold_are_refused(
    max_chars: int, message_max_chars: int
) -> None:
    """Non-positive sizes, and sizes past MAX_TEXT_CHARS (a chunk add_chunks would refuse,
    whose text index entry may pass PostgreSQL's 1 MB)."""
    with pytest.raises(InvalidInputError, match="chunk sizes must be from 1 to"):
        build_chunks([message(1)], max_chars=max_chars, message_max_chars=message_max_chars)


def test_a_huge_message_makes_a_chunk_no_bigger_than_the_store_takes() -> None:
    """A 950,000-character tool result, at the largest sizes allowed: its chunk is cut to
    MAX_TEXT_CHARS, which add_chunks (and the text index) take."""
    chunks = build_chunks(
        [message(1, "word " * 190_000)], max_chars=MAX_TEXT_CHARS, message_max_chars=MAX_TEXT_CHARS
    )
    assert [len(c.content) <= MAX_TEXT_CHARS for c in chunks] == [True]


def test_whitespace_is_every_character_strip_removes() -> None:
    """The repair's SQL trims WHITESPACE to tell the messages render_message leaves out."""
    expected = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    assert expected == WHITESPACE
    assert render_message(message(1, WHITESPACE, role="assistant")) is None


@pytest.mark.parametrize(
    ("terms", "kept"),
    [
        (["user", "accounts"], ("accounts",)),
        (["Users", "Tool", "RESULTS", "weather"], ("weather",)),
        (
            ["assistants", "calls", "call", "result", "tools"],
            ("assistants", "calls", "call", "result", "tools"),
        ),
        (["username", "toolbox", "resultant"], ("username", "toolbox", "resultant")),
        ([], ()),
    ],
)
def test_raw_history_terms_leave_out_the_rendering_words_unless_nothing_else(
    terms: list[str], kept: tuple[str, ...]
) -> None:
    assert raw_history_terms(terms) == kept
