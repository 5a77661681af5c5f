"""QueueIndexer.aclose() beside an explicit drain(): only the background drain tells closing
whether it is in a batch, and only it runs the one batch a close grants a kicked drain that
had not begun. The batches are gated fakes (no database): each interleaving is exact."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from navi_memory.errors import StorageError
from navi_memory.jobs import queue_indexer as qi


@contextlib.asynccontextmanager
async def _no_uow(*_: Any, **__: Any) -> AsyncIterator[None]:
    yield None


class _Probe(qi.QueueIndexer):
    events = "probe"
    retry_hint = "none"

    def __init__(self) -> None:
        super().__init__(None, batch_size=1, background=True)  # type: ignore[arg-type]
        self.gates: list[asyncio.Event] = []
        self.started: list[asyncio.Event] = []
        self.full = False
        self.calls = 0

    def gate(self) -> tuple[asyncio.Event, asyncio.Event]:
        started, go = asyncio.Event(), asyncio.Event()
        self.started.append(started)
        self.gates.append(go)
        return started, go

    async def _index_batch(self, session: Any, limit: int) -> tuple[bool, int]:
        started, go = self.started[self.calls], self.gates[self.calls]
        self.calls += 1
        started.set()
        await go.wait()
        return self.full, 1

    async def _queued_count(self, session: Any) -> int:
        return 0


async def test_close_does_not_leave_last_batch_set_for_a_later_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A background batch and an explicit drain() (index_pending_chunks) run at once, the
    explicit one ending first. aclose() must see the background batch in flight: it took the
    drain for one that had not begun, and the grant outlived the close, so a drain() after
    aclose() (the engine disposed) ran a batch."""
    monkeypatch.setattr(qi, "unit_of_work", _no_uow)
    indexer = _Probe()
    bg_started, bg_go = indexer.gate()
    fg_started, fg_go = indexer.gate()
    indexer.kick()
    await bg_started.wait()
    foreground = asyncio.create_task(indexer.drain())
    await fg_started.wait()
    fg_go.set()
    await foreground  # _in_batch is now False, the background batch still in flight
    closing = asyncio.create_task(indexer.aclose())
    await asyncio.sleep(0)
    bg_go.set()
    await asyncio.wait_for(closing, 5)
    assert not indexer.running
    _, after_go = indexer.gate()
    after_go.set()
    before = indexer.batches_run
    with pytest.raises(StorageError, match="this Memory is closed"):
        await indexer.drain()
    assert indexer.batches_run == before


async def test_close_stops_after_the_batch_in_flight_even_beside_a_foreground_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same interleaving, the background batch full: aclose() lets it finish and stops ("stop
    after the batch in flight"); it ran one more batch after it."""
    monkeypatch.setattr(qi, "unit_of_work", _no_uow)
    indexer = _Probe()
    indexer.full = True
    bg_started, bg_go = indexer.gate()
    fg_started, fg_go = indexer.gate()
    extra_started, extra_go = indexer.gate()
    extra_go.set()
    indexer.kick()
    await bg_started.wait()
    foreground = asyncio.create_task(indexer.drain(max_batches=1))
    await fg_started.wait()
    fg_go.set()
    await foreground
    closing = asyncio.create_task(indexer.aclose())
    await asyncio.sleep(0)
    bg_go.set()
    await asyncio.wait_for(closing, 5)
    assert not extra_started.is_set(), "a batch ran after the batch in flight, while closing"


class _Gathering(_Probe):
    gather_seconds = 60.0


async def test_a_kicked_drain_gathering_gets_its_batch_though_a_foreground_drain_is_in_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The promise of aclose(): a background drain that was kicked but had not begun (here: in
    its gather wait) runs one batch, though an explicit drain() is in a batch at that moment
    (its batch counted as the background's, and the kicked drain got none)."""
    monkeypatch.setattr(qi, "unit_of_work", _no_uow)
    indexer = _Gathering()
    indexer.full = True  # more queued than one batch
    fg_started, fg_go = indexer.gate()
    last_started, last_go = indexer.gate()
    last_go.set()
    indexer.kick()
    await asyncio.sleep(0)  # the background drain is in its gather wait
    foreground = asyncio.create_task(indexer.drain(max_batches=1))
    await fg_started.wait()
    closing = asyncio.create_task(indexer.aclose())
    await asyncio.sleep(0)
    fg_go.set()
    await foreground
    await asyncio.wait_for(closing, 5)
    assert last_started.is_set(), "the kicked drain ran no batch"
