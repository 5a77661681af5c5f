"""The benchmarks' SQL clock sees every statement the package sends, on both of its engines (a
clock on ``memory.engine`` alone missed the fact reads that moved to the cached-plans engine,
and the facts section failed on it) — those through SQLAlchemy and the search reads sent
straight to the driver (repositories.statements.fetch_rows) alike."""

from __future__ import annotations

import asyncio

import pytest
from benchmarks.harness import BenchServer, TimingEmbedder
from benchmarks.sections import timed_memory

from navi_memory.testing import FakeOllama
from navi_memory.testing.hashed_embedder import HashedEmbedder
from tests.conftest import make_settings
from tests.integration.factories import new_user


async def test_the_clock_captures_fact_and_chunk_reads_from_both_engines(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    embedder = TimingEmbedder(HashedEmbedder())
    # No background indexers: a drain the upsert kicked would land in a capture.
    settings = make_settings(
        db_url, fake_ollama, fact_index_in_background=False, chunk_index_in_background=False
    )
    async with timed_memory(settings, embedder) as (memory, clock):
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


@pytest.mark.slow
async def test_the_bench_server_counts_the_cpu_its_backends_use() -> None:
    """BenchServer.cpu_seconds (the 8-caller rows' server CPU): the server's processes, live
    backends and the ones gone alike, grow by what a CPU-bound query costs them."""
    server = BenchServer(parent=None)
    try:
        before = server.cpu_seconds()
        assert before is not None
        conn = await server.connect()
        try:
            await conn.fetchval("SELECT sum(g) FROM generate_series(1, 4000000) g")
            during = server.cpu_seconds()
        finally:
            await conn.close()
        await asyncio.sleep(0.2)  # the backend exits; the postmaster reaps it
        after = server.cpu_seconds()
    finally:
        server.stop()
    assert during is not None and after is not None
    assert during - before > 0.1  # the live backend's work
    assert after >= during  # kept once the backend has gone
