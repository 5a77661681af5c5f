"""SessionStore.compress on real PostgreSQL: what is demoted, the summary and its KEYS line,
raw chunks and breadcrumbs, the truncation fallback, failures, and concurrent compressions."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory import (
    ChatModelError,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    NotFoundError,
    SessionStore,
    StorageError,
)
from navi_memory.llm.chat import ChatMessages, OllamaChatModel, message_dicts
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.schemas import ChunkDraft, Message
from navi_memory.services.chunks import ChunkService
from navi_memory.services.compression import SUMMARY_PROMPT
from navi_memory.services.embedding import EmbeddingService
from navi_memory.testing import FakeOllama, ScriptedChatModel
from tests.integration.factories import delete_user_during, new_user, scalar
from tests.integration.test_sessions import chunk_rows, make_store

FALLBACK = "Earlier conversation ({n} messages) was truncated; search memory for details."


async def seed(
    store: SessionStore, uid: uuid.UUID, count: int, *, sid: str = "s1", start: int = 1
) -> list[Message]:
    """A session (created if missing) with ``count`` alternating user/assistant messages whose
    contents carry unique tokens m001, m002, ..."""
    if await store.get(sid, uid) is None:
        await store.create(sid, user_id=uid)
    return [
        await store.append(
            sid, "user" if i % 2 else "assistant", f"m{i:03d} says something", user_id=uid
        )
        for i in range(start, start + count)
    ]


def token_counts(chunks: list[tuple[str, list[str]]]) -> dict[str, int]:
    joined = "\n".join(content for content, _ in chunks)
    return {token: joined.count(token) for token in re.findall(r"m\d{3}", joined)}


# --- what is demoted -----------------------------------------------------------------------


async def test_compress_demotes_exactly_the_older_messages_and_puts_the_summary_first(
    memory: Memory,
) -> None:
    model = ScriptedChatModel(["They chose port 8099.\nKEYS: port 8099, nginx.conf"])
    store, recorder = make_store(memory, chat_model=model)
    uid = await new_user(memory)
    written = await seed(store, uid, 12)

    result = await store.compress("s1", keep_last=4, user_id=uid)

    assert result.demoted == 8 and not result.used_fallback
    assert result.summary is not None
    assert (result.summary.kind, result.summary.role, result.summary.seq) == (
        "summary",
        "system",
        13,
    )
    assert result.summary.content == "They chose port 8099."
    context = await store.context("s1", user_id=uid)
    assert [m.seq for m in context] == [13, 9, 10, 11, 12]
    assert context[0] == result.summary
    history = await store.history("s1", user_id=uid)
    assert [m.seq for m in history if not m.is_context] == [m.seq for m in written[:8]]
    assert len(model.calls) == 1
    prompt = model.calls[0].messages
    assert prompt[0] == {"role": "system", "content": SUMMARY_PROMPT}
    assert "m001" in prompt[1]["content"] and "m008" in prompt[1]["content"]
    assert "m009" not in prompt[1]["content"]
    assert len(recorder.calls) == 1


async def test_the_summary_prompt_asks_for_the_keys_line() -> None:
    assert "End with ONE line KEYS: item, item, …" in SUMMARY_PROMPT
    assert "at most 30, most important first" in SUMMARY_PROMPT
    assert "KEYS: NONE when nothing is worth indexing" in SUMMARY_PROMPT


async def test_a_second_compression_folds_in_and_demotes_the_old_summary(memory: Memory) -> None:
    model = ScriptedChatModel(["First summary.\nKEYS: NONE", "Second summary.\nKEYS: NONE"])
    store, _ = make_store(memory, chat_model=model)
    uid = await new_user(memory)
    await seed(store, uid, 12)
    first = await store.compress("s1", keep_last=4, user_id=uid)
    await seed(store, uid, 6, start=13)  # seqs 14..19

    second = await store.compress("s1", keep_last=4, user_id=uid)

    assert second.demoted == 7  # m009..m014 and the first summary
    assert second.summary is not None and second.summary.content == "Second summary."
    context = await store.context("s1", user_id=uid)
    assert [m.content for m in context] == [
        "Second summary.",
        *(f"m{i:03d} says something" for i in range(15, 19)),
    ]
    history = {m.seq: m for m in await store.history("s1", user_id=uid)}
    assert first.summary is not None and not history[first.summary.seq].is_context
    folded = model.calls[1].messages[1]["content"]
    assert "Previous summary:\nFirst summary." in folded
    assert "m009" in folded and "m014" in folded and "m015" not in folded


async def test_nothing_to_demote_makes_no_model_call_and_changes_nothing(memory: Memory) -> None:
    model = ScriptedChatModel(["Summary.\nKEYS: NONE"])
    store, recorder = make_store(memory, chat_model=model)
    uid = await new_user(memory)
    await seed(store, uid, 4)

    result = await store.compress("s1", keep_last=4, user_id=uid)

    assert (result.demoted, result.summary, result.chunks_written) == (0, None, 0)
    assert model.calls == [] and recorder.calls == []
    assert len(await store.context("s1", user_id=uid)) == 4

    await store.compress("s1", keep_last=2, user_id=uid)
    again = await store.compress("s1", keep_last=2, user_id=uid)
    assert again.demoted == 0 and len(model.calls) == 1
    assert [m.kind for m in await store.context("s1", user_id=uid)] == [
        "summary",
        "message",
        "message",
    ]


async def test_keep_last_defaults_to_the_setting(memory: Memory) -> None:
    store, _ = make_store(
        memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]), memory_compress_keep_last=3
    )
    uid = await new_user(memory)
    await seed(store, uid, 5)
    result = await store.compress("s1", user_id=uid)
    assert result.demoted == 2
    assert len(await store.context("s1", user_id=uid)) == 4


async def test_the_keep_boundary_never_parts_a_tool_result_from_its_call(
    memory: Memory,
) -> None:
    """keep_last=2 would keep a tool result and demote its call: the call stays with it, so the
    prompt never shows a result the model did not ask for."""
    store, _ = make_store(memory, chat_model=ScriptedChatModel(["Asked for the port.\nKEYS: NONE"]))
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    await store.append("s1", "user", "what port?", user_id=uid)
    await store.append("s1", "tool_call", tool_name="kv", tool_args={"k": "port"}, user_id=uid)
    await store.append("s1", "tool", "9931", tool_name="kv", user_id=uid)
    await store.append("s1", "assistant", "It is 9931.", user_id=uid)

    result = await store.compress("s1", keep_last=2, user_id=uid)

    assert result.demoted == 1
    context = await store.context("s1", user_id=uid)
    assert [m.role for m in context] == ["system", "tool_call", "tool", "assistant"]
    turns = await memory.context.build("s1", "thanks", system_prompt="", user_id=uid)
    assert [(t.role, bool(t.tool_calls)) for t in turns[1:3]] == [
        ("assistant", True),
        ("tool", False),
    ]


async def test_keep_last_zero_leaves_only_the_summary(memory: Memory) -> None:
    store, _ = make_store(memory, chat_model=ScriptedChatModel(["All of it.\nKEYS: NONE"]))
    uid = await new_user(memory)
    await seed(store, uid, 3)
    result = await store.compress("s1", keep_last=0, user_id=uid)
    assert result.demoted == 3
    assert [m.content for m in await store.context("s1", user_id=uid)] == ["All of it."]


@pytest.mark.parametrize(
    ("keep_last", "error"),
    [(-1, InvalidInputError), ("3", InvalidTypeError), (True, InvalidTypeError)],
)
async def test_a_bad_keep_last_is_refused(
    memory: Memory, keep_last: object, error: type[Exception]
) -> None:
    store, _ = make_store(memory)
    uid = await new_user(memory)
    await seed(store, uid, 3)
    with pytest.raises(error):
        await store.compress("s1", keep_last=keep_last, user_id=uid)  # type: ignore[arg-type]
    assert all(m.is_context for m in await store.history("s1", user_id=uid))


async def test_compressing_a_missing_session_is_not_found(memory: Memory) -> None:
    store, _ = make_store(memory)
    with pytest.raises(NotFoundError):
        await store.compress("nope", keep_last=0, user_id=await new_user(memory))


# --- raw chunks and breadcrumbs ------------------------------------------------------------


async def test_keys_items_and_deterministic_breadcrumbs_ride_on_every_chunk(
    memory: Memory,
) -> None:
    model = ScriptedChatModel(
        ["We moved the app.\n**KEYS:** server port 8099, `staging box`, nginx.conf"]
    )
    store, _ = make_store(memory, chat_model=model, chunk_max_chars=200)
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    await store.append(
        "s1", "user", "Edit /etc/nginx/nginx.conf and run `make deploy` " + "a" * 150, user_id=uid
    )
    await store.append(
        "s1",
        "tool_call",
        tool_name="shell",
        tool_args={"cmd": "systemctl reload nginx"},
        user_id=uid,
    )
    await store.append("s1", "tool", "reloaded in 12 ms", tool_name="shell", user_id=uid)
    await store.append("s1", "assistant", "Done, see ticket #4411 " + "b" * 180, user_id=uid)
    await store.append("s1", "user", "thanks", user_id=uid)

    result = await store.compress("s1", keep_last=1, user_id=uid)

    assert result.summary is not None and result.summary.content == "We moved the app."
    assert result.breadcrumbs[:3] == ["server port 8099", "staging box", "nginx.conf"]
    for found in ("/etc/nginx/nginx.conf", "make deploy", "12 ms", "#4411"):
        assert found in result.breadcrumbs
    chunks = await chunk_rows(memory, "s1")
    assert len(chunks) >= 2 and result.chunks_written == len(chunks)
    assert all(crumbs == result.breadcrumbs for _, crumbs in chunks)
    joined = "\n".join(content for content, _ in chunks)
    assert "Assistant: [Tool call] shell(" in joined and "Tool result (shell): reloaded" in joined
    assert "thanks" not in joined and "We moved the app" not in joined


async def test_breadcrumbs_come_only_from_the_text_the_chunks_keep(memory: Memory) -> None:
    """A message longer than CHUNK_MESSAGE_MAX_CHARS loses its middle in the chunk; the
    breadcrumbs are found in what the chunk keeps, not in the cut middle or the cut's note."""
    store, _ = make_store(
        memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]), chunk_message_max_chars=300
    )
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    middle = " /srv/cut/middle.conf " + "filler " * 20
    await store.append(
        "s1",
        "tool",
        "/srv/head/start.conf " + "x " * 200 + middle + "y " * 200 + " /srv/tail/end.conf",
        tool_name="cat",
        user_id=uid,
    )

    result = await store.compress("s1", keep_last=0, user_id=uid)

    assert "/srv/head/start.conf" in result.breadcrumbs
    assert "/srv/tail/end.conf" in result.breadcrumbs
    assert "/srv/cut/middle.conf" not in result.breadcrumbs
    (content, _), *_ = await chunk_rows(memory, "s1")
    assert "characters elided" in content
    assert not any(crumb.isdigit() for crumb in result.breadcrumbs)


async def test_compressing_huge_tool_results_leaves_the_event_loop_running(
    memory: Memory,
) -> None:
    """Five tool results of 1,000,000 characters (a tool may return a whole file): the
    compression's text work neither scans the cut text nor holds the event loop."""
    store, _ = make_store(memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]))
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    line = "2026-11-06 12:00:01 INFO /var/log/app.py:120 request took 12 ms user_id=42 ok\n"
    big = (line * (1_000_000 // len(line) + 1))[:1_000_000]
    for i in range(5):
        await store.append("s1", "tool_call", tool_name="cat", tool_args={"f": i}, user_id=uid)
        await store.append("s1", "tool", big, tool_name="cat", user_id=uid)
    # The gaps between a ticker's wake-ups are measured in the process's CPU time, not the
    # wall clock's: text work that holds the loop (in it, or in a thread that keeps the GIL)
    # burns CPU for the whole gap (scanning the five results in the loop took 7 s of it),
    # while a loaded machine that merely does not schedule the process burns none.
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.process_time()
        while not done.is_set():
            await asyncio.sleep(0.01)
            gaps.append(time.process_time() - last)
            last = time.process_time()

    task = asyncio.create_task(ticker())
    result = await store.compress("s1", keep_last=0, user_id=uid)
    done.set()
    await task

    assert result.demoted == 10 and result.chunks_written >= 5
    assert max(gaps) < 1.0


async def test_compressing_twice_indexes_every_demoted_message_exactly_once(
    memory: Memory,
) -> None:
    model = ScriptedChatModel(["One.\nKEYS: NONE", "Two.\nKEYS: NONE"])
    store, _ = make_store(memory, chat_model=model, chunk_max_chars=200)
    uid = await new_user(memory)
    await seed(store, uid, 20)
    await store.compress("s1", keep_last=12, user_id=uid)
    await seed(store, uid, 5, start=21)
    await store.compress("s1", keep_last=4, user_id=uid)

    counts = token_counts(await chunk_rows(memory, "s1"))
    assert counts == {f"m{i:03d}": 1 for i in range(1, 22)}
    demoted = [m for m in await store.history("s1", user_id=uid) if not m.is_context]
    assert {m.content[:4] for m in demoted if m.kind == "message"} == set(counts)


# --- the truncation fallback ---------------------------------------------------------------


@pytest.mark.parametrize(
    "model_factory",
    [
        lambda: None,
        lambda: ScriptedChatModel([ChatModelError("model is down")]),
        lambda: ScriptedChatModel(["KEYS: only, keys, here"]),
        lambda: ScriptedChatModel(["   \n"]),
        # Stored, these stood in for the previous summary, which left the context.
        lambda: ScriptedChatModel(["\u200b\u200b\nKEYS: NONE"]),
        lambda: ScriptedChatModel(["\ufeff\xad\u200d"]),
        lambda: ScriptedChatModel(["```text\n\u200b\n```\nKEYS: a"]),
        lambda: ScriptedChatModel(["...\nKEYS: NONE"]),
    ],
    ids=[
        "no-model",
        "model-error",
        "keys-only-reply",
        "blank-reply",
        "zero-width-reply",
        "invisible-reply",
        "fenced-invisible-reply",
        "punctuation-reply",
    ],
)
async def test_without_a_usable_summary_compression_truncates_and_still_indexes(
    memory: Memory, model_factory: Callable[[], ScriptedChatModel | None]
) -> None:
    store, recorder = make_store(memory, chat_model=model_factory())
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    for i in range(1, 9):
        await store.append("s1", "user", f"m{i:03d} see /srv/app/config.yaml", user_id=uid)
    await seed(store, uid, 4, start=9)

    result = await store.compress("s1", keep_last=4, user_id=uid)

    assert result.used_fallback and result.demoted == 8
    assert result.summary is not None and result.summary.content == FALLBACK.format(n=8)
    assert result.breadcrumbs == ["/srv/app/config.yaml"]
    assert [m.seq for m in await store.context("s1", user_id=uid)] == [13, 9, 10, 11, 12]
    assert len(recorder.calls) == 1
    assert token_counts(await chunk_rows(memory, "s1")) == {f"m{i:03d}": 1 for i in range(1, 9)}


async def test_the_fallback_counts_every_truncated_message_and_keeps_the_earlier_summary(
    memory: Memory,
) -> None:
    model = ScriptedChatModel(
        ["They like tea.\nKEYS: tea", ChatModelError("down"), ChatModelError("still down")]
    )
    store, _ = make_store(memory, chat_model=model)
    uid = await new_user(memory)
    await seed(store, uid, 10)
    await store.compress("s1", keep_last=4, user_id=uid)  # 6 demoted, model summary
    await seed(store, uid, 5, start=11)
    second = await store.compress("s1", keep_last=4, user_id=uid)  # 5 messages demoted
    await seed(store, uid, 3, start=16)
    third = await store.compress("s1", keep_last=4, user_id=uid)  # 3 more

    assert second.summary is not None and third.summary is not None
    assert second.summary.content == FALLBACK.format(n=5) + "\n\nThey like tea."
    assert third.summary.content == FALLBACK.format(n=8) + "\n\nThey like tea."
    assert (await store.context("s1", user_id=uid))[0] == third.summary


# --- indexing switched off or failing ------------------------------------------------------


async def test_with_memory_search_disabled_nothing_is_indexed(memory: Memory) -> None:
    store, recorder = make_store(
        memory,
        chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]),
        memory_search_enabled=False,
    )
    uid = await new_user(memory)
    await seed(store, uid, 6)
    result = await store.compress("s1", keep_last=2, user_id=uid)
    assert result.demoted == 4 and result.chunks_written == 0
    assert recorder.calls == []
    assert await chunk_rows(memory, "s1") == []


async def test_an_embedding_failure_stores_the_chunks_without_vectors_and_the_compression_stands(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """The embedder down: the compression happens and its chunks land without vectors."""
    store, recorder = make_store(memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]))
    uid = await new_user(memory)
    await seed(store, uid, 6)
    fake_ollama.mode = "fail"

    result = await store.compress("s1", keep_last=2, user_id=uid)

    assert result.demoted == 4 and result.chunks_written == 1
    assert result.summary is not None and result.summary.content == "S."
    assert len(recorder.calls) == 1
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL") == 1


async def test_a_chunk_write_failure_fails_the_whole_compression(memory: Memory) -> None:
    """The chunks cannot be written: StorageError, and the context is as it was — the demotion,
    the summary and the chunks commit together or not at all."""
    store, recorder = make_store(memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]))
    recorder.fail_with = StorageError("db went away")
    uid = await new_user(memory)
    await seed(store, uid, 6)

    with pytest.raises(StorageError):
        await store.compress("s1", keep_last=2, user_id=uid)

    assert [m.seq for m in await store.context("s1", user_id=uid)] == [1, 2, 3, 4, 5, 6]
    assert await chunk_rows(memory, "s1") == []


# --- concurrency ---------------------------------------------------------------------------


async def test_deleting_the_user_during_a_compressions_write_waits_for_it_without_deadlock(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """users.delete while a compression's transaction holds the session row: the delete waits
    for it and returns True. The compression takes the user row (FOR KEY SHARE) before the
    session row; it used to take the session first and then need the user row for its chunks'
    foreign key, while the delete held it and waited for the session: a deadlock."""
    store, recorder = make_store(memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]))
    uid = await new_user(memory)
    await seed(store, uid, 6)
    paused, resume = asyncio.Event(), asyncio.Event()
    write = recorder.write

    async def pausing(*args: Any, **kwargs: Any) -> int:
        paused.set()
        await resume.wait()
        return await write(*args, **kwargs)

    monkeypatch.setattr(recorder, "write", pausing)
    compression = store.compress("s1", keep_last=2, user_id=uid)
    result, deleted = await delete_user_during(memory, uid, compression, paused, resume)
    assert result.demoted == 4
    assert deleted is True
    assert await scalar(memory, "SELECT count(*) FROM sessions") == 0
    assert await scalar(memory, "SELECT count(*) FROM memory_chunks") == 0


class GatedChatModel:
    """Answers only once ``parties`` calls are waiting: every compression has read its context
    before any of them can write."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.all_arrived = asyncio.Event()

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        message_dicts(messages)
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_arrived.set()
        await asyncio.wait_for(self.all_arrived.wait(), timeout=10)
        return f"Summary #{self.arrived}.\nKEYS: NONE"

    async def aclose(self) -> None:
        """Nothing to release."""


@pytest.mark.parametrize(("keep_a", "keep_b"), [(4, 4), (4, 7)])
async def test_concurrent_compressions_never_demote_or_index_a_message_twice(
    busy_memory: Memory, keep_a: int, keep_b: int
) -> None:
    model = GatedChatModel(parties=2)
    store, recorder = make_store(busy_memory, chat_model=model, chunk_max_chars=200)
    uid = await new_user(busy_memory)
    await seed(store, uid, 16)

    results = await asyncio.gather(
        store.compress("s1", keep_last=keep_a, user_id=uid),
        store.compress("s1", keep_last=keep_b, user_id=uid),
    )

    assert model.arrived == 2
    winners = [r for r in results if r.demoted]
    assert len(winners) == 1 and len(recorder.calls) == 1
    history = await store.history("s1", user_id=uid)
    assert sum(1 for m in history if not m.is_context) == winners[0].demoted
    assert [m.kind for m in history].count("summary") == 1
    context = await store.context("s1", user_id=uid)
    assert context[0] == winners[0].summary
    counts = token_counts(await chunk_rows(busy_memory, "s1"))
    assert set(counts.values()) == {1} and len(counts) == winners[0].demoted


class AppendingChatModel:
    """Appends to the session while it is asked for a summary: that append would wait forever
    if the compression held the session lock during the call."""

    def __init__(self) -> None:
        self.meanwhile: Callable[[], Awaitable[object]] | None = None

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        assert self.meanwhile is not None
        await asyncio.wait_for(self.meanwhile(), timeout=5)
        return "Summary.\nKEYS: NONE"

    async def aclose(self) -> None:
        """Nothing to release."""


async def test_no_lock_is_held_while_the_model_answers(memory: Memory) -> None:
    model = AppendingChatModel()
    store, _ = make_store(memory, chat_model=model)
    uid = await new_user(memory)
    await seed(store, uid, 6)
    model.meanwhile = lambda: store.append("s1", "user", "m099 arrived meanwhile", user_id=uid)

    result = await store.compress("s1", keep_last=2, user_id=uid)

    assert result.demoted == 4
    context = await store.context("s1", user_id=uid)
    assert [m.content[:4] for m in context] == ["Summ", "m005", "m006", "m099"]


# --- through the real Ollama client --------------------------------------------------------


async def test_compress_through_the_ollama_client(memory: Memory, fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_replies.append("The user set up backups.\nKEYS: restic, /mnt/backup")
    async with OllamaChatModel.from_settings(memory.settings) as model:
        store, _ = make_store(memory, chat_model=model)
        uid = await new_user(memory)
        await seed(store, uid, 6)
        result = await store.compress("s1", keep_last=2, user_id=uid)

    assert not result.used_fallback
    assert result.summary is not None and result.summary.content == "The user set up backups."
    assert result.breadcrumbs[:2] == ["restic", "/mnt/backup"]
    (request,) = fake_ollama.requests_to("/api/chat")
    sent = request.json["messages"]
    assert sent[0] == {"role": "system", "content": SUMMARY_PROMPT}
    assert "m001" in sent[1]["content"] and "m005" not in sent[1]["content"]
    stored = await scalar(memory, "SELECT count(*) FROM memory_chunks WHERE session_id = 's1'")
    assert isinstance(stored, int) and stored >= 1


@pytest.mark.parametrize(
    "mode",
    ["fail", "junk", pytest.param("stall", marks=pytest.mark.slow)],  # stall: 4 s
)
async def test_an_ollama_failure_falls_back_to_truncation(
    memory: Memory, fake_ollama: FakeOllama, mode: str
) -> None:
    fake_ollama.mode = mode  # type: ignore[assignment]
    fake_ollama.stall_seconds = 4.0
    settings = memory.settings.model_copy(update={"memory_llm_timeout_seconds": 2.0})  # < stall
    async with OllamaChatModel.from_settings(settings) as model:
        store, recorder = make_store(memory, chat_model=model)
        uid = await new_user(memory)
        await seed(store, uid, 6)
        result = await store.compress("s1", keep_last=2, user_id=uid)

    assert result.used_fallback and result.demoted == 4
    assert result.summary is not None and result.summary.content == FALLBACK.format(n=4)
    assert len(fake_ollama.requests_to("/api/chat")) >= 1
    assert len(recorder.calls) == 1


async def test_messages_demoted_without_chunks_are_indexed_by_the_repair_exactly_once(
    memory: Memory,
) -> None:
    """Compressions made with MEMORY_SEARCH_ENABLED false left their messages in no chunk: the
    repair indexes each once, at once (no settling time), and never repeats a normal one."""
    unindexed, _ = make_store(
        memory,
        chat_model=ScriptedChatModel(["First.\nKEYS: NONE", "Second.\nKEYS: NONE"]),
        memory_search_enabled=False,
    )
    uid = await new_user(memory)
    await seed(unindexed, uid, 6)
    assert (await unindexed.compress("s1", keep_last=2, user_id=uid)).chunks_written == 0
    await seed(unindexed, uid, 4, start=7)
    assert (await unindexed.compress("s1", keep_last=2, user_id=uid)).chunks_written == 0
    assert await chunk_rows(memory, "s1") == []

    store = _store(memory, [])
    assert await store.index_dropped_history() >= 1
    # m001..m008 left the context; each is now in exactly one chunk; m009, m010 are in context.
    assert token_counts(await chunk_rows(memory, "s1")) == {f"m{i:03d}": 1 for i in range(1, 9)}
    assert await store.index_dropped_history() == 0

    # A later compression that indexes normally is not repeated by the repair either.
    await seed(store, uid, 4, start=11)
    store_ok = _store(memory, ["Third.\nKEYS: NONE"])
    assert (await store_ok.compress("s1", keep_last=2, user_id=uid)).chunks_written >= 1
    assert await store.index_dropped_history() == 0
    counts = token_counts(await chunk_rows(memory, "s1"))
    assert counts == {f"m{i:03d}": 1 for i in range(1, 13)}


async def test_a_compression_repeating_an_earlier_ones_text_still_indexes_its_messages(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """Two compressions of the same words ("yes" / "ok") make chunks of equal text: each is
    stored, so every demoted message is in a chunk and the repair has nothing to redo."""
    store, _ = make_store(memory, chat_model=None)
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    written = []
    for _ in range(2):
        await store.append("s1", "user", "yes", user_id=uid)
        await store.append("s1", "assistant", "ok", user_id=uid)
        written.append((await store.compress("s1", keep_last=0, user_id=uid)).chunks_written)

    assert written == [1, 1]
    ranges = await chunk_ranges(memory, "s1")
    assert ranges == [(1, 2), (4, 5)]
    fake_ollama.clear()
    assert await store.index_dropped_history() == 0
    assert fake_ollama.requests_to("/api/embed") == []


async def test_a_demoted_message_no_chunk_can_hold_is_not_dropped_history(memory: Memory) -> None:
    """A blank message is rendered into no chunk: at the edge of a compression it lies in no
    chunk's range, and the repair must not list its session again and again."""
    store, _ = make_store(memory, chat_model=None)
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    await store.append("s1", "assistant", " \u3000\n", user_id=uid)
    await store.append("s1", "user", "hello there", user_id=uid)
    await store.append("s1", "assistant", "", user_id=uid)
    await store.compress("s1", keep_last=0, user_id=uid)
    assert await chunk_ranges(memory, "s1") == [(2, 2)]

    async with memory.sessionmaker() as session:
        listed = await SessionRepository(session=session).sessions_with_dropped_history(0)
    assert listed == []


async def chunk_ranges(memory: Memory, session_id: str) -> list[tuple[int, int]]:
    async with memory.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT start_seq, end_seq FROM memory_chunks WHERE session_id = :s "
                "ORDER BY start_seq"
            ),
            {"s": session_id},
        )
        return [(start, end) for start, end in rows]


async def test_a_settling_time_leaves_recently_compressed_sessions_alone(memory: Memory) -> None:
    """settled_for, when an operator gives one, skips sessions whose summary is younger."""
    from datetime import timedelta

    unindexed, _ = make_store(
        memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]), memory_search_enabled=False
    )
    uid = await new_user(memory)
    await seed(unindexed, uid, 6)
    await unindexed.compress("s1", keep_last=2, user_id=uid)
    store = _store(memory, [])
    assert await store.index_dropped_history(settled_for=timedelta(minutes=10)) == 0
    assert await store.index_dropped_history() >= 1


def _store(memory: Memory, replies: list[str], chunks: ChunkService | None = None) -> SessionStore:
    return SessionStore(
        sessionmaker=memory.sessionmaker,
        settings=memory.settings,
        chat_model=ScriptedChatModel(replies),
        chunks=chunks or ChunkService(embedding=EmbeddingService(memory.embedder)),
    )


async def test_the_repair_packs_a_failed_compression_as_the_compression_would_have(
    memory: Memory,
) -> None:
    from datetime import timedelta

    uid = await new_user(memory)
    for sid in ("ok", "failed"):
        store = _store(memory, ["S.\nKEYS: NONE"])
        await store.create(sid, user_id=uid)
        for i in range(1, 7):
            # A system message in the middle: skipped by the chunks, it must not split them.
            role = "system" if i == 3 else ("user" if i % 2 else "assistant")
            await store.append(sid, role, f"m{i:03d} says something", user_id=uid)
        if sid == "failed":
            store, _ = make_store(
                memory,
                chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]),
                memory_search_enabled=False,
            )
        await store.compress(sid, keep_last=1, user_id=uid)
    assert await chunk_rows(memory, "failed") == []
    assert await _store(memory, []).index_dropped_history(settled_for=timedelta(0)) >= 1
    normal = [content for content, _ in await chunk_rows(memory, "ok")]
    repaired = [content for content, _ in await chunk_rows(memory, "failed")]
    assert repaired == normal and "m003" not in "".join(repaired)


async def test_the_repair_is_an_operators_job_and_skips_sessions_deleted_meanwhile(
    memory: Memory,
) -> None:
    from datetime import timedelta

    from navi_memory import PERMISSION_READ_ALL, PermissionDeniedError, request_context

    uid = await new_user(memory)
    for sid in ("a", "b"):
        store, _ = make_store(
            memory, chat_model=ScriptedChatModel(["S.\nKEYS: NONE"]), memory_search_enabled=False
        )
        await seed(store, uid, 4, sid=sid)
        await store.compress(sid, keep_last=1, user_id=uid)

    with request_context(user_id=uid), pytest.raises(PermissionDeniedError, match="read_all"):
        await _store(memory, []).index_dropped_history(settled_for=timedelta(0))

    class DeleteAFirst(ChunkService):
        """Session "a" is deleted just before its chunks are written."""

        async def write(
            self,
            conn: AsyncSession | AsyncConnection,
            user_id: uuid.UUID,
            session_id: str,
            drafts: Sequence[ChunkDraft],
            vectors: Sequence[Sequence[float]] | None,
            *,
            require_session: bool,
        ) -> int:
            if session_id == "a":
                assert await memory.sessions.delete("a", user_id=user_id)
            return await super().write(
                conn, user_id, session_id, drafts, vectors, require_session=require_session
            )

    repair = _store(memory, [], chunks=DeleteAFirst(embedding=EmbeddingService(memory.embedder)))
    with request_context(user_id=uid, permissions=[PERMISSION_READ_ALL]):
        assert await repair.index_dropped_history(settled_for=timedelta(0)) == 1
    assert await chunk_rows(memory, "a") == []
    assert token_counts(await chunk_rows(memory, "b")) == {f"m{i:03d}": 1 for i in range(1, 4)}
