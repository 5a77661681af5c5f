"""The memory tool's spec and the checks on its arguments: what a model may send and is told."""

from __future__ import annotations

import json
from typing import Any

import pytest

from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.tools.memory import (
    MEMORY_DESCRIPTION,
    MEMORY_PARAMETERS,
    ForgetFact,
    ListCategories,
    SaveFact,
    SearchFacts,
    parse_memory_arguments,
)


def save(**arguments: Any) -> dict[str, Any]:
    return {"action": "save", "category": "preferences", "key": "editor", "value": "neovim"} | (
        arguments
    )


def test_description_carries_the_confidence_scale_and_the_difference_from_memory_search() -> None:
    """The model reads the spec's confidence scale and when to use memory_search instead."""
    for phrase in ["tool output 95", "user statement 80", "web 50", "guess 30", "memory_search"]:
        assert phrase in MEMORY_DESCRIPTION


def test_parameters_are_a_json_schema_object_naming_every_action_and_source() -> None:
    """The schema lists the four actions and the four sources, and requires only action."""
    properties = MEMORY_PARAMETERS["properties"]
    assert MEMORY_PARAMETERS["type"] == "object"
    assert MEMORY_PARAMETERS["required"] == ["action"]
    assert properties["action"]["enum"] == ["save", "search", "forget", "list"]
    assert properties["source"]["enum"] == [
        "conversation",
        "tool_call",
        "auto_discovery",
        "user_explicit",
    ]
    assert properties["confidence"] == properties["confidence"] | {"minimum": 0, "maximum": 100}
    assert "user_id" not in properties
    json.dumps(MEMORY_PARAMETERS)  # it must travel as JSON


def test_save_with_only_the_required_arguments() -> None:
    """save needs category, key and value; source defaults to conversation, the rest to None."""
    assert parse_memory_arguments(save()) == SaveFact("preferences", "editor", "neovim")


def test_save_takes_every_argument_and_numbers_as_models_send_them() -> None:
    """Every save argument is read; 80.0 and "80" are 80, "30" days is 30.0."""
    parsed = parse_memory_arguments(
        save(
            source=" User_Explicit ",
            confidence="80",
            expires_days="30",
            source_context="said in chat",
        )
    )
    assert parsed == SaveFact(
        "preferences", "editor", "neovim", "user_explicit", 80, 30.0, "said in chat"
    )
    assert parse_memory_arguments(save(confidence=80.0)) == SaveFact(
        "preferences", "editor", "neovim", confidence=80
    )


def test_null_optional_arguments_count_as_left_out() -> None:
    """Models send null for what they leave out: that is the default, not an error."""
    parsed = parse_memory_arguments(
        save(source=None, confidence=None, expires_days=None, source_context=None)
    )
    assert parsed == SaveFact("preferences", "editor", "neovim")


def test_search_forget_and_list_read_their_arguments() -> None:
    """search takes a query, forget a key and an optional category, list nothing."""
    assert parse_memory_arguments({"action": "search", "query": "editor"}) == SearchFacts("editor")
    assert parse_memory_arguments({"action": "forget", "key": " editor "}) == ForgetFact("editor")
    assert parse_memory_arguments(
        {"action": "forget", "key": "editor", "category": "preferences"}
    ) == ForgetFact("editor", "preferences")
    assert parse_memory_arguments({"action": "LIST", "query": "ignored"}) == ListCategories()


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({}, InvalidInputError, "action is required"),
        ({"action": "remember"}, InvalidInputError, "action must be one of save, search"),
        ({"action": 3}, InvalidTypeError, "got the number 3"),
        ({"action": "save", "key": "k", "value": "v"}, InvalidInputError, "category is required"),
        (save(key=None), InvalidInputError, "key is required"),
        (save(value="  "), InvalidInputError, "value is empty"),
        (save(value=["neovim"]), InvalidTypeError, "value must be text, got an array"),
        (save(category={"a": 1}), InvalidTypeError, "got an object"),
        (save(source="web"), InvalidInputError, "source must be one of conversation"),
        (save(confidence=101), InvalidInputError, "confidence must be from 0 to 100, got 101"),
        (save(confidence=-1), InvalidInputError, "confidence must be from 0 to 100, got -1"),
        (save(confidence=85.5), InvalidTypeError, "whole number"),
        (save(confidence=True), InvalidTypeError, "got a boolean"),
        (save(confidence="high"), InvalidTypeError, "got text"),
        (save(expires_days=0), InvalidInputError, "expires_days must be from 0.001 to 36500"),
        (save(expires_days=0.000_999), InvalidInputError, "from 0.001 to 36500 days"),
        (save(expires_days=36_501), InvalidInputError, "from 0.001 to 36500 days"),
        (save(expires_days=float("nan")), InvalidInputError, "expires_days"),
        (save(expires_days=float("inf")), InvalidInputError, "expires_days"),
        # JSON's whole numbers are unbounded: one beyond a float's range is out of range too.
        (save(expires_days=10**400), InvalidInputError, "36500 days, got a number of about 401"),
        (save(expires_days=-(10**400)), InvalidInputError, "from 0.001 to 36500 days, got a"),
        (save(confidence=10**400), InvalidInputError, "confidence must be from 0 to 100"),
        # Past Python's 4,300 digits a whole number cannot even be written out.
        (save(confidence=10**5000), InvalidInputError, "got a number of about 5,001 digits"),
        (save(expires_days=10**5000), InvalidInputError, "36500 days, got a number of about"),
        (save(confidence=10**45), InvalidInputError, "got " + "1" + "0" * 39 + "…"),
        (save(key="k" * 201), InvalidInputError, "the limit is 200"),
        (save(category="c" * 101), InvalidInputError, "the limit is 100"),
        (save(value="nul\x00byte"), InvalidInputError, "NUL byte"),
        (save(source_context="nul\x00"), InvalidInputError, "NUL byte"),
        (save(value="\ud800"), InvalidInputError, "not valid Unicode"),
        ({"action": "search"}, InvalidInputError, "query is required"),
        ({"action": "search", "query": ""}, InvalidInputError, "query is empty"),
        ({"action": "search", "query": "a\x00"}, InvalidInputError, "NUL byte"),
        ({"action": "forget"}, InvalidInputError, "key is required"),
        ({"action": "forget", "key": "k", "category": 7}, InvalidTypeError, "category must be"),
    ],
)
def test_bad_arguments_are_refused_with_a_message_for_the_model(
    arguments: dict[str, Any], error: type[Exception], says: str
) -> None:
    """Each unusable argument is refused, and the message says what is wrong."""
    with pytest.raises(error) as caught:
        parse_memory_arguments(arguments)
    assert says in str(caught.value)
