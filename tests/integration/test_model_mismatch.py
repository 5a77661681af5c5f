"""A model mismatch: another model's vectors stored, this process makes none (writes land
without a vector, searches are text searches) until a reembed; the record read again every
EMBEDDING_MODEL_RECHECK_SECONDS, never taken over by a stale process; and one Ollama model
under two spellings (``x`` and ``x:latest``) is no change."""

from __future__ import annotations

import logging

import pytest

from navi_memory import (
    PERMISSION_READ_ALL,
    ConfigError,
    Memory,
    Settings,
    open_memory,
    request_context,
)
from navi_memory.cli.doctor import diagnose
from navi_memory.jobs.embedding_model import EmbeddingModelRecord
from navi_memory.llm.embedder import canonical_model_name
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import execute, new_user, scalar, statements_on
from tests.integration.test_chunks import draft

OTHER_MODEL = "mxbai-embed-other:768"
RECORDED = "SELECT model FROM memory_embedding_model"
FACTS_WITHOUT_VECTOR = "SELECT count(*) FROM memory_facts WHERE embedding IS NULL"
CHUNKS_WITHOUT_VECTOR = "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL"
CHANGED = "memory.embedding_model_changed"


def _other(settings: Settings, fake: FakeOllama, model: str = OTHER_MODEL) -> Settings:
    """The same database, EMBEDDING_MODEL another 768-dimensional model."""
    assert settings.database_url is not None
    return make_settings(settings.database_url, fake, embedding_model=model)


def _embeds_with(fake: FakeOllama, model: str) -> int:
    return sum(1 for r in fake.requests_to("/api/embed") if r.json["model"] == model)


def _changed_events(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == CHANGED]


async def _stored(memory: Memory) -> None:
    """Two facts and a chunk of one user, with the configured model's vectors."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    await memory.store.upsert_fact("work", "vpn", "WireGuard 51820", user_id=uid)
    await memory.store.add_chunks([draft("User: the port is 8443")], user_id=uid, session_id="s1")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- D1: no vector is made in a mismatch --------------------------------------------------------


async def test_writes_in_a_model_mismatch_store_no_vector_and_ask_no_model(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    """Facts and chunks written with another model configured than the stored vectors' were
    stored with the new model's vectors among the old ones. They land without one (a reembed
    fills them), the model is not asked, and the mismatch is logged once, not per call."""
    await _stored(memory)
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        async with open_memory(_other(settings, fake_ollama)) as changed:
            fake_ollama.clear()
            uid = await new_user(changed)
            for key in ("browser", "shell", "pager"):
                fact = await changed.store.upsert_fact("tools", key, "x", user_id=uid)
                assert not fact.has_embedding
            await changed.store.add_chunks(
                [draft("User: deploy on fridays", seq=3)], user_id=uid, session_id="s2"
            )
            assert fake_ollama.requests_to("/api/embed") == []
    assert await scalar(memory, FACTS_WITHOUT_VECTOR) == 3
    assert await scalar(memory, CHUNKS_WITHOUT_VECTOR) == 1
    assert await scalar(memory, RECORDED) == settings.embedding_model
    events = _changed_events(caplog)
    assert len(events) == 1
    assert OTHER_MODEL in events[0].getMessage()
    assert "navi-memory reembed" in events[0].getMessage()


async def test_rows_written_in_a_mismatch_are_filled_once_the_model_is_set_back(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """The refusal's "or set EMBEDDING_MODEL back" was a trap: rows written meanwhile kept the
    other model's vector, which backfill skips (not NULL). Now they have none, and a backfill
    with the recorded model fills them with its vectors."""
    await _stored(memory)
    async with open_memory(_other(settings, fake_ollama)) as changed:
        uid = await new_user(changed)
        await changed.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
        with pytest.raises(ConfigError, match="set EMBEDDING_MODEL back to"):
            await changed.store.backfill_embeddings()
    fake_ollama.clear()
    async with open_memory(settings) as back:
        assert await back.store.backfill_embeddings() == 1
    assert await scalar(memory, FACTS_WITHOUT_VECTOR) == 0
    assert _embeds_with(fake_ollama, OTHER_MODEL) == 0
    assert _embeds_with(fake_ollama, settings.embedding_model) >= 1


async def test_a_reembed_in_the_process_ends_its_mismatch(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    await _stored(memory)
    uid = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        async with open_memory(_other(settings, fake_ollama)) as changed:
            with request_context(permissions=[PERMISSION_READ_ALL]):
                await changed.admin.reembed()
            fact = await changed.store.upsert_fact("tools", "browser", "firefox", user_id=uid)  # type: ignore[arg-type]
            assert fact.has_embedding
            hits = await changed.store.search_facts("WireGuard 51820", user_id=uid)  # type: ignore[arg-type]
            assert hits[0].via == "vector"
    assert await scalar(memory, FACTS_WITHOUT_VECTOR) == 0
    assert await scalar(memory, RECORDED) == OTHER_MODEL
    matched = "memory.embedding_model_matched"
    assert len([r for r in caplog.records if getattr(r, "event", None) == matched]) == 1


# --- D2: search in a mismatch ------------------------------------------------------------------


async def test_search_in_a_model_mismatch_is_a_text_search(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """The new model's query vector was ranked against the old model's vectors: arbitrary
    distances, some under max_distance. No query vector is made: text search only."""
    await _stored(memory)
    uid = await scalar(memory, "SELECT user_id FROM memory_facts LIMIT 1")
    async with open_memory(_other(settings, fake_ollama)) as changed:
        fake_ollama.clear()
        facts = await changed.store.search_facts("WireGuard 51820", user_id=uid)  # type: ignore[arg-type]
        chunks = await changed.store.search_chunks("port 8443", user_id=uid)  # type: ignore[arg-type]
        found = await changed.search.search("WireGuard", user_id=uid)  # type: ignore[arg-type]
        assert fake_ollama.requests_to("/api/embed") == []
    assert [h.via for h in facts] == ["text"]
    assert chunks and {h.via for h in chunks} <= {"text", "recent"}
    assert found and "vector" not in {h.via for h in found}


# --- D3: the record read again -----------------------------------------------------------------


async def test_a_process_started_before_a_reembed_stops_making_vectors_at_its_recheck(
    db_url: str, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process started before a reembed elsewhere (another model) kept storing its old
    model's vectors, which the reembed's backfill then skipped: the record was read once per
    process. It is read again (here at every call: EMBEDDING_MODEL_RECHECK_SECONDS 0), and the
    old process then makes no vector and no query vector."""
    monkeypatch.setattr("navi_memory.memory.EMBEDDING_MODEL_RECHECK_SECONDS", 0.0)
    settings = make_settings(db_url, fake_ollama)
    async with open_memory(settings) as old:
        await _stored(old)
        uid = await new_user(old)
        async with open_memory(_other(settings, fake_ollama)) as new:
            with request_context(permissions=[PERMISSION_READ_ALL]):
                await new.admin.reembed()
        fake_ollama.clear()
        fact = await old.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
        assert not fact.has_embedding
        hits = await old.store.search_facts("firefox", user_id=uid)
        assert [h.via for h in hits] == ["text"]
        assert _embeds_with(fake_ollama, settings.embedding_model) == 0
        assert await scalar(old, RECORDED) == OTHER_MODEL
    async with open_memory(_other(settings, fake_ollama)) as new:
        assert await new.store.backfill_embeddings() == 1  # the row the old process wrote


async def test_a_stale_process_never_records_its_model_over_a_reembeds(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """Opened on an empty database, a process's first vector recorded its model over the one
    a reembed had just recorded (no vector stored yet: "they all went"), and the reembed's
    backfill then stopped. Within the recheck window it still makes its vector, but the record
    stays the reembed's and the vector is not stored."""
    async with open_memory(_other(settings, fake_ollama)) as new:
        with request_context(permissions=[PERMISSION_READ_ALL]):
            await new.admin.reembed()
    uid = await new_user(memory)
    fact = await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    assert not fact.has_embedding
    assert await scalar(memory, RECORDED) == OTHER_MODEL
    async with open_memory(_other(settings, fake_ollama)) as new:
        assert await new.store.backfill_embeddings() == 1


async def test_a_stale_process_never_takes_over_a_model_recorded_again_by_a_reembed(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """The leftover a process found at start (another model, no vector stored) is the one it
    may replace; recorded again by a reembed (the same name, a new recorded_at), it is not."""
    other = _other(settings, fake_ollama)
    async with open_memory(other) as new:
        uid = await new_user(new)
        await new.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    await execute(memory, "UPDATE memory_facts SET embedding = NULL")
    async with open_memory(settings) as stale:  # first look: OTHER_MODEL, no vector stored
        async with open_memory(other) as new:
            with request_context(permissions=[PERMISSION_READ_ALL]):
                await new.admin.reembed()
            await execute(new, "UPDATE memory_facts SET embedding = NULL")  # still under way
        fact = await stale.store.upsert_fact("tools", "shell", "fish", user_id=uid)
        assert not fact.has_embedding
    assert await scalar(memory, RECORDED) == OTHER_MODEL


async def test_the_record_is_read_again_at_most_every_recheck_seconds(
    memory: Memory, settings: Settings
) -> None:
    """The hot path: between two rechecks a call reads nothing; after the interval one call
    reads the record (one small query) and sees the reembed another process did."""
    clock = Clock()
    model = settings.embedding_model
    old = EmbeddingModelRecord(memory.sessionmaker, model=model, recheck_seconds=10, clock=clock)
    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)  # records model
    assert await old.recheck() is None
    assert await old.may_embed() and await old.vectors_made()
    new = EmbeddingModelRecord(memory.sessionmaker, model=OTHER_MODEL, clock=clock)
    await new.replace_vectors()
    await execute(memory, "UPDATE memory_facts SET embedding = :v", v=str([0.5] * 768))

    def on_record(statement: str) -> bool:
        return "memory_embedding_model" in statement

    async with statements_on(memory.engine) as seen:
        clock.now += 9.9
        for _ in range(50):
            assert await old.may_embed()  # the window docs/operations.md describes
            assert await old.vectors_made()
        assert [s for s in seen if on_record(s)] == []
        clock.now += 0.1
        assert not await old.may_embed()
        assert not await old.vectors_made()
        assert not await old.may_embed()
    assert len([s for s in seen if on_record(s)]) == 1
    assert old.mismatch == OTHER_MODEL
    assert await scalar(memory, RECORDED) == OTHER_MODEL


async def test_a_recheck_that_finds_the_model_of_record_matching_ends_the_mismatch(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    """A process in a mismatch makes vectors again once a reembed elsewhere has recorded its
    model."""
    clock = Clock()
    await _stored(memory)
    record = EmbeddingModelRecord(memory.sessionmaker, model=OTHER_MODEL, clock=clock)
    assert await record.recheck() == settings.embedding_model
    assert not await record.may_embed()
    async with open_memory(_other(settings, fake_ollama)) as elsewhere:
        with request_context(permissions=[PERMISSION_READ_ALL]):
            await elsewhere.admin.reembed()
    assert not await record.may_embed()  # within the window
    clock.now += 10
    assert await record.may_embed() and record.mismatch is None


# --- D5: one Ollama model, two spellings -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("nomic-embed-text", "nomic-embed-text:latest"),
        ("nomic-embed-text:latest", "nomic-embed-text:latest"),
        (" nomic-embed-text:v1.5 ", "nomic-embed-text:v1.5"),
        ("registry.example:5000/team/embedder", "registry.example:5000/team/embedder:latest"),
        ("team/embedder@sha256:abc", "team/embedder@sha256:abc"),
        ("local", "local"),
        ("local:/models/e5", "local:/models/e5"),
        # local_model_of runs the same in-process model for these spellings: one name.
        ("Local", "local"),
        (" LOCAL ", "local"),
        ("local:", "local"),
        ("Local: /models/e5", "local:/models/e5"),
        ("local:/Models/E5", "local:/Models/E5"),  # a directory keeps its case
        ("none", "none"),
        ("None", "none"),
        # Ollama's own defaults and case folding (its types/model name rules): one model.
        ("library/nomic-embed-text", "nomic-embed-text:latest"),
        ("registry.ollama.ai/library/nomic-embed-text:latest", "nomic-embed-text:latest"),
        ("https://registry.ollama.ai/library/nomic-embed-text", "nomic-embed-text:latest"),
        ("Nomic-Embed-Text:Latest", "nomic-embed-text:latest"),
        ("registry.ollama.ai/jina/embed", "jina/embed:latest"),
        ("example.com/library/embed", "example.com/library/embed:latest"),
    ],
)
def test_an_ollama_model_without_a_tag_is_its_latest(name: str, canonical: str) -> None:
    assert canonical_model_name(name) == canonical


@pytest.mark.parametrize(
    ("recorded", "configured"),
    [
        ("nomic-embed-text:latest", "nomic-embed-text"),
        ("nomic-embed-text", "nomic-embed-text:latest"),  # recorded before names had a tag
        ("nomic-embed-text:latest", "library/nomic-embed-text"),
        ("nomic-embed-text:latest", "Nomic-Embed-Text"),
    ],
)
async def test_the_two_spellings_of_one_model_are_no_change(
    memory: Memory,
    settings: Settings,
    fake_ollama: FakeOllama,
    caplog: pytest.LogCaptureFixture,
    recorded: str,
    configured: str,
) -> None:
    """``nomic-embed-text`` and ``nomic-embed-text:latest`` compared as two models: spelling
    the model otherwise logged a model change, refused backfill and (now) would stop every
    vector. One model: vectors are made, backfill runs, doctor says ok."""
    await _stored(memory)
    await execute(memory, "UPDATE memory_embedding_model SET model = :m", m=recorded)
    await execute(memory, "UPDATE memory_facts SET embedding = NULL WHERE key = 'editor'")
    spelled = _other(settings, fake_ollama, model=configured)
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(spelled) as same:
            uid = await new_user(same)
            fact = await same.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
            assert fact.has_embedding
            assert await same.store.backfill_embeddings() == 1
    assert _changed_events(caplog) == []
    assert await scalar(memory, RECORDED) == recorded  # no migration, no rewrite
    checks = {c.name: c for c in await diagnose(spelled, check_models=False)}
    assert checks["stored vectors"].status == "ok"


async def test_an_untagged_model_is_recorded_with_its_tag(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    async with open_memory(_other(settings, fake_ollama, model="nomic-embed-text")) as untagged:
        uid = await new_user(untagged)
        await untagged.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    assert await scalar(memory, RECORDED) == "nomic-embed-text:latest"


async def test_text_only_mode_is_left_alone_by_a_mismatch(
    memory: Memory, settings: Settings, fake_ollama: FakeOllama
) -> None:
    await _stored(memory)
    async with open_memory(_other(settings, fake_ollama, model="none")) as text_only:
        uid = await new_user(text_only)
        fact = await text_only.store.upsert_fact("tools", "browser", "firefox", user_id=uid)
        assert not fact.has_embedding
        hits = await text_only.store.search_facts("firefox", user_id=uid)
        assert [h.via for h in hits] == ["text"]
    assert await scalar(memory, RECORDED) == settings.embedding_model
