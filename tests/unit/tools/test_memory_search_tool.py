"""The memory_search tool without a database: its spec, its argument rules, its error texts and
how it applies the ToolContext (the real searches are in tests/integration/test_search.py)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import ollama
import pytest
from hypothesis import given
from hypothesis import strategies as st

from navi_memory.constants import PERMISSION_READ_ALL
from navi_memory.errors import InvalidInputError, InvalidTypeError, StorageError
from navi_memory.request_context import (
    current_permissions,
    current_session_id,
    current_user_id,
    request_context,
)
from navi_memory.schemas import MemoryHit
from navi_memory.tools import (
    MEMORY_SEARCH,
    MemorySearchArguments,
    ToolContext,
    decode_arguments,
    memory_search_tool,
    parse_memory_search_arguments,
)

ALICE = uuid.UUID(int=1)
BOB = uuid.UUID(int=2)


class RecordingSearcher:
    """Answers one fixed hit and records the call and the request context it ran in."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.calls: list[dict[str, Any]] = []

    async def search(
        self,
        query: str,
        scope: str = "all",
        k: int = 5,
        *,
        current_session_id: str | None = None,
        summary_at: datetime | None = None,
    ) -> list[MemoryHit]:
        self.calls.append(
            {
                "query": query,
                "scope": scope,
                "k": k,
                "current_session_id": current_session_id,
                "user": current_user_id(),
                "session": _session(),
                "permissions": current_permissions(),
            }
        )
        if self.fail is not None:
            raise self.fail
        return [
            MemoryHit(
                source_type="fact",
                text="8099",
                timestamp=datetime(2026, 11, 9, 12, 0, tzinfo=UTC),
                score=1.0,
                via="text",
                category="technical",
                key="server_port",
            )
        ]


def _session() -> str | None:
    return current_session_id()


# --- the spec -------------------------------------------------------------------------------


def test_the_spec_is_a_function_calling_tool_that_ollama_accepts() -> None:
    """The spec passes the ollama client's own Tool model with query required and the enum."""
    spec = memory_search_tool(RecordingSearcher()).spec()
    tool = ollama.Tool.model_validate(spec)
    assert tool.type == "function"
    assert tool.function is not None and tool.function.name == MEMORY_SEARCH
    params = tool.function.parameters
    assert params is not None and params.type == "object"
    assert params.required == ["query"]
    assert params.properties is not None
    assert params.properties["query"].type == "string"
    assert params.properties["scope"].enum == ["all", "facts", "raw", "sketches"]
    assert params.properties["k"].type == "integer"


def test_the_spec_has_the_openai_function_shape_and_is_json() -> None:
    """OpenAI's shape: type=function, a name of [a-zA-Z0-9_-]{1,64}, a JSON-schema object."""
    spec = memory_search_tool(RecordingSearcher()).spec()
    assert json.loads(json.dumps(spec)) == spec
    assert set(spec) == {"type", "function"}
    function = spec["function"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", function["name"])
    assert function["description"]
    params = function["parameters"]
    assert params["type"] == "object"
    assert set(params["required"]) <= set(params["properties"])
    assert params["properties"]["k"] | {} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 20,
        "default": 5,
        "description": params["properties"]["k"]["description"],
    }
    assert "user_id" not in params["properties"] and "session_id" not in params["properties"]


def test_spec_returns_a_fresh_copy() -> None:
    """Changing one returned spec does not change the next."""
    tool = memory_search_tool(RecordingSearcher())
    tool.spec()["function"]["parameters"]["properties"].clear()
    assert "query" in tool.spec()["function"]["parameters"]["properties"]


# --- arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"query": "port"}, MemorySearchArguments("port", "all", 5)),
        ({"query": "port", "scope": "raw", "k": 3}, MemorySearchArguments("port", "raw", 3)),
        ({"query": "port", "scope": "sessions"}, MemorySearchArguments("port", "all", 5)),
        ({"query": "port", "scope": None, "k": None}, MemorySearchArguments("port", "all", 5)),
        ({"query": "port", "k": 0}, MemorySearchArguments("port", "all", 1)),
        ({"query": "port", "k": -3}, MemorySearchArguments("port", "all", 1)),
        ({"query": "port", "k": 99}, MemorySearchArguments("port", "all", 20)),
        ({"query": "port", "k": 10**40}, MemorySearchArguments("port", "all", 20)),
        ({"query": "port", "k": 7.0}, MemorySearchArguments("port", "all", 7)),
        ({"query": "port", "k": " 8 "}, MemorySearchArguments("port", "all", 8)),
        ({"query": "port", "k": "+007"}, MemorySearchArguments("port", "all", 7)),
        ({"query": "port", "k": "99999999999"}, MemorySearchArguments("port", "all", 20)),
        ({"query": "port", "k": "-99999999999"}, MemorySearchArguments("port", "all", 1)),
        ({"query": "port", "k": "9" * 50_000}, MemorySearchArguments("port", "all", 20)),
        ({"query": "port", "k": "0" * 30 + "3"}, MemorySearchArguments("port", "all", 3)),
        ({"query": "port", "limit": 3}, MemorySearchArguments("port", "all", 5)),
    ],
)
def test_arguments_are_normalised(
    arguments: dict[str, Any], expected: MemorySearchArguments
) -> None:
    """Unknown scope → all, k clamped to 1–20, whole numbers as float or text taken (text of
    any length: clamped as the same int would be)."""
    assert parse_memory_search_arguments(arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "query is required"),
        ({"query": None}, "query is required"),
        ({"query": ""}, "query is empty"),
        ({"query": "   \n"}, "query is empty"),
        ({"query": 42}, "query must be a string"),
        ({"query": ["port"]}, "query must be a string"),
        ({"query": "a\x00b"}, "NUL"),
        ({"query": "x" * 100_001}, "limit"),
        ({"query": "port", "scope": 3}, "scope must be one of"),
        ({"query": "port", "k": True}, "k must be a whole number"),
        ({"query": "port", "k": 2.5}, "k must be a whole number"),
        ({"query": "port", "k": float("nan")}, "k must be a whole number"),
        ({"query": "port", "k": float("inf")}, "k must be a whole number"),
        ({"query": "port", "k": "five"}, "k must be a whole number"),
        ({"query": "port", "k": "5.5"}, "k must be a whole number"),
        ({"query": "port", "k": "1e3"}, "k must be a whole number"),
        ({"query": "port", "k": [5]}, "k must be a whole number"),
    ],
)
def test_bad_arguments_raise_input_errors_with_a_message(
    arguments: dict[str, Any], message: str
) -> None:
    """Missing/empty query and wrong types are InvalidInputError (or InvalidTypeError)."""
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        parse_memory_search_arguments(arguments)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, {}),
        ("", {}),
        ('{"query": "port", "k": 3}', {"query": "port", "k": 3}),
        ({"query": "port"}, {"query": "port"}),
    ],
)
def test_arguments_come_as_a_mapping_or_json_text(raw: Any, expected: dict[str, Any]) -> None:
    """Models send arguments as an object or as its JSON text; both decode to a dict."""
    assert decode_arguments(raw) == expected


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("{not json", InvalidInputError),
        ("[1, 2]", InvalidTypeError),
        ('"port"', InvalidTypeError),
        ("[" * 100_000, InvalidInputError),
        ({"user_id": str(BOB), "query": "x"}, InvalidInputError),
        ('{"query": "x", "session_id": "s9"}', InvalidInputError),
        ({1: "x"}, InvalidTypeError),
    ],
)
def test_undecodable_arguments_and_identity_arguments_are_refused(raw: Any, error: type) -> None:
    """Bad JSON, non-objects and user_id/session_id arguments are navi_memory input errors."""
    with pytest.raises(error):
        decode_arguments(raw)


# --- the call -------------------------------------------------------------------------------


async def test_a_call_answers_format_hits_text_for_the_contexts_user_and_session() -> None:
    """The search runs as the ToolContext's user, session and permissions; answer is text."""
    searcher = RecordingSearcher()
    tool = memory_search_tool(searcher)
    answer = await tool.call(
        '{"query": "server port", "scope": "facts", "k": 50}',
        ToolContext(user_id=ALICE, session_id="s1"),
    )
    assert answer.startswith('memory_search "server port" (scope=facts): 1 hit(s)')
    assert "   server_port: 8099" in answer
    [call] = searcher.calls
    assert call["k"] == 20 and call["scope"] == "facts"
    assert (call["user"], call["session"], call["current_session_id"]) == (ALICE, "s1", "s1")
    assert current_user_id() is None  # the context is left as it was


async def test_empty_context_fields_fall_back_to_the_request_context() -> None:
    """No ToolContext (or None fields): the request context's user, session and permissions."""
    searcher = RecordingSearcher()
    tool = memory_search_tool(searcher)
    with request_context(user_id=BOB, session_id="s7", permissions=[PERMISSION_READ_ALL]):
        await tool.call({"query": "x"})
        await tool.call({"query": "x"}, ToolContext(session_id="s8"))
        await tool.call({"query": "x"}, ToolContext(user_id=BOB, permissions=frozenset()))
    first, second, third = searcher.calls
    assert (first["user"], first["session"]) == (BOB, "s7")
    assert first["permissions"] == {PERMISSION_READ_ALL}
    assert (second["user"], second["session"]) == (BOB, "s8")
    assert (third["user"], third["session"], third["permissions"]) == (BOB, "s7", frozenset())


async def test_acting_for_a_user_a_tool_context_cannot_name_another_or_grant_more() -> None:
    """Inside a request context acting for Bob, a ToolContext naming Alice, or granting
    read_all Bob's request does not hold, is refused as the tool's error text, as the API
    refuses Bob's code naming Alice's id; with no request context the ToolContext decides."""
    searcher = RecordingSearcher()
    tool = memory_search_tool(searcher)
    with request_context(user_id=BOB, session_id="s7"):
        other = await tool.call({"query": "x"}, ToolContext(user_id=ALICE))
        more = await tool.call(
            {"query": "x"}, ToolContext(permissions=frozenset({PERMISSION_READ_ALL}))
        )
    assert other.startswith("memory_search error: this request acts for user ")
    assert str(ALICE) in other
    assert more == (
        f"memory_search error: the ToolContext grants {PERMISSION_READ_ALL}, which this "
        "request does not hold"
    )
    assert searcher.calls == []
    await tool.call(
        {"query": "x"}, ToolContext(user_id=ALICE, permissions=frozenset({PERMISSION_READ_ALL}))
    )
    [alone] = searcher.calls
    assert (alone["user"], alone["permissions"]) == (ALICE, {PERMISSION_READ_ALL})


@given(
    st.one_of(
        st.none(),
        st.text(max_size=50),
        st.dictionaries(
            st.sampled_from(["query", "scope", "k", "user_id", "other"]),
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(),
                st.floats(),
                st.text(max_size=20),
                st.lists(st.integers(), max_size=2),
            ),
        ),
    )
)
async def test_no_argument_ever_raises_out_of_a_call(arguments: Any) -> None:
    """Whatever the model sends, the call answers text: results or `memory_search error: …`."""
    answer = await memory_search_tool(RecordingSearcher()).call(arguments, ToolContext(ALICE))
    assert answer.startswith(("memory_search error: ", 'memory_search "'))


async def test_argument_errors_come_back_as_one_line_of_text_and_nothing_is_searched() -> None:
    """A missing query or a user_id argument is a short error text; the search never runs."""
    searcher = RecordingSearcher()
    tool = memory_search_tool(searcher)
    missing = await tool.call({}, ToolContext(ALICE))
    assert missing.startswith("memory_search error: query is required")
    forged = await tool.call({"query": "x", "user_id": str(BOB)}, ToolContext(ALICE))
    assert forged.startswith("memory_search error: user_id is not an argument")
    assert "\n" not in missing + forged
    assert searcher.calls == []


async def test_a_storage_failure_is_an_error_text_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """StorageError: the model gets a short text without internals; the log has the details."""
    tool = memory_search_tool(RecordingSearcher(fail=StorageError("connection refused at db:5432")))
    with caplog.at_level(logging.WARNING, logger="navi_memory.tools.base"):
        answer = await tool.call({"query": "x"}, ToolContext(ALICE))
    assert answer == "memory_search error: memory storage is unavailable right now; try later"
    assert any("db:5432" in record.getMessage() for record in caplog.records)
    assert [r.event for r in caplog.records] == ["tools.storage_failed"]  # type: ignore[attr-defined]
