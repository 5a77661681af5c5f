"""Fixtures of the reliability suite: Memories tuned for faults and for snapshots."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from navi_memory import Memory, open_memory
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings


@pytest.fixture
async def calm_memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory that changes nothing behind the caller's back (no background chunk indexer),
    so a snapshot taken after a call shows that call's writes and nothing else."""
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
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
