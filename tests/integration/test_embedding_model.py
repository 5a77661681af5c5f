"""The embedding model of record: recorded by the first vector write, a change reported (log
and doctor) and making no vector until reembed makes every vector again with the configured
model (tests/integration/test_model_mismatch.py: the mismatch in detail)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from navi_memory import (
    PERMISSION_READ_ALL,
    ConfigError,
    EmbeddingError,
    Memory,
    PermissionDeniedError,
    Settings,
    StorageError,
    open_memory,
    request_context,
)
from navi_memory.cli.doctor import diagnose
from navi_memory.cli.maintenance import reembed_left
from navi_memory.jobs import embedding_model
from navi_memory.jobs.backfill import BackfillProgress
from navi_memory.jobs.embedding_model import EmbeddingModelRecord
from navi_memory.repositories.embedding_model import EmbeddingModelRepository, RecordedModel
from navi_memory.testing import FakeOllama, HashedEmbedder
from tests.conftest import make_settings
from tests.integration.factories import execute, new_user, scalar
from tests.integration.test_chunks import draft

OTHER_MODEL = "mxbai-embed-other:768"
RECORDED = "SELECT model FROM memory_embedding_model"
LEFTOVER = "UPDATE memory_embedding_model SET recorded_at = now() - interval '2 hours'"
"""The model of record made a leftover: recorded longer ago than a reembed's first batch."""


def _other(settings: Settings, fake: FakeOllama) -> Settings:
    """The same database, EMBEDDING_MODEL another 768-dimensional model."""
    assert settings.database_url is not None
    return make_settings(settings.database_url, fake, embedding_model=OTHER_MODEL)


async def _stored_memory(memory: Memory) -> None:
    """Three facts and two chunks of one user, with vectors."""
    uid = await new_user(memory)
    for key, value in (("editor", "neovim"), ("shell", "fish"), ("vpn", "WireGuard 51820")):
        await memory.store.upsert_fact("tools", key, value, user_id=uid)
    chunks = [draft("User: the server port is 8443"), draft("User: deploy on fridays", seq=3)]
    await memory.store.add_chunks(chunks, user_id=uid, session_id="s1")


async def test_the_model_is_recorded_by_the_first_vector_write(memory: Memory) -> None:
    assert await scalar(memory, RECORDED) is None  # empty after the upgrade and at open
    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    assert await scalar(memory, RECORDED) == memory.settings.embedding_model


async def test_backfill_records_the_model_of_the_vectors_it_makes(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    assert await scalar(memory, RECORDED) is None  # no vector was made
    fake_ollama.mode = "ok"
    assert await memory.store.backfill_embeddings() == 1
    assert await scalar(memory, RECORDED) == memory.settings.embedding_model


async def test_another_model_with_vectors_stored_is_logged_once_and_a_doctor_finding(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    await _stored_memory(memory)
    other = _other(settings, fake_ollama)
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(other) as changed:
            uid = await new_user(changed)
            # Not refused: writes and searches go on, without vectors (text search only).
            fact = await changed.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
            assert not fact.has_embedding
            hits = await changed.store.search_facts("firefox", user_id=uid)
            assert [h.via for h in hits] == ["text"]
    events = [r for r in caplog.records if "memory.embedding_model_changed" in r.getMessage()]
    assert len(events) == 1
    assert settings.embedding_model in events[0].getMessage()
    assert OTHER_MODEL in events[0].getMessage()
    assert await scalar(memory, RECORDED) == settings.embedding_model  # not overwritten

    checks = {c.name: c for c in await diagnose(other, check_models=False)}
    assert checks["stored vectors"].status == "finding"
    assert checks["stored vectors"].fix == "navi-memory reembed"
    same = {c.name: c for c in await diagnose(settings, check_models=False)}
    assert same["stored vectors"].status == "ok"


async def test_another_model_without_vectors_stored_is_no_change(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    """A leftover record (every vector gone, recorded long ago) is not a model change."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    await execute(memory, "UPDATE memory_facts SET embedding = NULL")
    await execute(memory, LEFTOVER)
    other = _other(settings, fake_ollama)
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(other):
            pass
    assert "memory.embedding_model_changed" not in caplog.text


async def test_reembed_embeds_every_fact_and_chunk_with_the_configured_model(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    await _stored_memory(memory)
    await memory.store.index_pending_chunks()
    await memory.store.index_pending_facts()
    other = _other(settings, fake_ollama)
    async with open_memory(other) as changed:
        fake_ollama.clear()
        seen: list[BackfillProgress] = []
        with request_context(permissions=[PERMISSION_READ_ALL]):
            assert await changed.admin.reembed(batch_size=2, progress=seen.append) == 5
        assert {(p.table, p.done, p.total) for p in seen if p.done == p.total} == {
            ("memory_facts", 3, 3),
            ("memory_chunks", 2, 2),
        }
        embedded = fake_ollama.requests_to("/api/embed")
        assert embedded and {r.json["model"] for r in embedded} == {OTHER_MODEL}
        assert await scalar(changed, RECORDED) == OTHER_MODEL
        for table in ("memory_facts", "memory_chunks"):
            missing = f"SELECT count(*) FROM {table} WHERE embedding IS NULL"
            assert await scalar(changed, missing) == 0
        await changed.store.index_pending_chunks()
        await changed.store.index_pending_facts()
        assert await scalar(changed, "SELECT count(*) FROM memory_chunk_vectors") == 2
        assert await scalar(changed, "SELECT count(*) FROM memory_fact_vectors") == 3
        assert await changed.store.pending_chunk_count() == 0
        assert await changed.store.pending_fact_count() == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(other):
            pass
    assert "memory.embedding_model_changed" not in caplog.text
    checks = {c.name: c for c in await diagnose(other, check_models=False)}
    assert checks["stored vectors"].status == "ok"


async def test_a_fact_hidden_during_a_reembed_comes_back_with_the_new_models_vector(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """A reembed clears every vector, hidden rows' too; its backfill skipped hidden rows, so an
    unmerge afterwards brought back a fact only a text search could find."""
    uid = await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    async with open_memory(_other(settings, fake_ollama)) as changed:
        with request_context(permissions=[PERMISSION_READ_ALL]):
            assert await changed.admin.reembed() == 2
        with request_context(user_id=uid):
            back = await changed.store.unmerge_fact(old.id)
            assert back.has_embedding
            hits = await changed.store.search_facts("English")
        assert [(h.key, h.value) for h in hits][:1] == [("language", "English")]


async def test_reembed_with_the_model_down_clears_nothing(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """reembed cleared every vector and then met the model down: vector search was gone for
    every user until the model came back. The model is asked first; down, nothing is cleared
    and the model of record stays."""
    await _stored_memory(memory)
    fake_ollama.mode = "fail"
    with request_context(permissions=[PERMISSION_READ_ALL]), pytest.raises(EmbeddingError):
        await memory.admin.reembed()
    for table in ("memory_facts", "memory_chunks"):
        assert await scalar(memory, f"SELECT count(*) FROM {table} WHERE embedding IS NULL") == 0
    assert await scalar(memory, RECORDED) == memory.settings.embedding_model
    fake_ollama.mode = "ok"
    uid = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    hits = await memory.store.search_facts("WireGuard 51820", user_id=uid)  # type: ignore[arg-type]
    assert hits[0].via == "vector"


class _FailingAfter(HashedEmbedder):
    """Answers its first ``calls_ok`` calls, then fails: a model that goes down mid-way."""

    def __init__(self, calls_ok: int) -> None:
        super().__init__()
        self.calls_ok = calls_ok

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.failing = self.calls >= self.calls_ok
        return await super().embed_documents(texts)


async def test_rows_are_found_by_text_while_their_vectors_are_cleared(
    memory: Memory, settings: Settings
) -> None:
    await _stored_memory(memory)
    # The model answers reembed's first question, then goes down: the rows stay findable.
    async with open_memory(settings, embedder=_FailingAfter(calls_ok=1)) as failing:
        with request_context(permissions=[PERMISSION_READ_ALL]), pytest.raises(EmbeddingError):
            await failing.admin.reembed()
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 3
    uid = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    hits = await memory.store.search_facts("WireGuard", user_id=uid)  # type: ignore[arg-type]
    assert [h.via for h in hits] == ["text"]


async def test_reembed_in_text_only_mode_is_refused_and_clears_nothing(
    memory: Memory, settings: Settings
) -> None:
    await _stored_memory(memory)
    async with open_memory(settings, embedder=False) as text_only:
        with (
            request_context(permissions=[PERMISSION_READ_ALL]),
            pytest.raises(ConfigError, match="text-only mode"),
        ):
            await text_only.admin.reembed()
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0


async def test_reembed_needs_read_all_and_acting_for_nobody(memory: Memory) -> None:
    uid = await new_user(memory)
    with pytest.raises(PermissionDeniedError, match="read_all"):
        await memory.admin.reembed()
    with (
        request_context(user_id=uid, permissions=[PERMISSION_READ_ALL]),
        pytest.raises(PermissionDeniedError, match="acting for nobody"),
    ):
        await memory.admin.reembed()


async def test_the_first_vectors_stored_after_every_vector_went_record_their_model(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    """With no vector left (the users who had them deleted), another model's first vectors kept
    the old model of record: every later start logged memory.embedding_model_changed and doctor
    asked for a reembed, for vectors all made by the configured model."""
    await _stored_memory(memory)
    gone = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    assert await memory.users.delete(gone)  # type: ignore[arg-type]
    await execute(memory, LEFTOVER)
    other = _other(settings, fake_ollama)
    async with open_memory(other) as changed:
        uid = await new_user(changed)
        await changed.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
    assert await scalar(memory, RECORDED) == OTHER_MODEL
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(other):
            pass
    assert "memory.embedding_model_changed" not in caplog.text
    checks = {c.name: c for c in await diagnose(other, check_models=False)}
    assert checks["stored vectors"].status == "ok"


async def test_a_backfill_never_mixes_its_models_vectors_with_another_models(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """A backfill configured with another model than the stored vectors' filled the rows
    without a vector with its own: two models' vectors, silently, until a reembed. It is
    refused (ConfigError naming both models and the fix) and stores nothing."""
    await _stored_memory(memory)
    uid = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    fake_ollama.mode = "fail"
    await memory.store.upsert_fact("tools", "browser", "firefox", user_id=uid)  # type: ignore[arg-type]
    fake_ollama.mode = "ok"
    missing = "SELECT count(*) FROM memory_facts WHERE embedding IS NULL"
    async with open_memory(_other(settings, fake_ollama)) as changed:
        with pytest.raises(ConfigError, match=rf"{OTHER_MODEL}.*reembed"):
            await changed.store.backfill_embeddings()
    assert await scalar(memory, missing) == 1


async def test_a_backfill_of_a_changed_model_is_refused_before_the_model_is_asked(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """The model changed and is down: the backfill says the model changed (ConfigError naming
    both models and the fix: `navi-memory backfill` exits 2), not that the model cannot be
    reached, and asks it nothing."""
    await _stored_memory(memory)
    uid = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    fake_ollama.mode = "fail"
    await memory.store.upsert_fact("tools", "browser", "firefox", user_id=uid)  # type: ignore[arg-type]
    async with open_memory(_other(settings, fake_ollama)) as changed:
        asked = len(fake_ollama.requests_to("/api/embed"))
        with pytest.raises(ConfigError, match=rf"{OTHER_MODEL}.*reembed"):
            await changed.store.backfill_embeddings()
        assert len(fake_ollama.requests_to("/api/embed")) == asked


async def test_a_backfill_stops_when_a_reembed_changes_the_model_meanwhile(
    memory: Memory,
) -> None:
    """A long backfill of the old model went on after a reembed (another process, the new
    model) had cleared the vectors and recorded its model: every batch after it stored the old
    model's vectors, which that reembed's own backfill then skipped (they were no longer
    NULL). The next batch finds the model changed and stops."""
    uid = await new_user(memory)
    for i in range(4):
        await memory.store.upsert_fact("notes", f"n{i}", f"note {i}", user_id=uid)
    await execute(memory, "UPDATE memory_facts SET embedding = NULL")

    async def reembed_meanwhile(progress: BackfillProgress) -> None:
        if progress.done == 2:  # the clearing transaction of a reembed with OTHER_MODEL
            await execute(memory, "UPDATE memory_embedding_model SET model = :m", m=OTHER_MODEL)
            await execute(memory, "UPDATE memory_facts SET embedding = NULL")

    with pytest.raises(ConfigError, match="reembed"):
        await memory.store.backfill_embeddings(batch_size=2, progress=reembed_meanwhile)
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 4


async def test_a_process_started_during_a_reembed_never_takes_its_record_over(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """Between a reembed's clearing (its model recorded, no vector left) and its first batch,
    a process of the old model starts (a rolling restart, a cron job): the fresh record is not
    a leftover. It makes no vector, the record stays the reembed's, and the reembed's backfill
    goes on."""
    await _stored_memory(memory)
    await EmbeddingModelRecord(memory.sessionmaker, model=OTHER_MODEL).replace_vectors()
    async with open_memory(settings) as old:
        uid = await new_user(old)
        fake_ollama.clear()
        fact = await old.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
        assert not fact.has_embedding
        assert fake_ollama.requests_to("/api/embed") == []
    assert await scalar(memory, RECORDED) == OTHER_MODEL
    async with open_memory(_other(settings, fake_ollama)) as new:
        assert await new.store.backfill_embeddings() > 0
    assert await scalar(memory, RECORDED) == OTHER_MODEL


async def test_two_processes_first_vectors_never_both_count_as_the_record(
    memory: Memory, settings: Settings
) -> None:
    """A records its model just before storing its first vectors; B, of another model, looks
    then (no vector stored yet): A's fresh record is not B's to take, so only A's vectors are
    stored, and a leftover taken over by two at once is taken by one."""
    a = EmbeddingModelRecord(memory.sessionmaker, model=settings.embedding_model)
    b = EmbeddingModelRecord(memory.sessionmaker, model=OTHER_MODEL)
    assert await a.vectors_made()  # recorded; A's vectors are stored in a moment
    await b.recheck()  # B's first look: A's record, no vector stored yet
    assert not await b.vectors_made()
    assert b.mismatch is not None
    assert await scalar(memory, RECORDED) == settings.embedding_model


async def test_of_two_processes_taking_a_leftover_over_at_once_one_does(
    memory: Memory, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both found the same hour-old leftover; the other one's take-over commits between this
    one's read of the record and its own: this one's (conditional) replace finds the record
    changed, stores nothing, and is in a mismatch at once (no model call for vectors it would
    drop)."""
    leftover = EmbeddingModelRecord(memory.sessionmaker, model=settings.embedding_model)
    assert await leftover.vectors_made()
    await execute(memory, LEFTOVER)
    loser = EmbeddingModelRecord(memory.sessionmaker, model="third-model:1")
    await loser.recheck()
    assert loser.mismatch is None  # a leftover it may take

    original = EmbeddingModelRepository.replace_if

    async def the_other_first(
        self: EmbeddingModelRepository, expected: RecordedModel, model: str
    ) -> bool:
        await execute(
            memory,
            "UPDATE memory_embedding_model SET model = :m, recorded_at = now()",
            m=OTHER_MODEL,
        )
        return await original(self, expected, model)

    monkeypatch.setattr(EmbeddingModelRepository, "replace_if", the_other_first)
    assert not await loser.vectors_made()
    assert loser.mismatch == OTHER_MODEL
    assert await scalar(memory, RECORDED) == OTHER_MODEL


async def test_a_record_young_at_the_first_look_is_never_a_leftover_later(
    memory: Memory, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reembed stalls (its model down) past the leftover age: the process that started
    during it still does not take its record over."""
    young = EmbeddingModelRecord(memory.sessionmaker, model=OTHER_MODEL)
    assert await young.vectors_made()  # recorded; no vector stored yet
    later = EmbeddingModelRecord(memory.sessionmaker, model=settings.embedding_model)
    assert await later.recheck() == OTHER_MODEL  # the first look: a moment old, of 3600 s
    # The record grows past the leftover age without a wall-clock wait (a sleep past a short
    # age let a loaded machine make the record old at the first look already): from now on
    # every record is old enough, this unchanged one too.
    monkeypatch.setattr(embedding_model, "EMBEDDING_MODEL_CLAIM_AFTER_SECONDS", 0.0)
    assert await later.recheck() == OTHER_MODEL
    assert not await later.vectors_made()
    assert await scalar(memory, RECORDED) == OTHER_MODEL


@pytest.mark.parametrize(
    ("raised", "runs"),
    [
        (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), 2),
        (asyncpg.exceptions.LockNotAvailableError("could not obtain lock"), 1),
    ],
    ids=["deadlock", "another error"],
)
async def test_replacing_the_vectors_runs_again_when_the_server_picks_it_as_a_deadlocks_victim(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, raised: Exception, runs: int
) -> None:
    """A running application's indexer batch takes the vector tables in another order than
    the reembed's TRUNCATE: the server may end the reembed's transaction as a deadlock's victim
    (seen in the suite, where the fixture's background indexers ran beside it). That one runs
    again, whole; any other database error is raised as it was."""
    await _stored_memory(memory)
    await memory.store.wait_fact_indexing()
    await memory.store.wait_chunk_indexing()
    clear = EmbeddingModelRepository.clear_vectors
    calls = 0

    async def victim_once(self: EmbeddingModelRepository) -> None:
        nonlocal calls
        calls += 1
        await clear(self)
        if calls == 1:
            raise raised  # as the server ends the transaction, after the clearing began

    monkeypatch.setattr(EmbeddingModelRepository, "clear_vectors", victim_once)
    record = EmbeddingModelRecord(memory.sessionmaker, model=OTHER_MODEL)
    if runs == 1:
        with pytest.raises(StorageError, match="could not obtain lock"):
            await record.replace_vectors()
        assert await scalar(memory, RECORDED) == memory.settings.embedding_model
        assert (
            await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0
        )
    else:
        await record.replace_vectors()
        assert await scalar(memory, RECORDED) == OTHER_MODEL
        assert await scalar(memory, "SELECT count(*) FROM memory_fact_vectors") == 0
    assert calls == runs


class _ModelB(HashedEmbedder):
    """Another model (recorded as "model-b"): one vector for every text, so its vectors are
    told from the first model's; fails after ``calls_ok`` calls."""

    model = "model-b"

    def __init__(self, calls_ok: int = 10**9) -> None:
        super().__init__()
        self.calls_ok = calls_ok

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.failing = self.calls >= self.calls_ok
        self._count(len(texts))
        vector = await super().embed_query("the one vector of model b")
        return [vector for _ in texts]


async def test_a_backfill_batch_past_its_check_never_leaves_old_vectors_after_a_reembed(
    memory: Memory,
    settings: Settings,
    fake_ollama: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backfill batch checked the model of record, then stored its vectors: a reembed could
    clear, record its model and commit between the two (the check took no lock), and the batch
    then stored the old model's vectors, which the reembed's backfill and every later one skip
    (not NULL). The batch now holds the record until it commits: the reembed waits for it and
    clears its vectors too, so finishing with backfill leaves the new model's vectors only."""
    uid = await new_user(memory)
    for i in range(3):
        await memory.store.upsert_fact("tools", f"a{i}", f"value a{i}", user_id=uid)
    fake_ollama.mode = "fail"
    for i in range(3):
        await memory.store.upsert_fact("tools", f"n{i}", f"value n{i}", user_id=uid)
    fake_ollama.mode = "ok"
    original = EmbeddingModelRecord.check_recorded
    paused, release = asyncio.Event(), asyncio.Event()

    async def check_recorded(self: EmbeddingModelRecord, session: Any) -> None:
        await original(self, session)
        if self.model != "model-b" and not paused.is_set():  # widen the check-to-store window
            paused.set()
            await release.wait()

    monkeypatch.setattr(EmbeddingModelRecord, "check_recorded", check_recorded)
    old = asyncio.create_task(memory.store.backfill_embeddings())
    await asyncio.wait_for(paused.wait(), 10)
    async with open_memory(settings, embedder=_ModelB(calls_ok=1)) as new:

        async def reembed() -> None:
            with request_context(permissions=[PERMISSION_READ_ALL]):
                await new.admin.reembed()

        reembedding = asyncio.create_task(reembed())
        await asyncio.sleep(1.0)
        assert not reembedding.done()  # waiting for the batch that checked the record
        release.set()
        await asyncio.wait_for(old, 30)
        with pytest.raises(EmbeddingError):  # the model goes down after clearing
            await asyncio.wait_for(reembedding, 30)
    assert await scalar(memory, "SELECT model FROM memory_embedding_model") == "model-b"
    async with open_memory(settings, embedder=_ModelB()) as new:
        with request_context(permissions=[PERMISSION_READ_ALL]):
            await new.store.backfill_embeddings()
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0
    assert await scalar(memory, "SELECT count(DISTINCT embedding::text) FROM memory_facts") == 1


async def test_doctor_reports_a_young_record_of_another_model_with_no_vector_stored(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """A model of record recorded lately (a reembed that cleared every vector, then failed)
    and another model configured: that process makes no vector (the record is not a leftover
    to take over), yet doctor said "ok, none made by another model". It reports the state
    and the fix now; once the record is old enough to be a leftover, it is ok again."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    await execute(memory, "UPDATE memory_facts SET embedding = NULL")
    other = _other(settings, fake_ollama)
    async with open_memory(other) as changed:
        fact = await changed.store.upsert_fact("tools", "shell", "fish", user_id=uid)
    assert not fact.has_embedding  # the young record stops the other model's vectors
    check = {c.name: c for c in await diagnose(other, check_models=False)}["stored vectors"]
    assert check.status == "finding" and check.fix == "navi-memory reembed"
    assert "none stored" in check.detail and "recorded lately" in check.detail
    with pytest.raises(ConfigError, match="would store") as refused:
        async with open_memory(other) as changed:
            await changed.store.backfill_embeddings()
    assert "mix" not in str(refused.value)
    await execute(memory, LEFTOVER)
    aged = {c.name: c for c in await diagnose(other, check_models=False)}["stored vectors"]
    assert aged.status == "ok"


def test_an_interrupted_reembed_says_whether_it_cleared_the_vectors(
    settings: Settings, fake_ollama: FakeOllama
) -> None:
    """Ctrl-C during the first model call (a newly pulled model loading) said the vectors were
    cleared and to run backfill, which is then refused as a model mismatch (or, the model
    unchanged, finds nothing to do): nothing had been cleared. The clear records the model:
    a record younger than the run says it committed, with another model or the same."""

    async def stored() -> None:
        async with open_memory(settings) as memory:
            await _stored_memory(memory)

    asyncio.run(stored())
    execute_now(
        settings, "UPDATE memory_embedding_model SET recorded_at = now() - interval '1 hour'"
    )
    other = _other(settings, fake_ollama)
    for configured in (other, settings):  # a new model, and the same one again
        assert reembed_left(configured, ran_seconds=30.0) == (
            "nothing was cleared (the model had not answered yet): run navi-memory reembed again"
        )

    async def reembedded(configured: Settings) -> None:
        async with open_memory(configured) as changed:
            with request_context(permissions=[PERMISSION_READ_ALL]):
                await changed.admin.reembed()

    for configured in (other, settings):
        asyncio.run(reembedded(configured))
        assert "the vectors were cleared" in reembed_left(configured, ran_seconds=30.0)
        assert "navi-memory backfill to finish" in reembed_left(configured, ran_seconds=30.0)
    unreachable = other.model_copy(
        update={"database_url": "postgresql+asyncpg://nobody@127.0.0.1:9/none"}
    )
    assert "could not read whether the vectors were cleared" in reembed_left(unreachable, 30.0)


def execute_now(settings: Settings, sql: str) -> None:
    """One statement on the settings' database, outside any test loop."""

    async def run_it() -> None:
        async with open_memory(settings) as memory:
            await execute(memory, sql)

    asyncio.run(run_it())
