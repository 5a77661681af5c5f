"""The scratchpad tool's spec and the checks on its arguments."""

from __future__ import annotations

from typing import Any

import pytest

from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.tools.scratchpad import (
    SCRATCHPAD_PARAMETERS,
    DeleteSection,
    ListSections,
    ReadSection,
    WriteSection,
    parse_scratchpad_arguments,
)


def test_parameters_name_the_four_actions_and_require_only_action() -> None:
    """write, read, delete and list; section and text are per action."""
    assert SCRATCHPAD_PARAMETERS["properties"]["action"]["enum"] == [
        "write",
        "read",
        "delete",
        "list",
    ]
    assert SCRATCHPAD_PARAMETERS["required"] == ["action"]
    assert set(SCRATCHPAD_PARAMETERS["properties"]) == {"action", "section", "text"}


def test_each_action_reads_its_arguments() -> None:
    """write takes section and text (empty text clears), read and delete a section, list
    nothing."""
    assert parse_scratchpad_arguments(
        {"action": "write", "section": " plan ", "text": "1. port"}
    ) == WriteSection("plan", "1. port")
    assert parse_scratchpad_arguments(
        {"action": "write", "section": "plan", "text": ""}
    ) == WriteSection("plan", "")
    assert parse_scratchpad_arguments({"action": "read", "section": "plan"}) == ReadSection("plan")
    assert parse_scratchpad_arguments({"action": "delete", "section": " plan"}) == (
        DeleteSection("plan")
    )
    assert parse_scratchpad_arguments({"action": "list"}) == ListSections()


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({}, InvalidInputError, "action is required"),
        (
            {"action": "append"},
            InvalidInputError,
            "action must be one of write, read, delete, list",
        ),
        ({"action": "read"}, InvalidInputError, "section is required"),
        ({"action": "delete"}, InvalidInputError, "section is required"),
        ({"action": "delete", "section": ["plan"]}, InvalidTypeError, "section must be text"),
        ({"action": "write", "section": "plan"}, InvalidInputError, "text is required"),
        ({"action": "write", "section": "plan", "text": 5}, InvalidTypeError, "text must be text"),
        ({"action": "write", "section": "p\x00", "text": "t"}, InvalidInputError, "NUL byte"),
        ({"action": "write", "section": "plan", "text": "\x00"}, InvalidInputError, "NUL byte"),
        ({"action": "read", "section": "s" * 501}, InvalidInputError, "the limit is 500"),
        (
            {"action": "write", "section": "plan", "text": "t" * 100_001},
            InvalidInputError,
            "the limit is 100,000",
        ),
    ],
)
def test_bad_arguments_are_refused_with_a_message_for_the_model(
    arguments: dict[str, Any], error: type[Exception], says: str
) -> None:
    """Each unusable argument is refused, and the message says what is wrong."""
    with pytest.raises(error) as caught:
        parse_scratchpad_arguments(arguments)
    assert says in str(caught.value)
