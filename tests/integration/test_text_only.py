"""Text-only mode: EMBEDDING_MODEL=none or open_memory(embedder=False) builds no embedding
client, stores rows without vectors, searches by text, and says so once at start-up."""

from __future__ import annotations

import logging
import uuid

import pytest

from navi_memory import ConfigError, open_memory, request_context
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import scalar


@pytest.mark.parametrize("how", ["setting", "argument"])
async def test_text_only_mode_needs_no_model_and_logs_it_once(
    db_url: str, fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """No embedding request reaches Ollama, writes land without vectors, search answers by
    text, the start-up says text-only once and no call warns."""
    if how == "setting":
        settings = make_settings(db_url, fake_ollama, embedding_model="none")
        opened = open_memory(settings)
    else:
        opened = open_memory(make_settings(db_url, fake_ollama), embedder=False)
    uid = uuid.uuid4()
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        async with opened as memory:
            assert memory.embedder is None
            await memory.users.ensure(uid)
            with request_context(user_id=uid, session_id="s1"):
                await memory.store.upsert_fact("work", "editor", "neovim")
                hits = await memory.store.search_facts("which editor")
                await memory.sessions.create("s1")
                await memory.sessions.append("s1", "user", "deploy on port 8099")
            with pytest.raises(ConfigError, match="text-only"):
                await memory.store.backfill_embeddings()
            assert (
                await scalar(
                    memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NOT NULL"
                )
                == 0
            )
    assert [(h.key, h.via) for h in hits] == [("editor", "text")]
    assert fake_ollama.requests_to("/api/embed") == []
    messages = [r.getMessage() for r in caplog.records]
    assert sum("memory.text_only" in m for m in messages) == 1
    assert not any("embedding_failed" in m for m in messages)
