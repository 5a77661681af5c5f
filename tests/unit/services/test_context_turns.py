"""context_turns: the session's context messages as the model's turns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from navi_memory.schemas import Message
from navi_memory.services.context import context_turns


def message(seq: int, role: str, content: str = "", **fields: Any) -> Message:
    created_at = datetime(2026, 11, 6, tzinfo=UTC)
    return Message(
        session_id="s1", seq=seq, role=role, content=content, created_at=created_at, **fields
    )


def test_text_on_a_tool_call_is_the_text_of_its_assistant_turn() -> None:
    turns = context_turns(
        [
            message(1, "user", "what port?"),
            message(2, "tool_call", "Let me look.", tool_name="kv", tool_args={"a": 1}),
            message(3, "tool", "9931", tool_name="kv"),
        ]
    )
    assert [(t.role, t.content, len(t.tool_calls)) for t in turns] == [
        ("user", "what port?", 0),
        ("assistant", "Let me look.", 1),
        ("tool", "9931", 0),
    ]


def test_text_on_a_tool_call_follows_the_assistant_text_right_before_it() -> None:
    turns = context_turns(
        [
            message(1, "assistant", "Checking."),
            message(2, "tool_call", "  ", tool_name="a"),
            message(3, "tool_call", "And the port.", tool_name="b"),
        ]
    )
    [turn] = turns
    assert turn.content == "Checking.\n\nAnd the port."
    assert [call.name for call in turn.tool_calls] == ["a", "b"]
