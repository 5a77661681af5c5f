"""Rows hidden behind a fact that have expired: `store.get_merged_facts`, `navi-memory facts
show` and `facts unmerge` (the console script's own tests are tests/cli)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from navi_memory import Fact, Memory, Settings, open_memory, request_context
from navi_memory.cli import main
from navi_memory.errors import NotFoundError
from tests.integration.factories import execute, new_user


async def expire(memory: Memory, fact_id: int) -> None:
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 second' WHERE id = :id",
        id=fact_id,
    )


async def expired_behind_survivor(memory: Memory) -> tuple[uuid.UUID, Fact, Fact, Fact]:
    """A user's `preferred_language` with two rows behind it: `language` (expired since)
    and `lang`."""
    uid = await new_user(memory)
    gone = await memory.store.upsert_fact("p", "language", "A", user_id=uid, expires_days=1)
    live = await memory.store.upsert_fact("p", "lang", "B", user_id=uid)
    survivor = await memory.store.upsert_fact(
        "p", "preferred_language", "C", user_id=uid, dedupe=True
    )
    await expire(memory, gone.id)
    return uid, gone, live, survivor


async def test_get_merged_facts_lists_the_expired_rows_behind_a_fact(memory: Memory) -> None:
    """Expired rows are behind the fact too (forgetting it deletes them): listed, by id, with
    their expiry; get_all_facts(include_merged=True) leaves them out."""
    uid, gone, live, survivor = await expired_behind_survivor(memory)
    with request_context(user_id=uid):
        merged = await memory.store.get_merged_facts(survivor.id)
        listed = await memory.store.get_all_facts(include_merged=True)
    assert [(f.id, f.merged_into) for f in merged] == [
        (gone.id, survivor.id),
        (live.id, survivor.id),
    ]
    assert merged[0].expires_at is not None and live.id in {f.id for f in listed}
    assert gone.id not in {f.id for f in listed}


async def test_get_merged_facts_reads_the_fact_as_get_fact_does(memory: Memory) -> None:
    """Another user's fact is a NotFoundError, as get_fact's; a fact with nothing behind it
    gives []."""
    _, _, _, survivor = await expired_behind_survivor(memory)
    other = await new_user(memory)
    alone = await memory.store.upsert_fact("p", "editor", "vim", user_id=other)
    with request_context(user_id=other):
        assert await memory.store.get_merged_facts(alone.id) == []
        with pytest.raises(NotFoundError):
            await memory.store.get_merged_facts(survivor.id)


def test_show_lists_an_expired_hidden_row_marked_and_unmerge_says_it_stays_invisible(
    db_url: str,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`facts show` listed only the unexpired rows behind a fact, though `facts forget` deletes
    the expired ones with it; `facts unmerge` of an expired row said it was visible again."""

    async def setup() -> tuple[Fact, Fact, Fact]:
        async with open_memory(settings) as memory:
            _, gone, live, survivor = await expired_behind_survivor(memory)
        return gone, live, survivor

    gone, live, survivor = asyncio.run(setup())
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EMBEDDING_MODEL", "none")
    monkeypatch.setenv("COLUMNS", "400")

    assert main(["facts", "show", str(survivor.id), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["merged_here"] == [gone.id, live.id]
    assert shown["merged_here_expired"] == [gone.id]

    assert main(["facts", "show", str(survivor.id)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "merged here" in line]
    assert [line.split("  ", 1)[1].strip() for line in lines] == [
        f"#{gone.id} language = A (expired)",
        f"#{live.id} lang = B",
    ]

    assert main(["facts", "unmerge", str(gone.id)]) == 0
    said = capsys.readouterr().out
    assert "is visible again" not in said
    assert f"fact #{gone.id} [p] language was unmerged but has expired (not visible)" in said
    assert main(["facts", "unmerge", str(live.id)]) == 0
    assert f"fact #{live.id} [p] lang is visible again" in capsys.readouterr().out
