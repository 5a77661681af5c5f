"""Fixtures of the reliability suite: Memories tuned for faults and for snapshots."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from navi_memory import Memory, open_memory
from navi_memory.testing import FakeOllama
from tests import dbtools
from tests.conftest import make_settings
from tests.reliability.world import World, build_world


@pytest.fixture
async def calm_memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory that changes nothing behind the caller's back (no background chunk or fact
    indexer), so a snapshot taken after a call shows that call's writes and nothing else."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, fact_index_in_background=False
    )
    async with open_memory(settings) as opened:
        yield opened


@pytest.fixture
async def fault_memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory for many concurrent callers whose connections get killed."""
    settings = make_settings(
        db_url, fake_ollama, db_pool_size=8, db_max_overflow=4, db_connect_timeout_seconds=5.0
    )
    async with open_memory(settings) as opened:
        yield opened


@pytest.fixture(scope="module")
def module_db_url(postgresql_plain_proc: Any, pg_server: dbtools.EmbeddedServer) -> Iterator[str]:
    """A database at head shared by one module's tests (a clone of the migrated template): for
    tests that only read, or that prove a call changed nothing."""
    name = pg_server.create_database("reliability", template=postgresql_plain_proc.template_dbname)
    try:
        yield pg_server.url(name)
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="module")
async def shared(
    module_db_url: str, fake_ollama_server: FakeOllama
) -> AsyncIterator[tuple[Memory, World]]:
    """A calm Memory (no background indexer) on the module's database, with its World built."""
    fake_ollama_server.reset()
    settings = make_settings(
        module_db_url,
        fake_ollama_server,
        chunk_index_in_background=False,
        fact_index_in_background=False,
    )
    async with open_memory(settings) as opened:
        yield opened, await build_world(opened)
