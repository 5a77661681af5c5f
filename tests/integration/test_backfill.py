"""Writes while the embedder is down, and backfill filling the gaps later."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from navi_memory import (
    PERMISSION_READ_ALL,
    BackfillIncompleteError,
    EmbeddingError,
    Memory,
    Settings,
    open_memory,
    request_context,
)
from navi_memory.cli import main, maintenance
from navi_memory.cli.doctor import Check, diagnose
from navi_memory.jobs.backfill import BackfillProgress
from navi_memory.testing import FakeOllama, HashedEmbedder
from tests.conftest import make_settings
from tests.integration.factories import new_user, scalar
from tests.integration.test_chunks import draft

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["fail", "stall", "junk", "wrong_dim"])
async def test_a_write_never_fails_for_want_of_an_embedding(
    db_url: str, fake_ollama: FakeOllama, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(db_url, fake_ollama, embedding_timeout_seconds=2.0)  # < the stall
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        fake_ollama.mode = mode  # type: ignore[assignment]
        fake_ollama.stall_seconds = 3
        with caplog.at_level(logging.WARNING, logger="navi_memory"):
            fact = await memory.store.upsert_fact(
                "work", "vpn", "WireGuard on port 51820", user_id=uid
            )
        assert not fact.has_embedding
        events = [r for r in caplog.records if "memory.embedding_failed" in r.getMessage()]
        assert len(events) == 1
        hits = await memory.store.search_facts("WireGuard", user_id=uid)
        assert [(h.id, h.via) for h in hits] == [(fact.id, "text")]


async def test_backfill_gives_vectors_to_facts_written_while_the_embedder_was_down(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    for i in range(11):
        await memory.store.upsert_fact("notes", f"note_{i}", f"kubernetes cluster {i}", user_id=uid)
    fake_ollama.mode = "ok"
    seen: list[BackfillProgress] = []
    filled = await memory.store.backfill_embeddings(batch_size=4, progress=seen.append)
    assert filled == 11
    assert [p.done for p in seen] == [4, 8, 11]
    assert all(p.total == 11 for p in seen)
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0
    hits = await memory.store.search_facts("kubernetes cluster 3", user_id=uid)
    assert hits[0].via == "vector"
    # A rerun finds nothing left to do.
    assert await memory.store.backfill_embeddings() == 0


async def test_backfill_embeds_hidden_rows_too(memory: Memory, fake_ollama: FakeOllama) -> None:
    """A hidden row is shown by no read, but an unmerge (or the expiry of the row it stands
    behind) brings it back: left without a vector it was found by text alone from then on."""
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    old = await memory.store.upsert_fact("p", "language", "English", user_id=uid)
    await memory.store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    fake_ollama.mode = "ok"
    assert await memory.store.backfill_embeddings() == 2
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0
    with request_context(user_id=uid):
        back = await memory.store.unmerge_fact(old.id)
    assert back.has_embedding


async def test_backfill_with_the_embedder_down_raises_and_keeps_rows_for_a_rerun(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    await memory.store.upsert_fact("notes", "a", "alpha", user_id=uid)
    with pytest.raises(EmbeddingError, match=r"127\.0\.0\.1"):
        await memory.store.backfill_embeddings()
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 1
    fake_ollama.mode = "ok"
    assert await memory.store.backfill_embeddings() == 1


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA", "EMBEDDING"))}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "navi_memory.cli", *args],
        env=full_env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.cli  # the console script in subprocesses: make test-cli (CI runs it)
async def test_backfill_command_reports_progress_and_fails_clearly_without_the_embedder(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    fake_ollama.mode = "fail"
    for i in range(3):
        await memory.store.upsert_fact("notes", f"n{i}", f"value {i}", user_id=uid)
    env = {
        "DATABASE_URL": memory.settings.database_url or "",
        "OLLAMA_HOST": fake_ollama.url,
        "BACKFILL_PAUSE_SECONDS": "0",
        "BACKFILL_BATCH_SIZE": "2",
    }
    failed = run_cli("backfill", **env)
    assert failed.returncode != 0
    assert "embedding" in failed.stderr.lower()
    assert fake_ollama.url.removeprefix("http://") in failed.stderr

    fake_ollama.mode = "ok"
    done = run_cli("backfill", **env)
    assert done.returncode == 0, done.stderr
    assert "memory_facts" in done.stdout
    assert "3/3" in done.stdout
    # A pipe gets the bars once, as plain lines: no carriage returns, no cursor control.
    assert "\r" not in done.stdout and "\x1b" not in done.stdout
    assert "3 row(s) embedded" in done.stdout
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0


class _RefusingEmbedder(HashedEmbedder):
    """Refuses every call holding a text with "refused" in it, as a model does that answers
    NaN or an all-zero vector for some input (the guard refuses both): always, on every run."""

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if any("refused" in text for text in texts):
            self._count(len(texts))
            raise EmbeddingError("the model answered an all-zero vector")
        return await super().embed_documents(texts)


async def test_a_row_the_model_always_refuses_holds_back_no_other_row(settings: Settings) -> None:
    """One fact the model can never embed stopped every backfill at its batch: its batchmates,
    every later fact and every chunk stayed without a vector, run after run. It is skipped
    (it keeps no vector, found by text) and the backfill goes on; the error that ends the run
    says how many rows were left, after the vectors made were queued and the indexers kicked."""
    embedder = _RefusingEmbedder()
    async with open_memory(settings, embedder=embedder) as memory:
        uid = await new_user(memory)
        embedder.failing = True  # written while the model is down: no vectors
        await memory.store.upsert_fact("notes", "a", "alpha", user_id=uid)
        await memory.store.upsert_fact("notes", "b", "refused value", user_id=uid)
        for i in range(4):
            await memory.store.upsert_fact("notes", f"n{i}", f"note {i}", user_id=uid)
        await memory.store.add_chunks([draft("User: deploy on fridays")], uid, "s1")
        embedder.failing = False
        seen: list[BackfillProgress] = []
        with pytest.raises(BackfillIncompleteError, match=r"1 row\(s\) .*all-zero") as caught:
            await memory.store.backfill_embeddings(batch_size=4, progress=seen.append)
        assert isinstance(caught.value, EmbeddingError)
        assert (caught.value.embedded, caught.value.left) == (6, 1)
        missing = "SELECT count(*) FROM memory_facts WHERE embedding IS NULL"
        assert await scalar(memory, missing) == 1
        assert await scalar(memory, missing + " AND value = 'refused value'") == 1
        chunks_missing = "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL"
        assert await scalar(memory, chunks_missing) == 0
        assert (seen[-1].table, seen[-1].done, seen[-1].total) == ("memory_chunks", 1, 1)
        await memory.store.wait_chunk_indexing()  # kicked although the run failed
        await memory.store.wait_fact_indexing()
        assert await memory.store.pending_chunk_count() == 0
        assert await memory.store.pending_fact_count() == 0
        # A rerun tries the refused row again, alone, and nothing else.
        embedder.calls = 0
        with pytest.raises(EmbeddingError, match=r"1 row\(s\)"):
            await memory.store.backfill_embeddings(batch_size=4)
        assert embedder.calls == 1


async def test_a_backfill_with_the_model_down_stops_after_three_failures_in_a_row(
    settings: Settings,
) -> None:
    """Skipping refused rows must not turn a model that is down into one failed call per row:
    three failures in a row stop the run, as before with the model's own error."""
    embedder = HashedEmbedder()
    async with open_memory(settings, embedder=embedder) as memory:
        uid = await new_user(memory)
        embedder.failing = True
        for i in range(12):
            await memory.store.upsert_fact("notes", f"n{i}", f"note {i}", user_id=uid)
        embedder.calls = 0
        with pytest.raises(EmbeddingError, match="switched to fail"):
            await memory.store.backfill_embeddings(batch_size=4)
        assert embedder.calls == 4  # the batch, then its rows one by one until three failed
        missing = "SELECT count(*) FROM memory_facts WHERE embedding IS NULL"
        assert await scalar(memory, missing) == 12


@pytest.fixture
def cli_env(db_url: str, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    """main() in this process, on the test's database and the fake Ollama."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("OLLAMA_HOST", fake_ollama.url)
    monkeypatch.setenv("BACKFILL_PAUSE_SECONDS", "0")
    monkeypatch.setenv("COLUMNS", "400")


@pytest.mark.usefixtures("cli_env")
async def test_the_backfill_command_counts_a_refused_row_apart_from_a_stop(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that went through every row but one the model refuses said "the embedding step
    stopped" and dropped the count of rows embedded: it says how many were embedded and how
    many refused; exit 1, the error on stderr."""
    embedder = _RefusingEmbedder()
    async with open_memory(settings, embedder=embedder) as memory:
        uid = await new_user(memory)
        embedder.failing = True
        await memory.store.upsert_fact("notes", "b", "refused value", user_id=uid)
        for i in range(3):
            await memory.store.upsert_fact("notes", f"n{i}", f"note {i}", user_id=uid)
        embedder.failing = False

    @asynccontextmanager
    async def refusing_admin(configured: Settings) -> AsyncIterator[Memory]:
        async with open_memory(configured, embedder=_RefusingEmbedder()) as opened:
            with request_context(permissions=[PERMISSION_READ_ALL]):
                yield opened

    monkeypatch.setattr(maintenance, "admin_memory", refusing_admin)
    code = await asyncio.to_thread(main, ["backfill"])
    captured = capsys.readouterr()
    assert code == 1
    assert "3 row(s) embedded, 1 refused (the error below)" in captured.out
    assert "stopped" not in captured.out
    assert "1 row(s) could not be embedded" in captured.err


async def test_doctor_reports_rows_without_a_vector_until_a_backfill_fills_them(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """After the embedding model was down, doctor said "all good" while vector search could
    not find those rows; it names them and the command that fills them."""

    async def check() -> Check:
        checks = await diagnose(memory.settings, check_models=False)
        return next(c for c in checks if c.name == "missing vectors")

    uid = await new_user(memory)
    await memory.store.upsert_fact("tools", "editor", "helix", user_id=uid)
    assert (await check()).status == "ok"
    fake_ollama.mode = "fail"
    await memory.store.upsert_fact("tools", "shell", "fish", user_id=uid)
    await memory.store.add_chunks(
        [draft("User: the VPN host is vpn.example.org")], user_id=uid, session_id="s1"
    )
    found = await check()
    assert (found.status, found.fix) == ("finding", "navi-memory backfill")
    assert found.detail.startswith("1 fact(s) and 1 chunk(s) have no vector")
    fake_ollama.mode = "ok"
    assert await memory.store.backfill_embeddings() == 2
    assert (await check()).status == "ok"


async def test_backfill_reads_the_chunks_without_a_vector_through_their_index(
    memory: Memory,
) -> None:
    """Revision 0033: the batch read and the count use the partial index, not a walk of the
    primary key through every chunk that has a vector."""
    plans = [
        await scalar(memory, f"EXPLAIN (FORMAT JSON) {statement}")
        for statement in (
            "SELECT id, content FROM memory_chunks WHERE embedding IS NULL AND id > 0"
            " ORDER BY id LIMIT 8",
            "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL",
        )
    ]
    assert all("ix_memory_chunks_id_without_embedding" in str(plan) for plan in plans), plans


class ChangingEmbedder(HashedEmbedder):
    """Runs ``meanwhile`` once, while a batch is being embedded (after its vectors are made,
    before they are returned): a write landing during the backfill's model call."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], Awaitable[None]] | None = None

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await super().embed_documents(texts)
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            await meanwhile()
        return vectors


async def test_a_fact_changed_while_backfill_embedded_it_is_embedded_again(
    settings: Settings,
) -> None:
    """The fact's value changed while backfill embedded the old one, and the writer's own
    model call failed (no vector). Backfill skipped storing the stale vector but counted the
    row filled, moved past it and reported success with the row still without a vector."""
    embedder = ChangingEmbedder()
    async with open_memory(settings, embedder=embedder) as memory:
        uid = await new_user(memory)
        embedder.failing = True
        await memory.store.upsert_fact("notes", "a", "alpha", user_id=uid)
        await memory.store.upsert_fact("notes", "b", "beta", user_id=uid)
        embedder.failing = False

        async def rewrite() -> None:
            embedder.failing = True
            try:
                await memory.store.upsert_fact("notes", "a", "alpha two", user_id=uid)
            finally:
                embedder.failing = False

        embedder.meanwhile = rewrite
        assert await memory.store.backfill_embeddings(batch_size=8) == 2
        assert (
            await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0
        )
        hits = await memory.store.search_facts("alpha two", user_id=uid)
        assert [(h.value, h.via) for h in hits][:1] == [("alpha two", "vector")]
