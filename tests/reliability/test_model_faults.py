"""Models down, slow, answering junk, the wrong dimension or NaN — Ollama through FakeOllama,
and custom models plugged into open_memory: every call degrades the documented way (writes
land without vectors, searches use text, compress truncates, backfill raises EmbeddingError
and keeps its rows), nothing is half-written, and the model's return heals everything."""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Callable
from typing import Final

import pytest

from navi_memory import EMBEDDING_DIM, EmbeddingError, Memory, open_memory
from navi_memory.testing import FakeOllama, FakeOllamaMode, ScriptedChatModel
from tests.conftest import make_settings
from tests.reliability.models import EMBEDDER_FAULTS, BrokenEmbedder, EmbedderFault
from tests.reliability.snapshot import changed_tables, table_contents
from tests.reliability.world import chunk_draft

# Timing-bound (a 0.5 s model timeout, a 5 s stall, then a recovery that must answer within the
# timeout): under `make test`'s four workers on two cores the recovered backfill once missed its
# 0.5 s. They run in `make test-slow` (one worker a core; CI runs it), as the other fault suites.
pytestmark = pytest.mark.slow

MODEL_TIMEOUT: Final = 0.5
"""EMBEDDING_TIMEOUT_SECONDS and MEMORY_LLM_TIMEOUT_SECONDS in these tests."""
MODEL_PAUSE: Final = 3.0
"""EMBEDDING_PAUSE_SECONDS in these tests: a model that hung is skipped this long."""
CALL_DEADLINE: Final = 5.0
SUMMARY: Final = "They settled on port 8099.\nKEYS: 8099"

NAN_BODY: Final = json.dumps(
    {"model": "m", "embeddings": [[math.nan] * EMBEDDING_DIM]}, allow_nan=True
).encode()


async def degrades_like_a_model_that_is_down(
    memory: Memory,
    *,
    break_models: Callable[[], None],
    heal_models: Callable[[], None],
    hangs: bool = False,
) -> None:
    """The documented degradation, step by step, then the recovery. ``hangs``: the broken
    model never answers, so its first timeout pauses it (EMBEDDING_PAUSE_SECONDS) and no
    other fault does."""
    store, sessions = memory.store, memory.sessions
    uid = uuid.uuid4()
    await memory.users.ensure(uid)
    sid = (await sessions.create(user_id=uid)).id
    await store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    for i in range(6):
        await sessions.append(
            sid, "user" if i % 2 == 0 else "assistant", f"m{i} port 80{i}", user_id=uid
        )

    break_models()

    async def bounded(call: object) -> object:
        return await asyncio.wait_for(call, CALL_DEADLINE)  # type: ignore[arg-type]

    fact = await bounded(store.upsert_fact("tools", "terminal", "kitty", user_id=uid))
    assert not fact.has_embedding  # type: ignore[attr-defined]
    embedding = store._embedding
    assert embedding.paused is hangs
    assert (
        await bounded(
            store.add_chunks([chunk_draft("kitty terminal config")], user_id=uid, session_id=sid)
        )
        == 1
    )
    hits = await bounded(store.search_facts("terminal kitty", user_id=uid))
    assert [(h.key, h.via) for h in hits] == [("terminal", "text")]  # type: ignore[attr-defined]
    chunk_hits = await bounded(store.search_chunks("kitty", user_id=uid))
    assert chunk_hits and all(h.via == "text" for h in chunk_hits)  # type: ignore[attr-defined]
    result = await bounded(sessions.compress(sid, keep_last=2, user_id=uid))
    assert result.demoted == 4  # type: ignore[attr-defined]
    chunks = await store.search_chunks("", user_id=uid, session_id=sid, limit=100)
    covered = {q for c in chunks for q in range(c.start_seq, c.end_seq + 1)}
    assert set(range(1, 5)) <= covered, "compress left demoted messages in no chunk"
    assert not any(c.has_embedding for c in chunks)

    # The chunks' text is being indexed in the background; let it finish so the snapshot
    # shows only what the failing backfill does.
    await store.wait_chunk_indexing()
    # So do the fact vectors queued before the models broke: a backfill's end kicks the fact
    # indexer, which would move them between the two snapshots (a change the backfill did
    # not make; CI, 2026-12-06).
    await store.index_pending_facts()
    before = await table_contents(memory.engine)
    with pytest.raises(EmbeddingError):
        await bounded(store.backfill_embeddings(8))
    after = await table_contents(memory.engine)
    assert after == before, changed_tables(before, after)

    heal_models()
    if embedding.paused:
        # A model that hung is not asked again until its pause ends: still text, at once.
        hits = await bounded(store.search_facts("terminal kitty", user_id=uid))
        assert [h.via for h in hits] == ["text"]  # type: ignore[attr-defined]
        await asyncio.sleep(MODEL_PAUSE)  # the pause began before: it is over after this
        assert not embedding.paused
    # Backfill asks the model whatever the pause (an operator's explicit run).
    assert await store.backfill_embeddings(8) >= 2
    assert all(f.has_embedding for f in await store.get_all_facts(uid))
    chunks = await store.search_chunks("", user_id=uid, session_id=sid, limit=100)
    assert all(c.has_embedding for c in chunks)
    assert (await store.search_facts("terminal kitty", user_id=uid))[0].via == "vector"


OLLAMA_FAULTS: Final[dict[str, tuple[FakeOllamaMode, bytes | None]]] = {
    "down": ("fail", None),
    "slow": ("stall", None),
    "junk": ("junk", None),
    "wrong_dim": ("wrong_dim", None),
    "nan": ("junk", NAN_BODY),
}


@pytest.mark.parametrize("fault", list(OLLAMA_FAULTS))
async def test_ollama_faults_degrade_the_documented_way(
    db_url: str, fake_ollama: FakeOllama, fault: str
) -> None:
    """Ollama (the real client on FakeOllama) down, slower than the timeout, answering HTML,
    half-width vectors or NaN: every call degrades as documented, and recovers."""
    mode, body = OLLAMA_FAULTS[fault]
    settings = make_settings(
        db_url,
        fake_ollama,
        embedding_timeout_seconds=MODEL_TIMEOUT,
        embedding_pause_seconds=MODEL_PAUSE,
        memory_llm_timeout_seconds=MODEL_TIMEOUT,
    )
    fake_ollama.stall_seconds = 5.0
    fake_ollama.chat_handler = lambda _request: SUMMARY

    def break_models() -> None:
        fake_ollama.mode = mode
        if body is not None:
            fake_ollama.junk_body = body

    def heal_models() -> None:
        fake_ollama.mode = "ok"

    async with open_memory(settings) as memory:
        await degrades_like_a_model_that_is_down(
            memory, break_models=break_models, heal_models=heal_models, hangs=fault == "slow"
        )


@pytest.mark.parametrize("fault", EMBEDDER_FAULTS)
async def test_a_broken_custom_embedder_degrades_like_ollama(
    db_url: str, fake_ollama: FakeOllama, fault: EmbedderFault
) -> None:
    """A custom Embedder raising ConnectionError, answering None, junk, the wrong dimension,
    NaN, values beyond float32, a zero vector, or never answering: the same degradation."""
    embedder = BrokenEmbedder(fault)
    embedder.healthy = True
    settings = make_settings(
        db_url,
        fake_ollama,
        embedding_timeout_seconds=MODEL_TIMEOUT,
        embedding_pause_seconds=MODEL_PAUSE,
    )
    chat = ScriptedChatModel(handler=lambda _messages: SUMMARY)

    def break_models() -> None:
        embedder.healthy = False

    def heal_models() -> None:
        embedder.healthy = True

    async with open_memory(settings, embedder=embedder, chat_model=chat) as memory:
        await degrades_like_a_model_that_is_down(
            memory, break_models=break_models, heal_models=heal_models, hangs=fault == "hangs"
        )
