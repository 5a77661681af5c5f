"""What a new user's walkthrough of the library docs found: a fact's ``unmerged_at`` missing from
every read (and so from `navi-memory facts show`), a model-mismatch warning naming fixes that do
not apply to an embedder passed in code, and a custom embedder named by its class in its failure
messages where the model of record names it by its ``model``."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence

import pytest

from navi_memory import (
    PERMISSION_READ_ALL,
    ConfigError,
    Memory,
    Settings,
    open_memory,
    request_context,
)
from navi_memory.cli import main
from navi_memory.testing import HashedEmbedder
from tests.integration.factories import new_user, scalar

RECORDED = "SELECT model FROM memory_embedding_model"


async def _unmerged(memory: Memory) -> tuple[uuid.UUID, int]:
    """A user whose 'language' was merged into 'preferred_language' and separated again:
    (the user, the separated fact's id)."""
    uid = await new_user(memory)
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    with request_context(user_id=uid):
        restored = await memory.store.unmerge_fact(old.id)
    assert restored.unmerged_at is not None
    return uid, old.id


async def test_every_read_of_a_fact_carries_when_the_user_separated_it(memory: Memory) -> None:
    """``unmerged_at`` (set by unmerge_fact) was in no Fact: get_fact, the listings, search and
    the fact an upsert returns all left it out, so nobody could see a row was separated."""
    uid, fact_id = await _unmerged(memory)
    with request_context(user_id=uid):
        got = await memory.store.get_fact(fact_id)
        listed = await memory.store.get_all_facts()
        found = await memory.store.search_facts("English")
        again = await memory.store.upsert_fact("p", "language", "English", dedupe=True)
        fresh = await memory.store.upsert_fact("p", "editor", "neovim", dedupe=True)
    stamp = got.unmerged_at
    assert stamp is not None
    assert [f.unmerged_at for f in listed if f.id == fact_id] == [stamp]
    assert [f.unmerged_at for f in found if f.id == fact_id] == [stamp]
    assert (again.id, again.unmerged_at) == (fact_id, stamp)
    assert fresh.unmerged_at is None
    with request_context(permissions=[PERMISSION_READ_ALL]):
        everyone = await memory.store.get_all_facts(all_users=True, include_merged=True)
    assert [f.unmerged_at for f in everyone if f.id == fact_id] == [stamp]


def test_facts_show_prints_when_the_user_separated_the_fact(
    settings: Settings,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`facts show` says it prints every column of the fact; ``unmerged_at`` was not among
    them, in the table or in --json."""

    async def setup() -> int:
        async with open_memory(settings) as memory:
            return (await _unmerged(memory))[1]

    fact_id = asyncio.run(setup())
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EMBEDDING_MODEL", "none")
    assert main(["facts", "show", str(fact_id), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["unmerged_at"] is not None
    assert main(["facts", "show", str(fact_id)]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("unmerged")]
    assert line.split()[0] == "unmerged_at"
    assert shown["unmerged_at"][:10] in line  # its date, not an empty cell


def _changed(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if getattr(r, "event", None) == "memory.embedding_model_changed"
    ]


async def test_a_mismatch_of_an_embedder_passed_in_code_names_the_fixes_that_apply(
    memory: Memory, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning told an application that passed ``embedder=`` to run `navi-memory reembed`
    (which embeds with EMBEDDING_MODEL's model) or set EMBEDDING_MODEL back (ignored when an
    embedder is passed); the backfill's refusal likewise. Both now name memory.admin.reembed()
    with that embedder, or an embedder of the recorded model."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    recorded = await scalar(memory, RECORDED)
    assert recorded == settings.embedding_model
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(settings, embedder=HashedEmbedder()) as passed:
            with pytest.raises(ConfigError) as refused:
                await passed.store.backfill_embeddings()
    (warning,) = _changed(caplog)
    for message in (warning, str(refused.value)):
        assert "memory.admin.reembed() (on a Memory opened with this embedder)" in message
        assert f"pass open_memory an embedder of {recorded!r}" in message
        assert "navi-memory reembed" not in message
        assert "EMBEDDING_MODEL" not in message


async def test_a_mismatch_of_the_configured_model_still_names_the_command(
    memory: Memory, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """With the model from the settings, the command and EMBEDDING_MODEL are the fixes."""
    uid = await new_user(memory)
    async with open_memory(settings, embedder=HashedEmbedder()) as passed:
        await passed.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    assert await scalar(memory, RECORDED) == "HashedEmbedder"
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(settings):
            pass
    (warning,) = _changed(caplog)
    assert "`navi-memory reembed`" in warning
    assert "set EMBEDDING_MODEL back to 'HashedEmbedder'" in warning


class _NamedShortEmbedder:
    """A custom model named by its ``model`` attribute, answering vectors of the wrong size."""

    dim = 768
    model = "my-embed"

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [[0.1] * 384 for _ in texts]

    async def embed_query(self, text: str) -> list[float]:
        return [0.1] * 384

    async def aclose(self) -> None:
        return None


async def test_a_custom_embedder_fails_under_the_name_it_is_recorded_by(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """An embedder is known by its ``model`` attribute (the model of record, doctor), but its
    failure log named its class: `embedding model _NamedShortEmbedder returned 384-dimensional
    embeddings`."""
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(settings, embedder=_NamedShortEmbedder()) as memory:
            uid = await new_user(memory)
            fact = await memory.store.upsert_fact("tools", "editor", "neovim", user_id=uid)
    assert not fact.has_embedding
    failed = [
        r.getMessage()
        for r in caplog.records
        if getattr(r, "event", None) == "memory.embedding_failed"
    ]
    assert failed and failed[0].startswith("memory.embedding_failed: embedding model my-embed ")
    assert "returned 384-dimensional embeddings" in failed[0]
    assert "_NamedShortEmbedder" not in failed[0]
