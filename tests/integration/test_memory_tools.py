"""memory.tools on real PostgreSQL: the memory and scratchpad tools through the one dispatcher —
every action, every bad argument as tool-error text with nothing written, and tenancy."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from navi_memory import PERMISSION_READ_ALL, InvalidTypeError, Memory, request_context
from navi_memory.llm.chat import checked_tool_specs
from navi_memory.tools import MemoryTools, Tool, ToolContext
from navi_memory.tools.scratchpad import LIST_MAX_SECTIONS
from tests.integration.factories import execute, new_user, refuse_inserts, scalar


async def facts_in_db(memory: Memory) -> int:
    return int(str(await scalar(memory, "SELECT count(*) FROM memory_facts")))


async def kv_in_db(memory: Memory) -> int:
    return int(str(await scalar(memory, "SELECT count(*) FROM kv_store")))


async def user_and_session(memory: Memory, session_id: str | None = None) -> ToolContext:
    uid = await new_user(memory)
    sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
    await memory.sessions.create(sid, user_id=uid)
    return ToolContext(user_id=uid, session_id=sid)


SAVE = {"action": "save", "category": "preferences", "key": "editor", "value": "neovim"}


# --- the specs -------------------------------------------------------------------------------


async def test_specs_are_function_specs_the_chat_model_accepts(memory: Memory) -> None:
    """specs() lists memory and scratchpad in the function-calling shape llm/ checks."""
    specs = memory.tools.specs()
    names = [spec["function"]["name"] for spec in specs]
    assert {"memory", "scratchpad"} <= set(names)
    assert checked_tool_specs(specs) == specs
    for spec in specs:
        assert spec["type"] == "function"
        assert spec["function"]["parameters"]["type"] == "object"
        assert "user_id" not in spec["function"]["parameters"]["properties"]
    specs[0]["function"]["name"] = "changed"
    assert memory.tools.specs()[0]["function"]["name"] == names[0]


# --- memory: save ----------------------------------------------------------------------------


async def test_save_writes_the_fact_for_the_context_user(memory: Memory) -> None:
    """save stores the fact under the ToolContext's user, from the dict the model sent."""
    ctx = await user_and_session(memory)
    answer = await memory.tools.call("memory", SAVE, ctx)
    assert answer.startswith("memory: saved\n• [preferences] editor → neovim (confidence: 70%")
    facts = await memory.store.get_all_facts(user_id=ctx.user_id)
    assert [(f.category, f.key, f.value, f.source, f.confidence) for f in facts] == [
        ("preferences", "editor", "neovim", "conversation", 70)
    ]


async def test_save_takes_the_json_text_models_emit(memory: Memory) -> None:
    """Arguments as a JSON string are decoded like a dict."""
    ctx = await user_and_session(memory)
    arguments = json.dumps(SAVE | {"source": "tool_call", "confidence": "95"})
    answer = await memory.tools.call("memory", arguments, ctx)
    assert "(confidence: 95%" in answer
    [fact] = await memory.store.get_all_facts(user_id=ctx.user_id)
    assert (fact.source, fact.confidence) == ("tool_call", 95)


@pytest.mark.parametrize(
    ("source", "confidence"),
    [("conversation", 70), ("user_explicit", 90), ("tool_call", 95), ("auto_discovery", 95)],
)
async def test_save_without_confidence_takes_the_store_default_for_the_source(
    memory: Memory, source: str, confidence: int
) -> None:
    """No confidence: the store's default for the source (the extractor's mapping)."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE | {"source": source}, ctx)
    [fact] = await memory.store.get_all_facts(user_id=ctx.user_id)
    assert fact.confidence == confidence


async def test_save_dedupes_another_spelling_of_a_held_key(memory: Memory) -> None:
    """save writes with dedupe=True: preferred_language hides the language fact behind it."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE | {"key": "language", "value": "English"}, ctx)
    await memory.tools.call("memory", SAVE | {"key": "preferred_language", "value": "Dutch"}, ctx)
    visible = await memory.store.get_all_facts(user_id=ctx.user_id)
    every = await memory.store.get_all_facts(user_id=ctx.user_id, include_merged=True)
    assert [(f.key, f.value) for f in visible] == [("preferred_language", "Dutch")]
    assert len(every) == 2


async def only_fact_then_forgotten(
    memory: Memory, ctx: ToolContext, fact: tuple[str, str, str], category: str
) -> None:
    """The user's one row (hidden ones included) is ``fact`` (category, key, value); the
    tool's forget of its key under ``category`` removes it and names it."""
    facts = await memory.store.get_all_facts(user_id=ctx.user_id, include_merged=True)
    assert [(f.category, f.key, f.value) for f in facts] == [fact]
    answer = await memory.tools.call(
        "memory", {"action": "forget", "key": fact[1], "category": category}, ctx
    )
    assert answer == f"memory: forgot 1 fact: [{fact[0]}] {fact[1]}"
    assert await facts_in_db(memory) == 0


async def test_a_categorys_case_does_not_make_a_second_fact(memory: Memory) -> None:
    """The extractor stores categories lower-cased; the tool does too, so "Preferences"
    today and "preferences" tomorrow (or from the extractor) are one category: the second
    save replaces the first instead of standing beside it with a contradicting value, and
    forget finds it whatever the case."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE | {"category": " Preferences ", "value": "vim"}, ctx)
    await memory.tools.call("memory", SAVE | {"category": "PREFERENCES", "value": "helix"}, ctx)
    await only_fact_then_forgotten(memory, ctx, ("preferences", "editor", "helix"), "Preferences")


async def test_a_category_the_application_stored_with_capitals_is_the_tools_too(
    memory: Memory,
) -> None:
    """upsert_fact keeps a category's case ("Technical", as an application or an operator
    wrote it), and list shows it so: the tool's save replaces the value there rather than
    starting a second "technical" fact beside it, and forget under any case finds it."""
    ctx = await user_and_session(memory)
    assert ctx.user_id is not None
    await memory.store.upsert_fact("Technical", "server_port", "8099", user_id=ctx.user_id)
    listed = await memory.tools.call("memory", {"action": "list"}, ctx)
    assert "• Technical: 1" in listed
    saved = await memory.tools.call(
        "memory",
        {"action": "save", "category": "technical", "key": "server_port", "value": "9000"},
        ctx,
    )
    assert "[Technical] server_port → 9000" in saved
    await only_fact_then_forgotten(memory, ctx, ("Technical", "server_port", "9000"), "Technical")


async def test_save_goes_to_the_spelling_of_the_category_that_holds_the_key(
    memory: Memory,
) -> None:
    """Two capitalisations of one category stored, neither lower case: save replaces the key
    where it is held, not in the fuller spelling beside it (which would hold it twice)."""
    ctx = await user_and_session(memory)
    assert ctx.user_id is not None
    for key in ("os", "shell"):
        await memory.store.upsert_fact("Technical", key, "x", user_id=ctx.user_id)
    await memory.store.upsert_fact("TECHNICAL", "editor", "vim", user_id=ctx.user_id)
    saved = await memory.tools.call(
        "memory",
        {"action": "save", "category": "technical", "key": "editor", "value": "helix"},
        ctx,
    )
    assert "[TECHNICAL] editor → helix" in saved
    facts = await memory.store.get_all_facts(user_id=ctx.user_id, include_merged=True)
    assert sorted((f.category, f.key, f.value) for f in facts) == [
        ("TECHNICAL", "editor", "helix"),
        ("Technical", "os", "x"),
        ("Technical", "shell", "x"),
    ]
    # A key neither holds goes to the fuller one.
    await memory.tools.call(
        "memory", {"action": "save", "category": "technical", "key": "font", "value": "mono"}, ctx
    )
    font = await memory.store.get_all_facts(user_id=ctx.user_id, search="mono")
    assert [(f.category, f.key) for f in font] == [("Technical", "font")]


async def test_a_name_with_line_breaks_stays_on_its_line_of_list_and_forget(
    memory: Memory,
) -> None:
    """A category or key holding line breaks (a model's save, an application's write) is
    shown on one line: it cannot add a made-up category to list or a fact to forget's answer."""
    ctx = await user_and_session(memory)
    category, key = "work: 1\n• secrets", "boss\n[health] diagnosis"
    await memory.tools.call(
        "memory", {"action": "save", "category": category, "key": key, "value": "x"}, ctx
    )
    listed = await memory.tools.call("memory", {"action": "list"}, ctx)
    assert listed == "memory: 1 fact(s) in 1 categories\n\n• work: 1 • secrets: 1"
    forgot = await memory.tools.call("memory", {"action": "forget", "key": key}, ctx)
    assert forgot == "memory: forgot 1 fact: [work: 1 • secrets] boss [health] diagnosis"


async def test_forget_by_category_reaches_every_case_it_is_stored_under(memory: Memory) -> None:
    """Two spellings of one category already stored (an application wrote both): forget with
    the category removes the key from each, and says so; another category's keeps it."""
    ctx = await user_and_session(memory)
    assert ctx.user_id is not None
    for category in ("Work", "WORK", "home"):
        await memory.store.upsert_fact(category, "desk", f"{category} desk", user_id=ctx.user_id)
    answer = await memory.tools.call(
        "memory", {"action": "forget", "key": "desk", "category": "work"}, ctx
    )
    assert answer.startswith("memory: forgot 2 facts: ")
    assert {"[Work] desk", "[WORK] desk"} == set(answer.split(": ", 2)[2].split(", "))
    left = await memory.store.get_all_facts(user_id=ctx.user_id)
    assert [(f.category, f.key) for f in left] == [("home", "desk")]


async def test_save_keeps_expiry_and_source_context(memory: Memory) -> None:
    """expires_days and source_context reach the stored fact; the answer says the expiry."""
    ctx = await user_and_session(memory)
    answer = await memory.tools.call(
        "memory", SAVE | {"expires_days": 2, "source_context": "said on Monday"}, ctx
    )
    [fact] = await memory.store.get_all_facts(user_id=ctx.user_id)
    assert fact.expires_at is not None and fact.source_context == "said on Monday"
    assert "it expires" in answer


async def test_save_uses_the_request_context_when_the_tool_context_names_no_user(
    memory: Memory,
) -> None:
    """A ToolContext without a user falls back to request_context's user."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        answer = await memory.tools.call("memory", SAVE)
    assert answer.startswith("memory: saved")
    assert [f.key for f in await memory.store.get_all_facts(user_id=uid)] == ["editor"]


async def test_save_without_any_user_is_refused_as_text(memory: Memory) -> None:
    """No user anywhere: a tool-error text, nothing written."""
    answer = await memory.tools.call("memory", SAVE)
    assert answer.startswith("memory error:")
    assert await facts_in_db(memory) == 0


# --- memory: search, forget, list -------------------------------------------------------------


async def test_search_finds_facts_only(memory: Memory) -> None:
    """search answers stored facts matching the query, and says when none does."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE, ctx)
    await memory.tools.call(
        "memory", SAVE | {"category": "work", "key": "vpn", "value": "WireGuard"}, ctx
    )
    await memory.kv.set("scratchpad", "editor", "neovim notes", user_id=ctx.user_id)
    answer = await memory.tools.call("memory", {"action": "search", "query": "editor"}, ctx)
    assert answer.startswith('memory search "editor": 1 fact(s)')
    assert "• [preferences] editor → neovim" in answer
    assert "WireGuard" not in answer and "notes" not in answer
    none = await memory.tools.call("memory", {"action": "search", "query": "kubernetes"}, ctx)
    assert none == 'memory search "kubernetes": no stored fact matches.'


async def test_forget_says_what_was_removed(memory: Memory) -> None:
    """forget deletes the key and says so; the fact is gone."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE, ctx)
    answer = await memory.tools.call(
        "memory", {"action": "forget", "key": "editor", "category": "preferences"}, ctx
    )
    assert answer == "memory: forgot 1 fact: [preferences] editor"
    assert await memory.store.get_all_facts(user_id=ctx.user_id) == []


async def test_forget_without_category_removes_the_key_everywhere(memory: Memory) -> None:
    """Without a category every fact with the key goes, and the answer says how many."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE, ctx)
    await memory.tools.call("memory", SAVE | {"category": "work"}, ctx)
    answer = await memory.tools.call("memory", {"action": "forget", "key": "editor"}, ctx)
    assert answer == "memory: forgot 2 facts: [preferences] editor, [work] editor"
    assert await facts_in_db(memory) == 0


async def test_forget_of_a_hidden_spelling_names_the_fact_it_deleted(memory: Memory) -> None:
    """Forgetting a spelling merged into another key deletes that other key's fact: the answer
    names the fact that went, not only the key asked for."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE | {"key": "language", "value": "English"}, ctx)
    await memory.tools.call("memory", SAVE | {"key": "preferred_language", "value": "Dutch"}, ctx)
    answer = await memory.tools.call("memory", {"action": "forget", "key": "language"}, ctx)
    assert answer == (
        "memory: forgot 1 fact: [preferences] preferred_language (the key 'language' is "
        "another spelling of it)"
    )
    assert await facts_in_db(memory) == 0


async def test_forget_finds_a_key_saved_under_another_spelling(memory: Memory) -> None:
    """save merges spellings of a key (editor, then Editor: one fact); forget asked for
    EDITOR found "nothing to forget" though list showed the fact. Another spelling of a
    stored key (the dedupe rule) is forgotten when the exact key is not stored; another key
    in the category stays."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE, ctx)
    await memory.tools.call("memory", SAVE | {"key": "Editor", "value": "helix"}, ctx)
    await memory.tools.call("memory", SAVE | {"key": "shell", "value": "zsh"}, ctx)
    answer = await memory.tools.call(
        "memory", {"action": "forget", "key": "EDITOR", "category": "PREFERENCES"}, ctx
    )
    assert answer == (
        "memory: forgot 1 fact: [preferences] Editor (the key 'EDITOR' is another spelling of it)"
    )
    assert [f.key for f in await memory.store.get_all_facts(user_id=ctx.user_id)] == ["shell"]
    assert await facts_in_db(memory) == 1  # the hidden "editor" went with it
    # nothing fuzzier than case: a forget deletes, and the dedupe rule's spellings reach far
    answer = await memory.tools.call("memory", {"action": "forget", "key": "my_shells"}, ctx)
    assert answer.startswith("memory: nothing to forget")
    answer = await memory.tools.call("memory", {"action": "forget", "key": "SHELL"}, ctx)
    assert answer.startswith("memory: forgot 1 fact: [preferences] shell")
    assert await facts_in_db(memory) == 0


async def test_forget_by_another_case_never_takes_other_facts_of_a_like_key(
    memory: Memory,
) -> None:
    """A first fallback forgot every key of the same canonical form in every category:
    "language" took preferred_language, a programming language and two more."""
    ctx = await user_and_session(memory)
    uid = ctx.user_id
    await memory.store.upsert_fact("preferences", "preferred_language", "English", user_id=uid)
    await memory.store.upsert_fact("technical", "default_language", "Python", user_id=uid)
    await memory.store.upsert_fact("work", "Language", "German", user_id=uid)
    answer = await memory.tools.call("memory", {"action": "forget", "key": "LANGUAGE"}, ctx)
    assert answer == (
        "memory: forgot 1 fact: [work] Language (the key 'LANGUAGE' is another spelling of it)"
    )
    left = {f.key for f in await memory.store.get_all_facts(user_id=uid)}
    assert left == {"preferred_language", "default_language"}


async def test_read_all_with_no_user_cannot_save_or_forget_and_says_no_argument_helps(
    memory: Memory,
) -> None:
    """An operator's read-all view with no user: search and list cover everyone, but a save
    or forget answered "pass user_id=...", an argument the tool refuses."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    admin = ToolContext(permissions=frozenset([PERMISSION_READ_ALL]))
    for arguments in (SAVE | {"key": "k"}, {"action": "forget", "key": "editor"}):
        answer = await memory.tools.call("memory", arguments, admin)
        assert answer.startswith("memory error: this conversation acts for no user"), answer
        assert "user_id" not in answer
    assert await facts_in_db(memory) >= 1
    assert (await memory.tools.call("memory", {"action": "list"}, admin)).startswith("memory: ")


async def test_forget_says_when_nothing_matched(memory: Memory) -> None:
    """A key the user does not hold: the answer says nothing matched, nothing changes."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE, ctx)
    answer = await memory.tools.call(
        "memory", {"action": "forget", "key": "editor", "category": "work"}, ctx
    )
    assert answer == (
        "memory: nothing to forget, no stored fact has the key 'editor' in category 'work'."
    )
    assert await facts_in_db(memory) == 1


async def test_forget_of_a_key_whose_only_row_expired_says_it_deleted_that_row(
    memory: Memory,
) -> None:
    """The fact had expired (no longer shown), but forget still deletes its row and the summary
    that may tell it: the answer said "nothing to forget" although a row went."""
    ctx = await user_and_session(memory)
    await memory.tools.call("memory", SAVE, ctx)
    assert ctx.user_id is not None
    await memory.store.set_summary("Uses neovim.", user_id=ctx.user_id)
    await execute(memory, "UPDATE memory_facts SET expires_at = now() - interval '1 day'")
    answer = await memory.tools.call("memory", {"action": "forget", "key": "editor"}, ctx)
    assert answer == (
        "memory: the fact with the key 'editor' had already expired and was no longer shown; "
        "its stored row is deleted now (1 row(s))."
    )
    assert await facts_in_db(memory) == 0
    assert await memory.store.get_summary(user_id=ctx.user_id) is None
    answer = await memory.tools.call("memory", {"action": "forget", "key": "editor"}, ctx)
    assert answer.startswith("memory: nothing to forget")


async def test_list_gives_categories_with_counts_not_facts(memory: Memory) -> None:
    """list names each category with its count, fullest first; no value is shown."""
    ctx = await user_and_session(memory)
    assert await memory.tools.call("memory", {"action": "list"}, ctx) == (
        "memory: no facts are stored yet."
    )
    await memory.tools.call("memory", SAVE, ctx)
    await memory.tools.call("memory", SAVE | {"key": "shell", "value": "fish"}, ctx)
    await memory.tools.call("memory", SAVE | {"category": "work", "key": "vpn"}, ctx)
    await memory.tools.call("memory", SAVE | {"category": "old", "key": "gone"}, ctx)
    await execute(memory, "UPDATE memory_facts SET expires_at = now() WHERE key = 'gone'")
    answer = await memory.tools.call("memory", {"action": "list"}, ctx)
    assert answer == "memory: 3 fact(s) in 2 categories\n\n• preferences: 2\n• work: 1"
    assert "neovim" not in answer


# --- bad arguments ----------------------------------------------------------------------------

BAD_MEMORY_CALLS: list[tuple[str, Any, str]] = [
    ("unknown action", {"action": "remember"}, "action must be one of"),
    ("no action", {}, "action is required"),
    ("missing value", {"action": "save", "category": "c", "key": "k"}, "value is required"),
    ("mistyped value", SAVE | {"value": 42}, "value must be text"),
    ("confidence out of range", SAVE | {"confidence": 150}, "from 0 to 100"),
    ("negative expiry", SAVE | {"expires_days": -3}, "expires_days"),
    # Under the tool's minute and a half the fact would have expired before "saved".
    ("expiry gone before the answer", SAVE | {"expires_days": 1e-9}, "from 0.001 to 36500 days"),
    ("unknown source", SAVE | {"source": "rumour"}, "source must be one of"),
    ("NUL in value", SAVE | {"value": "ne\x00ovim"}, "NUL byte"),
    ("NUL in key", SAVE | {"key": "ed\x00itor"}, "NUL byte"),
    ("user_id argument", SAVE | {"user_id": str(uuid.uuid4())}, "user_id is not an argument"),
    ("session_id argument", SAVE | {"session_id": "other"}, "session_id is not an argument"),
    ("not JSON", '{"action": "save", ', "not valid JSON"),
    ("JSON that is not an object", '["save"]', "must be a JSON object"),
    ("search without query", {"action": "search"}, "query is required"),
    ("forget without key", {"action": "forget"}, "key is required"),
]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [(arguments, says) for _, arguments, says in BAD_MEMORY_CALLS],
    ids=[case for case, _, _ in BAD_MEMORY_CALLS],
)
async def test_bad_memory_arguments_answer_an_error_text_and_write_nothing(
    memory: Memory, arguments: Any, says: str
) -> None:
    """Each bad call comes back as 'memory error: …' naming the problem; no row is written."""
    ctx = await user_and_session(memory)
    answer = await memory.tools.call("memory", arguments, ctx)
    assert answer.startswith("memory error:")
    assert says in answer
    assert await facts_in_db(memory) == 0


async def test_an_unknown_tool_answers_an_error_text(memory: Memory) -> None:
    """A tool the dispatcher does not have: an error text naming the tools it has."""
    ctx = await user_and_session(memory)
    answer = await memory.tools.call("web_search", {"query": "x"}, ctx)
    assert answer.startswith("tools error: there is no tool 'web_search'")
    assert "memory" in answer and "scratchpad" in answer
    assert (await memory.tools.call(None, {}, ctx)).startswith("tools error:")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [["memory"], {"memory": 1}, 7, None])
async def test_a_tool_asked_for_by_a_name_that_is_not_text_is_a_type_error(
    memory: Memory, name: object
) -> None:
    """MemoryTools.tool(name): a list or a dict raised a raw TypeError (unhashable)."""
    with pytest.raises(InvalidTypeError, match="name must be a str"):
        memory.tools.tool(name)  # type: ignore[arg-type]


async def test_a_storage_failure_answers_an_error_text(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    """The database refusing the write: an error text for the model and a log line."""
    ctx = await user_and_session(memory)
    await refuse_inserts(memory, "memory_facts")
    with caplog.at_level(logging.WARNING):
        answer = await memory.tools.call("memory", SAVE, ctx)
    assert answer == "memory error: memory storage is unavailable right now; try later"
    assert any(getattr(r, "event", None) == "tools.storage_failed" for r in caplog.records)


async def test_a_crashing_tool_answers_an_error_text(caplog: pytest.LogCaptureFixture) -> None:
    """A bug inside a tool does not end the turn: the dispatcher answers text and logs it."""

    async def broken(arguments: Mapping[str, Any], context: ToolContext) -> str:
        raise RuntimeError("bug")

    tools = MemoryTools([Tool("broken", "d", {"type": "object", "properties": {}}, broken)])
    with caplog.at_level(logging.ERROR):
        answer = await tools.call("broken", {})
    assert answer == "broken error: the tool failed unexpectedly; the error is logged"
    assert any(getattr(r, "event", None) == "tools.crashed" for r in caplog.records)


# --- scratchpad -------------------------------------------------------------------------------


async def test_scratchpad_writes_reads_and_lists_the_session_notes(memory: Memory) -> None:
    """write replaces a section, read shows it, list names the sections of this session."""
    ctx = await user_and_session(memory)
    pad = memory.tools
    write = {"action": "write", "section": "plan", "text": "1. pick a port"}
    assert await pad.call("scratchpad", write, ctx) == (
        "scratchpad: wrote section 'plan' (14 characters)"
    )
    await pad.call("scratchpad", write | {"text": "1. port 8099"}, ctx)
    await pad.call("scratchpad", {"action": "write", "section": "todo", "text": ""}, ctx)
    read = await pad.call("scratchpad", {"action": "read", "section": "plan"}, ctx)
    assert read == "scratchpad section 'plan':\n1. port 8099"
    listing = await pad.call("scratchpad", {"action": "list"}, ctx)
    assert listing.startswith("scratchpad: 2 section(s) in this conversation's notes\n\n• plan (12")
    assert "\n• todo (0 characters" in listing
    stored = await memory.kv.list("scratchpad", session_id=ctx.session_id, user_id=ctx.user_id)
    assert [(e.key, e.value) for e in stored] == [("plan", "1. port 8099"), ("todo", "")]


async def test_a_section_name_with_line_breaks_stays_on_its_line_of_the_list(
    memory: Memory,
) -> None:
    """The list shows one line per section: a name the model wrote with line breaks cannot
    make up sections that do not exist."""
    ctx = await user_and_session(memory)
    pad = memory.tools
    name = "plan\n• forged (1 characters, written 2020-01-01 00:00 UTC)"
    await pad.call("scratchpad", {"action": "write", "section": name, "text": "x"}, ctx)
    listing = await pad.call("scratchpad", {"action": "list"}, ctx)
    entries = [line for line in listing.splitlines() if line.startswith("•")]
    assert len(entries) == 1
    assert entries[0].startswith("• plan • forged (1 characters")


async def test_scratchpad_deletes_a_section_of_this_session_only(memory: Memory) -> None:
    """A section the model no longer needs can go: list and search stop showing it. Another
    session's section of the same name stays, and a missing one is said to be missing."""
    ctx = await user_and_session(memory)
    other = f"s-{uuid.uuid4().hex[:8]}"
    await memory.sessions.create(other, user_id=ctx.user_id)
    elsewhere = ToolContext(user_id=ctx.user_id, session_id=other)
    write = {"action": "write", "section": "plan", "text": "old plan"}
    await memory.tools.call("scratchpad", write, ctx)
    await memory.tools.call("scratchpad", write, elsewhere)
    gone = await memory.tools.call("scratchpad", {"action": "delete", "section": " plan "}, ctx)
    assert gone == "scratchpad: deleted section 'plan'"
    assert await memory.tools.call("scratchpad", {"action": "list"}, ctx) == (
        "scratchpad: this conversation has no notes yet."
    )
    again = await memory.tools.call("scratchpad", {"action": "delete", "section": "plan"}, ctx)
    assert again.startswith("scratchpad: there is no section 'plan'")
    kept = await memory.kv.list("scratchpad", session_id=other, user_id=ctx.user_id)
    assert [(e.key, e.value) for e in kept] == [("plan", "old plan")]


async def test_scratchpad_notes_belong_to_one_session(memory: Memory) -> None:
    """Another session of the same user sees none of this session's notes."""
    ctx = await user_and_session(memory)
    other = f"s-{uuid.uuid4().hex[:8]}"
    await memory.sessions.create(other, user_id=ctx.user_id)
    await memory.tools.call("scratchpad", {"action": "write", "section": "plan", "text": "x"}, ctx)
    elsewhere = ToolContext(user_id=ctx.user_id, session_id=other)
    assert await memory.tools.call("scratchpad", {"action": "list"}, elsewhere) == (
        "scratchpad: this conversation has no notes yet."
    )
    missing = await memory.tools.call(
        "scratchpad", {"action": "read", "section": "plan"}, elsewhere
    )
    assert missing.startswith("scratchpad: there is no section 'plan'")


async def test_scratchpad_without_a_session_is_refused_as_text(memory: Memory) -> None:
    """No session in the context or the request: an error text, nothing written."""
    uid = await new_user(memory)
    answer = await memory.tools.call(
        "scratchpad", {"action": "write", "section": "p", "text": "t"}, ToolContext(user_id=uid)
    )
    assert answer.startswith("scratchpad error: the scratchpad keeps the notes of one")
    assert await kv_in_db(memory) == 0


@pytest.mark.parametrize("action", ["list", "read", "write", "delete"])
async def test_scratchpad_acting_for_no_user_is_refused_as_text(
    memory: Memory, action: str
) -> None:
    """A context with read_all and a session id but no user: the list used to name every
    user's sections under that id, mixed and unlabelled; now every action is refused."""
    alice, bob = await new_user(memory), await new_user(memory)
    for uid, value in ((alice, "alice's plan"), (bob, "bob's plan")):
        await execute(
            memory,
            "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
            "VALUES (:u, 'scratchpad', 'shared-id', 'plan', :v)",
            u=uid,
            v=value,
        )
    admin = ToolContext(session_id="shared-id", permissions=frozenset([PERMISSION_READ_ALL]))
    arguments = {"action": action, "section": "plan", "text": "x"}
    answer = await memory.tools.call("scratchpad", arguments, admin)
    assert answer.startswith("scratchpad error: the scratchpad keeps one user's notes")
    assert "plan" not in answer.split(":", 1)[1]
    assert await kv_in_db(memory) == 2


async def test_scratchpad_blank_text_clears_the_section(memory: Memory) -> None:
    """Text of blanks only is no note: stored empty, read as cleared, found by no search."""
    ctx = await user_and_session(memory)
    await memory.tools.call("scratchpad", {"action": "write", "section": "plan", "text": "x"}, ctx)
    wrote = await memory.tools.call(
        "scratchpad", {"action": "write", "section": "plan", "text": " \n\t "}, ctx
    )
    assert wrote == "scratchpad: wrote section 'plan' (0 characters)"
    read = await memory.tools.call("scratchpad", {"action": "read", "section": "plan"}, ctx)
    assert read == "scratchpad section 'plan' is empty (cleared)."
    found = await memory.tools.call("memory_search", {"query": "plan", "scope": "sketches"}, ctx)
    assert "nothing found" in found and "1. sketch" not in found


async def test_scratchpad_list_names_at_most_a_hundred_sections(memory: Memory) -> None:
    """5,000 sections listed in a few hundred kB of answer: a model's context holds far less."""
    ctx = await user_and_session(memory)
    await execute(
        memory,
        "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
        "SELECT :u, 'scratchpad', :s, 'section-' || lpad(g::text, 4, '0'), 'v' "
        "FROM generate_series(1, 5000) g",
        u=ctx.user_id,
        s=ctx.session_id,
    )
    answer = await memory.tools.call("scratchpad", {"action": "list"}, ctx)
    assert answer.startswith("scratchpad: 5000 section(s)")
    assert answer.count("• section-") == LIST_MAX_SECTIONS
    assert answer.endswith(f"… and {5000 - LIST_MAX_SECTIONS:,} more section(s)")
    assert len(answer) < 20_000


BAD_SCRATCHPAD_CALLS: list[tuple[str, Any, str]] = [
    ("unknown action", {"action": "erase"}, "action must be one of write, read, delete, list"),
    ("missing section", {"action": "write", "text": "t"}, "section is required"),
    ("missing text", {"action": "write", "section": "p"}, "text is required"),
    ("mistyped text", {"action": "write", "section": "p", "text": ["t"]}, "text must be text"),
    ("NUL in text", {"action": "write", "section": "p", "text": "a\x00"}, "NUL byte"),
    ("user_id argument", {"action": "list", "user_id": "x"}, "user_id is not an argument"),
]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [(arguments, says) for _, arguments, says in BAD_SCRATCHPAD_CALLS],
    ids=[case for case, _, _ in BAD_SCRATCHPAD_CALLS],
)
async def test_bad_scratchpad_arguments_answer_an_error_text_and_write_nothing(
    memory: Memory, arguments: Any, says: str
) -> None:
    """Each bad call comes back as 'scratchpad error: …'; no note is written."""
    ctx = await user_and_session(memory)
    answer = await memory.tools.call("scratchpad", arguments, ctx)
    assert answer.startswith("scratchpad error:")
    assert says in answer
    assert await kv_in_db(memory) == 0


# --- tenancy ----------------------------------------------------------------------------------


async def test_no_tool_reaches_another_users_memory(memory: Memory) -> None:
    """User B's calls never see, list, forget or write into user A's facts and notes."""
    alice = await user_and_session(memory)
    bob = await user_and_session(memory)
    await memory.tools.call("memory", SAVE | {"value": "alice-secret-editor"}, alice)
    await memory.tools.call(
        "scratchpad", {"action": "write", "section": "plan", "text": "alice plan"}, alice
    )

    search = await memory.tools.call("memory", {"action": "search", "query": "editor"}, bob)
    assert "alice" not in search
    assert await memory.tools.call("memory", {"action": "list"}, bob) == (
        "memory: no facts are stored yet."
    )
    forget = await memory.tools.call("memory", {"action": "forget", "key": "editor"}, bob)
    assert forget.startswith("memory: nothing to forget")

    # Bob naming Alice's session: her notes stay invisible and unwritable.
    into_alice = ToolContext(user_id=bob.user_id, session_id=alice.session_id)
    listing = await memory.tools.call("scratchpad", {"action": "list"}, into_alice)
    assert "plan" not in listing
    read = await memory.tools.call("scratchpad", {"action": "read", "section": "plan"}, into_alice)
    assert "alice plan" not in read
    write = await memory.tools.call(
        "scratchpad", {"action": "write", "section": "plan", "text": "bob"}, into_alice
    )
    assert write.startswith("scratchpad error:")

    [fact] = await memory.store.get_all_facts(user_id=alice.user_id)
    assert fact.value == "alice-secret-editor"
    assert await memory.kv.get(
        "scratchpad", "plan", session_id=alice.session_id, user_id=alice.user_id
    ) == ("alice plan")


# --- generated calls --------------------------------------------------------------------------

ARGUMENT_NAMES = [
    "action",
    "category",
    "key",
    "value",
    "source",
    "confidence",
    "expires_days",
    "source_context",
    "query",
    "scope",
    "k",
    "section",
    "text",
    "user_id",
    "session_id",
    "other",
]
ACTIONS = ["save", "search", "forget", "list", "write", "read", "SAVE", "drop", ""]
VALUES = st.one_of(
    st.sampled_from(ACTIONS),
    st.text(max_size=12),
    st.sampled_from(["a\x00b", "\ud800", "x" * 300, "preferences", "editor", "80", "5.0"]),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


async def counts(memory: Memory) -> tuple[int, int]:
    return await facts_in_db(memory), await kv_in_db(memory)


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(["memory", "memory_search", "scratchpad", "shell", ""]),
    arguments=st.dictionaries(st.sampled_from(ARGUMENT_NAMES), VALUES, max_size=6),
    as_json=st.booleans(),
)
async def test_generated_calls_answer_text_and_an_error_writes_nothing(
    memory: Memory, name: str, arguments: dict[str, Any], as_json: bool
) -> None:
    """Any tool name and arguments, as a dict or JSON: the answer is text, never an exception;
    an error answer leaves facts and notes as they were."""
    ctx = await user_and_session(memory)
    before = await counts(memory)
    sent: dict[str, Any] | str = arguments
    if as_json:
        sent = json.dumps(arguments)
    answer = await memory.tools.call(name, sent, ctx)
    assert isinstance(answer, str) and answer
    if " error: " in answer.split("\n", 1)[0]:
        assert await counts(memory) == before


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(["memory", "memory_search", "scratchpad"]),
    action=st.sampled_from(["search", "list", "forget", "read", "write", "save"]),
    word=st.sampled_from(["alice", "secret", "editor", "plan", "", "token"]),
    session=st.sampled_from(["own", "alice"]),
)
async def test_generated_calls_of_another_user_never_reach_alice(
    memory: Memory, name: str, action: str, word: str, session: str
) -> None:
    """Whatever Bob asks any tool — even naming Alice's session — no answer holds Alice's
    data, and her fact and note are unchanged."""
    alice = await user_and_session(memory)
    bob = await user_and_session(memory)
    await memory.tools.call("memory", SAVE | {"key": "token", "value": "alice-secret-1"}, alice)
    await memory.tools.call(
        "scratchpad", {"action": "write", "section": "plan", "text": "alice-secret-2"}, alice
    )
    ctx = bob if session == "own" else ToolContext(user_id=bob.user_id, session_id=alice.session_id)
    arguments = {
        "action": action,
        "query": word or "secret",
        "key": word or "token",
        "category": "preferences",
        "value": "bob",
        "section": word or "plan",
        "text": "bob",
    }
    answer = await memory.tools.call(name, arguments, ctx)
    assert "alice-secret" not in answer
    [fact] = await memory.store.get_all_facts(user_id=alice.user_id)
    assert fact.value == "alice-secret-1"
    note = await memory.kv.get(
        "scratchpad", "plan", session_id=alice.session_id, user_id=alice.user_id
    )
    assert note == "alice-secret-2"


async def test_a_read_all_fact_search_names_each_facts_user(memory: Memory) -> None:
    """`memory` search with read_all and no current user finds every user's facts: two
    contradicting lines ("editor → neovim", "editor → emacs") came back with nothing telling
    whose each was. Each line names its user then, as memory_search's hits do; one user's
    search is left as it was."""
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=alice)
    await memory.store.upsert_fact("preferences", "editor", "emacs", user_id=bob)
    admin = ToolContext(permissions=frozenset([PERMISSION_READ_ALL]))
    answer = await memory.tools.call("memory", {"action": "search", "query": "editor"}, admin)
    lines = [line for line in answer.splitlines() if line.startswith("• ")]
    assert len(lines) == 2
    assert {line.split(" · user ")[1] for line in lines} == {str(alice), str(bob)}
    assert next(line for line in lines if "neovim" in line).endswith(f" · user {alice}")

    own = await memory.tools.call(
        "memory", {"action": "search", "query": "editor"}, ToolContext(user_id=alice)
    )
    assert "neovim" in own and "emacs" not in own and " · user " not in own
