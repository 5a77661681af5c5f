"""plan_compression: which context rows a compression demotes, tool calls kept with results."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from navi_memory.schemas import Message
from navi_memory.services.compression import plan_compression

T0 = datetime(2026, 11, 6, tzinfo=UTC)


def context(*roles: str) -> list[Message]:
    """Context rows with these roles, seq 1, 2, ...; "summary" is a compression summary."""
    rows = []
    for seq, role in enumerate(roles, start=1):
        fields: dict[str, Any] = {"role": role}
        if role == "summary":
            fields = {"role": "system", "kind": "summary"}
        elif role in ("tool_call", "tool"):
            fields["tool_name"] = "t"
        rows.append(Message(id=seq, session_id="s1", seq=seq, content="x", created_at=T0, **fields))
    return rows


def kept_roles(rows: list[Message], keep_last: int) -> list[str] | None:
    plan = plan_compression(rows, keep_last)
    if plan is None:
        return None
    demoted = {m.id for m in plan.demoted}
    return [m.role for m in rows if m.id not in demoted]


def test_keep_last_counts_conversation_messages() -> None:
    assert kept_roles(context("summary", "user", "assistant", "user"), 2) == ["assistant", "user"]


@pytest.mark.parametrize(
    ("roles", "keep_last", "kept"),
    [
        # The boundary falls between a call and its result: the call is kept too.
        (("user", "tool_call", "tool", "assistant"), 2, ["tool_call", "tool", "assistant"]),
        # ... between two results of one call turn: both calls and both results are kept.
        (
            ("user", "tool_call", "tool_call", "tool", "tool", "assistant"),
            2,
            ["tool_call", "tool_call", "tool", "tool", "assistant"],
        ),
        # ... between two calls of one turn: the first call stays with the second.
        (
            ("user", "tool_call", "tool_call", "tool", "tool"),
            3,
            ["tool_call", "tool_call", "tool", "tool"],
        ),
        # A result the host stored with no call before it is kept as it is.
        (("user", "assistant", "tool", "user"), 2, ["tool", "user"]),
    ],
)
def test_a_kept_tool_result_keeps_its_call(
    roles: tuple[str, ...], keep_last: int, kept: list[str]
) -> None:
    assert kept_roles(context(*roles), keep_last) == kept


def test_when_keeping_the_call_would_demote_nothing_the_results_leave_with_it() -> None:
    assert kept_roles(context("tool_call", "tool", "tool", "user"), 2) == ["user"]
    assert kept_roles(context("tool_call", "tool", "tool"), 1) == []
    assert kept_roles(context("tool_call", "tool_call", "tool", "tool", "user"), 4) == ["user"]


def test_a_call_still_waiting_for_its_result_is_never_demoted() -> None:
    """keep_last=0 while a tool runs: the call stays, or the result appended next would be in
    the context with no call before it (a prompt OpenAI-style APIs refuse)."""
    assert kept_roles(context("user", "assistant", "tool_call"), 0) == ["tool_call"]
    assert kept_roles(context("user", "tool_call", "tool_call"), 0) == ["tool_call", "tool_call"]
    # Answered calls leave as before.
    assert kept_roles(context("user", "tool_call", "tool"), 0) == []
    # Nothing else to demote: no compression at all.
    assert kept_roles(context("tool_call"), 0) is None
    # Two calls, one result so far: the turn is open, and the second result must find its call.
    assert kept_roles(context("user", "tool_call", "tool_call", "tool"), 0) == [
        "tool_call",
        "tool_call",
        "tool",
    ]
    # Every call of the turn answered: it leaves.
    assert kept_roles(context("user", "tool_call", "tool_call", "tool", "tool"), 0) == []
