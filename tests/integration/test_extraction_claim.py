"""The extraction claim lost with its connection (a server restart, a proxy's idle reaper, a
failover, pg_terminate_backend): the extractor that lost it writes nothing more, reports the
session skipped rather than failed, and the next run (or the extractor that claimed it since)
extracts the activity once."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import pytest

from navi_memory import ExtractionReport, Memory, open_memory
from navi_memory.testing import FakeOllama
from tests.integration.extraction_model import ExtractionModel
from tests.integration.factories import new_user, scalar
from tests.integration.test_extraction import conversation, echo_facts, extraction_settings


@pytest.fixture
def model(fake_ollama: FakeOllama) -> ExtractionModel:
    scripted = ExtractionModel()
    scripted.facts = echo_facts
    fake_ollama.chat_handler = scripted
    return scripted


CLAIMS = (
    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted"
    " AND a.datname = current_database() AND l.pid <> pg_backend_pid()"
)
"""The advisory locks other server processes of this database hold: the extraction claims
(nothing else holds one while an extraction waits on its model)."""


async def end_claims(memory: Memory) -> int:
    """Terminate the server processes holding a claim, and wait until they are gone: a
    terminated backend keeps its locks until it has exited, a moment after the signal."""
    ended = int(str(await scalar(memory, f"SELECT count(pg_terminate_backend(l.pid)){CLAIMS}")))
    async with asyncio.timeout(10):
        while True:
            if not int(str(await scalar(memory, f"SELECT count(*){CLAIMS}"))):
                return ended
            await asyncio.sleep(0.01)


async def wait_entered(model: ExtractionModel) -> None:
    assert await asyncio.to_thread(model.entered.wait, 10), "the model call never came"


async def claim_lost_during(
    memory: Memory, model: ExtractionModel, uid: uuid.UUID, call: str
) -> ExtractionReport:
    """The user's sweep, its claim's connection ended while the model's ``call`` ("facts" or
    "summary") is held; the sweep's report."""
    model.hold(call, once=True)
    running = asyncio.create_task(memory.extractor.process_stale_sessions(uid))
    try:
        await wait_entered(model)
        assert await end_claims(memory) == 1
    finally:
        model.release()
    return await running


async def test_a_claim_lost_during_the_fact_call_writes_nothing_and_is_retried(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_memory(extraction_settings(db_url, fake_ollama)) as memory:
        uid = await new_user(memory)
        sid = await conversation(memory, uid, "fact editor neovim")
        with caplog.at_level(logging.INFO, logger="navi_memory"):
            report = await claim_lost_during(memory, model, uid, "facts")
        # A failure (the database lost the claim), truly with nothing written, and said so.
        assert (report.failures, report.sessions_skipped, report.facts_written) == (1, 0, 0)
        assert "claim was lost" in caplog.text
        assert await memory.store.get_extracted_at(sid, uid) is None
        assert await memory.store.get_all_facts(uid) == []

        again = await memory.extractor.process_stale_sessions(uid)
        assert (again.sessions_extracted, again.facts_written) == (1, 1)
        assert await memory.store.get_extracted_at(sid, uid) is not None
        assert [(f.key, f.value) for f in await memory.store.get_all_facts(uid)] == [
            ("editor", "neovim")
        ]


async def test_a_claim_lost_during_the_summary_call_keeps_the_facts_and_leaves_no_mark(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    async with open_memory(extraction_settings(db_url, fake_ollama)) as memory:
        uid = await new_user(memory)
        sid = await conversation(memory, uid, "fact editor neovim")
        report = await claim_lost_during(memory, model, uid, "summary")
        # The facts were written under the claim; the summary and the mark were not.
        assert (report.failures, report.sessions_skipped, report.sessions_extracted) == (1, 0, 0)
        assert report.facts_written == 1
        assert await memory.store.get_extracted_at(sid, uid) is None
        assert await memory.store.get_summary(uid) is None

        again = await memory.extractor.process_stale_sessions(uid)
        assert (again.sessions_extracted, again.summaries_written) == (1, 1)
        assert await memory.store.get_extracted_at(sid, uid) is not None


async def test_an_extractor_whose_claim_another_took_over_leaves_the_activity_to_it(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """The lost claim is taken by a second extractor, which is still asking its model when the
    first one's reply comes: the first writes nothing (no mark covers the activity yet, so
    only the claim tells), the second writes the facts and the mark."""
    settings = extraction_settings(db_url, fake_ollama)
    async with open_memory(settings) as first, open_memory(settings) as second:
        uid = await new_user(first)
        sid = await conversation(first, uid, "fact editor neovim")
        model.hold(once=True)
        first_run = asyncio.create_task(first.extractor.process_stale_sessions(uid))
        await wait_entered(model)
        first_gate = model._holding  # the first call's gate: hold() below makes a new one
        assert isinstance(first_gate, threading.Event)
        second_run: asyncio.Task[ExtractionReport] | None = None
        try:
            assert await end_claims(first) == 1
            model.hold(once=True)
            second_run = asyncio.create_task(second.extractor.process_stale_sessions(uid))
            await wait_entered(model)  # the second extractor holds the claim now
            first_gate.set()
            first_report = await asyncio.wait_for(first_run, 20)
        finally:
            first_gate.set()
            model.release()
        assert second_run is not None
        second_report = await asyncio.wait_for(second_run, 20)
        assert (first_report.failures, first_report.facts_written) == (1, 0)
        assert (second_report.sessions_extracted, second_report.facts_written) == (1, 1)
        assert model.extraction_calls == 2
        assert await first.store.get_extracted_at(sid, uid) is not None
        assert len(await first.store.get_all_facts(uid)) == 1


@pytest.mark.parametrize("pool_size", [2, 3])
async def test_as_many_extractions_as_the_pool_holds_run_without_jamming_it(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel, pool_size: int
) -> None:
    """Each extraction holds its claim's connection while its transactions take others: from
    one pool, ``pool_size`` extractions at once each held one and waited for another until the
    pool's 30 s timeout, and failed. Claims come from the other pool, at most DB_POOL_SIZE at
    once: every extraction goes through, at once."""
    settings = extraction_settings(
        db_url, fake_ollama, db_pool_size=pool_size, db_max_overflow=0, chunk_index_workers=1
    )
    async with open_memory(settings) as memory:
        users = [await new_user(memory) for _ in range(pool_size + 2)]
        sessions = [
            await conversation(memory, uid, f"fact key{n} value{n}") for n, uid in enumerate(users)
        ]
        async with asyncio.timeout(20):  # the pool's timeout is 30 s
            reports = await asyncio.gather(
                *(
                    memory.extractor.extract_session(sid, user_id=uid)
                    for sid, uid in zip(sessions, users, strict=True)
                )
            )
        assert [(r.sessions_extracted, r.failures) for r in reports] == [(1, 0)] * len(users)
        for n, uid in enumerate(users):
            facts = await memory.store.get_all_facts(uid)
            assert [(f.key, f.value) for f in facts] == [(f"key{n}", f"value{n}")]
