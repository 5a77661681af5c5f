"""The benchmarks' SQL clock sees every statement the package sends, on both of its engines (a
clock on ``memory.engine`` alone missed the fact reads that moved to the cached-plans engine,
and the facts section failed on it) — those through SQLAlchemy and the search reads sent
straight to the driver (repositories.statements.fetch_rows) alike."""

from __future__ import annotations

from benchmarks.harness import TimingEmbedder
from benchmarks.sections import timed_memory

from navi_memory.testing import FakeOllama
from navi_memory.testing.hashed_embedder import HashedEmbedder
from tests.conftest import make_settings
from tests.integration.factories import new_user


async def test_the_clock_captures_fact_and_chunk_reads_from_both_engines(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    embedder = TimingEmbedder(HashedEmbedder())
    async with timed_memory(make_settings(db_url, fake_ollama), embedder) as (memory, clock):
        uid = await new_user(memory)
        await memory.store.upsert_fact("work", "employer", "Acme in Berlin", user_id=uid)
        before = clock.seconds, clock.statements
        async with clock.capture() as facts:
            await memory.store.search_facts("Acme", user_id=uid)
        async with clock.capture() as chunks:
            await memory.store.search_chunks("Acme", user_id=uid)
    assert len(facts) == 1
    assert "memory_facts" in facts[0].sql
    assert len(chunks) == 1
    assert "memory_chunk" in chunks[0].sql
    assert clock.statements >= before[1] + 2
    assert clock.seconds > before[0]
    assert facts[0].parameters  # as sent: replayable on raw asyncpg
    assert embedder.texts >= 2
