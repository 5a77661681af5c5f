"""memory.context on real PostgreSQL: the prompt's parts and their order, the facts block, and
automatic recall with its ledger (skips, freshness, no repeats, the cap, concurrency, failure),
and that no part of another user's memory reaches a prompt."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from navi_memory import (
    Memory,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
    open_memory,
    request_context,
)
from navi_memory.constants import INJECTED_LEDGER_MAX
from navi_memory.llm.chat import ChatTurn, message_dicts
from navi_memory.schemas import ChunkDraft
from navi_memory.testing import FakeOllama
from navi_memory.text.chunks import build_chunks
from navi_memory.text.recall import LEDGER_KEY, RECALL_HEADER, similarity
from navi_memory.tools import ToolContext
from tests.conftest import make_settings
from tests.integration.factories import execute, new_user, scalar

HOST = "You are Navi."
SUMMARY = "The user works on the navi API.\nKEYS: navi API"


@pytest.fixture
async def small_chunks(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory whose compression writes one raw chunk per (long enough) message."""
    async with open_memory(make_settings(db_url, fake_ollama, chunk_max_chars=200)) as opened:
        yield opened


async def conversation(
    memory: Memory,
    fake: FakeOllama,
    user_id: uuid.UUID,
    lines: Sequence[tuple[str, str]],
    *,
    keep_last: int = 2,
    session_id: str | None = None,
) -> str:
    """A session of ``user_id`` holding ``lines`` (role, content), compressed behind a summary
    so that all but the last ``keep_last`` messages are raw chunks."""
    sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
    await memory.sessions.create(sid, user_id=user_id)
    for role, content in lines:
        await memory.sessions.append(sid, role, content, user_id=user_id)
    fake.chat_replies.append(SUMMARY)
    result = await memory.sessions.compress(sid, keep_last=keep_last, user_id=user_id)
    assert result.summary is not None and not result.used_fallback
    return sid


def padded(text: str) -> str:
    """``text`` long enough (over half of CHUNK_MAX_CHARS=200) to be a chunk of its own."""
    return text + " " + "." * max(0, 120 - len(text))


async def ledger(memory: Memory, session_id: str) -> list[int]:
    raw = await scalar(
        memory,
        "SELECT session_metadata -> :key FROM sessions WHERE id = :sid",
        key=LEDGER_KEY,
        sid=session_id,
    )
    return [] if raw is None else list(raw)  # type: ignore[call-overload]


def texts(messages: Sequence[ChatTurn]) -> str:
    return "\n".join(m.content for m in messages)


# --- order and parts --------------------------------------------------------------------------


async def test_messages_come_in_the_documented_order(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """Host system, memory message, facts block, recall, the session's context (summary, kept
    messages with tool calls and results), then the incoming message."""
    memory = small_chunks
    uid = await new_user(memory)
    await memory.store.set_summary("Likes short answers.", user_id=uid)
    await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    sid = await conversation(
        memory,
        fake_ollama,
        uid,
        [
            ("user", padded("The deploy script lives in /opt/navi/deploy.sh and needs root")),
            ("assistant", padded("Understood, the deploy script needs root")),
            ("user", "Check the disk please"),
        ],
        keep_last=1,
    )
    await memory.sessions.append(
        sid, "tool_call", tool_name="df", tool_args={"h": True}, user_id=uid
    )
    await memory.sessions.append(sid, "tool", "40% used", tool_name="df", user_id=uid)
    await memory.sessions.append(sid, "assistant", "The disk is 40% full.", user_id=uid)

    with request_context(user_id=uid):
        prompt = await memory.context.build_prompt(
            sid, "Where is the deploy script again?", system_prompt=HOST
        )
    shape = [(m.role, m.content.split("\n", 1)[0]) for m in prompt.messages]
    assert shape == [
        ("system", HOST),
        ("system", "## What I remember about the user"),
        ("system", "## Facts about the user"),
        ("system", RECALL_HEADER),
        ("system", "The user works on the navi API."),
        ("user", "Check the disk please"),
        ("assistant", ""),
        ("tool", "40% used"),
        ("assistant", "The disk is 40% full."),
        ("user", "Where is the deploy script again?"),
    ]
    assert prompt.messages[1].content == "## What I remember about the user\n\nLikes short answers."
    call_turn, result_turn = prompt.messages[6], prompt.messages[7]
    assert [(c.name, c.arguments) for c in call_turn.tool_calls] == [("df", {"h": True})]
    assert result_turn.tool_name == "df"
    assert prompt.recall == "injected"
    assert "/opt/navi/deploy.sh" in prompt.messages[3].content
    # It goes to a model as it is.
    dicts = message_dicts(prompt.messages)
    assert dicts[6]["tool_calls"] == [{"function": {"name": "df", "arguments": {"h": True}}}]
    assert dicts[7] == {"role": "tool", "content": "40% used", "tool_name": "df"}


async def test_text_on_a_tool_call_reaches_the_prompt_chunks_and_summary(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """What the assistant said alongside a tool call is stored with the call: it is the call
    turn's text in the prompt, and after compression the summarizer and the chunk see it."""
    uid = await new_user(memory)
    sessions = memory.sessions
    await sessions.create("s1", user_id=uid)
    await sessions.append("s1", "user", "what port?", user_id=uid)
    said = "Let me look at ZEBRA_PORT_9931 first"
    await sessions.append("s1", "tool_call", said, tool_name="kv", tool_args={"a": 1}, user_id=uid)
    await sessions.append("s1", "tool_call", tool_name="kv", tool_args={"b": 2}, user_id=uid)
    await sessions.append("s1", "tool", "9931", tool_name="kv", user_id=uid)
    await sessions.append("s1", "tool", "done", tool_name="kv", user_id=uid)

    turns = await memory.context.build("s1", "hi", system_prompt="", user_id=uid)

    assert [(t.role, t.content, len(t.tool_calls)) for t in turns] == [
        ("user", "what port?", 0),
        ("assistant", said, 2),
        ("tool", "9931", 0),
        ("tool", "done", 0),
        ("user", "hi", 0),
    ]
    # Both calls answered: the turn is closed, and keep_last=0 demotes all of it.
    fake_ollama.chat_replies.append("Port looked up.\nKEYS: NONE")
    await sessions.compress("s1", keep_last=0, user_id=uid)
    assert said in json.dumps(fake_ollama.chat_requests[-1], ensure_ascii=False)
    chunks = await memory.store.search_chunks("ZEBRA_PORT_9931", user_id=uid, session_id="s1")
    assert any(said in chunk.content for chunk in chunks)


async def test_build_returns_the_prompts_messages(memory: Memory) -> None:
    """build() is build_prompt().messages: the host message and the incoming one at least."""
    uid = await new_user(memory)
    await memory.sessions.create("plain", user_id=uid)
    with request_context(user_id=uid):
        messages = await memory.context.build("plain", "hello", system_prompt=HOST)
    assert messages == [ChatTurn("system", HOST), ChatTurn("user", "hello")]


async def test_no_memory_message_without_a_summary(memory: Memory) -> None:
    """A user without a summary gets no memory message; the facts block follows the host."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    await memory.sessions.create("s", user_id=uid)
    messages = await memory.context.build("s", "hi", system_prompt=HOST, user_id=uid)
    assert "What I remember" not in texts(messages)
    assert messages[1].content.startswith("## Facts about the user")


async def test_a_blank_system_prompt_is_left_out(memory: Memory) -> None:
    """No host prompt: the prompt starts with the memory parts."""
    uid = await new_user(memory)
    await memory.store.set_summary("Likes tea.", user_id=uid)
    await memory.sessions.create("s", user_id=uid)
    messages = await memory.context.build("s", "hi", system_prompt=" ", user_id=uid)
    assert messages[0].content.startswith("## What I remember about the user")


# --- the facts block --------------------------------------------------------------------------


async def test_facts_block_caps_and_shows_confidence_and_age(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """At most MEMORY_PROMPT_MAX_FACTS lines, most recently verified first, the cap stated,
    the rest counted; confidence and age on each line, '?' for an unknown confidence."""
    settings = make_settings(db_url, fake_ollama, memory_prompt_max_facts=3)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        for days, key in enumerate(["a", "b", "c", "d", "e"]):
            await memory.store.upsert_fact("misc", key, f"value {key}", user_id=uid, confidence=80)
            await execute(
                memory,
                "UPDATE memory_facts SET last_verified_at = now() - make_interval(days => :d) "
                "WHERE key = :k",
                d=days * 10 + 4,
                k=key,
            )
        await execute(memory, "UPDATE memory_facts SET confidence = NULL WHERE key = 'b'")
        await memory.sessions.create("s", user_id=uid)
        messages = await memory.context.build("s", "hi", system_prompt=HOST, user_id=uid)
    block = messages[1].content
    lines = [line for line in block.splitlines() if line.startswith("• ")]
    assert lines == [
        "• [misc] a → value a (confidence: 80%, updated 4d ago)",
        "• [misc] b → value b (confidence: ?, updated 14d ago)",
        "• [misc] c → value c (confidence: 80%, updated 24d ago)",
    ]
    assert "at most 3 shown (MEMORY_PROMPT_MAX_FACTS)" in block
    assert block.splitlines()[-1].startswith("… and 2 more not shown here")


async def test_facts_block_never_shows_expired_or_hidden_facts(memory: Memory) -> None:
    """An expired fact and a fact hidden by a merge stay out of the prompt."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("preferences", "language", "English", user_id=uid)
    await memory.store.upsert_fact(
        "preferences", "preferred_language", "Dutch", user_id=uid, dedupe=True
    )
    await memory.store.upsert_fact("travel", "hotel", "Hotel Krone", user_id=uid)
    await execute(memory, "UPDATE memory_facts SET expires_at = now() WHERE key = 'hotel'")
    await memory.sessions.create("s", user_id=uid)
    messages = await memory.context.build("s", "hi", system_prompt=HOST, user_id=uid)
    prompt = texts(messages)
    assert "preferred_language → Dutch" in prompt
    assert "English" not in prompt
    assert "Hotel Krone" not in prompt
    assert "more not shown" not in prompt


async def test_a_fact_never_verified_ranks_by_its_update_under_the_cap(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A legacy fact with no last_verified_at (the column came later) is as old as its
    updated_at, in the cap's choice as on its line: updated today, it is shown before one
    verified 30 days ago, not dropped because SQL sorts NULL last."""
    settings = make_settings(db_url, fake_ollama, memory_prompt_max_facts=1)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await memory.store.upsert_fact("misc", "old", "verified long ago", user_id=uid)
        await memory.store.upsert_fact(
            "misc", "legacy", "written today", user_id=uid, confidence=90
        )
        await execute(
            memory,
            "UPDATE memory_facts SET last_verified_at = now() - interval '30 days', "
            "updated_at = now() - interval '30 days' WHERE key = 'old'",
        )
        await execute(
            memory, "UPDATE memory_facts SET last_verified_at = NULL WHERE key = 'legacy'"
        )
        await memory.sessions.create("s", user_id=uid)
        messages = await memory.context.build("s", "hi", system_prompt=HOST, user_id=uid)
    lines = [line for line in messages[1].content.splitlines() if line.startswith("• ")]
    assert lines == ["• [misc] legacy → written today (confidence: 90%, updated today)"]
    assert messages[1].content.splitlines()[-1].startswith("… and 1 more not shown here")


# --- automatic recall -------------------------------------------------------------------------

DEPLOY = padded("The deploy script lives in /opt/navi/deploy.sh and it needs root")
PORT = padded("The API server port is 8098 for now")


async def test_recall_is_skipped_without_a_summary(small_chunks: Memory) -> None:
    """Chunks exist, but the context holds no summary yet: no recall, the ledger stays empty."""
    memory = small_chunks
    uid = await new_user(memory)
    await memory.sessions.create("s", user_id=uid)
    await memory.sessions.append("s", "user", DEPLOY, user_id=uid)
    drafts = build_chunks(await memory.sessions.context("s", user_id=uid))
    assert await memory.store.add_chunks(drafts, user_id=uid, session_id="s") == 1
    prompt = await memory.context.build_prompt(
        "s", "where is the deploy script?", system_prompt=HOST, user_id=uid
    )
    assert prompt.recall == "no_summary" and prompt.recalled == []
    assert RECALL_HEADER not in texts(prompt.messages)
    assert await ledger(memory, "s") == []


async def test_recall_is_skipped_when_disabled(db_url: str, fake_ollama: FakeOllama) -> None:
    """MEMORY_RECALL_ENABLED=false: no recall message even for a matching dropped excerpt."""
    settings = make_settings(db_url, fake_ollama, chunk_max_chars=200, memory_recall_enabled=False)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        sid = await conversation(
            memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
        )
        prompt = await memory.context.build_prompt(
            sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
        )
        assert prompt.recall == "disabled"
        assert RECALL_HEADER not in texts(prompt.messages)
        assert await ledger(memory, sid) == []


async def test_recall_injects_a_matching_excerpt_and_records_it(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """A dropped excerpt matching the topic is injected verbatim, and its id enters the ledger."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    prompt = await memory.context.build_prompt(
        sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
    )
    assert prompt.recall == "injected"
    [hit] = prompt.recalled
    assert hit.text == f"User: {DEPLOY}"
    assert prompt.recall_message is not None
    assert f"   User: {DEPLOY}" in prompt.recall_message.content
    assert await ledger(memory, sid) == [hit.chunk_id]


async def test_a_long_excerpt_is_shown_around_what_matched_in_recall_and_memory_search(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """One compression of a long session is one chunk of up to 4,000 characters; the answer
    at its end is what recall and memory_search show, not its first 1,500 characters."""
    uid = await new_user(memory)
    steps = [
        ("user", f"Step {n}: check the runbook section {n} and tick it off.") for n in range(40)
    ]
    answer = "Finally: the payment keys rotate every ninety days on Sunday night."
    sid = await conversation(
        memory, fake_ollama, uid, [*steps, ("user", answer), ("user", "ok")], keep_last=1
    )
    [chunk] = await memory.search.search("payment keys", "raw", user_id=uid)
    assert answer in chunk.text and chunk.text.index(answer) > 1_500

    prompt = await memory.context.build_prompt(
        sid, "When do the payment keys rotate?", system_prompt=HOST, user_id=uid
    )
    assert prompt.recall == "injected"
    assert prompt.recall_message is not None
    assert answer in prompt.recall_message.content
    assert "characters before] …" in prompt.recall_message.content

    with request_context(user_id=uid, session_id=sid):
        answered = await memory.tools.call(
            "memory_search", {"query": "when do the payment keys rotate", "scope": "raw"}
        )
    assert answer in answered


async def test_recall_never_injects_an_excerpt_of_messages_still_in_the_context(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """A host that indexes its messages as it goes (add_chunks) has chunks of messages that are
    still in the context: recalling one would put the same words in the prompt twice. An
    excerpt that also holds dropped messages is still recalled."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    kept = await memory.sessions.append(sid, "user", PORT, user_id=uid)
    [dropped] = [m for m in await memory.sessions.history(sid, user_id=uid) if m.seq == 1]

    def chunk(content: str, start: int, end: int) -> ChunkDraft:
        return ChunkDraft(
            content=content,
            content_hash=hashlib.sha256(content.encode()).hexdigest(),
            start_seq=start,
            end_seq=end,
            started_at=kept.created_at,
            ended_at=kept.created_at,
        )

    await memory.store.add_chunks(
        [
            chunk(f"User: {PORT}", kept.seq, kept.seq),
            chunk(f"User: {DEPLOY}\n\nUser: {PORT}", dropped.seq, kept.seq),
        ],
        user_id=uid,
        session_id=sid,
    )
    prompt = await memory.context.build_prompt(
        sid,
        "which API server port is it, and where is the deploy script?",
        system_prompt=HOST,
        user_id=uid,
    )
    recalled = [(hit.start_seq, hit.end_seq) for hit in prompt.recalled]
    assert (kept.seq, kept.seq) not in recalled
    assert (dropped.seq, kept.seq) in recalled


@pytest.mark.parametrize("stored", ["[1, 2]", '"text"', "null", "42"])
async def test_session_metadata_that_is_not_an_object_is_read_as_empty(
    small_chunks: Memory, fake_ollama: FakeOllama, stored: str
) -> None:
    """A host wrote something other than a JSON object into session_metadata: the session
    reads with empty metadata, recall works, and the ledger it writes is an object again."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    await execute(
        memory,
        "UPDATE sessions SET session_metadata = CAST(:stored AS jsonb) WHERE id = :sid",
        stored=stored,
        sid=sid,
    )
    info = await memory.sessions.get(sid, user_id=uid)
    assert info is not None and info.session_metadata == {}
    assert [s.session_metadata for s in await memory.sessions.list(user_id=uid)] == [{}]

    prompt = await memory.context.build_prompt(
        sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
    )

    assert prompt.recall == "injected"
    [hit] = prompt.recalled
    assert await ledger(memory, sid) == [hit.chunk_id]
    again = await memory.context.build_prompt(
        sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
    )
    assert again.recall == "nothing_found"


async def test_recall_never_injects_a_superseded_excerpt(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """An excerpt a newer fact overrides (server_port 8098 → 8099) is never injected."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", PORT), ("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    await memory.store.upsert_fact("technical", "server_port", "8099", user_id=uid)
    prompt = await memory.context.build_prompt(
        sid, "which server port does the deploy script use?", system_prompt=HOST, user_id=uid
    )
    recalled = [hit.text for hit in prompt.recalled]
    assert recalled == [f"User: {DEPLOY}"]
    assert "server port is 8098" not in texts(prompt.messages)


async def test_recall_never_repeats_an_excerpt_in_the_ledger(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """The same question twice: the second prompt does not carry the excerpt again."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    first = await memory.context.build_prompt(
        sid, "the deploy script?", system_prompt=HOST, user_id=uid
    )
    second = await memory.context.build_prompt(
        sid, "the deploy script?", system_prompt=HOST, user_id=uid
    )
    assert len(first.recalled) == 1
    assert second.recalled == [] and second.recall == "nothing_found"
    assert RECALL_HEADER not in texts(second.messages)
    assert await ledger(memory, sid) == [first.recalled[0].chunk_id]


async def test_ledger_keeps_the_last_hundred_and_an_old_excerpt_comes_back(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """A full ledger drops its oldest id when a new one is delivered; an excerpt whose id
    dropped out can be recalled again."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", PORT), ("user", "ok")], keep_last=1
    )
    first = await memory.context.build_prompt(sid, "deploy script", system_prompt=HOST, user_id=uid)
    [deploy] = first.recalled
    assert deploy.chunk_id is not None
    # The deploy excerpt is now the oldest of a full ledger.
    fillers = list(range(10_000_000, 10_000_000 + INJECTED_LEDGER_MAX - 1))
    await execute(
        memory,
        "UPDATE sessions SET session_metadata = "
        "jsonb_build_object(CAST(:key AS text), CAST(:ids AS jsonb)) WHERE id = :sid",
        key=LEDGER_KEY,
        ids=json.dumps([deploy.chunk_id, *fillers]),
        sid=sid,
    )
    assert (
        await memory.context.build_prompt(sid, "deploy script", system_prompt=HOST, user_id=uid)
    ).recalled == []
    port = await memory.context.build_prompt(
        sid, "the API server port", system_prompt=HOST, user_id=uid
    )
    [port_hit] = port.recalled
    after = await ledger(memory, sid)
    assert len(after) == INJECTED_LEDGER_MAX
    assert after[-1] == port_hit.chunk_id and deploy.chunk_id not in after
    again = await memory.context.build_prompt(sid, "deploy script", system_prompt=HOST, user_id=uid)
    assert [hit.chunk_id for hit in again.recalled] == [deploy.chunk_id]


async def test_delivered_excerpts_do_not_crowd_out_the_ones_not_yet_delivered(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """26 excerpts qualify for one question, more than one search returns (SEARCH_K_MAX):
    asked again and again, recall delivers every one of them before it finds nothing."""
    memory = small_chunks
    uid = await new_user(memory)
    notes = [("user", padded(f"deploy script note {i}: zz{i}")) for i in range(26)]
    sid = await conversation(memory, fake_ollama, uid, [*notes, ("user", "ok")], keep_last=1)
    delivered: list[int] = []
    outcomes = []
    for _ in range(14):
        prompt = await memory.context.build_prompt(
            sid, "the deploy script note", system_prompt=HOST, user_id=uid
        )
        outcomes.append(prompt.recall)
        delivered.extend(hit.chunk_id or 0 for hit in prompt.recalled)
    assert outcomes == ["injected"] * 13 + ["nothing_found"]
    assert len(delivered) == len(set(delivered)) == 26


async def test_concurrent_builds_deliver_every_excerpt_once(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """Six builds of one session at once: no excerpt is injected twice, and the ledger holds
    every delivered id exactly once."""
    settings = make_settings(
        db_url, fake_ollama, chunk_max_chars=200, db_pool_size=30, db_max_overflow=10
    )
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        notes = [
            ("user", padded(f"Deploy note {i}: the deploy script step {i} runs")) for i in range(12)
        ]
        sid = await conversation(memory, fake_ollama, uid, [*notes, ("user", "ok")], keep_last=1)
        with request_context(user_id=uid):
            prompts = await asyncio.gather(
                *(
                    memory.context.build_prompt(sid, "the deploy script steps", system_prompt=HOST)
                    for _ in range(6)
                )
            )
        delivered = [hit.chunk_id or 0 for prompt in prompts for hit in prompt.recalled]
        assert len(delivered) == len(set(delivered))
        assert len(delivered) == 12  # 6 builds × k=2, and 12 excerpts qualify
        stored = await ledger(memory, sid)
        assert sorted(stored) == sorted(delivered)


async def test_recall_failure_leaves_a_prompt_without_recall(
    small_chunks: Memory, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    """The raw-history table failing under recall: the prompt is built, without recall, and the
    failure is logged."""
    memory = small_chunks
    uid = await new_user(memory)
    await memory.store.set_summary("Likes tea.", user_id=uid)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    await execute(memory, "ALTER TABLE memory_chunks RENAME TO memory_chunks_away")
    with caplog.at_level(logging.WARNING):
        prompt = await memory.context.build_prompt(
            sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
        )
    assert prompt.recall == "failed" and prompt.recalled == []
    assert [m.content.split("\n", 1)[0] for m in prompt.messages][:2] == [
        HOST,
        "## What I remember about the user",
    ]
    assert prompt.messages[-1] == ChatTurn("user", "where is the deploy script?")
    assert any(getattr(r, "event", None) == "context.recall_failed" for r in caplog.records)
    assert await ledger(memory, sid) == []


async def test_recall_works_with_the_embedder_down(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """No embedding for the query: recall finds the excerpt by text (two matched terms)."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    fake_ollama.mode = "fail"
    prompt = await memory.context.build_prompt(
        sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
    )
    [hit] = prompt.recalled
    assert hit.via == "text" and hit.terms_hit >= 2


class _AtAnAngle:
    """An embedder that puts every text holding ``marker`` at cosine ``similarity`` to every
    other text (two unit vectors in a plane): the recall threshold's test, with no term shared."""

    dim = 768

    def __init__(self, marker: str, similarity: float) -> None:
        self.marker = marker
        self.similarity = similarity

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        if self.marker in text:
            vector[0] = self.similarity
            vector[1] = math.sqrt(1.0 - self.similarity**2)
        else:
            vector[0] = 1.0
        return vector

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(
    ("min_similarity", "recalled"), [(0.3, True), (0.45, True), (0.55, False), (0.7, False)]
)
async def test_recall_takes_vector_hits_down_to_its_own_similarity_threshold(
    db_url: str, fake_ollama: FakeOllama, min_similarity: float, recalled: bool
) -> None:
    """MEMORY_RECALL_MIN_SIMILARITY decides alone: an excerpt at similarity 0.5 to the query,
    sharing no term with it, is recalled at a threshold of 0.3 or 0.45 and not at 0.55 or 0.7
    (the search's CHUNK_MAX_DISTANCE, 0.45, used to cut it before recall saw it)."""
    settings = make_settings(
        db_url, fake_ollama, chunk_max_chars=200, memory_recall_min_similarity=min_similarity
    )
    async with open_memory(settings, embedder=_AtAnAngle("Zanzibar", 0.5)) as memory:
        uid = await new_user(memory)
        sid = await conversation(
            memory,
            fake_ollama,
            uid,
            [("user", padded("Our quarterly offsite goes to Zanzibar in March")), ("user", "ok")],
            keep_last=1,
        )
        prompt = await memory.context.build_prompt(
            sid, "which tickets remain blocked?", system_prompt=HOST, user_id=uid
        )
        if recalled:
            [hit] = prompt.recalled
            assert hit.via == "vector" and hit.terms_hit == 0
            assert similarity(hit) == pytest.approx(0.5, abs=1e-3)
            assert "Zanzibar" in hit.text
        else:
            assert prompt.recalled == [] and prompt.recall == "nothing_found"


# --- tenancy ----------------------------------------------------------------------------------


async def test_no_part_of_another_users_memory_reaches_a_prompt(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """Bob's prompt never holds Alice's summary, facts or excerpts; her session is not his."""
    memory = small_chunks
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.set_summary("Alice summary", user_id=alice)
    await memory.store.upsert_fact("secrets", "alice_token", "alice-value", user_id=alice)
    alice_sid = await conversation(
        memory, fake_ollama, alice, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    bob_sid = await conversation(
        memory, fake_ollama, bob, [("user", "hello " * 30), ("user", "ok")], keep_last=1
    )

    with request_context(user_id=bob):
        prompt = await memory.context.build_prompt(
            bob_sid, "where is the deploy script? alice token", system_prompt=HOST
        )
        with pytest.raises(NotFoundError):
            await memory.context.build(alice_sid, "deploy script", system_prompt=HOST)
        with pytest.raises(PermissionDeniedError):
            await memory.context.build(alice_sid, "x", system_prompt=HOST, user_id=alice)
    everything = texts(prompt.messages)
    for secret in ("Alice summary", "alice-value", "deploy.sh"):
        assert secret not in everything
    assert prompt.recalled == []
    assert await ledger(memory, alice_sid) == []


# --- generated input --------------------------------------------------------------------------

TEXTS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["a\x00b", "\ud800", "deploy script", "alice secret", " "]),
    st.integers(),
    st.none(),
)


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    incoming=TEXTS,
    system_prompt=TEXTS,
    session=st.sampled_from(["own", "alice", "missing", "", "x\x00", None]),
)
async def test_generated_builds_are_a_prompt_or_a_navi_memory_error_and_never_alices(
    small_chunks: Memory, fake_ollama: FakeOllama, incoming: Any, system_prompt: Any, session: Any
) -> None:
    """Any incoming text, system prompt and session id, as Bob: a prompt that holds nothing of
    Alice's, or a navi_memory error; Alice's ledger never moves."""
    memory = small_chunks
    alice, bob = await new_user(memory), await new_user(memory)
    await memory.store.set_summary("alice-secret summary", user_id=alice)
    await memory.store.upsert_fact("secret", "token", "alice-secret fact", user_id=alice)
    alice_sid = await conversation(
        memory,
        fake_ollama,
        alice,
        [("user", padded("alice-secret: the deploy script is /opt/alice.sh")), ("user", "ok")],
        keep_last=1,
    )
    bob_sid = await conversation(
        memory,
        fake_ollama,
        bob,
        [("user", padded("the deploy script is mine")), ("user", "ok")],
        keep_last=1,
    )
    session_id = {"own": bob_sid, "alice": alice_sid, "missing": "nope"}.get(session, session)
    with request_context(user_id=bob):
        try:
            prompt = await memory.context.build_prompt(
                session_id, incoming, system_prompt=system_prompt
            )
        except NaviMemoryError:
            prompt = None
    if prompt is not None:
        assert "alice-secret" not in texts(prompt.messages)
        assert prompt.messages[-1] == ChatTurn("user", incoming)
    assert await ledger(memory, alice_sid) == []


async def test_the_words_every_excerpt_is_rendered_with_never_count_for_recall(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """Every excerpt holds "User:" / "Assistant:": a question about "the user" matched every
    one on that word, so recall's two matched terms were one real word. Without an embedder
    (the text path alone decides): one real word is not enough, two are."""
    settings = make_settings(db_url, fake_ollama, chunk_max_chars=200)
    async with open_memory(settings, embedder=False) as memory:
        uid = await new_user(memory)
        lines = [
            ("user", padded("The tomatoes need water every morning.")),
            ("assistant", padded("The garage door code is 4411.")),
            ("user", "user?"),  # kept in the context: a word of the recall query too
        ]
        sid = await conversation(memory, fake_ollama, uid, lines, keep_last=1)
        vague = await memory.context.build_prompt(
            sid,
            "What did the user say to the assistant about water?",
            system_prompt=HOST,
            user_id=uid,
        )
        assert vague.recall == "nothing_found"
        assert "user" not in [t.casefold() for t in vague.recall_terms]
        only = await memory.context.build_prompt(
            sid, "user or assistant?", system_prompt=HOST, user_id=uid
        )
        assert (only.recall, only.recall_terms) == ("nothing_found", ())
        clear = await memory.context.build_prompt(
            sid, "do the tomatoes need water?", system_prompt=HOST, user_id=uid
        )
        assert clear.recall == "injected"
        assert [hit.text for hit in clear.recalled] == [
            "User: " + padded("The tomatoes need water every morning.")
        ]


async def test_list_numbers_never_count_for_recall(db_url: str, fake_ollama: FakeOllama) -> None:
    """A search keeps a lone digit ("floor 4"), but in recall's query of five messages digits
    are list numbers: an excerpt numbering its own list ("1. … 2. …") matched two terms and was
    injected into a conversation about dinner. Recall leaves one-character terms out."""
    settings = make_settings(db_url, fake_ollama, chunk_max_chars=200)
    async with open_memory(settings, embedder=False) as memory:
        uid = await new_user(memory)
        lines = [
            ("user", padded("Garden plan: 1. water the roses 2. trim the hedge")),
            ("assistant", "ok"),
        ]
        sid = await conversation(memory, fake_ollama, uid, lines, keep_last=1)
        dinner = await memory.context.build_prompt(
            sid,
            "For dinner tonight: 1) pasta carbonara or 2) fried rice?",
            system_prompt=HOST,
            user_id=uid,
        )
        assert dinner.recall == "nothing_found"
        assert not {"1", "2"} & set(dinner.recall_terms)
        garden = await memory.context.build_prompt(
            sid, "did I water the roses? 1 or 2 times", system_prompt=HOST, user_id=uid
        )
        assert garden.recall == "injected"


async def test_courtesy_and_stop_words_never_count_for_recall(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """An excerpt "Thanks! Please book the flight to Oslo" matched "thanks, please continue with
    the invoice" on two courtesy words and was injected into a talk about an invoice. Recall leaves
    out courtesy words and stop words (which search keeps when a query holds nothing else);
    two real words still recall the excerpt."""
    settings = make_settings(db_url, fake_ollama, chunk_max_chars=200)
    async with open_memory(settings, embedder=False) as memory:
        uid = await new_user(memory)
        lines = [
            ("user", padded("Thanks! Please book the flight to Oslo on monday")),
            ("user", "ok"),
        ]
        sid = await conversation(memory, fake_ollama, uid, lines, keep_last=1)
        invoice = await memory.context.build_prompt(
            sid, "thanks, please continue with the invoice", system_prompt=HOST, user_id=uid
        )
        assert invoice.recall == "nothing_found"
        assert {"thanks", "please", "ok"}.isdisjoint(t.casefold() for t in invoice.recall_terms)
        filler = await memory.context.build_prompt(
            sid, "Thanks to the, on to it", system_prompt=HOST, user_id=uid
        )
        assert (filler.recall, filler.recall_terms) == ("nothing_found", ())
        flight = await memory.context.build_prompt(
            sid, "thanks! which flight to Oslo?", system_prompt=HOST, user_id=uid
        )
        assert flight.recall == "injected"


@pytest.mark.parametrize(
    ("excerpt", "incoming"),
    [
        # "important" and "generally" give the stems import and general.
        (
            "Generally it is important to drink water in the morning.",
            "Can you import my contacts? In general I prefer CSV files.",
        ),
        # "Assistant:" gives the stem assist: every excerpt of an assistant's message.
        ("The blue paint dries overnight on the fence.", "Can you assist me with the paint?"),
    ],
)
async def test_words_matched_only_by_their_stems_never_count_for_recall(
    db_url: str, fake_ollama: FakeOllama, excerpt: str, incoming: str
) -> None:
    """Stems (revision 0024) let "import" find "important", scored; but a term is hit only by
    the chunk's own words, so an excerpt sharing nothing but stems with the conversation is
    not recalled (it was: two stems made two "hit" terms)."""
    settings = make_settings(db_url, fake_ollama, chunk_max_chars=200)
    async with open_memory(settings, embedder=False) as memory:
        uid = await new_user(memory)
        lines = [("assistant", padded(excerpt)), ("user", "ok")]
        sid = await conversation(memory, fake_ollama, uid, lines, keep_last=1)
        prompt = await memory.context.build_prompt(sid, incoming, system_prompt=HOST, user_id=uid)
        assert prompt.recall == "nothing_found"


async def test_recall_leaves_out_an_excerpt_memory_search_just_showed(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    """The agent called memory_search and its result, holding a dropped excerpt verbatim, is
    in the session's context: the next prompt's recall injected the same excerpt again. The
    tool records the session's excerpts it shows in the ledger, so recall leaves them out;
    another session's excerpts it shows are not this session's to record."""
    memory = small_chunks
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", DEPLOY), ("user", "ok")], keep_last=1
    )
    answer = await memory.tools.call(
        "memory_search", {"query": "deploy script"}, ToolContext(user_id=uid, session_id=sid)
    )
    assert DEPLOY in answer
    shown = await ledger(memory, sid)
    assert len(shown) == 1
    prompt = await memory.context.build_prompt(
        sid, "where is the deploy script?", system_prompt=HOST, user_id=uid
    )
    assert prompt.recalled == [] and prompt.recall == "nothing_found"
    assert await ledger(memory, sid) == shown

    other = await memory.sessions.create(user_id=uid)
    await memory.tools.call(
        "memory_search", {"query": "deploy script"}, ToolContext(user_id=uid, session_id=other.id)
    )
    assert await ledger(memory, other.id) == []
