"""Connections killed under navi-memory (pg_terminate_backend): at random moments while writes,
merges and searches run, and exactly while the pool sets a new connection up. Every failure is a
StorageError — ConnectionLostError when nothing was committed — nothing is half-written, and the
next call works."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest
from sqlalchemy import text as sql_text
from sqlalchemy.engine import make_url

from navi_memory import Memory, StorageError, errors, open_memory
from navi_memory.testing import FakeOllama, hashed_embedding
from tests.conftest import make_settings
from tests.dbtools import EmbeddedServer
from tests.integration.factories import execute, scalar, wait_for_a_sleeping_statement
from tests.reliability.faults import BackendKiller, kill_while_connecting
from tests.reliability.world import chunk_draft

WORKERS = 6
ROUNDS = 8
SEED = 20261203


@dataclass(frozen=True, slots=True)
class Outcome:
    operation: str
    tag: str
    error: BaseException | None


async def attempt(log: list[Outcome], operation: str, tag: str, call: Awaitable[object]) -> None:
    try:
        await call
    except Exception as exc:
        log.append(Outcome(operation, tag, exc))
    else:
        log.append(Outcome(operation, tag, None))


def raw_errors(log: list[Outcome]) -> collections.Counter[str]:
    return collections.Counter(
        f"{o.operation}: {type(o.error).__module__}.{type(o.error).__name__}: {o.error}"[:160]
        for o in log
        if o.error is not None and not isinstance(o.error, StorageError)
    )


@pytest.mark.slow
async def test_backends_killed_mid_call_surface_only_as_storage_errors_and_half_write_nothing(
    fault_memory: Memory, pg_server: EmbeddedServer
) -> None:
    """Writes with merges, chunk writes and both searches under random backend kills: only
    StorageErrors, no ConnectionLostError for a write that landed, no half-merged fact, no
    partly written chunk batch, and every call succeeds once the kills stop."""
    await writes_under_kills(fault_memory, pg_server, workers=WORKERS, rounds=ROUNDS, seed=SEED)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(5))
async def test_soak_writes_under_kills(
    fault_memory: Memory, pg_server: EmbeddedServer, seed: int
) -> None:
    """The same contract with twice the writers, five times the rounds, five seeds."""
    await writes_under_kills(fault_memory, pg_server, workers=12, rounds=40, seed=seed)


async def writes_under_kills(
    memory: Memory, pg_server: EmbeddedServer, *, workers: int, rounds: int, seed: int
) -> None:
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    sid = (await memory.sessions.create(user_id=uid)).id
    log: list[Outcome] = []

    async def worker(w: int) -> None:
        for r in range(rounds):
            tag = f"w{w}r{r}"
            store = memory.store
            await attempt(
                log,
                "upsert",
                tag,
                store.upsert_fact("colours", f"favourite_colour_{tag}", f"red-{tag}", user_id=uid),
            )
            await attempt(
                log,
                "merge",
                tag,
                store.upsert_fact(
                    "colours", f"favorite_color_{tag}", f"blue-{tag}", user_id=uid, dedupe=True
                ),
            )
            chunks = [chunk_draft(f"{tag} first part"), chunk_draft(f"{tag} second part", 3)]
            await attempt(log, "chunks", tag, store.add_chunks(chunks, user_id=uid, session_id=sid))
            await attempt(log, "search_facts", tag, store.search_facts("colour", user_id=uid))
            await attempt(log, "search_chunks", tag, store.search_chunks("part", user_id=uid))

    async with BackendKiller(pg_server, memory.engine.url.database or "", seed=seed) as killer:
        await asyncio.gather(*(worker(w) for w in range(workers)))

    assert raw_errors(log) == {}
    failed = [o for o in log if o.error is not None]
    assert killer.kills > 0 and failed, "no fault was injected: the test proved nothing"

    # The next call of every kind succeeds.
    await memory.store.upsert_fact("colours", "after", "green", user_id=uid)
    await memory.store.add_chunks([chunk_draft("after the kills")], user_id=uid, session_id=sid)
    assert await memory.store.search_facts("green", user_id=uid)
    assert await memory.store.search_chunks("kills", user_id=uid)

    # A ConnectionLostError promises that nothing of the call was committed.
    for outcome in failed:
        if outcome.operation in ("upsert", "merge") and isinstance(
            outcome.error, errors.ConnectionLostError
        ):
            value = ("red-" if outcome.operation == "upsert" else "blue-") + outcome.tag
            assert (
                await scalar(memory, "SELECT count(*) FROM memory_facts WHERE value = :v", v=value)
                == 0
            )
    # Merges are whole: two spellings of one key are never both visible, and a hidden row
    # points at a visible row of the same user and category.
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM memory_facts a JOIN memory_facts b ON a.user_id = b.user_id "
            "AND a.key = 'favourite_colour_' || substr(b.key, 16) "
            "AND b.key LIKE 'favorite_color_%' "
            "WHERE a.merged_into IS NULL AND b.merged_into IS NULL",
        )
        == 0
    )
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM memory_facts h LEFT JOIN memory_facts v ON v.id = h.merged_into "
            "AND v.merged_into IS NULL AND v.user_id = h.user_id AND v.category = h.category "
            "WHERE h.merged_into IS NOT NULL AND v.id IS NULL",
        )
        == 0
    )
    # A chunk batch is all there or not at all, and each stored vector is queued or indexed.
    await memory.store.wait_chunk_indexing()
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM (SELECT split_part(content, ' ', 1) AS tag, count(*) AS n "
            "FROM memory_chunks GROUP BY 1) t WHERE n <> 2 AND tag <> 'after'",
        )
        == 0
    )
    assert (
        await scalar(
            memory,
            "SELECT count(*) FROM memory_chunks c WHERE c.embedding IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM memory_chunk_vectors v WHERE v.chunk_id = c.id) "
            "AND NOT EXISTS (SELECT 1 FROM memory_chunk_vector_queue q WHERE q.chunk_id = c.id)",
        )
        == 0
    )


async def test_a_connection_killed_while_the_pool_sets_it_up_is_connection_lost(
    memory: Memory, pg_server: EmbeddedServer
) -> None:
    """The vector-codec registration of a new pooled connection is killed: the call raises
    ConnectionLostError, writes nothing, and the next call opens a healthy connection."""
    await memory.engine.dispose()  # the next call must open a new connection
    uid = uuid.uuid4()
    with (
        kill_while_connecting(pg_server, memory.engine.url.database or "") as victims,
        pytest.raises(errors.ConnectionLostError),
    ):
        await memory.users.ensure(uid)
    assert victims and "pg_extension" in victims[0]
    assert await memory.users.get(uid) is None
    assert await memory.users.ensure(uid) is True


async def test_open_memory_whose_first_connection_is_killed_is_connection_lost(
    db_url: str, fake_ollama: FakeOllama, pg_server: EmbeddedServer
) -> None:
    """open_memory's first connection (the capability probe) killed during its set-up is a
    ConnectionLostError, not a driver error; opening again works."""
    settings = make_settings(db_url, fake_ollama)
    dbname = make_url(db_url).database or ""
    with (
        kill_while_connecting(pg_server, dbname) as victims,
        pytest.raises(errors.ConnectionLostError),
    ):
        async with open_memory(settings):
            pass
    assert victims
    async with open_memory(settings) as memory:
        assert memory.capabilities.vector


@pytest.mark.slow
async def test_compressions_under_backend_kills_raise_only_storage_errors_and_stay_whole(
    fault_memory: Memory, pg_server: EmbeddedServer
) -> None:
    """Appends and compressions of several sessions under random kills: only StorageErrors;
    every context holds one summary, first; every compression's demotion, summary and chunks
    landed together, so every demoted message is in a chunk with no repair; and the repair then
    finds nothing to do."""
    await compressions_under_kills(
        fault_memory, pg_server, workers=WORKERS, rounds=ROUNDS, seed=SEED + 1
    )


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(5))
async def test_soak_compressions_under_kills(
    fault_memory: Memory, pg_server: EmbeddedServer, seed: int
) -> None:
    """The same contract with more sessions and rounds, five seeds."""
    await compressions_under_kills(fault_memory, pg_server, workers=10, rounds=25, seed=seed)


async def compressions_under_kills(
    memory: Memory, pg_server: EmbeddedServer, *, workers: int, rounds: int, seed: int
) -> None:
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    sids = [(await memory.sessions.create(user_id=uid)).id for _ in range(workers)]
    log: list[Outcome] = []

    async def worker(sid: str) -> None:
        for r in range(rounds):
            for i in range(3):
                role = "user" if i % 2 == 0 else "assistant"
                text = f"{sid[:6]} round {r} message {i} port 80{r}{i}"
                await attempt(
                    log, "append", sid, memory.sessions.append(sid, role, text, user_id=uid)
                )
            await attempt(
                log, "compress", sid, memory.sessions.compress(sid, keep_last=2, user_id=uid)
            )

    async with BackendKiller(pg_server, memory.engine.url.database or "", seed=seed) as killer:
        await asyncio.gather(*(worker(sid) for sid in sids))

    assert raw_errors(log) == {}
    assert killer.kills > 0 and any(o.error for o in log), "no fault was injected"
    for sid in sids:
        await memory.sessions.append(sid, "user", "after the kills", user_id=uid)
        await memory.sessions.compress(sid, keep_last=1, user_id=uid)
        context = await memory.sessions.context(sid, user_id=uid)
        summaries = [m for m in context if m.kind == "summary"]
        assert len(summaries) == 1 and context[0].kind == "summary"
        history = await memory.sessions.history(sid, user_id=uid)
        demoted = [m for m in history if not m.is_context and m.kind == "message"]
        # A summary follows every demoted message: no demotion committed without its summary.
        last_summary_seq = max(m.seq for m in history if m.kind == "summary")
        assert all(m.seq < last_summary_seq for m in demoted)
    for sid in sids:
        history = await memory.sessions.history(sid, user_id=uid)
        chunks = await memory.store.search_chunks("", user_id=uid, session_id=sid, limit=1000)
        covered = {q for c in chunks for q in range(c.start_seq, c.end_seq + 1)}
        missing = [
            m.seq
            for m in history
            if not m.is_context
            and m.kind == "message"
            and m.role != "system"
            and m.seq not in covered
        ]
        assert missing == [], f"session {sid}: demoted but in no chunk: {missing}"
    assert await memory.sessions.index_dropped_history() == 0


@pytest.mark.slow
async def test_backfill_under_backend_kills_raises_only_storage_errors_and_resumes(
    db_url: str, fake_ollama: FakeOllama, pg_server: EmbeddedServer
) -> None:
    """Facts and chunks written while the embedder was down, then backfilled under random
    kills: only StorageErrors, every batch stored whole, and a rerun finishes the job with
    the right vector on every row."""
    settings = make_settings(
        db_url, fake_ollama, db_pool_size=4, db_max_overflow=2, backfill_batch_size=4
    )
    async with open_memory(settings) as memory:
        uid = uuid.uuid4()
        await memory.users.ensure(uid)
        fake_ollama.mode = "fail"
        for i in range(40):
            await memory.store.upsert_fact("notes", f"note {i}", f"value {i}", user_id=uid)
        sid = (await memory.sessions.create(user_id=uid)).id
        drafts = [chunk_draft(f"chunk {i} about port 80{i:02d}", 2 * i) for i in range(20)]
        await memory.store.add_chunks(drafts, user_id=uid, session_id=sid)
        fake_ollama.mode = "ok"

        log: list[Outcome] = []
        dbname = memory.engine.url.database or ""
        async with BackendKiller(pg_server, dbname, seed=SEED + 2, pause=0.01):
            for attempt_no in range(30):
                await attempt(log, "backfill", str(attempt_no), memory.store.backfill_embeddings(4))
                if log[-1].error is None:
                    break
        assert raw_errors(log) == {}
        assert any(o.error for o in log), "no fault was injected"

        await memory.store.backfill_embeddings(4)
        await memory.store.index_pending_chunks()
        assert (
            await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0
        )
        assert (
            await scalar(memory, "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL") == 0
        )
        for text_sql in (
            "SELECT category || ' / ' || key || ': ' || value, embedding::text FROM memory_facts",
            "SELECT content, embedding::text FROM memory_chunks",
        ):
            async with memory.engine.connect() as conn:
                rows = (await conn.execute(sql_text(text_sql))).all()
            for embedded, vector in rows:
                stored = [float(x) for x in vector.strip("[]").split(",")]
                expected = hashed_embedding(embedded, fake_ollama.dim)
                assert max(abs(a - b) for a, b in zip(stored, expected, strict=True)) < 1e-6
        assert await scalar(memory, "SELECT count(*) FROM memory_chunk_vector_queue") == 0
        assert await scalar(memory, "SELECT count(*) FROM memory_chunk_vectors") == len(drafts)


async def test_a_restart_of_postgresql_under_an_open_memory_costs_at_most_one_call(
    memory: Memory, pg_server: EmbeddedServer
) -> None:
    """The server restarts (a real fast shutdown and start of the test server) while a Memory
    holds pooled connections: the first call after it succeeds or is a ConnectionLostError,
    the next one succeeds."""
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    await memory.store.upsert_fact("p", "before", "restart", user_id=uid)
    await pg_server.restart_async()
    with contextlib.suppress(errors.ConnectionLostError):
        await memory.store.upsert_fact("p", "first", "after", user_id=uid)
    await memory.store.upsert_fact("p", "second", "after", user_id=uid)
    keys = {f.key for f in await memory.store.get_all_facts(uid)}
    assert {"before", "second"} <= keys


async def test_while_postgresql_is_down_calls_are_connection_lost_and_recover_after(
    memory: Memory, pg_server: EmbeddedServer
) -> None:
    """With the server stopped every call is a ConnectionLostError (quickly, and nothing
    raw); once it is back the same Memory works again without being reopened."""
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    await pg_server.shut_down_async()
    try:
        with pytest.raises(errors.ConnectionLostError):
            await memory.store.upsert_fact("p", "while", "down", user_id=uid)
        with pytest.raises(errors.ConnectionLostError):
            await memory.store.search_facts("down", user_id=uid)
    finally:
        await pg_server.start_up_async()
    await memory.store.upsert_fact("p", "when", "back", user_id=uid)
    assert [f.key for f in await memory.store.get_all_facts(uid)] == ["when"]


async def test_extracting_one_session_while_postgresql_is_down_is_connection_lost(
    memory: Memory, pg_server: EmbeddedServer, fake_ollama: FakeOllama
) -> None:
    """extract_session with the server stopped answered a report with failures=1, as if the
    session or the model had failed, where every other call (process_stale_sessions too)
    raises: it is a ConnectionLostError now, and the session is extracted once it is back."""
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    sid = (await memory.sessions.create(user_id=uid)).id
    await memory.sessions.append(sid, "user", "I use neovim", user_id=uid)
    await pg_server.shut_down_async()
    try:
        with pytest.raises(errors.ConnectionLostError):
            await memory.extractor.extract_session(sid, user_id=uid)
        with pytest.raises(errors.ConnectionLostError):
            await memory.extractor.process_stale_sessions(uid)
    finally:
        await pg_server.start_up_async()
    fake_ollama.chat_replies.append("[]")  # no fact in it
    report = await memory.extractor.extract_session(sid, user_id=uid)
    assert (report.failures, report.sessions_seen) == (0, 1)
    assert await memory.store.get_extracted_at(sid, uid) is not None


@pytest.mark.parametrize("queue", ["facts", "chunks"])
async def test_an_explicit_drain_is_not_held_by_a_background_indexers_retry_sleep(
    memory: Memory, pg_server: EmbeddedServer, queue: str
) -> None:
    """The server stops under a background indexer's batch: the drain fails, and its retries
    sleep 0.25, 1, 4, 15, 60 s. Meanwhile index_pending_* raises its own ConnectionLostError at
    once and wait_*_indexing returns (both waited for the sleep: a silent hang of up to 80 s);
    once the server is back index_pending_* drains at once (it waited up to 60 s)."""
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    store = memory.store
    table = "memory_fact_vectors" if queue == "facts" else "memory_chunk_terms"
    # The trigger holds the background batch in flight (pg_sleep) on this server process only;
    # on the restarted one it fails every insert, as a database not back yet would, until the
    # test drops it. A background retry that wakes in between (the next one sleeps 4 s, and a
    # loaded machine restarts slowly) then fails into its next sleep: it neither holds the
    # table for 60 s under DROP TRIGGER nor indexes the row before the explicit drain does.
    started = await scalar(memory, "SELECT pg_postmaster_start_time()::text")
    await execute(
        memory,
        "CREATE OR REPLACE FUNCTION navi_test_slow() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN IF pg_postmaster_start_time() = '{started}'::timestamptz "
        "THEN PERFORM pg_sleep(60); ELSE RAISE EXCEPTION 'navi test: not back yet'; END IF; "
        "RETURN NEW; END $$",
    )
    await execute(
        memory,
        f"CREATE TRIGGER slow BEFORE INSERT ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION navi_test_slow()",
    )
    if queue == "facts":
        await store.upsert_fact("p", "outage", "queued", user_id=uid)
        drain, wait = store.index_pending_facts, store.wait_fact_indexing
    else:
        await store.add_chunks([chunk_draft("queued in an outage")], user_id=uid, session_id="s1")
        drain, wait = store.index_pending_chunks, store.wait_chunk_indexing
    await wait_for_a_sleeping_statement(memory)  # the background batch is in flight
    await pg_server.shut_down_async()
    try:
        await asyncio.sleep(1.5)  # the batch died; its first retries failed; it sleeps
        with pytest.raises(errors.ConnectionLostError):
            await asyncio.wait_for(drain(), 5)
        await asyncio.wait_for(wait(), 5)
    finally:
        await pg_server.start_up_async()

    def drop_trigger() -> None:
        with pg_server.admin(memory.engine.url.database or "") as conn:
            conn.execute(f"DROP TRIGGER slow ON {table}")

    await asyncio.to_thread(drop_trigger)
    assert await asyncio.wait_for(drain(), 5) == 1
    await asyncio.wait_for(wait(), 5)


@pytest.mark.parametrize(
    "call", ["sessions.list", "store.get_all_facts", "extractor.process_stale_sessions"]
)
async def test_a_read_whose_connection_dies_at_its_commit_is_connection_lost(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """The connection dies as a read's COMMIT is sent (asyncpg's commit closes it and raises
    what a closed connection raises, under SQLAlchemy's own wrapping and navi-memory's
    translation): a ConnectionLostError, since a read is always safe to repeat — not "the
    call may or may not have taken effect". A write there still says the outcome is unknown."""
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    await memory.sessions.create(user_id=uid)
    reads: dict[str, Callable[[], Awaitable[object]]] = {
        "sessions.list": lambda: memory.sessions.list(user_id=uid),
        "store.get_all_facts": lambda: memory.store.get_all_facts(uid),
        "extractor.process_stale_sessions": lambda: memory.extractor.process_stale_sessions(
            user_id=uid
        ),
    }
    commits = 0

    async def commit_on_a_dying_connection(self: asyncpg.transaction.Transaction) -> None:
        nonlocal commits
        commits += 1
        self._connection.terminate()
        raise asyncpg.exceptions.ConnectionDoesNotExistError(
            "connection was closed in the middle of operation"
        )

    with monkeypatch.context() as patch:
        patch.setattr(asyncpg.transaction.Transaction, "commit", commit_on_a_dying_connection)
        with pytest.raises(errors.ConnectionLostError, match="only read"):
            await reads[call]()
        assert commits >= 1  # the COMMIT was reached (a background sweep may commit too)
        with pytest.raises(StorageError, match="may or may not have taken effect") as written:
            await memory.store.set_summary("a write", user_id=uid)
        assert not isinstance(written.value, errors.ConnectionLostError)
        assert commits >= 2
    await reads[call]()  # the next call works
