"""SessionStore on real PostgreSQL: sessions, appending every role, seq under concurrency,
tenancy, and delete taking chunks, extraction state and sketches with it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory import (
    PERMISSION_READ_ALL,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    NotFoundError,
    PermissionDeniedError,
    SessionStore,
    StorageError,
    request_context,
)
from navi_memory.constants import MESSAGE_MAX_CHARS
from navi_memory.llm.chat import ChatModel
from navi_memory.schemas import ChunkDraft
from navi_memory.services.chunks import ChunkService
from navi_memory.services.embedding import EmbeddingService
from navi_memory.testing import ScriptedChatModel
from tests.integration.factories import execute, new_user, scalar

# --- helpers shared with test_compression.py ---------------------------------------------------


class ChunkRecorder(ChunkService):
    """The chunk service a SessionStore is given: records every write, then stores the chunks
    as the real service does; ``fail_with`` makes the write raise instead."""

    def __init__(self, memory: Memory) -> None:
        super().__init__(embedding=EmbeddingService(memory.embedder))
        self.calls: list[tuple[list[ChunkDraft], uuid.UUID, str]] = []
        self.fail_with: BaseException | None = None

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
        self.calls.append((list(drafts), user_id, session_id))
        if self.fail_with is not None:
            raise self.fail_with
        return await super().write(
            conn, user_id, session_id, drafts, vectors, require_session=require_session
        )


def make_store(
    memory: Memory, *, chat_model: ChatModel | None = None, **settings: Any
) -> tuple[SessionStore, ChunkRecorder]:
    recorder = ChunkRecorder(memory)
    store = SessionStore(
        sessionmaker=memory.sessionmaker,
        settings=memory.settings.model_copy(update=settings),
        chat_model=chat_model,
        chunks=recorder,
    )
    return store, recorder


async def chunk_rows(memory: Memory, session_id: str) -> list[tuple[str, list[str]]]:
    """(content, breadcrumbs) of the session's raw chunks, oldest range first."""
    async with memory.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT content, breadcrumbs FROM memory_chunks WHERE session_id = :s "
                "ORDER BY start_seq, id"
            ),
            {"s": session_id},
        )
        return [(content, list(crumbs)) for content, crumbs in rows]


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def store(memory: Memory) -> SessionStore:
    return make_store(memory, chat_model=ScriptedChatModel())[0]


# --- create / get / list -------------------------------------------------------------------


async def test_create_generates_an_id_and_get_returns_the_session(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    info = await store.create(user_id=uid, title="Planning")
    assert info.id and info.user_id == uid and info.title == "Planning"
    assert await store.get(info.id, uid) == info
    other = await store.create(user_id=uid)
    assert other.id != info.id


async def test_create_keeps_the_callers_id(memory: Memory, store: SessionStore) -> None:
    uid = await new_user(memory)
    info = await store.create("s1", user_id=uid)
    assert info.id == "s1"
    assert await scalar(memory, "SELECT user_id FROM sessions WHERE id = 's1'") == uid


async def test_a_taken_id_is_refused_without_naming_its_owner(
    memory: Memory, store: SessionStore
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await store.create("shared-name", user_id=alice)
    with pytest.raises(InvalidInputError, match="already taken") as refused:
        await store.create("shared-name", user_id=bob)
    assert str(alice) not in str(refused.value)
    with pytest.raises(InvalidInputError, match="already taken"):
        await store.create("shared-name", user_id=alice)
    assert await scalar(memory, "SELECT count(*) FROM sessions") == 1


@pytest.mark.parametrize("table", ["memory_chunks", "kv_store"])
async def test_an_id_another_user_holds_chunks_or_sketches_under_is_taken(
    memory: Memory, store: SessionStore, table: str
) -> None:
    """Sam keeps a session outside ``sessions`` (add_chunks needs no row) and has raw chunks
    or sketches under its id; Kim may not create a session with that id, or Sam's later
    add_chunks to it would be refused and Sam's sketches of it hidden behind Kim's row."""
    sam, kim = await new_user(memory), await new_user(memory)
    if table == "memory_chunks":
        await execute(
            memory,
            "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
            " end_seq, started_at, ended_at) VALUES (:u, 'ext-1', 'User: hi', 'h', 1, 1,"
            " now(), now())",
            u=sam,
        )
    else:
        await execute(
            memory,
            "INSERT INTO kv_store (user_id, scope, session_id, key, value)"
            " VALUES (:u, 'scratchpad', 'ext-1', 'plan', 'step one')",
            u=sam,
        )
    with pytest.raises(InvalidInputError, match="already taken") as refused:
        await store.create("ext-1", user_id=kim)
    assert str(sam) not in str(refused.value)
    assert await scalar(memory, "SELECT count(*) FROM sessions") == 0
    # Sam's own rows do not stand in Sam's way.
    assert (await store.create("ext-1", user_id=sam)).user_id == sam


async def test_create_for_a_user_that_does_not_exist_is_not_found(store: SessionStore) -> None:
    with pytest.raises(NotFoundError, match=r"users\.ensure"):
        await store.create("s1", user_id=uuid.uuid4())


@pytest.mark.parametrize(
    ("session_id", "error"),
    [
        ("", InvalidInputError),
        ("a\x00b", InvalidInputError),
        ("x" * 201, InvalidInputError),
        (42, InvalidTypeError),
    ],
)
async def test_create_refuses_a_bad_session_id(
    memory: Memory, store: SessionStore, session_id: Any, error: type[Exception]
) -> None:
    uid = await new_user(memory)
    with pytest.raises(error):
        await store.create(session_id, user_id=uid)
    assert await scalar(memory, "SELECT count(*) FROM sessions") == 0


async def test_list_returns_the_users_sessions_most_recently_active_first(
    memory: Memory, store: SessionStore
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await store.create("a1", user_id=alice)
    await store.create("a2", user_id=alice)
    await store.create("b1", user_id=bob)
    await store.append("a1", "user", "back to the first one", user_id=alice)
    assert [s.id for s in await store.list(alice)] == ["a1", "a2"]
    assert [s.id for s in await store.list(bob)] == ["b1"]


# --- append and read back ------------------------------------------------------------------


async def test_every_role_is_appended_in_order_and_read_back_as_written(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    written = [
        await store.append("s1", "system", "You are terse.", user_id=uid),
        await store.append("s1", "user", "How full is /var?", user_id=uid),
        await store.append(
            "s1",
            "tool_call",
            tool_name="shell",
            tool_args={"cmd": "df -h /var", "timeout": 5, "env": {"LC_ALL": "C"}, "n": [1, 2]},
            user_id=uid,
        ),
        await store.append(
            "s1", "tool", "/dev/sda1  40G  38G  95% /var", tool_name="shell", user_id=uid
        ),
        await store.append("s1", "assistant", "95% used.", user_id=uid),
    ]
    assert [m.seq for m in written] == [1, 2, 3, 4, 5]
    assert [m.role for m in written] == ["system", "user", "tool_call", "tool", "assistant"]
    assert written[2].tool_args == {
        "cmd": "df -h /var",
        "timeout": 5,
        "env": {"LC_ALL": "C"},
        "n": [1, 2],
    }
    assert written[2].content == "" and written[3].tool_name == "shell"
    assert all(m.kind == "message" and m.is_context for m in written)
    assert await store.history("s1", user_id=uid) == written
    assert await store.context("s1", user_id=uid) == written


async def test_tool_args_come_back_as_stored_json(memory: Memory, store: SessionStore) -> None:
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    message = await store.append(
        "s1", "tool_call", tool_name="t", tool_args={"pair": (1, 2), "1": None}, user_id=uid
    )
    assert message.tool_args == {"pair": [1, 2], "1": None}
    assert (await store.history("s1", user_id=uid))[0].tool_args == {"pair": [1, 2], "1": None}


async def test_append_moves_last_active(memory: Memory, store: SessionStore) -> None:
    uid = await new_user(memory)
    created = await store.create("s1", user_id=uid)
    await store.append("s1", "user", "hello", user_id=uid)
    after = await store.get("s1", uid)
    assert after is not None and after.last_active > created.last_active


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"role": "robot"}, InvalidInputError),
        ({"role": None}, InvalidTypeError),
        ({"role": "user", "content": "a\x00b"}, InvalidInputError),
        ({"role": "user", "content": "x" * (MESSAGE_MAX_CHARS + 1)}, InvalidInputError),
        ({"role": "user", "content": "lone \ud800 surrogate"}, InvalidInputError),
        ({"role": "user", "content": b"bytes"}, InvalidTypeError),
        ({"role": "tool_call", "tool_name": "t", "tool_args": ["a"]}, InvalidTypeError),
        ({"role": "tool_call", "tool_name": "t", "tool_args": {"x": object()}}, InvalidTypeError),
        (
            {"role": "tool_call", "tool_name": "t", "tool_args": {"x": float("nan")}},
            InvalidInputError,
        ),
        ({"role": "tool_call", "tool_name": "t", "tool_args": {"x": ["a\x00"]}}, InvalidInputError),
        ({"role": "tool_call", "tool_name": "t", "tool_args": {"k\x00": 1}}, InvalidInputError),
        ({"role": "tool_call", "tool_args": {"a": 1}}, InvalidInputError),
        ({"role": "tool", "content": "result"}, InvalidInputError),
        ({"role": "user", "content": "hi", "tool_name": "t"}, InvalidInputError),
        ({"role": "assistant", "tool_args": {"a": 1}}, InvalidInputError),
        ({"role": "tool", "tool_name": "t", "tool_args": {"a": 1}}, InvalidInputError),
    ],
)
async def test_bad_input_is_refused_and_nothing_is_written(
    memory: Memory, store: SessionStore, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    with pytest.raises(error):
        await store.append("s1", user_id=uid, **kwargs)
    assert await store.history("s1", user_id=uid) == []
    assert await scalar(memory, "SELECT count(*) FROM session_messages") == 0


async def test_append_to_a_missing_session_is_not_found(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    with pytest.raises(NotFoundError):
        await store.append("nope", "user", "hi", user_id=uid)


async def test_twenty_concurrent_appends_get_seqs_one_to_twenty_in_time_order(
    busy_memory: Memory,
) -> None:
    store, _ = make_store(busy_memory)
    uid = await new_user(busy_memory)
    await store.create("s1", user_id=uid)
    written = await asyncio.gather(
        *(store.append("s1", "user", f"message {i}", user_id=uid) for i in range(20))
    )
    assert sorted(m.seq for m in written) == list(range(1, 21))
    history = await store.history("s1", user_id=uid)
    assert [m.seq for m in history] == list(range(1, 21))
    assert sorted(m.content for m in history) == sorted(f"message {i}" for i in range(20))
    stamps = [m.created_at for m in history]
    assert stamps == sorted(stamps)


async def test_context_holds_only_messages_still_in_context(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    await store.create("s1", user_id=uid)
    for i in range(4):
        await store.append("s1", "user", f"m{i}", user_id=uid)
    async with memory.engine.begin() as conn:
        await conn.execute(text("UPDATE session_messages SET is_context = false WHERE seq <= 2"))
    assert [m.content for m in await store.context("s1", user_id=uid)] == ["m2", "m3"]
    assert [m.content for m in await store.history("s1", user_id=uid)] == ["m0", "m1", "m2", "m3"]


# --- whose session -------------------------------------------------------------------------


async def test_another_users_session_behaves_as_if_it_did_not_exist(
    memory: Memory, store: SessionStore
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await store.create("secret", user_id=alice)
    await store.append("secret", "user", "my password hint is 'blue'", user_id=alice)
    for _ in range(3):
        await store.append("secret", "assistant", "noted", user_id=alice)

    assert await store.get("secret", bob) is None
    assert await store.list(bob) == []
    assert await store.context("secret", user_id=bob) == []
    assert await store.history("secret", user_id=bob) == []
    with pytest.raises(NotFoundError):
        await store.append("secret", "user", "let me in", user_id=bob)
    with pytest.raises(NotFoundError):
        await store.compress("secret", keep_last=0, user_id=bob)
    assert await store.delete("secret", user_id=bob) is False
    with request_context(user_id=bob):
        assert await store.get("secret") is None
        assert await store.history("secret") == []

    history = await store.history("secret", user_id=alice)
    assert len(history) == 4 and all(m.is_context for m in history)


async def test_user_none_is_the_current_user_and_a_write_needs_one(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await store.create("s1")
        await store.append("s1", "user", "hi")
        assert [m.content for m in await store.history("s1")] == ["hi"]
    with pytest.raises(PermissionDeniedError):
        await store.append("s1", "user", "who am I?")
    with pytest.raises(PermissionDeniedError):
        await store.create("s2")


async def test_naming_another_user_while_acting_for_one_is_refused(
    memory: Memory, store: SessionStore
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await store.create("a1", user_id=alice)
    with request_context(user_id=bob):
        with pytest.raises(PermissionDeniedError):
            await store.history("a1", user_id=alice)
        with pytest.raises(PermissionDeniedError):
            await store.append("a1", "user", "hi", user_id=alice)


async def test_a_global_read_needs_read_all_and_then_sees_every_session(
    memory: Memory, store: SessionStore
) -> None:
    alice, bob = await new_user(memory), await new_user(memory)
    await store.create("a1", user_id=alice)
    await store.create("b1", user_id=bob)
    with pytest.raises(PermissionDeniedError):
        await store.list()
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert {s.id for s in await store.list()} == {"a1", "b1"}
        found = await store.get("a1")
        assert found is not None and found.user_id == alice


# --- delete --------------------------------------------------------------------------------


async def insert_chunk(memory: Memory, user_id: uuid.UUID, session_id: str, content: str) -> None:
    async with memory.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq, "
                "end_seq, started_at, ended_at) VALUES (:u, :s, :c, md5(:c), 1, 1, now(), now())"
            ),
            {"u": user_id, "s": session_id, "c": content},
        )


async def test_delete_takes_messages_chunks_extraction_state_and_sketches_with_it(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    await store.create("gone", user_id=uid)
    await store.create("kept", user_id=uid)
    for sid in ("gone", "kept"):
        await store.append(sid, "user", f"hello from {sid}", user_id=uid)
        await insert_chunk(memory, uid, sid, f"User: old words of {sid}")
        async with memory.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO session_memory_state (session_id, extracted_at) VALUES (:s, now())"
                ),
                {"s": sid},
            )
            await conn.execute(
                text(
                    "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
                    "VALUES (:u, 'scratchpad', :s, 'plan', 'x')"
                ),
                {"u": uid, "s": sid},
            )
    async with memory.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO kv_store (user_id, scope, key, value) "
                "VALUES (:u, 'scratchpad', 'plan', 'user-wide')"
            ),
            {"u": uid},
        )

    assert await store.delete("gone", user_id=uid) is True

    assert await store.get("gone", uid) is None
    for table in ("session_messages", "memory_chunks", "session_memory_state", "kv_store"):
        assert await scalar(memory, f"SELECT count(*) FROM {table} WHERE session_id = 'gone'") == 0
        assert await scalar(memory, f"SELECT count(*) FROM {table} WHERE session_id = 'kept'") == 1
    assert await scalar(memory, "SELECT count(*) FROM kv_store WHERE session_id IS NULL") == 1
    assert await store.delete("gone", user_id=uid) is False


async def test_delete_of_a_session_that_does_not_exist_is_false(
    memory: Memory, store: SessionStore
) -> None:
    uid = await new_user(memory)
    assert await store.delete("never-was", user_id=uid) is False


@pytest.mark.slow  # ~5 s: 40,000 messages into 300 chunks
async def test_a_session_of_forty_thousand_messages_is_compressed(memory: Memory) -> None:
    """compress sent the ids it demotes as one parameter each: past 32,767 the driver refused
    the statement, and a long session (compressed at its end, as the docs suggest) could never
    be compressed. They go as one array now."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    await execute(
        memory,
        "INSERT INTO session_messages (session_id, seq, role, content) "
        "SELECT :s, g, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, "
        "'m' || g || ' says something' FROM generate_series(1, 40000) g",
        s=sid,
    )
    result = await memory.sessions.compress(sid, keep_last=2, user_id=uid)
    assert result.demoted == 39998 and result.chunks_written > 0
    in_context = "SELECT count(*) FROM session_messages WHERE session_id = :s AND is_context"
    assert await scalar(memory, in_context, s=sid) == 2 + 1  # the kept two and the summary


async def test_a_message_row_no_message_can_be_names_itself(memory: Memory) -> None:
    """A row written by an application's own SQL with tool arguments that are not a JSON
    object broke every read of its session with pydantic's ValidationError (history, context,
    compress, the prompt). It is a StorageError naming the session and the row."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    await memory.sessions.append(sid, "user", "hello", user_id=uid)
    await execute(
        memory,
        "INSERT INTO session_messages (session_id, seq, role, tool_name, tool_args) "
        "VALUES (:s, 2, 'tool_call', 't', '[1]'::jsonb)",
        s=sid,
    )
    with pytest.raises(StorageError, match=rf"message 2 of session '{sid}' .*tool_args") as e:
        await memory.sessions.history(sid, user_id=uid)
    assert "fix or delete that row" in str(e.value)
