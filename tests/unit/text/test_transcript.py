"""render_transcript: the extractor's view of a session, with the spec's cuts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from navi_memory.constants import TRANSCRIPT_MAX_CHARS, TRANSCRIPT_TOOL_OUTPUT_MAX_CHARS
from navi_memory.errors import InvalidInputError
from navi_memory.schemas import Message
from navi_memory.text.transcript import render_transcript, says_again, transcript_line

T0 = datetime(2026, 11, 6, 18, 41, tzinfo=UTC)


def message(seq: int, content: str = "hello", **fields: Any) -> Message:
    fields.setdefault("role", "user")
    fields.setdefault("created_at", T0 + timedelta(minutes=seq))
    return Message(session_id="s1", seq=seq, content=content, **fields)


def test_spec_sizes_are_the_defaults() -> None:
    """The spec fixes the tool result cut at 500 and the whole transcript at 12,000."""
    assert (TRANSCRIPT_TOOL_OUTPUT_MAX_CHARS, TRANSCRIPT_MAX_CHARS) == (500, 12_000)


def test_user_and_assistant_messages_are_prefixed_one_per_line() -> None:
    """User and assistant messages read as `User: …` and `Assistant: …` lines, in order."""
    transcript = render_transcript(
        [message(1, "I use neovim"), message(2, "Noted.", role="assistant")]
    )
    assert transcript == "User: I use neovim\nAssistant: Noted."


def test_tool_call_renders_name_and_compact_sorted_args() -> None:
    """A tool call reads `[Tool call] name(args)` with the arguments as compact JSON."""
    call = message(1, "", role="tool_call", tool_name="shell", tool_args={"cmd": "ls", "cwd": "/"})
    assert transcript_line(call) == '[Tool call] shell({"cmd":"ls","cwd":"/"})'


def test_tool_call_without_args_and_with_words_alongside() -> None:
    """A call without arguments has empty parentheses; words said with it come first."""
    bare = message(1, "", role="tool_call", tool_name="now")
    spoken = message(2, "Let me check.", role="tool_call", tool_name="now")
    assert transcript_line(bare) == "[Tool call] now()"
    assert transcript_line(spoken) == "Assistant: Let me check.\n[Tool call] now()"


def test_tool_result_renders_name_and_output() -> None:
    """A tool result reads `[Tool result] name: output`."""
    result = message(1, "Python 3.12.3", role="tool", tool_name="shell")
    assert transcript_line(result) == "[Tool result] shell: Python 3.12.3"


def test_long_tool_result_is_cut_to_500_characters_with_the_cut_marked() -> None:
    """A tool result longer than 500 characters keeps its head and tail and marks the cut."""
    output = "HEAD " + "x" * 2000 + " TAIL"
    line = transcript_line(message(1, output, role="tool", tool_name="cat"))
    assert line is not None
    rendered_output = line.removeprefix("[Tool result] cat: ")
    assert len(rendered_output) <= 500
    assert rendered_output.startswith("HEAD ")
    assert rendered_output.endswith(" TAIL")
    assert "characters elided" in rendered_output


def test_long_tool_call_arguments_are_cut_like_results() -> None:
    """A tool call carrying a whole file as its argument is cut to 500 characters too."""
    call = message(1, "", role="tool_call", tool_name="write_file", tool_args={"body": "y" * 5000})
    line = transcript_line(call)
    assert line is not None
    assert len(line) <= len("[Tool call] write_file()") + 500
    assert "characters elided" in line


def test_short_results_are_not_cut() -> None:
    """A result of exactly 500 characters is kept whole."""
    output = "z" * 500
    assert transcript_line(message(1, output, role="tool", tool_name="t")) == (
        f"[Tool result] t: {output}"
    )


@pytest.mark.parametrize(
    "skipped",
    [
        message(1, "You are Navi.", role="system"),
        message(1, "Earlier: ports.", role="system", kind="summary"),
        message(1, "Earlier: ports.", role="assistant", kind="summary"),
        message(1, "[compressed]", role="system", kind="marker"),
        message(1, "  \n ", role="user"),
        message(1, "", role="assistant"),
    ],
    ids=["system", "summary", "assistant-summary", "marker", "blank-user", "empty-assistant"],
)
def test_system_summaries_markers_and_blank_messages_are_left_out(skipped: Message) -> None:
    """System prompts, compression summaries, markers and blank messages add nothing."""
    assert transcript_line(skipped) is None
    assert render_transcript([skipped]) == ""


def test_empty_tool_result_is_still_a_line() -> None:
    """A tool that returned nothing still ran: its result line stays."""
    assert transcript_line(message(1, "", role="tool", tool_name="rm")) == "[Tool result] rm: "


def test_demoted_messages_are_included() -> None:
    """Messages compression took out of the context are history and are read."""
    demoted = message(1, "My cat is called Pixel", is_context=False)
    assert render_transcript([demoted]) == "User: My cat is called Pixel"


def test_long_transcript_keeps_head_and_tail_and_marks_the_cut() -> None:
    """Over 12,000 characters, the middle goes; the head and the tail stay, the cut is said."""
    messages = [message(1, "FIRST I live in Lisbon")]
    messages += [message(i, f"filler {i} " + "f" * 200) for i in range(2, 200)]
    messages += [message(200, "LAST I prefer terse answers")]
    transcript = render_transcript(messages)
    assert len(transcript) <= TRANSCRIPT_MAX_CHARS
    assert transcript.startswith("User: FIRST I live in Lisbon")
    assert transcript.endswith("User: LAST I prefer terse answers")
    assert "characters elided" in transcript
    assert "filler 100 " not in transcript


def test_custom_limits_apply() -> None:
    """Both cuts follow the limits passed in."""
    transcript = render_transcript(
        [message(1, "a" * 100), message(2, "b" * 100, role="tool", tool_name="t")],
        max_chars=80,
        tool_output_max_chars=40,
    )
    assert len(transcript) <= 80


@pytest.mark.parametrize("limits", [{"max_chars": 0}, {"tool_output_max_chars": 0}])
def test_non_positive_limits_are_refused(limits: dict[str, int]) -> None:
    """A limit below one is a caller's bug, reported as InvalidInputError."""
    with pytest.raises(InvalidInputError):
        render_transcript([message(1)], **limits)


@pytest.mark.parametrize(
    ("value", "said", "expected"),
    [
        ("Brno", ["thanks!"], False),
        ("Brno", ["Actually I still live in brno."], True),
        ("dark blue", ["blue, and dark please"], True),  # each word, in any order
        ("dark blue", ["dark mode", "blue sky"], False),  # in one message
        ("Lives in Brno", ["I live in Brno"], False),  # a paraphrase is not a restatement
        ("Zu\u0308rich", ["I moved to Zürich"], True),  # Unicode forms
        ("C++", ["I write c++ all day"], True),
        ("the", ["the end"], True),  # nothing but stop words: the whole value
        ("Brno", [], False),
        ("Rome", ["I switched to Chrome yesterday."], False),  # words, not substrings
        ("vim", ["my vimrc is long"], False),
        ("2", ["I have 12 cats"], False),
        ("2", ["I have 2 cats"], True),
        ("Straße", ["STRASSE 5"], True),  # case folded as Unicode folds it
        ("北京", ["我住在北京市"], True),  # an unspaced script: inside the letters around it
        ("", ["anything"], False),
    ],
)
def test_says_again_wants_every_word_of_the_value_in_one_message(
    value: str, said: list[str], expected: bool
) -> None:
    assert says_again(value, said) is expected


@pytest.mark.parametrize(
    ("value", "said"),
    [("不喝咖啡", "我喝咖啡，不喝茶"), ("东京都", "我去过东京和京都")],
)
def test_a_chinese_value_is_said_again_only_as_a_whole_word(value: str, said: str) -> None:
    """Every pair of the value somewhere in the message is not the value: "I drink coffee,
    not tea" does not restate "does not drink coffee"."""
    assert not says_again(value, [said])
    assert says_again(value, [f"对，{value}。"])
